#!/usr/bin/python3
"""Predicts the single-GPU training iterations that tests/validation/torch_iter.py ran for real
(tests/validation/run_gpu.sh writes them to OUTDIR/iter.json) and prints the errors as a Markdown
table: one prediction per kernel database given (dlsim's own CUDA kernels, measured by
`dlsim kbench --device cuda`; PyTorch's kernels at the same keys, kernels/torch_compare.py
--db-out), each a simulated run (`dlsim run --mode sim`) on a one-GPU platform of the database's
GPU.

  tests/validation/predict_gpu.py OUTDIR/iter.json [MORE.json ...] \\
      --db dlsim=kernels/db/h200.json --db pytorch=kernels/db/h200-pytorch.json \\
      [--dlsim build/dlsim] [--out TABLE.md] [--cases kernels/validation/h200-pytorch.json]

error = (predicted - real) / real, real = the median of the timed iterations. --cases writes,
for the last --db, every case's real and predicted time: the validation cases that dlsim's
prediction intervals take the model's error from (kernels/validation/NAME.json beside the
database kernels/db/NAME.json).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"predict_gpu: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("iter", nargs="+",
                    help="iter.json from run_gpu.sh (a list of torch_iter.py results)")
    ap.add_argument("--db", action="append", required=True, metavar="LABEL=FILE",
                    help="a kernel database to predict with (repeatable)")
    ap.add_argument("--dlsim", default=os.path.join(ROOT, "build", "dlsim"))
    ap.add_argument("--out", help="also write the table here")
    ap.add_argument("--cases", help="write the last database's validation cases here (JSON)")
    a = ap.parse_args(argv)
    runs = []
    for path in a.iter:
        with open(path) as f:
            runs += [r for r in json.load(f) if r.get("iteration_s")]
    dbs = []
    for d in a.db:
        label, _, path = d.partition("=")
        if not label or not path:
            ap.error(f"--db {d}: expected LABEL=FILE")
        with open(path) as f:
            prov = json.load(f)["provenance"]
        dbs.append((label, path, prov.get("spec_key") or prov.get("device")))
    with tempfile.TemporaryDirectory(prefix="dlsim-predict-") as tmp:
        rows = predict(a.dlsim, runs, dbs, tmp)
    if a.cases:
        write_cases(a.cases, a.iter, dbs[-1], runs, rows)
    return table(runs, dbs, rows, a.out)


def write_cases(path, sources, db, runs, rows):
    """The validation cases of database `db` (label, path, GPU): each real run's median and its
    prediction, with what measured them."""
    label, dbpath, gpu = db
    prov = runs[0]["provenance"] if runs else {}
    doc = {"format": "dlsim-validation-1",
           "kernels": os.path.splitext(os.path.basename(dbpath))[0],
           "measured": f"PyTorch {prov.get('torch', '?')} on one {prov.get('gpu', gpu)}: median "
                       "of the timed training iterations (tests/validation/torch_iter.py)",
           "predicted": "dlsim run --mode sim on a one-GPU platform with this database "
                        "(tests/validation/predict_gpu.py)",
           "sources": [os.path.relpath(os.path.abspath(s), ROOT) for s in sources],
           "cases": [{"case": f"{w['workload']} batch {w['batch']} {w['precision']}",
                      "real_s": w["real_s"], "predicted_s": w["pred"][label]["s"]}
                     for w in rows]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def simulate(dlsim, workload, batch, precision, db, gpu, tmp, plats, autocast=False):
    """The result of `dlsim run --mode sim` of one training iteration on one GPU of model `gpu`
    (a platform made once per model in `plats`) with kernel database `db`; `autocast`: 16-bit
    runs as PyTorch's automatic mixed precision (--autocast)."""
    if gpu not in plats:
        plats[gpu] = os.path.join(tmp, f"{gpu}.xml")
        run([dlsim, "platform", "--nodes", "1", "--gpus-per-node", "1", "--gpu", gpu,
             "-o", plats[gpu]])
    out = os.path.join(tmp, "r.json")
    amp = ["--autocast"] if autocast and precision in ("fp16", "bf16") else []
    run([dlsim, "run", "--mode", "sim", "--platform", plats[gpu], "--gpus", "1",
         "--workload", workload, "--batch", str(batch), "--precision", precision,
         "--kernels", db, "--iters", "1", "--out", out] + amp)
    with open(out) as f:
        return json.load(f)


def predict(dlsim, runs, dbs, tmp):
    """One row per real run: its real median and each database's prediction and coverage."""
    plats = {}
    rows = []
    for r in runs:
        c = r["config"]
        real = r["iteration_s"]["median"]
        row = {"workload": c["workload"], "batch": r["batch"], "precision": c["precision"],
               "real_s": real, "real_min_s": r["iteration_s"]["min"], "pred": {}}
        for label, path, gpu in dbs:
            # torch_iter.py trains fp16/bf16 under torch.autocast
            # a workload outside workloads/ by the file torch_iter.py read
            wl = c["workload"]
            if c.get("file") and not os.path.exists(os.path.join(ROOT, "workloads", wl + ".json")):
                wl = os.path.join(ROOT, c["file"])
            res = simulate(dlsim, wl, r["batch"], c["precision"], path, gpu, tmp, plats,
                           autocast=True)
            k = res["kernel_db"]
            row["pred"][label] = {
                "s": res["iteration_time_s"], "err": res["iteration_time_s"] / real - 1,
                "cover": "/".join(str(k.get(o, 0)) for o in
                                  ("measured", "interpolated", "estimated"))}
        rows.append(row)
    return rows


def table(runs, dbs, rows, out):
    """Prints the Markdown table (and writes it to `out`, if given)."""
    gpu = runs[0]["provenance"].get("gpu", "?") if runs else "?"
    torch = runs[0]["provenance"].get("torch", "?") if runs else "?"
    lines = [f"Real: PyTorch {torch} on one {gpu}, median of the timed iterations (CUDA events). "
             "Predicted: `dlsim run --mode sim` on a one-GPU platform with each kernel database; "
             "kernels counted measured/interpolated/estimated.", "",
             "| workload | batch | precision | real (ms) | "
             + " | ".join(f"{lb} (ms) | error | kernels" for lb, _, _ in dbs) + " |",
             "|---|---:|---|---:|" + "---:|---:|---|" * len(dbs)]
    for w in rows:
        cells = []
        for lb, _, _ in dbs:
            p = w["pred"][lb]
            cells.append(f"{p['s'] * 1e3:.2f} | {p['err'] * 100:+.1f} % | {p['cover']}")
        lines.append(f"| {w['workload']} | {w['batch']} | {w['precision']} | "
                     f"{w['real_s'] * 1e3:.2f} | " + " | ".join(cells) + " |")
    for lb, _, _ in dbs:
        errs = [abs(w["pred"][lb]["err"]) for w in rows]
        if errs:
            lines.append(f"\n{lb}: mean absolute error {100 * sum(errs) / len(errs):.1f} %, "
                         f"max {100 * max(errs):.1f} %")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
