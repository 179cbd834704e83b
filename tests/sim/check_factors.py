#!/usr/bin/python3
"""SimGrid's per-message factors (smpi/bw-factor, smpi/lat-factor in a platform's <config>) in
the closed form as in the simulation.

On the star platform (every route two 1 us links of 25 GB/s, no contention) with a constant
factor (bandwidth x0.5, latency x3) and a piecewise one (bandwidth 1 / 0.5 above 64 KiB / 0.8
above 1 MiB, latency 2 / 4 above 64 KiB), a DDP iteration with ring all-reduces (steps of n/P
bytes each) and a GPipe pipeline (48 KiB activation messages) take the same time in closed form
and in simulation within 0.1 %, and the factors change that time (the test would not test
them otherwise). Message sizes avoid a threshold itself: SimGrid 3.32 gives a message of exactly
a threshold's size the next piece in simulation, although its get_bandwidth_factor compares
size <= threshold; dlsim's closed form takes the comparison as written.
Usage: check_factors.py DLSIM
"""
import os
import sys
import tempfile

from checklib import check, finish, run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def platform(d, name, bw, lat):
    with open(os.path.join(REPO, "platforms", "star.xml")) as f:
        text = f.read()
    text = text.replace('smpi/bw-factor" value="0:1"', f'smpi/bw-factor" value="{bw}"')
    text = text.replace('smpi/lat-factor" value="0:1"', f'smpi/lat-factor" value="{lat}"')
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        plats = {"factors 1": os.path.join(REPO, "platforms", "star.xml"),
                 "constant": platform(d, "const.xml", "0:0.5", "0:3"),
                 "piecewise": platform(d, "piece.xml", "0:1;65536:0.5;1048576:0.8",
                                       "0:2;65536:4")}
        cases = {"DDP ring": ["--workload", "resnet18-cifar100", "--gpus", "8", "--coll", "ring"],
                 "GPipe": ["--workload", "mlp-deep", "--gpus", "4", "--pp", "4",
                           "--microbatches", "4", "--batch", "48"]}
        for case, opts in cases.items():
            opts = opts + ["--kernels", "roofline"]  # fixed compute: the factors' share shows
            base = None
            for pname, plat in plats.items():
                a = run(dlsim, d, "--platform", plat, "--mode", "analytic", *opts)
                s = run(dlsim, d, "--platform", plat, "--iters", "2", *opts)
                ta, ts = a["iteration_time_s"], s["iteration_time_s"]
                check(f"{case}, {pname}: closed form {ta * 1e6:.3f} us, simulation "
                      f"{ts * 1e6:.3f} us", abs(ta - ts) <= 1e-3 * ts)
                if base is None:
                    base = ta
                else:
                    check(f"{case}, {pname}: the factors change the time",
                          ta - base > 1e-2 * base, f"{ta * 1e6:.3f} us vs {base * 1e6:.3f} us")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
