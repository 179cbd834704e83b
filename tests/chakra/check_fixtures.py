#!/usr/bin/env python3
"""Chakra execution traces written by this test (tests/chakra/et.py, the wire format by hand from
the published schema) run with `dlsim run --workload chakra:DIR` on the star platform (every
route: two 1 us links of 25 GB/s, so alpha = 2 us, beta = 25e9 B/s, no contention) and give the
hand-computed iteration times, in closed form (1e-9) and in simulation (0.1 %):

  data-parallel MLP, 2 ranks: fwd 100 us; bwd of layer 2 (100 us), then its gradients' ring
    all-reduce (10 MB: 2 (alpha + 5 MB / beta) = 404 us) on the comm stream while bwd of layer 1
    (100 us) runs; the second all-reduce starts when the first ends (604 us) and ends at 1008 us;
    the optimizer (50 us) waits for it: 1058 us.
  GPipe pipeline, 2 stages x 2 micro-batches, 1 MB activations (alpha + 1 MB / beta = 42 us):
    stage 1 runs F0 142-242, F1 242-342, B0 342-542, B1 542-742; gradients reach stage 0 at 584
    and 784; stage 0 runs B0 584-784, B1 784-984: 984 us.
  All-reduce, then a message on the same pair, 2 ranks: 50 us of compute, the ring all-reduce
    of its 10 MB (404 us), then 1 MB from rank 0 to rank 1 (42 us), then 100 us of compute on
    rank 1, which the next iteration's first compute follows: 596 us. The
    message's tag, 27904, is one a trace may use (0..32767) and the receive is posted at the
    start of the iteration, before the all-reduce's messages arrive: the collectives' own tags
    lie above every trace tag, so neither message is taken for the other.
    With --samples 400 --net-jitter J (J = 100 us), every rank waits an exponential delay of
    mean J before each send and collective: the all-reduce starts when the later of the two
    ranks' delays is over (mean J (1 + 1/2), variance J^2 (1 + 1/4)) and the message leaves
    after rank 0's own delay (mean J, variance J^2): the mean draw is 596 + 2.5 J = 846 us within
    four standard errors (1.5 J / sqrt(400)). The simulation's steady iteration follows the
    one before it, whose delays it partly absorbs (a rank that finished late reaches the next
    all-reduce late, and the other waits less there): its mean over 40 draws lies above 596 us
    and at most 2 % above the closed form's isolated iteration.
    With --degrade n0g0_link:0.5 (rank 0's link, both directions, at 12.5 GB/s) every message
    crosses it: 50 + 2 (2 + 400) + (2 + 80) + 100 = 1036 us; with --degrade n1g3_link:0.5 (a
    link no route of the two ranks crosses) it stays 596 us.
  The same with a message of 3 GiB, past MPI's int counts (it travels as 1 GiB pieces, which
    share the route and end together): 50 + 404 + (2 + 3 GiB / beta = 128851.01888) + 100 =
    129405.01888 us.
  Two messages of one pair on one tag (0, as ASTRA-sim's custom collectives use for every
    message), 2 ranks: 50 us of compute and an all-reduce of 10 MB (404 us) line the ranks up;
    rank 0 then sends 4 MB (2 + 160 us: at 616 us), computes 300 us and sends 1 MB (at 754 + 42 =
    796 us); rank 1 receives the 4 MB one first, as MPI matches a pair's messages of one tag in
    sending order, computes 100 us (to 716), receives the 1 MB one at 796 and computes 100 us:
    896 us (taking the later message first would give 996 us).
  Chakra's PyTorch converter's shape, 2 ranks: host operators (is_cpu_op, 999 us each) launch
    the kernels, each kernel naming its operator as parent (ctrl_deps) and as data dependency,
    and the first operator naming its kernel in ctrl_deps (a cycle if ctrl_deps ordered). The
    operators are not ops: gemm 100 us; the NCCL kernel's all-reduce of 10 MB waits for it (a
    synchronisation dependency) and takes 404 us, to 504; the elementwise kernel runs 100-150;
    the optimizer's operator waits for the all-reduce, so its kernel (30 us) runs 504-534:
    534 us. The host copy of the collective (c10d::allreduce_, is_cpu_op) is not a second one.
  MoE layer, 2 ranks (expert parallel): router 50 us, all-to-all dispatch of 4 MB (pairwise,
    (P-1)(alpha + n/P/beta) = 82 us), experts 300 us, all-to-all combine 82 us, head 50 us:
    564 us; its communicator comes from comm_groups.json.

Also: a dlsim export decodes with the same independent reader (schema version, field members,
dependencies, comm groups), and traces dlsim cannot map are refused with exit 2 and a one-line
message naming the node.

Usage: check_fixtures.py DLSIM [--write DIR]   (--write keeps the fixtures in DIR)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import et

DLSIM = os.path.abspath(sys.argv[1])
failures = 0


def check(what, ok, detail=""):
    global failures
    failures += not ok
    print("%s %s%s" % ("ok  " if ok else "FAIL", what, ": " + detail if detail else ""))


# Chakra's convention: every dependency that orders is a data dependency; `ctrl` (the op before
# on the stream) and `data` (the op on the other stream it waits for) both go there
def comp(i, name, us, ctrl=(), data=()):
    return et.node(i, name, et.COMP_NODE, (), [*ctrl, *data], us, {"is_cpu_op": False})


def coll(i, name, kind, nbytes, ctrl=(), data=(), pg=None):
    attrs = {"comm_type": kind, "comm_size": nbytes}
    if pg is not None:
        attrs["pg_name"] = pg
    return et.node(i, name, et.COMM_COLL_NODE, (), [*ctrl, *data], 0, attrs)


def p2p(i, name, send, src, dst, tag, nbytes, ctrl=(), data=()):
    return et.node(i, name, et.COMM_SEND_NODE if send else et.COMM_RECV_NODE, (),
                   [*ctrl, *data], 0,
                   {"comm_src": src, "comm_dst": dst, "comm_tag": tag, "comm_size": nbytes})


def write_dp(d):
    for r in range(2):
        et.write(os.path.join(d, "mlp.%d.et" % r), [
            comp(0, "fwd", 100),
            comp(1, "bwd layer2", 100, ctrl=[0]),
            coll(2, "allreduce grads layer2", et.ALL_REDUCE, 10_000_000, data=[1]),
            comp(3, "bwd layer1", 100, ctrl=[1]),
            coll(4, "allreduce grads layer1", et.ALL_REDUCE, 10_000_000, ctrl=[2], data=[3]),
            comp(5, "optimizer", 50, ctrl=[3], data=[4]),
        ])


def write_pipeline(d):
    MB = 1_000_000
    et.write(os.path.join(d, "pipe.0.et"), [
        comp(0, "F0", 100),
        p2p(1, "send act0", True, 0, 1, 0, MB, data=[0]),
        comp(2, "F1", 100, ctrl=[0]),
        p2p(3, "send act1", True, 0, 1, 2, MB, ctrl=[1], data=[2]),
        p2p(4, "recv grad0", False, 1, 0, 1, MB, ctrl=[3]),
        comp(5, "B0", 200, ctrl=[2], data=[4]),
        p2p(6, "recv grad1", False, 1, 0, 3, MB, ctrl=[4]),
        comp(7, "B1", 200, ctrl=[5], data=[6]),
    ])
    et.write(os.path.join(d, "pipe.1.et"), [
        p2p(0, "recv act0", False, 0, 1, 0, MB),
        comp(1, "F0", 100, data=[0]),
        p2p(2, "recv act1", False, 0, 1, 2, MB, ctrl=[0]),
        comp(3, "F1", 100, ctrl=[1], data=[2]),
        comp(4, "B0", 200, ctrl=[3]),
        p2p(5, "send grad0", True, 1, 0, 1, MB, ctrl=[2], data=[4]),
        comp(6, "B1", 200, ctrl=[4]),
        p2p(7, "send grad1", True, 1, 0, 3, MB, ctrl=[5], data=[6]),
    ])


def write_coll_then_p2p(d):
    MB = 1_000_000
    et.write(os.path.join(d, "pair.0.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "send", True, 0, 1, 27904, MB, ctrl=[1]),
    ])
    et.write(os.path.join(d, "pair.1.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "recv", False, 0, 1, 27904, MB, ctrl=[1]),
        comp(3, "after", 100, data=[2]),
    ])


def write_big_message(d):
    """coll-then-p2p with a message of 3 GiB: past MPI's int counts."""
    MB, GIB = 1_000_000, 1 << 30
    et.write(os.path.join(d, "big.0.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "send", True, 0, 1, 5, 3 * GIB, ctrl=[1]),
    ])
    et.write(os.path.join(d, "big.1.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "recv", False, 0, 1, 5, 3 * GIB, ctrl=[1]),
        comp(3, "after", 100, data=[2]),
    ])


def write_reused_tags(d):
    MB = 1_000_000
    et.write(os.path.join(d, "tags.0.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "send big", True, 0, 1, 0, 4 * MB, ctrl=[1]),
        comp(3, "between", 300, ctrl=[0], data=[1]),
        p2p(4, "send small", True, 0, 1, 0, MB, ctrl=[2], data=[3]),
    ])
    et.write(os.path.join(d, "tags.1.et"), [
        comp(0, "before", 50),
        coll(1, "allreduce", et.ALL_REDUCE, 10 * MB, data=[0]),
        p2p(2, "recv big", False, 0, 1, 0, 4 * MB, ctrl=[1]),
        comp(3, "after big", 100, ctrl=[0], data=[2]),
        p2p(4, "recv small", False, 0, 1, 0, MB, ctrl=[2]),
        comp(5, "after small", 100, ctrl=[3], data=[4]),
    ])


def host(i, name, us, node_type=et.COMP_NODE, ctrl=(), data=(), attrs=None):
    """A host operator as Chakra's PyTorch converter writes it: is_cpu_op true, its parent (or,
    in older converters, its kernel) in ctrl_deps."""
    return et.node(i, name, node_type, ctrl, data, us, {"is_cpu_op": True, **(attrs or {})})


def kernel(i, name, us, node_type=et.COMP_NODE, parent=(), data=(), attrs=None):
    """A GPU kernel: its launching operator in ctrl_deps (its parent) and in data_deps."""
    return et.node(i, name, node_type, parent, data, us, {"is_cpu_op": False, **(attrs or {})})


def write_feeder_style(d):
    MB = 1_000_000
    ar = {"comm_type": et.ALL_REDUCE, "comm_size": 10 * MB}
    for r in range(2):
        et.write(os.path.join(d, "trace.%d.et" % r), [
            host(1, "aten::linear", 999, ctrl=[2]),  # points at its kernel, which points back
            kernel(2, "gemm", 100, parent=[1], data=[1]),
            host(3, "c10d::allreduce_", 999, et.COMM_COLL_NODE, data=[1], attrs=ar),
            kernel(4, "ncclKernel_AllReduce", 0, et.COMM_COLL_NODE, parent=[3], data=[3, 2],
                   attrs=ar),
            host(5, "aten::mul", 999, data=[3]),
            kernel(6, "elementwise", 50, parent=[5], data=[5]),
            host(7, "optimizer.step", 999, data=[5, 4]),
            kernel(8, "adam", 30, parent=[7], data=[7]),
        ])


def write_moe(d):
    for r in range(2):
        et.write(os.path.join(d, "moe.%d.et" % r), [
            comp(0, "router", 50),
            coll(1, "dispatch", et.ALL_TO_ALL, 4_000_000, data=[0], pg="7"),
            comp(2, "experts", 300, ctrl=[0], data=[1]),
            coll(3, "combine", et.ALL_TO_ALL, 4_000_000, ctrl=[1], data=[2], pg="7"),
            comp(4, "head", 50, ctrl=[2], data=[3]),
        ])
    with open(os.path.join(d, "comm_groups.json"), "w") as f:
        json.dump({"7": [0, 1]}, f)  # not the default group: a pg_name only this file defines


def write_moe_pytorch(d):
    """The MoE fixture as Chakra's PyTorch converter writes groups: a METADATA node lists them
    (pg_name "1", ranks [] = every rank), and host-side CPU operators take no time."""
    groups = "['[{\"pg_name\": \"1\", \"backend_config\": \"cuda:nccl\", \"ranks\": [], " \
             "\"group_size\": 2, \"group_count\": 1}]']"
    for r in range(2):
        et.write(os.path.join(d, "moe.%d.et" % r), [
            et.node(0, "## process_group:init ##", et.METADATA_NODE, inputs_values=groups),
            et.node(1, "aten::linear", et.COMP_NODE, duration_us=999, attrs={"is_cpu_op": True}),
            comp(2, "router", 50, data=[1]),
            coll(3, "dispatch", et.ALL_TO_ALL, 4_000_000, data=[2], pg="1"),
            comp(4, "experts", 300, ctrl=[2], data=[3]),
            coll(5, "combine", et.ALL_TO_ALL, 4_000_000, ctrl=[3], data=[4], pg="1"),
            comp(6, "head", 50, ctrl=[4], data=[5]),
        ])


FIXTURES = {"dp-mlp": (write_dp, 1058e-6), "pipeline": (write_pipeline, 984e-6),
            "coll-then-p2p": (write_coll_then_p2p, 596e-6),
            "reused-tags": (write_reused_tags, 896e-6),
            "big-message": (write_big_message, 129405.01888e-6),
            "feeder-style": (write_feeder_style, 534e-6),
            "moe": (write_moe, 564e-6), "moe-pytorch-groups": (write_moe_pytorch, 564e-6)}
TOL = {"analytic": 1e-9, "sim": 1e-3}


def run(*args):
    return subprocess.run([DLSIM, *args], capture_output=True, text=True)


def timed(what, d, mode, want, out, *extra):
    """Runs trace directory d on the star platform in `mode` and checks the iteration time
    against `want` (s); returns the result and the process, or None when it did not run."""
    # times by hand are alpha-beta: no NCCL protocol model
    p = run("run", "--workload", "chakra:" + d, "--platform", "star", "--mode", mode,
            "--iters", "2", "--reproducible", "--nccl-proto", "off", *extra, "--out", out)
    if p.returncode != 0:
        check("%s runs" % what, False, p.stderr.strip())
        return None, p
    r = json.load(open(out))
    got = r["iteration_time_s"]
    rel = abs(got - want) / want
    check("%s: iteration %.3f us, by hand %.3f us" % (what, got * 1e6, want * 1e6),
          rel <= TOL[mode], "relative %.2g (tolerance %g)" % (rel, TOL[mode]))
    return r, p


def fixtures(root):
    for name, (write, want) in FIXTURES.items():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        write(d)
        for mode in ("analytic", "sim"):
            r, _ = timed("%s.%s" % (name, mode), d, mode, want,
                         os.path.join(root, "%s.%s.json" % (name, mode)))
            if r is None:
                continue
            check("%s.%s: %d kernels a rank, each at its recorded time" % (
                  name, mode, r["kernel_db"]["recorded"]),
                  r["kernel_db"]["recorded"] > 0 and r["kernel_db"]["estimated"] == 0)
    # the group's members come from the METADATA node: a group of one would cost nothing
    d = os.path.join(root, "moe-pytorch-groups")
    with open(os.path.join(d, "comm_groups.json"), "w") as f:
        json.dump({"1": [0]}, f)  # the file's groups win: rank 1 is then outside its group
    p = run("run", "--workload", "chakra:" + d, "--mode", "analytic", "--platform", "star")
    check("comm_groups.json takes precedence over METADATA groups",
          p.returncode == 2 and "rank 1 is not a member" in p.stderr, p.stderr.strip())
    os.unlink(os.path.join(d, "comm_groups.json"))


def degraded(root):
    """--degrade changes the routes that cross the link, and only those."""
    d = os.path.join(root, "coll-then-p2p")
    for spec, want in (("n0g0_link:0.5", 1036e-6), ("n1g3_link:0.5", 596e-6)):
        for mode in ("analytic", "sim"):
            r, p = timed("--degrade %s, %s" % (spec, mode), d, mode, want,
                         os.path.join(root, "degraded.%s.json" % mode), "--degrade", spec)
            if r is None:
                continue
            check("--degrade %s, %s: the result names the link" % (spec, mode),
                  r["simulation"].get("degraded_links") ==
                  [{"link": spec.split(":")[0], "bandwidth_factor": 0.5}] and
                  r["config"]["degrade"] == spec and "degraded links  1" in p.stdout)


def jittered(root):
    """--net-jitter: the hand-computed mean of the draws."""
    d = os.path.join(root, "coll-then-p2p")
    J, n = 100e-6, 400
    means = {}
    for mode in ("analytic", "sim"):
        out = os.path.join(root, "jitter.%s.json" % mode)
        p = run("run", "--workload", "chakra:" + d, "--platform", "star", "--mode", mode,
                "--iters", "2", "--reproducible", "--nccl-proto", "off", "--samples",
                str(n if mode == "analytic" else 40), "--net-jitter", "100us", "--out", out)
        if p.returncode != 0:
            check("--net-jitter, %s runs" % mode, False, p.stderr.strip())
            return
        means[mode] = json.load(open(out))["iteration_time_samples_s"]
    got, se = means["analytic"]["mean"], 1.5 * J / n ** 0.5
    check("--net-jitter 100us: mean draw %.2f us, by hand %.2f us" % (got * 1e6,
          (596e-6 + 2.5 * J) * 1e6), abs(got - 596e-6 - 2.5 * J) < 4 * se,
          "standard error %.2f us" % (se * 1e6))
    sim = means["sim"]["mean"]
    check("--net-jitter: the simulation's steady mean %.2f us between 596 us and the closed "
          "form's" % (sim * 1e6), 596e-6 < sim <= got * 1.02)


def exported(root):
    """dlsim's own traces, read by the independent decoder."""
    d = os.path.join(root, "export")
    p = run("export", "--format", "chakra", "--out", d, "--workload", "gpt-tiny", "--gpus", "4",
            "--tp", "2", "--pp", "2", "--microbatches", "2", "--batch", "8")
    check("export gpt-tiny tp 2 pp 2 exits 0", p.returncode == 0, p.stderr.strip())
    if p.returncode:
        return
    groups = json.load(open(os.path.join(d, "comm_groups.json")))
    types = set()
    for r in range(4):
        meta, nodes = et.read(os.path.join(d, "dlsim.%d.et" % r))
        check("rank %d: schema version 0.0.4, dlsim's configuration" % r,
              meta["version"] == "0.0.4" and json.loads(meta["attr"]["dlsim_config"])["tp"] == 2)
        check("rank %d: node ids 0..%d in order" % (r, len(nodes) - 1),
              [n["id"] for n in nodes] == list(range(len(nodes))))
        check("rank %d: dependencies name earlier nodes" % r,
              all(d < n["id"] for n in nodes for d in n["ctrl_deps"] + n["data_deps"]))
        bad = []
        for n in nodes:
            types.add(n["type"])
            m, a = n["members"], n["attr"]
            if n["type"] == et.COMP_NODE:
                if (m.get("num_ops"), m.get("tensor_size"), m.get("is_cpu_op")) != \
                        ("int64_val", "uint64_val", "bool_val") or \
                        abs(n["duration_micros"] - a["dlsim_duration_s"] * 1e6) > 0.5:
                    bad.append(n["name"])
            elif n["type"] == et.COMM_COLL_NODE:
                if (m.get("comm_type"), m.get("comm_size"), m.get("pg_name")) != \
                        ("int64_val", "int64_val", "string_val") or \
                        r not in groups.get(a["pg_name"], []):
                    bad.append(n["name"])
            elif n["type"] in (et.COMM_SEND_NODE, et.COMM_RECV_NODE):
                if (m.get("comm_src"), m.get("comm_dst"), m.get("comm_tag")) != \
                        ("int32_val",) * 3 or r not in (a["comm_src"], a["comm_dst"]):
                    bad.append(n["name"])
            else:
                bad.append(n["name"])
        check("rank %d: %d nodes with the schema's attribute members" % (r, len(nodes)),
              not bad, ", ".join(bad[:3]))
    check("order in data_deps, no ctrl_deps (Chakra's convention)",
          all(not n["ctrl_deps"] for r in range(4)
              for n in et.read(os.path.join(d, "dlsim.%d.et" % r))[1]) and
          any(n["data_deps"] for n in et.read(os.path.join(d, "dlsim.0.et"))[1]))
    # the same export as dlsim wrote it before: the op before on the stream in ctrl_deps
    old = os.path.join(root, "export-old")
    os.makedirs(old)
    shutil.copy(os.path.join(d, "comm_groups.json"), old)
    for r in range(4):
        meta, nodes = et.read(os.path.join(d, "dlsim.%d.et" % r))
        stream = {n["id"]: n["attr"]["dlsim_stream"] for n in nodes}
        et.write(os.path.join(old, "dlsim.%d.et" % r), [
            et.node(n["id"], n["name"], n["type"],
                    [x for x in n["data_deps"] if stream[x] == stream[n["id"]]],
                    [x for x in n["data_deps"] if stream[x] != stream[n["id"]]],
                    n["duration_micros"], n["attr"]) for n in nodes],
            et.metadata(meta["version"], meta["attr"]))
    times = []
    for t in (d, old):
        out = os.path.join(root, "export-time.json")
        p = run("run", "--workload", "chakra:" + t, "--mode", "analytic", "--out", out)
        times.append(json.load(open(out))["iteration_time_s"] if p.returncode == 0 else None)
    check("an export of the earlier convention reads back alike: %s s" % times,
          None not in times and times[0] == times[1])
    check("compute, collective, send and receive nodes all written",
          types == {et.COMP_NODE, et.COMM_COLL_NODE, et.COMM_SEND_NODE, et.COMM_RECV_NODE},
          str(sorted(types)))


def refused(root):
    """What cannot be mapped: exit 2, one line naming the file and the node."""
    cases = {
        "barrier": ([[comp(0, "fwd", 10), coll(1, "sync", et.BARRIER, 0, data=[0])]] * 2, None,
                    "node 1 'sync': comm_type 9 (BARRIER)"),
        "cycle": ([[comp(0, "a", 10, ctrl=[1]), comp(1, "b", 10, ctrl=[0])]] * 2, None,
                  "its dependencies form a cycle"),
        "group": ([[coll(0, "ar", et.ALL_REDUCE, 100, pg="7")]] * 2, {"0": [0, 1]},
                  "node 0 'ar': pg_name '7' is not in"),
        "self-send": ([[p2p(0, "loop", True, 0, 0, 0, 100)], [comp(0, "x", 1)]], None,
                      "node 0 'loop': comm_dst 0: expected another rank"),
        "outsider": ([[coll(0, "ar", et.ALL_REDUCE, 100, pg="0")]] * 2, {"0": [0]},
                     "node 0 'ar': rank 1 is not a member"),
        "data-dep": ([[comp(0, "a", 10, data=[5])]] * 2, None,
                     "data dependency on node 5, which the file does not hold"),
        "kernel-name": ([[et.node(0, "k", et.COMP_NODE, duration_us=1,
                                  attrs={"dlsim_kernel": 'a"b'})]] * 2, None,
                        "node 0 'k': dlsim_kernel: expected a name of 1..39 printable"),
        "comm-type": ([[coll(0, "ar", 2 ** 32, 100)]] * 2, None,
                      "node 0 'ar': comm_type 4294967296 (?)"),
        "host-only": ([[host(0, "aten::linear", 10), host(1, "aten::relu", 5, data=[0])]] * 2,
                      None, "no GPU kernel or communication node, only 2 host operators"),
    }
    for name, (ranks, groups, want) in cases.items():
        d = os.path.join(root, "bad-" + name)
        os.makedirs(d)
        for r, nodes in enumerate(ranks):
            et.write(os.path.join(d, "t.%d.et" % r), nodes)
        if groups:
            json.dump(groups, open(os.path.join(d, "comm_groups.json"), "w"))
        out = os.path.join(root, "bad.json")
        p = run("run", "--workload", "chakra:" + d, "--platform", "star", "--mode", "analytic",
                "--out", out)
        msg = p.stderr.strip()
        check("refused: %s" % name, p.returncode == 2 and want in msg and "\n" not in msg and
              d in msg and not os.path.exists(out), "exit %d: %s" % (p.returncode, msg))
    d = os.path.join(root, "bad-gap")
    os.makedirs(d)
    for r in (0, 2):
        et.write(os.path.join(d, "t.%d.et" % r), [comp(0, "a", 10)])
    p = run("run", "--workload", "chakra:" + d, "--mode", "analytic")
    check("refused: a missing rank", p.returncode == 2 and "t.1.et is missing" in p.stderr,
          p.stderr.strip())
    with open(os.path.join(d, "t.1.et"), "wb") as f:
        f.write(b"\xff\xff\xff\xff\x0fnot a trace")
    p = run("run", "--workload", "chakra:" + d, "--mode", "analytic")
    check("refused: a file that is not a trace", p.returncode == 2 and "t.1.et: record 0" in
          p.stderr, p.stderr.strip())


def host_chain(root):
    """A converter's chain of host operators as long as a big trace's: each operator depends on
    the one before, and the one kernel at the end of the file on the last operator."""
    d = os.path.join(root, "host-chain")
    os.makedirs(d)
    n = 200_000
    nodes = [host(i, "aten::op", 1, data=[i - 1] if i else []) for i in range(n)]
    nodes.append(kernel(n, "gemm", 100, parent=[n - 1], data=[n - 1]))
    et.write(os.path.join(d, "t.0.et"), nodes)
    out = os.path.join(root, "host-chain.json")
    p = run("run", "--workload", "chakra:" + d, "--platform", "star", "--mode", "analytic",
            "--iters", "2", "--out", out)
    check("a chain of %d host operators before one 100 us kernel: 100 us" % n,
          p.returncode == 0 and abs(json.load(open(out))["iteration_time_s"] - 100e-6) < 1e-12,
          p.stderr.strip()[-200:])


def main():
    keep = sys.argv[sys.argv.index("--write") + 1] if "--write" in sys.argv else None
    with tempfile.TemporaryDirectory() as root:
        fixtures(root)
        degraded(root)
        jittered(root)
        exported(root)
        refused(root)
        host_chain(root)
        if keep:
            for name in FIXTURES:
                shutil.copytree(os.path.join(root, name), os.path.join(keep, name),
                                dirs_exist_ok=True)
    print("PASSED: 0 failure(s)" if not failures else "FAILED: %d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
