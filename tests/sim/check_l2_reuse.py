#!/usr/bin/python3
"""A kernel that reads what the previous kernel just wrote (a kernel database's "l2"), by hand.

A database with no kernel entries (every kernel on the A100's roofline) and an L2 of 1 GB read
cold at 1e12 B/s and warm at 2e12 B/s: every kernel whose input the kernel before it on the
stream wrote (a forward after its producer's forward, a backward after its consumer's backward)
takes warm_bytes x (1/1e12 - 1/2e12) less. For mlp-small on one GPU, where every kernel runs one
after another, the iteration is shorter by 0.5e-12 s/B x the sum of those inputs, worked out
here from the layer graph that `dlsim workload --json` prints, in the closed form and in
simulation. An L2 smaller than the tensors, or --no-l2-reuse, changes nothing; a malformed
"l2" is refused with one line and exit status 2.
Usage: check_l2_reuse.py DLSIM
"""
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, refused, run

COLD, WARM = 1e12, 2e12


def warm_bytes(model, batch, dt):
    """Sum of the inputs written by the previous kernel: forward layer by layer, then the loss's
    backward and every backward in reverse (the op order of one micro-batch on one GPU)."""
    layers = model["layers"]
    names = [l["name"] for l in layers]
    total = 0.0
    for i in range(1, len(layers)):  # a forward right after the forward of what it reads
        if names[i - 1] in layers[i]["inputs"]:
            total += layers[i - 1]["out_elems"] * batch * dt
    for i in range(len(layers) - 2, -1, -1):  # a backward right after its consumer's backward
        if names[i] in layers[i + 1]["inputs"]:
            total += layers[i]["out_elems"] * batch * dt
    return total


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        prov = {"device": "a100-40gb", "spec_key": "a100-40gb", "backend": "pytorch"}

        def db(name, l2):
            path = os.path.join(d, name)
            doc = {"format": "dlsim-kdb-1", "provenance": prov, "entries": []}
            if l2 is not None:
                doc["l2"] = l2
            with open(path, "w") as f:
                json.dump(doc, f)
            return path

        big = db("l2.json", {"bytes": 1e9, "cold_read_Bps": COLD, "warm_read_Bps": WARM})
        tiny = db("tiny.json", {"bytes": 1.0, "cold_read_Bps": COLD, "warm_read_Bps": WARM})
        bare = db("bare.json", None)
        model = json.loads(subprocess.run([dlsim, "workload", "mlp-small", "--json"],
                                          check=True, capture_output=True, text=True).stdout)
        batch = 64
        saved = warm_bytes(model, batch, 4) * (1 / COLD - 1 / WARM)
        base = ["--workload", "mlp-small", "--gpus", "1", "--batch", str(batch), "--platform",
                "thetagpu"]
        plain = run(dlsim, d, "--mode", "analytic", *base, "--kernels", bare)["iteration_time_s"]
        for mode in ("analytic", "sim"):
            t = run(dlsim, d, "--mode", mode, *base, "--kernels", big)["iteration_time_s"]
            tol = 1e-12 if mode == "analytic" else 1e-9
            check(f"{mode}: the iteration is shorter by the inputs read warm "
                  f"({saved * 1e6:.4f} us)", abs((plain - t) - saved) <= tol,
                  f"{(plain - t) * 1e6:.6f} us")
        for what, args in (("an L2 of 1 byte", ["--kernels", tiny]),
                           ("--no-l2-reuse", ["--kernels", big, "--no-l2-reuse"])):
            r = run(dlsim, d, "--mode", "analytic", *base, *args)
            check(f"{what} changes nothing", r["iteration_time_s"] == plain,
                  f"{r['iteration_time_s']!r} vs {plain!r}")
        r = run(dlsim, d, "--mode", "analytic", *base, "--kernels", big, "--no-l2-reuse")
        check("the result says --no-l2-reuse", r["config"]["l2_reuse"] is False)
        for bad, field in (({"bytes": 0, "cold_read_Bps": COLD, "warm_read_Bps": WARM}, "l2.bytes"),
                           ({"bytes": 1e9, "cold_read_Bps": COLD, "warm_read_Bps": COLD / 2},
                            "l2.warm_read_Bps"),
                           ({"bytes": 1e9, "warm_read_Bps": WARM}, "l2.cold_read_Bps")):
            path = db("bad.json", bad)
            refused(dlsim, ["run", "--mode", "analytic", *base, "--kernels", path], field, path)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
