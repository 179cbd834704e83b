#!/usr/bin/env python3
"""Round trip: for every strategy, `dlsim export --format chakra` then `dlsim run --workload
chakra:DIR` gives the native run's iteration time: within 1e-12 relative in the closed form and in
simulation (the issue asked 1e-9 and 0.1 %; the two runs execute the same op lists). The traces are exported once per configuration (the closed form's kernel
times are the simulation's).

Usage: check_roundtrip.py DLSIM [--modes analytic,sim]
"""
import json
import os
import subprocess
import sys
import tempfile

DLSIM = os.path.abspath(sys.argv[1])
MODES = ["analytic", "sim"]
if "--modes" in sys.argv:
    MODES = sys.argv[sys.argv.index("--modes") + 1].split(",")
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL = os.path.join("tests", "real")

# one configuration per strategy (the golden set's), small models on thetagpu
CASES = {
    "dp-buckets": ["--workload", "mlp-small", "--gpus", "4", "--bucket-mb", "1"],
    "dp-accumulate": ["--workload", "cnn-small", "--gpus", "2", "--microbatches", "2",
                      "--batch", "16"],
    # kernel times from a database: the traced kernels find their entries by dlsim_kernel_key
    "dp-kernel-db": ["--workload", "cnn-small", "--gpus", "2", "--batch", "64",
                     "--kernels", "cpu-amd-epyc-2-cores", "--kernels-any-device"],
    "grid": ["--workload", "cnn-small", "--gpus", "4", "--grid", "2x2", "--batch", "16"],
    "grid-fc": ["--workload", os.path.join(REAL, "cnn-nobn.json"), "--gpus", "4", "--grid",
                "2x2", "--grid-layers", "fc", "--batch", "8"],
    "domain": ["--workload", os.path.join(REAL, "cnn-nobn.json"), "--gpus", "4", "--grid",
               "2x2", "--domain", "conv", "--batch", "8"],
    "megatron": ["--workload", "gpt-tiny", "--gpus", "4", "--tp", "2", "--batch", "8"],
    "gpipe": ["--workload", "mlp-deep", "--gpus", "4", "--pp", "4", "--microbatches", "4",
              "--batch", "16"],
    "3d-1f1b": ["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                "--microbatches", "4", "--schedule", "1f1b", "--batch", "16"],
    "recompute-fp16": ["--workload", "gpt-tiny", "--gpus", "4", "--tp", "2", "--pp", "2",
                       "--microbatches", "2", "--recompute", "--precision", "fp16",
                       "--batch", "8"],
    "moe-ep": ["--workload", "moe-gpt-8x", "--gpus", "8", "--ep", "4", "--batch", "8",
               "--routing", "zipf:1.2"],
    "moe-tp": ["--workload", "moe-gpt-8x", "--gpus", "8", "--ep", "2", "--tp", "2",
               "--batch", "8"],
    "interleaved": ["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                    "--schedule", "interleaved", "--virtual-stages", "2", "--microbatches", "4",
                    "--batch", "16"],
    # sharded states: reduce-scatters, gathers, and the step the next gathers follow
    "zero-1-pp": ["--workload", "gpt-tiny", "--gpus", "8", "--pp", "2", "--schedule", "1f1b",
                  "--microbatches", "4", "--batch", "16", "--zero", "1"],
    "zero-3": ["--workload", "gpt-tiny", "--gpus", "4", "--batch", "8", "--zero", "3"],
    "fsdp-hybrid-tp": ["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--fsdp", "hybrid",
                       "--fsdp-shard-size", "2", "--microbatches", "2", "--batch", "16"],
    # sequence parallelism (all-gathers and reduce-scatters, the norms' gradient sum) with
    # selective recomputation, across a pipeline; and the Llama block
    "sp-selective-pp": ["--workload", "gpt-tiny", "--gpus", "8", "--tp", "2", "--pp", "2",
                        "--schedule", "1f1b", "--microbatches", "4", "--batch", "16",
                        "--sequence-parallel", "--recompute", "selective"],
    "llama-tp": ["--workload", "llama-tiny", "--gpus", "4", "--tp", "2", "--batch", "8"],
    # context parallelism: the ring's point-to-point K/V, Ulysses' all-to-alls, sp on top
    "cp-ring-sp": ["--workload", "llama-tiny", "--gpus", "8", "--tp", "2", "--cp", "2",
                   "--sequence-parallel", "--batch", "8"],
    "cp-ulysses": ["--workload", "llama-tiny", "--gpus", "8", "--tp", "2", "--cp", "2",
                   "--cp-style", "ulysses", "--batch", "8"],
}
# the same op lists give the same time: the closed form bit for bit, the simulation but for
# SimGrid's rounding of its clock (2e-15 measured)
TOL = {"analytic": 1e-12, "sim": 1e-12}


def run(args):
    p = subprocess.run([DLSIM, *args], capture_output=True, text=True, cwd=SRC)
    if p.returncode != 0:
        raise RuntimeError("dlsim %s: exit %d: %s" % (" ".join(args), p.returncode,
                                                       p.stderr.strip()))


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        for name, opts in CASES.items():
            et = os.path.join(d, name)
            run(["export", "--format", "chakra", "--out", et, *opts])
            for mode in MODES:
                native, traced = os.path.join(d, name + ".n.json"), os.path.join(d, name + ".t.json")
                common = ["--mode", mode, "--iters", "2", "--reproducible"]
                run(["run", *opts, *common, "--out", native])
                kernels = opts[opts.index("--kernels"):] if "--kernels" in opts else []
                run(["run", "--workload", "chakra:" + et, *common, *kernels, "--out", traced])
                na, nb = json.load(open(native)), json.load(open(traced))
                a, b = na["iteration_time_s"], nb["iteration_time_s"]
                rel = abs(a - b) / a
                ok = rel <= TOL[mode]
                # the database's entries serve the trace as they serve the planner's ops
                ok = ok and na["kernel_db"]["measured"] == nb["kernel_db"]["measured"]
                failures += not ok
                print("%s %s.%s: native %.9g s, from the trace %.9g s, relative %.2g (tolerance "
                      "%g)" % ("ok  " if ok else "FAIL", name, mode, a, b, rel, TOL[mode]))
    print("PASSED: 0 failure(s)" if not failures else "FAILED: %d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
