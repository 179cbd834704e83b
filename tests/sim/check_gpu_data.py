#!/usr/bin/python3
"""The GPU measurements and the scripts that made them, checked without a GPU.

- torch_iter.py builds every workload with dlsim's layer shapes and parameter counts
  (--dry-run --check-against `dlsim workload NAME --json`);
- torch_compare.py plans a PyTorch op for every entry of the measured H200 database (flatten,
  a view, is the only kind it skips);
- the databases: h200.json measured by dlsim's CUDA kernels on an H200, h200-pytorch.json the
  framework's times at the same keys, a100-40gb.json derived from the latter, every entry marked
  derived, each time the H200 time scaled by the two spec sheets' roofline ratio for its shape;
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
        mk = {e["key"] for e in m["entries"]}
        check("h200-pytorch.json: PyTorch's times at dlsim's keys",
              fw["provenance"]["backend"] == "pytorch" and mk <= {e["key"] for e in fw["entries"]})
        fwd = {e["key"]: e for e in fw["entries"]}
        ok = a["provenance"]["derived"] and a["provenance"]["derived_from"] == "h200-pytorch"
        worst = 0.0
        for e in a["entries"]:
            src = fwd[e["key"]]
            ok = ok and e.get("derived") is True
            r = e["median_s"] / src["median_s"]
            # A100 over H200: between the compute ratio (989/312, 67/19.5) and the bandwidth
            # ratio (4.8/1.555), never faster
            worst = max(worst, r)
            ok = ok and 1.0 <= r <= 3.5
        check("a100-40gb.json: derived from h200-pytorch.json, every entry marked and slower "
              "by the spec ratio", ok, f"largest ratio {worst:.2f}")

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
