"""What the simulation checks share: running dlsim for a result, and counting failed checks.

Each check prints "ok   WHAT: DETAIL" or "FAIL WHAT: DETAIL"; finish() prints the closing
"PASSED: 0 failure(s)" / "FAILED: N failure(s)" line ctest matches, and returns the exit status.
"""
import json
import os
import subprocess

_failures = 0


def check(what, ok, detail=""):
    global _failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}")
    _failures += not ok


def finish():
    print(f"{'FAILED' if _failures else 'PASSED'}: {_failures} failure(s)")
    return 1 if _failures else 0


def run(dlsim, workdir, *args):
    """Runs `dlsim run ARGS --out FILE` in `workdir` and returns the result JSON."""
    out = os.path.join(workdir, "r.json")
    subprocess.run([dlsim, "run", "--out", out, *args], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def refused(dlsim, args, needle, path=None):
    """Runs `dlsim ARGS` and checks the documented refusal: exit status 2 and one line on
    standard error that names `needle` (and `path`, the file, when given)."""
    p = subprocess.run([dlsim, *args], capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    check(f"refused, naming {needle}: exit 2 and one line", p.returncode == 2 and
          len(lines) == 1 and needle in lines[0] and (path is None or path in lines[0]),
          p.stderr.strip())


def refused_outside_runs(dlsim, workdir, option):
    """`option` (a list: the flag and its value) belongs to simulated runs: `dlsim run --mode
    real`, `dlsim export`, `dlsim search` and `dlsim kbench` refuse it, naming the flag, and
    write nothing."""
    never = os.path.join(workdir, "never")
    refused(dlsim, ["run", "--mode", "real", "--workload", "mlp-small", "--gpus", "2",
                    "--batch", "8", *option, "--out", never + ".json"], option[0])
    refused(dlsim, ["export", "--format", "chakra", "--workload", "mlp-small", "--platform",
                    "star", "--gpus", "2", *option, "--out", never], option[0])
    refused(dlsim, ["search", "--workload", "mlp-small", "--platform", "star", "--gpus", "2",
                    *option, "--out", never], option[0])
    refused(dlsim, ["kbench", "--workload", "mlp-small", *option, "--out", never + ".json"],
            option[0])
    check(f"{option[0]}: nothing written", not os.path.exists(never) and
          not os.path.exists(never + ".json"))
