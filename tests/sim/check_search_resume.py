#!/usr/bin/python3
"""An interrupted search resumes where it stopped and writes what an uninterrupted one writes.

gpt-tiny on 64 GPUs of DGX H100 nodes, batch 4,096 (1,449 layouts, several dozen of them timed,
the rest passed over for their bound), the best one verified in simulation: the search is killed
with SIGKILL as it starts simulating, its journal (PREFIX.journal) holding every layout timed, and
the journal is cut to its first 40 layouts and a torn line, as a search killed while timing
leaves it (the closed form alone is over too soon to be killed part-way reliably), and one of
those lines is edited (its checksum then fails: 39 are taken); then it is run again with another
--jobs: it says how many it resumes, evaluates only the rest, writes
PREFIX.json, .csv and .svg byte-identical to an uninterrupted search's, and removes its journal.
A journal of another search (another batch) is not taken: the search starts over.
Usage: check_search_resume.py DLSIM
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

from checklib import check, finish

ARGS = ["search", "--workload", "gpt-tiny", "--platform", "dgx-h100:8", "--gpus", "64",
        "--top", "3", "--verify", "1"]


def outputs(prefix):
    return [open(prefix + ext, "rb").read() for ext in (".json", ".csv", ".svg")]


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def killed(dlsim, prefix, batch, keep):
    """Starts the search of `batch` with --out `prefix`, kills it (SIGKILL) once it says it
    simulates the best layout (its journal holds every layout the closed form timed then), and
    cuts the journal to its head and first `keep` layouts; returns how many it held when
    killed."""
    p = subprocess.Popen([dlsim, *ARGS, "--batch", batch, "--jobs", "1", "--out", prefix],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    for line in p.stderr:
        if line.startswith("dlsim: simulating 1 of"):
            os.killpg(p.pid, signal.SIGKILL)
            break
    p.stderr.close()
    p.wait()
    held = lines(prefix + ".journal") - 1
    if held > keep:
        with open(prefix + ".journal", "rb") as f:
            head = f.read().split(b"\n")[:keep + 1]
        with open(prefix + ".journal", "wb") as f:
            f.write(b"\n".join(head) + b"\n")
    return held


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
        check(f"killed as it simulates, the journal holds the layouts timed (of {timed} "
              "evaluated, the best refined included)", 40 < held <= timed, str(held))
        with open(cut + ".journal", "rb") as f:
            rows = f.read().split(b"\n")
        # a line edited since it was written (its time made NaN, as a damaged or hand-edited file
        # holds): its checksum no longer matches, and its layout is evaluated again
        fields = rows[5].split(b"\t")
        fields[4] = b"nan"
        rows[5] = b"\t".join(fields)
        with open(cut + ".journal", "wb") as f:
            f.write(b"\n".join(rows))
        with open(cut + ".journal", "ab") as f:  # a torn last line
            f.write(b"0123456789abcdef\t7\t0\t0\t0.00")
        r = subprocess.run([dlsim, *ARGS, "--batch", "4096", "--jobs", "2", "--out", cut],
                           capture_output=True, text=True)
        check("resumed: says how many it had, the edited line not among them",
              r.returncode == 0 and "resuming: 39 of" in r.stderr and
              "layouts already evaluated" in r.stderr, r.stderr.strip()[-300:])
        check("resumed: outputs byte-identical to the uninterrupted search's",
              r.returncode == 0 and outputs(cut) == outputs(ref))
        check("resumed: the journal is gone", not os.path.exists(cut + ".journal"))
        # another search's journal is not taken
        other = os.path.join(d, "other")
        check("another search killed", 20 < killed(dlsim, other, "4096", 20) <= timed)
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
