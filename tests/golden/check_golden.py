#!/usr/bin/env python3
"""Golden results: a fixed set of configurations covering every strategy, run in all three modes,
whose result JSON must not change unless a change means to change it.

Usage: check_golden.py DLSIM [--update]   (DLSIM_DATA_DIR points at the repository)

sim and analytic: the whole result document (--reproducible) must be byte-identical to
tests/golden/expected/<name>.<mode>.json. real: the host's wall-clock times are not
reproducible, and neither is which rank is the slowest (whose collective rows and kernel counts
the result reports), so the comparison keeps the rest: the configuration echo, model, memory
per rank, and the loss (relative 1e-6: OpenBLAS picks its kernels by CPU, which may
re-associate sums; see tests/real/check_real.py).

--update rewrites the expected files from this build (after a change that means to change
results: say why in the commit).
"""
import json
import os
import subprocess
import sys
import tempfile

DLSIM = os.path.abspath(sys.argv[1])
UPDATE = "--update" in sys.argv[2:]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPECTED = os.path.join(SRC, "tests", "golden", "expected")
# Workload files are named relative to the repository (the runs start there), so the
# configuration echo is the same in every checkout.
REAL = os.path.join("tests", "real")

# name: (options, modes). Small models on the thetagpu platform; two iterations.
CASES = {
    "dp-buckets": (["--workload", "mlp-small", "--gpus", "4", "--bucket-mb", "1"],
                   ["sim", "analytic", "real"]),
    "dp-accumulate": (["--workload", "cnn-small", "--gpus", "2", "--microbatches", "2",
                       "--batch", "16"], ["sim", "analytic"]),
    "dp-kernel-db": (["--workload", "cnn-small", "--gpus", "2", "--batch", "64",
                      "--kernels", "cpu-amd-epyc-2-cores", "--kernels-any-device"], ["sim", "analytic"]),
    "grid": (["--workload", "cnn-small", "--gpus", "4", "--grid", "2x2", "--batch", "16"],
             ["sim", "analytic"]),
    "grid-fc": (["--workload", os.path.join(REAL, "cnn-nobn.json"), "--gpus", "4", "--grid",
                 "2x2", "--grid-layers", "fc", "--batch", "16"], ["sim", "analytic", "real"]),
    "grid-auto": (["--workload", "alexnet-imagenet", "--gpus", "16", "--batch", "512",
                   "--grid", "auto", "--grid-layers", "fc"], ["analytic"]),
    "domain": (["--workload", os.path.join(REAL, "cnn-nobn.json"), "--gpus", "4", "--grid",
                "2x2", "--domain", "conv", "--batch", "16"], ["sim", "analytic", "real"]),
    "megatron": (["--workload", "gpt-tiny", "--gpus", "4", "--tp", "2", "--batch", "8"],
                 ["sim", "analytic"]),
    "megatron-real": (["--workload", os.path.join(REAL, "gpt-tiny-sgd.json"), "--gpus", "4",
                       "--tp", "2", "--batch", "8"], ["real"]),
    "gpipe": (["--workload", "mlp-deep", "--gpus", "4", "--pp", "4", "--microbatches", "4",
               "--batch", "16"], ["sim", "analytic", "real"]),
    "3d-1f1b": (["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                 "--schedule", "1f1b", "--microbatches", "4", "--batch", "16"],
                ["sim", "analytic"]),
    "recompute-fp16": (["--workload", "gpt-tiny", "--gpus", "4", "--tp", "2", "--pp", "2",
                        "--precision", "fp16", "--recompute", "--batch", "8"],
                       ["sim", "analytic"]),
    "interleaved": (["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                     "--schedule", "interleaved", "--virtual-stages", "2", "--microbatches", "4",
                     "--batch", "16"], ["sim", "analytic"]),
    "zero-1-pp": (["--workload", "gpt-tiny", "--gpus", "8", "--pp", "2", "--schedule", "1f1b",
                   "--microbatches", "4", "--batch", "16", "--zero", "1"], ["sim", "analytic"]),
    "zero-3": (["--workload", "gpt-tiny", "--gpus", "4", "--batch", "8", "--zero", "3"],
               ["sim", "analytic"]),
    "fsdp-hybrid-tp": (["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--fsdp", "hybrid",
                        "--fsdp-shard-size", "2", "--microbatches", "2", "--batch", "16"],
                       ["sim", "analytic"]),
    "moe-ep": (["--workload", "moe-gpt-8x", "--gpus", "8", "--ep", "4", "--batch", "8",
                "--routing", "zipf:1.2"], ["sim", "analytic"]),
    "moe-ep-real": (["--workload", os.path.join(REAL, "moe-tiny.json"), "--gpus", "2",
                     "--ep", "2", "--batch", "8"], ["real"]),
    "moe-tp": (["--workload", "moe-gpt-8x", "--gpus", "8", "--ep", "2", "--tp", "2",
                "--batch", "8"], ["sim", "analytic"]),
}

TIME_KEYS = {"time_s", "iteration_time_s", "compute_s", "comm_s", "wall_s", "slowest_rank",
             "gemm_kernel_s"}
SLOWEST_RANK_KEYS = {"breakdown_s", "compute_by_phase_s", "throughput_samples_per_s",
                     "epoch_time_s", "achieved_flops_per_gpu", "loss", "collectives",
                     "comm_bytes_per_gpu", "kernel_db"}


def strip_times(x):
    """The real-mode document without host-time figures (kept: the loss, compared apart)."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in TIME_KEYS or k in SLOWEST_RANK_KEYS:
                continue
            out[k] = strip_times(v)
        return out
    if isinstance(x, list):
        return [strip_times(v) for v in x]
    return x


def run(opts, mode, out):
    cmd = [DLSIM, "run", *opts, "--platform", "thetagpu", "--mode", mode, "--iters", "2",
           "--reproducible", "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=SRC)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))


def main():
    failures = 0
    os.makedirs(EXPECTED, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for name, (opts, modes) in CASES.items():
            for mode in modes:
                tag = "%s.%s" % (name, mode)
                want_path = os.path.join(EXPECTED, tag + ".json")
                got_path = os.path.join(d, tag + ".json")
                try:
                    run(opts, mode, got_path)
                except RuntimeError as e:
                    print("FAIL %s: %s" % (tag, e))
                    failures += 1
                    continue
                with open(got_path) as f:
                    got_text = f.read()
                if UPDATE:
                    with open(want_path, "w") as f:
                        f.write(got_text)
                    print("updated %s" % tag)
                    continue
                if not os.path.exists(want_path):
                    print("FAIL %s: no expected file %s (run with --update)" % (tag, want_path))
                    failures += 1
                    continue
                with open(want_path) as f:
                    want_text = f.read()
                if mode != "real":
                    ok = got_text == want_text
                    if not ok:
                        # name the first differing key path, for the reader
                        diff = first_diff(json.loads(want_text), json.loads(got_text), "")
                        print("FAIL %s: differs from %s at %s" % (tag, want_path, diff))
                    else:
                        print("ok   %s: byte-identical" % tag)
                else:
                    want, got = json.loads(want_text), json.loads(got_text)
                    ok = strip_times(want) == strip_times(got)
                    lw, lg = want.get("loss", []), got.get("loss", [])
                    ok_loss = len(lw) == len(lg) and all(
                        abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(lw, lg))
                    if not ok:
                        print("FAIL %s: differs from %s at %s" % (
                            tag, want_path, first_diff(strip_times(want), strip_times(got), "")))
                    elif not ok_loss:
                        print("FAIL %s: loss %s, expected %s" % (tag, lg, lw))
                    else:
                        print("ok   %s: equal but for host times, loss within 1e-6" % tag)
                    ok = ok and ok_loss
                failures += not ok
    print("PASSED: %d failure(s)" % failures if failures == 0 else "FAILED: %d failure(s)" % failures)
    return 1 if failures else 0


def first_diff(a, b, path):
    if type(a) != type(b):
        return path or "."
    if isinstance(a, dict):
        for k in list(a.keys()) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return "%s.%s" % (path, k)
            d = first_diff(a[k], b[k], "%s.%s" % (path, k))
            if d:
                return d
        if list(a.keys()) != list(b.keys()):
            return path + " (key order)"
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s (length %d, expected %d)" % (path, len(b), len(a))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if a == b else "%s (%r, expected %r)" % (path, b, a)


if __name__ == "__main__":
    sys.exit(main())
