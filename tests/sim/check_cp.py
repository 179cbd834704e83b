#!/usr/bin/python3
"""Context parallelism (--cp, --cp-style ring|ulysses) and --seq-len.

Llama 3 8B at a sequence of 16,384 on 32 and 64 GPUs of ThetaGPU (tp 8 or 4 inside a node, cp
across nodes):
1. The simulation agrees with the closed form within 2 %.
2. Ring attention's bytes per step, by hand: each rank's K and V for its 1/cp of the tokens,
   kv = 2·kv_heads·head_dim/tp · s/cp · b · 2 bytes; forward cp−1 steps of kv; backward K and V
   (kv), cp−2 messages of K, V and the gradients of the chunk held before (2·kv), those of the
   last but one chunk (kv) and the last chunk's home (kv): (2·cp − 1)·kv; per attention layer
   and micro-batch.
3. Every layer keeps 1/cp of its activations: the stash is the cp = 1 run's over cp.
4. The gradients of the weights are summed over dp·cp ranks.
5. Ring attention's exchanges hide under the attention of the chunk held: beyond the blocking
   tensor-parallel collectives, less than half of their time is exposed.
6. Bad combinations are refused with one line and exit 2.
7. Kernel times under cp are those of the kernels cp runs: `dlsim kbench --cp 2` measures each
   layer at 1/cp of the tokens (every shape and FLOP count that of the same model at half the
   sequence without cp), a ring step as the attention of half the sequence, Ulysses' attention as
   whole sequences for half the heads (the shape tp 2 measures); a run reads every kernel of its
   layout from the database kbench wrote for it, and a database measured under tp 2 times none
   of a cp 2 run's kernels (ring steps and token-split layers are other shapes of equal work).
Usage: check_cp.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, run

S, H, KV, HS, L = 16384, 32, 8, 128, 32  # llama3-8b at --seq-len 16384
BASE = ["--workload", "llama3-8b", "--seq-len", str(S), "--batch", "4", "--precision", "bf16",
        "--ignore-memory", "--iters", "2", "--reproducible"]


def total(res, purpose, key="bytes"):
    return sum(c[key] for c in res["collectives"] if c["purpose"] == purpose)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        cases = [(32, ["--tp", "8", "--cp", "4"]),
                 (32, ["--tp", "4", "--cp", "2", "--cp-style", "ulysses"]),
                 (64, ["--tp", "8", "--cp", "4", "--pp", "2", "--schedule", "1f1b",
                       "--microbatches", "2"])]
        for gpus, opts in cases:
            what = f"{gpus} GPUs {' '.join(opts)}"
            res = {m: run(dlsim, d, "--mode", m, "--gpus", str(gpus), *BASE, *opts)
                   for m in ("analytic", "sim")}
            a, s = res["analytic"]["iteration_time_s"], res["sim"]["iteration_time_s"]
            check(f"{what}: simulation within 2 % of the closed form", abs(s / a - 1) < 0.02,
                  f"{s * 1e3:.3f} ms vs {a * 1e3:.3f} ms")

        # ring bytes: 32 GPUs, tp 8, cp 4, dp 1: 4 samples in one micro-batch
        tp, cp, b = 8, 4, 4
        ring = run(dlsim, d, "--mode", "analytic", "--gpus", "32", *BASE, "--tp", "8", "--cp", "4")
        kv = 2 * KV * HS / tp * (S / cp) * b * 2
        want = L * ((cp - 1) * kv + kv + (cp - 2) * 2 * kv + kv + kv)
        got = total(ring, "cp_kv_exchange")
        check("ring attention's K/V bytes per rank and iteration, by hand",
              abs(got / want - 1) < 1e-9, f"{got / 1e9:.6f} GB against {want / 1e9:.6f} GB")
        # the same without cp: every layer keeps cp times as much
        flat = run(dlsim, d, "--mode", "analytic", "--gpus", "8", *BASE, "--tp", "8")
        ra, fa = (ring["memory_bytes_per_gpu"]["activations"],
                  flat["memory_bytes_per_gpu"]["activations"])
        check("context parallelism keeps 1/cp of the activations", abs(ra * cp / fa - 1) < 1e-9,
              f"{ra / 1e9:.4f} GB x {cp} against {fa / 1e9:.4f} GB")
        grad = [c for c in ring["collectives"] if c["purpose"] == "grad_sync"]
        check("the weights' gradients are summed over dp x cp (dp 1, cp 4)",
              len(grad) > 0 and all(c["group"] == "dp" and c["wire_bytes"] > 0 for c in grad),
              str([(c["group"], c["calls"]) for c in grad]))
        sim = run(dlsim, d, "--mode", "sim", "--gpus", "32", *BASE, "--tp", "8", "--cp", "4")
        kv_time = total(sim, "cp_kv_exchange", "time_s")
        exposed = sim["breakdown_s"]["exposed_comm"]
        tp_time = sum(c["time_s"] for c in sim["collectives"] if c["group"] == "tp")
        check("ring exchanges overlap the attention: beyond the blocking tp collectives, less "
              "than half of their time is exposed", kv_time > 0 and
              exposed - tp_time < 0.5 * kv_time, f"exposed {exposed * 1e3:.2f} ms; tp "
              f"{tp_time * 1e3:.2f} ms, ring {kv_time * 1e3:.2f} ms")

    refused(dlsim, ["run", "--mode", "analytic", "--workload", "llama3-8b", "--gpus", "48",
                    "--tp", "8", "--cp", "6", "--seq-len", "1000"], "--cp 6")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "llama3-8b", "--gpus", "64",
                    "--tp", "8", "--cp", "8", "--cp-style", "ulysses"], "ulysses")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "resnet50-imagenet", "--gpus", "8",
                    "--cp", "2"], "--cp 2")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "resnet50-imagenet", "--seq-len",
                    "4096"], "--seq-len")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "mixtral-8x1b", "--gpus", "16",
                    "--cp", "2", "--ep", "2"], "--cp 2")
    refused(dlsim, ["run", "--mode", "analytic", "--workload", "llama3-8b", "--cp-style", "star"],
            "--cp-style")
    # the real build: ring attention's GPU kernels compute in fp32 only
    refused(dlsim, ["run", "--mode", "real", "--device", "cuda", "--workload", "llama-tiny",
                    "--gpus", "2", "--cp", "2", "--precision", "bf16"], "--cp 2")
    # dropout masks are drawn per sample, not per position of a share
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "real",
                           "gpt-tiny-sgd.json")
        with open(src) as f:
            wl = json.load(f)
        wl["layers"].insert(3, {"name": "embed_drop", "type": "dropout", "input": "embed_add",
                                "block": "embed"})
        wl["layers"][4]["input"] = "embed_drop"
        path = os.path.join(d, "gpt-drop.json")
        with open(path, "w") as f:
            json.dump(wl, f)
        refused(dlsim, ["run", "--mode", "real", "--workload", path, "--gpus", "2", "--cp", "2",
                        "--out", os.path.join(d, "never.json")], "--cp", path)
        check("a refused real run writes no result", not os.path.exists(os.path.join(d,
                                                                                   "never.json")))
    kernel_shapes(dlsim)
    return finish()


def kernel_shapes(dlsim):
    tiny = ["--workload", "llama-tiny", "--batch", "2"]
    with tempfile.TemporaryDirectory() as d:
        def kbench(name, *opts):
            out = os.path.join(d, name + ".json")
            subprocess.run([dlsim, "kbench", *tiny, *opts, "--repeats", "3", "--out", out],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                return out, {json.dumps(e["shape"], sort_keys=True): e
                             for e in json.load(f)["entries"]}
        ring_db, ring = kbench("ring", "--gpus", "2", "--cp", "2")
        _, half = kbench("half", "--gpus", "1", "--seq-len", "16")
        _, ul = kbench("ulysses", "--gpus", "2", "--cp", "2", "--cp-style", "ulysses")
        tp_db, tp = kbench("tp", "--gpus", "2", "--tp", "2")
        same = [s for s, e in ring.items() if s in half and e["flops"] == half[s]["flops"]]
        check("kbench --cp 2 (ring): every kernel has the shape and FLOP of the model at half the "
              "sequence", len(same) == len(ring) == len(half), f"{len(same)} of {len(ring)}")
        check("the ring's keys say so (seq=2), those of the optimizer aside",
              all(" seq=2 " in e["key"] for e in ring.values() if e["kname"] != "adam.step"))
        att = [s for s, e in ul.items() if e["kname"].startswith("attention")]
        check("Ulysses' attention: whole sequences for half the heads, as tp 2 measures it",
              len(att) == 2 and all(s in tp and ul[s]["flops"] == tp[s]["flops"] for s in att))
        layout = ["--mode", "analytic", *tiny, "--gpus", "2", "--cp", "2", "--reproducible",
                  "--kernels-any-device"]
        r = run(dlsim, d, *layout, "--kernels", ring_db)
        check("a cp 2 run reads every kernel from the database kbench --cp 2 wrote",
              r["kernel_db"]["time_share"]["measured"] == 1, str(r["kernel_db"]["time_share"]))
        r = run(dlsim, d, *layout, "--kernels", tp_db)
        check("a database measured under tp 2 times none of a cp 2 run's kernels",
              r["kernel_db"]["measured"] == 0, str(r["kernel_db"]["measured"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
