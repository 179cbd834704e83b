#!/usr/bin/python3
"""Summary of a Chrome trace from `dlsim run --mode sim --trace`: per rank, the busy time of
its compute and communication streams (bars, with the share of the span), and the timeline of
each stream underneath as broken bars coloured by phase.

Usage: analysis/timeline.py TRACE.json --out PREFIX [--ranks N]
"""
import argparse
import json
import sys
from collections import defaultdict

sys.path.insert(0, __import__("os").path.dirname(__file__))
from plotlib import plt, save  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="Chrome trace-event JSON")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    ap.add_argument("--ranks", type=int, default=16, help="show at most this many ranks")
    a = ap.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    threads = {}
    spans = defaultdict(list)  # (pid, tid) -> [(ts, dur, cat)]
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans[(e["pid"], e["tid"])].append((e["ts"], e["dur"], e.get("cat", "")))
    if not spans:
        sys.exit(f"{a.trace}: no complete ('X') events")
    ranks = sorted({p for p, _ in spans})[: a.ranks]
    t0 = min(s[0] for v in spans.values() for s in v)
    t1 = max(s[0] + s[1] for v in spans.values() for s in v)
    span_us = t1 - t0
    streams = sorted({t for _, t in spans})
    fig, (ax_b, ax_t) = plt.subplots(2, 1, figsize=(10, 3 + 0.5 * len(ranks) * len(streams)),
                                     gridspec_kw={"height_ratios": [1, 1.4]})
    width = 0.8 / len(streams)
    for k, tid in enumerate(streams):
        name = threads.get((ranks[0], tid), f"stream {tid}")
        busy = [sum(d for _, d, _ in spans.get((r, tid), [])) / 1e3 for r in ranks]
        ax_b.bar([i + k * width for i in range(len(ranks))], busy, width, label=name)
        for i, b in enumerate(busy):
            ax_b.text(i + k * width, b, f"{100 * b * 1e3 / span_us:.0f}%", ha="center",
                      va="bottom", fontsize=7)
    ax_b.set_xticks([i + width * (len(streams) - 1) / 2 for i in range(len(ranks))])
    ax_b.set_xticklabels([f"rank {r}" for r in ranks])
    ax_b.set_ylabel("busy time (ms)")
    ax_b.set_title(f"{a.trace.split('/')[-1]}: busy time per stream over {span_us / 1e3:.3f} ms")
    ax_b.legend(fontsize=8)
    cats = sorted({s[2] for v in spans.values() for s in v})
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(cats)}
    labels = []
    for row, (r, tid) in enumerate((r, t) for r in ranks for t in streams):
        for ts, dur, cat in spans.get((r, tid), []):
            ax_t.broken_barh([((ts - t0) / 1e3, dur / 1e3)], (row - 0.4, 0.8), color=colors[cat])
        labels.append(f"rank {r} {threads.get((r, tid), tid)}")
    ax_t.set_yticks(range(len(labels)))
    ax_t.set_yticklabels(labels, fontsize=7)
    ax_t.invert_yaxis()
    ax_t.set_xlabel("time (ms)")
    ax_t.set_xlim(0, span_us / 1e3)
    ax_t.legend(handles=[Patch(color=colors[c], label=c) for c in cats], fontsize=7,
                ncol=len(cats), loc="lower right")
    save(fig, a.out)


if __name__ == "__main__":
    main()
