#!/usr/bin/python3
"""Variability at scale, from a sweep JSONL whose rows carry "MODEL/GPUS/SCENARIO" labels
(analysis/studies/variability.json): the iteration time with a share of the GPUs slower
(--slow-gpus random:F:X) or some NICs at part of their bandwidth (--degrade nics:F:X), as a
slowdown against the same run as built, beside the naive expectation, which spreads the loss
over the machine as if every GPU waited only for itself:

  stragglers   k = round(F x GPUs) GPUs whose kernels take X times as long: the average GPU
               computes (k / GPUs) (X - 1) longer, so naive = compute x (k / GPUs) (X - 1);
  NICs         k of the N NICs (the result lists them) at X of their bandwidth: the average NIC
               moves (k / N) (1/X - 1) longer, so naive = exposed communication x that.

Both as a percentage of the base iteration. Prints the table, then writes PREFIX.png/.svg.

Usage: analysis/variability.py SWEEP.jsonl --out PREFIX
"""
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402


def naive_pct(row, base):
    """The naive expectation of `row`'s slowdown over `base`, % of the base iteration."""
    c = row["config"]
    p, t = c["gpus"], base["iteration_time_s"]
    if c.get("slow_gpus", "none") != "none":
        _, frac, x = c["slow_gpus"].split(":")
        k = int(float(frac) * p + 0.5)
        return 100 * base["breakdown_s"]["compute"] * k / p * (float(x) - 1) / t
    links = row["simulation"].get("degraded_links", [])
    if not links:
        return 0.0
    nics = p  # DGX H100: a NIC per GPU
    x = links[0]["bandwidth_factor"]
    return 100 * base["breakdown_s"]["exposed_comm"] * len(links) / nics * (1 / x - 1) / t


def main():
    rows, out = result_rows(__doc__)
    table = {}
    for r in rows:
        model, gpus, scen = r["label"].split("/", 2)
        table[(model, int(gpus), scen)] = r
    models = sorted({k[0] for k in table}, key=lambda m: [k[0] for k in table].index(m))
    scens = [s for s in dict.fromkeys(k[2] for k in table) if s != "base"]
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    print(f"{'model':12s} {'GPUs':>6s} {'scenario':12s} {'base (s)':>10s} {'time (s)':>10s} "
          f"{'slowdown':>9s} {'naive':>8s}")
    for ax, model in zip(axes[0], models):
        sizes = sorted(g for (m, g, s) in table if m == model and s == "base")
        for si, scen in enumerate(scens):
            xs, got, exp = [], [], []
            for g in sizes:
                b, r = table.get((model, g, "base")), table.get((model, g, scen))
                if not b or not r:
                    continue
                xs.append(g)
                got.append(100 * (r["iteration_time_s"] / b["iteration_time_s"] - 1))
                exp.append(naive_pct(r, b))
                print(f"{model:12s} {g:6d} {scen:12s} {b['iteration_time_s']:10.4f} "
                      f"{r['iteration_time_s']:10.4f} {got[-1]:8.2f}% {exp[-1]:7.3f}%")
            col = colors[si % len(colors)]
            ax.plot(xs, got, "o-", color=col, label=f"{scen}: dlsim")
            ax.plot(xs, exp, "x--", color=col, alpha=0.7, label=f"{scen}: naive")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("iteration time over the run as built (%)")
        c = table[(model, sizes[0], "base")]["config"]
        what = (f"tp {c['tp']} x pp {c['pp']} x dp" if c["tp"] * c["pp"] > 1 else "data parallel")
        ax.set_title(f"{c['workload']}: {what}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("slow GPUs (10 % slower) and a NIC in a thousand at half speed, closed form")
    save(fig, out)


if __name__ == "__main__":
    main()
