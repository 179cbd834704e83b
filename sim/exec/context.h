/* context.h — one run opened once: its resolved configuration, the workload, the platform, the
 * GPU spec sheet and the kernel times. The driver (`dlsim run`), the closed form and both
 * rank-side executors start from the same context, so they see the same model, the same GPU and
 * the same kernel durations.
 */
#ifndef DL_CONTEXT_H
#define DL_CONTEXT_H

#include <glib.h>

#include "coll/nccl.h"
#include "core/config.h"
#include "core/gpuspec.h"
#include "kdb/ktime.h"
#include "out/result.h"
#include "plan/trace.h"
#include "platform/platform.h"
#include "model/workload.h"

typedef struct {
  cfg_run cfg;           /* the resolved configuration (owned) */
  wl_model *model;       /* owned */
  plat *platform;        /* owned */
  const gpu_spec *gpu;    /* the spec sheet of the platform's GPU model (static) */
  double gpu_mem_bytes;  /* device memory per GPU: the host property, else the spec sheet's */
  kdb *db;               /* the kernel database, NULL for the roofline alone (owned) */
  ktime_source kt;          /* kernel durations (borrows model, gpu, db; owns its layer_memo) */
  double *slow;          /* each rank's kernel-time factor (--slow-gpus; owned), NULL: all 1 */
  int sample;            /* --samples: the draw of kernel times this run makes (0: the
                            medians, as without --samples; run_ctx_kernel_s) */
  GPtrArray *degraded;   /* --degrade: the links scaled in platform (names, owned), NULL: none */
  GArray *degraded_f;    /* their bandwidth factors (double, owned) */
  int *twin;             /* each layer's twin for kernel times (kdb_layer_twins; owned) */
  double *layer_t;       /* per-layer forward + backward time of one micro-batch, what pipeline
                            stages are balanced with (owned, model->n_layers entries) */
  res_kdb kernels;       /* where the kernel times come from, for the result (counts 0) */
  char *note;            /* what the driver should tell the user, or NULL (owned) */
  plan_trace *trace;     /* the workload chakra:DIR: its traces (owned); model then has no
                            layers */
  nccl_env nccl;         /* NCCL's view of the machine for the protocol model of the ring and
                            tree collectives (coll/nccl.h): the driver finds it on the platform */
} run_ctx;

/* Opens a run of configuration `c` as `dlsim run` parsed it: loads the workload (a model, or
 * chakra:DIR, whose traces fix the ranks, degrees, batch and precision: --gpus 0 takes their rank
 * count, layout options are refused), resolves the
 * configuration against it (cfg_resolve, cfg_resolve_style), loads the platform (a named preset
 * asked for more GPUs than it has grows to them, with x->note saying so), finds the GPU and the
 * kernel database; with --degrade the platform is the copy whose links it names or draws are
 * scaled (plat_degrade; x->degraded lists them). Takes `c` over (cfg_init'ed again on return). DL_ERR_INPUT naming the option
 * or file on failure; release with run_ctx_release either way. */
gboolean run_ctx_open(run_ctx *x, cfg_run *c, GError **err);

/* The same for a configuration that is resolved already (an executor's, read from the driver's
 * request): nothing is re-resolved, the platform is not loaded (x->platform is NULL: SimGrid or
 * mpirun has the hosts) and the GPU is the one the driver found, `gpu_model` with
 * `gpu_mem_bytes` of memory; `nccl` the driver's nccl_env_to_string (NULL: no model). */
gboolean run_ctx_open_resolved(run_ctx *x, cfg_run *c, const char *gpu_model,
                               double gpu_mem_bytes, const char *nccl, GError **err);

/* NCCL's view of platform `pl` whose GPUs are `gpu` (coll/nccl.h): the GPU's generation, NVLink
 * inside a node when its GPUs reach each other faster than the network, the route between two
 * GPUs of node 0 and between nodes 0 and 1, NICs per node, the CPU vendor (host property
 * cpu_vendor: "amd", else Intel's branch), with `proto` (--nccl-proto). A GPU NCCL does not run
 * on (the CPU twins) gets arch -1. */
void run_ctx_nccl_env(const plat *pl, const gpu_spec *gpu, int proto, nccl_env *out);

void run_ctx_release(run_ctx *x);

/* Rank `rank`'s op list under configuration `c` (one of x's, possibly varied): the planner's
 * (plan_build with `layer_t`), or the trace's for a workload chakra:DIR. NULL with DL_ERR_INPUT. */
plan_rank *run_ctx_plan(const run_ctx *x, const cfg_run *c, const double *layer_t, int rank,
                        GError **err);

/* The rank whose op list rank `rank`'s is, peers shifted (plan_representative): `rank` itself
 * for a trace, whose ranks' lists are all their own. */
int run_ctx_representative(const run_ctx *x, const cfg_run *c, int rank);

/* Rank `rank`'s kernel-time factor: its --slow-gpus slowdown, 1 for the others. */
static inline double run_ctx_slow(const run_ctx *x, int rank) {
  return x->slow ? x->slow[rank] : 1.0;
}

/* Draw `sample` (> 0) of a kernel whose measured repeats spread by `cv` (standard deviation over
 * median), for op `op` of rank `rank` in iteration `iter` under seed `seed`: a lognormal factor
 * with median 1 and that coefficient of variation (sigma = sqrt(ln(1 + cv^2))), from a hash of
 * the five keys (SplitMix64, Box-Muller), so every executor and every evaluation order draws the
 * same. 1 for sample 0 or no spread. */
double run_ctx_draw(unsigned seed, int sample, int rank, int op, int iter, double cv);

/* --net-jitter: in draw x->sample (> 0), how long rank `rank` is held before it posts send op
 * `op` or enters collective op `op` of iteration `iter`: exponentially distributed with mean
 * x->cfg.net_jitter_s, drawn from a hash of the keys as run_ctx_draw (other numbers than the
 * kernels'); 0 for sample 0 or no jitter. */
double run_ctx_comm_delay(const run_ctx *x, int rank, int op, int iter);

/* Kernel op `op` (index `op_index` in its rank's plan) of rank `rank` in iteration `iter`: its
 * time from the database (ktime_kernel_s, *origin), times the rank's --slow-gpus factor, times
 * draw x->sample of its measured spread (run_ctx_draw). */
double run_ctx_kernel_s(const run_ctx *x, const plan_op *op, int op_index, int rank, int iter,
                        kdb_origin *origin);

#endif
