#!/usr/bin/env python3
"""Every input in tests/fuzz/regressions/ through the command line, as a user would give it: the
command must end with exit status 2 and one line on stderr that starts with "dlsim: ", and write
nothing where --out points.

Usage: check_regressions.py DLSIM   (DLSIM_DATA_DIR points at the repository)

The file name says which loader it is for: workload-*, platform-* (also run in simulation when
the name has "-sim"; only there with "-sim-only"), kdb-*, sweep-*, options-* (one argument per line),
chakra-* (rank 0's trace of a one-rank chakra:DIR workload, both modes).
"""
import os
import shutil
import subprocess
import sys
import tempfile

DLSIM = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
REG = os.path.join(HERE, "regressions")


def commands(path, out):
    name = os.path.basename(path)
    run = [DLSIM, "run", "--iters", "2", "--out", out]
    if name.startswith("workload-"):
        return [run + ["--mode", "analytic", "--workload", path]]
    if name.startswith("platform-"):
        base = run + ["--workload", "mlp-small", "--gpus", "2", "--platform", path]
        modes = ["sim"] if "-sim-only" in name else ["analytic", "sim"] if "-sim" in name \
            else ["analytic"]
        return [base + ["--mode", m] for m in modes]
    if name.startswith("kdb-"):
        return [run + ["--mode", "analytic", "--workload", "mlp-deep", "--gpus", "4", "--pp", "4",
                       "--batch", "16", "--kernels", path, "--kernels-any-device"]]
    if name.startswith("sweep-"):
        return [[DLSIM, "sweep", path, "--out", out[:-len(".json")]]]
    if name.startswith("chakra-"):  # the trace of rank 0 of a one-rank run
        d = os.path.join(os.path.dirname(out), "trace-" + name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(path, os.path.join(d, "t.0.et"))
        return [run + ["--mode", m, "--workload", "chakra:" + d] for m in ("analytic", "sim")]
    if name.startswith("options-"):
        with open(path) as f:
            args = [line.rstrip("\n") for line in f if line.strip()]
        return [run + args]
    raise SystemExit("FAIL %s: no rule for this name" % name)


def main():
    failures = 0
    names = sorted(os.listdir(REG))
    with tempfile.TemporaryDirectory() as d:
        for name in names:
            out = os.path.join(d, "never.json")
            for cmd in commands(os.path.join(REG, name), out):
                p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                                   timeout=300)
                lines = p.stderr.splitlines()
                left = [f for f in os.listdir(d) if not f.startswith("trace-")]
                why = None
                if p.returncode != 2:
                    why = "exit status %d, expected 2" % p.returncode
                elif len(lines) != 1 or not lines[0].startswith("dlsim: "):
                    why = "%d stderr lines, expected one 'dlsim: ...'" % len(lines)
                elif left:
                    why = "wrote %s" % ", ".join(left)
                mode = cmd[cmd.index("--mode") + 1] if "--mode" in cmd else cmd[1]
                if why:
                    print("FAIL %s (%s): %s\n  %s" % (name, mode, why, p.stderr.strip()[:2000]))
                    failures += 1
                    for f in left:
                        os.unlink(os.path.join(d, f))
                else:
                    print("ok   %s (%s): %s" % (name, mode, lines[0]))
    print("PASSED: %d failure(s)" % failures if failures == 0 else "%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
