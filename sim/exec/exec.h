/* exec.h — the executors of a run, one table row each (nccl-tests' testEngine idea): the closed
 * form, the SMPI simulation and the real run.
 *
 * Every executor takes a run opened in a run_ctx (context.h) and fills a res_result:
 *   analytic  evaluates the op lists in this process (analytic.h);
 *   sim       launches `dlsim-smpi run REQUEST RESULT` under smpirun on the run's platform;
 *   real      launches `dlsim-real run REQUEST RESULT` under the system's mpirun, one process
 *             per rank on this machine (--oversubscribe; --allow-run-as-root as root).
 * The driver and a rank-side executor exchange two documents in a temporary directory: the
 * request, {"config": <the resolved configuration, cfg_to_json>, "trace": path|null,
 * "dump_weights": path|null, "gpu": {"model": name, "mem_bytes": n}, "nccl": string,
 * "node_links_private": bool, "fold_channels": n, "fold_rails": n, "kernel_sample": k} (the GPU, NCCL's view of the machine,
 * nccl_env_to_string, and plat_node_links_private, as the driver found them on the platform:
 * the rank-side executors do not load it; the channels and rails a simulation folds, 1 for none;
 * the draw of kernel times, run_ctx.sample), and the
 * result, which is the result document itself (res_to_json, read back with res_from_json). An
 * executor that ends "successfully" without a result (smpirun exits 0 when SimGrid finds the
 * ranks deadlocked) is an internal error.
 *
 * --dump-weights FILE (real mode only) writes every parameter after the last step in the serial
 * layout, whatever the parallel configuration: one JSON header line
 * `{"format": "dlsim-weights-1", "layers": [{"name": …, "params": n}, …]}` (layers in model order,
 * those that own parameters), then the parameters as little-endian float32, layer after layer
 * (weights then bias; γ then β).
 */
#ifndef DL_EXEC_H
#define DL_EXEC_H

#include <glib.h>

#include "core/config.h"
#include "exec/context.h"
#include "out/result.h"

typedef struct {
  cfg_mode mode;     /* the --mode it runs */
  const char *name;  /* "analytic", "sim", "real" */
  /* What it refuses of configuration `c` of the run `x` (DL_ERR_INPUT, one line naming the
   * option or layer), before anything runs. */
  gboolean (*check)(const run_ctx *x, const cfg_run *c, GError **err);
  /* Runs configuration `c` (x->cfg or a variant with other degrees) and fills `r` (res_init'ed)
   * with what it measured. DL_ERR_IO when a launched program fails. */
  gboolean (*run)(const run_ctx *x, const cfg_run *c, res_result *r, GError **err);
} exec_ops;

/* The executor of a mode. */
const exec_ops *exec_for(cfg_mode mode);

/* A simulation's progress: the executor reports its simulated clock about once a second
 * (EXEC_PROGRESS lines on its standard error); the driver shows it against `simulated_s`, the
 * simulated time the closed form expects for the whole run (0: unknown, the clock alone): redrawn
 * in place when standard error is a terminal, else, once the run has taken a minute, one line per
 * tenth (per minute when unknown). Set before running; applies to the simulations that follow. */
#define EXEC_PROGRESS "dlsim-progress: "
void exec_expect_simulated_s(double simulated_s);
/* Names the simulation in its progress lines ("layout 2 of 5"; NULL: none), and makes them
 * lines rather than redrawn, as where several simulations share standard error. */
void exec_progress_label(const char *label);

/* ---- the request and result documents (used by the rank-side executors) ------------------- */

typedef struct {
  char *trace;          /* where to write the Chrome trace, NULL for none (owned) */
  char *dump_weights;   /* real: where to write the final weights, NULL for none (owned) */
  char *gpu_model;      /* the GPU the driver found on the platform (owned) */
  double gpu_mem_bytes; /* its memory, bytes */
  char *nccl;           /* NCCL's view of the machine, nccl_env_to_string (owned) */
  gboolean node_links_private; /* plat_node_links_private of the platform */
  int fold_channels;    /* channels folded (coll_topo.fold; 1: none): the platform the executor
                           runs on is then plat_fold_xml's copy */
  int fold_rails;       /* rails a data-parallel group over GPU 0 of its nodes may stand for
                           (the platform's GPUs per node, its rails sharing no link); 1: none */
  int kernel_sample;    /* --samples: the draw of kernel times to run (run_ctx.sample; 0: medians) */
} exec_request;

/* Reads the request at `path` into `c` (cfg_init'ed; resolved as the driver resolved it) and
 * `req`. DL_ERR_INPUT naming the file and key when it is malformed. */
gboolean exec_request_read(const char *path, cfg_run *c, exec_request *req, GError **err);
void exec_request_release(exec_request *req);

/* Writes result `r` of run `x` to `result_path` and `trace` (may be NULL) to `trace_path`, both
 * atomically. NULL, or a newly allocated one-line message naming the file that could not be
 * written. */
char *exec_result_write(const res_result *r, const run_ctx *x, const char *result_path,
                        const char *trace_path, const GString *trace);

#endif
