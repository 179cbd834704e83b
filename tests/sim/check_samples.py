#!/usr/bin/python3
"""Kernel-time draws (--samples N) against what they must be.

GPT-1.7B with tp 4 on two DGX H100 nodes, bf16, PyTorch's kernels measured on an H100 (each
entry keeps the standard deviation of its repeats). With a copy of that database whose spread is
zero, every draw is the median run: the percentiles are one number, the iteration time, in both
modes. With the measured spread the draws differ, p5 <= p50 <= p95, and a kernel's draw has
median 1, so the median draw stays within a few per cent of the median run (synchronous
collectives wait for the slowest rank's draws, which moves it up); the simulation's median draw
is within 2 % of the closed form's. The same seed gives byte-identical results, another seed
other draws. Bad counts, --grid auto, --mode real and export are refused with one line and exit
status 2.

--net-jitter 0 changes nothing, and without --samples it is refused (its hand-computed case is in
tests/chakra/check_fixtures.py).
Usage: check_samples.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, refused_outside_runs, run

SRC = os.environ.get("DLSIM_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = ["--workload", "gpt-1.7b", "--platform", "dgx-h100:2", "--gpus", "16", "--tp", "4",
        "--batch", "16", "--precision", "bf16", "--iters", "2", "--reproducible"]


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        db = json.load(open(os.path.join(SRC, "kernels", "db", "h100-sxm-pytorch.json")))
        for e in db["entries"]:
            e["stddev_s"] = 0
        flat = os.path.join(d, "flat.json")
        json.dump(db, open(flat, "w"))
        for m in ("analytic", "sim"):
            r = run(dlsim, d, "--mode", m, *BASE, "--kernels", flat, "--samples", "3")
            s = r["iteration_time_samples_s"]
            t = r["iteration_time_s"]
            check(f"{m}: zero spread: a zero-width interval at the iteration time",
                  s["samples"] == 3 and s["p5"] == s["p95"] and abs(s["p50"] / t - 1) < 1e-12,
                  f"{s} vs {t}")
        pt = ["--kernels", "h100-sxm-pytorch"]
        a = run(dlsim, d, "--mode", "analytic", *BASE, *pt, "--samples", "20")
        s, t = a["iteration_time_samples_s"], a["iteration_time_s"]
        check("measured spread: the draws differ, in order",
              s["min"] < s["p5"] <= s["p50"] <= s["p95"] < s["max"], str(s))
        check("the median draw near the median run", abs(s["p50"] / t - 1) < 0.1,
              f"{s['p50']} vs {t} s")
        check("config echo carries the count", a["config"]["samples"] == 20)
        out = os.path.join(d, "x.json")
        texts = []
        for seed in ("1", "1", "2"):
            subprocess.run([dlsim, "run", "--mode", "analytic", *BASE, *pt, "--samples", "20",
                            "--seed", seed, "--out", out], check=True, capture_output=True)
            texts.append(open(out, "rb").read())
        check("the same seed gives byte-identical results", texts[0] == texts[1])
        check("another seed draws other times",
              json.loads(texts[2])["iteration_time_samples_s"] != s)
        sm = run(dlsim, d, "--mode", "sim", *BASE, *pt, "--samples", "5")
        an = run(dlsim, d, "--mode", "analytic", *BASE, *pt, "--samples", "5")
        x, y = sm["iteration_time_samples_s"]["p50"], an["iteration_time_samples_s"]["p50"]
        check("simulation's median draw within 2 % of the closed form's", abs(x / y - 1) < 0.02,
              f"{x} vs {y} s")
        # network jitter
        star = json.load(open(os.path.join(SRC, "kernels", "db", "a100-40gb.json")))
        for e in star["entries"]:
            e["stddev_s"] = 0
        flat_a100 = os.path.join(d, "flat-a100.json")
        json.dump(star, open(flat_a100, "w"))
        dp = ["--workload", "mlp-small", "--platform", "star", "--gpus", "4", "--batch", "64",
              "--bucket-mb", "1000", "--iters", "2", "--reproducible", "--kernels", flat_a100]
        base = run(dlsim, d, "--mode", "analytic", *dp)["iteration_time_s"]
        zero = run(dlsim, d, "--mode", "analytic", *dp, "--samples", "3", "--net-jitter", "0")
        check("--net-jitter 0: every draw is the run", zero["iteration_time_samples_s"]["p5"] ==
              zero["iteration_time_samples_s"]["p95"] == base)
        never = os.path.join(d, "never.json")
        for bad in (["--net-jitter", "5us"], ["--samples", "2", "--net-jitter", "2s"],
                    ["--samples", "2", "--net-jitter", "x"]):
            refused(dlsim, ["run", "--mode", "analytic", *dp, *bad, "--out", never],
                    "--net-jitter")
        for n in ("-1", "10001", "x"):
            refused(dlsim, ["run", "--mode", "analytic", *BASE, "--samples", n, "--out", never],
                    "--samples")
        refused(dlsim, ["run", "--mode", "analytic", "--workload", "cnn-small", "--platform",
                        "star", "--gpus", "4", "--grid", "auto", "--samples", "2", "--out",
                        never], "--samples")
        refused_outside_runs(dlsim, d, ["--samples", "2"])
        check("nothing written", not os.path.exists(never))
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
