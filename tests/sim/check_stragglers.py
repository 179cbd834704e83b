#!/usr/bin/python3
"""Stragglers (--slow-gpus) against hand computations, in closed form and in simulation.

mlp-small on 4 GPUs of the star platform (every GPU its own link: no contention), data parallel
with one gradient bucket (--bucket-mb 1000), so each rank computes its whole backward, then all
ranks all-reduce together, then each steps. Rank 2 at F = 1.5 runs every kernel 1.5 times as
long: the all-reduce waits for it and its step ends last, so the iteration grows by exactly
(F - 1) x its kernel time, in both modes, and the simulation stays within 1e-6 of the closed
form. The same slowdown on every rank keeps the closed form's replicas alike: it still folds
them (and gives the same time as evaluating every rank); one slow rank stops the folding. A
random share of ranks is drawn by --seed: the same seed, the same ranks. Bad specs, a rank past
--gpus and --mode real are refused with one line and exit status 2.
Usage: check_stragglers.py DLSIM
"""
import os
import sys
import tempfile

from checklib import check, finish, refused, run

BASE = ["--workload", "mlp-small", "--platform", "star", "--gpus", "4", "--batch", "64",
        "--bucket-mb", "1000", "--iters", "2", "--reproducible"]


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        base = {m: run(dlsim, d, "--mode", m, *BASE) for m in ("analytic", "sim")}
        slow = {m: run(dlsim, d, "--mode", m, *BASE, "--slow-gpus", "2:1.5")
                for m in ("analytic", "sim")}
        for m in ("analytic", "sim"):
            k = base[m]["ranks"][2]["compute_s"]
            want = base[m]["iteration_time_s"] + 0.5 * k
            got = slow[m]["iteration_time_s"]
            check(f"{m}: one rank 1.5x slower delays the iteration by 0.5 x its kernel time",
                  abs(got / want - 1) < 1e-9, f"{got:.9g} s vs {want:.9g} s")
            c = [r["compute_s"] for r in slow[m]["ranks"]]
            check(f"{m}: only rank 2's kernels are slower",
                  abs(c[2] / base[m]["ranks"][2]["compute_s"] - 1.5) < 1e-9 and
                  all(abs(c[i] / base[m]["ranks"][i]["compute_s"] - 1) < 1e-9 for i in (0, 1, 3)))
        a, s = slow["analytic"]["iteration_time_s"], slow["sim"]["iteration_time_s"]
        check("simulation = closed form with a straggler", abs(s / a - 1) < 1e-6, f"{s} vs {a}")
        check("config echo carries the spec", slow["sim"]["config"].get("slow_gpus") == "2:1.5")
        # folding: one slow rank stops it, all alike keep it
        check("one slow rank: every rank evaluated", slow["analytic"]["simulation"]["folded"] == 1)
        alike = run(dlsim, d, "--mode", "analytic", *BASE, "--slow-gpus", "random:1:1.5")
        every = run(dlsim, d, "--mode", "analytic", *BASE, "--slow-gpus", "random:1:1.5",
                    "--no-folding")
        check("every rank alike: still folded", alike["simulation"]["folded"] == 4 and
              base["analytic"]["simulation"]["folded"] == 4)
        check("folded = every rank evaluated",
              alike["iteration_time_s"] == every["iteration_time_s"])
        want = base["analytic"]["iteration_time_s"] + 0.5 * base["analytic"]["breakdown_s"]["compute"]
        check("every rank 1.5x: the iteration grows by half its kernel time",
              abs(alike["iteration_time_s"] / want - 1) < 1e-9)
        # a random share, drawn by the seed
        r8 = ["--mode", "analytic", "--workload", "mlp-small", "--platform", "star", "--gpus", "8",
              "--batch", "64", "--reproducible", "--slow-gpus", "random:0.25:2"]
        x = run(dlsim, d, *r8)
        y = run(dlsim, d, *r8)
        b8 = run(dlsim, d, *r8[:-2])
        slowed = [r["rank"] for r, q in zip(x["ranks"], b8["ranks"])
                  if abs(r["compute_s"] / q["compute_s"] - 2) < 1e-9]
        check("random:0.25:2 on 8 GPUs: two ranks twice as slow", len(slowed) == 2, str(slowed))
        check("the same seed draws the same ranks", x == y)
        # refusals
        never = os.path.join(d, "never.json")
        for spec in ("9:1.5", "2:0", "2", "random:0:2", "random:0.5", "x:2", "2:1e9", "0x1:2"):
            refused(dlsim, ["run", "--mode", "analytic", *BASE, "--slow-gpus", spec, "--out",
                            never], "--slow-gpus")
        refused(dlsim, ["run", "--mode", "real", "--workload", "mlp-small", "--gpus", "2",
                        "--batch", "8", "--slow-gpus", "1:2", "--out", never], "--slow-gpus")
        check("nothing written", not os.path.exists(never))
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
