#!/usr/bin/python3
"""Mixture of experts: all-to-all volumes against the closed-form count, and time against skew.

1. Uniform routing: every MoE all-to-all (dispatch and combine, forward and backward) carries
   tokens x k x hidden x bytes per rank, of which (ep-1)/ep leaves the rank: with moe-gpt-8x
   (h = 1024, top-2, sequences of 1024 tokens), 8 GPUs, ep 4, batch 8 (one sequence per rank),
   fp32: 1024 x 2 x 1024 x 4 x 3/4 = 6,291,456 bytes per call, 4 calls per MoE layer (6 layers).
2. Skewed routing (zipf:S): the busiest expert sets the pace, so without a capacity limit
   (--capacity-factor 0) the iteration grows with S; with the workload's capacity factor (1.25)
   it grows until capacity caps the busiest expert, and tokens are dropped beyond it. The result
   reports the imbalance and the dropped tokens. Checked in closed form and in simulation.
Usage: check_moe.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, run



def run_moe(dlsim, d, *args):
    return run(dlsim, d, "--workload", "moe-gpt-8x", "--platform", "thetagpu", "--gpus", "8",
               "--ep", "4", "--batch", "8", "--iters", "2", *args)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        for mode in ("analytic", "sim"):
            r = run_moe(dlsim, d, "--mode", mode)
            rows = [c for c in r["collectives"] if c["purpose"] in ("moe_dispatch", "moe_combine")]
            calls = sum(c["calls"] for c in rows)
            wire = sum(c["wire_bytes"] for c in rows)
            check(f"{mode} uniform: 4 all-to-alls per MoE layer", calls == 24, f"{calls} calls")
            check(f"{mode} uniform: tokens x k x h x bytes x (ep-1)/ep per call",
                  calls and abs(wire / calls - 6291456) < 1, f"{wire / max(calls, 1):.0f} B")
            check(f"{mode} uniform: no imbalance, nothing dropped",
                  r["moe"]["imbalance_max_over_mean"] == 1 and r["moe"]["dropped_tokens_per_iteration"] == 0,
                  json.dumps(r["moe"]))
            for cf in ("0", "1.25"):
                times = []
                for s in ("uniform", "zipf:0.3", "zipf:0.6", "zipf:1.2"):
                    r = run_moe(dlsim, d, "--mode", mode, "--routing", s, "--capacity-factor", cf)
                    times.append((s, r["iteration_time_s"], r["moe"]["imbalance_max_over_mean"],
                                  r["moe"]["dropped_fraction"]))
                detail = ", ".join(f"{s}: {t * 1e3:.2f} ms (max/mean {i:.2f}, dropped {100 * f:.1f}%)"
                                   for s, t, i, f in times)
                if cf == "0":
                    grows = all(b[1] > a[1] for a, b in zip(times, times[1:]))
                    check(f"{mode}, no capacity limit: time grows with skew, nothing dropped",
                          grows and all(f == 0 for _, _, _, f in times), detail)
                else:
                    check(f"{mode}, capacity 1.25: skew costs time, drops grow with skew",
                          times[1][1] > times[0][1] and
                          all(b[3] >= a[3] for a, b in zip(times, times[1:])) and times[-1][3] > 0,
                          detail)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
