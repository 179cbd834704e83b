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

#define GPU_PRECISIONS(X) X(GPU_FP32, "fp32", 4) X(GPU_TF32, "tf32", 4) X(GPU_FP16, "fp16", 2) \
  X(GPU_BF16, "bf16", 2)

typedef enum {
#define X(e, s, b) e,
  GPU_PRECISIONS(X)
#undef X
  GPU_N_PRECISIONS
} gpu_precision;

typedef struct {
  const char *name;        /* key used in platforms (host property gpu) and on the CLI */
  const char *full_name;   /* marketing name */
  double
      peak_flops[GPU_N_PRECISIONS]; /* dense FLOP/s per precision (tensor cores where they apply) */
  double mem_bw_bps;       /* HBM bandwidth, bytes/s */
  double mem_bytes;        /* device memory, bytes */
  const char *source;      /* where the figures come from */
  int compute_capability;  /* CUDA compute capability x 10 (80 = 8.0); 0 for the CPU */
  double sm_ghz;           /* multiprocessors x boost clock in GHz (cores x clock for the CPU):
                            * what a kernel's time above its roofline scales with (kdb_derive) */
  /* power (0 where unknown: the CPU) */
  double board_w;          /* board power at full load, W (the spec sheet's maximum) */
  double idle_w;           /* idle draw, W */
  double node_w;           /* its reference system's maximum power (DGX, NVL72 rack), W */
  int node_gpus, node_nics; /* the GPUs and compute NICs of that system */
} gpu_spec;

/* Efficiencies of the roofline estimate (documented in kernels/README.md). */
#define GPU_EFF_COMPUTE 0.60   /* GEMM-like kernels (conv, linear, attention) on large shapes */
#define GPU_EFF_MEMORY 0.80    /* bandwidth-bound kernels (elementwise, norms, optimizer) */
#define GPU_LAUNCH_S 4e-6      /* per-kernel launch and tail, seconds */

/* The spec sheet named `name` (case-insensitive), or NULL. Borrowed, static. */
const gpu_spec *gpu_find(const char *name);
/* The sheet of the machine dlsim runs on ("cpu"; gpu_find("cpu") returns it too): model and
 * cores from /proc/cpuinfo, peak and bandwidth from the documented assumptions in gpuspec.c
 * (its `source` field says which). Borrowed, static; thread-safe. */
const gpu_spec *gpu_local_cpu(void);
/* The sheet of a CUDA device by the name the driver reports (cudaDeviceProp.name, e.g.
 * "NVIDIA H100 80GB HBM3") and its memory in bytes (0 if unknown: the name decides). Only the
 * variants whose figures the sheet holds match: SXM A100s (40 and 80 GB), the SXM5 H100 and the
 * SXM H200, the B200 and the GPU of a GB200; PCIe and NVL boards (lower clocks and power) and
 * Grace Hopper give NULL. */
const gpu_spec *gpu_for_device_name(const char *name, double mem_bytes);
/* All known GPU sheets, NULL-terminated. */
const gpu_spec *const *gpu_all(void);
/* Their keys and "cpu", comma-separated, for messages ("a100-40gb, ..., cpu"). Newly allocated. */
char *gpu_known_names(void);

const char *gpu_precision_name(gpu_precision p);
int gpu_precision_bytes(gpu_precision p); /* bytes per element of activations/weights in compute */
gboolean gpu_precision_parse(const char *text, gpu_precision *out);

/* Roofline time of a kernel in seconds. `compute_bound_class` TRUE for GEMM-like kernels (uses the
 * precision's tensor throughput), FALSE for elementwise ones (uses the fp32 vector peak). */
double gpu_roofline_s(const gpu_spec *s, gpu_precision p, gboolean gemm_like, double flops,
                      double bytes);

#endif
