/* harness.h — the one timing loop for every kernel (nccl-tests' common.cu idea), and the kernel
 * descriptors it times.
 *
 * A descriptor (kh_bench) is one kernel at one shape on one backend: kh_bench_new() allocates
 * and initialises its buffers (deterministic pseudo-random data; for a backward kernel it also
 * runs the forward once so the saved tensors exist), kh_bench_run() launches the kernel once.
 * kh_time() owns the measurement: warm-up, then repeats with a cache flush before each, timed
 * by the device's clock (CUDA events on a GPU, CLOCK_MONOTONIC on the CPU), until the median
 * is stable or the budget is spent.
 */
#ifndef KERNELS_HARNESS_H
#define KERNELS_HARNESS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to run: a layer kind of sim/workload.h at one shape (per-sample shapes, as there, with
 * the split already applied to the output channels), or an optimizer step. */
typedef struct {
  const char *kind;      /* layer kind name ("conv2d", "linear", ...) or "sgd"/"adam" */
  int bwd;               /* 0 forward, 1 backward (ignored for optimizer steps) */
  long n;                /* samples in the batch */
  long in_c, in_h, in_w; /* input per sample (c, h, w) */
  long out_c, out_h, out_w; /* output per sample */
  int kh, kw, stride, pad, groups; /* conv/pool window; lrn: kh = local size */
  int bias;              /* conv/linear (moe: router) have a bias */
  int heads;             /* attention and rope: query heads */
  int kv_heads;          /* grouped-query attention and rope: key/value heads (0: packed Q|K|V) */
  int flash;             /* attention: probabilities not kept (computed again in backward) */
  int needs_dx;          /* backward computes the input gradient (0 for a first layer) */
  long vocab;            /* embedding rows */
  int experts, top_k;    /* moe */
  long ffn;              /* moe expert hidden width */
  double capacity_factor;/* moe */
  long params;           /* optimizer step: parameters updated */
} kh_layer;

typedef struct kh_bench kh_bench;

/* A descriptor for `l` on backend `be` computing GEMMs in `math`. NULL when the kind is unknown
 * or memory runs out; `why` (may be NULL) then gets a newly allocated reason (free()). */
kh_bench *kh_bench_new(const kn_backend *be, const kh_layer *l, kn_math math, char **why);
void kh_bench_run(kh_bench *b);   /* one launch (asynchronous on a GPU) */
void kh_bench_free(kh_bench *b);  /* NULL ignored */

/* A clock and a cache flush for one device. */
typedef struct {
  const char *name;                 /* "cpu" or "cuda" */
  void (*flush)(void);              /* evicts caches (writes a buffer twice the last-level cache) */
  void (*start)(void);              /* starts the clock (after queued work) */
  double (*stop)(void);             /* waits for queued work, returns seconds since start */
} kh_device;

extern const kh_device kh_cpu_device;
/* The CUDA clock (events on the default stream; flush: memset of twice the L2), or NULL in a
 * build without CUDA. */
const kh_device *kh_cuda_device(void);

typedef struct {
  int warmup;            /* untimed launches first (default 2) */
  int min_repeats;       /* timed launches at least (default 5) */
  int max_repeats;       /* at most (default 100) */
  double budget_s;       /* stop after this much timed time once min_repeats are done (0.3 s) */
  double tolerance;      /* stable: the median moved less than this fraction over the last
                            min_repeats launches (default 0.02) */
  int flush;             /* flush caches before each timed launch (default 1) */
} kh_opts;

void kh_opts_default(kh_opts *o);

typedef struct {
  double median_s, mean_s, stddev_s, min_s; /* over the timed launches, s */
  int repeats;           /* timed launches */
  int stable;            /* 1 when the median met the tolerance */
} kh_stats;

/* Times `b` on `dev`. Returns 0, or -1 (nothing timed) when o->min_repeats < 1,
 * o->max_repeats < o->min_repeats, or memory runs out. */
int kh_time(kh_bench *b, const kh_device *dev, const kh_opts *o, kh_stats *st);

/* Version of the timing loop, written into every database's provenance. */
#define KH_VERSION "1"

#ifdef __cplusplus
}
#endif
#endif
