#!/usr/bin/python3
"""Energy per token across GPU generations, from a sweep JSONL whose rows carry "model/cluster"
labels and a projection (analysis/studies/energy-generations.json): tokens per joule of the
whole run per model and cluster (hatched where the model does not fit), and the average power
per GPU while training, split into the GPUs' kernels, their idle floor, the host, the network
and the facility (PUE). Prints the same figures as a table.

Usage: analysis/energy.py SWEEP.jsonl --out PREFIX
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402

PARTS = [("gpu_busy", "GPU kernels"), ("gpu_idle", "GPU idle floor"), ("host", "host"),
         ("nic", "NICs"), ("switch", "switch ports"), ("facility", "facility (PUE)")]


def main():
    rows, out = result_rows(__doc__)
    models, clusters, by = [], [], {}
    for r in rows:
        m, c = r["label"].split("/", 1)
        models += [m] if m not in models else []
        clusters += [c] if c not in clusters else []
        by[(m, c)] = r
    # clusters by their GPUs' memory (here also their age)
    clusters.sort(key=lambda c: min(r["memory_bytes_per_gpu"]["capacity"]
                                    for (_, cc), r in by.items() if cc == c))
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(clusters)
    print(f"{'model':14s} {'cluster':12s} {'iteration_s':>11s} {'tokens/J':>8s} {'W/GPU':>6s} "
          f"{'GPU_W':>6s} {'MWh/run':>8s} {'goodput':>7s} fits")
    for ci, c in enumerate(clusters):
        xs, ys, hatch = [], [], []
        for mi, m in enumerate(models):
            r = by.get((m, c))
            if not r:
                continue
            p = r["projection"]
            e = p["energy_per_iteration_j"]
            T, g = r["iteration_time_s"], r["config"]["gpus"]
            xs.append(mi + (ci - (len(clusters) - 1) / 2) * width)
            ys.append(p["tokens_per_j"])
            hatch.append("" if r["fits_in_memory"] else "//")
            print(f"{m:14s} {c:12s} {T:11.2f} {p['tokens_per_j']:8.3f} {e['total'] / T / g:6.0f} "
                  f"{(e['gpu_busy'] + e['gpu_idle']) / T / g:6.0f} {p['energy_kwh'] / 1e3:8.0f} "
                  f"{p['goodput']:7.3f} {'yes' if r['fits_in_memory'] else 'no'}")
        bars = axes[0].bar(xs, ys, width, color=colors[ci % len(colors)], label=c)
        for b, h in zip(bars, hatch):
            b.set_hatch(h)
    axes[0].set_xticks(range(len(models)))
    axes[0].set_xticklabels(models)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("tokens per joule (whole run, facility included)")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3, axis="y")
    # power per GPU of the largest model that fits everywhere it ran
    m = next((m for m in reversed(models)
              if all(by[(m, c)]["fits_in_memory"] for c in clusters if (m, c) in by)), models[0])
    for ci, c in enumerate(clusters):
        r = by.get((m, c))
        if not r:
            continue
        e = r["projection"]["energy_per_iteration_j"]
        T, g = r["iteration_time_s"], r["config"]["gpus"]
        bottom = 0
        for k, (key, name) in enumerate(PARTS):
            v = e[key] / T / g
            axes[1].bar(ci, v, bottom=bottom, color=colors[k % len(colors)],
                        label=name if ci == 0 else None)
            bottom += v
    axes[1].set_xticks(range(len(clusters)))
    axes[1].set_xticklabels(clusters, fontsize=8)
    axes[1].set_ylabel(f"average power per GPU while training, W ({m})")
    axes[1].legend(fontsize=8)
    fig.suptitle("Energy per token across GPU generations, 1,024 GPUs (power modelled from spec "
                 "sheets)", fontsize=11)
    save(fig, out)


if __name__ == "__main__":
    main()
