#!/usr/bin/python3
"""Scaling curves from a sweep CSV: time per iteration and throughput vs GPUs, one curve per
strategy (the `label` column, or --group), with ideal scaling from each curve's smallest run.

Ideal: throughput grows as GPUs; time per iteration scales as batch / GPUs (flat for weak
scaling, where the batch grows with the GPUs; 1/GPUs for strong scaling).

Usage: analysis/scaling.py SWEEP.csv --out PREFIX [--group label] [--title TEXT]
"""
import argparse
import sys
from collections import defaultdict

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import num, plt, read_rows, save  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="sweep CSV (dlsim sweep)")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    ap.add_argument("--group", default="label", help="column naming the strategy (default label)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    groups = defaultdict(list)
    for r in read_rows(a.csv):
        groups[r.get(a.group) or "default"].append(r)
    if not groups:
        sys.exit(f"{a.csv}: no rows with status ok")
    fig, (ax_t, ax_x) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rows in sorted(groups.items()):
        rows.sort(key=lambda r: num(r, "gpus"))
        g = [num(r, "gpus") for r in rows]
        t = [num(r, "iteration_time_s") * 1e3 for r in rows]
        x = [num(r, "throughput_samples_per_s") for r in rows]
        b = [num(r, "batch") for r in rows]
        line, = ax_t.plot(g, t, "o-", label=name)
        ax_x.plot(g, x, "o-", color=line.get_color(), label=name)
        ideal_t = [t[0] * (bi / b[0]) * (g[0] / gi) for gi, bi in zip(g, b)]
        ideal_x = [x[0] * gi / g[0] for gi in g]
        ax_t.plot(g, ideal_t, ":", color=line.get_color(), alpha=0.7)
        ax_x.plot(g, ideal_x, ":", color=line.get_color(), alpha=0.7)
    ax_t.plot([], [], "k:", label="ideal scaling")
    ax_x.plot([], [], "k:", label="ideal scaling")
    ticks = sorted({int(num(r, "gpus")) for rows in groups.values() for r in rows})
    ax_x.set_yscale("log")
    for ax, yl in ((ax_t, "time per iteration (ms)"), (ax_x, "throughput (samples/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    first = next(iter(groups.values()))[0]
    fig.suptitle(a.title or f"{first.get('workload', '')} on {first.get('platform', '')}")
    save(fig, a.out)


if __name__ == "__main__":
    main()
