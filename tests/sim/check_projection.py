#!/usr/bin/python3
"""The whole-run projection (--tokens, --epochs) against the run it projects, by hand.

- Failures off: the wall time is the iterations times the iteration time, in closed form and in
  the Monte Carlo; the iterations are the budget in whole batches of sequences.
- The checkpoint holds the model states the run holds, once: with ZeRO 3 over dp 4 the four
  ranks' weights and optimizer state add up to it; without sharding (dp 2 × tp 2), 14 bytes a
  parameter.
- Energy per iteration equals the power model evaluated by hand on the result's own rank rows
  (idle power all the iteration, the rest of the board power for compute-bound kernels, the
  bandwidth-bound kernels' share), and in simulation the rank rows' kernel work equals the closed
  form's.
- Failures on: the Monte Carlo mean is within four standard errors of Daly's expectation; the same
  seed gives byte-identical results, another seed other draws.
- Bad options: one line naming the option, exit 2, nothing written.
Usage: check_projection.py DLSIM
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, run

GPT = ["--workload", "gpt-1.7b", "--platform", "thetagpu", "--precision", "bf16",
       "--ignore-memory", "--reproducible"]


def gpu_energy(r, idle, board, s_mem, bw_eff):
    """Σ over rank rows of idle·T + (board − idle)·(gemm + s_mem·min(rest, Q/bw_eff))."""
    T = r["iteration_time_s"]
    e = 0
    for k in r["ranks"]:
        gemm = min(k["gemm_kernel_s"], k["compute_s"])
        rest = k["compute_s"] - gemm
        e += idle * T + (board - idle) * (gemm + s_mem * min(rest, k["elementwise_mem_bytes"] / bw_eff))
    return e


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        # failures off
        r = run(dlsim, d, "--mode", "analytic", *GPT, "--gpus", "8", "--batch", "16",
                "--tokens", "1e9", "--failures", "none")
        p = r["projection"]
        seq = 2048
        its = math.ceil(1e9 / (16 * seq))
        check("iterations: the tokens in whole batches", p["iterations"] == its,
              f"{p['iterations']} vs {its}")
        want = its * r["iteration_time_s"]
        check("failures off: wall = iterations x iteration time (closed form)",
              abs(p["wall_s_closed_form"] / want - 1) < 1e-12, f"{p['wall_s_closed_form']} vs {want}")
        check("failures off: wall = iterations x iteration time (Monte Carlo)",
              abs(p["wall_s"] / want - 1) < 1e-12 and p["goodput"] == 1, f"{p['wall_s']}")
        check("failures off: no checkpoint, no interruption",
              p["ckpt_interval_s"] == 0 and p["interruptions"] == 0)

        # energy by hand on the rank rows, with round power figures
        r = run(dlsim, d, "--mode", "analytic", *GPT, "--gpus", "8", "--batch", "16",
                "--tokens", "1e9", "--failures", "none", "--gpu-idle-w", "50", "--gpu-board-w",
                "450", "--mem-power-share", "0.5", "--nic-w", "10", "--switch-port-w", "5",
                "--host-w", "1000", "--pue", "1.2")
        p = r["projection"]
        e = p["energy_per_iteration_j"]
        bw_eff = 1555e9 * 0.8  # a100-40gb, thetagpu's GPU
        T = r["iteration_time_s"]
        gpu = gpu_energy(r, 50, 450, 0.5, bw_eff)
        check("energy: the GPUs' by hand", abs(e["gpu_busy"] + e["gpu_idle"] - gpu) < 1e-9 * gpu,
              f"{e['gpu_busy'] + e['gpu_idle']:.3f} J vs {gpu:.3f} J")
        # thetagpu: 8 GPUs and 8 NICs a node; 8 NICs on one switch, a port each
        other = (10 * 8 + 5 * 8 + 1000 * 1) * T
        check("energy: NICs, switch ports and the host by hand",
              abs(e["nic"] + e["switch"] + e["host"] - other) < 1e-9 * other)
        check("energy: the PUE on everything",
              abs(e["total"] - 1.2 * (gpu + other)) < 1e-9 * e["total"])
        check("energy of the run: the iterations' (failures off)",
              abs(p["energy_j"] - p["iterations"] * e["total"]) < 1e-9 * p["energy_j"])

        # the kernel work of the rank rows is the op lists': simulation = closed form
        rs = run(dlsim, d, "--mode", "sim", *GPT, "--gpus", "8", "--batch", "16", "--iters", "2")
        ra = run(dlsim, d, "--mode", "analytic", *GPT, "--gpus", "8", "--batch", "16")
        same = all(a["kernel_flops"] == s["kernel_flops"] and
                   a["kernel_mem_bytes"] == s["kernel_mem_bytes"] and
                   a["elementwise_mem_bytes"] == s["elementwise_mem_bytes"]
                   for a, s in zip(ra["ranks"], rs["ranks"]))
        check("rank rows' kernel work: simulation = closed form", same and len(rs["ranks"]) == 8)
        gs, ga = rs["ranks"][0]["gemm_kernel_s"], ra["ranks"][0]["gemm_kernel_s"]
        check("compute-bound kernel time: simulation = closed form", abs(gs / ga - 1) < 1e-6,
              f"{gs} vs {ga}")

        # checkpoint bytes = the model states held, once: ZeRO 3 over dp 4 splits them into four
        # shards that add up to it; a replicated run (dp 2 x tp 2) holds 14 bytes a parameter
        # (ZeRO's 16 bytes of mixed-precision Adam, Rajbhandari et al. 2020, Section 3.1, less
        # the 2 of fp16 gradients; here bf16 weights, fp32 master weights and moments)
        r = run(dlsim, d, "--mode", "analytic", *GPT, "--gpus", "4", "--batch", "16", "--dp", "4",
                "--zero", "3", "--tokens", "1e9")
        m = r["memory_bytes_per_gpu"]
        held = (m["params"] + m["optimizer"]) * 4
        ck = r["projection"]["checkpoint"]["bytes"]
        check("checkpoint bytes = the four ZeRO 3 shards' weights and optimizer state",
              abs(ck / held - 1) < 1e-12, f"{ck:.6g} vs {held:.6g}")
        r = run(dlsim, d, "--mode", "analytic", *GPT, "--gpus", "4", "--batch", "16", "--dp", "2",
                "--tp", "2", "--tokens", "1e9")
        ck = r["projection"]["checkpoint"]["bytes"]
        check("checkpoint bytes = 14 bytes a parameter (replicated, bf16 mixed precision)",
              ck == 14 * r["model"]["params"], f"{ck:.6g} vs {14 * r['model']['params']:.6g}")

        # failures on: the Monte Carlo against Daly, and determinism
        args = ["--mode", "analytic", *GPT, "--gpus", "8", "--batch", "16", "--tokens", "3e11",
                "--failures", "job=20", "--mc-samples", "2000"]
        r = run(dlsim, d, *args)
        p = r["projection"]
        se = p["wall_s_stddev"] / math.sqrt(p["monte_carlo_samples"])
        check("failures on: Monte Carlo mean within 4 standard errors of Daly's expectation",
              abs(p["wall_s"] - p["wall_s_closed_form"]) < 4 * se,
              f"{p['wall_s']:.1f} s vs {p['wall_s_closed_form']:.1f} s (se {se:.1f} s)")
        check("failures on: interruptions about wall / MTBF",
              abs(p["interruptions"] / (p["wall_s"] / (20 * 3600)) - 1) < 0.05,
              f"{p['interruptions']:.2f}")
        a = os.path.join(d, "a.json")
        b = os.path.join(d, "b.json")
        for f in (a, b):
            subprocess.run([dlsim, "run", *args, "--out", f], check=True, stdout=subprocess.DEVNULL)
        check("same seed: byte-identical result", open(a, "rb").read() == open(b, "rb").read())
        subprocess.run([dlsim, "run", *args, "--seed", "2", "--out", b], check=True,
                       stdout=subprocess.DEVNULL)
        check("another seed: other draws",
              json.load(open(b))["projection"]["wall_s"] != p["wall_s"])

        # bad options
        never = os.path.join(d, "never.json")
        base = ["run", "--mode", "analytic", *GPT, "--gpus", "8", "--batch", "16", "--out", never]
        refused(dlsim, [*base, "--tokens", "-5"], "--tokens")
        refused(dlsim, [*base, "--tokens", "0x10"], "--tokens")
        refused(dlsim, [*base, "--tokens", "1e9", "--epochs", "1"], "--tokens and --epochs")
        refused(dlsim, [*base, "--tokens", "1e9", "--failures", "gpu=0"], "--failures")
        refused(dlsim, [*base, "--tokens", "1e9", "--ckpt", "sometimes"], "--ckpt")
        refused(dlsim, [*base, "--tokens", "1e9", "--pue", "0.5"], "--pue")
        refused(dlsim, [*base, "--tokens", "1e9", "--mc-samples", "0"], "--mc-samples")
        refused(dlsim, [*base, "--failures", "none"], "--tokens T or --epochs E")
        refused(dlsim, ["run", "--mode", "analytic", "--workload", "resnet50-imagenet", "--gpus",
                        "8", "--tokens", "1e9", "--out", never], "--tokens")
        refused(dlsim, [*base, "--tokens", "1e9", "--failures", "job=1e-4"], "--failures")
        check("nothing written after a refusal", not os.path.exists(never))
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
