#!/usr/bin/python3
"""The layouts of a `dlsim search`, from its PREFIX.csv (every layout that fits): iteration time
against the energy of an iteration, and against the memory per GPU, every layout a dot, the
layouts no other beats on both a line (Pareto front), the fastest and the most frugal marked.
Prints the best ten by each objective and what the fastest costs in energy.

Usage: analysis/search.py PREFIX.csv --out PREFIX
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from plotlib import plt, save  # noqa: E402


def front(points):
    """Indices of the points no other is below in both coordinates (x ascending)."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    out, best = [], float("inf")
    for i in order:
        if points[i][1] < best:
            out.append(i)
            best = points[i][1]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="PREFIX.csv of dlsim search --out PREFIX")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("energy_per_iteration_j")]
    if not rows:
        sys.exit(f"{a.csv}: no layouts with energy_per_iteration_j (dlsim search --out)")
    t = [float(r["sim_iteration_s"] or r["analytic_iteration_s"]) for r in rows]
    e = [float(r["energy_per_iteration_j"]) / 1e3 for r in rows]
    m = [float(r["memory_peak_bytes"]) / 1e9 for r in rows]
    fast = min(range(len(rows)), key=lambda i: (t[i], e[i]))
    frugal = min(range(len(rows)), key=lambda i: (e[i], t[i]))
    for name, key in (("time", lambda i: (t[i], e[i])), ("energy", lambda i: (e[i], t[i]))):
        print(f"best by {name}:")
        print(f"  {'iteration_s':>11s} {'kJ/iter':>8s} {'memory_GB':>9s}  layout")
        for i in sorted(range(len(rows)), key=key)[:10]:
            print(f"  {t[i]:11.4f} {e[i]:8.3f} {m[i]:9.2f}  {rows[i]['layout']}")
    print(f"the fastest layout takes {e[fast] / e[frugal] - 1:.1%} more energy than the most "
          f"frugal, which is {t[frugal] / t[fast] - 1:.1%} slower")
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, xs, xl in ((axes[0], e, "energy of an iteration (kJ, facility included)"),
                       (axes[1], m, "memory per GPU (GB)")):
        ax.scatter(xs, t, s=8, color="#888", alpha=0.5, label="layouts that fit")
        f = front(list(zip(xs, t)))
        ax.plot([xs[i] for i in f], [t[i] for i in f], "-", color="#1f77b4", label="Pareto front")
        ax.scatter([xs[fast]], [t[fast]], s=80, color="#d62728", zorder=3, label="fastest")
        ax.scatter([xs[frugal]], [t[frugal]], s=80, marker="s", color="#2ca02c", zorder=3,
                   label="least energy")
        ax.set_xlabel(xl)
        ax.set_ylabel("iteration time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{os.path.basename(a.csv)}: {len(rows)} layouts; fastest: {rows[fast]['layout']}"
                 f"\nleast energy: {rows[frugal]['layout']}", fontsize=9)
    save(fig, a.out)


if __name__ == "__main__":
    main()
