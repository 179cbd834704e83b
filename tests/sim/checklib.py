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
