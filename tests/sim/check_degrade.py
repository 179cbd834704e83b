#!/usr/bin/python3
"""Degraded links (--degrade) in closed form and in simulation.

The hand-computed cases (a degraded link on every route of a trace, and one on none) are in
tests/chakra/check_fixtures.py. Here: ResNet-18 data parallel on two DGX H100 nodes (16 GPUs),
one NIC of 16 at a quarter of its bandwidth (nics:0.0625:0.25): the all-reduce's channel on that
rail slows, so the iteration grows in both modes, and the simulation stays within 2 % of the
closed form, as it does without the degraded NIC. The NIC is drawn by --seed: the same seed, the
same link. A degraded platform's replicas are not alike: the closed form evaluates every rank
(folded 1) where it folded them before, and both modes give the same time with and without
--no-folding. Every NIC at half speed keeps the cluster's links alike: both modes still fold
(replicas in closed form, channels in simulation) and give what they give unfolded. A link named
twice takes the product of its factors. Bad specs, a link the file
does not have, NICs of a platform dlsim did not write, --mode real and export are refused with
one line and exit status 2.
Usage: check_degrade.py DLSIM
"""
import os
import sys
import tempfile

from checklib import check, finish, refused, refused_outside_runs, run

BASE = ["--workload", "resnet18-cifar100", "--platform", "dgx-h100:2", "--gpus", "16",
        "--batch", "256", "--iters", "2", "--reproducible"]
NIC = ["--degrade", "nics:0.0625:0.25"]


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        base = {m: run(dlsim, d, "--mode", m, *BASE) for m in ("analytic", "sim")}
        slow = {m: run(dlsim, d, "--mode", m, *BASE, *NIC) for m in ("analytic", "sim")}
        links = slow["analytic"]["simulation"].get("degraded_links", [])
        check("one NIC of 16 drawn, at 0.25", len(links) == 1 and
              links[0]["link"].endswith("_nic") and links[0]["bandwidth_factor"] == 0.25,
              str(links))
        check("the simulation degrades the same link",
              slow["sim"]["simulation"].get("degraded_links") == links)
        check("the same seed draws the same link",
              run(dlsim, d, "--mode", "analytic", *BASE, *NIC)["simulation"]["degraded_links"] ==
              links)
        for m in ("analytic", "sim"):
            b, s = base[m]["iteration_time_s"], slow[m]["iteration_time_s"]
            check(f"{m}: the degraded NIC slows the iteration", s > b * 1.001, f"{s} vs {b} s")
        for name, r in (("base", base), ("degraded", slow)):
            a, s = r["analytic"]["iteration_time_s"], r["sim"]["iteration_time_s"]
            check(f"{name}: simulation within 2 % of the closed form", abs(s / a - 1) < 0.02,
                  f"{s} vs {a} s")
        check("config echo carries the spec", slow["sim"]["config"]["degrade"] == NIC[1] and
              base["sim"]["config"]["degrade"] == "none")
        check("folded without, every rank with the degraded NIC",
              base["analytic"]["simulation"]["folded"] > 1 and
              slow["analytic"]["simulation"]["folded"] == 1)
        every = run(dlsim, d, "--mode", "analytic", *BASE, *NIC, "--no-folding")
        check("degraded: --no-folding gives the same time",
              every["iteration_time_s"] == slow["analytic"]["iteration_time_s"])
        for m, key in (("analytic", "folded"), ("sim", "folded_channels")):
            allnic = run(dlsim, d, "--mode", m, *BASE, "--degrade", "nics:1:0.5")
            unf = run(dlsim, d, "--mode", m, *BASE, "--degrade", "nics:1:0.5", "--no-folding")
            check(f"{m}: every NIC at half speed: still folded, as unfolded",
                  allnic["simulation"][key] > 1 and unf["simulation"][key] == 1 and
                  abs(allnic["iteration_time_s"] / unf["iteration_time_s"] - 1) < 1e-9 and
                  allnic["iteration_time_s"] > base[m]["iteration_time_s"],
                  f"{allnic['iteration_time_s']} vs {unf['iteration_time_s']} s")
        link = links[0]["link"]
        twice = run(dlsim, d, "--mode", "analytic", *BASE, "--degrade",
                    f"{link}:0.5,{link}:0.5")
        check("a link named twice: the product of its factors",
              twice["simulation"]["degraded_links"] == [{"link": link, "bandwidth_factor": 0.25}]
              and twice["iteration_time_s"] == slow["analytic"]["iteration_time_s"])
        # refusals
        never = os.path.join(d, "never.json")
        for spec in ("n0g0_nic:0", "n0g0_nic", ":0.5", "nics:0:0.5", "nics:0.5", "nics:2:0.5",
                     "nics:0.5:0.5:1", "n0g0_nic:0x1", "n0g0_nic:1e9"):
            refused(dlsim, ["run", "--mode", "analytic", *BASE, "--degrade", spec, "--out", never],
                    "--degrade")
        refused(dlsim, ["run", "--mode", "analytic", *BASE, "--degrade", "nope:0.5", "--out",
                        never], "--degrade nope", "dgx-h100-2.xml")
        refused(dlsim, ["run", "--mode", "analytic", "--workload", "mlp-small", "--platform",
                        "star", "--gpus", "4", "--degrade", "nics:0.5:0.5", "--out", never],
                "--degrade nics", "star.xml")
        refused_outside_runs(dlsim, d, ["--degrade", "x:0.5"])
        check("nothing written", not os.path.exists(never))
    return finish()


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
