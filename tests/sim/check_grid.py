#!/usr/bin/python3
"""Gholami et al.'s grid: simulation against the closed form on a contention-free platform.

On platforms/star.xml (every GPU on one switch by its own split-duplex link) a ring collective
puts one flow on each link direction, so SMPI has nothing to add to the alpha-beta closed form:
for the grids 1x4, 2x2 and 4x1 (and with --grid-layers fc, and with --domain conv) on mlp-small
and cnn-small, the simulated iteration is within 2% of the closed form's. Also the closed form's
--grid auto picks the grid with the smallest iteration time of its own table.
Usage: check_grid.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, run



def run_star(dlsim, d, *args):
    return run(dlsim, d, "--platform", "star", "--coll", "ring", "--gpus", "4", *args)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        cases = []
        for w in ("mlp-small", "cnn-small"):
            for g in ("1x4", "2x2", "4x1"):
                cases.append((w, ["--grid", g, "--batch", "64"]))
        cases.append(("cnn-small", ["--grid", "2x2", "--grid-layers", "fc", "--batch", "64"]))
        cases.append(("cnn-small", ["--grid", "4x1", "--domain", "conv", "--batch", "64"]))
        cases.append(("cnn-small", ["--grid", "2x2", "--domain", "conv", "--batch", "64"]))
        for w, args in cases:
            a = run_star(dlsim, d, "--mode", "analytic", "--workload", w, *args)
            s = run_star(dlsim, d, "--mode", "sim", "--workload", w, *args)
            ta, ts = a["iteration_time_s"], s["iteration_time_s"]
            check(f"{w} {' '.join(args)}: simulation within 2% of the closed form",
                  abs(ts / ta - 1) <= 0.02, f"sim {ts * 1e6:.2f} us, closed form {ta * 1e6:.2f} us")
        r = run_star(dlsim, d, "--mode", "analytic", "--workload", "mlp-small", "--grid", "auto",
                "--batch", "64")
        best = min(r["grid_search"], key=lambda x: x["iteration_time_s"])
        check("--grid auto picks the fastest grid of its table", r["config"]["grid"] == best["grid"],
              f"{r['config']['grid']} vs {best['grid']}")
        check("--grid auto evaluates every factorisation of 4",
              sorted(x["grid"] for x in r["grid_search"]) == ["1x4", "2x2", "4x1"],
              str([x["grid"] for x in r["grid_search"]]))
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
