#!/usr/bin/python3
"""`dlsim run --mode real --device cuda` on this machine's GPU: its weights against the CPU
twins', and its iteration times beside the simulation's from the database of the same kernels.

  tests/validation/real_gpu.py --out OUT/real.json [--dlsim build/dlsim] [--budget SECONDS]
      [--steps "weights times"]                                    on the GPU's machine, then
  tests/validation/real_gpu.py --predict OUT/real.json --db kernels/db/h200.json   anywhere

Weights: each case trains 2 iterations at batch 16 in fp32 on the CPU twins (--device cpu) and on
the GPU (--device cuda) from the same seeded weights and data, and compares every parameter after
the last step (--dump-weights, serial layout) and the losses. The GPU sums in other orders
(cuBLAS's GEMM and convolution algorithms, block reductions, atomics in the embedding's
backward), so the two agree to float32 rounding, not bit for bit. SGD cases pass when every
weight is within 1e-4 of its layer's largest |w| (tests/real/check_real.py holds re-associated CPU
sums to 1e-5; a lost transfer or a wrong gradient moves weights by about lr·|g|, 1e-3 of the scale
and more); Adam cases, whose steps amplify rounding in near-zero gradients by lr/eps, when at most
0.5 % of the weights are outside that bound and all are within a tenth of one Adam step. Losses
agree within 1e-4 relative. Cases of 2 ranks share the GPU (data and pipeline parallelism against
the serial CPU run) where mpirun runs.

Times: each training case runs 6 iterations on the GPU (dlsim's steady state: the last 5).
--predict simulates each with the kernel database (`dlsim run --mode sim` on a one-GPU platform
of the database's GPU, tests/validation/predict_gpu.py), on any machine with SimGrid: error =
(simulated - real) / real. The database holds these very kernels, so the error is the
simulator's composition of them (launches, synchronisations, caches), not the quality of the
kernels.

OUT is rewritten after every case (provenance, weights[], times[]); a Markdown table is printed.
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "real"))
from predict_gpu import simulate  # noqa: E402
import weights  # noqa: E402
from weights import ADAM_LR  # noqa: E402

TIGHT = 1e-4    # of the layer's largest |w|
REAL = os.path.join(ROOT, "tests", "real")
# (label, workload, options, adam, by_update). by_update: ReLU after batch normalisation at batch
# 16 turns rounding into sign flips of the few inputs within rounding of zero (about one per run
# at ResNet-18's size; the CPU alone, tp 2 against serial on a 2-core EPYC, moves weights by up
# to 2.5e-3 of the layer scale, a quarter of the last step's update), so such a case passes
# when every layer's worst deviation is under half of that layer's largest last-step update on
# the CPU: a wrong or lost gradient changes the update by all of itself.
WEIGHT_CASES = [
    ("mlp-small", "mlp-small", ["--gpus", "1"], False, False),
    ("cnn-small", "cnn-small", ["--gpus", "1"], False, False),
    ("resnet18-cifar100", "resnet18-cifar100", ["--gpus", "1"], False, True),
    ("gpt-tiny-sgd", os.path.join(REAL, "gpt-tiny-sgd.json"), ["--gpus", "1"], False, False),
    ("gpt-tiny (Adam)", "gpt-tiny", ["--gpus", "1"], True, False),
    ("moe-tiny", os.path.join(REAL, "moe-tiny.json"), ["--gpus", "1"], False, False),
    ("gpt-tiny-sgd dp2 (2 ranks, one GPU)", os.path.join(REAL, "gpt-tiny-sgd.json"),
     ["--gpus", "2"], False, False),
    ("cnn-nobn pp2 1f1b m4 (2 ranks, one GPU)", os.path.join(REAL, "cnn-nobn.json"),
     ["--gpus", "2", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"], False, False),
    ("gpt-tiny-sgd megatron tp2 (2 ranks, one GPU)", os.path.join(REAL, "gpt-tiny-sgd.json"),
     ["--gpus", "2", "--tp", "2", "--tp-style", "megatron"], False, False),
    ("llama-tiny (Adam)", "llama-tiny", ["--gpus", "1"], True, False),
    ("llama-tiny tp2 sp (Adam, 2 ranks, one GPU)", "llama-tiny",
     ["--gpus", "2", "--tp", "2", "--sequence-parallel"], True, False),
    ("gpt-tiny-sgd zero3 dp2 m2 (2 ranks, one GPU)", os.path.join(REAL, "gpt-tiny-sgd.json"),
     ["--gpus", "2", "--zero", "3", "--microbatches", "2"], False, False),
    ("gpt-tiny-sgd tp2 full recompute (2 ranks, one GPU)", os.path.join(REAL, "gpt-tiny-sgd.json"),
     ["--gpus", "2", "--tp", "2", "--tp-style", "megatron", "--recompute", "full"], False, False),
]
# the GPT at batch 1: the real executor keeps every activation, saved attention probabilities
# and the Adam state in fp32 (about 130 GB at batch 4, more than an H100 holds)
TIME_CASES = [("resnet18-cifar100", 128, "fp32"), ("resnet18-cifar100", 128, "bf16"),
              ("resnet50-imagenet", 64, "fp32"), ("resnet50-imagenet", 64, "bf16"),
              ("gpt-1.7b", 1, "bf16")]


RUNNING = []  # the process of the case running now, for on_term


def on_term(signum, frame):
    """An outer timeout's SIGTERM: the running case's process group goes too (it is a session of
    its own, which the signal to this script's group does not reach)."""
    for p in RUNNING:
        os.killpg(p.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def dlsim_run(dlsim, args, timeout, env=None):
    """`dlsim run --mode real ARGS`: exit status, last line of its standard error, wall seconds.
    On a timeout the whole process group goes (mpirun and its ranks too, which would otherwise
    hold the GPU while the next case is timed)."""
    t0 = time.time()
    p = subprocess.Popen([dlsim, "run", "--mode", "real"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    RUNNING[:] = [p]
    try:
        _, err = p.communicate(timeout=timeout)
        return p.returncode, err.strip().splitlines()[-1:] or [""], time.time() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return 124, [f"timed out after {timeout:.0f} s"], time.time() - t0
    finally:
        RUNNING.clear()


def upd_note(rec):
    return f" ({rec['of_update']:.2f} of the update)" if "of_update" in rec else ""


def compare(ref, got, adam):
    """Worst deviation relative to the layer scale, elements outside TIGHT, and the verdict."""
    (rhead, rw), (head, w) = ref, got
    if head != rhead or len(w) != len(rw):
        return {"ok": False, "why": "parameter layouts differ"}
    worst, outside, far, per_layer = 0.0, 0, 0, []
    for name, scale, devs in weights.layer_deviations(ref, got):
        per_layer.append((max(devs, default=0.0) / scale,
                          sum(1 for d in devs if d > TIGHT * scale), name))
        for d in devs:
            worst = max(worst, d / scale)
            if d > TIGHT * scale:
                outside += 1
                far += d > 0.1 * ADAM_LR
    ok = (outside <= 0.005 * len(w) and far == 0) if adam else outside == 0
    return {"ok": ok, "worst_rel": worst, "outside": outside, "params": len(w),
            "worst_layers": [{"layer": n, "worst_rel": r, "outside": o} for r, o, n in
                             sorted(per_layer, reverse=True)[:5]]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where the GPU's results go")
    ap.add_argument("--predict", metavar="REAL_JSON", help="simulate the times of a finished run")
    ap.add_argument("--db", default=os.path.join(ROOT, "kernels", "db", "h200.json"),
                    help="with --predict: the database of this GPU's dlsim kernels")
    ap.add_argument("--dlsim", default=os.path.join(ROOT, "build", "dlsim"))
    ap.add_argument("--budget", type=float, default=420, help="seconds for everything")
    ap.add_argument("--device", default="cuda",
                    help="the --device held against the CPU twins (cpu with DLSIM_REAL_GUARDED=1 "
                         "in the environment tries this script on a machine without a GPU)")
    ap.add_argument("--steps", default="weights times", help="any of: weights times")
    ap.add_argument("--only", default="", help="only the weight cases whose label holds this (or one of "
                    "several, comma-separated)")
    a = ap.parse_args(argv)
    if a.predict:
        return predict(a)
    if not a.out:
        ap.error("--out or --predict is needed")
    a.steps = a.steps.split()
    if set(a.steps) - {"weights", "times"}:
        ap.error(f"--steps {' '.join(a.steps)}: expected weights and/or times")
    signal.signal(signal.SIGTERM, on_term)
    t_end = time.time() + a.budget
    selected = [c for c in WEIGHT_CASES if any(o in c[0] for o in a.only.split(","))]
    doc = {"provenance": {"date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "device": a.device}, "weights": [], "times": []}

    def save():
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)

    lines = []
    with tempfile.TemporaryDirectory(prefix="dlsim-real-gpu-") as tmp:
        if "weights" in a.steps:
            lines += ["| case | loss rel. diff | worst weight diff (of layer scale) | outside 1e-4 "
                      "| verdict |", "|---|---:|---:|---:|---|"]
            done = {}
            for label, wl, opts, adam, by_update in WEIGHT_CASES:
                if time.time() > t_end:
                    break
                if a.only and not any(o in label for o in a.only.split(",")):
                    continue
                runs = {}
                roles = (("ref", "cpu"), ("test", a.device)) + ((("prev", "cpu"),) if by_update
                                                                 else ())
                for role, dev in roles:
                    # the CPU reference is the serial run (shared by the 2-rank cases); prev: the
                    # same one iteration shorter
                    o = opts if role == "test" else ["--gpus", "1"]
                    iters = "1" if role == "prev" else "2"
                    key = (wl, role, tuple(o))
                    if key in done:
                        runs[role] = done[key]
                        continue
                    out = os.path.join(tmp, f"{len(done)}.json")
                    wb = os.path.join(tmp, f"{len(done)}.bin")
                    env = None if role == "test" else {k: v for k, v in os.environ.items()
                                                       if k != "DLSIM_REAL_GUARDED"}
                    rc, msg, _ = dlsim_run(a.dlsim, ["--device", dev, "--workload", wl, "--batch",
                                                     "16", "--iters", iters, "--out", out,
                                                     "--dump-weights", wb, "--ignore-memory"] + o,
                                           max(10, t_end - time.time()), env)
                    runs[role] = (rc, msg, out, wb)
                    done[key] = runs[role]
                rc_c, msg_c, out_c, wb_c = runs["ref"]
                rc_g, msg_g, out_g, wb_g = runs["test"]
                rec = {"case": label, "workload": os.path.basename(wl), "options": opts}
                if rc_c or rc_g:
                    rec.update(ok=False, why=f"cpu: {rc_c} {msg_c[0]}; {a.device}: {rc_g} {msg_g[0]}")
                else:
                    with open(out_c) as f:
                        lc = json.load(f)["loss"]
                    with open(out_g) as f:
                        res = json.load(f)
                    lg = res["loss"]
                    rec.update(compare(weights.read(wb_c), weights.read(wb_g), adam))
                    if by_update and not runs["prev"][0]:
                        ref_w = weights.read(wb_c)
                        upd = {n: max(d, default=0.0) / sc for n, sc, d in
                               weights.layer_deviations(weights.read(runs["prev"][3]), ref_w)}
                        dev = {n: max(d, default=0.0) / sc for n, sc, d in
                               weights.layer_deviations(ref_w, weights.read(wb_g))}
                        ratio = max((dev[n] / upd[n] if upd[n] > 0 else
                                     (0.0 if dev[n] == 0 else float("inf"))) for n in dev)
                        rec["of_update"] = ratio
                        rec["ok"] = ratio <= 0.5
                    elif by_update:
                        rec.update(ok=False, why=f"one-iteration CPU run: {runs['prev'][1][0]}")
                    rec["loss_cpu"], rec["loss_test"] = lc, lg
                    rec["loss_rel"] = max((abs(x - y) / max(abs(x), 1e-30) for x, y in zip(lc, lg)),
                                          default=float("inf"))
                    rec["ok"] = rec["ok"] and len(lc) == len(lg) and rec["loss_rel"] <= 1e-4
                    doc["provenance"]["kernel_db"] = res["kernel_db"]
                doc["weights"].append(rec)
                save()
                if "worst_rel" in rec:
                    lines.append(f"| {label} | {rec['loss_rel']:.1e} | {rec['worst_rel']:.1e} | "
                                 f"{rec['outside']}/{rec['params']} | "
                                 f"{'ok' if rec['ok'] else 'FAIL'}{upd_note(rec)} |")
                else:
                    lines.append(f"| {label} | | | | FAIL: {rec.get('why', '')} |")
                print(lines[-1], flush=True)
        if "times" in a.steps:
            lines += ["", f"| workload | batch | precision | real --device {a.device} (ms) |",
                      "|---|---:|---|---:|"]
            for wl, batch, prec in TIME_CASES:
                if time.time() > t_end:
                    break
                out = os.path.join(tmp, "t.json")
                # --ignore-memory: the platform's GPU is ThetaGPU's A100; the run itself says
                # when the tensors do not fit in this GPU
                rc, msg, wall = dlsim_run(a.dlsim, ["--device", a.device, "--workload", wl,
                                                    "--batch", str(batch), "--precision", prec,
                                                    "--gpus", "1", "--iters", "6", "--out", out,
                                                    "--ignore-memory"],
                                          max(10, min(240, t_end - time.time())))
                rec = {"workload": wl, "batch": batch, "precision": prec, "wall_s": wall}
                if rc:
                    rec["why"] = f"{rc} {msg[0]}"
                    lines.append(f"| {wl} | {batch} | {prec} | {rec['why']} |")
                else:
                    with open(out) as f:
                        res = json.load(f)
                    rec.update(real_s=res["iteration_time_s"], breakdown_s=res["breakdown_s"],
                               kernel_db=res["kernel_db"])
                    lines.append(f"| {wl} | {batch} | {prec} | {rec['real_s'] * 1e3:.2f} |")
                doc["times"].append(rec)
                save()
                print(lines[-1], flush=True)
    save()
    print("\n".join(lines))
    bad = [w for w in doc["weights"] if not w.get("ok")]
    if "weights" in a.steps and len(doc["weights"]) < len(selected):
        print(f"incomplete: {len(doc['weights'])} of {len(selected)} weight cases ran "
              f"within --budget {a.budget:.0f} s")
        return 1
    return 1 if bad else 0


def predict(a):
    """The times of a finished run (--predict) beside the simulation's from database a.db."""
    with open(a.predict) as f:
        doc = json.load(f)
    with open(a.db) as f:
        prov = json.load(f)["provenance"]
    gpu = prov.get("spec_key") or prov.get("device")
    dev = doc["provenance"].get("device", "cuda")
    lines = [f"| workload | batch | precision | real --device {dev} (ms) | simulated with "
             f"{os.path.basename(a.db)} (ms) | error |", "|---|---:|---|---:|---:|---:|"]
    errs = []
    with tempfile.TemporaryDirectory(prefix="dlsim-real-gpu-") as tmp:
        plats = {}
        for t in doc["times"]:
            if "real_s" not in t:
                lines.append(f"| {t['workload']} | {t['batch']} | {t['precision']} | "
                             f"{t.get('why', '?')} | | |")
                continue
            sim = simulate(a.dlsim, t["workload"], t["batch"], t["precision"], a.db, gpu, tmp,
                           plats)["iteration_time_s"]
            err = sim / t["real_s"] - 1
            errs.append(abs(err))
            lines.append(f"| {t['workload']} | {t['batch']} | {t['precision']} | "
                         f"{t['real_s'] * 1e3:.2f} | {sim * 1e3:.2f} | {err * 100:+.1f} % |")
    if errs:
        lines.append(f"\nmean absolute error {100 * sum(errs) / len(errs):.1f} %, "
                     f"max {100 * max(errs):.1f} %")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
