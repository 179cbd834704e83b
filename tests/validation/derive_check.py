#!/usr/bin/python3
"""How far a derived kernel database is from one measured on the GPU it stands for: derives
TO's device from FROM (`dlsim kbench --derive-for`), then compares every key both hold, per
kernel class (kernel and direction) and precision.

  tests/validation/derive_check.py FROM.json TO.json [--dlsim build/dlsim] [--md TABLE.md]

FROM and TO are databases measured with the same backend (both dlsim's kernels, or both
PyTorch's) on two GPUs. Per class: the number of keys, the median of derived/measured - 1, the
mean of its magnitude, the share of keys within 10 %, and the error of the class's summed time
(what an iteration made of those kernels sees). Exit status 0; the table goes to stdout (and
--md).
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pclass(p):
    return "16-bit" if p in ("fp16", "bf16") else p


def table(frm, to, derived):
    meas = {e["key"]: e for e in to["entries"]}
    groups = collections.defaultdict(list)
    for e in derived["entries"]:
        m = meas.get(e["key"])
        if not m or not m.get("median_s") or not e.get("median_s"):
            continue
        if e["kname"].startswith("flatten"):
            continue  # a view: no kernel
        groups[(e["kname"], pclass(e["precision"]))].append((e["median_s"], m["median_s"]))
    rows = []
    for (kname, pc), xs in sorted(groups.items()):
        errs = [d / m - 1 for d, m in xs]
        rows.append({"class": kname, "precision": pc, "n": len(xs),
                     "median_err": statistics.median(errs),
                     "mean_abs_err": sum(abs(x) for x in errs) / len(errs),
                     "within_10pct": sum(abs(x) <= 0.10 for x in errs) / len(errs),
                     "sum_err": sum(d for d, _ in xs) / sum(m for _, m in xs) - 1})
    allx = [x for xs in groups.values() for x in xs]
    total = {"n": len(allx), "sum_err": sum(d for d, _ in allx) / sum(m for _, m in allx) - 1,
             "within_10pct": sum(abs(d / m - 1) <= 0.10 for d, m in allx) / len(allx),
             "median_err": statistics.median(d / m - 1 for d, m in allx)}
    return rows, total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("frm", metavar="FROM.json")
    ap.add_argument("to", metavar="TO.json")
    ap.add_argument("--dlsim", default=os.path.join(ROOT, "build", "dlsim"))
    ap.add_argument("--md", help="also write the table here")
    a = ap.parse_args(argv)
    with open(a.frm) as f:
        frm = json.load(f)
    with open(a.to) as f:
        to = json.load(f)
    spec = to["provenance"].get("spec_key") or to["provenance"].get("device")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "derived.json")
        p = subprocess.run([a.dlsim, "kbench", "--derive-for", spec, "--from", a.frm, "--out", out],
                           capture_output=True, text=True)
        if p.returncode:
            print(f"derive_check.py: dlsim kbench --derive-for {spec}: {p.stderr.strip()}",
                  file=sys.stderr)
            return 2
        with open(out) as f:
            derived = json.load(f)
    rows, total = table(frm, to, derived)
    fp, tp = frm["provenance"], to["provenance"]
    lines = [f"Derived {spec} ({tp.get('backend')}) from {os.path.basename(a.frm)} "
             f"({fp.get('device_full_name')}) against {os.path.basename(a.to)} measured on "
             f"{tp.get('device_full_name')}: {total['n']} keys, summed time "
             f"{total['sum_err']:+.1%}, median {total['median_err']:+.1%}, "
             f"{total['within_10pct']:.0%} within 10 %.", "",
             "| kernel | precision | keys | median error | mean abs. error | within 10 % "
             "| summed time |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['class']} | {r['precision']} | {r['n']} | {r['median_err']:+.1%} | "
                     f"{r['mean_abs_err']:.1%} | {r['within_10pct']:.0%} | {r['sum_err']:+.1%} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
