#!/usr/bin/python3
"""`dlsim coll` at every size nccl-tests users sweep, on 128 GPUs.

A sweep from 8 B to 8 GiB of the all-reduce on 16 DGX H100 nodes takes, for each size, the
algorithm NCCL's model picks for that size, so each row is the time of that size benchmarked
alone (to 1e-9: the sweep's clock is later, and a sum of doubles differs in its last bits): checked at 8 B, at every size where the algorithm changes, and at the two largest (4 and
8 GiB, past MPI's int counts, whose messages travel as pieces), and a ring phase of 4 GiB sent
as one message each way against step by step. The exact times of messages over
2 GiB against hand computations are smpi.coll.exact.*_16GiB. Sizes past 16 GiB, SMPI's own
algorithms past their int counts, and real data this machine cannot hold are refused with one
line and exit status 2.
Usage: check_coll_sizes.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused

BASE = ["coll", "--platform", "dgx-h100:16", "--gpus", "128", "--op", "allreduce", "--iters", "1"]


def coll(dlsim, d, lo, hi):
    out = os.path.join(d, "c.json")
    p = subprocess.run([dlsim, *BASE, "--min-bytes", str(lo), "--max-bytes", str(hi), "--out", out],
                       check=True, capture_output=True, text=True)
    with open(out) as f:
        return json.load(f)["rows"], p.stdout


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        rows, text = coll(dlsim, d, 8, 8 << 30)
        sizes = [r["size_bytes"] for r in rows]
        check("the sweep reaches 8 GiB", sizes[-1] == 8 << 30, str(sizes[-1]))
        said = [l for l in text.splitlines() if l.startswith("# algorithm")]
        check("the algorithm changes with the size", len(said) >= 2, str(said))
        changes = [i for i in range(len(rows)) if i == 0 or rows[i]["coll"] != rows[i - 1]["coll"]]
        for i in sorted(set(changes + [len(rows) - 2, len(rows) - 1])):
            r = rows[i]
            size = int(r["size_bytes"])
            alone, _ = coll(dlsim, d, size, size)
            check(f"{size} B: {r['coll']} in the sweep, {alone[0]['coll']} alone, the same time",
                  alone[0]["coll"] == r["coll"] and abs(alone[0]["time_us"] / r["time_us"] - 1) < 1e-9,
                  f"{r['time_us']} vs {alone[0]['time_us']} us")
        # a ring phase of any size goes as one message each way (its pieces past MPI's int
        # counts), timed as the step-by-step exchange is: 4 GiB on 32 GPUs, 31 steps of 128 MiB
        for op in ("allgather", "reducescatter", "allreduce"):
            t = []
            for extra in ([], ["--message-level"]):
                out = os.path.join(d, "p.json")
                subprocess.run([dlsim, "coll", "--platform", "dgx-h100:16", "--gpus", "32", "--op", op,
                                "--coll", "ring", "--iters", "1", "--min-bytes", "4GiB",
                                "--max-bytes", "4GiB", "--out", out, *extra],
                               check=True, capture_output=True)
                with open(out) as f:
                    t.append(json.load(f)["rows"][0]["time_us"])
            check(f"{op} of 4 GiB on 32 GPUs: one message a phase within 1e-6 of step by step",
                  abs(t[0] / t[1] - 1) < 1e-6, f"{t[0]} vs {t[1]} us")
        big = rows[-1]
        check("8 GiB at a bus bandwidth a DGX H100 cluster reaches (100-450 GB/s)",
              100 < big["busbw_GBps"] < 450, f"{big['busbw_GBps']} GB/s")
    refused(dlsim, [*BASE, "--max-bytes", "17GiB"], "--max-bytes")
    refused(dlsim, [*BASE[:-2], "--gpus", "2", "--coll", "smpi:lr", "--max-bytes", "16GiB"],
            "--max-bytes")
    refused(dlsim, ["coll", "--mode", "real", "--gpus", "64", "--op", "allreduce", "--check",
                    "--max-bytes", "16GiB"], "--max-bytes")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
