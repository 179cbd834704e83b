/* ktime.h — how long a kernel op takes: the one place the executors (closed form and SMPI) get
 * kernel durations from, so both see the same numbers. Today the roofline of the GPU's spec
 * sheet (gpuspec.h); a measured kernel database plugs in here.
 */
#ifndef KTIME_H
#define KTIME_H

#include "config.h"
#include "gpuspec.h"
#include "plan.h"
#include "workload.h"

#define KT_ORIGINS(X) X(KT_MEASURED, "measured") X(KT_INTERPOLATED, "interpolated") \
  X(KT_ESTIMATED, "estimated")
typedef enum {
#define X(e, s) e,
  KT_ORIGINS(X)
#undef X
  KT_N_ORIGINS
} kt_origin;

typedef struct {
  const gs_spec *gpu;     /* the platform's GPU (borrowed) */
  gs_precision precision; /* compute precision */
  const wl_model *model;  /* borrowed */
} kt_source;

/* Duration in seconds of kernel op `op` (kind PL_KERNEL), and where the figure comes from. */
double kt_kernel_s(const kt_source *k, const pl_op *op, kt_origin *origin);

/* Forward + backward time of each layer for one micro-batch of configuration `c` on one GPU
 * (no split), seconds: what pipeline stages are balanced with. Newly allocated, n_layers
 * entries (g_free). */
double *kt_layer_times(const kt_source *k, const cfg_run *c);

#endif
