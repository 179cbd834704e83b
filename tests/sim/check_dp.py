#!/usr/bin/python3
"""Data-parallel overlap against hand-computed alpha-beta times, in simulation and closed form.

Platform: platforms/star.xml, every GPU on one switch by its own 25 GB/s, 1 us split-duplex link,
so a route between two GPUs is alpha = 2 us, beta = 25e9 B/s, without contention for a ring.
A ring all-reduce of n bytes over P ranks takes 2(P-1)(alpha + n/(P beta)).

1. One bucket that cannot overlap: tests/sim/mlp-tiny.json has 536,616 bytes of gradients, under
   DDP's 1 MiB first bucket, so the only all-reduce starts after the last backward kernel:
   iteration = compute + allreduce(536,616 B), exactly in closed form, within 0.1% in SMPI.
2. Many buckets (mlp-deep, 1 MiB buckets = one 1024x1024 layer, 4,198,400 B, each): the
   all-reduces run while backward continues, so the iteration lies between
   forward + max(backward, sum of all-reduces) + optimizer and forward + max(backward + one
   bucket's all-reduce (the last bucket can never hide), the first bucket's backward + every
   all-reduce one after another) + optimizer, for a communication-bound and a compute-bound
   batch; when the first bucket is ready comes from the simulated timeline (--trace).
Usage: check_dp.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

ALPHA, BETA = 2e-6, 25e9


def ring_allreduce(n, P):
    return 2 * (P - 1) * (ALPHA + n / (P * BETA))


def run(dlsim, mode, *args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [dlsim, "run", "--mode", mode, "--platform", "star", "--coll", "ring",
               "--nccl-proto", "off",  # alpha-beta by hand: no NCCL protocol model
               "--out", out, *args]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


failures = 0


def first_bucket_s(dlsim, P, batch):
    """Seconds from the end of the forward to the start of the first gradient all-reduce, on
    rank 0 in the second iteration of the simulated timeline (--trace)."""
    with tempfile.TemporaryDirectory() as d:
        tr = os.path.join(d, "t.json")
        run(dlsim, "sim", "--workload", "mlp-deep", "--gpus", str(P), "--batch", str(batch),
            "--bucket-mb", "1", "--trace", tr)
        with open(tr) as f:
            t = json.load(f)
    ev = [e for e in (t["traceEvents"] if isinstance(t, dict) else t) if e.get("ph") == "X" and
          e.get("pid") == 0 and e.get("args", {}).get("iter") == 1]
    fwd_end = max(e["ts"] + e["dur"] for e in ev if e.get("cat") == "forward")
    ar = min(e["ts"] for e in ev if e.get("args", {}).get("purpose") == "grad_sync")
    return (ar - fwd_end) * 1e-6


def check(what, got, lo, hi, unit="us"):
    global failures
    ok = lo <= got <= hi
    k = 1e6 if unit == "us" else 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {got * k:.3f} {unit}, expected "
          f"[{lo * k:.3f}, {hi * k:.3f}] {unit}")
    failures += not ok


def main(dlsim):
    here = os.path.dirname(os.path.abspath(__file__))
    tiny = os.path.join(here, "mlp-tiny.json")
    for mode in ("sim", "analytic"):
        P = 4
        r = run(dlsim, mode, "--workload", tiny, "--gpus", str(P), "--batch", "256")
        ar = ring_allreduce(536616, P)
        colls = r["collectives"]
        check(f"{mode}: one bucket", colls[0]["bytes"], 536616, 536616, "B")
        # SMPI advances time in steps of 1 ns; the closed form is exact
        tol = 1e-3 if mode == "sim" else 1e-9
        expect = r["breakdown_s"]["compute"] + ar
        check(f"{mode}: one bucket, iteration = compute + allreduce", r["iteration_time_s"],
              expect * (1 - tol), expect * (1 + tol))
        check(f"{mode}: one bucket, exposed communication = allreduce",
              r["breakdown_s"]["exposed_comm"], ar * (1 - tol), ar * (1 + tol))
        for batch in (64, 16384):
            r = run(dlsim, mode, "--workload", "mlp-deep", "--gpus", str(P), "--batch", str(batch),
                    "--bucket-mb", "1")
            ph = r["compute_by_phase_s"]
            total_ar = sum(c["time_s"] for c in r["collectives"])
            lo = ph["forward"] + max(ph["backward"], total_ar) + ph["optimizer"]
            # the all-reduces run one after another from when the first bucket is ready: at
            # most the backward plus the last bucket, or the first bucket's backward plus all
            first = first_bucket_s(dlsim, P, batch)
            hi = ph["forward"] + max(ph["backward"] + ring_allreduce(4198400, P),
                                     first + total_ar) + ph["optimizer"] + 2e-9  # trace: 1 ns
            check(f"{mode}: buckets, batch {batch}: iteration between fwd + max(bwd "
                  f"{ph['backward'] * 1e6:.1f} us, allreduce {total_ar * 1e6:.1f} us) + opt and "
                  f"the chain from the first bucket ({first * 1e6:.1f} us into backward)",
                  r["iteration_time_s"], lo * (1 - tol), hi * (1 + tol))
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
