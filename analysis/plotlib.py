"""Shared plumbing of the analysis scripts: reading sweep rows and writing PREFIX.png/.svg."""
import csv
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def read_rows(path):
    """Rows of a sweep CSV (dicts of strings) or JSONL (dicts), only those with status ok."""
    if path.endswith(".jsonl"):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    return [r for r in rows if r.get("status", "ok") == "ok"]


def num(row, key, default=0.0):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else default


def save(fig, prefix):
    """Writes PREFIX.png and PREFIX.svg and prints their paths."""
    d = os.path.dirname(prefix)
    if d:
        os.makedirs(d, exist_ok=True)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{prefix}.{ext}", dpi=110)
        print(f"{prefix}.{ext}")
    plt.close(fig)


def result_rows(doc):
    """Parses the usual arguments of a study script (a sweep JSONL and --out PREFIX, `doc` its
    docstring) and returns the rows that hold a result, and the prefix; exits if there are none."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("jsonl", help="sweep JSONL (dlsim sweep)")
    ap.add_argument("--out", required=True, help="write PREFIX.png and PREFIX.svg")
    a = ap.parse_args()
    rows = [r for r in read_rows(a.jsonl) if "config" in r]
    if not rows:
        sys.exit(f"{a.jsonl}: no result rows with status ok")
    return rows, a.out
