#!/usr/bin/python3
"""--autocast (PyTorch's automatic mixed precision) on hand-worked cases.

With a database without entries (every kernel on the A100's roofline: bytes / (1555 GB/s x
0.8) + 4 us for a cast), each linear or convolution with weights gains a cast of its fp32
weights to 16 bits before its forward and one of their gradient back after its backward, each
reading 4 and writing 2 bytes a parameter (a tied output layer casts the embedding table it
shares); and the optimizer no longer writes a 16-bit model copy (4 bytes a parameter less, the
step being bandwidth-bound). For gpt-tiny (Adam) and cnn-small (SGD) on one GPU in bf16 the
iteration changes by exactly that, worked out here from `dlsim workload --json`, in the closed
form and in simulation; with --recompute the forward's casts come twice. --autocast is refused
with fp32, with ZeRO/FSDP and in --mode real, one line and exit status 2.
Usage: check_autocast.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, run

BW = 1555e9 * 0.8  # A100-40GB, 80 % of the datasheet bandwidth (sim/core/gpuspec.c)
LAUNCH = 4e-6


def expected_delta(model, recompute):
    names = {l["name"]: l for l in model["layers"]}
    casts = 0.0
    for l in model["layers"]:
        if l["kind"] not in ("linear", "conv2d"):
            continue
        w = l["params"] or (names[l["tied_to"]]["params"] if l.get("tied_to") else 0)
        if w:
            casts += (3 if recompute else 2) * (6.0 * w / BW + LAUNCH)
    return casts - 4.0 * model["params"] / BW  # the optimizer writes no 16-bit copy


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "empty.json")
        with open(db, "w") as f:
            json.dump({"format": "dlsim-kdb-1", "provenance": {"device": "a100-40gb"},
                       "entries": []}, f)
        for wl, extra in (("gpt-tiny", []), ("cnn-small", []), ("gpt-tiny", ["--recompute"])):
            model = json.loads(subprocess.run([dlsim, "workload", wl, "--json"], check=True,
                                              capture_output=True, text=True).stdout)
            want = expected_delta(model, bool(extra))
            base = ["--workload", wl, "--gpus", "1", "--batch", "8", "--precision", "bf16",
                    "--platform", "thetagpu", "--kernels", db] + extra
            for mode in ("analytic", "sim"):
                a = run(dlsim, d, "--mode", mode, *base)["iteration_time_s"]
                r = run(dlsim, d, "--mode", mode, *base, "--autocast")
                got = r["iteration_time_s"] - a
                tol = 1e-12 if mode == "analytic" else 1e-9
                check(f"{wl} {' '.join(extra)} {mode}: --autocast adds the casts and drops the "
                      f"16-bit copy ({want * 1e6:+.4f} us)", abs(got - want) <= tol and
                      r["config"]["autocast"] is True, f"{got * 1e6:+.6f} us")
        for args, what in ((["--precision", "fp32"], "--precision"),
                           (["--precision", "bf16", "--gpus", "2", "--zero", "1"], "--zero 1"),
                           (["--precision", "bf16", "--mode", "real"], "--mode real")):
            cmd = [dlsim, "run", "--workload", "mlp-small", "--autocast", "--platform",
                   "thetagpu"] + args
            if "--gpus" not in args:
                cmd += ["--gpus", "1"]
            if "--mode" not in args:
                cmd += ["--mode", "analytic"]
            refused(dlsim, cmd[1:], "--autocast")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
