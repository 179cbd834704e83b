#!/usr/bin/python3
"""An interrupted search resumes where it stopped and writes what an uninterrupted one writes.

gpt-tiny on 64 GPUs of DGX H100 nodes, batch 4,096 (1,449 layouts, about a hundred of them timed,
the rest dropped or passed over for their bound): the search is killed with SIGKILL once its
journal (PREFIX.journal: the layouts timed) holds 40 layouts, then run again with another --jobs:
it says how many it resumes, evaluates only the rest, writes PREFIX.json, .csv and .svg
byte-identical to an uninterrupted search's, and removes its journal. A journal of another search
(another batch) is not taken: the search starts over. A torn last line is evaluated again.
Usage: check_search_resume.py DLSIM
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from checklib import check, finish

ARGS = ["search", "--workload", "gpt-tiny", "--platform", "dgx-h100:8", "--gpus", "64",
        "--top", "3", "--verify", "0"]


def outputs(prefix):
    return [open(prefix + ext, "rb").read() for ext in (".json", ".csv", ".svg")]


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def killed(dlsim, prefix, batch, at):
    """Starts the search of `batch` with --out `prefix` and kills it (SIGKILL) once its journal
    holds `at` layouts; returns how many it holds."""
    p = subprocess.Popen([dlsim, *ARGS, "--batch", batch, "--jobs", "1", "--out", prefix],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    while p.poll() is None and lines(prefix + ".journal") < at + 1:
        time.sleep(0.005)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    return lines(prefix + ".journal") - 1


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        ref = os.path.join(d, "ref")
        subprocess.run([dlsim, *ARGS, "--batch", "4096", "--jobs", "1", "--out", ref],
                       check=True, capture_output=True)
        check("an uninterrupted search leaves no journal", not os.path.exists(ref + ".journal"))
        cut = os.path.join(d, "cut")
        with open(ref + ".json") as f:
            timed = json.load(f)["evaluated"]
        held = killed(dlsim, cut, "4096", 40)
        check(f"killed part-way, the journal holds part of the {timed} layouts timed",
              40 <= held < timed, str(held))
        with open(cut + ".journal", "ab") as f:  # a torn last line
            f.write(b"7\t0\t0\t0.00")
        r = subprocess.run([dlsim, *ARGS, "--batch", "4096", "--jobs", "2", "--out", cut],
                           capture_output=True, text=True)
        check("resumed: says how many it had", r.returncode == 0 and
              "resuming:" in r.stderr and "layouts already evaluated" in r.stderr,
              r.stderr.strip()[-300:])
        check("resumed: outputs byte-identical to the uninterrupted search's",
              r.returncode == 0 and outputs(cut) == outputs(ref))
        check("resumed: the journal is gone", not os.path.exists(cut + ".journal"))
        # another search's journal is not taken
        other = os.path.join(d, "other")
        check("another search killed part-way", 20 <= killed(dlsim, other, "4096", 20) < timed)
        r = subprocess.run([dlsim, *ARGS, "--batch", "2048", "--jobs", "2", "--out", other],
                           capture_output=True, text=True)
        fresh = os.path.join(d, "fresh")
        subprocess.run([dlsim, *ARGS, "--batch", "2048", "--jobs", "2", "--out", fresh],
                       check=True, capture_output=True)
        check("another search's journal: started over, as a fresh search",
              r.returncode == 0 and "resuming" not in r.stderr and outputs(other) == outputs(fresh),
              r.stderr.strip()[-300:])
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
