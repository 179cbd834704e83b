#!/usr/bin/python3
"""ZeRO stages and FSDP strategies side by side, from a sweep JSONL whose rows carry a strategy
label and a batch per GPU (analysis/studies/zero-fsdp.json): one row of panels per workload with
the time per sample against the batch per GPU (hollow where it does not fit), the memory per GPU
at the smallest batch split into parameters, gradients, optimizer state, activations and gathered
buffers (the GPU's capacity dashed), and the largest batch per GPU that fits.

Usage: analysis/sharding.py SWEEP.jsonl --out PREFIX
"""
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402

PARTS = [("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer state"),
         ("activations", "activations"), ("gathered", "gathered")]


def per_gpu_batch(r):
    c = r["config"]
    return c["batch"] // c["gpus"]


def main():
    rows, out = result_rows(__doc__)
    workloads = sorted({r["config"]["workload"] for r in rows})
    # DDP, ZeRO 1 to 3, then FSDP's strategies
    order = {"none": 0, "full": 1, "grad-op": 2, "hybrid": 3}
    rank = {}
    for r in rows:
        c = r["config"]
        rank[r.get("label", "")] = (order.get(c.get("fsdp", "none"), 9), c.get("zero", 0))
    labels = sorted(rank, key=lambda lab: rank[lab])
    fig, axes = plt.subplots(len(workloads), 3, figsize=(15, 4.2 * len(workloads)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for wi, w in enumerate(workloads):
        mine = [r for r in rows if r["config"]["workload"] == w]
        gpus = mine[0]["config"]["gpus"]
        ax = axes[wi][0]
        for li, lab in enumerate(labels):
            pts = sorted((per_gpu_batch(r), r) for r in mine if r.get("label") == lab)
            xs = [b for b, _ in pts]
            ys = [r["iteration_time_s"] / r["config"]["batch"] * 1e3 for _, r in pts]
            col = colors[li % len(colors)]
            ax.plot(xs, ys, "-", color=col, label=lab, alpha=0.8)
            for (b, r), y in zip(pts, ys):
                ax.plot([b], [y], "o", color=col, markerfacecolor=col if r["fits_in_memory"]
                        else "none")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch per GPU (samples)")
        ax.set_ylabel("time per sample (ms), all GPUs")
        ax.set_title(f"{w} on {gpus} GPUs: time (hollow: does not fit)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax = axes[wi][1]
        smallest = min(per_gpu_batch(r) for r in mine)
        at = {r.get("label"): r for r in mine if per_gpu_batch(r) == smallest}
        bottom = [0.0] * len(labels)
        for key, text in PARTS:
            vals = [at[lab]["memory_bytes_per_gpu"].get(key, 0) / 1e9 if lab in at else 0
                    for lab in labels]
            ax.bar(range(len(labels)), vals, bottom=bottom, label=text)
            bottom = [b + v for b, v in zip(bottom, vals)]
        cap = mine[0]["memory_bytes_per_gpu"]["capacity"] / 1e9
        ax.axhline(cap, color="k", linestyle="--", linewidth=1, label=f"capacity {cap:.0f} GB")
        top = min(2.5 * cap, 1.15 * max(max(bottom), cap))  # taller bars are cut, total written
        ax.set_ylim(0, top)
        for i, b in enumerate(bottom):
            ax.text(i, min(b, top), f"{b:.1f}", ha="center", va="top" if b > top else "bottom",
                    fontsize=8)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("memory per GPU (GB)")
        ax.set_title(f"memory at {smallest} sample(s) per GPU")
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        ax = axes[wi][2]
        best = [max([per_gpu_batch(r) for r in mine if r.get("label") == lab and
                     r["fits_in_memory"]] or [0]) for lab in labels]
        ax.bar(range(len(labels)), best, color=colors[:len(labels)])
        for i, b in enumerate(best):
            ax.text(i, b, str(b) if b else "none", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("largest batch per GPU that fits")
        ax.set_title("largest batch per GPU in the sweep that fits")
        ax.grid(axis="y", alpha=0.3)
    save(fig, out)


if __name__ == "__main__":
    main()
