#!/usr/bin/python3
"""The main job: ResNet-18 on CIFAR-100 on ThetaGPU, 10 epochs, data parallel vs GPipe on 2, 4, 6
and 8 GPUs of one node, then a what-if past the hardware: data parallel on 8 to 192 GPUs (all of
ThetaGPU), 1,024 and 4,096 GPUs (128 and 512 DGX A100 nodes with ThetaGPU's node and network).

Weak scaling: 128 samples per GPU, so the global batch is 128 x GPUs for both strategies; GPipe
puts one stage on each GPU (stages balanced by predicted time) and splits the batch into 8
micro-batches. Every run is simulated in SMPI (--mode sim). Prints the tables, writes the
results as CSV and the plot as PNG and SVG under the output directory.

Usage: analysis/main_job.py [--dlsim build/dlsim] [--mode sim] [--out build/main-job]
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

EPOCHS = 10
PER_GPU_BATCH = 128
NODE_GPUS = [2, 4, 6, 8]
WHATIF_GPUS = [8, 16, 32, 64, 128, 192, 1024, 4096]
MICROBATCHES = 8
STRATEGIES = {"data parallel": [], "GPipe": None}  # GPipe's options depend on the GPU count


def strategy_args(name, gpus):
    if name == "GPipe":
        return ["--pp", str(gpus), "--schedule", "gpipe", "--microbatches", str(MICROBATCHES)]
    return []


def run(dlsim, mode, platform, gpus, outdir, strategy="data parallel"):
    tag = "dp" if strategy == "data parallel" else "gpipe"
    out = os.path.join(outdir, f"{tag}-{gpus}.json")
    cmd = [dlsim, "run", "--mode", mode, "--workload", "resnet18-cifar100",
           "--platform", platform, "--gpus", str(gpus),
           "--batch", str(PER_GPU_BATCH * gpus), "--iters", "2", "--out", out,
           *strategy_args(strategy, gpus)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"main job: {' '.join(cmd)} failed with status {proc.returncode}")
    with open(out) as f:
        r = json.load(f)
    r["strategy"] = strategy if r["mode"] == "sim" else f"{strategy} ({r['mode']})"
    return r


def row(r):
    t = r["iteration_time_s"]
    bd = r["breakdown_s"]
    return {
        "strategy": r["strategy"],
        "gpus": r["config"]["gpus"],
        "batch": r["config"]["batch"],
        "iteration_time_s": t,
        "throughput_samples_per_s": r["throughput_samples_per_s"],
        "train_time_s": r["epoch_time_s"] * EPOCHS,
        "compute_pct": 100 * bd["compute"] / t,
        "exposed_comm_pct": 100 * bd["exposed_comm"] / t,
        "bubble_pct": 100 * bd["bubble"] / t,
        "comm_bytes_per_gpu": r["comm_bytes_per_gpu"],
        "peak_memory_bytes_per_gpu": r["memory_bytes_per_gpu"]["peak"],
    }


def table(title, rows):
    print(f"\n{title}")
    print(f"{'strategy':<14} {'GPUs':>5} {'batch':>7} {'iter (ms)':>10} {'samples/s':>11} "
          f"{'10 epochs (min)':>16} {'compute %':>10} {'exp. comm %':>12} {'bubble %':>9} "
          f"{'speedup':>8}")
    base = {}
    for x in rows:
        b = base.setdefault(x["strategy"].split(" (")[0], x)
        speed = x["throughput_samples_per_s"] / b["throughput_samples_per_s"]
        print(f"{x['strategy']:<14} {x['gpus']:>5} {x['batch']:>7} "
              f"{x['iteration_time_s']*1e3:>10.2f} {x['throughput_samples_per_s']:>11.0f} "
              f"{x['train_time_s']/60:>16.2f} {x['compute_pct']:>10.1f} "
              f"{x['exposed_comm_pct']:>12.1f} {x['bubble_pct']:>9.1f} {speed:>8.2f}")


def plot(node_rows, whatif_rows, path_base):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for strat, marker in (("data parallel", "o-"), ("GPipe", "s-")):
        sel = [x for x in node_rows if x["strategy"] == strat]
        a.plot([x["gpus"] for x in sel], [x["train_time_s"] / 60 for x in sel], marker,
               label=strat)
    g = NODE_GPUS
    a.set_xlabel("GPUs (one DGX A100 node)")
    a.set_ylabel(f"time for {EPOCHS} epochs (min)")
    a.set_title("ResNet-18 / CIFAR-100 on ThetaGPU")
    a.set_xticks(g)
    a.grid(alpha=0.3)
    a.legend()
    g = [x["gpus"] for x in whatif_rows]
    thr = [x["throughput_samples_per_s"] for x in whatif_rows]
    ideal = [thr[0] * n / g[0] for n in g]
    b.loglog(g, thr, "o-", label="data parallel (predicted)")
    b.loglog(g, ideal, "--", color="gray", label="ideal scaling")
    b.axvline(192, color="red", alpha=0.4, lw=1)
    b.text(192, thr[0], " all of ThetaGPU", color="red", alpha=0.7, fontsize=8)
    b.set_xlabel("GPUs")
    b.set_ylabel("throughput (samples/s)")
    b.set_title("what-if past the hardware")
    b.grid(alpha=0.3, which="both")
    b.legend()
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{path_base}.{ext}", dpi=120)
    return f"{path_base}.png"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlsim", default="build/dlsim")
    ap.add_argument("--mode", default="sim")
    ap.add_argument("--out", default="build/main-job")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # past ThetaGPU's 24 nodes: the same nodes and network, as many nodes as the GPUs need
    todo = [("thetagpu", n, s) for s in ("data parallel", "GPipe") for n in NODE_GPUS] + \
           [("thetagpu" if n <= 192 else f"thetagpu:{n // 8}", n, "data parallel")
            for n in WHATIF_GPUS[1:]]
    results = {}
    t0 = time.time()
    for i, (platform, n, strat) in enumerate(todo, 1):
        results[(n, strat)] = row(run(args.dlsim, args.mode, platform, n, args.out, strat))
        rate = i / max(time.time() - t0, 1e-9)
        print(f"[{i}/{len(todo)}] {strat} on {n} GPUs done, {time.time() - t0:.0f} s elapsed, "
              f"about {math.ceil((len(todo) - i) / rate)} s left", file=sys.stderr)
    node_rows = [results[(n, s)] for s in ("data parallel", "GPipe") for n in NODE_GPUS]
    whatif_rows = [results[(n, "data parallel")] for n in WHATIF_GPUS]
    print(f"dlsim main job ({args.mode}): ResNet-18 on CIFAR-100, {EPOCHS} epochs, "
          f"{PER_GPU_BATCH} samples per GPU")
    table("One ThetaGPU node (DGX A100, 8x A100-40GB, NVSwitch): data parallel vs GPipe "
          f"({MICROBATCHES} micro-batches)", node_rows)
    table("What-if: data parallel past one node (1,024 and 4,096 GPUs = 128 and 512 DGX A100 "
          "nodes)", whatif_rows)
    csv_path = os.path.join(args.out, "main-job.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(node_rows[0].keys()))
        w.writeheader()
        for x in node_rows + whatif_rows[1:]:  # 8 GPUs data parallel is in both lists
            w.writerow(x)
    png = plot(node_rows, whatif_rows, os.path.join(args.out, "main-job"))
    print(f"\nresults: {csv_path}\nplot:    {png}")


if __name__ == "__main__":
    main()
