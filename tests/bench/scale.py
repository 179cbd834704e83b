#!/usr/bin/python3
"""Scale benchmark of the SMPI executor: how many simulated GPUs per second of wall time, and how
much real memory per simulated rank. Not part of ctest (minutes, and machine-dependent figures).

Default: ResNet-50 data parallel on 1,024 GPUs (128 DGX A100 nodes with ThetaGPU's node and
network), 32 samples per GPU, 2 iterations. Real memory is the peak of the simulator process's
anonymous memory (heap and stacks, /proc/PID/status "RssAnon", polled every 2 s): SMPI_SHARED_MALLOC
buffers map one small file many times, so RSS counts the same pages once per mapping and says
nothing (SimGrid maps every shared block many times).

Usage: tests/bench/scale.py [--dlsim build/dlsim] [--gpus 1024] [--workload resnet50-imagenet]
                            [--per-gpu-batch 32] [--iters 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def anon_kib(pid):
    # RssAnon from /proc/PID/status: cheap to read (smaps_rollup walks every mapping, and the
    # shared-malloc mappings make that slow enough to slow the simulation down)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    out = []
    try:
        for c in open(f"/proc/{pid}/task/{pid}/children").read().split():
            out += [int(c)] + children(int(c))
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlsim", default="build/dlsim")
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--workload", default="resnet50-imagenet")
    ap.add_argument("--per-gpu-batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        plat = os.path.join(d, "platform.xml")
        nodes = (a.gpus + 7) // 8
        subprocess.run([a.dlsim, "platform", "--preset", "thetagpu", "--nodes", str(nodes),
                        "--out", plat], check=True)
        cmd = [a.dlsim, "run", "--workload", a.workload, "--platform", plat, "--gpus",
               str(a.gpus), "--batch", str(a.per_gpu_batch * a.gpus), "--iters", str(a.iters),
               "--out", os.path.join(d, "r.json")]
        print("running:", " ".join(cmd), file=sys.stderr)
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        peak = 0
        while p.poll() is None:
            peak = max(peak, sum(anon_kib(c) for c in [p.pid] + children(p.pid)))
            time.sleep(2)
        wall = time.monotonic() - t0
        out = p.stdout.read()
        if p.returncode:
            sys.exit(f"scale benchmark: dlsim exited with {p.returncode}")
    print(out, end="")
    print(f"ranks                         {a.gpus}")
    print(f"wall time                     {wall:.1f} s for {a.iters} iterations")
    print(f"simulated GPUs per wall s     {a.gpus / wall:.2f} (GPU-iterations per wall s "
          f"{a.gpus * a.iters / wall:.2f})")
    print(f"peak real memory              {peak / 1024:.0f} MiB (anonymous)")
    print(f"bytes per simulated rank      {peak * 1024 / a.gpus:.0f}")


if __name__ == "__main__":
    main()
