#!/usr/bin/python3
"""Models across clusters, from a sweep JSONL whose rows carry a "model/cluster" label
(analysis/studies/llama-clusters.json): for each model (groups of bars) and cluster (bars), the
time per iteration, the tokens per second per GPU, the memory per GPU (the cluster's capacity
marked; hatched where it does not fit) and the share of the iteration spent in exposed
communication and in the pipeline bubble. Prints the same figures as a table.

Usage: analysis/clusters.py SWEEP.jsonl --out PREFIX
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402


def seq_len(name):
    """Tokens per sample of a shipped workload (its input's seq_len; 1 for images)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads",
                        name + ".json")
    with open(path) as f:
        return json.load(f)["input"].get("seq_len", 1)


def main():
    rows, out = result_rows(__doc__)
    models, clusters = [], []
    by = {}
    for r in rows:
        model, cluster = r["label"].split("/", 1)
        if model not in models:
            models.append(model)
        if cluster not in clusters:
            clusters.append(cluster)
        by[(model, cluster)] = r
    # smaller models first; clusters by their GPUs' memory (here also their age)
    models.sort(key=lambda m: min(r["model"]["params"] for (mm, _), r in by.items() if mm == m))
    clusters.sort(key=lambda c: min(r["memory_bytes_per_gpu"]["capacity"]
                                    for (_, cc), r in by.items() if cc == c))
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(clusters)
    print(f"{'model':36s} {'cluster':9s} {'iteration_s':>11s} {'tokens/s/GPU':>12s} "
          f"{'TFLOP/s/GPU':>11s} {'memory_GB':>9s} {'exposed_comm':>12s} {'bubble':>7s} fits")
    for ci, cl in enumerate(clusters):
        xs, it, tok, mem, cap, exp, bub, fits = [], [], [], [], [], [], [], []
        for mi, m in enumerate(models):
            r = by.get((m, cl))
            if not r:
                continue
            c = r["config"]
            t = r["iteration_time_s"]
            seq = seq_len(r["model"]["name"])
            xs.append(mi + (ci - (len(clusters) - 1) / 2) * width)
            it.append(t)
            tok.append(c["batch"] * seq / t / c["gpus"])
            mem.append(r["memory_bytes_per_gpu"]["peak"] / 1e9)
            cap.append(r["memory_bytes_per_gpu"]["capacity"] / 1e9)
            exp.append(r["breakdown_s"]["exposed_comm"] / t)
            bub.append(r["breakdown_s"]["bubble"] / t)
            fits.append(r["fits_in_memory"])
            print(f"{m:36s} {cl:9s} {t:11.3f} {tok[-1]:12.0f} "
                  f"{r['achieved_flops_per_gpu'] / 1e12:11.0f} {mem[-1]:9.1f} {exp[-1]:12.1%} "
                  f"{bub[-1]:7.1%} {'yes' if fits[-1] else 'no'}")
        col = colors[ci % len(colors)]
        hatch = ["" if f else "//" for f in fits]
        for ax, vals in ((axes[0], it), (axes[1], tok), (axes[2], mem)):
            bars = ax.bar(xs, vals, width, color=col, label=cl)
            for b, h in zip(bars, hatch):
                b.set_hatch(h)
        axes[2].scatter(xs, cap, marker="_", s=300, color="black", zorder=3)
        axes[3].bar(xs, exp, width, color=col, label=f"{cl}: exposed comm")
        axes[3].bar(xs, bub, width, bottom=exp, color=col, alpha=0.4)
    titles = ["time per iteration (s)", "tokens per second per GPU", "memory per GPU (GB; — capacity)",
              "share of the iteration: exposed comm (solid), bubble (light)"]
    for ax, title in zip(axes, titles):
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels([m.replace(" (", "\n(") for m in models], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{rows[0]['config']['gpus']} GPUs, batch {rows[0]['config']['batch']} "
                 "(hatched: does not fit)", fontsize=10)
    save(fig, out)


if __name__ == "__main__":
    main()
