/* ktime.h — how long a kernel op takes: the one place the executors (closed form and SMPI) get
 * kernel durations from, so both see the same numbers: the kernel database when one is given
 * (kdb.h: measured, else interpolated, else the roofline), the roofline of the GPU's spec sheet
 * otherwise (gpuspec.h).
 */
#ifndef KTIME_H
#define KTIME_H

#include "core/config.h"
#include "core/gpuspec.h"
#include "kdb/kdb.h"
#include "plan/plan.h"
#include "model/workload.h"

typedef struct {
  const gpu_spec *gpu;     /* the platform's GPU (borrowed) */
  gpu_precision precision; /* compute precision */
  const wl_model *model;  /* borrowed */
  const kdb *db;          /* kernel database, NULL = roofline only (borrowed) */
  gboolean host;          /* the framework's host launch times of `db` apply (ktime_host_s) */
  gboolean l2;            /* a kernel whose input the previous one just wrote reads it from
                             the L2 that `db` describes (ktime_kernel_s) */
  const int *twin;        /* each layer's twin (kdb_layer_twins), asked for in its place, or
                             NULL (borrowed) */
  GHashTable *layer_memo; /* ktime_layer_times' answers by micro-batch size
                             (ktime_layer_memo_new), or NULL: none kept (borrowed: its maker
                             frees it) */
} ktime_source;

/* The kernel-database descriptor of kernel op `op` (kind PLAN_KERNEL) of model `m`; it borrows the
 * op's name and the model's layer. */
kdb_kernel ktime_describe(const wl_model *m, const plan_op *op);

/* Duration in seconds of kernel op `op` (kind PLAN_KERNEL), and where the figure comes from. An
 * op read from an execution trace (plan/trace.h) takes the database's entry of its kdb_key when
 * there is one, else its recorded fixed_s (origin "recorded"), else the lookup of its FLOP and
 * bytes like any other. With k->l2 and a database that measured its GPU's L2 (kdb_l2), a kernel
 * whose warm_bytes the previous kernel just wrote, and whose warm_bytes + out_bytes fit in the
 * L2, reads them at the warm rate instead of the cold one its time was measured at: it takes
 * warm_bytes x (1/cold - 1/warm) less, and never less than reading them warm. */
double ktime_kernel_s(const ktime_source *k, const plan_op *op, kdb_origin *origin);

/* The relative spread of kernel op `op`'s measured repeats (kdb_kernel_spread_s; a trace op's
 * database entry's, 0 for a recorded time or a roofline estimate). */
double ktime_kernel_cv(const ktime_source *k, const plan_op *op);

/* Host time to launch kernel op `op`, seconds: the database's host table (kdb_host_s) when
 * k->host, else 0. An optimizer step's parameter tensors are the model's (a weight per layer with
 * parameters, and a bias where the layer has one or is a normalisation) in the share of the
 * model's parameters the step updates. The GPU cannot start the op before the host has launched
 * it; the host launches a rank's compute ops in order from the start of each iteration
 * (exec/stream.c, exec/analytic/). */
double ktime_host_s(const ktime_source *k, const plan_op *op);

/* Forward + backward time of each layer for one micro-batch of configuration `c` on one GPU
 * (no split), seconds: what pipeline stages are balanced with. They depend on `c` only through
 * its micro-batch size; with k->layer_memo each size is looked up once (a search asks for them
 * once per layout, and its layouts share a few sizes). Newly allocated, n_layers entries
 * (g_free). */
double *ktime_layer_times(const ktime_source *k, const cfg_run *c);
/* A table for ktime_source's layer_memo (g_hash_table_destroy). */
GHashTable *ktime_layer_memo_new(void);

/* The kernel database a run uses: --kernels NAME|FILE when given, else kernels/db/<gpu>.json
 * when it exists for the platform's GPU model, else none (*db = NULL, roofline). A database
 * whose times are for another device than `gpu_model` (kdb_device) is refused unless
 * `any_device`. FALSE with DL_ERR_INPUT naming the option or file when --kernels names nothing
 * loadable or the devices differ. */
gboolean ktime_open_db(const char *kernels, const char *gpu_model, gboolean any_device, kdb **db,
                       GError **err);

#endif
