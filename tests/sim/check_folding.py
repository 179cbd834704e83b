#!/usr/bin/python3
"""Folding in the closed form: one data-parallel replica evaluated for all of them gives the same
result, byte for byte, as evaluating every rank (--no-folding), and folds only where replicas
are equivalent.

- Data parallel, a 3-D GPT (its Megatron tp members fold too: one pipeline stands for all),
  ring and Ulysses context parallelism (a replica holds its cp ranks; inside a node the first cp
  rank stands for its ring, across two nodes the first of each half, turning the ring that far
  keeping every route's class), a Gholami grid with domain parallelism (only data-parallel
  replicas fold: boundary ranks differ), a pipeline, and Megatron tp of an MoE model (only data-parallel replicas fold) on generated
  clusters (rail and a 4:1 fat tree with leaf groups) fold, and equal --no-folding but for
  simulation.ranks, simulation.folded and config.no_folding.
- Expert parallelism does not fold (the replicas hold different experts); neither does a
  platform file without the generator's mark (its routes are not known to repeat), nor a
  cluster whose leaf groups cut the replicas differently; a ring over leaf groups cut unevenly
  does not fold round (its tp members still do).
Usage: check_folding.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish


def run(dlsim, d, plat, opts, fold=True):
    out = os.path.join(d, "r.json")
    subprocess.run([dlsim, "run", "--mode", "analytic", "--platform", plat, "--reproducible",
                    *opts, "--out", out] + ([] if fold else ["--no-folding"]), check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def strip(r):
    r["simulation"].pop("ranks")
    r["simulation"].pop("folded")
    r["config"].pop("no_folding")
    return r


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        rail = os.path.join(d, "rail.xml")
        tree = os.path.join(d, "tree.xml")
        odd = os.path.join(d, "odd-leaves.xml")
        plain = os.path.join(d, "plain.xml")
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "16", "--out",
                        rail], check=True)
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "16", "--topology",
                        "fattree", "--oversubscription", "4", "--nodes-per-leaf", "4", "--out",
                        tree], check=True)
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "16",
                        "--nodes-per-leaf", "3", "--out", odd], check=True)
        with open(rail) as f, open(plain, "w") as g:
            g.write(f.read().replace("written by dlsim platform", "written by hand"))
        edited = os.path.join(d, "edited.xml")
        with open(rail) as f, open(edited, "w") as g:  # one NIC slowed after generation
            text = f.read()
            slow = text.replace('<link id="n5g0_nic" bandwidth="25GBps"',
                                '<link id="n5g0_nic" bandwidth="0.1GBps"')
            assert slow != text
            g.write(slow)
        cases = [
            ("data parallel", ["--workload", "resnet18-cifar100", "--gpus", "128", "--batch",
                               "4096"], 128),
            ("3-D GPT", ["--workload", "gpt-tiny", "--gpus", "128", "--tp", "4", "--pp", "4",
                         "--schedule", "1f1b", "--microbatches", "8", "--batch", "64"], 32),
            ("grid with domains", ["--workload", "cnn-small", "--gpus", "64", "--grid", "4x16",
                                   "--domain", "conv", "--batch", "256"], 16),
            ("GPipe", ["--workload", "mlp-deep", "--gpus", "64", "--pp", "8", "--microbatches",
                       "8", "--batch", "512"], 8),
            ("MoE under Megatron tp", ["--workload", "moe-gpt-8x", "--gpus", "16", "--tp", "2",
                                       "--batch", "16"], 8),
            # a replica holds its cp ranks, and inside a node cp_i = 0 stands for its ring
            ("ring context parallelism in a 3-D GPT",
             ["--workload", "gpt-tiny", "--gpus", "128", "--tp", "4", "--cp", "2", "--pp", "2",
              "--schedule", "1f1b", "--microbatches", "4", "--batch", "64"], 64),
            ("Ulysses context parallelism under ZeRO 3",
             ["--workload", "gpt-tiny", "--gpus", "64", "--cp", "4", "--cp-style", "ulysses",
              "--zero", "3", "--batch", "64"], 64),
            # a ring over two nodes (cp_i 1 to 2 crosses, 0 to 1 does not): turned two places
            # it is alike, so cp_i 0 and 1 stand for it
            ("a ring of 4 across two nodes",
             ["--workload", "gpt-tiny", "--gpus", "128", "--tp", "4", "--cp", "4",
              "--microbatches", "2", "--batch", "64"], 64),
            ("a ring of 8 across two nodes",
             ["--workload", "gpt-tiny", "--gpus", "128", "--tp", "2", "--cp", "8",
              "--microbatches", "2", "--batch", "64"], 32),
        ]
        for pname, plat in (("rail", rail), ("fat tree", tree)):
            for name, opts, fold in cases:
                a, b = run(dlsim, d, plat, opts), run(dlsim, d, plat, opts, fold=False)
                check(f"{pname}, {name}: folded {a['simulation']['folded']}x "
                      f"({a['simulation']['ranks']} of {b['simulation']['ranks']} ranks evaluated)",
                      a["simulation"]["folded"] == fold and b["simulation"]["folded"] == 1)
                check(f"{pname}, {name}: the same result as every rank evaluated",
                      strip(a) == strip(b))
        moe = ["--workload", "moe-gpt-8x", "--gpus", "16", "--ep", "4", "--batch", "16"]
        check("expert parallelism is not folded", run(dlsim, d, rail, moe)["simulation"]["folded"] == 1)
        dp = cases[0][1]
        check("a platform without the generator's mark is not folded",
              run(dlsim, d, plain, dp)["simulation"]["folded"] == 1)
        ring = dp + ["--coll", "ring", "--kernels", "roofline"]  # the network's share, not kernels
        a, b = run(dlsim, d, edited, ring), run(dlsim, d, rail, ring)
        check("a generated file edited since (one NIC slowed) is not folded, and its ring pays "
              "for the slow link", a["simulation"]["folded"] == 1 and
              a["iteration_time_s"] > 10 * b["iteration_time_s"],
              f"{a['iteration_time_s'] * 1e3:.3f} ms vs {b['iteration_time_s'] * 1e3:.3f} ms")
        gpt = cases[1][1]
        r = run(dlsim, d, odd, gpt)
        check("replicas cut differently by leaf groups (3 nodes each) are not folded",
              r["simulation"]["folded"] == 1, str(r["simulation"]))
        check("... and data-parallel replicas of one GPU each still are",
              run(dlsim, d, odd, dp)["simulation"]["folded"] == 128)
        # a ring of 8 over four nodes, the fourth in a leaf group of its own: no turn of it
        # keeps every route, so every cp rank is evaluated
        ring = ["--workload", "gpt-tiny", "--gpus", "32", "--tp", "4", "--cp", "8", "--batch", "8"]
        a, b = run(dlsim, d, odd, ring), run(dlsim, d, odd, ring, fold=False)
        ranks = a["simulation"]["ranks"]
        check(f"a ring over leaf groups cut unevenly is not folded round: {ranks} ranks evaluated, "
              "the same result as every rank", ranks == 8 and strip(a) == strip(b))
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
