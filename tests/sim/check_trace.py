#!/usr/bin/python3
"""The Chrome trace of a run: slices nest exactly, flows join what they say, counters add up.

For a 3-D GPT (tp 2 x pp 2 x dp 2, 1F1B), a data-parallel CNN and an expert-parallel MoE in
simulation, and a two-stage pipeline run for real, the --trace file is read with exact decimals
and checked:
- on every (process, thread) track, each slice ends no later than the next one starts: ts and
  dur are whole nanoseconds, so the file says exactly what the record says (Perfetto refuses
  overlapping slices on a track, other viewers draw them as a staircase);
- every flow has one start and at least one finish, each inside a slice of its track; a
  point-to-point flow goes from a "send to B" slice on rank A to a "recv from A" slice on rank
  B, one per send; a collective flow starts on the member that started the call last, and
  finishes on the other members' slices of the same collective;
- the "memory" counter of every rank peaks at that rank's planned peak memory (result
  ranks[].peak_memory_bytes), and "comm in flight" is never negative and ends at zero;
- every slice has its iteration, stage and micro-batch in args; messages their peer and bytes.
Usage: check_trace.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from decimal import Decimal

from checklib import check, finish

CASES = [
    ("3-D GPT, 1F1B", ["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                       "--schedule", "1f1b", "--microbatches", "4", "--batch", "16"], "sim"),
    ("data-parallel CNN", ["--workload", "cnn-small", "--gpus", "4", "--batch", "64",
                           "--bucket-mb", "1"], "sim"),
    ("expert-parallel MoE", ["--workload", "moe-gpt-8x", "--gpus", "4", "--ep", "4",
                             "--batch", "8", "--routing", "zipf:1.2"], "sim"),
    ("real GPipe", ["--workload", "mlp-deep", "--gpus", "2", "--pp", "2", "--microbatches", "2",
                    "--batch", "8"], "real"),
]


def inside(slices, ts):
    return any(s["ts"] <= ts <= s["ts"] + s["dur"] for s in slices)


def check_case(name, t, r):
    ev = t["traceEvents"]
    slices = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append(e)
    worst = None
    for key, ss in slices.items():
        ss.sort(key=lambda e: (e["ts"], e["dur"]))
        for a, b in zip(ss, ss[1:]):
            if a["ts"] + a["dur"] > b["ts"]:
                worst = worst or (key, a["name"], a["ts"] + a["dur"], b["name"], b["ts"])
    check(f"{name}: slices of a track never overlap ({sum(map(len, slices.values()))} slices)",
          worst is None, str(worst))
    check(f"{name}: ts and dur are whole nanoseconds",
          all((e[k] * 1000) % 1 == 0 for ss in slices.values() for e in ss for k in ("ts", "dur")))
    flows = defaultdict(lambda: {"s": [], "f": []})
    for e in ev:
        if e["ph"] in "sf":
            flows[(e["cat"], e["id"])][e["ph"]].append(e)
    bad = [k for k, f in flows.items() if len(f["s"]) != 1 or not f["f"]]
    check(f"{name}: every flow has one start and a finish ({len(flows)} flows)", not bad, str(bad[:3]))
    anchored = all(inside(slices[(e["pid"], e["tid"])], e["ts"])
                   for f in flows.values() for e in f["s"] + f["f"])
    check(f"{name}: every flow event lies in a slice of its track", anchored)
    sends = sum(1 for ss in slices.values() for e in ss if e["name"].startswith("send to"))
    p2p = [f for (cat, _), f in flows.items() if cat == "p2p"]
    check(f"{name}: one point-to-point flow per send ({sends})", len(p2p) == sends, str(len(p2p)))
    ok = True
    for f in p2p:
        s, (g,) = f["s"][0], f["f"]
        src = [e for e in slices[(s["pid"], s["tid"])] if e["ts"] <= s["ts"] <= e["ts"] + e["dur"]]
        dst = [e for e in slices[(g["pid"], g["tid"])] if e["ts"] <= g["ts"] <= e["ts"] + e["dur"]]
        ok &= any(e["name"] == f"send to {g['pid']}" for e in src) and \
            any(e["name"] == f"recv from {s['pid']}" for e in dst)
    check(f"{name}: point-to-point flows go from the send to its receive", ok)
    ok, n = True, 0
    for (cat, _), f in flows.items():
        if cat != "collective":
            continue
        n += 1
        s = f["s"][0]
        starts = {}
        for e in f["f"] + [s]:
            for x in slices[(e["pid"], e["tid"])]:
                if x["ts"] <= e["ts"] <= x["ts"] + x["dur"] and x["args"].get("group"):
                    starts[e["pid"]] = x["ts"]
        ok &= len(starts) == len(f["f"]) + 1 and starts[s["pid"]] == max(starts.values())
    check(f"{name}: collective flows start on the last member to arrive ({n})", ok)
    peak = {x["rank"]: x["peak_memory_bytes"] for x in r["ranks"]}
    mem, comm = defaultdict(list), defaultdict(list)
    for e in ev:
        if e["ph"] == "C":
            (mem if e["name"] == "memory" else comm)[e["pid"]].append(e)
    diff = {p: (max(c["args"]["bytes"] for c in cs), peak.get(p)) for p, cs in mem.items()}
    check(f"{name}: each rank's memory counter peaks at its planned peak",
          set(diff) == set(peak) and all(abs(a - b) <= 1 for a, b in diff.values()),
          str(sorted(diff.items())[:3]))
    check(f"{name}: bytes in flight never negative, zero at the end",
          all(min(c["args"]["bytes"] for c in cs) >= 0 and
              sorted(cs, key=lambda c: c["ts"])[-1]["args"]["bytes"] == 0 for cs in comm.values()))
    missing = [e["name"] for ss in slices.values() for e in ss
               if not {"iter", "stage", "microbatch"} <= set(e["args"]) or
               (e["name"].startswith(("send", "recv")) and not {"peer", "bytes"} <= set(e["args"]))]
    check(f"{name}: slices carry iteration, stage, micro-batch (and peer, bytes)", not missing,
          str(missing[:3]))


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        for name, opts, mode in CASES:
            tr, out = os.path.join(d, "t.json"), os.path.join(d, "r.json")
            subprocess.run([dlsim, "run", "--mode", mode, "--iters", "2", *opts, "--trace", tr,
                            "--out", out], check=True, stdout=subprocess.DEVNULL)
            with open(tr) as f:
                t = json.loads(f.read(), parse_float=Decimal)
            with open(out) as f:
                r = json.load(f)
            check_case(name, t, r)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
