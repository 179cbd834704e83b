#!/usr/bin/env python3
"""A killed or interrupted dlsim takes its children (smpirun, mpirun, a sweep's runs) and its
temporary directories with it.

Usage: check_children.py DLSIM   (DLSIM_DATA_DIR points at the repository)

smpirun and mpirun are replaced (DLSIM_SMPIRUN, DLSIM_MPIRUN) by a script that starts a
grandchild, records both process ids and waits, as smpirun does (it traps SIGTERM and kills its
simulation). Each case starts dlsim, waits until the script has started (on the file it writes,
not on time), signals dlsim, then checks that every recorded process is gone, that $TMPDIR holds
no dlsim directory, and that nothing was written at --out. The time limits only bound a failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

DLSIM = sys.argv[1]
FAKE = """#!/bin/sh
echo $$ >> "$DLSIM_TEST_PIDS"
sleep 600 &
child=$!
echo $child >> "$DLSIM_TEST_PIDS"
trap 'kill $child; exit 143' TERM INT HUP
wait $child
"""
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += 0 if ok else 1


def alive(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            state = [l for l in f if l.startswith("State:")][0]
        return "Z" not in state.split()[1]  # a zombie waiting for init is gone
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def wait_for(cond, limit_s):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def pids(path, n):
    def got():
        try:
            with open(path) as f:
                return len(f.read().split()) >= n
        except FileNotFoundError:
            return False
    if not wait_for(got, 120):
        return None
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def case(name, argv, sig, n_pids, env_key):
    with tempfile.TemporaryDirectory() as d:
        tmp = os.path.join(d, "tmp")
        os.mkdir(tmp)
        fake = os.path.join(d, "fake-launcher")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        pidfile = os.path.join(d, "pids")
        out = os.path.join(d, "out.json")
        env = dict(os.environ, TMPDIR=tmp, DLSIM_TEST_PIDS=pidfile, **{env_key: fake})
        p = subprocess.Popen([DLSIM] + argv(out), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        recorded = pids(pidfile, n_pids)
        if recorded is None:
            p.kill()
            p.wait()
            check(False, "%s: the launcher never started (%s)" % (name, p.stderr.read()))
            return
        # a sweep's runs are dlsim processes too: they must go as well
        runs = []
        try:
            with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                runs = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            pass
        p.send_signal(sig)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "%s: dlsim did not stop on %s" % (name, sig.name))
            return
        p.stderr.close()
        check(p.returncode == -sig, "%s: dlsim died of %s (status %s)" % (name, sig.name,
                                                                           p.returncode))
        gone = wait_for(lambda: not any(alive(x) for x in recorded + runs), 60)
        check(gone, "%s: its children are gone (%s)" % (name, " ".join(
            str(x) for x in recorded + runs if alive(x)) or "all"))
        if sig == signal.SIGKILL:
            # the next dlsim that makes a temporary directory removes a dead one's
            subprocess.run([DLSIM, "run", "--mode", "sim", "--workload", "mlp-small", "--gpus",
                            "2"], env=dict(env, **{env_key: "/bin/true"}),
                           capture_output=True)
        left = [x for x in os.listdir(tmp) if x.startswith("dlsim-")]
        check(not left, "%s: no temporary directory left (%s)" % (name, " ".join(left) or "none"))
        rows = 0
        for x in os.listdir(d):
            if x == "out.json":
                rows += 1
            elif x in ("out.csv", "out.jsonl"):  # a sweep's files: the CSV header at most
                with open(os.path.join(d, x)) as f:
                    rows += len(f.read().splitlines()) - (x == "out.csv")
        check(rows == 0, "%s: no result written (%d)" % (name, rows))


def run_sim(out):
    return ["run", "--mode", "sim", "--workload", "mlp-small", "--gpus", "2", "--out", out]


def run_real(out):
    return ["run", "--mode", "real", "--workload", "mlp-small", "--gpus", "2", "--out", out]


def sweep(out):
    spec = os.path.join(os.path.dirname(out), "spec.json")
    with open(spec, "w") as f:
        f.write('{"fixed": {"workload": "mlp-small", "mode": "sim"}, "axes": {"gpus": [2, 4]}}')
    return ["sweep", spec, "--jobs", "2", "--out", out[:-len(".json")]]


case("run --mode sim, SIGTERM", run_sim, signal.SIGTERM, 2, "DLSIM_SMPIRUN")
case("run --mode sim, SIGINT", run_sim, signal.SIGINT, 2, "DLSIM_SMPIRUN")
case("run --mode sim, SIGKILL", run_sim, signal.SIGKILL, 2, "DLSIM_SMPIRUN")
case("run --mode real, SIGTERM", run_real, signal.SIGTERM, 2, "DLSIM_MPIRUN")
case("sweep of two sim runs, SIGTERM", sweep, signal.SIGTERM, 4, "DLSIM_SMPIRUN")
case("T3-25 sweep of two sim runs, SIGKILL", sweep, signal.SIGKILL, 4, "DLSIM_SMPIRUN")
print("PASSED: %d failure(s)" % failures if failures == 0 else "%d failure(s)" % failures)
sys.exit(1 if failures else 0)
