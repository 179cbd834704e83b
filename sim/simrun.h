/* simrun.h — the SMPI executor seen from the driver: launches `dlsim-smpi run` under smpirun on
 * the platform, then reads back what the simulated ranks measured.
 *
 * The executor (smpi_exec.c) runs the planner's op lists: on each rank a compute-stream actor
 * executes the kernels (durations from the roofline or kernel database) while the rank drives the
 * communication stream in order, as NCCL's stream does; events between streams are SimGrid
 * semaphores (no polling). Every byte goes through SMPI's MPI layer on payload-free buffers.
 * Steady-state figures exclude the first iteration.
 *
 * The exchange file (a JSON object written by rank 0) has, for the slowest rank:
 * iteration_time_s, compute_s, comm_s, overlapped_comm_s, bubble_s, slowest_rank,
 * kernels (count per iteration), colls [{op, group, purpose, algo, calls, bytes, wire_bytes,
 * time_s}] per iteration, and ranks [{rank, iteration_time_s, compute_s, comm_s}].
 */
#ifndef SIMRUN_H
#define SIMRUN_H

#include <glib.h>

#include "config.h"
#include "platform.h"
#include "result.h"
#include "workload.h"

/* Simulates configuration `c` (resolved) of model `m` on platform `pl`, filling `r` (res_init'ed;
 * memory figures are computed here from the plans). With c->trace, the executor writes the
 * Chrome trace there (atomically). DL_ERR_IO when the simulation fails. */
gboolean sr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err);

#endif
