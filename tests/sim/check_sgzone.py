#!/usr/bin/env python3
"""libdlsim-sgzone.so loads a cluster written by `dlsim platform` into the simulation with the
routes SimGrid's own DijkstraCache zone gives it: checked here link for link and latency for
latency, for every pair of hosts (from the partial trees of searches that stop at a near host, and
from whole ones), on each generated topology (two tiers, three tiers with pods and
oversubscription, a fat tree whose NIC routes hold two links, GPUs sharing NICs, a star, a
72-GPU NVLink domain); simulated runs are byte-identical with either; and a file outside the
generated grammar goes to SimGrid's loader, which gives what it always gave.

Usage: check_sgzone.py path/to/dlsim
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import check, finish  # noqa: E402

DLSIM = os.path.abspath(sys.argv[1])
BIN = os.path.dirname(DLSIM)
SGPLAT = os.path.join(BIN, "dlsim-sgplat")
ZONE = os.path.join(BIN, "libdlsim-sgzone.so")

TOPOLOGIES = {
    "rail, two tiers, 2 nodes a leaf": ["--preset", "dgx-h100", "--nodes", "4",
                                        "--nodes-per-leaf", "2"],
    "rail, three tiers, pods oversubscribed": ["--preset", "dgx-h100", "--nodes", "8",
                                               "--nodes-per-leaf", "2", "--leaves-per-pod", "16",
                                               "--pod-oversubscription", "2",
                                               "--oversubscription", "2"],
    "fat tree (NIC and port on one route)": ["--preset", "dgx-a100", "--nodes", "6",
                                             "--topology", "fattree", "--nodes-per-leaf", "2"],
    "GPUs sharing NICs": ["--preset", "dgx-a100", "--nodes", "4", "--nics-per-node", "4",
                          "--nodes-per-leaf", "2"],
    "ThetaGPU, one leaf": ["--preset", "thetagpu", "--nodes", "5"],
    "star": ["--preset", "star", "--nodes", "1"],
    "72-GPU NVLink domains": ["--preset", "gb200-nvl72", "--nodes", "2"],
}


def sgplat(platform, with_zone, pairs):
    """dlsim-sgplat's whole answer (settings, hosts, links, then a route per pair), through
    SimGrid's loader or through the zone; and which loader the zone says it used."""
    env = dict(os.environ, DLSIM_SGZONE_REPORT="1")
    arg = platform
    if with_zone:
        env["DLSIM_PLATFORM_XML"] = platform
        arg = ZONE
    p = subprocess.run([SGPLAT, arg], input="".join(f"{s} {d}\n" for s, d in pairs),
                       capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def hosts_in(path):
    return sgplat(path, False, [])[1].count("\nhost\t")


def same_routes(what, path, loader):
    """Every pair's route through both loaders. Each source asks its next host first (a few hops
    away, which the zone's first search for that source stops at), then the others round the
    list: hosts that stopped search settled come from its partial tree, the rest from a whole
    one."""
    n = hosts_in(path)
    pairs = [(s, (s + k) % n) for s in range(n) for k in range(1, n + 1)]
    ref = sgplat(path, False, pairs)
    got = sgplat(path, True, pairs)
    routes = ref[1].count("\nroute\t")
    check(f"{what}: the zone takes it through {loader}", f"sgzone: {loader}" in got[2], got[2])
    check(f"{what}: every pair's route, its links in order and its latency, as SimGrid's "
          f"({n} hosts, {routes} routes)", ref[0] == 0 and got[0] == 0 and
          ref[1] == got[1] and routes == len(pairs), first_difference(ref[1], got[1]))


def star_routes(path):
    """On a star of 66,560 GPUs (SimGrid's loader took 24 s for one route of a 65,536-GPU star,
    its load included), each of 40 pairs'
    route (sources past 65,534 among them) is by construction the source's link up and the
    destination's link down, at the sum of their latencies."""
    n = 65 * 1024
    hosts = [f"n{i // 1024}g{i % 1024}" for i in range(n)]
    pairs = [(n - 1, 0), (65536, 12), (65535, 7), (65534, 65535)]
    pairs += [((i * 7919) % n, (i * 104729 + 13) % n) for i in range(36)]
    code, out, err = sgplat(path, True, pairs)
    links = [line.split("\t") for line in out.splitlines() if line.startswith("link\t")]
    index = {l[1]: i for i, l in enumerate(links)}
    lat = {l[1]: float(l[3]) for l in links}
    routes = [line.split("\t") for line in out.splitlines() if line.startswith("route\t")]
    bad = []
    for (a, b), r in zip(pairs, routes):
        up, down = hosts[a] + "_link_UP", hosts[b] + "_link_DOWN"
        want = [str(index[up]), str(index[down])]
        if r[2:] != ["2", *want] or float(r[1]) != lat[up] + lat[down]:
            bad.append(f"{hosts[a]} -> {hosts[b]}: {r}")
    check("a star of 66,560 GPUs (a switch with more in-edges than two bytes number): the zone "
          "takes it", "sgzone: dlsim's routing" in err, err)
    check("a star of 66,560 GPUs: 40 pairs' routes are the source's link up and the "
          "destination's link down, at their latencies' sum", code == 0 and len(routes) == 40 and not bad,
          "; ".join(bad[:3]))


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}: {x!r} against {y!r}"
    return "" if a == b else "lengths differ"


def run_both(d, what, args):
    """A run's result with the zone and with SimGrid's DijkstraCache: byte-identical."""
    out = {}
    for name, routing in (("zone", None), ("dijkstra", "dijkstra")):
        # DLSIM_DEBUG shows SimGrid's standard error, where the zone says it took the file
        env = dict(os.environ, DLSIM_DEBUG="1", DLSIM_SGZONE_REPORT="1")
        env.pop("DLSIM_SIMGRID_ROUTING", None)
        if routing:
            env["DLSIM_SIMGRID_ROUTING"] = routing
        path = os.path.join(d, f"{name}.json")
        p = subprocess.run([DLSIM, *args, "--reproducible", "--out", path], env=env,
                           capture_output=True, text=True)
        out[name] = open(path, "rb").read() if p.returncode == 0 else p.stderr.encode()
        said = "sgzone: dlsim's routing" in p.stderr
        check(f"{what}: {'the zone' if not routing else 'SimGrid alone'} routed the run",
              said == (routing is None), p.stderr[-300:])
    check(f"{what}: the result is byte-identical with SimGrid's zone",
          out["zone"] == out["dijkstra"] and out["zone"].startswith(b"{"),
          out["zone"][:200].decode(errors="replace"))


def main():
    with tempfile.TemporaryDirectory() as d:
        for i, (what, opts) in enumerate(TOPOLOGIES.items()):
            path = os.path.join(d, f"p{i}.xml")
            subprocess.run([DLSIM, "platform", *opts, "-o", path], check=True)
            same_routes(what, path, "dlsim's routing")

        # a switch with more in-edges than two bytes number: trees held four bytes a vertex
        star = os.path.join(d, "star.xml")
        subprocess.run([DLSIM, "platform", "--preset", "star", "--nodes", "65",
                        "--gpus-per-node", "1024", "-o", star], check=True)
        star_routes(star)

        # outside the grammar, SimGrid's loader: a generated file with a property on a link,
        # and files dlsim did not write
        src = os.path.join(d, "p0.xml")
        text = open(src).read()
        i = text.index('sharing_policy="SPLITDUPLEX"/>')
        edited = os.path.join(d, "edited.xml")
        open(edited, "w").write(text[:i] + 'sharing_policy="SPLITDUPLEX"><prop id="note" '
                                'value="retrained"/></link>' + text[i + 30:])
        same_routes("a generated file with a link property", edited, "SimGrid's loader")
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ("ring.xml", "dragonfly.xml"):
            same_routes(f"tests/sim/platforms/{name} (not generated)",
                        os.path.join(here, "platforms", name), "SimGrid's loader")
        broken = os.path.join(d, "broken.xml")
        open(broken, "w").write(text.replace("</platform>", ""))
        ref = sgplat(broken, False, [])
        got = sgplat(broken, True, [])
        check("a broken file: SimGrid's own message and status", ref[0] == got[0] == 2 and
              ref[2].strip() == got[2].replace("sgzone: SimGrid's loader\n", "").strip(),
              got[2].strip())

        # simulations: a 3-D layout across nodes and leaves, a data-parallel ring over the
        # three-tier cluster, a degraded NIC (a copy of the file with its bandwidth changed)
        plat3 = os.path.join(d, "p1.xml")
        run_both(d, "gpt-1.7b tp 2 x pp 2 x dp 8 on 4 DGX H100 nodes",
                 ["run", "--mode", "sim", "--workload", "gpt-1.7b", "--platform", src,
                  "--gpus", "32", "--tp", "2", "--pp", "2", "--microbatches", "4",
                  "--batch", "32", "--iters", "1"])
        run_both(d, "resnet-50 data parallel on 64 GPUs in two pods",
                 ["run", "--mode", "sim", "--workload", "resnet50-imagenet", "--platform",
                  plat3, "--gpus", "64", "--batch", "256", "--iters", "1"])
        run_both(d, "a degraded NIC",
                 ["run", "--mode", "sim", "--workload", "resnet50-imagenet", "--platform",
                  src, "--gpus", "32", "--batch", "128", "--iters", "1",
                  "--degrade", "n1g3_nic:0.5"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
