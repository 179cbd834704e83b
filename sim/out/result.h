/* result.h — the result of one run, the same for the sim, real and analytic executors, and its
 * JSON form (README.md, "The result") and human summary.
 *
 * Times are per iteration, in seconds, for the slowest rank. compute + exposed_comm + bubble +
 * idle = iteration_time; overlapped_comm is communication hidden under compute.
 */
#ifndef RESULT_H
#define RESULT_H

#include <glib.h>
#include <stdio.h>

#include "core/config.h"
#include "kdb/kdb.h"
#include "plan/plan.h"
#include "model/workload.h"

typedef struct {
  coll_op op;        /* which collective */
  plan_group group;       /* over which communicator */
  plan_purpose purpose;   /* why (gradient sync, forward all-gather, ...) */
  const char *algo;     /* algorithm used (static string) */
  int calls;            /* per iteration on the slowest rank */
  double bytes;         /* Σ buffer sizes per iteration, bytes */
  double wire_bytes;    /* Σ bytes this rank sends per iteration */
  double time_s;        /* Σ durations per iteration, s */
} res_coll;

typedef struct {
  int rank;
  double iteration_time_s, compute_s, comm_s;
  double peak_mem_bytes;    /* params + grads + optimizer + activations of this rank */
  double activation_bytes;  /* activations stashed for backward (pipeline stash included) */
  double kernel_flops;      /* FLOP of its kernels per iteration (the plan's) */
  double kernel_mem_bytes;  /* bytes its kernels move to and from device memory per iteration */
  double gemm_kernel_s;     /* time of its compute-bound (GEMM-like) kernels per iteration */
  double elementwise_mem_bytes; /* bytes its other (bandwidth-bound) kernels move per iteration */
} res_rank;

typedef struct {
  char grid[32];             /* "PrxPc" */
  double iteration_time_s;   /* closed form */
  double sim_iteration_time_s; /* simulated, when `simulated` */
  double comm_s;             /* all communication of the slowest rank, hidden or not */
  double gholami_comm_s;     /* Eq. 8 evaluated literally */
  gboolean simulated;
} res_grid_row;

/* Where the kernel times came from: the database (or the roofline, or the real run's own
 * measurements), the file, the device its times are for, its provenance, and how many kernel
 * times per iteration each origin gave. Strings owned. */
typedef struct {
  char *name;        /* database name, "roofline:<gpu>" or "measured:cpu" (--mode real) */
  char *file;        /* the database file (relative to the data directory when inside it), or "" */
  char *device;      /* spec-sheet key of the device the times are for */
  char *provenance;  /* JSON object text: the database's provenance, or the spec sheet's source */
  char *note;        /* what to know before trusting the times (derived, other device), or NULL */
  int count[KDB_N_ORIGINS]; /* kernel times by origin, per iteration of the slowest rank */
  double share[KDB_N_ORIGINS]; /* the share of that rank's kernel time each origin gave (sums to
                                  1; all 0 without kernels) */
} res_kdb;

/* Sets k->share from kernel seconds by origin. */
void res_kdb_set_shares(res_kdb *k, const double *kernel_s);

void res_kdb_release(res_kdb *k);
/* Frees the source of `k` (name, file, device, provenance, note), keeping its counts and
 * shares; res_kdb_set_source copies the source of `src` into `dst` in its place. */
void res_kdb_clear_source(res_kdb *k);
void res_kdb_set_source(res_kdb *dst, const res_kdb *src);

typedef struct {
  double iteration_time_s;
  double compute_s, exposed_comm_s, overlapped_comm_s, bubble_s, idle_s;
  double comm_s;             /* all communication time of the slowest rank, hidden or not */
  double phase_compute_s[PLAN_N_PHASES]; /* compute of the slowest rank per phase */
  double comm_bytes_per_gpu; /* bytes the slowest rank sends per iteration */
  plan_memory mem;             /* per GPU, bytes (largest rank) */
  double peak_mem_bytes;     /* params + grads + optimizer + activations */
  double gpu_mem_bytes;      /* device memory of the platform's GPU */
  gboolean fits_in_memory;
  const char *gpu_model;     /* platform's GPU (static or owned by the platform) */
  res_kdb kdb;               /* where the kernel times came from */
  double wall_s;             /* host time the run took */
  int ranks;                 /* ranks evaluated */
  int folded;                /* ranks each evaluated rank stands for (closed form; 1: none) */
  int folded_channels;       /* simulation: the channels each ring or tree collective ran, of
                                which channel 0 stood for all (plat_fold_xml; 1: none folded) */
  int folded_rails;          /* simulation: the rails of a node whose data-parallel groups GPU 0's
                                stood for (1: none folded) */
  double computed_phases;    /* simulation: ring phases inside a node computed rather than sent,
                                all ranks and iterations (exact; 0: every message was sent) */
  int slowest_rank;
  double gholami_comm_s;     /* analytic: the paper's Eq. 4 or 8 as written, s; <0 when n/a */
  double moe_max_over_mean;  /* MoE: busiest expert's tokens / mean tokens per expert (worst) */
  double moe_dropped_tokens; /* MoE: token copies dropped by capacity per iteration, all ranks */
  double moe_routed_tokens;  /* MoE: token copies routed per iteration, all ranks */
  GArray *colls;             /* res_coll, owned */
  GArray *rank_rows;         /* res_rank, owned */
  GArray *grid_search;       /* res_grid_row, owned; empty unless --grid auto */
  GArray *loss;              /* double: mean training loss per iteration (--mode real), owned;
                                empty for the other modes */
  GPtrArray *degraded_links; /* --degrade: the links run at part of their bandwidth (names,
                                owned; NULL: none), and their factors (double, owned) */
  GArray *degraded_factors;
  /* the prediction interval (study/interval.h), when `interval`: its 5th, 50th and 95th
   * percentiles, the validation cases it took the model's error from (0: the kernel draws
   * alone), how many of them its leave-one-out check covered, and the database they belong to
   * (owned) */
  gboolean interval;
  double interval_p5_s, interval_p50_s, interval_p95_s;
  int interval_cases, interval_loo_covered;
  char *interval_source;
  GArray *samples_s;         /* --samples: the iteration time of each draw of kernel times (double,
                                owned; NULL: none) */
} res_result;

/* Sets the iteration times of `r`'s draws (a copy of t[0..n-1]). */
void res_set_samples(res_result *r, const double *t, int n);
/* The p-th percentile (0..100) of t[0..n-1] (n >= 1; sorted or not): linear between the order
 * statistics, x[(n - 1) p / 100] (Hyndman and Fan's type 7, numpy's default). */
double res_percentile(const double *t, int n, double p);

/* Sets the degraded links of `r` (copies of names[0..n-1] and factors[0..n-1]). */
void res_set_degraded(res_result *r, const char *const *names, const double *factors, int n);

void res_init(res_result *r);
void res_release(res_result *r);

/* The result document as text, keys in a fixed order, same input -> same bytes.
 * Newly allocated (g_free). */
char *res_to_json(const res_result *r, const cfg_run *c, const wl_model *m);

/* res_to_json with `item` (a cJSON *, taken over; NULL: none) added last under `key`. */
char *res_to_json_with(const res_result *r, const cfg_run *c, const wl_model *m, const char *key,
                       void *item);

/* Iterations per epoch: the dataset's samples in whole batches. */
int64_t res_epoch_iterations(const cfg_run *c, const wl_model *m);

/* Reads a result document (res_to_json's form) back into `r` (res_init'ed): everything
 * res_result holds but gpu_model. `what` names the document in messages. DL_ERR_INPUT naming the
 * JSON path when a key is missing or of the wrong kind. */
gboolean res_from_json(res_result *r, const char *text, const char *what, GError **err);

/* Moves what an executor measured from `src` into `dst`: times, breakdown, collective rows,
 * per-rank rows, kernel counts and database name, slowest rank, losses and the wall time. What
 * only the driver knows stays in `dst`: the grid search, Gholami's equation, the GPU and memory
 * figures. */
void res_take_measured(res_result *dst, res_result *src);

/* Human summary to `out`. */
void res_print(const res_result *r, const cfg_run *c, const wl_model *m, FILE *out);

#endif
