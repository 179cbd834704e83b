#!/usr/bin/python3
"""Stacked bars of where an iteration goes, per configuration of a sweep CSV: compute, exposed
communication, pipeline bubble, idle (they add up to the iteration time).

Usage: analysis/breakdown.py SWEEP.csv --out PREFIX [--percent] [--filter COLUMN=VALUE ...]
"""
import argparse
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import num, plt, read_rows, save  # noqa: E402

PARTS = [("compute_s", "compute"), ("exposed_comm_s", "exposed comm"),
         ("bubble_s", "bubble"), ("idle_s", "idle")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="sweep CSV (dlsim sweep)")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    ap.add_argument("--percent", action="store_true", help="shares of the iteration, not ms")
    ap.add_argument("--filter", action="append", default=[], metavar="COLUMN=VALUE",
                    help="keep only rows with this value (repeatable)")
    a = ap.parse_args()
    rows = read_rows(a.csv)
    for f in a.filter:
        k, _, v = f.partition("=")
        rows = [r for r in rows if str(r.get(k)) == v]
    if not rows:
        sys.exit(f"{a.csv}: no rows with status ok (after filters)")
    rows.sort(key=lambda r: (r.get("label", ""), num(r, "gpus")))
    names = [f"{r.get('label') or r.get('grid')} P={r['gpus']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows) + 2), 4.5))
    bottom = [0.0] * len(rows)
    for key, text in PARTS:
        vals = []
        for r in rows:
            v = num(r, key)
            vals.append(100 * v / num(r, "iteration_time_s", 1) if a.percent else v * 1e3)
        ax.bar(range(len(rows)), vals, bottom=bottom, label=text)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("share of the iteration (%)" if a.percent else "time per iteration (ms)")
    ax.set_title(f"Iteration breakdown: {rows[0].get('workload', '')}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    save(fig, a.out)


if __name__ == "__main__":
    main()
