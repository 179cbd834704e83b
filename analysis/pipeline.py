#!/usr/bin/python3
"""Pipeline schedules side by side, from a sweep JSONL whose rows carry a schedule label and vary
the micro-batches (analysis/studies/interleaved.json): the waits of the stage the result
describes (the busiest) as a share of the iteration against the micro-batches, with each
schedule's formula dotted ((p-1)/(V·m + p-1): GPipe and 1F1B have V = 1), the time per
iteration, and the activation memory of the busiest GPU. The waits are the bubble and, where the
first and last stages sum their tied embedding's gradients after the schedule (group "embed"),
the time the stage spends in that sum, most of it waiting for the first stage's last backward.

Usage: analysis/pipeline.py SWEEP.jsonl --out PREFIX
"""
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, result_rows, save  # noqa: E402


def waits_s(r):
    """The described stage's waits for other stages: its bubble, and its time in the tied
    embedding's gradient sum, s."""
    return r["breakdown_s"]["bubble"] + sum(c["time_s"] for c in r.get("collectives", [])
                                            if c["group"] == "embed")


def main():
    rows, out = result_rows(__doc__)
    labels = sorted({r.get("label", "") for r in rows},
                    key=lambda lab: min(r["config"].get("virtual_stages", 1)
                                        for r in rows if r.get("label", "") == lab))
    c0 = rows[0]["config"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for li, lab in enumerate(labels):
        mine = sorted((r for r in rows if r.get("label", "") == lab),
                      key=lambda r: r["config"]["microbatches"])
        ms = [r["config"]["microbatches"] for r in mine]
        col = colors[li % len(colors)]
        p, v = mine[0]["config"]["pp"], mine[0]["config"].get("virtual_stages", 1)
        axes[0].plot(ms, [100 * waits_s(r) / r["iteration_time_s"] for r in mine], "o-",
                     color=col, label=lab)
        axes[0].plot(ms, [100 * (p - 1) / (v * m + p - 1) for m in ms], ":", color=col)
        axes[1].plot(ms, [r["iteration_time_s"] for r in mine], "o-", color=col, label=lab)
        axes[2].plot(ms, [r["memory_bytes_per_gpu"]["activations"] / 1e9 for r in mine], "o-",
                     color=col, label=lab)
    axes[0].set_ylabel("busiest stage's waits (% of the iteration)\n"
                       "bubble + tied embedding's sum; dotted: (p-1)/(Vm+p-1)")
    axes[1].set_ylabel("time per iteration (s)")
    axes[2].set_ylabel("activations on the busiest GPU (GB)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batches per pipeline (m)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{c0['workload']} on {c0['gpus']} GPUs: tp {c0['tp']} x pp {c0['pp']} x "
                 f"dp {c0['dp']}, batch {c0['batch']}")
    save(fig, out)


if __name__ == "__main__":
    main()
