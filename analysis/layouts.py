#!/usr/bin/python3
"""The best layouts `dlsim search` finds for each case of a study spec
(analysis/studies/search-layouts.json), beside the layouts the papers published: for each case
the search (resumable: a case whose PREFIX.d/<case>.json exists is not searched again, and an
interrupted search resumes from its journal), the best layout run again in closed form, and the
published layout run with its degrees and the fastest of the choices its `try` lists. Writes
PREFIX.json (the figures), PREFIX.png and PREFIX.svg (TFLOP/s per GPU of each: searched,
published as dlsim runs it, published as measured), and prints a table.

Usage: analysis/layouts.py --dlsim build/dlsim [--spec SPEC] [--jobs N] --out PREFIX
       analysis/layouts.py --plot PREFIX.json --out PREFIX     (the picture and the table again)
"""
import argparse
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from plotlib import plt, save  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def slug(label):
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def platform_arg(dlsim, case, d):
    """The case's platform: a name, or a file written by `dlsim platform` from a preset."""
    p = case["platform"]
    if isinstance(p, str):
        return p
    path = os.path.join(d, slug(case["label"]) + ".xml")
    if not os.path.exists(path):
        subprocess.run([dlsim, "platform", "--preset", p["preset"], "--nodes", str(p["nodes"]),
                        "--gpu", p["gpu"], "--out", path], check=True)
    return path


def common(case, platform):
    a = ["--workload", case["workload"], "--platform", platform, "--gpus", str(case["gpus"]),
         "--batch", str(case["batch"]), "--precision", case["precision"]]
    if case.get("kernels"):
        a += ["--kernels", case["kernels"]]
    return a


def analytic(dlsim, args, d):
    """`dlsim run --mode analytic ARGS`: its result, or None when dlsim refuses the layout."""
    out = os.path.join(d, "run.json")
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run([dlsim, "run", "--mode", "analytic", *args, "--out", out],
                       capture_output=True, text=True)
    if p.returncode == 2:
        return None
    if p.returncode:
        sys.exit(f"dlsim run {' '.join(args)}: {p.stderr.strip()}")
    with open(out) as f:
        return json.load(f)


def figures(res):
    b = res["breakdown_s"]
    t = res["iteration_time_s"]
    c = res["config"]
    return {"iteration_s": t, "tflops_per_gpu": res["achieved_flops_per_gpu"] / 1e12,
            "model_flops_per_iteration": res["model_flops_per_iteration"],
            "memory_gb": res["memory_bytes_per_gpu"]["peak"] / 1e9,
            "bubble": b["bubble"] / t, "exposed_comm": b["exposed_comm"] / t,
            "layout": ", ".join(part for part in (
                f"tp {c['tp']}" + (" sp" if c["sequence_parallel"] else ""), f"cp {c['cp']}",
                f"pp {c['pp']}", f"dp {c['dp']}",
                (c["schedule"] + (f" V {c['virtual_stages']}" if c["virtual_stages"] > 1 else "")
                 + " ") * (c["pp"] > 1) + f"m {c['microbatches']}", f"ZeRO {c['zero']}",
                f"FSDP {c['fsdp']}", f"recompute {c['recompute_granularity']}"))}


def megatron_eq3(batch, shape):
    """Narayanan et al. 2021, Eq. 3: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), FLOPs of an
    iteration with activation recomputation, as its Table 1 counts them (`shape`: s, l, h, V
    as the table gives them)."""
    s, l, h, V = shape["s"], shape["l"], shape["h"], shape["V"]
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def published(dlsim, case, platform, d):
    pub = case.get("published")
    if not pub:
        return None
    tries = pub.get("try", {})
    keys = list(tries)
    best = None
    for combo in itertools.product(*(tries[k] for k in keys)):
        extra = []
        for k, v in zip(keys, combo):
            extra += [k, *shlex.split(v)]
        res = analytic(dlsim, common(case, platform) + pub["args"] + extra, d)
        if res is None or not res["fits_in_memory"]:
            continue
        if best is None or res["iteration_time_s"] < best[0]["iteration_time_s"]:
            best = (res, extra)
    out = {"source": pub["source"], "args": pub["args"]}
    if best:
        out.update(figures(best[0]))
        # a platform written from a preset is named as it lies in PREFIX.d
        out["command"] = " ".join(["dlsim", "run", "--mode", "analytic",
                                   *common(case, os.path.basename(platform)), *pub["args"],
                                   *best[1]])
    else:
        out["fits"] = False
    if pub.get("tflops_per_gpu"):
        x = pub["tflops_per_gpu"] * 1e12
        if pub["flops"] == "megatron-eq3":
            flops = megatron_eq3(case["batch"], pub["shape"])
        else:  # model FLOPs, as dlsim counts them for this workload and batch
            flops = best[0]["model_flops_per_iteration"] if best else None
        out["measured_tflops_per_gpu"] = pub["tflops_per_gpu"]
        out["measured_flops_counted"] = pub["flops"]
        if flops:
            out["measured_iteration_s"] = flops / (x * case["gpus"])
    return out


def run_case(dlsim, case, d, jobs):
    platform = platform_arg(dlsim, case, d)
    prefix = os.path.join(d, slug(case["label"]))
    wall = None
    if not os.path.exists(prefix + ".json"):
        cmd = [dlsim, "search", *common(case, platform), "--top", "5", "--verify", "0",
               "--jobs", str(jobs), "--out", prefix]
        print("running:", " ".join(cmd), file=sys.stderr)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        with open(prefix + ".wall", "w") as f:
            f.write(f"{wall:.1f}\n")
    elif os.path.exists(prefix + ".wall"):
        with open(prefix + ".wall") as f:
            wall = float(f.read())
    with open(prefix + ".json") as f:
        s = json.load(f)
    top = s["layouts"][0]
    args = shlex.split(top["command"])[4:]  # after `dlsim run --mode analytic`
    args[args.index("--platform") + 1] = platform
    res = analytic(dlsim, args, d)
    best = figures(res)
    best["command"] = top["command"]
    return {"label": case["label"], "workload": case["workload"], "gpus": case["gpus"],
            "batch": case["batch"], "precision": case["precision"],
            "search": {k: s[k] for k in ("enumerated", "evaluated", "pruned", "dropped")},
            "search_wall_s": wall, "best": best,
            "published": published(dlsim, case, platform, d)}


def table(rows):
    print(f"{'case':44s} {'layout':>9s} {'iter_s':>8s} {'TFLOP/s':>8s} {'mem_GB':>7s} "
          f"{'bubble':>7s} {'exp_comm':>8s}  layout")
    for r in rows:
        p = r["published"]
        for name, f in (("searched", r["best"]), ("published", p)):
            if not f or "iteration_s" not in f:
                continue
            print(f"{r['label']:44s} {name:>9s} {f['iteration_s']:8.4g} "
                  f"{f['tflops_per_gpu']:8.1f} {f['memory_gb']:7.1f} {f['bubble']:7.1%} "
                  f"{f['exposed_comm']:8.1%}  {f['layout']}")
        if p and p.get("measured_iteration_s"):
            print(f"{r['label']:44s} {'measured':>9s} {p['measured_iteration_s']:8.4g} "
                  f"{p['measured_tflops_per_gpu']:8.1f}  ({p['source']})")
        s = r["search"]
        wall = f"{r['search_wall_s']:.0f} s" if r.get("search_wall_s") else "time not kept"
        print(f"{'':44s} search: {s['enumerated']} layouts, {s['evaluated']} timed, "
              f"{s['pruned']} passed over, {sum(s['dropped'].values())} dropped; {wall}")


def plot(rows, out):
    fig, ax = plt.subplots(figsize=(12, 5))
    x = range(len(rows))
    w = 0.27
    tf = lambda f: f["tflops_per_gpu"] if f and "tflops_per_gpu" in f else 0  # noqa: E731
    def bars(xs, ys, secs, color, label):
        if not xs:
            return
        for b, t in zip(ax.bar(xs, ys, w, color=color, label=label), secs):
            ax.annotate(f"{t:.3g} s", (b.get_x() + w / 2, b.get_height()), ha="center",
                        va="bottom", fontsize=7)

    bars([i - w for i in x], [tf(r["best"]) for r in rows],
         [r["best"]["iteration_s"] for r in rows], "#1f77b4", "searched best (closed form)")
    pub = [(i, r["published"]) for i, r in enumerate(rows) if tf(r["published"])]
    bars([i for i, _ in pub], [tf(p) for _, p in pub], [p["iteration_s"] for _, p in pub],
         "#ff7f0e", "published layout, as dlsim runs it")
    meas = [(i, r["published"]["measured_iteration_s"], r) for i, r in enumerate(rows)
            if r["published"] and r["published"].get("measured_iteration_s")]
    # measured: the same iteration (dlsim's count of the model's FLOPs) at the paper's time
    bars([i + w for i, _, _ in meas],
         [r["best"]["model_flops_per_iteration"] / t / r["gpus"] / 1e12 for _, t, r in meas],
         [t for _, t, _ in meas], "#2ca02c", "published layout, measured (the paper's time)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r["label"].replace(", ", ",\n", 1) for r in rows], fontsize=8)
    ax.set_ylabel("model TFLOP/s per GPU")
    ax.set_title("Best searched layout against the published one")
    ax.legend(fontsize=8)
    save(fig, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dlsim", help="the dlsim binary (runs the searches)")
    ap.add_argument("--spec", default=os.path.join(HERE, "studies", "search-layouts.json"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--only", help="only the cases whose label contains this")
    ap.add_argument("--plot", help="a PREFIX.json written before: draw and print it again")
    ap.add_argument("--out", required=True, help="PREFIX of the outputs")
    a = ap.parse_args()
    if a.plot:
        with open(a.plot) as f:
            rows = json.load(f)["cases"]
    else:
        if not a.dlsim:
            sys.exit("--dlsim: required to run the searches")
        dlsim = os.path.abspath(a.dlsim)
        with open(a.spec) as f:
            spec = json.load(f)
        d = a.out + ".d"
        os.makedirs(d, exist_ok=True)
        rows = [run_case(dlsim, c, d, a.jobs) for c in spec["cases"]
                if not a.only or a.only in c["label"]]
        with open(a.out + ".json", "w") as f:
            json.dump({"spec": os.path.basename(a.spec), "cases": rows}, f, indent=1,
                      sort_keys=True)
            f.write("\n")
    table(rows)
    plot(rows, a.out)


if __name__ == "__main__":
    main()
