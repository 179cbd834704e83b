#!/usr/bin/python3
"""Prediction intervals (iteration_time_interval_s) against their definition.

- The validation cases shipped beside PyTorch's H100 and H200 databases
  (kernels/validation/NAME.json) hold today's predictions: tests/validation/predict_gpu.py
  --cases makes the same predicted times again from the same real runs.
- GPT-1.7B with tp 4 on two DGX H100 nodes, bf16, PyTorch's H100 kernels: the interval is the
  5th, 50th and 95th percentiles (linear between order statistics) of the iteration time times
  each case's real / predicted, computed here from the file; with --samples, of every draw
  times every case's ratio. Its leave-one-out coverage is the share of cases whose ratio lies
  within the others' 5th to 95th percentile, as `dlsim validate --intervals` prints.
- A database without cases (dlsim's own H100 kernels) gives no interval, or with --samples the
  draws' own percentiles, saying the model's error is not in them; a malformed cases file
  is refused with one line naming it and the JSON path, exit status 2.
Usage: check_intervals.py DLSIM
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(REPO, "tests", "validation", "data")
BASE = ["--workload", "gpt-1.7b", "--platform", "dgx-h100:2", "--gpus", "16", "--tp", "4",
        "--batch", "16", "--precision", "bf16", "--iters", "2", "--reproducible"]
SOURCES = {"h100-sxm-pytorch": ["h100-iter.json", "h100-llama-iter.json"],
           "h200-pytorch": ["h200-iter.json", "h200-iter-2.json", "h200-llama-iter.json"]}


def pct(x, p):
    s = sorted(x)
    h = (len(s) - 1) * p / 100
    i = math.floor(h)
    return s[i] + (h - i) * (s[i + 1] - s[i]) if i + 1 < len(s) else s[-1]


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        for name, files in SOURCES.items():
            out = os.path.join(d, name + ".json")
            p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "validation",
                                                             "predict_gpu.py"),
                                *[os.path.join(DATA, f) for f in files], "--db",
                                f"pytorch={os.path.join(REPO, 'kernels', 'db', name + '.json')}",
                                "--dlsim", dlsim, "--cases", out], capture_output=True, text=True)
            shipped = json.load(open(os.path.join(REPO, "kernels", "validation", name + ".json")))
            ok = p.returncode == 0 and [
                (c["case"], c["real_s"]) for c in json.load(open(out))["cases"]] == [
                (c["case"], c["real_s"]) for c in shipped["cases"]] and all(
                abs(a["predicted_s"] / b["predicted_s"] - 1) < 1e-9
                for a, b in zip(json.load(open(out))["cases"], shipped["cases"]))
            check(f"{name}: the shipped cases hold today's predictions", ok, p.stderr[-300:])
        cases = json.load(open(os.path.join(REPO, "kernels", "validation",
                                            "h100-sxm-pytorch.json")))["cases"]
        ratio = [c["real_s"] / c["predicted_s"] for c in cases]
        r = run(dlsim, d, "--mode", "analytic", *BASE, "--kernels", "h100-sxm-pytorch")
        iv, t = r["iteration_time_interval_s"], r["iteration_time_s"]
        x = [t * q for q in ratio]
        want = {k: pct(x, p) for k, p in (("p5", 5), ("p50", 50), ("p95", 95))}
        check("the interval: percentiles of the time times each case's ratio",
              all(abs(iv[k] / want[k] - 1) < 1e-12 for k in want), f"{iv} vs {want}")
        e = [math.log(q) for q in ratio]
        cov = sum(pct(e[:i] + e[i + 1:], 5) <= e[i] <= pct(e[:i] + e[i + 1:], 95)
                  for i in range(len(e)))
        check("leave-one-out coverage as defined", iv["validation_cases"] == len(cases) and
              abs(iv["leave_one_out_coverage"] - cov / len(cases)) < 1e-12 and
              iv["coverage"] == 0.9 and iv["kernel_draws"] == 0, str(iv))
        p = subprocess.run([dlsim, "validate", "--intervals", "--kernels", "h100-sxm-pytorch"],
                           capture_output=True, text=True)
        check("dlsim validate --intervals prints the coverage", p.returncode == 0 and
              f"leave-one-out coverage: {cov} of {len(cases)}" in p.stdout, p.stdout[-200:])
        s = run(dlsim, d, "--mode", "analytic", *BASE, "--kernels", "h100-sxm-pytorch",
                "--samples", "4")
        draws = s["iteration_time_samples_s"]
        ivs = s["iteration_time_interval_s"]
        check("with draws: the interval spans them times the ratios",
              ivs["kernel_draws"] == 4 and ivs["p5"] <= draws["min"] * max(ratio) and
              ivs["p95"] >= draws["min"] * min(ratio) and ivs["p5"] < ivs["p50"] < ivs["p95"])
        r = run(dlsim, d, "--mode", "analytic", *BASE, "--kernels", "h100-sxm")
        check("a database without cases: no interval", "iteration_time_interval_s" not in r)
        r = run(dlsim, d, "--mode", "analytic", *BASE, "--kernels", "h100-sxm", "--samples", "5")
        iv, dr = r["iteration_time_interval_s"], r["iteration_time_samples_s"]
        check("without cases, with draws: the draws' percentiles, no model error",
              iv["validation_cases"] == 0 and iv["validation"] is None and
              iv["leave_one_out_coverage"] is None and iv["p5"] == dr["p5"] and
              iv["p95"] == dr["p95"], str(iv))
        # a malformed cases file beside a database
        os.makedirs(os.path.join(d, "db"))
        os.makedirs(os.path.join(d, "validation"))
        shutil.copy(os.path.join(REPO, "kernels", "db", "h100-sxm-pytorch.json"),
                    os.path.join(d, "db", "x.json"))
        bad = {"format": "dlsim-validation-1", "kernels": "x",
               "cases": [{"real_s": 1, "predicted_s": 1}, {"real_s": -1, "predicted_s": 1}]}
        json.dump(bad, open(os.path.join(d, "validation", "x.json"), "w"))
        never = os.path.join(d, "never.json")
        refused(dlsim, ["run", "--mode", "analytic", *BASE, "--kernels",
                        os.path.join(d, "db", "x.json"), "--out", never], "cases[1].real_s",
                os.path.join("validation", "x.json"))
        check("nothing written", not os.path.exists(never))
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
