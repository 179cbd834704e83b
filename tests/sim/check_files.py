#!/usr/bin/python3
"""Result and trace files against their schemas, the breakdown identity, and determinism.

- The result JSON of every mode has the promised keys (tests/sim/result.schema.json), and
  compute + exposed_comm + bubble + idle = iteration_time_s within 1%.
- `--trace` writes Chrome trace-event JSON that Perfetto opens (tests/sim/chrome-trace.schema.json):
  one process per rank, named; one thread per stream, named; complete events with ts and dur.
- The same inputs give byte-identical JSON twice (`--reproducible` writes simulation.wall_s as 0,
  the only figure that measures the host).
Usage: check_files.py DLSIM
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile

from checklib import check, finish, run

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))


def schema(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def main(dlsim):
    rs, ts = schema("result.schema.json"), schema("chrome-trace.schema.json")
    with tempfile.TemporaryDirectory() as d:
        base = ["--workload", "resnet18-cifar100", "--platform", "thetagpu", "--gpus", "16",
                "--batch", "1024", "--reproducible"]
        for mode in ("sim", "analytic"):
            outs = []
            for k in range(2):
                out = os.path.join(d, f"{mode}{k}.json")
                extra = ["--trace", os.path.join(d, "t.json")] if mode == "sim" and k == 0 else []
                subprocess.run([dlsim, "run", "--mode", mode, *base, "--out", out, *extra],
                               check=True, stdout=subprocess.DEVNULL)
                outs.append(out)
            with open(outs[0]) as f:
                r = json.load(f)
            try:
                jsonschema.validate(r, rs)
                check(f"{mode}: result has every promised key", True)
            except jsonschema.ValidationError as e:
                check(f"{mode}: result has every promised key", False, e.message)
            b = r["breakdown_s"]
            total = b["compute"] + b["exposed_comm"] + b["bubble"] + b["idle"]
            check(f"{mode}: breakdown adds up to the iteration",
                  abs(total - r["iteration_time_s"]) <= 0.01 * r["iteration_time_s"],
                  f"{total} vs {r['iteration_time_s']}")
            check(f"{mode}: same inputs, byte-identical JSON", filecmp.cmp(*outs, shallow=False))
        with open(os.path.join(d, "t.json")) as f:
            t = json.load(f)
        try:
            jsonschema.validate(t, ts)
            check("trace: Chrome trace-event schema", True)
        except jsonschema.ValidationError as e:
            check("trace: Chrome trace-event schema", False, e.message)
        ev = t["traceEvents"]
        procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
        check("trace: one named process per rank", procs == set(range(16)), str(len(procs)))
        threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
        check("trace: a named thread per stream", len(threads) == 32, str(len(threads)))
        spans = [e for e in ev if e["ph"] == "X"]
        check("trace: kernels and collectives", any(e["tid"] == 0 for e in spans)
              and any(e["tid"] == 1 and e["name"].startswith("allreduce") for e in spans))
        # spans of one stream never overlap: a stream runs its ops in order
        ok = True
        for key in threads:
            s = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if (e["pid"], e["tid"]) == key)
            ok &= all(a[1] <= b[0] + 1e-9 for a, b in zip(s, s[1:]))  # exact: check_trace.py
        check("trace: ops of one stream run one after another", ok)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
