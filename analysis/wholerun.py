#!/usr/bin/python3
"""The whole training run, from a sweep JSONL whose rows carry "GPUS/VARIATION" labels and a
projection (analysis/studies/whole-run.json: --tokens with one thing varied at a time): goodput
(useful time over the expected wall time) against the checkpoint interval, the file system's
bandwidth (synchronous and asynchronous checkpoints) and the failure rate, per GPU count, each
default marked; and the expected wall time of the defaults split into useful work, work lost to
failures, checkpoints and restarts. Prints the same figures as a table.

Usage: analysis/wholerun.py SWEEP.jsonl --out PREFIX
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402

DAY = 86400.0


def main():
    rows, out = result_rows(__doc__)
    by = {}
    for r in rows:
        gpus, vary = r["label"].split("/", 1)
        by.setdefault(int(gpus), {})[vary] = r
    scales = sorted(by)
    print(f"{'GPUs':>6s} {'variation':18s} {'iteration_s':>11s} {'useful_d':>8s} {'wall_d':>7s} "
          f"{'p95_d':>7s} {'goodput':>7s} {'interval_s':>10s} {'interrupts':>10s} {'MTBF_h':>6s}")
    for g in scales:
        for v, r in sorted(by[g].items()):
            p = r["projection"]
            print(f"{g:6d} {v:18s} {r['iteration_time_s']:11.2f} {p['useful_s'] / DAY:8.1f} "
                  f"{p['wall_s'] / DAY:7.1f} {p['wall_s_percentiles']['p95'] / DAY:7.1f} "
                  f"{p['goodput']:7.3f} {p['ckpt_interval_s']:10.0f} {p['interruptions']:10.0f} "
                  f"{p['failures']['job_mtbf_s'] / 3600:6.2f}")
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def series(g, prefix):
        pts = sorted((float(v.split("/", 1)[1]), r["projection"]) for v, r in by[g].items()
                     if v.startswith(prefix + "/"))
        return [x for x, _ in pts], [p["goodput"] for _, p in pts]

    for i, g in enumerate(scales):
        col = colors[i % len(colors)]
        d = by[g].get("default", {}).get("projection")
        # the interval
        xs, ys = series(g, "interval")
        axes[0].plot([x / 60 for x in xs], ys, "o-", color=col, label=f"{g} GPUs")
        if d:
            axes[0].plot([d["ckpt_interval_s"] / 60], [d["goodput"]], "*", ms=14, color=col)
        # the file system's bandwidth
        xs, ys = series(g, "storage")
        if d:
            xs, ys = zip(*sorted(list(zip(xs, ys)) + [(2.0, d["goodput"])]))
        axes[1].plot(xs, ys, "o-", color=col, label=f"{g} GPUs, sync")
        xs, ys = series(g, "async")
        axes[1].plot(xs, ys, "s--", color=col, label=f"{g} GPUs, async")
        # the failure rate
        xs, ys = series(g, "failures")
        if d:
            xs, ys = zip(*sorted(list(zip(xs, ys)) + [(1.0, d["goodput"])]))
        axes[2].plot(xs, ys, "o-", color=col, label=f"{g} GPUs")
        # where the defaults' time goes
        if d:
            parts = [d["useful_s"], d["lost_work_s"], d["checkpointing_s"], d["restarting_s"]]
            bottom = 0
            for k, (v, name) in enumerate(zip(parts, ["useful", "lost work", "checkpoints",
                                                       "restarts"])):
                axes[3].bar(i, v / DAY, bottom=bottom / DAY, color=colors[k % len(colors)],
                            label=name if i == 0 else None)
                bottom += v
            axes[3].text(i, bottom / DAY, f"{d['goodput']:.1%}", ha="center", va="bottom",
                         fontsize=8)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("work between checkpoints (min; ★ Daly's optimum)")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("file system bandwidth (TB/s; 50 GB/s per node)")
    axes[2].set_xscale("log")
    axes[2].set_xlabel("failure rate (× Llama 3's)")
    for ax in axes[:3]:
        ax.set_ylabel("goodput (useful / expected wall time)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[3].set_xticks(range(len(scales)))
    axes[3].set_xticklabels([f"{g} GPUs" for g in scales])
    axes[3].set_ylabel("expected wall time (days)")
    axes[3].legend(fontsize=7)
    fig.suptitle("Llama 3 405B, 15.6T tokens on H100s: goodput against checkpoints, storage and "
                 "failures", fontsize=11)
    save(fig, out)


if __name__ == "__main__":
    main()
