/* gpuspec.h — spec sheets of the devices dlsim knows, and the roofline estimate of a kernel.
 *
 * A spec sheet gives peak dense throughput per precision (FLOP/s, no structured sparsity),
 * memory bandwidth (bytes/s) and memory size (bytes). A roofline estimate of a kernel is
 *   t = max(flops / (peak[precision] * eff_compute), bytes / (mem_bw * eff_memory)) + launch_s
 * with the efficiencies below. They are what a well-tuned library reaches on large shapes, not
 * the peak: measured databases (kernels/db/) replace these estimates wherever they exist.
 */
#ifndef GPUSPEC_H
#define GPUSPEC_H

#include <glib.h>

#define GS_PRECISIONS(X) X(GS_FP32, "fp32", 4) X(GS_TF32, "tf32", 4) X(GS_FP16, "fp16", 2) \
  X(GS_BF16, "bf16", 2)

typedef enum {
#define X(e, s, b) e,
  GS_PRECISIONS(X)
#undef X
  GS_N_PRECISIONS
} gs_precision;

typedef struct {
  const char *name;        /* key used in platforms (host property gpu) and on the CLI */
  const char *full_name;   /* marketing name */
  double peak_flops[GS_N_PRECISIONS]; /* dense FLOP/s per precision (tensor cores where they apply) */
  double mem_bw_bps;       /* HBM bandwidth, bytes/s */
  double mem_bytes;        /* device memory, bytes */
  const char *source;      /* where the figures come from */
} gs_spec;

/* Efficiencies of the roofline estimate (documented in kernels/README.md). */
#define GS_EFF_COMPUTE 0.60   /* GEMM-like kernels (conv, linear, attention) on large shapes */
#define GS_EFF_MEMORY 0.80    /* bandwidth-bound kernels (elementwise, norms, optimizer) */
#define GS_LAUNCH_S 4e-6      /* per-kernel launch and tail, seconds */

/* The spec sheet named `name` (case-insensitive), or NULL. Borrowed, static. */
const gs_spec *gs_find(const char *name);
/* The sheet of the machine dlsim runs on ("cpu"; gs_find("cpu") returns it too): model and
 * cores from /proc/cpuinfo, peak and bandwidth from the documented assumptions in gpuspec.c
 * (its `source` field says which). Borrowed, static; thread-safe. */
const gs_spec *gs_local_cpu(void);
/* All known GPU sheets, NULL-terminated. */
const gs_spec *const *gs_all(void);

const char *gs_precision_name(gs_precision p);
int gs_precision_bytes(gs_precision p);   /* bytes per element of activations/weights in compute */
gboolean gs_precision_parse(const char *text, gs_precision *out);

/* Roofline time of a kernel in seconds. `compute_bound_class` TRUE for GEMM-like kernels (uses the
 * precision's tensor throughput), FALSE for elementwise ones (uses the fp32 vector peak). */
double gs_roofline_s(const gs_spec *s, gs_precision p, gboolean gemm_like, double flops, double bytes);

#endif
