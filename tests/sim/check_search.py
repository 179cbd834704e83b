#!/usr/bin/python3
"""`dlsim search`: llama-tiny on 16 GPUs of two DGX H100 nodes, bf16.

1. The counts add up: every layout of the space is timed, passed over for its bound or dropped
   for a named reason, and the JSON, the CSV and the table agree.
2. Every listed layout fits by the result's own fits_in_memory, and its closed-form time equals
   `dlsim run --mode analytic` of its command (a sample of them, the best included); the table
   gives the best's kernel time shares as that run's kernel_db does.
3. The verified layouts carry a simulated time equal to `dlsim run --mode sim` of their command,
   and come first, ordered by it.
4. The same inputs give byte-identical JSON and CSV, with one worker or two (which also
   simulate the verified layouts two at a time).
5. The picture is an SVG document with a dot per layout and the best one marked.
6. Bad inputs: a layout option, --verify above --top, a trace, an --out over the workload file:
   one line, exit 2, nothing written.
7. --objective energy ranks by an iteration's energy, each layout's equal to `dlsim run
   --tokens` of its command (the projection's energy per iteration); --objective cost by
   GPU-hours and energy at the prices given.
8. Passing over layouts by their bound changes nothing reported (Llama 3 8B on one DGX H100
   node, batch 16): against --exhaustive (every
   layout timed), the same best layouts with the same figures, every listed layout's row the
   same, and the same Pareto front of time against memory among the layouts up to
   --pareto-within times the fastest one's time; some layouts are passed over.
Usage: check_search.py DLSIM
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from checklib import check, finish, refused

BASE = ["--workload", "llama-tiny", "--platform", "dgx-h100:2", "--gpus", "16",
        "--precision", "bf16"]


def search(dlsim, prefix, *extra):
    p = subprocess.run([dlsim, "search", *BASE, "--out", prefix, *extra], capture_output=True,
                       text=True)
    if p.returncode:
        print(p.stderr)
        return None, p
    with open(prefix + ".json") as f:
        return json.load(f), p


def run_command(dlsim, command, out, mode=None):
    args = shlex.split(command)[1:]  # without "dlsim"
    if mode:
        args = [a for a in args if a != "analytic"]
        i = args.index("--mode")
        args[i:i + 1] = ["--mode", mode]
    subprocess.run([dlsim, *args, "--out", out, "--reproducible"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        a = os.path.join(d, "a")
        r, p = search(dlsim, a, "--verify", "2", "--top", "5", "--jobs", "1")
        check("search runs", r is not None, p.stderr.strip()[-300:] if r is None else "")
        if r is None:
            return finish()
        dropped = sum(r["dropped"].values())
        check("every layout timed, passed over or dropped for a reason",
              r["enumerated"] == r["evaluated"] + r["pruned"] + dropped and set(r["dropped"]) ==
              {"divisibility", "batch", "memory"},
              f"{r['enumerated']} = {r['evaluated']} + {r['pruned']} + {r['dropped']}")
        lay = r["layouts"]
        check("layouts listed, no more than timed", 0 < len(lay) <= r["evaluated"], str(len(lay)))
        with open(a + ".csv") as f:
            rows = f.read().splitlines()
        check("the CSV has a row per layout", len(rows) == len(lay) + 1, str(len(rows)))
        check("the table says the counts", f"{r['enumerated']} layouts: {r['evaluated']} timed"
              in p.stdout, p.stdout.splitlines()[1] if len(p.stdout.splitlines()) > 1 else "")
        # 2. fits, and the closed form of each listed layout is `dlsim run --mode analytic`
        sample = sorted(set([0, 1, 2, len(lay) // 2, len(lay) - 1]))
        for k in sample:
            l = lay[k]
            res = run_command(dlsim, l["command"], os.path.join(d, "chk.json"))
            check(f"layout {k + 1} ({l['command'].split('bf16 ')[-1]}): fits, closed form = run",
                  res["fits_in_memory"] and res["iteration_time_s"] == l["analytic_iteration_s"]
                  and res["memory_bytes_per_gpu"]["peak"] == l["memory_peak_bytes"],
                  f"{l['analytic_iteration_s']} vs {res['iteration_time_s']}")
            if k == 0:  # the table says where the best's kernel time comes from, as its run does
                kd = res["kernel_db"]
                want = f"  the best's kernel time: {kd['name']}" + "".join(
                    f", {100 * v:.1f} % {o}" for o, v in kd["time_share"].items() if v > 0)
                check("the table gives the best layout's kernel time shares as its run",
                      want + "\n" in p.stdout, want)
        # 3. the verified ones: simulated as `dlsim run --mode sim`, first, in their order
        ver = [l for l in lay if l["sim_iteration_s"] is not None]
        check("two layouts verified, listed first", len(ver) == 2 and
              all(l["sim_iteration_s"] is not None for l in lay[:2]))
        check("verified ones ordered by simulated time",
              all(ver[i]["sim_iteration_s"] <= ver[i + 1]["sim_iteration_s"]
                  for i in range(len(ver) - 1)))
        check("reordered says whether the simulation changed the closed form's order",
              r["reordered"] == any(l["analytic_rank"] != l["rank"] for l in ver))
        for l in ver:
            res = run_command(dlsim, l["command"], os.path.join(d, "sim.json"), mode="sim")
            check(f"verified {l['rank']}: its time is `dlsim run --mode sim`'s",
                  res["iteration_time_s"] == l["sim_iteration_s"],
                  f"{l['sim_iteration_s']} vs {res['iteration_time_s']}")
        # 4. determinism, one worker or two
        b = os.path.join(d, "b")
        r2, _ = search(dlsim, b, "--verify", "2", "--top", "5", "--jobs", "2")
        same = r2 is not None and all(open(a + e, "rb").read() == open(b + e, "rb").read()
                                      for e in (".json", ".csv"))
        check("byte-identical JSON and CSV with one worker and with two", same)
        # 5. the picture
        try:
            svg = ET.parse(a + ".svg").getroot()
            dots = svg.findall("{http://www.w3.org/2000/svg}circle")
            check("SVG: a dot per layout and the best marked", len(dots) == len(lay) + 1)
        except ET.ParseError as e:
            check("SVG parses", False, str(e))
        # 8. against every layout timed (Llama 3 8B on one node: most layouts passed over)
        ex = os.path.join(d, "ex")
        rx, _ = search(dlsim, ex, "--verify", "2", "--top", "5", "--jobs", "2", "--exhaustive")
        check("--exhaustive runs", rx is not None)
        check("the tiny model's layouts all timed or dropped",
              rx is not None and rx["evaluated"] == r["evaluated"] + r["pruned"])
        big = ["--workload", "llama3-8b", "--platform", "dgx-h100:1", "--gpus", "8", "--batch",
               "16", "--precision", "bf16", "--top", "5", "--verify", "1", "--jobs", "2"]
        pr = subprocess.run([dlsim, "search", *big, "--out", os.path.join(d, "p8")],
                            capture_output=True, text=True)
        px = subprocess.run([dlsim, "search", *big, "--exhaustive", "--out",
                             os.path.join(d, "x8")], capture_output=True, text=True)
        check("Llama 3 8B searched with and without passing over", not pr.returncode and
              not px.returncode, (pr.stderr + px.stderr).strip()[-300:])
        if not pr.returncode and not px.returncode:
            with open(os.path.join(d, "p8.json")) as f:
                r8 = json.load(f)
            with open(os.path.join(d, "x8.json")) as f:
                x8 = json.load(f)
            check(f"some layouts passed over by their bound ({r8['pruned']} of "
                  f"{r8['enumerated']}), none with --exhaustive, the rest timed",
                  r8["pruned"] > 0 and x8["pruned"] == 0 and
                  x8["evaluated"] == r8["evaluated"] + r8["pruned"])
            check("the table says how many were passed over",
                  f"{r8['pruned']} passed over (bound)" in pr.stdout)
            key = lambda l: (l["command"], l["analytic_iteration_s"], l["sim_iteration_s"],
                             l["memory_peak_bytes"])
            check("the same 5 best, with the same figures",
                  [key(l) for l in r8["layouts"][:5]] == [key(l) for l in x8["layouts"][:5]])
            every = {l["command"]: l for l in x8["layouts"]}
            strip = lambda l: {k: v for k, v in l.items() if k not in ("rank", "analytic_rank")}
            check("every listed layout's row as --exhaustive lists it",
                  all(l["command"] in every and strip(every[l["command"]]) == strip(l)
                      for l in r8["layouts"]))

            def front(ls, within=1.25):
                t0 = min(l["analytic_iteration_s"] for l in ls)
                pts = sorted(((l["sim_iteration_s"] or l["analytic_iteration_s"]),
                              l["memory_peak_bytes"], l["command"]) for l in ls)
                out, least = [], float("inf")
                for t, m, c in pts:
                    if m < least and t <= within * t0:
                        out.append((t, m, c))
                        least = m
                return out
            fa, fx = front(r8["layouts"]), front(x8["layouts"])
            check(f"the same Pareto front within 1.25 times the fastest ({len(fa)} layouts)",
                  fa == fx and len(fa) > 1)
        # 7. other objectives
        en = os.path.join(d, "en")
        re_, _ = search(dlsim, en, "--objective", "energy", "--top", "5", "--jobs", "2")
        check("--objective energy runs", re_ is not None and re_["objective"] == "energy")
        if re_ is not None:
            el = re_["layouts"]
            e = [l["analytic_energy_per_iteration_j"] for l in el]
            check("--objective energy: ranked by energy per iteration",
                  all(e[i] <= e[i + 1] for i in range(len(e) - 1)) and e[0] > 0)
            check("--objective energy: every layout timed (no bound prunes energy)",
                  rx is not None and re_["pruned"] == 0 and
                  sorted(l["command"] for l in el) == sorted(l["command"] for l in rx["layouts"]))
            for l in el[:1] + el[-1:]:
                res = run_command(dlsim, l["command"] + " --tokens 1e9", os.path.join(d, "e.json"))
                got = res["projection"]["energy_per_iteration_j"]["total"]
                check("a layout's energy is `dlsim run --tokens`'s",
                      abs(got / l["analytic_energy_per_iteration_j"] - 1) < 1e-12,
                      f"{l['analytic_energy_per_iteration_j']} vs {got}")
        co = os.path.join(d, "co")
        rc, _ = search(dlsim, co, "--objective", "cost", "--gpu-hour-price", "2", "--top", "5")
        if rc is not None:
            cost = [l["cost_per_iteration"] for l in rc["layouts"]]
            want = [16 * l["analytic_iteration_s"] / 3600 * 2 for l in rc["layouts"]]
            check("--objective cost: GPU-hours at the price, ranked",
                  all(abs(a - b) < 1e-12 * b for a, b in zip(cost, want)) and
                  all(cost[i] <= cost[i + 1] for i in range(len(cost) - 1)))
        else:
            check("--objective cost runs", False)
        # 6. refusals, nothing written
        c = os.path.join(d, "c")
        refused(dlsim, ["search", *BASE, "--objective", "speed", "--out", c], "--objective")
        refused(dlsim, ["search", *BASE, "--objective", "cost", "--out", c], "--objective cost")
        refused(dlsim, ["search", *BASE, "--kwh-price", "0.1", "--out", c], "--kwh-price")
        refused(dlsim, ["search", *BASE, "--tp", "2", "--out", c], "--tp")
        refused(dlsim, ["search", *BASE, "--zero", "1", "--out", c], "--zero")
        refused(dlsim, ["search", *BASE, "--top", "2", "--verify", "3", "--out", c], "--verify")
        refused(dlsim, ["search", *BASE, "--jobs", "0", "--out", c], "--jobs")
        refused(dlsim, ["search", *BASE, "--pareto-within", "0.5", "--out", c], "--pareto-within")
        wl = os.path.join(d, "w.json")
        with open(os.path.join(os.environ.get("DLSIM_DATA_DIR", "."), "workloads",
                               "llama-tiny.json")) as f:
            text = f.read()
        with open(wl, "w") as f:
            f.write(text)
        refused(dlsim, ["search", "--workload", wl, "--platform", "dgx-h100:2", "--gpus", "16",
                        "--out", os.path.join(d, "w")], "--out")
        check("nothing written by the refused searches",
              not any(os.path.exists(c + e) for e in (".json", ".csv", ".svg")) and
              open(wl).read() == text)
        refused(dlsim, ["search", "--workload", "gpt-18b", "--platform", "thetagpu", "--gpus", "1",
                        "--batch", "8", "--jobs", "1"], "no layout of gpt-18b on 1 GPU fits")
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
