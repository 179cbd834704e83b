#!/usr/bin/python3
"""Gholami et al. 2018 style stacked bars per grid shape: compute, batch-parallel communication
(the Pc/dp group: gradient all-reduce) and model-parallel communication (the Pr/tp group:
activation all-gathers and all-reduces), per iteration. Communication is all of it, hidden or not.

Input: a sweep JSONL (full results, with `collectives`) or result JSON files, each run with --grid.

Usage: analysis/grid_bars.py SWEEP.jsonl|RESULT.json... --out PREFIX [--gpus P]
"""
import argparse
import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, read_rows, save  # noqa: E402


def load(paths):
    rows = []
    for p in paths:
        if p.endswith(".jsonl"):
            rows += read_rows(p)
        else:
            with open(p) as f:
                rows.append(json.load(f))
    return [r for r in rows if r.get("config", {}).get("grid", "none") != "none"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="sweep JSONL or result JSON files")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    ap.add_argument("--gpus", type=int, help="keep only runs on this many GPUs")
    a = ap.parse_args()
    rows = load(a.inputs)
    if a.gpus:
        rows = [r for r in rows if r["config"]["gpus"] == a.gpus]
    if not rows:
        sys.exit("grid_bars: no results with a grid in the inputs")
    rows.sort(key=lambda r: (r["config"]["gpus"], int(r["config"]["grid"].split("x")[0])))
    comp, batch, model, names = [], [], [], []
    for r in rows:
        colls = r.get("collectives", [])
        comp.append(r["breakdown_s"]["compute"] * 1e3)
        batch.append(sum(c["time_s"] for c in colls if c["group"] == "dp") * 1e3)
        model.append(sum(c["time_s"] for c in colls if c["group"] != "dp") * 1e3)
        names.append(f"{r['config']['grid']}\nP={r['config']['gpus']}")
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(rows) + 2), 4.5))
    ax.bar(x, comp, label="compute")
    ax.bar(x, batch, bottom=comp, label="batch comm (Pc)")
    ax.bar(x, model, bottom=[c + b for c, b in zip(comp, batch)], label="model comm (Pr)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_xlabel("grid Pr x Pc")
    ax.set_ylabel("time per iteration (ms, communication not overlapped)")
    c = rows[0]["config"]
    ax.set_title(f"{c['workload']}, batch {c['batch']}: compute and communication", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, a.out)


if __name__ == "__main__":
    main()
