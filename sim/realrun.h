/* realrun.h — the real executor seen from the driver: `dlsim run --mode real` launches
 * `dlsim-real run RESULT TRACE|- <run options>` under the system's mpirun (found by CMake),
 * one process per rank (`--oversubscribe`, and `--allow-run-as-root` when run as root), then
 * reads back the exchange file (exchange.h) with the measured times and the loss.
 *
 * The real executor (real_exec.c, real_model.c) runs the planner's op lists on real MPI with
 * real buffers and the CPU twins of the kernels: forward, backward and optimizer steps on
 * seeded synthetic data, gradients all-reduced in the plan's DDP buckets with the collectives of
 * coll_mpi.h, activations and their gradients sent between pipeline stages, tensor-parallel
 * layers split as the planner splits them (Gholami's grid, Megatron; real_shard.h) with their
 * all-gathers and all-reduces, and mixture-of-experts layers with their all-to-alls
 * (real_moe.h). Times are host
 * wall-clock (g_get_monotonic_time), aggregated as in simulation.
 *
 * --dump-weights FILE (real mode only) writes every parameter after the last step in the serial
 * layout, whatever the parallel configuration: one JSON header line
 * `{"format": "dlsim-weights-1", "layers": [{"name": …, "params": n}, …]}` (layers in model order,
 * those that own parameters), then the parameters as little-endian float32, layer after layer
 * (weights then bias; γ then β).
 */
#ifndef DL_REALRUN_H
#define DL_REALRUN_H

#include <glib.h>

#include "config.h"
#include "platform.h"
#include "result.h"
#include "workload.h"

/* What the real executor refuses (DL_ERR_INPUT, one line naming the option or the layer):
 * --grid auto, --precision fp16/bf16 (the CPU kernels compute in fp32), --recompute, and layers
 * without a real implementation. Splits it cannot make are refused by rs_plan (real_shard.h)
 * when the ranks start. The configuration must be resolved. */
gboolean rr_check(const wl_model *m, const cfg_run *c, GError **err);

/* Runs configuration `c` (resolved, rr_check passed) for real and fills the times, collectives,
 * per-rank rows and losses of `r` (res_init'ed; the memory figures already in it stay the
 * planner's). With c->trace the executor writes the Chrome trace there; with c->dump_weights the
 * final weights. DL_ERR_IO when mpirun or the executor fails. `pl` is unused (the ranks run on
 * this machine) but kept for symmetry with sr_run. */
gboolean rr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err);

#endif
