#!/usr/bin/python3
"""The fast simulation of collectives (a ring phase as one message each way, a long tree
pipeline as three messages per link and direction) against the message-level simulation
(--message-level: every step and chunk its own messages), where both run.

For ring, tree and hierarchical all-reduce, a data-parallel ResNet-18 iteration on 64 GPUs
(8 DGX A100 nodes) must take the same simulated time within 1% both ways, on ThetaGPU's
non-blocking rail fabric and on a fat tree oversubscribed 4:1 (2 nodes per leaf), where the
rings' flows contend for the uplinks. A 3-D GPT (tensor rings in the node, pipeline messages,
data-parallel rings across nodes) is checked the same way. The contended case must differ from
the non-blocking one, or the test would not test contention. The tree's long pipelines are checked
on gpt-1.7b's data-parallel all-reduces (tp 8, dp 8) on both fabrics, where the two must also
differ, or the fast path did not run. The all-reduces and the 3-D GPT are checked again on 256
GPUs of the oversubscribed fat tree.
Ring phases of a group inside one node whose NVLink carries nothing else are computed rather than
sent (simulation.computed_phases): on gpt-1.7b with tp 8 (the node's only traffic inside it) they
must be, and must give the time of sending each phase as one message (DLSIM_SEND_NODE_PHASES=1)
within SimGrid's rounding (1e-6), and of the message-level simulation within 1%; where a
data-parallel group also has two GPUs in a node (tp 4) none may be.
A data-parallel run's ring and tree all-reduces fold their 8 channels (simulation.folded_channels:
channel 0 alone, on the platform with each node's NVLink links made one and a fat tree's uplinks
an eighth): the message-level references run every channel (--no-folding), and on 64 GPUs the
folded run must give the time of the same fast run with every channel within 1e-6.
With tp 8 on thetagpu, data-parallel groups over one GPU per node fold onto GPU 0's rail
(simulation.folded_rails): the folded run must give the time of the one with every group within
1e-9; on the fat tree, or with a tree tensor-parallel all-reduce, nothing may fold.
Usage: check_fidelity.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish

TOL = 0.01


def result(dlsim, d, platform, opts, message_level, env=None):
    out = os.path.join(d, "r.json")
    cmd = [dlsim, "run", "--mode", "sim", "--platform", platform, "--iters", "2", *opts,
           "--out", out] + (["--message-level"] if message_level else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, **env) if env else None)
    with open(out) as f:
        return json.load(f)


def iteration(dlsim, d, platform, opts, message_level):
    return result(dlsim, d, platform, opts, message_level)["iteration_time_s"]


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        rail = os.path.join(d, "rail.xml")
        tree = os.path.join(d, "fattree.xml")
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "8", "--out", rail],
                       check=True)
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "8", "--topology",
                        "fattree", "--oversubscription", "4", "--nodes-per-leaf", "2", "--out",
                        tree], check=True)
        dp = ["--workload", "resnet18-cifar100", "--gpus", "64", "--batch", "2048"]
        comm = {}
        for pname, plat in (("thetagpu", rail), ("fat tree 4:1", tree)):
            for algo in ("ring", "tree", "hier"):
                f = result(dlsim, d, plat, dp + ["--coll", algo], False)
                fast, folded = f["iteration_time_s"], f["simulation"]["folded_channels"]
                r = result(dlsim, d, plat, dp + ["--coll", algo, "--no-folding"], True)
                msg = r["iteration_time_s"]
                comm[(pname, algo)] = r["comm_s"]
                err = abs(fast - msg) / msg
                check(f"{pname}, {algo} all-reduce: fast {fast * 1e3:.4f} ms (channels folded: "
                      f"{folded}) vs message-level, every channel {msg * 1e3:.4f} ms",
                      err <= TOL, f"{err * 100:.4f}% apart")
                # NCCL's 8 rings or trees are turned onto one another: channel 0 runs alone on
                # the folded platform; the hierarchical all-reduce's rings are not channels
                check(f"{pname}, {algo} all-reduce: {8 if algo != 'hier' else 1} channels folded",
                      folded == (8 if algo != "hier" else 1), f"folded_channels {folded}")
                if folded > 1:
                    ur = result(dlsim, d, plat, dp + ["--coll", algo, "--no-folding"], False)
                    u = ur["iteration_time_s"]
                    err = abs(fast - u) / u
                    check(f"{pname}, {algo} all-reduce: folded {fast * 1e3:.6f} ms vs every "
                          f"channel {u * 1e3:.6f} ms", err <= 1e-6, f"{err:.3g} apart")
                    # every rank, not only the slowest: a rank is through all its channels
                    # when its node is through channel 0 (one iteration, where ranks that end
                    # a call early would show: later ones start together)
                    one = dp + ["--coll", algo, "--iters", "1"]
                    f = result(dlsim, d, plat, one, False)
                    ur = result(dlsim, d, plat, one + ["--no-folding"], False)
                    worst = max(abs(a["iteration_time_s"] - b["iteration_time_s"]) / u
                                for a, b in zip(f["ranks"], ur["ranks"]))
                    check(f"{pname}, {algo} all-reduce: every rank's iteration as with every "
                          "channel", worst <= 1e-6, f"worst {worst:.3g} apart")
                    # a rank's communication time: within 1 % of the iteration (with every
                    # channel the ranks of a node end a tree call up to 0.5 % of the
                    # communication apart, which channel 0 standing for all cannot show)
                    worst = max(abs(a["comm_s"] - b["comm_s"]) / u
                                for a, b in zip(f["ranks"], ur["ranks"]))
                    check(f"{pname}, {algo} all-reduce: every rank's communication time as with "
                          "every channel", worst <= TOL, f"worst {worst * 100:.3g}% of the "
                          "iteration apart")
        # the hierarchical all-reduce runs 8 rings across nodes at once, one per rail: on the
        # fat tree 16 flows leave each leaf through uplinks of a quarter of the downlinks
        check("the oversubscribed fat tree slows the rings across nodes (contention is simulated)",
              comm[("fat tree 4:1", "hier")] > 1.05 * comm[("thetagpu", "hier")],
              f"communication {comm[('fat tree 4:1', 'hier')] * 1e3:.4f} vs "
              f"{comm[('thetagpu', 'hier')] * 1e3:.4f} ms")
        gpt = ["--workload", "gpt-tiny", "--gpus", "64", "--tp", "4", "--pp", "2", "--batch",
               "64", "--microbatches", "4", "--schedule", "1f1b"]
        for pname, plat in (("thetagpu", rail), ("fat tree 4:1", tree)):
            r = result(dlsim, d, plat, gpt, False)
            fast = r["iteration_time_s"]
            msg = iteration(dlsim, d, plat, gpt, True)
            check(f"{pname}, 3-D GPT (tp 4): data-parallel pairs inside the nodes, no ring phase "
                  "computed", r["simulation"]["computed_phases"] == 0, str(r["simulation"]))
            err = abs(fast - msg) / msg
            check(f"{pname}, 3-D GPT (tp 4, pp 2, dp 8): fast {fast * 1e3:.4f} ms vs "
                  f"message-level {msg * 1e3:.4f} ms", err <= TOL, f"{err * 100:.4f}% apart")
        # tensor-parallel rings inside the node, its only traffic there: computed
        tp8 = ["--workload", "gpt-1.7b", "--gpus", "64", "--tp", "8", "--batch", "64",
               "--precision", "bf16"]
        for pname, plat in (("thetagpu", rail), ("fat tree 4:1", tree)):
            r = result(dlsim, d, plat, tp8, False)
            fast, computed = r["iteration_time_s"], r["simulation"]["computed_phases"]
            s = result(dlsim, d, plat, tp8, False, {"DLSIM_SEND_NODE_PHASES": "1"})
            m = result(dlsim, d, plat, tp8 + ["--no-folding"], True)
            check(f"{pname}, gpt-1.7b tp 8: the tensor-parallel ring phases are computed",
                  computed > 0 and s["simulation"]["computed_phases"] == 0 and
                  m["simulation"]["computed_phases"] == 0,
                  f"{computed}, sent {s['simulation']['computed_phases']}, message-level "
                  f"{m['simulation']['computed_phases']}")
            sent = s["iteration_time_s"]
            err = abs(fast - sent) / sent
            check(f"{pname}, gpt-1.7b tp 8: computed {fast * 1e3:.6f} ms vs sent {sent * 1e3:.6f} ms",
                  err <= 1e-6, f"{err:.3g} apart")
            msg = m["iteration_time_s"]
            err = abs(fast - msg) / msg
            check(f"{pname}, gpt-1.7b tp 8: computed {fast * 1e3:.4f} ms vs message-level "
                  f"{msg * 1e3:.4f} ms", err <= TOL, f"{err * 100:.4f}% apart")
        # rail folding: with tp 8 the node's GPUs reach their data-parallel calls together, and
        # GPU j's data-parallel group runs on rail j alone (rails share no link on thetagpu):
        # GPU 0's group stands for the others; not on the fat tree (its uplinks are shared), nor
        # when the tensor-parallel all-reduce is a tree (its chain starts at GPU 0)
        pp2 = ["--workload", "gpt-1.7b", "--gpus", "64", "--tp", "8", "--pp", "2", "--batch",
               "64", "--microbatches", "4", "--schedule", "1f1b", "--precision", "bf16"]
        for what, plat, opts, want in (("thetagpu, gpt-1.7b tp 8 dp 8", rail, tp8, 8),
                                       ("thetagpu, gpt-1.7b tp 8 pp 2 dp 4, 1F1B", rail, pp2, 8),
                                       ("fat tree 4:1, gpt-1.7b tp 8 dp 8", tree, tp8, 1),
                                       ("thetagpu, gpt-1.7b tp 8 dp 8, --coll tree", rail,
                                        tp8 + ["--coll", "tree"], 1)):
            r = result(dlsim, d, plat, opts, False)
            folded = r["simulation"]["folded_rails"]
            check(f"{what}: data-parallel groups folded onto GPU 0's rail: {want}",
                  folded == want, f"folded_rails {folded}")
            if folded > 1:
                u = iteration(dlsim, d, plat, opts + ["--no-folding"], False)
                err = abs(r["iteration_time_s"] - u) / u
                check(f"{what}: folded {r['iteration_time_s'] * 1e3:.6f} ms vs every group "
                      f"{u * 1e3:.6f} ms", err <= 1e-9, f"{err:.3g} apart")
                # every rank, one iteration: GPU j's messages on rail j run without its
                # data-parallel flows beside them, which the tensor-parallel rings absorb
                f1 = result(dlsim, d, plat, opts + ["--iters", "1"], False)
                u1 = result(dlsim, d, plat, opts + ["--iters", "1", "--no-folding"], False)
                for k, tol in (("iteration_time_s", 1e-9), ("comm_s", TOL)):
                    worst = max(abs(a[k] - b[k]) / u for a, b in zip(f1["ranks"], u1["ranks"]))
                    check(f"{what}: every rank's {k} as with every group", worst <= tol,
                          f"worst {worst:.3g} of the iteration apart")
        # the trees' long pipelines (first chunk, middle chunks as one message, last chunk):
        # gpt-1.7b's data-parallel all-reduces over 8 nodes, one GPU of each (tp 8), 25
        # chunks per pipeline; ResNet-18's above have 3 and go chunk by chunk both ways
        long = ["--workload", "gpt-1.7b", "--gpus", "64", "--tp", "8", "--batch", "64",
                "--precision", "bf16", "--coll", "tree"]
        for pname, plat in (("thetagpu", rail), ("fat tree 4:1", tree)):
            fast = iteration(dlsim, d, plat, long, False)
            msg = iteration(dlsim, d, plat, long, True)
            err = abs(fast - msg) / msg
            check(f"{pname}, tree all-reduce of 25-chunk pipelines (gpt-1.7b, tp 8, dp 8): fast "
                  f"{fast * 1e3:.4f} ms vs message-level {msg * 1e3:.4f} ms", err <= TOL,
                  f"{err * 100:.4f}% apart")
            check(f"{pname}: the long pipelines took the fast path", fast != msg,
                  "fast and message-level runs gave the same time")
        # 256 GPUs (32 nodes, 16 leaves) on the oversubscribed fat tree, where rings across
        # nodes contend the most: the all-reduces and the 3-D GPT again (dp 32)
        big = os.path.join(d, "fattree32.xml")
        subprocess.run([dlsim, "platform", "--preset", "thetagpu", "--nodes", "32", "--topology",
                        "fattree", "--oversubscription", "4", "--nodes-per-leaf", "2", "--out",
                        big], check=True)
        cases = [(f"{algo} all-reduce (ResNet-18, dp 256)",
                  ["--workload", "resnet18-cifar100", "--gpus", "256", "--batch", "8192",
                   "--coll", algo]) for algo in ("ring", "tree", "hier")]
        cases.append(("3-D GPT (tp 4, pp 2, dp 32)",
                      ["--workload", "gpt-tiny", "--gpus", "256", "--tp", "4", "--pp", "2",
                       "--batch", "256", "--microbatches", "4", "--schedule", "1f1b"]))
        for what, opts in cases:
            fast = iteration(dlsim, d, big, opts, False)
            msg = iteration(dlsim, d, big, opts + ["--no-folding"], True)
            err = abs(fast - msg) / msg
            check(f"fat tree 4:1, 256 GPUs, {what}: fast {fast * 1e3:.4f} ms vs message-level "
                  f"{msg * 1e3:.4f} ms", err <= TOL, f"{err * 100:.4f}% apart")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
