#!/usr/bin/env python3
"""Hostile inputs that once hung dlsim, gave a silently wrong result or made it write where nothing
should be written: each row names its case (T3-nn), runs the command as a user would, and
requires exit status 2 with one line on stderr that says why, and nothing written (exit 1 where
the fault is dlsim's or the machine's: a helper killed from outside, a full disk). FIFOs cannot be stored in git, so the test
makes them; an input is read only when it is a regular file, so none of them is ever waited on
(the timeout only bounds a failure). A platform file's <config> that turns SimGrid's tracing on
must not make any mode write its trace (only --simgrid-cfg may).

Usage: check_hostile.py DLSIM   (DLSIM_DATA_DIR points at the repository; run from anywhere)
"""
import os
import subprocess
import sys
import tempfile

DLSIM = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "hostile")
GOLDEN = os.path.join(os.path.dirname(HERE), "golden", "expected", "dp-buckets.analytic.json")
failures = 0


def check(row, ok, detail):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {row}: {detail}")
    failures += not ok


def refused(row, args, says, cwd, out=None):
    """The command ends with exit 2 and one line containing `says`; `out` is not written."""
    try:
        p = subprocess.run([DLSIM, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    except subprocess.TimeoutExpired:
        check(row, False, "did not end within 300 s")
        return
    lines = p.stderr.strip().splitlines()
    ok = p.returncode == 2 and len(lines) == 1 and says in lines[0]
    ok = ok and not (out and os.path.exists(out))
    check(row, ok, f"exit {p.returncode}: {p.stderr.strip()[:200]}")


def plat_copy(d):
    """A platform file of our own in `d` (p2.xml), written by dlsim platform."""
    p = os.path.join(d, "p2.xml")
    subprocess.run([DLSIM, "platform", "--preset", "star", "--out", p], check=True,
                   stdout=subprocess.DEVNULL)
    return p


def inputs_rest(d, out):
    """Values that multiplied or divided past any clock, settings and files SimGrid would stop
    on, and an input the outputs would land on."""
    run = ["run", "--mode", "analytic", "--workload", "mlp-small", "--platform", "star"]
    refused("H-01 --slow-gpus naming a rank twice past the factor's range",
            [*run, "--gpus", "2", "--slow-gpus", "1:100,1:100", "--out", out],
            "--slow-gpus 1:100,1:100: rank 1's factors multiply to 10000, outside 0.01 to 100",
            d, out)
    refused("H-02 a kernel database entry moving 1e-300 bytes",
            [*run, "--gpus", "2", "--gpu", "a100-40gb", "--kernels",
             os.path.join(DATA, "kdb-bytes-tiny.json"), "--out", out],
            "entries[0].bytes: expected 0 or a number in [1, 1e+18], got 1e-300", d, out)
    for cfg, says in (("smpi/bw-factor:0:1e-300", "--simgrid-cfg smpi/bw-factor '0:1e-300'"),
                      ("network/TCP-gamma:nan", "--simgrid-cfg network/TCP-gamma 'nan'"),
                      ("network/weight-S:-5", "--simgrid-cfg network/weight-S '-5'")):
        refused(f"H-03 --simgrid-cfg {cfg}",
                [*run, "--gpus", "2", "--simgrid-cfg", cfg, "--out", out], says, d, out)
    for name, says in (("route-twice.xml", "route-twice.xml:9: route from b to a given twice"),
                       ("route-self.xml", "route-self.xml:8: route from a to itself")):
        refused(f"H-04 a platform SimGrid would crash on ({name})",
                ["run", "--mode", "analytic", "--workload", "mlp-small", "--gpus", "2",
                 "--platform", os.path.join(DATA, name), "--out", out], says, d, out)
    p = subprocess.run([DLSIM, "run", "--mode", "analytic", "--workload", "mlp-small", "--gpus",
                        "2", "--platform", os.path.join(DATA, "route-commented.xml"), "--out",
                        out], capture_output=True, text=True, cwd=d, timeout=300)
    check("H-04 a route given twice where one is commented out: runs", p.returncode == 0,
          f"exit {p.returncode}: {p.stderr.strip()[:200]}")
    if os.path.exists(out):
        os.remove(out)
    spec = os.path.join(d, "sp.jsonl")
    with open(spec, "w") as f:
        f.write('{"fixed": {"workload": "mlp-small", "mode": "analytic", "platform": "star"}, '
                '"axes": {"gpus": [1, 2]}}\n')
    before = open(spec).read()
    refused("H-05 a sweep whose rows would land on its spec",
            ["sweep", spec, "--out", os.path.join(d, "sp"), "--jobs", "1"],
            "--out names the spec file", d)
    check("H-05 the spec is as it was", open(spec).read() == before, spec)
    xml = os.path.join(d, "gen.xml")
    for args, says in ((["--nic-bw", "1e-320"], "--nic-bw: expected 1 to 1e18 bytes/s"),
                       (["--gpu-mem", "0.1"], "--gpu-mem: expected 1 to 1e18 bytes"),
                       (["--oversubscription", "1e30"], "link l0r0_up would have 5e-20 bytes/s")):
        refused(f"H-06 platform {' '.join(args)}: a file no run would load",
                ["platform", "--nodes", "2", *args, "--out", xml], says, d, xml)
    # a model without a spec sheet: written for SimGrid (as documented), refused by a run
    p = subprocess.run([DLSIM, "platform", "--nodes", "2", "--gpu", "foo", "--gpu-mem", "1GiB",
                        "--gpu-speed", "1Tf", "--out", xml], capture_output=True, text=True,
                       cwd=d, timeout=300)
    check("H-06 platform --gpu foo --gpu-mem --gpu-speed: written", p.returncode == 0,
          p.stderr.strip()[:200])
    refused("H-06 a run on it names the model without a spec sheet",
            ["run", "--mode", "analytic", "--workload", "mlp-small", "--gpus", "2", "--platform",
             xml, "--out", out], "host property gpu_model 'foo' has no spec sheet", d, out)
    refused("H-07 coll --min-bytes nan",
            ["coll", "--platform", "star", "--gpus", "2", "--op", "allreduce", "--min-bytes",
             "nan", "--max-bytes", "64"], "--min-bytes: expected a size", d)
    refused("H-07 coll --iters past 65536",
            ["coll", "--platform", "star", "--gpus", "2", "--op", "allreduce", "--min-bytes", "8",
             "--max-bytes", "8", "--iters", "2147483647"], "--iters: expected 1..65536", d)
    refused("H-11 --failures giving a key twice (the first value unused)",
            [*run, "--gpus", "2", "--epochs", "1", "--failures", "gpu=1,gpu=2", "--out", out],
            "--failures gpu=1,gpu=2: gpu given twice", d, out)
    refused("H-09 search --out naming a directory (hidden DIR/.json otherwise)",
            ["search", "--workload", "mlp-small", "--platform", "star", "--gpus", "2",
             "--verify", "0", "--out", d + "/"], "expected a prefix of file names", d,
            os.path.join(d, ".json"))
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chakra"))
    import et  # noqa: E402
    for what, value in (("num_ops", float("inf")), ("num_ops", float("nan")),
                        ("tensor_size", float("inf"))):
        t = os.path.join(d, f"ch-{what}-{value}")
        os.makedirs(t, exist_ok=True)
        et.write(os.path.join(t, "t.0.et"), [et.node(0, "k", et.COMP_NODE, attrs={
            "is_cpu_op": False, what: value})])
        refused(f"H-10 a Chakra kernel whose {what} is {value}",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "chakra:" + t,
                 "--out", out], what + ": expected", d, out)


def main():
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "in.fifo")
        os.mkfifo(fifo)
        et = os.path.join(d, "et-is-fifo")
        os.mkdir(et)
        os.mkfifo(os.path.join(et, "t.0.et"))
        out = os.path.join(d, "r.json")
        nrf = "not a regular file"
        refused("T3-05 a Chakra rank file that is a FIFO",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "chakra:" + et,
                 "--out", out], nrf, d, out)
        refused("T3-06 a sweep spec that is a FIFO",
                ["sweep", fifo, "--out", os.path.join(d, "s")], nrf, d,
                os.path.join(d, "s.csv"))
        refused("T3-07 a compare input that is a FIFO", ["compare", fifo, GOLDEN], nrf, d)
        refused("T3-08 --routing file: a FIFO",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "switch-base-8",
                 "--gpus", "8", "--ep", "8", "--ignore-memory", "--routing", "file:" + fifo,
                 "--out", out], nrf, d, out)
        refused("T3-12 --routing file: with fewer weights than experts",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "switch-base-8",
                 "--gpus", "8", "--ep", "8", "--ignore-memory", "--routing",
                 "file:" + os.path.join(DATA, "routing-short.json"), "--out", out],
                "2 weights for 8 experts", d, out)
        pxml = os.path.join(d, "p.xml")
        for opt, value, says in (("--nodes", "-1", "--nodes: expected 1..1000000, got -1"),
                                 ("--gpus-per-node", "-3", "--gpus-per-node: expected 1..1024"),
                                 ("--nics-per-node", "-1", "--nics-per-node: expected a divisor"),
                                 ("--nodes-per-leaf", "0", "--nodes-per-leaf: expected 1 or more"),
                                 ("--nodes-per-leaf", "-1", "--nodes-per-leaf: expected 1 or more")):
            refused(f"T3-16 platform {opt} {value}", ["platform", opt, value, "--out", pxml], says,
                    d, pxml)
        refused("T3-10 a host's gpu_mem_bytes of 0",
                ["run", "--mode", "analytic", "--workload", "mlp-small", "--gpus", "2", "--iters",
                 "2", "--platform", os.path.join(DATA, "gpu-mem-zero.xml"), "--out", out],
                "gpu_mem_bytes: expected bytes > 0", d, out)
        for x in ("nan", "inf", "neg", "1e300"):
            for mode in ("analytic", "sim"):
                refused(f"T3-15 dlsim_duration_s {x} ({mode})",
                        ["run", "--mode", mode, "--platform", "star", "--iters", "2", "--workload",
                         "chakra:" + os.path.join(DATA, "ch", "dur-s-" + x), "--out", out],
                        "dlsim_duration_s: expected seconds", d, out)
        # T3-04, T3-13, T3-27: traces whose messages or collectives cannot match are the
        # trace's fault, refused alike in both modes with the file and node
        for case, says in (("send-size-mismatch", "t.1.et: node 0 'r': receives 5 bytes, but "),
                           ("coll-size-mismatch", "is allreduce of 999999 bytes, but "),
                           ("coll-order-swap", "is allgather of 1000 bytes, but "),
                           ("coll-type-mismatch", "is allgather of 1000 bytes, but "),
                           ("send-no-recv", "which never sends it"),
                           ("send-unreceived", "t.0.et: node 0 's': sends 1000 bytes to rank 1 "
                            "(tag 3), which never receives them"),
                           ("recv-never-sent", "which never sends it"),
                           ("coll-one-rank-only", "which rank 1 never joins"),
                           ("p2p-crossed-deadlock", "waits forever: receives from rank 1")):
            row = {"send-size-mismatch": "T3-04", "coll-size-mismatch": "T3-04",
                   "coll-order-swap": "T3-13", "coll-type-mismatch": "T3-13"}.get(case, "T3-27")
            for mode in ("analytic", "sim"):
                refused(f"{row} a trace of {case} ({mode})",
                        ["run", "--mode", mode, "--platform", "star", "--iters", "2", "--workload",
                         "chakra:" + os.path.join(DATA, "ch", case), "--out", out], says, d, out)
        refused("T3-35 a trace of another Chakra schema version",
                ["run", "--mode", "analytic", "--platform", "star", "--iters", "2", "--workload",
                 "chakra:" + os.path.join(DATA, "ch", "meta-version-empty-str"), "--out", out],
                "GlobalMetadata version 'x': dlsim reads Chakra's 0.0.x", d, out)
        refused("T3-33 a cluster radical past an int",
                ["run", "--mode", "analytic", "--workload", "mlp-small", "--gpus", "2", "--gpu",
                 "a100-40gb", "--platform", os.path.join(DATA, "cluster-radical-huge.xml"),
                 "--out", out], "cluster c: radical 0-4000000000: number out of range", d, out)
        # T3-32: the platform helper killed from outside is dlsim's failure (exit 1), not the
        # file's: a helper that kills itself stands for the OOM killer, deterministically
        killer = os.path.join(d, "sgplat-killed.sh")
        with open(killer, "w") as f:
            f.write("#!/bin/sh\nkill -9 $$\n")
        os.chmod(killer, 0o755)
        p = subprocess.run([DLSIM, "run", "--mode", "analytic", "--workload", "mlp-small",
                            "--gpus", "2", "--platform", "star", "--out", out], cwd=d,
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, DLSIM_SGPLAT=killer))
        check("T3-32 the platform helper killed by a signal: exit 1, said so",
              p.returncode == 1 and "killed by signal 9" in p.stderr and
              len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(out),
              f"exit {p.returncode}: {p.stderr.strip()[:200]}")
        vout = os.path.join(d, "v")
        for opt, path in (("--platform", "/nonexistent.xml"), ("--kernels", "/nonexistent.json")):
            refused(f"T3-28 validate {opt} that does not exist, before any run",
                    ["validate", "--out", vout, "--quick", opt, path], f"{opt}: {path}: no such "
                    "file", d, vout)
        # T3-22: a sweep into rows another sweep is writing is refused (the test holds the
        # prefix's lock itself: no race, no timing); T3-26: rows of another spec are refused
        import fcntl
        spec = os.path.join(DATA, "sweep-ok-small.json")
        pre = os.path.join(d, "locked")
        with open(pre + ".lock", "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
            refused("T3-22 a sweep into a prefix another sweep holds", ["sweep", spec, "--out",
                    pre], "another dlsim sweep writes these rows", d, pre + ".csv")
        mixed = os.path.join(d, "mixed")
        p = subprocess.run([DLSIM, "sweep", spec, "--out", mixed], cwd=d, capture_output=True,
                           text=True, timeout=300)
        before = open(mixed + ".csv").read() if p.returncode == 0 else None
        other = os.path.join(d, "other-spec.json")
        with open(other, "w") as f:
            f.write('{"fixed": {"mode": "analytic", "platform": "star", "workload": "mlp-small",'
                    ' "gpus": 1}, "axes": {"batch": [8, 24]}}\n')
        refused("T3-26 a sweep into a prefix holding another spec's rows",
                ["sweep", other, "--out", mixed], "rows of another sweep", d)
        check("T3-26 the other spec's rows are untouched",
              before is not None and open(mixed + ".csv").read() == before, mixed + ".csv")
        # T3-24: an export into another run's traces is refused; a refused or failed export
        # leaves no directory behind
        ex = os.path.join(d, "e")
        os.mkdir(ex)
        with open(os.path.join(ex, "comm_groups.json"), "w") as f:
            f.write('{"0":[0,1,2,3]}\n')
        open(os.path.join(ex, "other.0.et"), "w").close()
        exp = ["export", "--format", "chakra", "--platform", "star", "--workload", "mlp-small",
               "--gpus", "2", "--out"]
        refused("T3-24 an export into a directory of another run's traces", exp + [ex],
                "holds the traces of another run (other.0.et)", d,
                os.path.join(ex, "dlsim.0.et"))
        os.unlink(os.path.join(ex, "other.0.et"))
        refused("T3-24 an export beside another run's comm_groups.json", exp + [ex],
                "holds a comm_groups.json of no dlsim.*.et traces", d,
                os.path.join(ex, "dlsim.0.et"))
        e2 = os.path.join(d, "e2")
        refused("T3-24 a refused export makes no directory", exp + [e2, "--grid", "auto"],
                "--grid auto searches grids", d, e2)
        p = subprocess.run([DLSIM, *exp, e2, "--prefix", "a" * 300], cwd=d, capture_output=True,
                           text=True, timeout=300)
        check("T3-24 a failed export makes no directory", p.returncode == 1 and
              not os.path.exists(e2), f"exit {p.returncode}: {p.stderr.strip()[:200]}")
        for f in ("speed-tiny.xml", "speed-1e-10f.xml"):
            refused(f"T3-09 a host speed below 1 flop/s ({f})",
                    ["run", "--mode", "sim", "--workload", "mlp-small", "--gpus", "2", "--iters",
                     "2", "--platform", os.path.join(DATA, f), "--out", out],
                    "host h0: speed: expected 1 to", d, out)
        # T3-36: SMPI's own settings in a platform's <config> are taken, as smpirun takes them
        for f in ("cfg-smpi_os.xml", "cfg-smpi_display-timing.xml", "cfg-smpi_privatization.xml",
                  "cfg-smpi_coll-selector.xml"):
            for mode in ("analytic", "sim"):
                p = subprocess.run([DLSIM, "run", "--mode", mode, "--workload", "mlp-small",
                                    "--gpus", "2", "--iters", "2", "--platform",
                                    os.path.join(DATA, f), "--out", out], cwd=d,
                                   capture_output=True, text=True, timeout=300)
                check(f"T3-36 a <config> with SMPI's setting ({f}, {mode}) runs",
                      p.returncode == 0 and os.path.exists(out), p.stderr.strip()[-200:])
                if os.path.exists(out):
                    os.unlink(out)
        # T3-30: coll --out on a full disk says so (the driver writes the rows); a full disk
        # needs a tmpfs of our own, so root only: elsewhere the case says it did not run
        full = os.path.join(d, "full")
        os.mkdir(full)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full],
                          capture_output=True).returncode == 0:
            try:
                with open(os.path.join(full, "fill"), "wb") as f:
                    try:
                        f.write(b"\0" * 128 * 1024)
                    except OSError:
                        pass
                p = subprocess.run([DLSIM, "coll", "--platform", "star", "--gpus", "2", "--op",
                                    "allreduce", "--max-bytes", "64KB", "--out",
                                    os.path.join(full, "c.json")], cwd=d, capture_output=True,
                                   text=True, timeout=300)
                lines = p.stderr.strip().splitlines()
                check("T3-30 coll --out on a full disk", p.returncode == 1 and len(lines) == 1
                      and "c.json: cannot write" in lines[0] and "No space left" in lines[0],
                      f"exit {p.returncode}: {p.stderr.strip()[:200]}")
            finally:
                subprocess.run(["umount", full], capture_output=True)
        else:
            print("skip T3-30 coll --out on a full disk: cannot mount a tmpfs here (not root)")
        # T3-23: an output on an input, or two outputs on one file
        src = os.path.join(os.path.dirname(os.path.dirname(HERE)), "workloads", "mlp-small.json")
        w = os.path.join(d, "w.json")
        with open(src) as f, open(w, "w") as g:
            g.write(f.read())
        before = open(w).read()
        refused("T3-23 --out on the --workload file",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "w.json",
                 "--iters", "2", "--out", "./w.json"], "--out names the --workload file", d)
        os.symlink("w.json", os.path.join(d, "link.json"))
        refused("T3-23 --out through a link to the --workload file",
                ["run", "--mode", "analytic", "--platform", "star", "--workload", "w.json",
                 "--iters", "2", "--out", "link.json"], "--out names the --workload file", d)
        check("T3-23 the workload file is intact", open(w).read() == before, w)
        refused("T3-23 --out on the --platform file",
                ["run", "--mode", "analytic", "--platform", plat_copy(d), "--workload",
                 "mlp-small", "--gpus", "2", "--iters", "2", "--out", "p2.xml"],
                "--out names the --platform file", d)
        refused("T3-23 --out and --trace on one file",
                ["run", "--mode", "sim", "--platform", "star", "--workload", "mlp-small", "--gpus",
                 "2", "--iters", "2", "--out", "s.json", "--trace", "./s.json"],
                "--out and --trace name the same file", d, os.path.join(d, "s.json"))
        for mode in ("analytic", "sim"):
            refused(f"T3-03 a platform without a zone ({mode})",
                    ["run", "--mode", mode, "--workload", "mlp-small", "--gpus", "2", "--platform",
                     os.path.join(DATA, "empty-platform.xml"), "--out", out],
                    "empty-platform.xml: no <host> found", d, out)
        for mode in ("analytic", "sim"):
            refused(f"T3-01 a link of 1e-300 bytes/s ({mode})",
                    ["run", "--mode", mode, "--workload", "mlp-small", "--gpus", "2", "--iters",
                     "2", "--platform", os.path.join(DATA, "bw-tiny.xml"), "--out", out],
                    "link l: bandwidth: expected 1 to", d, out)
            refused(f"T3-02 a WIFI link ({mode})",
                    ["run", "--mode", mode, "--workload", "mlp-small", "--gpus", "2", "--iters",
                     "2", "--platform", os.path.join(DATA, "sharing-wifi.xml"), "--out", out],
                    "link l: sharing_policy WIFI is not supported", d, out)
        for name, says in (("non-utf8", "name: is not UTF-8 text"),
                           ("name-newline", "name: holds the control character U+000A"),
                           ("dup-key-layers", "key \"layers\" given twice"),
                           ("nul-in-string", "a string holds U+0000")):
            wl = os.path.join(DATA, "wl", name + ".json")
            refused(f"T3-11/19/20 a workload with {name} (run)",
                    ["run", "--mode", "analytic", "--platform", "star", "--gpus", "1", "--iters",
                     "2", "--workload", wl, "--out", out], says, d, out)
            refused(f"T3-11/19/20 a workload with {name} (workload --json)",
                    ["workload", "--json", wl], says, d)
        refused("T3-29 a sweep PREFIX in a folder that does not exist",
                ["sweep", os.path.join(DATA, "sweep-ok-small.json"), "--out",
                 os.path.join(d, "no", "such", "s")], "does not exist", d)
        refused("T3-29 an empty --out", ["run", "--mode", "analytic", "--platform", "star",
                                         "--workload", "mlp-small", "--iters", "2", "--out", ""],
                "--out: expected a file name, got an empty one", d)
        for name, says in (("iter-zero", "iteration_time_s: expected a time in (0, 1e9] s"),
                           ("iter-1e308", "iteration_time_s: expected a time in (0, 1e9] s"),
                           ("ranks-missing", "ranks: expected an array"),
                           ("mode-bogus", "mode: expected sim, analytic or real")):
            refused(f"T3-17 compare with {name}",
                    ["compare", os.path.join(DATA, "cmp", "a.json"),
                     os.path.join(DATA, "cmp", name + ".json")], says, d)
        for opt, value in (("--gpus", "0x10"), ("--batch", "0x40"), ("--iters", "0x2"),
                           ("--bucket-mb", "0x10"), ("--capacity-factor", "0x1"),
                           ("--seed", "0x10")):
            refused(f"T3-18 {opt} {value}",
                    ["run", "--mode", "analytic", "--platform", "star", "--workload", "mlp-small",
                     opt, value, "--out", out], f"{opt}: expected a decimal number", d, out)
        refused("T3-31 kbench names --from",
                ["kbench", "--derive-for", "a100-80gb", "--from", os.path.join(d, "nope.json"),
                 "--out", os.path.join(d, "k.json")], "--from: ", d, os.path.join(d, "k.json"))
        for spec in ("empty-obj.json", "axes-empty.json"):
            refused(f"T3-34 a sweep spec that varies nothing ({spec})",
                    ["sweep", os.path.join(DATA, spec), "--out", os.path.join(d, "e")],
                    "axes: nothing to sweep", d, os.path.join(d, "e.csv"))
        # T3-21: the file's <config> sets tracing:yes and tracing/filename (relative)
        plat = os.path.join(DATA, "config-tracing-relative.xml")
        trace = os.path.join(d, "written-by-platform.trace")
        refused("T3-21 a platform that asks for a trace, run refused",
                ["run", "--mode", "analytic", "--platform", plat, "--workload", "mlp-small",
                 "--gpus", "4", "--out", out], "has only 2 GPUs", d, out)
        check("T3-21 no trace written by the refused run", not os.path.exists(trace), trace)
        for mode in ("analytic", "sim"):
            p = subprocess.run([DLSIM, "run", "--mode", mode, "--platform", plat, "--workload",
                                "mlp-small", "--gpus", "2", "--iters", "1", "--out", out],
                               capture_output=True, text=True, cwd=d, timeout=300)
            check(f"T3-21 {mode}: runs, and writes no trace",
                  p.returncode == 0 and not os.path.exists(trace),
                  f"exit {p.returncode}, {'a trace' if os.path.exists(trace) else 'no trace'}")
        p = subprocess.run([DLSIM, "coll", "--platform", plat, "--gpus", "2", "--op", "allreduce",
                            "--max-bytes", "1KB"], capture_output=True, text=True, cwd=d,
                           timeout=300)
        check("T3-21 coll: runs, and writes no trace",
              p.returncode == 0 and not os.path.exists(trace), f"exit {p.returncode}")
        inputs_rest(d, os.path.join(d, "h.json"))
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
