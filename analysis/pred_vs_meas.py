#!/usr/bin/python3
"""Predicted against measured time: one point per configuration, the y = x line and a +-10%
band, with the mean absolute percentage error in the title.

Input: a CSV with columns config, real_s, sim_s (what `dlsim validate` writes).

Usage: analysis/pred_vs_meas.py VALIDATE.csv --out PREFIX [--band 0.10]
"""
import argparse
import csv
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, save  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="CSV with columns config, real_s, sim_s")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    ap.add_argument("--band", type=float, default=0.10, help="relative band around y = x")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("real_s") and r.get("sim_s")]
    if not rows:
        sys.exit(f"{a.csv}: no rows with real_s and sim_s")
    real = [float(r["real_s"]) * 1e3 for r in rows]
    sim = [float(r["sim_s"]) * 1e3 for r in rows]
    mape = 100 * sum(abs(s - m) / m for s, m in zip(sim, real)) / len(rows)
    lo, hi = min(real + sim) * 0.8, max(real + sim) * 1.2
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    ax.fill_between([lo, hi], [lo * (1 - a.band), hi * (1 - a.band)],
                    [lo * (1 + a.band), hi * (1 + a.band)], color="grey", alpha=0.2,
                    label=f"±{100 * a.band:.0f}%")
    ax.scatter(real, sim, zorder=3)
    for r, x, y in zip(rows, real, sim):
        ax.annotate(r["config"], (x, y), fontsize=7, xytext=(4, -8), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time per iteration (ms)")
    ax.set_ylabel("predicted time per iteration (ms)")
    ax.set_title(f"predicted vs measured: {len(rows)} configurations, MAPE {mape:.1f}%")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    save(fig, a.out)


if __name__ == "__main__":
    main()
