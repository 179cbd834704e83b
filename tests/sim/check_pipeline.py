#!/usr/bin/python3
"""Pipeline schedules against the bubble formula, in closed form and in simulation.

A perfectly balanced model (tests/sim/pipe-balanced.json: eight identical layers) on a platform
whose links have no latency and 10^6 GB/s: with p stages and m micro-batches both GPipe and 1F1B
idle each stage for (p-1) forward+backward slots out of m+p-1, so bubble / (iteration - optimizer)
= (p-1)/(m+p-1) (Huang et al. 2019; Narayanan et al. 2021). Checked within 1%. Interleaved
1F1B with V chunks per rank: (p-1)/(Vm+p-1), the bubble (p-1)/(Vm) of the ideal time.
With data parallelism beside the pipeline (gpt-tiny, pp 4, on a 1 GB/s star), the gradients are
reduced after the schedule: the bubble is that of the pipeline alone and the iteration grows by
the exposed reductions only; and the closed form describes the rank the simulation does (the
busiest stage), its breakdown within 1 % of the iteration. Also, balanced: 1F1B takes the same time as GPipe; and on ResNet-18 with p = m = 8, stage s of 1F1B
stashes p - s micro-batches where GPipe stashes m (Narayanan et al. 2021, §2.2): the same on stage 0,
less everywhere else.
Usage: check_pipeline.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, run

HERE = os.path.dirname(os.path.abspath(__file__))




def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        plat = os.path.join(d, "fast.xml")
        subprocess.run([dlsim, "platform", "--preset", "star", "--nic-lat", "0", "--nic-bw",
                        "1000000GBps", "--switch-lat", "0", "--out", plat], check=True)
        model = os.path.join(HERE, "pipe-balanced.json")
        for mode in ("analytic", "sim"):
            for p, m in ((2, 4), (4, 8), (8, 8), (4, 16)):
                times = {}
                for sched in ("gpipe", "1f1b"):
                    r = run(dlsim, d, "--mode", mode, "--workload", model, "--platform", plat,
                            "--gpus", str(p), "--pp", str(p), "--microbatches", str(m),
                            "--schedule", sched, "--batch", str(4 * m))
                    t = r["iteration_time_s"] - r["compute_by_phase_s"]["optimizer"]
                    got = r["breakdown_s"]["bubble"] / t
                    want = (p - 1) / (m + p - 1)
                    check(f"{mode} {sched} p={p} m={m}: bubble fraction", abs(got / want - 1) < 0.01,
                          f"{got:.4f} vs (p-1)/(m+p-1) = {want:.4f}")
                    times[sched] = r["iteration_time_s"]
                check(f"{mode} p={p} m={m}: balanced stages, 1F1B as fast as GPipe",
                      abs(times["1f1b"] / times["gpipe"] - 1) < 0.01,
                      f"{times['1f1b'] * 1e6:.1f} us vs {times['gpipe'] * 1e6:.1f} us")
        # interleaved 1F1B: V model chunks per rank cut the bubble to (p-1)/(V m) of the ideal
        # time (Narayanan et al. 2021, Section 2.2): bubble / (iteration - optimizer) =
        # (p-1) / (V m + p - 1)
        for mode in ("analytic", "sim"):
            for p, v, m in ((2, 2, 4), (2, 4, 4), (4, 2, 8), (4, 2, 16)):
                r = run(dlsim, d, "--mode", mode, "--workload", model, "--platform", plat,
                        "--gpus", str(p), "--pp", str(p), "--microbatches", str(m),
                        "--schedule", "interleaved", "--virtual-stages", str(v),
                        "--batch", str(4 * m))
                t = r["iteration_time_s"] - r["compute_by_phase_s"]["optimizer"]
                got = r["breakdown_s"]["bubble"] / t
                want = (p - 1) / (v * m + p - 1)
                check(f"{mode} interleaved p={p} V={v} m={m}: bubble fraction",
                      abs(got / want - 1) < 0.01, f"{got:.4f} vs (p-1)/(Vm+p-1) = {want:.4f}")
        # GPT 1.7B, Megatron tp inside a node and interleaved pipelines across nodes: the
        # simulation within 2 % of the closed form
        for gpus, pp, v in ((32, 4, 2), (64, 8, 3)):
            t = {}
            for mode in ("analytic", "sim"):
                t[mode] = run(dlsim, d, "--mode", mode, "--workload", "gpt-1.7b", "--gpus",
                              str(gpus), "--tp", "8", "--pp", str(pp), "--schedule",
                              "interleaved", "--virtual-stages", str(v), "--microbatches", "16",
                              "--batch", "32", "--precision", "bf16", "--iters", "2",
                              "--ignore-memory")["iteration_time_s"]
            check(f"gpt-1.7b {gpus} GPUs tp 8 pp {pp} V {v}: simulation within 2 % of the closed "
                  "form", abs(t["sim"] / t["analytic"] - 1) < 0.02,
                  f"{t['sim'] * 1e3:.3f} ms vs {t['analytic'] * 1e3:.3f} ms")
        # data parallelism beside a pipeline: the gradients are reduced after the schedule, so
        # the pipeline runs as without it (the same bubble) and the iteration grows by the
        # reductions alone; queued in a stage's last backward they held its sends behind them,
        # stage after stage. A 1 GB/s star makes the reductions long next to the stages. The
        # first stage, whose reductions start last and end the iteration, is made the busiest
        # (embeddings and block 0; block 1; the final norm; the head), so the result describes
        # it.
        slow = os.path.join(d, "slow.xml")
        subprocess.run([dlsim, "platform", "--preset", "star", "--nic-bw", "1GBps", "--out", slow],
                       check=True)
        for sched in ("1f1b", "gpipe"):
            r = {}
            for dp in (1, 2):
                r[dp] = run(dlsim, d, "--mode", "analytic", "--workload", "gpt-tiny", "--platform",
                            slow, "--gpus", str(4 * dp), "--pp", "4", "--microbatches", "8",
                            "--schedule", sched, "--batch", str(8 * dp), "--pp-balance",
                            "13,10,1,2")
            check(f"gpt-tiny pp 4 {sched}: the first stage described", all(
                r[dp]["simulation"]["slowest_rank"] == 0 for dp in r))
            b1, b2 = r[1]["breakdown_s"], r[2]["breakdown_s"]
            grew = r[2]["iteration_time_s"] - r[1]["iteration_time_s"]
            check(f"gpt-tiny pp 4 {sched}, dp 2 against dp 1: the same bubble, and the iteration "
                  "longer by the exposed gradient reductions alone",
                  abs(b2["bubble"] - b1["bubble"]) <= 1e-12 and grew > 0 and
                  abs(grew - (b2["exposed_comm"] - b1["exposed_comm"])) <= 1e-12,
                  f"bubble {b1['bubble'] * 1e6:.3f} / {b2['bubble'] * 1e6:.3f} us, iteration "
                  f"+{grew * 1e6:.3f} us, exposed comm "
                  f"+{(b2['exposed_comm'] - b1['exposed_comm']) * 1e6:.3f} us")
        # the result describes the same rank in both modes: in steady state every stage takes
        # the iteration, and the busiest (the bottleneck stage) is described; from a common
        # start the first stage would end last, and the closed form described it (compute 9 %
        # and bubble 90 % where the simulation said 81 % and 19 %)
        for sched in ("1f1b", "gpipe"):
            r = {mode: run(dlsim, d, "--mode", mode, "--workload", "gpt-tiny", "--platform", slow,
                           "--gpus", "8", "--pp", "4", "--microbatches", "8", "--schedule",
                           sched, "--batch", "16") for mode in ("analytic", "sim")}
            a, s = r["analytic"], r["sim"]
            it = s["iteration_time_s"]
            gap = max(abs(a["breakdown_s"][k] - s["breakdown_s"][k]) for k in s["breakdown_s"])
            check(f"gpt-tiny pp 4 dp 2 {sched}: the closed form describes the simulation's rank, "
                  "its breakdown within 1 % of the iteration",
                  a["simulation"]["slowest_rank"] == s["simulation"]["slowest_rank"] and
                  gap <= 0.01 * it,
                  f"rank {a['simulation']['slowest_rank']} / {s['simulation']['slowest_rank']}, "
                  f"largest difference {gap / it * 100:.3f} % of {it * 1e6:.1f} us")
        for mode in ("analytic", "sim"):
            res = {}
            for sched in ("gpipe", "1f1b"):
                res[sched] = run(dlsim, d, "--mode", mode, "--workload", "resnet18-cifar100",
                                 "--platform", "thetagpu", "--gpus", "8", "--pp", "8",
                                 "--schedule", sched, "--microbatches", "8")
            # GPipe stashes all m micro-batches on every stage; 1F1B at most p - stage
            g, f = res["gpipe"], res["1f1b"]
            ga = [x["activation_bytes"] for x in g["ranks"]]
            fa = [x["activation_bytes"] for x in f["ranks"]]
            check(f"{mode} resnet18 pp=8 m=8: 1F1B stage s stashes (8-s)/8 of GPipe's",
                  all(abs(fa[s] - ga[s] * (8 - s) / 8) <= 1e-6 * ga[s] for s in range(8)),
                  " ".join(f"{a / 1e6:.1f}/{b / 1e6:.1f}" for a, b in zip(fa, ga)) + " MB")
            check(f"{mode} resnet18 pp=8 m=8: 1F1B's activations summed over GPUs are lower",
                  sum(fa) < sum(ga), f"{sum(fa) / 1e9:.3f} GB vs {sum(ga) / 1e9:.3f} GB")
            check(f"{mode} resnet18 pp=8 m=8: 1F1B's peak is not higher",
                  f["memory_bytes_per_gpu"]["peak"] <= g["memory_bytes_per_gpu"]["peak"],
                  f"{f['memory_bytes_per_gpu']['peak'] / 1e9:.3f} GB vs "
                  f"{g['memory_bytes_per_gpu']['peak'] / 1e9:.3f} GB")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
