#!/usr/bin/python3
"""Megatron sequence parallelism and selective recomputation (Korthikanti et al. 2022).

1. Activation memory follows the paper's formulas, per transformer layer in bytes with 16-bit
   activations (s sequence, b micro-batch, h width, a heads, t tensor-parallel degree), for a GPT
   that has Megatron's dropout (tests/sim/gpt-1.7b-dropout.json; 24 layers, b = 1):
     no parallelism                     sbh(34 + 5as/h)
     tp alone                           sbh(10 + 24/t + 5as/(ht))
     tp with selective recomputation    sbh(10 + 24/t)
     tp with sp                         sbh/t·(34 + 5as/h)
     tp with sp and selective           34·sbh/t
   The whole model's activations are within 10 % of L times the layer's: the rest are the
   embeddings, the final norm, the output layer and the loss.
2. Volumes: sequence parallelism replaces each tensor-parallel all-reduce of B bytes by an
   all-gather and a reduce-scatter of B bytes, the same bytes on a ring; the input all-gathered
   again for the weight gradients and the norms' gradient sum come on top, under their own
   purposes.
3. The simulation agrees with the closed form within 2 % on 32 and 64 GPUs of ThetaGPU.
4. Bad combinations are refused with one line and exit 2.
Usage: check_sp.py DLSIM
"""
import os
import sys
import tempfile

from checklib import check, finish, refused, run

HERE = os.path.dirname(os.path.abspath(__file__))
GPT_DROPOUT = os.path.join(HERE, "gpt-1.7b-dropout.json")
S, B, H, A, L = 2048, 1, 2304, 24, 24

FORMULAS = [  # (label, options, bytes per layer)
    ("no parallelism", ["--gpus", "1"], S * B * H * (34 + 5 * A * S / H)),
    ("tp 8", ["--gpus", "8", "--tp", "8"], S * B * H * (10 + 24 / 8 + 5 * A * S / (H * 8))),
    ("tp 8, selective", ["--gpus", "8", "--tp", "8", "--recompute", "selective"],
     S * B * H * (10 + 24 / 8)),
    ("tp 8, sp", ["--gpus", "8", "--tp", "8", "--sequence-parallel"],
     S * B * H / 8 * (34 + 5 * A * S / H)),
    ("tp 8, sp, selective", ["--gpus", "8", "--tp", "8", "--sequence-parallel", "--recompute",
                             "selective"], 34 * S * B * H / 8),
]

TP_PURPOSES = ("fwd_allreduce", "bwd_dx_allreduce")
SP_PURPOSES = TP_PURPOSES + ("redistribute", "bwd_dy_allgather")


def total(res, purposes, key):
    return sum(c[key] for c in res["collectives"] if c["group"] == "tp" and c["purpose"] in purposes)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        for label, opts, per_layer in FORMULAS:
            res = run(dlsim, d, "--mode", "analytic", "--workload", GPT_DROPOUT, "--batch", "1",
                      "--precision", "bf16", "--ignore-memory", *opts)
            act = res["memory_bytes_per_gpu"]["activations"]
            check(f"Korthikanti's activations, {label}: the whole GPT within 10 % of "
                  f"{L} x the layer's formula", abs(act / (L * per_layer) - 1) < 0.10,
                  f"{act / 1e9:.4f} GB against {L * per_layer / 1e9:.4f} GB")

        # volumes: with NCCL's protocol model off the wire bytes are the algorithms' own
        base = ["--mode", "analytic", "--workload", "gpt-1.7b", "--gpus", "8", "--tp", "8",
                "--batch", "8", "--precision", "bf16", "--ignore-memory", "--nccl-proto", "off"]
        tp = run(dlsim, d, *base)
        sp = run(dlsim, d, *base, "--sequence-parallel")
        # bytes: an all-reduce of B counts B, its all-gather and reduce-scatter B each; the
        # vocabulary-parallel loss's small statistics stay all-reduces in both
        ar = lambda r: sum(c["bytes"] for c in r["collectives"] if c["group"] == "tp" and
                           c["op"] == "allreduce" and c["purpose"] in TP_PURPOSES)
        a = total(tp, TP_PURPOSES, "bytes")
        b = ar(sp) + (total(sp, SP_PURPOSES, "bytes") - ar(sp)) / 2
        check("sp moves tp's all-reduce volume (bytes)", abs(b / a - 1) < 1e-9,
              f"{b / 1e9:.6f} GB against {a / 1e9:.6f} GB")
        a, b = total(tp, TP_PURPOSES, "wire_bytes"), total(sp, SP_PURPOSES, "wire_bytes")
        check("sp moves tp's all-reduce volume (wire bytes on the ring)", abs(b / a - 1) < 1e-9,
              f"{b / 1e9:.6f} GB against {a / 1e9:.6f} GB")
        check("sp: no tp all-reduce of activations is left, only the loss's statistics",
              ar(sp) < 1e-3 * ar(tp) and ar(sp) > 0, f"{ar(sp) / 1e6:.3f} MB against "
              f"{ar(tp) / 1e6:.1f} MB without sp")
        regather = total(sp, ("sp_input_regather",), "bytes")
        check("sp: each column linear gathers its input again for its weight gradient",
              abs(regather / total(sp, ("redistribute",), "bytes") - 1) < 1e-9,
              f"{regather / 1e9:.3f} GB")
        # selective recomputation: one attention forward again per layer, no probabilities kept
        sel = run(dlsim, d, *base, "--recompute", "selective")
        check("selective recomputation costs time and no communication",
              sel["iteration_time_s"] > tp["iteration_time_s"] and
              abs(sel["comm_bytes_per_gpu"] / tp["comm_bytes_per_gpu"] - 1) < 1e-12,
              f"{sel['iteration_time_s'] * 1e3:.2f} ms against {tp['iteration_time_s'] * 1e3:.2f}")

        for gpus, opts in [(32, ["--tp", "8", "--sequence-parallel"]),
                           (32, ["--tp", "4", "--recompute", "selective"]),
                           (64, ["--tp", "8", "--pp", "2", "--schedule", "1f1b",
                                 "--microbatches", "4", "--sequence-parallel", "--recompute",
                                 "selective"])]:
            what = f"{gpus} GPUs {' '.join(opts)}"
            res = {}
            for mode in ("analytic", "sim"):
                res[mode] = run(dlsim, d, "--mode", mode, "--workload", "gpt-1.7b", "--gpus",
                                str(gpus), "--batch", "64", "--precision", "bf16", "--iters", "2",
                                "--ignore-memory", "--reproducible", *opts)
            a, s = res["analytic"]["iteration_time_s"], res["sim"]["iteration_time_s"]
            check(f"{what}: simulation within 2 % of the closed form", abs(s / a - 1) < 0.02,
                  f"{s * 1e3:.3f} ms vs {a * 1e3:.3f} ms")

    refused(dlsim, ["run", "--mode", "analytic", "--workload", "gpt-1.7b", "--gpus", "8",
                    "--sequence-parallel"], "--sequence-parallel")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "resnet50-imagenet", "--gpus", "8",
                    "--tp", "2", "--sequence-parallel"], "--sequence-parallel")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "mixtral-8x1b", "--gpus", "8",
                    "--tp", "2", "--sequence-parallel"], "--sequence-parallel")
    refused(dlsim, ["run", "--mode", "analytic", "--recompute=sometimes"], "--recompute")
    refused(dlsim, ["run", "--mode", "real", "--workload", "gpt-tiny", "--gpus", "4", "--tp", "2",
                    "--sequence-parallel", "--zero", "1"], "--sequence-parallel with --zero 1")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
