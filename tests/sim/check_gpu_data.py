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
- the H100's databases (dlsim's kernels, PyTorch's), the framework's host times in both
  PyTorch databases, the derivation rule within 5 % of the summed measured kernel time from the
  H200 to the H100 and back, and the host launch model moving the host-bound ResNet-18 in bf16
  towards its real iteration time;
- predict_gpu.py on the real iterations measured on the H200 (tests/validation/data/
  h200-iter.json) reproduces the validation table: from PyTorch's kernel times each prediction
  is within 20 % of the real median, and from dlsim's own kernels each is slower than real;
- Llama 3: torch_iter.py builds llama3-8b and the 4-block llama3-8b-4l as dlsim does; the
  4-block model's real iterations on the H200 and the H100 (data/h200-llama-iter.json,
  h100-llama-iter.json) are predicted within 10 % from PyTorch's kernels measured on the same
  GPU, every kernel but autocast's weight casts from a measured entry; Llama 3 8B on two DGX
  H100 nodes (tp 8, 2 sequences per micro-batch, bf16) takes at least 95 % of its kernel time
  from measured entries, with dlsim's kernels and with PyTorch's.
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
                  "alexnet-imagenet", "mixtral-8x1b", "llama3-8b",
                  os.path.join(REPO, "tests", "validation", "llama3-8b-4l.json")):
            ref = os.path.join(d, os.path.basename(w) + ("" if w.endswith(".json") else ".json"))
            with open(ref, "w") as f:
                subprocess.run([dlsim, "workload", w, "--json"], check=True, stdout=f)
            p = py(os.path.join(REPO, "tests", "validation", "torch_iter.py"), "--workload", w,
                   "--batch", "2", "--dry-run", "--check-against", ref)
            check(f"torch_iter.py builds {os.path.basename(w)} as dlsim does",
                  p.returncode == 0 and
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

        # the H100: dlsim's kernels and PyTorch's at the same keys, measured on one H100
        for name, backend in (("h100-sxm", "cuda"), ("h100-sxm-pytorch", "pytorch")):
            with open(os.path.join(DB, f"{name}.json")) as f:
                h = json.load(f)
            check(f"{name}.json: measured by {backend} on an H100", h["provenance"]["backend"] ==
                  backend and h["provenance"]["spec_key"] == "h100-sxm" and
                  not h["provenance"]["derived"] and "H100" in
                  h["provenance"]["device_full_name"])
            dbs[name] = h
        for name in ("h200-pytorch", "h100-sxm-pytorch"):
            hs = dbs[name].get("host", {})
            check(f"{name}.json carries the framework's host times", len(hs.get("ops_s", {})) >= 20
                  and "sgd" in hs.get("optimizer", {}) and "adam" in hs.get("optimizer", {}))
        # the derivation rule against measurement: H200 -> H100 and back, PyTorch's kernels
        for frm, to in (("h200-pytorch", "h100-sxm-pytorch"), ("h100-sxm-pytorch",
                                                               "h200-pytorch")):
            p = py(os.path.join(REPO, "tests", "validation", "derive_check.py"),
                   os.path.join(DB, f"{frm}.json"), os.path.join(DB, f"{to}.json"), "--dlsim",
                   dlsim)
            first = p.stdout.splitlines()[0] if p.stdout else ""
            summed = float(first.split("summed time ")[1].split("%")[0]) if "summed" in first \
                else 99.0
            check(f"{to} derived from {frm}: summed kernel time within 5 % of the measured "
                  f"({summed:+.1f} %)", p.returncode == 0 and abs(summed) <= 5, first)

        # the host launch model where the real run is bound by it: ResNet-18 in bf16 on the H100
        iters = os.path.join(REPO, "tests", "validation", "data", "h100-iter.json")
        with open(iters) as f:
            real = {(r["config"]["workload"], r["batch"], r["config"]["precision"]):
                    r["iteration_s"]["median"] for r in json.load(f) if r.get("iteration_s")}
        rt = real[("resnet18-cifar100", 128, "bf16")]
        pred = {}
        plat = os.path.join(d, "h100.xml")
        subprocess.run([dlsim, "platform", "--nodes", "1", "--gpus-per-node", "1", "--gpu",
                        "h100-sxm", "-o", plat], check=True, capture_output=True)
        for opt in ([], ["--no-host-launch"]):
            p = subprocess.run([dlsim, "run", "--mode", "analytic", "--workload",
                                "resnet18-cifar100", "--gpus", "1", "--batch", "128",
                                "--precision", "bf16", "--platform", plat, "--kernels",
                                os.path.join(DB, "h100-sxm-pytorch.json"), "--out",
                                os.path.join(d, "r18.json")] + opt,
                               capture_output=True, text=True)
            with open(os.path.join(d, "r18.json")) as f:
                pred[bool(opt)] = json.load(f)["iteration_time_s"] if p.returncode == 0 else None
        check("ResNet-18 bf16 on the H100 (host-bound): the host launch model moves the "
              "prediction towards the real iteration",
              pred[False] and pred[True] and abs(pred[False] - rt) < abs(pred[True] - rt),
              f"real {rt * 1e3:.2f} ms, with {pred[False] and pred[False] * 1e3:.2f}, without "
              f"{pred[True] and pred[True] * 1e3:.2f}")

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

        # Llama 3: the 4-block 8B trained for real, predicted from the same GPU's kernels
        for gpu, dbn in (("h200", "h200"), ("h100", "h100-sxm")):
            p = py(os.path.join(REPO, "tests", "validation", "predict_gpu.py"),
                   os.path.join(REPO, "tests", "validation", "data", f"{gpu}-llama-iter.json"),
                   "--db", f"pytorch={os.path.join(DB, dbn + '-pytorch.json')}", "--dlsim",
                   dlsim)
            rows = [ln.split("|") for ln in p.stdout.splitlines()
                    if ln.startswith("| ") and "%" in ln]
            check(f"llama3-8b-4l on the {gpu}: two real runs predicted", p.returncode == 0 and
                  len(rows) == 2, p.stderr.strip()[-300:])
            for r in rows:
                err, cover = float(r[6].strip(" %")), r[7].strip().split("/")
                check(f"llama3-8b-4l batch {r[2].strip()} on the {gpu}: from PyTorch's kernels "
                      f"within 10 % ({err:+.1f} %), no kernel interpolated ({'/'.join(cover)})",
                      abs(err) < 10 and cover[1] == "0")
        for kern in ("h100-sxm", "h100-sxm-pytorch"):
            out = os.path.join(d, "l8.json")
            p = subprocess.run([dlsim, "run", "--mode", "analytic", "--workload", "llama3-8b",
                                "--platform", "dgx-h100:2", "--gpus", "16", "--tp", "8",
                                "--batch", "16", "--microbatches", "8", "--precision", "bf16",
                                "--kernels", kern, "--out", out], capture_output=True, text=True)
            share = json.load(open(out))["kernel_db"]["time_share"] if p.returncode == 0 else {}
            got = share.get("measured", 0) + share.get("derived", 0)
            check(f"llama3-8b on dgx-h100:2 (tp 8) with {kern}: at least 95 % of kernel time "
                  f"measured or derived ({100 * got:.1f} %)", got >= 0.95, p.stderr[-300:])
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
