/* search.h — `dlsim search`: every parallel layout of a model on a cluster, in closed form, the
 * best few checked in simulation.
 *
 * The space (search_enumerate): Megatron tp (inside a node unless allowed across), with and
 * without sequence parallelism; context parallelism (ring or Ulysses) for token models, each rank
 * keeping at least --min-cp-tokens tokens of every sequence; ep for MoE models; pp with
 * 1F1B or interleaved 1F1B and its virtual stages; the micro-batch size (so the micro-batch
 * count); the data-parallel sharding (none, ZeRO 1–3, FSDP full, grad-op and hybrid; ZeRO 1 alone
 * beside a pipeline); recomputation (none, selective where attention keeps its probabilities,
 * full). GPipe and the gradient bucket size change only how a layout runs, not which layout it
 * is: they are tried on the best layouts afterwards (search_refine). Dimensions the model or the
 * platform make pointless are not enumerated: tp and sp on a model without Megatron splits, cp
 * on one without a sequence, ep without experts, sharding without data parallelism.
 *
 * Each layout is resolved as `dlsim run` resolves its options (cfg_resolve): what it refuses is
 * dropped for "divisibility", a batch that does not split into the micro-batches for "batch".
 * Memory is checked on the first and last pipeline stages' plans before the closed form runs (a
 * rank over the GPU's memory means the layout does not fit; the closed form's fits_in_memory
 * decides for the rest), and what does not fit is dropped for "memory". Those plans also bound
 * the layout's closed-form time from below (their kernels, one after another on the compute
 * stream or on the host; for a GPipe or 1F1B pipeline also the chain of micro-batch 0 forward
 * through every stage and of the last gradient back, with the stages' kernels between), and
 * with the objective time a layout whose bound shows it neither
 * among the o->top best nor on the Pareto front of time against memory (within
 * o->pareto_within times the fastest) is passed over unless o->exhaustive (search_run). */
#ifndef DL_STUDY_SEARCH_H
#define DL_STUDY_SEARCH_H

#include <glib.h>

#include "core/config.h"
#include "exec/context.h"

/* The default of --min-cp-tokens: context parallelism is searched while each rank keeps at least
 * this many tokens of every sequence (a bound of the space, chosen, not measured). */
#define SEARCH_MIN_CP_TOKENS 1024
/* The default of --pareto-within: the front of time against memory is kept exact among layouts
 * up to 1.25 times the fastest one's time (a bound of what is reported, chosen, not measured). */
#define SEARCH_PARETO_WITHIN 1.25

/* Why a layout was left out. */
typedef enum {
  SEARCH_DROP_DIVISIBILITY, /* the degrees, heads, vocabulary or stages do not divide */
  SEARCH_DROP_BATCH,        /* the batch does not split into dp × micro-batches */
  SEARCH_DROP_MEMORY,       /* it does not fit in the GPU's memory */
  SEARCH_N_DROPS
} search_drop;

const char *search_drop_name(search_drop d);

/* What the layouts are ranked by (--objective): the iteration time; the energy of an iteration
 * (the same batch for every layout: energy per token); or its cost, GPU-hours and energy at the
 * given prices. */
typedef enum { SEARCH_BY_TIME, SEARCH_BY_ENERGY, SEARCH_BY_COST } search_objective;

const char *search_objective_name(search_objective o);

typedef struct {
  cfg_run cfg;            /* the layout (the base's strings borrowed) */
  double analytic_s;      /* closed-form iteration time */
  double sim_s;           /* simulated iteration time, NAN unless verified */
  double peak_bytes;      /* memory per GPU at its peak */
  double exposed_comm_s, bubble_s;
  double mfu;             /* model FLOPs (no recomputation) / time / GPUs / the GPU's peak */
  double tokens_per_s_per_gpu; /* samples × tokens per sample (1 for non-token models) */
  double energy_j;        /* closed-form energy of an iteration, J (study/projection.h) */
  double sim_energy_j;    /* simulated, NAN unless verified */
  int analytic_rank, sim_rank; /* 1-based ranks in each order (sim_rank 0: not verified) */
} search_layout;

typedef struct {
  int top;                /* layouts to report (1..) */
  int verify;             /* of those, how many to simulate (0..top) */
  gboolean cross_node_tp; /* --allow-cross-node-tp */
  long min_cp_tokens;     /* --min-cp-tokens */
  int jobs;               /* processes evaluating layouts at once (1: this one) */
  search_objective objective;
  double gpu_hour_price, kwh_price; /* SEARCH_BY_COST (at least one >= 0; < 0: none) */
  gboolean exhaustive;    /* --exhaustive: time every layout, none passed over for its bound */
  double pareto_within;   /* --pareto-within: the Pareto front is kept exact among layouts up to
                             this many times the fastest one's time (0: all) */
  const char *journal;    /* where each layout's closed-form outcome is appended as it is
                             evaluated, so that the same search run again after an interruption
                             evaluates only the rest (NULL: none; search_run) */
} search_opts;

/* The objective's value of layout `l`, simulated (`sim`, where verified) or in closed form:
 * seconds, joules or cost per iteration. */
double search_objective_value(const search_opts *o, const search_layout *l, gboolean sim);

typedef struct {
  GArray *layouts;        /* search_layout, ranked: simulated time where verified, then closed form */
  long enumerated;        /* layouts of the space and the variants tried on the best */
  long evaluated;         /* layouts timed in closed form */
  long pruned;            /* layouts passed over: their bound shows them neither among the top
                             nor on the Pareto front (search_run) */
  long dropped[SEARCH_N_DROPS];
  char *first_drop[SEARCH_N_DROPS]; /* the message of the first layout dropped for each reason */
  gboolean reordered;     /* the simulation ranks the verified layouts otherwise */
  double wall_s;          /* seconds the search took */
} search_result;

/* The layouts of the space for the run opened in `x` (x->cfg the base: workload, platform,
 * GPUs, batch, precision), appended to `out` (cfg_run values, the base's strings borrowed),
 * before any is resolved. */
void search_enumerate(const run_ctx *x, const search_opts *o, GArray *out);

/* The whole search: enumerate, resolve, check memory, time in closed form, refine the best
 * (GPipe, bucket sizes), simulate the top o->verify. DL_ERR_INPUT when no layout fits (the
 * message says why the layouts were dropped). Free with search_result_release. */
gboolean search_run(const run_ctx *x, const search_opts *o, search_result *r, GError **err);
void search_result_release(search_result *r);

/* The layouts' iteration time (simulated where verified) against their memory per GPU as an SVG
 * picture titled `title`: every layout a dot, the Pareto front (no other layout both faster and
 * smaller) a line, the best layout marked. */
GString *search_svg(const search_result *r, const char *title);

/* The `dlsim run` options of layout `l` beyond the base's (--tp 8 --pp 4 ...), g_free it. */
char *search_layout_args(const cfg_run *l);

/* The journal (o->journal) is text: a header line "dlsim-search-journal 1 FINGERPRINT N", the
 * fingerprint a hash of dlsim's version, the run's configuration, the kernel database and every
 * layout of the space (N of them), then one line per evaluated layout, written whole with one
 * write(): its index, outcome, figures (%.17g: read back exactly) and message. search_run reads a
 * journal whose header matches and evaluates only the layouts it lacks, so a resumed search's
 * outputs are byte-identical to an uninterrupted one's; a journal of another search, or a torn
 * last line, is ignored (the journal starts over, or the line is evaluated again). The caller
 * removes the journal once the outputs are written. */

#endif
