#!/usr/bin/python3
"""Pr x Pc heatmaps of Gholami et al.'s integrated grid: time per iteration and communication
time per grid shape, the best shape for each GPU count marked with a star.

Input: a sweep CSV whose rows use --grid (Pr = tp, Pc = dp), or a result JSON of
`dlsim run --grid auto` (its grid_search).

Usage: analysis/grid_heatmap.py SWEEP.csv|RESULT.json --out PREFIX
"""
import argparse
import json
import math
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import num, plt, read_rows, save  # noqa: E402


def cells(path):
    """{(Pr, Pc): (iteration_time_s, comm_s)} and a title."""
    out = {}
    if path.endswith(".json"):
        with open(path) as f:
            r = json.load(f)
        if "grid_search" not in r:
            sys.exit(f"{path}: no grid_search (run dlsim run with --grid auto)")
        for g in r["grid_search"]:
            pr, pc = (int(v) for v in g["grid"].split("x"))
            out[(pr, pc)] = (g["iteration_time_s"], g["comm_s"])
        c = r["config"]
        return out, f"{c['workload']}, P={c['gpus']}, batch {c['batch']}"
    rows = [r for r in read_rows(path) if r.get("grid") not in ("", "none", None)]
    for r in rows:
        pr, pc = (int(v) for v in r["grid"].split("x"))
        out[(pr, pc)] = (num(r, "iteration_time_s"), num(r, "comm_s"))
    if not rows:
        sys.exit(f"{path}: no rows with a grid")
    return out, f"{rows[0]['workload']}, batch {rows[0]['batch']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="sweep CSV or result JSON with grid_search")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    a = ap.parse_args()
    data, title = cells(a.input)
    prs = sorted({k[0] for k in data})
    pcs = sorted({k[1] for k in data})
    best = {}
    for (pr, pc), (t, _) in data.items():
        p = pr * pc
        if p not in best or t < data[best[p]][0]:
            best[p] = (pr, pc)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, idx, name in ((axes[0], 0, "time per iteration (ms)"), (axes[1], 1, "communication (ms)")):
        m = [[data[(pr, pc)][idx] * 1e3 if (pr, pc) in data else math.nan for pc in pcs] for pr in prs]
        im = ax.imshow(m, origin="lower", cmap="viridis_r", aspect="auto")
        fig.colorbar(im, ax=ax, label=name)
        for i, pr in enumerate(prs):
            for j, pc in enumerate(pcs):
                if (pr, pc) not in data:
                    continue
                mark = " *" if best.get(pr * pc) == (pr, pc) else ""
                ax.text(j, i, f"{m[i][j]:.3g}{mark}", ha="center", va="center", fontsize=7,
                        fontweight="bold" if mark else "normal")
        ax.set_xticks(range(len(pcs)))
        ax.set_xticklabels(pcs)
        ax.set_yticks(range(len(prs)))
        ax.set_yticklabels(prs)
        ax.set_xlabel("Pc (batch)")
        ax.set_ylabel("Pr (model)")
        ax.set_title(name)
    fig.suptitle(f"Pr x Pc grid: {title}  (* best for its GPU count)")
    save(fig, a.out)


if __name__ == "__main__":
    main()
