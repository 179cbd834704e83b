#!/usr/bin/python3
"""The GPU measurements and the scripts that made them, checked without a GPU.

- torch_iter.py builds every workload with dlsim's layer shapes and parameter counts
  (--dry-run --check-against `dlsim workload NAME --json`);
- torch_compare.py plans a PyTorch op for every entry of the measured H200 database (flatten,
  a view, is the only kind it skips);
- the databases: h200.json measured by dlsim's CUDA kernels on an H200, h200-pytorch.json the
  framework's times at (at least) the same keys, one for every kernel but flatten, and not a copy
  of dlsim's; a100-40gb.json exactly what `dlsim kbench --derive-for a100-40gb` makes of the
  latter (every entry marked derived, none faster than on the H200);
- predict_gpu.py on the real iterations measured on the H200 (tests/validation/data/
  h200-iter.json) reproduces the validation table: from PyTorch's kernel times each prediction
  is within 20 % of the real median, and from dlsim's own kernels each is slower than real.
Usage: check_gpu_data.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DB = os.path.join(REPO, "kernels", "db")


def py(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        for w in ("resnet18-cifar100", "resnet50-imagenet", "gpt-1.7b", "vgg16-imagenet",
                  "alexnet-imagenet", "mixtral-8x1b"):
            ref = os.path.join(d, f"{w}.json")
            with open(ref, "w") as f:
                subprocess.run([dlsim, "workload", w, "--json"], check=True, stdout=f)
            p = py(os.path.join(REPO, "tests", "validation", "torch_iter.py"), "--workload", w,
                   "--batch", "2", "--dry-run", "--check-against", ref)
            check(f"torch_iter.py builds {w} as dlsim does", p.returncode == 0 and
                  "all layers agree" in p.stdout, p.stderr.strip()[-300:])
        out = os.path.join(d, "plan.json")
        p = py(os.path.join(REPO, "kernels", "torch_compare.py"), os.path.join(DB, "h200.json"),
               "--dry-run", "--out", out)
        with open(out) as f:
            es = json.load(f)["entries"]
        skipped = {e["kname"] for e in es if e.get("skipped")}
        check("torch_compare.py plans a PyTorch op for every entry but flatten",
              p.returncode == 0 and skipped <= {"flatten.fwd", "flatten.bwd"} and
              not any(e.get("error") for e in es), f"{len(es)} entries, skipped {sorted(skipped)}")

        dbs = {}
        for name in ("h200", "h200-pytorch", "a100-40gb"):
            with open(os.path.join(DB, f"{name}.json")) as f:
                dbs[name] = json.load(f)
        m, fw, a = dbs["h200"], dbs["h200-pytorch"], dbs["a100-40gb"]
        check("h200.json: measured by dlsim's CUDA kernels on an H200",
              m["provenance"]["backend"] == "cuda" and m["provenance"]["spec_key"] == "h200" and
              not m["provenance"]["derived"] and "H200" in m["provenance"]["device_full_name"])
        mk = {e["key"]: e["median_s"] for e in m["entries"]}
        timed = [e for e in fw["entries"] if not e["kname"].startswith("flatten.")]
        same = sum(1 for e in timed if mk.get(e["key"]) == e["median_s"])  # flatten keeps dlsim's
        check("h200-pytorch.json: PyTorch's times at dlsim's keys, every kernel but flatten timed "
              "by the framework, and not dlsim's times",
              fw["provenance"]["backend"] == "pytorch" and
              set(mk) <= {e["key"] for e in fw["entries"]} and
              fw["provenance"]["framework_entries"] == len(timed) and same <= 0.01 * len(mk),
              f"{len(timed)} timed, {fw['provenance']['framework_entries']} said; {same} equal "
              f"to dlsim's")
        again = os.path.join(d, "a100.json")
        p = subprocess.run([dlsim, "kbench", "--derive-for", "a100-40gb", "--from",
                            os.path.join(DB, "h200-pytorch.json"), "--out", again],
                           capture_output=True, text=True)
        rd = {}
        if p.returncode == 0:
            with open(again) as f:
                rd = {e["key"]: e["median_s"] for e in json.load(f)["entries"]}
        fwd = {e["key"]: e["median_s"] for e in fw["entries"]}
        ok = a["provenance"]["derived"] and a["provenance"]["derived_from"] == "h200-pytorch" and \
            len(rd) == len(a["entries"]) == len(fwd)
        for e in a["entries"]:  # deterministic; and an A100 is never faster than an H200
            ok = ok and e.get("derived") is True and rd.get(e["key"]) == e["median_s"] and \
                e["median_s"] >= fwd.get(e["key"], float("inf"))
        check("a100-40gb.json: what kbench --derive-for makes of h200-pytorch.json today, every "
              "entry marked derived and none faster than on the H200", ok,
              p.stderr.strip()[-300:])

        table = os.path.join(d, "pred.md")
        p = py(os.path.join(REPO, "tests", "validation", "predict_gpu.py"),
               os.path.join(REPO, "tests", "validation", "data", "h200-iter.json"), "--db",
               f"dlsim={os.path.join(DB, 'h200.json')}", "--db",
               f"pytorch={os.path.join(DB, 'h200-pytorch.json')}", "--dlsim", dlsim, "--out",
               table)
        check("predict_gpu.py runs", p.returncode == 0, p.stderr.strip()[-300:])
        rows = [ln.split("|") for ln in open(table).read().splitlines()
                if ln.startswith("| ") and "%" in ln]
        check("five real runs predicted", len(rows) == 5, str(len(rows)))
        for r in rows:
            name = f"{r[1].strip()} batch {r[2].strip()} {r[3].strip()}"
            e_dl, e_fw = float(r[6].strip(" %")), float(r[9].strip(" %"))
            check(f"{name}: from PyTorch's kernels within 20 % ({e_fw:+.1f} %)", abs(e_fw) < 20)
            check(f"{name}: from dlsim's kernels slower than real ({e_dl:+.1f} %)", e_dl > 0)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
