#!/usr/bin/python3
"""Sequence and context parallelism against the sequence length, from a sweep JSONL whose rows
carry "LENGTH/strategy" labels and a seq_len option (analytic/studies/long-context.json): per
strategy, the tokens per second per GPU, the memory per GPU against the GPU's capacity (hollow
markers where it does not fit), and the share of the iteration spent in exposed communication.
Prints the same figures as a table, and per length the fastest strategy that fits.

Usage: analysis/longctx.py SWEEP.jsonl --out PREFIX
"""
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402


def main():
    rows, out = result_rows(__doc__)
    strategies = []
    for r in rows:
        s = r["label"].split("/", 1)[1]
        if s not in strategies:
            strategies.append(s)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    print(f"{'sequence':>8s} {'strategy':28s} {'iteration_s':>11s} {'tokens/s/GPU':>12s} "
          f"{'memory_GB':>9s} {'exposed_comm':>12s} fits")
    best = {}
    for si, st in enumerate(strategies):
        mine = sorted((r for r in rows if r["label"].split("/", 1)[1] == st),
                      key=lambda r: r["options"]["seq_len"])
        xs, tok, mem, exp, fits = [], [], [], [], []
        for r in mine:
            c, s = r["config"], r["options"]["seq_len"]
            t = r["iteration_time_s"]
            xs.append(s)
            tok.append(c["batch"] * s / t / c["gpus"])
            mem.append(r["memory_bytes_per_gpu"]["peak"] / 1e9)
            exp.append(r["breakdown_s"]["exposed_comm"] / t)
            fits.append(r["fits_in_memory"])
            print(f"{s:8d} {st:28s} {t:11.3f} {tok[-1]:12.0f} {mem[-1]:9.1f} {exp[-1]:12.1%} "
                  f"{'yes' if fits[-1] else 'no'}")
            if fits[-1] and tok[-1] > best.get(s, (0, ""))[0]:
                best[s] = (tok[-1], st)
        col = colors[si % len(colors)]
        for ax, ys in ((axes[0], tok), (axes[1], mem), (axes[2], exp)):
            ax.plot(xs, ys, color=col, label=st)
            ax.scatter(xs, ys, color=[col if f else "white" for f in fits], edgecolor=col, zorder=3)
    cap = rows[0]["memory_bytes_per_gpu"]["capacity"] / 1e9
    axes[1].axhline(cap, color="black", linestyle="--", linewidth=1)
    for ax, title in zip(axes, ["tokens per second per GPU", f"memory per GPU (GB; {cap:.0f} GB "
                                "dashed)", "share of the iteration in exposed communication"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["options"]["seq_len"] for r in rows}))
        ax.set_xticklabels([f"{s // 1024}K" for s in sorted({r["options"]["seq_len"]
                                                              for r in rows})])
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    c = rows[0]["config"]
    fig.suptitle(f"{c['workload']} on {c['gpus']} GPUs, {c['batch']} sequences per iteration "
                 "(hollow: does not fit)", fontsize=10)
    for s in sorted(best):
        print(f"fastest that fits at {s // 1024}K: {best[s][1]} ({best[s][0]:.0f} tokens/s/GPU)")
    save(fig, out)


if __name__ == "__main__":
    main()
