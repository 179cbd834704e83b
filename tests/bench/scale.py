#!/usr/bin/python3
"""Scale benchmark: wall time and real memory of a run against the GPUs it simulates. Not part of
ctest (minutes, and machine-dependent figures): it prints a table for the README.

Each row runs `dlsim run` once (one iteration) on a ThetaGPU-like cluster of as many DGX A100
nodes as the GPUs need (the Llama rows on DGX H100 nodes), and reports:
  wall (s)        host time of the whole command (the closed form's pre-run included);
  RssAnon (GiB)   peak anonymous memory of dlsim and its children (heap and stacks, from
                  /proc/PID/status, polled every 0.5 s): SMPI_SHARED_MALLOC buffers map one file
                  many times, so RSS counts the same pages once per mapping and says nothing;
  iteration (s)   simulated (or closed-form) time of one training iteration;
  evaluated       ranks the run evaluated, and how many each stands for (the closed form folds
                  equivalent data-parallel replicas; the simulation runs every rank), and in the
                  simulation "ch 1/8" when channel 0 of each all-reduce's 8 stood for all
                  (simulation.folded_channels) and "rail 1/8" when GPU 0's data-parallel groups
                  stood for the node's 8 rails (simulation.folded_rails); --no-folding runs
                  every channel and group.

Usage: tests/bench/scale.py [--dlsim build/dlsim] [--only NAME ...] [--max-gpus N]
                            [--limit-s S] [--no-folding]
Cases: resnet50-dp (ResNet-50 data parallel, 32 samples per GPU, 64 to 10,000 GPUs), gpt-3d
(gpt-18b, tp 8 x pp 4 x dp, 1F1B with 16 micro-batches, bf16, recomputation, 32 samples per
replica; 1,024 and 9,984 GPUs), closed-form (both at 3,072 GPUs in --mode analytic), and on
16,384 H100 GPUs of DGX H100 nodes, in closed form and simulated, llama-3d (Llama 3 405B, tp 8
with sequence parallelism x pp 16 x dp 128, 2,048 sequences of 8,192 tokens) and llama-cp (tp 8
x cp 16 x pp 16 x dp 8, 128 sequences of 131,072 tokens), 1F1B with 16 micro-batches, and
dp-100k (ResNet-18 for CIFAR-100 data parallel over 100,000 GPUs, 32 samples each). A run
that fails, or that --limit-s stops (its row says how far it got), is a row saying why; the
others are still measured. The table up to 10,000 GPUs (the default --max-gpus) takes about
11 minutes on a 2-core machine (2 of them the 10,000-GPU ResNet-50, 8 the 9,984-GPU GPT);
--max-gpus 4096 leaves those two out, --max-gpus 16384 adds the Llama rows, --max-gpus
100000 the 100,000-GPU ones.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def anon_kib(pid):
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


# Llama 3 405B on 16,384 H100 GPUs of DGX H100 nodes with Meta's degrees (Llama 3 paper,
# Dubey et al. 2024, Table 4: 16M-token batches, 16 sequences per replica; tp 8, pp 16, dp 128
# at sequence 8,192 and tp 8, cp 16, pp 16, dp 8 at 131,072), 1F1B with 16 micro-batches of one
# sequence, the distributed optimizer and full recomputation (without it a GPU needs 87 GB),
# PyTorch's kernels measured on the H100
LLAMA = ["--workload", "llama3-405b", "--platform", "dgx-h100:2048", "--precision", "bf16",
         "--kernels", "h100-sxm-pytorch", "--tp", "8", "--sequence-parallel", "--pp", "16",
         "--schedule", "1f1b", "--microbatches", "16", "--zero", "1", "--recompute", "full"]
LLAMA_CASES = {"llama-3d": ["--batch", "2048"],
               "llama-cp": ["--cp", "16", "--seq-len", "131072", "--batch", "128"]}


def cases():
    for gpus in (64, 256, 1024, 4096, 10000):
        yield ("resnet50-dp", "sim", gpus,
               ["--workload", "resnet50-imagenet", "--batch", str(32 * gpus)])
    for dp in (32, 312):
        gpus = 32 * dp
        yield ("gpt-3d", "sim", gpus,
               ["--workload", "gpt-18b", "--tp", "8", "--pp", "4", "--schedule", "1f1b",
                "--microbatches", "16", "--precision", "bf16", "--recompute",
                "--batch", str(32 * dp)])
    yield ("closed-form", "analytic", 3072,
           ["--workload", "gpt-18b", "--tp", "8", "--pp", "4", "--schedule", "1f1b",
            "--microbatches", "16", "--precision", "bf16", "--recompute", "--batch", "3072"])
    yield ("closed-form", "analytic", 3072,
           ["--workload", "resnet50-imagenet", "--batch", str(32 * 3072)])
    for name, opts in LLAMA_CASES.items():
        for mode in ("analytic", "sim"):
            yield (name, mode, 16384, LLAMA + opts)
    for mode in ("analytic", "sim"):
        yield ("dp-100k", mode, 100000,
               ["--workload", "resnet18-cifar100", "--batch", str(32 * 100000)])


def measure(dlsim, mode, gpus, opts, d, extra, limit_s=None):
    out = os.path.join(d, "r.json")
    platform = [] if "--platform" in opts else ["--platform", f"thetagpu:{(gpus + 7) // 8}"]
    cmd = [dlsim, "run", "--mode", mode, *platform, "--gpus", str(gpus), "--iters", "1", *opts,
           *extra, "--out", out]
    print("running:", " ".join(cmd), file=sys.stderr)
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak, stopped = 0, False
        while p.poll() is None:
            peak = max(peak, sum(anon_kib(c) for c in [p.pid] + children(p.pid)))
            if limit_s and time.monotonic() - t0 > limit_s and not stopped:
                for c in reversed(children(p.pid)):  # SimGrid's process first, then dlsim
                    try:
                        os.kill(c, 15)
                    except OSError:
                        pass
                p.terminate()
                stopped = True
            time.sleep(0.5)
        wall = time.monotonic() - t0
        err.seek(0)
        lines = [line for line in err.read().splitlines() if line.strip()]
    if stopped:  # how far it got: the last progress line
        said = [line for line in lines if "simulating:" in line]
        return wall, peak / 1048576, None, "stopped at --limit-s: " + \
            (said[-1].split("simulating: ")[-1] if said else "no progress line yet")
    if p.returncode:  # a row that says so; the others still get measured
        return wall, peak / 1048576, None, f"exit {p.returncode}: " + (lines[-1] if lines else "")
    with open(out) as f:
        return wall, peak / 1048576, json.load(f), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlsim", default="build/dlsim")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    ap.add_argument("--max-gpus", type=int, default=10000)
    ap.add_argument("--limit-s", type=float, default=None,
                    help="stop a run after this many seconds; its row says how far it got")
    ap.add_argument("--no-folding", action="store_true",
                    help="pass --no-folding: every rank evaluated, every channel simulated")
    a = ap.parse_args()
    extra = ["--no-folding"] if a.no_folding else []
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, mode, gpus, opts in cases():
            if (a.only and name not in a.only) or gpus > a.max_gpus:
                continue
            wall, gib, r, failed = measure(a.dlsim, mode, gpus, opts, d, extra, a.limit_s)
            wl = opts[opts.index("--workload") + 1]
            if failed:
                rows.append((name, wl, mode, gpus, wall, gib, None, failed, 1, 1, 1))
                print(f"  {name} {gpus}: failed after {wall:.1f} s ({failed})", file=sys.stderr)
                continue
            sim = r["simulation"]
            rows.append((name, wl, mode, gpus, wall, gib, r["iteration_time_s"], sim["ranks"],
                         sim["folded"], sim.get("folded_channels", 1), sim.get("folded_rails", 1)))
            print(f"  {name} {gpus}: {wall:.1f} s, {gib:.2f} GiB", file=sys.stderr)
    print(f"{'case':<12} {'workload':<18} {'mode':<9} {'GPUs':>6} {'wall (s)':>9} "
          f"{'RssAnon (GiB)':>14} {'iteration (s)':>14} {'evaluated':>18}")
    for name, wl, mode, gpus, wall, gib, it, ranks, folded, channels, rails in rows:
        if it is None:  # failed: `ranks` holds why
            print(f"{name:<12} {wl:<18} {mode:<9} {gpus:>6} {wall:>9.2f} {gib:>14.2f} "
                  f"{'failed':>14}  {ranks}")
            continue
        ev = f"{ranks}" + (f" x{folded}" if folded > 1 else "") + \
            (f" ch 1/{channels}" if channels > 1 else "") + (f" rail 1/{rails}" if rails > 1 else "")
        print(f"{name:<12} {wl:<18} {mode:<9} {gpus:>6} {wall:>9.2f} {gib:>14.2f} {it:>14.6f} "
              f"{ev:>18}")


if __name__ == "__main__":
    main()
