#!/usr/bin/python3
"""The framework's host launch time (a kernel database's "host" table), on hand-worked cases.

A database with no kernel entries (every kernel on the A100's roofline, microseconds for
mlp-small) and a host table of 1 ms per kernel launch (and 1 ms per optimizer step, nothing per
tensor): the host launches the iteration's n kernels one after another from its start, each
kernel starts when launched, so the iteration takes n ms plus the last kernel's own time (under
1 ms). Checked on one GPU and on data-parallel 2 GPUs (the all-reduce overlaps the host-bound
backward), simulation equal to the closed form, --no-host-launch and --cuda-graphs equal to a
database without the table, and a malformed table refused with one line and exit status 2.
Usage: check_host_launch.py DLSIM
"""
import json
import os
import sys
import tempfile

from checklib import check, finish, refused, run

H = 1e-3


def main(dlsim):
    with tempfile.TemporaryDirectory() as d:
        host = {"framework": "hand-worked", "source": "check_host_launch.py",
                "ops_s": {"linear.fwd fp32": H, "linear.bwd fp32": H}, "other_s": H,
                "optimizer": {"sgd": {"fixed_s": H, "per_tensor_s": 0.0},
                              "adam": {"fixed_s": H, "per_tensor_s": 0.0}}}
        prov = {"device": "a100-40gb", "spec_key": "a100-40gb", "backend": "pytorch"}
        db = os.path.join(d, "host.json")
        with open(db, "w") as f:
            json.dump({"format": "dlsim-kdb-1", "provenance": prov, "host": host,
                       "entries": []}, f)
        bare = os.path.join(d, "bare.json")
        with open(bare, "w") as f:
            json.dump({"format": "dlsim-kdb-1", "provenance": prov, "entries": []}, f)
        for gpus in ("1", "2"):
            base = ["--workload", "mlp-small", "--gpus", gpus, "--batch", "64", "--platform",
                    "thetagpu"]
            res = {}
            for mode in ("analytic", "sim"):
                res[mode] = run(dlsim, d, "--mode", mode, *base, "--kernels", db)
            kd = res["analytic"]["kernel_db"]
            n = kd["measured"] + kd["derived"] + kd["interpolated"] + kd["estimated"]
            t = res["analytic"]["iteration_time_s"]
            check(f"{gpus} GPU(s): the iteration is the {n} launches of 1 ms plus the last "
                  f"kernel's time", n * H < t < (n + 1) * H, f"{t * 1e3:.6f} ms")
            ts = res["sim"]["iteration_time_s"]
            check(f"{gpus} GPU(s): simulation equals the closed form", abs(ts - t) <= 1e-9 * t,
                  f"{ts!r} vs {t!r}")
            plain = run(dlsim, d, "--mode", "analytic", *base, "--kernels", bare)
            for opt in ("--no-host-launch", "--cuda-graphs"):
                r = run(dlsim, d, "--mode", "analytic", *base, "--kernels", db, opt)
                check(f"{gpus} GPU(s): {opt} gives the database without host times",
                      r["iteration_time_s"] == plain["iteration_time_s"] and
                      r["config"]["host_launch" if opt == "--no-host-launch" else "cuda_graphs"]
                      == (opt == "--cuda-graphs"),
                      f"{r['iteration_time_s']!r} vs {plain['iteration_time_s']!r}")
            check(f"{gpus} GPU(s): without host times the kernels take microseconds",
                  plain["iteration_time_s"] < H)
        # a malformed table: one line naming the file and the field, exit status 2
        for bad, field in ((dict(host, other_s=-1), "host.other_s"),
                           (dict(host, ops_s={"linear.fwd fp32": "fast"}),
                            "host.ops_s.linear.fwd fp32"),
                           (dict(host, optimizer={"sgd": {}}), "host.optimizer.sgd.fixed_s")):
            with open(db, "w") as f:
                json.dump({"format": "dlsim-kdb-1", "provenance": prov, "host": bad,
                           "entries": []}, f)
            refused(dlsim, ["run", "--mode", "analytic", "--workload", "mlp-small", "--gpus", "1",
                            "--platform", "thetagpu", "--kernels", db], field, db)
    return finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
