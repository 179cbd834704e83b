#!/usr/bin/env python3
"""The layering rule of sim/ (sim/README.md), checked on the include graph.

    cli -> study -> exec -> out -> kdb -> plan -> {coll, model, platform} -> core

A file may include headers of its own folder or of a folder to its right, never to its left.
Only the MPI sides include <mpi.h> (exec/smpi, exec/real, exec/mpi_groups, the collectives'
code in coll/); only the real executor and the kernel benchmark (cli/cmd_kbench.c) include the
kernels (kernels/*.h). Prints every violation; exits 1 when there is one.

Usage: check_layers.py [REPO]
"""
import os
import re
import sys

RANK = {"core": 0, "coll": 1, "model": 1, "platform": 1, "plan": 2, "kdb": 3, "out": 4,
        "exec": 5, "study": 6, "cli": 7}
MPI_OK = ("exec/smpi/", "exec/real/", "exec/mpi_groups.", "coll/")
MPI_FREE_IN_COLL = ("coll/coll.h", "coll/cost.h", "coll/cost.c", "coll/info.c")
KERNELS_OK = ("exec/real/", "cli/cmd_kbench.c")
KERNEL_HEADERS = {"kernels.h", "harness.h"}

repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
sim = os.path.join(repo, "sim")
bad = []
files = 0
for root, _, names in os.walk(sim):
    for name in sorted(names):
        if not name.endswith((".c", ".h")):
            continue
        path = os.path.join(root, name)
        rel = os.path.relpath(path, sim)
        layer = rel.split("/")[0]
        if layer not in RANK:
            bad.append(f"sim/{rel}: folder '{layer}' has no place in the layering rule")
            continue
        files += 1
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+([<"])([^>"]+)[>"]', line)
            if not m:
                continue
            inc = m.group(2)
            where = f"sim/{rel}:{n}: includes {inc}"
            if inc == "mpi.h" and (not rel.startswith(MPI_OK) or rel in MPI_FREE_IN_COLL):
                bad.append(where + ": only the MPI sides call MPI")
            if m.group(1) == "<":
                continue
            if inc in KERNEL_HEADERS:
                if not rel.startswith(KERNELS_OK):
                    bad.append(where + ": only the real executor and kbench run kernels")
                continue
            target = inc.split("/")[0]
            if "/" not in inc or target not in RANK:
                bad.append(where + ": sim/ headers are included by their folder (\"plan/plan.h\")")
                continue
            if RANK[target] > RANK[layer]:
                bad.append(where + f": {layer}/ may not reach up into {target}/")
            if inc == "coll/coll_mpi.h" and not rel.startswith(MPI_OK):
                bad.append(where + ": the collectives' MPI side is for the executors")
for b in bad:
    print("FAIL " + b)
print(f"{files} files checked")
print("PASSED: 0 failure(s)" if not bad else f"FAILED: {len(bad)} failure(s)")
sys.exit(1 if bad else 0)
