/* search.c — `dlsim search` (see search.h). */
#include "study/search.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "exec/exec.h"
#include "plan/plan.h"
#include "study/projection.h"

const char *search_drop_name(search_drop d) {
  static const char *const names[] = {"divisibility", "batch", "memory"};
  return d < SEARCH_N_DROPS ? names[d] : "?";
}

/* ---- the space ------------------------------------------------------------------------------- */

typedef struct {
  gboolean megatron;    /* the model has Megatron's column/row splits */
  gboolean tokens;      /* a token model with attention: it has a sequence to split */
  gboolean any_stored;  /* some attention keeps its probabilities (selective recomputation helps) */
  int heads, kv;        /* the least of the attention layers' (query, key/value) heads */
  int experts;          /* E of the first MoE layer, 0 without */
  long seq;             /* tokens per sample */
  int units;            /* pipeline units */
  int blocks;           /* residual blocks */
} model_facts;

static void facts_of(const wl_model *m, model_facts *f) {
  memset(f, 0, sizeof *f);
  f->megatron = wl_has_tp_roles(m);
  f->heads = f->kv = 1 << 30;
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->kind == WL_ATTENTION) {
      f->tokens = m->vocab > 0;
      f->any_stored = f->any_stored || !l->flash;
      f->heads = MIN(f->heads, l->heads);
      f->kv = MIN(f->kv, wl_kv_heads(l));
    }
    if (l->kind == WL_MOE && !f->experts) f->experts = l->experts;
  }
  if (f->heads == 1 << 30) f->heads = f->kv = 1;
  f->seq = (long)m->input.h * m->input.w;
  f->units = plan_pipeline_units(m);
  f->blocks = m->n_blocks;
}

static GArray *divisors(long n) {
  GArray *d = g_array_new(FALSE, FALSE, sizeof(int));
  for (long k = 1; k <= n; k++)
    if (n % k == 0) {
      const int v = (int)k;
      g_array_append_val(d, v);
    }
  return d;
}

#define AT(arr, i) g_array_index((arr), int, (i))

/* The data-parallel shardings of a layout: 0 none, 1..3 ZeRO, 4 FSDP full, 5 grad-op, 6 hybrid
 * (shard groups of `per_node` replicas: one node's). */
#define N_SHARDINGS 7
static void set_sharding(cfg_run *c, int s, int per_node) {
  c->zero = s >= 1 && s <= 3 ? s : 0;
  c->fsdp = s == 4 ? CFG_FSDP_FULL : s == 5 ? CFG_FSDP_GRAD_OP : s == 6 ? CFG_FSDP_HYBRID
                                                                      : CFG_FSDP_NONE;
  c->fsdp_shard = s == 6 ? per_node : 0;
}

/* Appends the layouts of one (tp, sp, cp, style, pp, ep) to `out`: micro-batch sizes, schedules,
 * shardings and recomputation. */
static void enumerate_rest(const cfg_run *base, const model_facts *f, int gpn, cfg_run c,
                           GArray *out) {
  const long B = base->batch;
  const int dp = c.gpus / c.tp / c.cp / c.pp, dpc = dp * c.cp;
  /* every divisor of a replica's batch (one layout, dropped for the batch, where the batch does
   * not split over the replicas) */
  GArray *dmb = B % dp ? NULL : divisors(B / dp);
  const guint n_mbs = dmb ? dmb->len : 1;
  /* hybrid sharding: one node's replicas form a shard group, when that is a proper divisor */
  const int per_node = MAX(1, gpn / (c.tp * c.cp));
  const gboolean hybrid = per_node > 1 && dp > per_node && dp % per_node == 0;
  for (guint k = 0; k < n_mbs; k++) {
    const long m = dmb ? B / dp / AT(dmb, k) : 1;
    if (m > CFG_MAX_STEPS) continue;
    /* 1 = 1F1B (accumulation without a pipeline), V >= 2 = interleaved with V model chunks:
     * Megatron wants the micro-batches a multiple of pp and V to divide each stage's blocks */
    const gboolean inter = c.pp > 1 && m % c.pp == 0 && f->blocks % c.pp == 0;
    const int per_stage = inter ? f->blocks / c.pp : 1;
    for (int V = 1; V <= per_stage; V++) {
      if (V > 1 && per_stage % V) continue;
      const int n_shard = dpc < 2 || f->experts ? 1 : c.pp > 1 ? 2 : N_SHARDINGS;
      for (int s = 0; s < n_shard; s++) {
        if (s == 6 && !hybrid) continue;
        for (int rc = 0; rc < 3; rc++) {
          if (rc == 1 && !f->any_stored) continue; /* selective: flash attention keeps nothing */
          cfg_run l = c;
          l.dp = 0;
          l.microbatches = (int)m;
          l.schedule = V > 1 ? CFG_SCHED_INTERLEAVED : CFG_SCHED_1F1B;
          l.virtual_stages = V > 1 ? V : 0;
          set_sharding(&l, s, per_node);
          l.recompute = rc == 2;
          l.recompute_selective = rc == 1;
          g_array_append_val(out, l);
        }
      }
    }
  }
  if (dmb) g_array_free(dmb, TRUE);
}

void search_enumerate(const run_ctx *x, const search_opts *o, GArray *out) {
  const cfg_run *base = &x->cfg;
  model_facts f;
  facts_of(x->model, &f);
  const int N = base->gpus, gpn = x->platform ? plat_gpus_per_node(x->platform) : N;
  GArray *dN = divisors(N);
  for (guint a = 0; a < dN->len; a++) {
    const int tp = AT(dN, a);
    if (tp > 1 && (!f.megatron || f.heads % tp || f.kv % tp || (tp > gpn && !o->cross_node_tp)))
      continue;
    GArray *dcp = divisors(N / tp);
    for (int sp = 0; sp <= (tp > 1); sp++)
      for (guint b = 0; b < dcp->len; b++) {
        const int cp = AT(dcp, b);
        if (cp > 1 && (!f.tokens || f.seq % (2L * cp) || f.seq / cp < o->min_cp_tokens)) continue;
        GArray *dpp = divisors(N / tp / cp);
        for (int style = 0; style <= (cp > 1); style++)
          for (guint d = 0; d < dpp->len; d++) {
            const int pp = AT(dpp, d);
            if (pp > f.units) continue;
            const int dp = N / tp / cp / pp;
            GArray *dep = divisors((long)dp * tp);
            for (guint e = 0; e < dep->len; e++) {
              const int ep = AT(dep, e);
              if (ep > 1 && (!f.experts || f.experts % ep)) continue;
              cfg_run c = *base;
              c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep;
              c.sequence_parallel = sp;
              c.cp_style = style ? CFG_CP_ULYSSES : CFG_CP_RING;
              enumerate_rest(base, &f, gpn, c, out);
            }
            g_array_free(dep, TRUE);
          }
        g_array_free(dpp, TRUE);
      }
    g_array_free(dcp, TRUE);
  }
  g_array_free(dN, TRUE);
}

/* ---- one layout ------------------------------------------------------------------------------ */

/* EVAL_PRUNED: not timed, its bound shows it neither among the best nor on the Pareto front */
typedef enum { EVAL_OK, EVAL_DROPPED, EVAL_FAILED, EVAL_PRUNED } eval_status;

/* A refusal `e` (taken over) of the layout: dropped for `reason` when it is the user's input
 * (DL_ERR_INPUT), else a failure of the system handed to err. */
static eval_status refused(GError *e, search_drop reason, search_drop *why, char **msg,
                           GError **err) {
  if (e->code != DL_ERR_INPUT) {
    g_propagate_error(err, e);
    return EVAL_FAILED;
  }
  *why = reason;
  *msg = g_strdup(e->message);
  g_error_free(e);
  return EVAL_DROPPED;
}

/* Dropped for memory: `peak` bytes per GPU over the GPU's. */
static eval_status over_memory(const run_ctx *x, double peak, search_drop *why, char **msg) {
  *why = SEARCH_DROP_MEMORY;
  *msg = g_strdup_printf("%.2f GB per GPU > %.2f GB", peak / 1e9, x->gpu_mem_bytes / 1e9);
  return EVAL_DROPPED;
}

/* An iteration's energy on the run's platform (study/projection.h). */
static double layout_energy_j(const run_ctx *x, const res_result *r, const cfg_run *c) {
  return proj_iteration_energy_j(r, c, x->gpu, x->platform ? plat_gpus_per_node(x->platform) : 0,
                                 x->platform ? plat_nics_per_node(x->platform) : 0);
}

static const char *const objective_names[] = {"time", "energy", "cost"};

const char *search_objective_name(search_objective o) { return objective_names[o]; }

double search_objective_value(const search_opts *o, const search_layout *l, gboolean sim) {
  const double T = sim && !isnan(l->sim_s) ? l->sim_s : l->analytic_s;
  const double E = sim && !isnan(l->sim_energy_j) ? l->sim_energy_j : l->energy_j;
  switch (o->objective) {
  case SEARCH_BY_ENERGY: return E;
  case SEARCH_BY_COST:
    return (o->gpu_hour_price > 0 ? l->cfg.gpus * T / 3600 * o->gpu_hour_price : 0) +
           (o->kwh_price > 0 ? E / 3.6e6 * o->kwh_price : 0);
  default: return T;
  }
}

/* A lower bound of the closed form's iteration time from the plan of rank `rank` (one it
 * evaluates: exec/analytic): the rank's compute stream runs its kernels one after another, and
 * its host launches all its kernels one after another, a kernel starting neither before the one
 * before it on its stream has ended nor before the host has launched it. */
static double plan_bound_s(const run_ctx *x, const cfg_run *c, const plan_rank *p, int rank) {
  double gpu = 0, host = 0, launched = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind != PLAN_KERNEL) continue;
    host += ktime_host_s(&x->kt, op);
    kdb_origin o;
    const double d = run_ctx_kernel_s(x, op, i, rank, c->iters > 1 ? 1 : 0, &o);
    if (op->stream == PLAN_STREAM_COMPUTE) gpu += d;
    if (d > 0) launched = MAX(launched, host + d); /* a kernel of no time leaves no trace */
  }
  return MAX(gpu, launched);
}

/* The compute-stream kernel time of plan `p` (of rank `rank`) from the first kernel that
 * follows op `from` (on its stream or through events, however indirectly; -1: the first kernel)
 * through the last kernel that op `to` needs (-1: the stream's last kernel). Those kernels run
 * one after another once `from` has ended, and `to` starts after the last of them has: a lower
 * bound of the time from the one to the other. 0 when there is none, or when an op waits for an
 * event no earlier op records (the order this walk relies on). */
static double chain_s(const run_ctx *x, const cfg_run *c, const plan_rank *p, int rank, int from,
                      int to) {
  const int n = p->n_ops;
  int *rec = g_new(int, p->n_events + 1), *prev = g_new(int, n + 1), last[PLAN_N_STREAMS];
  gboolean *mark = g_new0(gboolean, n + 1), ordered = TRUE;
  for (int e = 0; e <= p->n_events; e++) rec[e] = -1;
  for (int s = 0; s < PLAN_N_STREAMS; s++) last[s] = -1;
  for (int i = 0; i < n && ordered; i++) {
    const plan_op *op = &p->ops[i];
    if (op->wait_event >= 0 && rec[op->wait_event] < 0) ordered = FALSE;
    prev[i] = last[op->stream];
    last[op->stream] = i;
    if (op->record_event >= 0) rec[op->record_event] = i;
  }
  int first = -1, end = -1;
  /* the first kernel after `from` */
  for (int i = MAX(from, 0); i < n && ordered && first < 0; i++) {
    const plan_op *op = &p->ops[i];
    mark[i] = from < 0 || i == from || (prev[i] >= 0 && mark[prev[i]]) ||
              (op->wait_event >= 0 && mark[rec[op->wait_event]]);
    if (mark[i] && op->kind == PLAN_KERNEL && op->stream == PLAN_STREAM_COMPUTE) first = i;
  }
  /* the last kernel `to` needs */
  memset(mark, 0, sizeof(gboolean) * (size_t)n);
  if (to >= 0) mark[to] = TRUE;
  for (int i = to >= 0 ? to : n - 1; i >= 0 && ordered && end < 0; i--) {
    const plan_op *op = &p->ops[i];
    if (to < 0) mark[i] = op->stream == PLAN_STREAM_COMPUTE;
    if (!mark[i]) continue;
    if (op->kind == PLAN_KERNEL && op->stream == PLAN_STREAM_COMPUTE) end = i;
    if (prev[i] >= 0) mark[prev[i]] = TRUE;
    if (op->wait_event >= 0) mark[rec[op->wait_event]] = TRUE;
  }
  double t = 0;
  for (int i = first; first >= 0 && i <= end; i++) {
    const plan_op *op = &p->ops[i];
    kdb_origin o;
    if (op->kind == PLAN_KERNEL && op->stream == PLAN_STREAM_COMPUTE)
      t += run_ctx_kernel_s(x, op, i, rank, c->iters > 1 ? 1 : 0, &o);
  }
  g_free(rec);
  g_free(prev);
  g_free(mark);
  return t;
}

/* The first of the pipeline's messages of `kind` (PLAN_SEND or PLAN_RECV) and `purpose`
 * (activation or its gradient) for micro-batch `mb` (its first piece, where a message goes in
 * pieces: each side's first is the other's), or -1. */
static int pipe_msg(const plan_rank *p, plan_op_kind kind, plan_purpose purpose, int mb) {
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind == kind && op->purpose == purpose && op->microbatch == mb) return i;
  }
  return -1;
}

/* A lower bound of a pipeline's closed-form time (GPipe or 1F1B; 0 for others) from the plans
 * of its first and last stages, p0 and pl: micro-batch 0 goes forward through every stage, one
 * after another; the last stage then runs its kernels up to the backward of the micro-batch
 * whose gradient leaves it last (k); that gradient goes back through every stage, and the first
 * one runs the rest of its kernels. A middle stage's share of the forward of micro-batch 0 and
 * the backward of micro-batch k is timed on its plan for a single micro-batch of the same size
 * (those kernels do not depend on the micro-batch count); messages and collectives count as
 * taking no time. */
static double pipeline_bound_s(const run_ctx *x, const cfg_run *c, const double *layer_t,
                               const plan_rank *p0, const plan_rank *pl) {
  if (c->pp < 2 || c->schedule == CFG_SCHED_INTERLEAVED || x->sample != 0) return 0;
  const int r0 = plan_rank_of(c, 0, 0, 0), rl = plan_rank_of(c, 0, 0, c->pp - 1);
  int k = -1; /* the micro-batch whose gradient the last stage sends last */
  for (int i = 0; i < pl->n_ops; i++)
    if (pl->ops[i].kind == PLAN_SEND && pl->ops[i].purpose == PLAN_WHY_ACT_GRAD)
      k = pl->ops[i].microbatch;
  const int sl = pipe_msg(pl, PLAN_SEND, PLAN_WHY_ACT_GRAD, k);
  const int s0 = pipe_msg(p0, PLAN_SEND, PLAN_WHY_ACT, 0), rg = pipe_msg(p0, PLAN_RECV,
                                                                          PLAN_WHY_ACT_GRAD, k);
  const int ra = pipe_msg(pl, PLAN_RECV, PLAN_WHY_ACT, 0);
  if (k < 0 || sl < 0 || s0 < 0 || rg < 0 || ra < 0) return 0;
  double t = chain_s(x, c, p0, r0, -1, s0) + chain_s(x, c, pl, rl, ra, sl) +
             chain_s(x, c, p0, r0, rg, -1);
  cfg_run one = *c; /* a single micro-batch of the same size */
  one.batch = c->batch / c->microbatches;
  one.microbatches = 1;
  one.schedule = CFG_SCHED_GPIPE;
  for (int j = 1; j < c->pp - 1; j++) {
    const int rank = plan_rank_of(c, 0, 0, j);
    plan_rank *q = run_ctx_plan(x, &one, layer_t, rank, NULL);
    if (!q) return 0;
    const int a = pipe_msg(q, PLAN_RECV, PLAN_WHY_ACT, 0);
    const int b = pipe_msg(q, PLAN_SEND, PLAN_WHY_ACT, 0);
    const int g = pipe_msg(q, PLAN_RECV, PLAN_WHY_ACT_GRAD, 0);
    const int h = pipe_msg(q, PLAN_SEND, PLAN_WHY_ACT_GRAD, 0);
    if (a >= 0 && b >= 0) t += chain_s(x, c, q, rank, a, b);
    if (g >= 0 && h >= 0) t += chain_s(x, c, q, rank, g, h);
    plan_rank_free(q);
  }
  return t;
}

/* What evaluating a layout does after resolving it: check its memory (check_stages), then time
 * it in closed form (STEP_WHOLE); check its memory and bound it (STEP_BOUND: out->analytic_s a
 * lower bound of its closed-form time, out->peak_bytes one of its memory); bound a pipeline
 * that fits with its bubble (STEP_PIPE: out->analytic_s pipeline_bound_s, which plans every
 * stage, so it is asked only of the layouts the first bound does not pass over); or only time
 * it, its memory checked when it was bounded (STEP_TIME). */
typedef enum { STEP_WHOLE, STEP_BOUND, STEP_PIPE, STEP_TIME } eval_step;

/* Memory on the stages that hold the most, the first and the last: EVAL_DROPPED (*why, *msg)
 * when one does not fit, else EVAL_OK with *least the larger peak and, by `step`, *bound the
 * larger of their plan_bound_s (STEP_BOUND) or the pipeline's (STEP_PIPE: pipeline_bound_s). */
static eval_status check_stages(const run_ctx *x, const cfg_run *c, eval_step step,
                                double *least, double *bound_s, search_drop *why, char **msg,
                                GError **err) {
  const gboolean bound = step == STEP_BOUND || step == STEP_PIPE;
  GError *e = NULL;
  double *layer_t = ktime_layer_times(&x->kt, c);
  plan_rank *p[2] = {NULL, NULL}; /* the first stage's plan and the last's */
  double peak[2] = {0, 0};
  eval_status st = EVAL_OK;
  *least = *bound_s = 0;
  /* memory first, from plans without their ops: most layouts that do not fit stop here */
  for (int k = 0; k < 2 && st == EVAL_OK; k++) {
    const int stage = k ? c->pp - 1 : 0, rank = plan_rank_of(c, 0, 0, stage);
    if (k && stage == 0) break;
    plan_rank *q = plan_build_memory(x->model, c, layer_t, rank, &e);
    if (!q) {
      st = refused(e, SEARCH_DROP_DIVISIBILITY, why, msg, err);
      break;
    }
    peak[k] = plan_memory_peak(&q->mem);
    plan_rank_free(q);
    *least = MAX(*least, peak[k]);
    if (peak[k] > x->gpu_mem_bytes) st = over_memory(x, peak[k], why, msg);
  }
  for (int k = 0; k < 2 && st == EVAL_OK && bound; k++) {
    const int stage = k ? c->pp - 1 : 0, rank = plan_rank_of(c, 0, 0, stage);
    if (k && stage == 0) break;
    p[k] = run_ctx_plan(x, c, layer_t, rank, err);
    if (!p[k]) {
      st = EVAL_FAILED;
    } else if (plan_memory_peak(&p[k]->mem) != peak[k]) {
      char *a = search_layout_args(c);
      g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "search: %s: stage %d holds %.9g bytes, "
                  "%.9g without its ops (a bug)", a, stage, plan_memory_peak(&p[k]->mem), peak[k]);
      g_free(a);
      st = EVAL_FAILED;
    } else if (step == STEP_BOUND) {
      *bound_s = MAX(*bound_s, plan_bound_s(x, c, p[k], rank));
    }
  }
  if (st == EVAL_OK && step == STEP_PIPE && p[1])
    *bound_s = pipeline_bound_s(x, c, layer_t, p[0], p[1]);
  for (int k = 0; k < 2; k++)
    if (p[k]) plan_rank_free(p[k]);
  g_free(layer_t);
  return st;
}

/* Layout `c` resolved and evaluated by `step` into `out`. EVAL_DROPPED with *why and *msg
 * (g_free) when it is left out; EVAL_FAILED with err set for a failure of the system. */
static eval_status evaluate(const run_ctx *x, cfg_run *c, eval_step step, search_layout *out,
                            search_drop *why, char **msg, GError **err) {
  GError *e = NULL;
  if (!cfg_resolve(c, c->batch, &e))
    return refused(e, strstr(e->message, "--batch") ? SEARCH_DROP_BATCH : SEARCH_DROP_DIVISIBILITY,
                   why, msg, err);
  double least, bound;
  if (step != STEP_TIME) {
    const eval_status st = check_stages(x, c, step, &least, &bound, why, msg, err);
    if (st != EVAL_OK) return st;
  }
  if (step == STEP_BOUND || step == STEP_PIPE) {
    memset(out, 0, sizeof *out);
    out->cfg = *c;
    out->analytic_s = bound;
    out->peak_bytes = least;
    out->sim_s = out->sim_energy_j = NAN;
    return EVAL_OK;
  }
  res_result r;
  res_init(&r);
  if (!analytic_run(x, c, &r, &e)) {
    res_release(&r);
    return refused(e, SEARCH_DROP_DIVISIBILITY, why, msg, err);
  }
  if (!r.fits_in_memory) {
    const double peak = r.peak_mem_bytes;
    res_release(&r);
    return over_memory(x, peak, why, msg);
  }
  const wl_model *m = x->model;
  const double T = r.iteration_time_s;
  const double flops = (m->fwd_flops + m->bwd_flops) * (double)c->batch;
  const double peak = x->gpu->peak_flops[c->precision];
  memset(out, 0, sizeof *out);
  out->cfg = *c;
  out->analytic_s = T;
  out->sim_s = NAN;
  out->peak_bytes = r.peak_mem_bytes;
  out->exposed_comm_s = r.exposed_comm_s;
  out->bubble_s = r.bubble_s;
  out->mfu = T > 0 && peak > 0 ? flops / T / c->gpus / peak : 0;
  const double tokens = m->vocab > 0 ? (double)m->input.h * m->input.w : 1;
  out->tokens_per_s_per_gpu = T > 0 ? (double)c->batch * tokens / T / c->gpus : 0;
  out->energy_j = layout_energy_j(x, &r, c);
  out->sim_energy_j = NAN;
  res_release(&r);
  return EVAL_OK;
}

/* ---- the search ------------------------------------------------------------------------------ */

/* Searches of this many layouts or more print their progress when stderr is not a terminal. */
#define PROGRESS_LOG_MIN 1000

/* `[625/6256]   9%`: in place on a terminal (cleared at the end), else every tenth for a long
 * search, and at least once a minute between tenths (a search of 16,384 GPUs times a layout in
 * seconds); first the bounds of every layout, then the layouts timed (or passed over). */
static void progress(gboolean bounds, long done, long total) {
  static gint64 last_line_us; /* when the last line was written to a log */
  const gboolean last = done == total, tty = isatty(2);
  const gint64 now_us = g_get_monotonic_time();
  if (total <= 0) return; /* none asked */
  if (!last_line_us) last_line_us = now_us;
  if (!tty && (total < PROGRESS_LOG_MIN ||
               (!last && done % MAX(1, total / 10) && now_us - last_line_us < 60 * G_USEC_PER_SEC)))
    return;
  last_line_us = now_us;
  if (tty && last) fprintf(stderr, "\r\033[K");
  else
    fprintf(stderr, "%sdlsim: search: [%ld/%ld] %3ld%% of the layouts %s%s",
            tty ? "\r\033[K" : "", done, total, total ? 100 * done / total : 100,
            bounds ? "bounded" : "timed or passed over", tty ? "" : "\n");
  fflush(stderr);
}

/* What evaluating one layout gave. */
typedef struct {
  eval_status status;
  search_drop why;
  char *msg;            /* why it was dropped or failed (owned) */
  search_layout l;      /* EVAL_OK */
} outcome;

/* Counts outcome `u` of layout `c` (resolved again here when it was evaluated elsewhere) into r:
 * kept (a variant only when it is faster than `parent`, the layout as it runs by default; NULL:
 * no parent), or dropped. FALSE with err set when the evaluation failed. */
static gboolean take(const search_opts *o, const outcome *u, cfg_run c,
                     const search_layout *parent, search_result *r, GError **err) {
  if (u->status == EVAL_FAILED) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s", u->msg ? u->msg : "a layout failed");
    return FALSE;
  }
  if (u->status == EVAL_DROPPED) {
    r->dropped[u->why]++;
    if (!r->first_drop[u->why]) r->first_drop[u->why] = g_strdup(u->msg);
    return TRUE;
  }
  r->evaluated++;
  search_layout l = u->l;
  if (!cfg_resolve(&c, c.batch, NULL)) return TRUE; /* resolved once already: cannot happen */
  l.cfg = c;
  if (!parent || search_objective_value(o, &l, FALSE) < search_objective_value(o, parent, FALSE))
    g_array_append_val(r->layouts, l);
  return TRUE;
}

static void evaluate_into(const run_ctx *x, cfg_run c, eval_step step, outcome *u) {
  GError *e = NULL;
  memset(u, 0, sizeof *u);
  u->status = evaluate(x, &c, step, &u->l, &u->why, &u->msg, &e);
  if (u->status == EVAL_FAILED) u->msg = g_strdup(e ? e->message : "a layout failed");
  g_clear_error(&e);
}

static gboolean try_layout(const run_ctx *x, const search_opts *o, cfg_run c,
                           const search_layout *parent, search_result *r, GError **err) {
  outcome u;
  evaluate_into(x, c, STEP_WHOLE, &u);
  const gboolean ok = take(o, &u, c, parent, r, err);
  g_free(u.msg);
  return ok;
}

/* ---- workers --------------------------------------------------------------------------------- */

/* One outcome as a worker sends it: the header, then msg_len bytes of message. */
typedef struct {
  gint32 index, status, why, msg_len;
  double analytic_s, peak_bytes, exposed_comm_s, bubble_s, mfu, tokens_per_s_per_gpu, energy_j;
} wire_outcome;

#define WIRE_MSG_MAX 2000

/* Writes (or reads) all n bytes at p to (from) fd; FALSE on an error or, reading, at the end. */
static gboolean move_full(int fd, void *p, size_t n, gboolean writing) {
  char *b = p;
  while (n > 0) {
    const ssize_t k = writing ? write(fd, b, n) : read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return FALSE;
    b += k, n -= (size_t)k;
  }
  return TRUE;
}

/* A worker's own copy of x's platform (NULL without one, or on an error: e): the routes of a
 * platform are asked of its loader process over a pipe, which two workers cannot share. */
static plat *worker_platform(const run_ctx *x, GError **e) {
  return x->platform ? plat_load_cfg(x->cfg.platform, (const char *const *)x->cfg.simgrid_cfg, e)
                     : NULL;
}

/* What a forked worker runs: its share (w of `jobs`) of a job, outcomes written to fd. */
typedef void (*worker_fn)(const void *job, int w, int jobs, int fd);

/* Forks `jobs` workers, each running fn(job, w, jobs, fd) on the write end of a pipe of its own,
 * then exiting; the read ends into fds, the processes into pids. Returns how many started:
 * fewer, with err set, where a pipe or a fork failed (those started run on). */
static int fork_workers(worker_fn fn, const void *job, int jobs, int *fds, pid_t *pids,
                        GError **err) {
  fflush(stdout);
  fflush(stderr);
  int started = 0;
  for (; started < jobs; started++) {
    int p[2];
    if (pipe(p) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "search: a pipe to a worker: %s", g_strerror(errno));
      break;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "search: starting a worker: %s", g_strerror(errno));
      close(p[0]), close(p[1]);
      break;
    }
    if (pid == 0) {
      close(p[0]);
      for (int k = 0; k < started; k++) close(fds[k]);
      fn(job, started, jobs, p[1]);
      close(p[1]);
      _exit(0);
    }
    close(p[1]);
    fds[started] = p[0], pids[started] = pid;
  }
  return started;
}

/* Closes the pipes of `started` workers and waits for them. FALSE unless every one exited with
 * status 0; *killed: the first signal that stopped one, 0 for none. */
static gboolean reap_workers(int started, const int *fds, const pid_t *pids, int *killed) {
  gboolean ok = TRUE;
  *killed = 0;
  for (int k = 0; k < started; k++) {
    close(fds[k]);
    int st = 0;
    while (waitpid(pids[k], &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = FALSE;
    if (WIFSIGNALED(st) && !*killed) *killed = WTERMSIG(st);
  }
  return ok;
}

/* A worker's stop by a signal, said: each worker holds the op lists of the layout it times (a
 * deep pipeline of many micro-batches on thousands of GPUs takes gigabytes) or a simulation's
 * ranks, and the kernel's out-of-memory killer stops a process with SIGKILL. */
static char *killed_why(int sig) {
  return g_strdup_printf("killed by signal %d (%s%s)", sig, g_strsignal(sig),
                         sig == SIGKILL ? ": the out-of-memory killer sends it" : "");
}

/* The closed form's share of a round: layouts todo[..n_todo] of `space`, timed by `step`. */
typedef struct {
  const run_ctx *x;
  const GArray *space;
  const guint *todo;
  guint n_todo;
  eval_step step;
} eval_job;

/* Worker w of `jobs` (a worker_fn of an eval_job): layouts todo[w], todo[w + jobs], ... of
 * `space`, each outcome written to fd, on a platform of its own. */
static void worker(const void *job, int w, int jobs, int fd) {
  const eval_job *j = job;
  const run_ctx *x = j->x;
  const GArray *space = j->space;
  const guint *todo = j->todo;
  const guint n_todo = j->n_todo;
  const eval_step step = j->step;
  run_ctx own = *x;
  GError *e = NULL;
  own.platform = worker_platform(x, &e);
  for (guint t = (guint)w; t < n_todo; t += (guint)jobs) {
    const guint i = todo[t];
    outcome u;
    if (x->platform && !own.platform) {
      memset(&u, 0, sizeof u);
      u.status = EVAL_FAILED;
      u.msg = g_strdup(e ? e->message : "the platform");
    } else {
      evaluate_into(&own, g_array_index(space, cfg_run, i), step, &u);
    }
    wire_outcome h = {(gint32)i, u.status, u.why, 0, u.l.analytic_s, u.l.peak_bytes,
                      u.l.exposed_comm_s, u.l.bubble_s, u.l.mfu, u.l.tokens_per_s_per_gpu,
                      u.l.energy_j};
    const size_t len = u.msg ? MIN(strlen(u.msg), WIRE_MSG_MAX) : 0;
    h.msg_len = (gint32)len;
    char *buf = g_malloc(sizeof h + len + 1);
    memcpy(buf, &h, sizeof h);
    if (len) memcpy(buf + sizeof h, u.msg, len);
    const gboolean ok = move_full(fd, buf, sizeof h + len, TRUE);
    g_free(buf);
    g_free(u.msg);
    if (!ok || u.status == EVAL_FAILED) break;
  }
  g_clear_error(&e);
  plat_free(own.platform);
}


/* ---- the journal ------------------------------------------------------------------------------ */

/* FNV-1a of n bytes. */
static guint64 fnv1a(const char *s, gsize n) {
  guint64 h = 0xcbf29ce484222325ULL;
  for (gsize i = 0; i < n; i++) h = (h ^ (guchar)s[i]) * 0x100000001b3ULL;
  return h;
}

/* The fingerprint of a search: FNV-1a over its inputs' text. */
static guint64 fingerprint(const run_ctx *x, const search_opts *o, const GArray *space) {
  GString *t = g_string_new(DL_VERSION);
  cJSON *cf = cfg_to_json(&x->cfg);
  char *cs = cJSON_PrintUnformatted(cf);
  g_string_append_printf(t, "\n%s\n%s\n%d %d %d %d %.17g\n", cs,
                         x->db ? kdb_name(x->db) : "roofline", (int)o->objective, o->top,
                         o->verify, o->exhaustive, o->pareto_within);
  cJSON_free(cs);
  cJSON_Delete(cf);
  /* the input files' contents: a journal of files since changed is another search's */
  const char *files[] = {x->model ? x->model->path : NULL,
                         x->platform ? plat_file(x->platform) : NULL,
                         x->db ? kdb_path(x->db) : NULL};
  for (size_t i = 0; i < G_N_ELEMENTS(files); i++) {
    char *data = NULL;
    gsize len = 0;
    if (files[i] && g_file_get_contents(files[i], &data, &len, NULL))
      g_string_append_len(t, data, (gssize)len);
    g_free(data);
  }
  for (guint i = 0; i < space->len; i++) {
    char *a = search_layout_args(&g_array_index(space, cfg_run, i));
    g_string_append_printf(t, "%s\n", a);
    g_free(a);
  }
  const guint64 h = fnv1a(t->str, t->len);
  g_string_free(t, TRUE);
  return h;
}

/* One outcome as a journal line (newline-terminated; the message without tabs or newlines),
 * headed by the FNV-1a of the rest of the line: a line damaged or edited since is not taken. */
static char *journal_line(guint i, const outcome *u) {
  char *msg = g_strdup(u->msg ? u->msg : "");
  for (char *c = msg; *c; c++)
    if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
  const search_layout *l = &u->l;
  char *rest = g_strdup_printf("%u\t%d\t%d\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%s",
                               i, (int)u->status, (int)u->why, l->analytic_s, l->peak_bytes,
                               l->exposed_comm_s, l->bubble_s, l->mfu, l->tokens_per_s_per_gpu,
                               l->energy_j, msg);
  char *line = g_strdup_printf("%016" G_GINT64_MODIFIER "x\t%s\n", fnv1a(rest, strlen(rest)),
                               rest);
  g_free(rest);
  g_free(msg);
  return line;
}

/* Reads journal `path` of the search whose header is `head` into out[] (done[i] set for each
 * layout it holds); returns how many. 0 when there is none, or it belongs to another search. */
static long journal_read(const char *path, const char *head, guint n, outcome *out,
                         gboolean *done) {
  char *text = NULL;
  if (!g_file_get_contents(path, &text, NULL, NULL)) return 0;
  long got = 0;
  char *nl = strchr(text, '\n');
  if (nl && (size_t)(nl - text) == strlen(head) && strncmp(text, head, strlen(head)) == 0) {
    for (char *line = nl + 1, *end; (end = strchr(line, '\n')) != NULL; line = end + 1) {
      *end = '\0';
      /* its checksum first: a line that does not match it is evaluated again */
      char *tab = strchr(line, '\t'), *e = NULL;
      const guint64 sum = tab ? g_ascii_strtoull(line, &e, 16) : 0;
      if (!tab || e != tab || tab - line != 16 || sum != fnv1a(tab + 1, strlen(tab + 1)))
        continue;
      gchar **f = g_strsplit(tab + 1, "\t", 11);
      double v[7];
      gboolean ok = g_strv_length(f) == 11;
      const gint64 idx = ok ? g_ascii_strtoll(f[0], &e, 10) : -1;
      ok = ok && e && !*e && idx >= 0 && idx < (gint64)n && !done[idx];
      const gint64 st = ok ? g_ascii_strtoll(f[1], &e, 10) : -1;
      ok = ok && !*e && (st == EVAL_OK || st == EVAL_DROPPED);
      const gint64 why = ok ? g_ascii_strtoll(f[2], &e, 10) : -1;
      ok = ok && !*e && why >= 0 && why < SEARCH_N_DROPS;
      for (int k = 0; k < 7 && ok; k++) { /* finite and not negative, as evaluate writes them */
        v[k] = g_ascii_strtod(f[3 + k], &e);
        ok = e != f[3 + k] && !*e && isfinite(v[k]) && v[k] >= 0;
      }
      if (ok) {
        outcome *u = &out[idx];
        memset(u, 0, sizeof *u);
        u->status = (eval_status)st, u->why = (search_drop)why;
        u->l = (search_layout){.analytic_s = v[0], .sim_s = NAN, .peak_bytes = v[1],
                               .exposed_comm_s = v[2], .bubble_s = v[3], .mfu = v[4],
                               .tokens_per_s_per_gpu = v[5], .energy_j = v[6],
                               .sim_energy_j = NAN};
        u->msg = *f[10] ? g_strdup(f[10]) : NULL;
        done[idx] = TRUE;
        got++;
      }
      g_strfreev(f);
    }
  }
  g_free(text);
  return got;
}

/* Appends one whole line to the journal (fd -1: none); FALSE with err set on a failed write. */
static gboolean journal_add(int fd, guint i, const outcome *u, GError **err) {
  if (fd < 0) return TRUE;
  char *line = journal_line(i, u);
  const size_t len = strlen(line);
  const ssize_t k = write(fd, line, len);
  g_free(line);
  if (k != (ssize_t)len) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "search: writing its journal: %s",
                k < 0 ? g_strerror(errno) : "a short write");
    return FALSE;
  }
  return TRUE;
}

/* Opens o->journal for the search of `space`: the outcomes it holds into out[] and done[] (the
 * count into *resumed), the file rewritten when it held another search's; *fd the file to append
 * to (-1 without a journal). FALSE with DL_ERR_IO when it cannot be opened or written. */
static gboolean journal_open(const run_ctx *x, const search_opts *o, const GArray *space,
                             outcome *out, gboolean *done, long *resumed, int *fd,
                             GError **err) {
  *fd = -1;
  *resumed = 0;
  if (!o->journal) return TRUE;
  char *head = g_strdup_printf("dlsim-search-journal 3 %016" G_GINT64_MODIFIER "x %u",
                               fingerprint(x, o, space), space->len);
  *resumed = journal_read(o->journal, head, space->len, out, done);
  gboolean ok = TRUE;
  if (*resumed) {
    fprintf(stderr, "dlsim: search: resuming: %ld of %u layouts already evaluated (%s)\n",
            *resumed, space->len, o->journal);
    /* a torn last line is cut off (its layout is evaluated again) before appending */
    char *text = NULL;
    gsize len = 0;
    ok = g_file_get_contents(o->journal, &text, &len, NULL);
    const char *nl = ok ? g_strrstr_len(text, (gssize)len, "\n") : NULL;
    const gsize keep = nl ? (gsize)(nl - text) + 1 : 0;
    g_free(text);
    *fd = ok ? open(o->journal, O_WRONLY | O_APPEND) : -1;
    if (*fd >= 0 && keep < len && ftruncate(*fd, (off_t)keep) != 0) ok = FALSE;
  } else {
    char *first = g_strconcat(head, "\n", NULL);
    ok = dl_write_file_atomic(o->journal, first, strlen(first), err);
    g_free(first);
    if (ok) *fd = open(o->journal, O_WRONLY | O_APPEND);
  }
  g_free(head);
  if (ok && *fd < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot open the search's journal: %s",
                o->journal, g_strerror(errno));
    ok = FALSE;
  } else if (!ok && err && !*err) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write the search's journal", o->journal);
  }
  if (!ok && *fd >= 0) {
    close(*fd);
    *fd = -1;
  }
  return ok;
}

/* Layouts todo[0..n_todo-1] of `space` evaluated (evaluate's `step`) into out[i], by
 * o->jobs processes, each outcome appended to journal jfd (-1: none) and counted into *done of
 * `total` for the progress line. FALSE with err set when a worker could not be started or
 * stopped short. */
static gboolean evaluate_all(const run_ctx *x, const search_opts *o, const GArray *space,
                             const guint *todo, guint n_todo, eval_step step, outcome *out,
                             int jfd, long *done, long total, GError **err) {
  const long done0 = *done;
  const int jobs = (int)MIN((guint)MAX(1, o->jobs), MAX(1u, n_todo));
  if (n_todo == 0) return TRUE;
  if (jobs == 1) {
    gboolean ok = TRUE;
    for (guint t = 0; t < n_todo && ok; t++) {
      evaluate_into(x, g_array_index(space, cfg_run, todo[t]), step, &out[todo[t]]);
      ok = out[todo[t]].status == EVAL_FAILED || journal_add(jfd, todo[t], &out[todo[t]], err);
      progress(step == STEP_BOUND, ++*done, total);
    }
    return ok;
  }
  int *fds = g_new(int, jobs);
  pid_t *pids = g_new0(pid_t, jobs);
  const eval_job job = {x, space, todo, n_todo, step};
  const int started = fork_workers(worker, &job, jobs, fds, pids, err);
  gboolean ok = started == jobs;
  gboolean *open = g_new(gboolean, started);
  for (int k = 0; k < started; k++) open[k] = TRUE;
  int n_open = started;
  GPollFD *pf = g_new(GPollFD, started);
  while (ok && n_open > 0) {
    int n = 0;
    for (int k = 0; k < started; k++)
      if (open[k]) pf[n++] = (GPollFD){fds[k], G_IO_IN | G_IO_HUP | G_IO_ERR, 0};
    if (g_poll(pf, n, -1) < 0 && errno != EINTR) break;
    for (int j = 0; j < n; j++) {
      if (!pf[j].revents) continue;
      int k = 0;
      while (fds[k] != pf[j].fd) k++;
      wire_outcome h;
      if (!move_full(fds[k], &h, sizeof h, FALSE)) {
        open[k] = FALSE, n_open--;
        continue;
      }
      if (h.index < 0 || (guint)h.index >= space->len || h.msg_len < 0 ||
          h.msg_len > WIRE_MSG_MAX) {
        ok = FALSE;
        break;
      }
      outcome *u = &out[h.index];
      memset(u, 0, sizeof *u);
      u->status = h.status, u->why = h.why;
      u->l = (search_layout){.analytic_s = h.analytic_s, .sim_s = NAN, .peak_bytes = h.peak_bytes,
                             .exposed_comm_s = h.exposed_comm_s, .bubble_s = h.bubble_s,
                             .mfu = h.mfu, .tokens_per_s_per_gpu = h.tokens_per_s_per_gpu,
                             .energy_j = h.energy_j, .sim_energy_j = NAN};
      if (h.msg_len) {
        u->msg = g_malloc0((size_t)h.msg_len + 1);
        if (!move_full(fds[k], u->msg, (size_t)h.msg_len, FALSE)) ok = FALSE;
      }
      if (ok && u->status != EVAL_FAILED) ok = journal_add(jfd, (guint)h.index, u, err);
      progress(step == STEP_BOUND, ++*done, total);
    }
  }
  int killed;
  ok = reap_workers(started, fds, pids, &killed) && ok;
  g_free(open);
  g_free(pf);
  g_free(fds);
  g_free(pids);
  if (ok && *done - done0 != (long)n_todo) ok = FALSE;
  for (guint t = 0; !ok && !*err && t < n_todo; t++) /* a worker's own reason first */
    if (out[todo[t]].status == EVAL_FAILED && out[todo[t]].msg)
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s", out[todo[t]].msg);
  if (!ok && !*err && killed) {
    char *why = killed_why(killed);
    g_set_error(err, DL_ERROR, DL_ERR_IO, "search: a worker process was %s after %ld of %u "
                "layouts; run the search again with fewer --jobs (with --out it resumes the "
                "layouts already timed)", why, *done - done0, n_todo);
    g_free(why);
  } else if (!ok && !*err)
    g_set_error(err, DL_ERROR, DL_ERR_IO, "search: a worker process stopped before its "
                "layouts were done (%ld of %u)", *done - done0, n_todo);
  return ok;
}

/* Bounds, then pruning (search.h): the layouts whose bound is met are timed in rounds, in the
 * order of their bounds (ties by index), the first of 64 layouts and each next one twice as
 * large up to 1,024; before each round, a layout is passed over (EVAL_PRUNED) when o->top
 * layouts timed in earlier rounds are faster than its bound, and either one of them (not among
 * the o->verify fastest, which may yet be drawn at their simulated time) is no slower than its
 * bound and needs no more memory than its bound, or its bound exceeds
 * o->pareto_within times the fastest so far. The rounds do not depend on o->jobs, so the layouts
 * timed are the same whatever it is. Every layout timed is checked against its bound. */
#define ROUND_FIRST 64
#define ROUND_MAX 1024

static int by_bound(gconstpointer pa, gconstpointer pb, gpointer data) {
  const outcome *b = data;
  const guint i = *(const guint *)pa, j = *(const guint *)pb;
  const double x = b[i].l.analytic_s, y = b[j].l.analytic_s;
  return x != y ? (x < y ? -1 : 1) : (i > j) - (i < j);
}

typedef struct {
  double t, mem;
} timed_point;

static int by_time(gconstpointer pa, gconstpointer pb) {
  const timed_point *a = pa, *b = pb;
  return a->t != b->t ? (a->t < b->t ? -1 : 1) : (a->mem > b->mem) - (a->mem < b->mem);
}

/* How many of the points (by time) are faster than t, or with `or_equal` no slower. */
static guint count_below(const GArray *pts, double t, gboolean or_equal) {
  guint lo = 0, hi = pts->len;
  while (lo < hi) {
    const guint mid = lo + (hi - lo) / 2;
    const double v = g_array_index(pts, timed_point, mid).t;
    if (v < t || (or_equal && v == t)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* What the layouts idx[0..at-1] timed: their points by time into pts, and least[k] the least
 * memory among points 0..k but the fastest `verify` (which may yet be simulated, and drawn at
 * that time: they stand for none). */
static double *timed_so_far(const outcome *all, const guint *idx, guint at, int verify,
                            GArray *pts, double *least) {
  pts->len = 0;
  for (guint k = 0; k < at; k++) {
    const outcome *u = &all[idx[k]];
    const timed_point q = {u->l.analytic_s, u->l.peak_bytes};
    if (u->status == EVAL_OK) g_array_append_val(pts, q);
  }
  g_array_sort(pts, by_time);
  least = g_renew(double, least, pts->len + 1);
  for (guint k = 0; k < pts->len; k++)
    least[k] = MIN(k ? least[k - 1] : INFINITY,
                   k < (guint)verify ? INFINITY : g_array_index(pts, timed_point, k).mem);
  return least;
}

/* Whether a layout bounded by `b` seconds and `mem` bytes can be passed over, given the points
 * timed so far (timed_so_far). */
static gboolean passed_over(const search_opts *o, const GArray *pts, const double *least,
                            double b, double mem) {
  if (count_below(pts, b, FALSE) < (guint)MAX(1, o->top)) return FALSE; /* maybe among the top */
  const guint upto = count_below(pts, b, TRUE);
  return (upto > 0 && least[upto - 1] <= mem) || /* dominated on the front */
         (o->pareto_within > 0 && b > o->pareto_within * g_array_index(pts, timed_point, 0).t);
}

/* FALSE with err set when the layouts idx[at..end-1] timed are faster or smaller than their
 * bounds: the search's bug. */
static gboolean bounds_hold(const GArray *space, const outcome *all, const outcome *bnd,
                            const guint *idx, guint at, guint end, GError **err) {
  for (guint k = at; k < end; k++) {
    const outcome *u = &all[idx[k]], *v = &bnd[idx[k]];
    if (u->status == EVAL_OK && (u->l.analytic_s < v->l.analytic_s * (1 - 1e-9) ||
                                 u->l.peak_bytes < v->l.peak_bytes * (1 - 1e-9))) {
      char *a = search_layout_args(&g_array_index(space, cfg_run, idx[k]));
      g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "search: %s: %.9g s and %.6g bytes in "
                  "closed form, below its bound of %.9g s and %.6g bytes (a bug)", a,
                  u->l.analytic_s, u->l.peak_bytes, v->l.analytic_s, v->l.peak_bytes);
      g_free(a);
      return FALSE;
    }
  }
  return TRUE;
}

/* FALSE with err set (over any error of the round's) to the message of the failure of the system
 * among out[todo[0..n-1]] that comes first in the space's order, the same whatever --jobs. */
static gboolean none_failed(const outcome *out, const guint *todo, guint n, GError **err) {
  guint failed = G_MAXUINT;
  for (guint t = 0; t < n; t++)
    if (out[todo[t]].status == EVAL_FAILED) failed = MIN(failed, todo[t]);
  if (failed == G_MAXUINT) return TRUE;
  g_clear_error(err);
  g_set_error(err, DL_ERROR, DL_ERR_IO, "%s",
              out[failed].msg ? out[failed].msg : "a layout failed");
  return FALSE;
}

static gboolean evaluate_space(const run_ctx *x, const search_opts *o, const GArray *space,
                               outcome *all, long *pruned, GError **err) {
  const guint n = space->len;
  outcome *bnd = g_new0(outcome, n + 1), *pipe = g_new0(outcome, n + 1);
  guint *idx = g_new(guint, n + 1);
  for (guint i = 0; i < n; i++) idx[i] = i;
  long done = 0;
  gboolean ok = evaluate_all(x, o, space, idx, n, STEP_BOUND, bnd, -1, &done, n, err);
  /* a failure of the system, in the space's order */
  for (guint i = 0; i < n && ok; i++)
    if (bnd[i].status == EVAL_FAILED) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s", bnd[i].msg ? bnd[i].msg : "a layout failed");
      ok = FALSE;
    }
  gboolean *have = g_new0(gboolean, n + 1);
  int jfd = -1;
  done = 0;
  if (ok) ok = journal_open(x, o, space, all, have, &done, &jfd, err);
  /* the layouts dropped before the closed form, as they would be then; the rest by bound */
  GArray *order = g_array_new(FALSE, FALSE, sizeof(guint));
  for (guint i = 0; i < n && ok; i++) {
    if (bnd[i].status == EVAL_OK) {
      g_array_append_val(order, i);
    } else if (!have[i]) {
      g_free(all[i].msg);
      all[i] = bnd[i];
      bnd[i].msg = NULL;
      done++;
    }
  }
  g_array_sort_with_data(order, by_bound, bnd);
  const guint n_ok = order->len;
  guint *ix = (guint *)order->data;
  gboolean *piped = g_new0(gboolean, n + 1); /* bounded as a pipeline */
  const gboolean prune = o->objective == SEARCH_BY_TIME && !o->exhaustive;
  GArray *pts = g_array_new(FALSE, FALSE, sizeof(timed_point));
  double *least = NULL;
  guint *todo = g_new(guint, n_ok + 1);
  for (guint at = 0, size = prune ? ROUND_FIRST : MAX(1u, n_ok); at < n_ok && ok;
       at += size, size = MIN(2 * size, ROUND_MAX)) {
    least = timed_so_far(all, ix, at, o->verify, pts, least);
    /* the pipelines among the round that the first bound does not pass over: bounded again,
     * their bubble included (every one when nothing is passed over: the bound is still
     * checked), and the layouts not yet timed put in the order of their bounds again, until
     * the round holds no pipeline left to bound */
    guint n_todo = 0, end = MIN(n_ok, at + size);
    for (gboolean more = TRUE; more && ok;) {
      n_todo = 0;
      for (guint k = at; k < end; k++) {
        const guint i = ix[k];
        const cfg_run *c = &g_array_index(space, cfg_run, i);
        if (!have[i] && !piped[i] && c->pp > 1 && c->schedule != CFG_SCHED_INTERLEAVED &&
            (!prune || !passed_over(o, pts, least, bnd[i].l.analytic_s, bnd[i].l.peak_bytes))) {
          todo[n_todo++] = i;
          piped[i] = TRUE;
        }
      }
      long none = 0;
      ok = evaluate_all(x, o, space, todo, n_todo, STEP_PIPE, pipe, -1, &none, 0, err);
      ok = none_failed(pipe, todo, n_todo, err) && ok;
      for (guint t = 0; t < n_todo; t++) {
        outcome *u = &pipe[todo[t]];
        if (u->status == EVAL_OK)
          bnd[todo[t]].l.analytic_s = MAX(bnd[todo[t]].l.analytic_s, u->l.analytic_s);
        g_clear_pointer(&u->msg, g_free);
      }
      more = n_todo > 0 && prune;
      if (more) g_qsort_with_data(ix + at, (gint)(n_ok - at), sizeof *ix, by_bound, bnd);
    }
    n_todo = 0;
    for (guint k = at; k < end && ok; k++) {
      const guint i = ix[k];
      if (have[i]) continue; /* timed before an interruption */
      if (prune && passed_over(o, pts, least, bnd[i].l.analytic_s, bnd[i].l.peak_bytes)) {
        memset(&all[i], 0, sizeof all[i]);
        all[i].status = EVAL_PRUNED;
        (*pruned)++;
        progress(FALSE, ++done, n);
      } else {
        todo[n_todo++] = i;
      }
    }
    if (ok) ok = evaluate_all(x, o, space, todo, n_todo, STEP_TIME, all, jfd, &done, n, err);
    ok = none_failed(all, todo, n_todo, err) && ok;
    ok = ok && bounds_hold(space, all, bnd, ix, at, end, err);
  }
  if (jfd >= 0) close(jfd);
  g_free(todo);
  g_free(least);
  g_array_free(pts, TRUE);
  g_array_free(order, TRUE);
  g_free(have);
  g_free(idx);
  for (guint i = 0; i < n; i++) g_free(bnd[i].msg);
  g_free(bnd);
  g_free(pipe);
  g_free(piped);
  return ok;
}

/* Closed-form order of the objective; ties by time, by memory, then by the options (so the order
 * is the same every run). */
static int by_analytic(gconstpointer pa, gconstpointer pb, gpointer opts) {
  const search_layout *a = pa, *b = pb;
  const double va = search_objective_value(opts, a, FALSE), vb = search_objective_value(opts, b, FALSE);
  if (va != vb) return va < vb ? -1 : 1;
  if (a->analytic_s != b->analytic_s) return a->analytic_s < b->analytic_s ? -1 : 1;
  if (a->peak_bytes != b->peak_bytes) return a->peak_bytes < b->peak_bytes ? -1 : 1;
  char *x = search_layout_args(&a->cfg), *y = search_layout_args(&b->cfg);
  const int v = strcmp(x, y);
  g_free(x);
  g_free(y);
  return v;
}

/* Verified layouts first, by the simulated objective; then the others in closed-form order. */
static int by_final(gconstpointer pa, gconstpointer pb, gpointer opts) {
  const search_layout *a = pa, *b = pb;
  const gboolean va = !isnan(a->sim_s), vb = !isnan(b->sim_s);
  if (va != vb) return va ? -1 : 1;
  const double xa = search_objective_value(opts, a, TRUE), xb = search_objective_value(opts, b, TRUE);
  if (va && xa != xb) return xa < xb ? -1 : 1;
  return a->analytic_rank - b->analytic_rank;
}

/* Bucket sizes tried on the best layouts, MiB: PyTorch DDP's 25 (bucket_cap_mb) and around it. */
static const double refine_bucket_mib[] = {10, 50, 100};

/* The variants of the best layouts that change only how they run: GPipe for 1F1B, and other
 * gradient bucket sizes where buckets are all-reduced or reduce-scattered (DDP, ZeRO 1 and 2);
 * a variant joins the layouts when it is faster than the layout it varies. */
static gboolean refine(const run_ctx *x, const search_opts *o, search_result *r, GError **err) {
  const guint n = MIN(r->layouts->len, (guint)o->top);
  GArray *best = g_array_new(FALSE, FALSE, sizeof(search_layout));
  g_array_append_vals(best, r->layouts->data, n);
  gboolean ok = TRUE;
  for (guint i = 0; i < n && ok; i++) {
    const search_layout *parent = &g_array_index(best, search_layout, i);
    const cfg_run *c = &parent->cfg;
    if (c->pp > 1 && c->schedule == CFG_SCHED_1F1B) {
      cfg_run g = *c;
      g.schedule = CFG_SCHED_GPIPE;
      r->enumerated++;
      ok = try_layout(x, o, g, parent, r, err);
    }
    const gboolean buckets = c->dp * c->cp > 1 && c->zero < 3 && c->fsdp == CFG_FSDP_NONE;
    for (size_t b = 0; b < G_N_ELEMENTS(refine_bucket_mib) && buckets && ok; b++) {
      cfg_run g = *c;
      g.bucket_bytes = refine_bucket_mib[b] * 1024 * 1024;
      r->enumerated++;
      ok = try_layout(x, o, g, parent, r, err);
    }
  }
  g_array_free(best, TRUE);
  return ok;
}

/* ---- the best layouts in simulation ---------------------------------------------------------- */

/* Layout i of nv simulated: its simulated time and energy into l. */
static gboolean verify_one(const run_ctx *x, search_layout *l, guint i, guint nv, gboolean many,
                           GError **err) {
  cfg_run t = l->cfg;
  t.mode = CFG_MODE_SIM;
  res_result tr;
  res_init(&tr);
  char *a = search_layout_args(&t), label[64];
  fprintf(stderr, "dlsim: simulating %u of %u: %s\n", i + 1, nv, a);
  g_free(a);
  g_snprintf(label, sizeof label, "%u of %u", i + 1, nv);
  exec_progress_label(many ? label : NULL);
  exec_expect_simulated_s(l->analytic_s * t.iters);
  const gboolean ok = exec_for(CFG_MODE_SIM)->run(x, &t, &tr, err);
  if (ok) {
    l->sim_s = tr.iteration_time_s;
    l->sim_energy_j = layout_energy_j(x, &tr, &t);
  }
  res_release(&tr);
  return ok;
}

typedef struct {
  gint32 index, ok, code, msg_len; /* code: the error's, where not ok */
  double sim_s, sim_energy_j;
} wire_verified;

/* The simulations' share of a search: the best nv layouts of r. */
typedef struct {
  const run_ctx *x;
  search_result *r;
  guint nv;
} verify_job;

/* Worker w of `jobs` (a worker_fn of a verify_job): layouts w, w + jobs, ... simulated on a
 * platform of its own, each outcome written to fd; it stops at the first that fails. */
static void verify_worker(const void *job, int w, int jobs, int fd) {
  const verify_job *j = job;
  run_ctx own = *j->x;
  GError *pe = NULL;
  own.platform = worker_platform(j->x, &pe);
  for (guint i = (guint)w; i < j->nv; i += (guint)jobs) {
    search_layout *l = &g_array_index(j->r->layouts, search_layout, i);
    GError *e = pe ? g_error_copy(pe) : NULL;
    const gboolean done = !e && verify_one(&own, l, i, j->nv, TRUE, &e);
    const size_t len = e ? MIN(strlen(e->message), WIRE_MSG_MAX) : 0;
    const wire_verified h = {(gint32)i, done, e ? e->code : 0, (gint32)len, l->sim_s,
                             l->sim_energy_j};
    const gboolean sent = move_full(fd, (void *)&h, sizeof h, TRUE) &&
                          (!len || move_full(fd, e->message, len, TRUE));
    g_clear_error(&e);
    if (!sent || !done) break;
  }
  g_clear_error(&pe);
  plat_free(own.platform);
}

/* The best nv layouts of r simulated, by up to o->jobs processes at once (each simulation is
 * a SimGrid process of its own, on one core): layout i by worker i mod jobs, its outcome sent
 * back over a pipe. The results do not depend on o->jobs; on an error, the first layout's. */
static gboolean verify_all(const run_ctx *x, const search_opts *o, search_result *r, guint nv,
                           GError **err) {
  const int jobs = (int)MIN((guint)MAX(1, o->jobs), nv);
  if (jobs == 1) {
    gboolean ok = TRUE;
    for (guint i = 0; i < nv && ok; i++)
      ok = verify_one(x, &g_array_index(r->layouts, search_layout, i), i, nv, FALSE, err);
    return ok;
  }
  int *fds = g_new(int, jobs);
  pid_t *pids = g_new0(pid_t, jobs);
  const verify_job job = {x, r, nv};
  const int started = fork_workers(verify_worker, &job, jobs, fds, pids, err);
  gboolean ok = started == jobs;
  /* each worker's outcomes in turn: a worker's layouts come in its order */
  char **msg = g_new0(char *, nv);
  gboolean *got = g_new0(gboolean, nv);
  int *code = g_new0(int, nv), killed;
  for (int k = 0; k < started; k++) {
    wire_verified h;
    while (move_full(fds[k], &h, sizeof h, FALSE)) {
      if (h.index < 0 || (guint)h.index >= nv || h.msg_len < 0 || h.msg_len > WIRE_MSG_MAX)
        break;
      search_layout *l = &g_array_index(r->layouts, search_layout, h.index);
      got[h.index] = h.ok;
      code[h.index] = h.code;
      if (h.ok) l->sim_s = h.sim_s, l->sim_energy_j = h.sim_energy_j;
      msg[h.index] = g_malloc0((size_t)h.msg_len + 1);
      if (h.msg_len && !move_full(fds[k], msg[h.index], (size_t)h.msg_len, FALSE)) break;
    }
  }
  reap_workers(started, fds, pids, &killed); /* what each returned is in `got` */
  for (guint i = 0; ok && i < nv; i++) /* the first layout that failed, in rank order */
    if (!got[i] && msg[i] && *msg[i]) {
      g_set_error(err, DL_ERROR, code[i], "%s", msg[i]);
      ok = FALSE;
    } else if (!got[i]) {
      char *why = killed ? killed_why(killed) : g_strdup("stopped before it was done");
      g_set_error(err, DL_ERROR, DL_ERR_IO, "search: the worker simulating layout %u of %u was "
                  "%s; run the search again with fewer --jobs", i + 1, nv, why);
      g_free(why);
      ok = FALSE;
    }
  for (guint i = 0; i < nv; i++) g_free(msg[i]);
  g_free(msg);
  g_free(got);
  g_free(code);
  g_free(fds);
  g_free(pids);
  return ok;
}

gboolean search_run(const run_ctx *x, const search_opts *o, search_result *r, GError **err) {
  memset(r, 0, sizeof *r);
  r->layouts = g_array_new(FALSE, FALSE, sizeof(search_layout));
  const gint64 t0 = g_get_monotonic_time();
  GArray *space = g_array_new(FALSE, FALSE, sizeof(cfg_run));
  search_enumerate(x, o, space);
  r->enumerated = space->len;
  outcome *all = g_new0(outcome, space->len + 1);
  /* every layout builds op lists of tens of megabytes and frees them: from the heap, kept
   * there, rather than mapped afresh and faulted in again each time (glibc maps any block over
   * 32 MiB), a worker reuses pages it has already touched */
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  gboolean ok = evaluate_space(x, o, space, all, &r->pruned, err);
  for (guint i = 0; i < space->len && ok; i++) /* in the space's order: the same every run */
    if (all[i].status != EVAL_PRUNED)
      ok = take(o, &all[i], g_array_index(space, cfg_run, i), NULL, r, err);
  for (guint i = 0; i < space->len; i++) g_free(all[i].msg);
  g_free(all);
  g_array_free(space, TRUE);
  if (ok) {
    g_array_sort_with_data(r->layouts, by_analytic, (gpointer)o);
    ok = refine(x, o, r, err);
    g_array_sort_with_data(r->layouts, by_analytic, (gpointer)o);
  }
  if (ok && r->layouts->len == 0) {
    GString *why = g_string_new("");
    for (int d = 0; d < SEARCH_N_DROPS; d++)
      if (r->dropped[d])
        g_string_append_printf(why, "%s%ld for %s (first: %s)", why->len ? "; " : "", r->dropped[d],
                               search_drop_name(d), r->first_drop[d]);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "search: no layout of %s on %d GPU%s fits: %s",
                x->model->name, x->cfg.gpus, x->cfg.gpus == 1 ? "" : "s", why->str);
    g_string_free(why, TRUE);
    ok = FALSE;
  }
  for (guint i = 0; ok && i < r->layouts->len; i++)
    g_array_index(r->layouts, search_layout, i).analytic_rank = (int)i + 1;
  /* the best few in simulation, where contention and overlap are the network's */
  const guint nv = ok ? MIN(r->layouts->len, (guint)o->verify) : 0;
  if (nv) ok = verify_all(x, o, r, nv, err);
  if (ok && nv) {
    g_array_sort_with_data(r->layouts, by_final, (gpointer)o);
    for (guint i = 0; i < r->layouts->len; i++) {
      search_layout *l = &g_array_index(r->layouts, search_layout, i);
      if (!isnan(l->sim_s)) {
        l->sim_rank = (int)i + 1;
        r->reordered = r->reordered || l->sim_rank != l->analytic_rank;
      }
    }
  }
  r->wall_s = (double)(g_get_monotonic_time() - t0) / 1e6;
  return ok;
}

void search_result_release(search_result *r) {
  if (r->layouts) g_array_free(r->layouts, TRUE);
  for (int d = 0; d < SEARCH_N_DROPS; d++) g_free(r->first_drop[d]);
  memset(r, 0, sizeof *r);
}

char *search_layout_args(const cfg_run *l) {
  GString *s = g_string_new("");
  g_string_append_printf(s, "--tp %d", l->tp);
  if (l->sequence_parallel) g_string_append(s, " --sequence-parallel");
  if (l->cp > 1)
    g_string_append_printf(s, " --cp %d --cp-style %s", l->cp,
                           l->cp_style == CFG_CP_ULYSSES ? "ulysses" : "ring");
  g_string_append_printf(s, " --pp %d", l->pp);
  if (l->ep > 1) g_string_append_printf(s, " --ep %d", l->ep);
  if (l->pp > 1)
    g_string_append_printf(s, " --schedule %s",
                           l->schedule == CFG_SCHED_INTERLEAVED ? "interleaved"
                           : l->schedule == CFG_SCHED_GPIPE     ? "gpipe"
                                                                : "1f1b");
  if (l->schedule == CFG_SCHED_INTERLEAVED)
    g_string_append_printf(s, " --virtual-stages %d", l->virtual_stages);
  g_string_append_printf(s, " --microbatches %d", l->microbatches);
  if (l->zero) g_string_append_printf(s, " --zero %d", l->zero);
  if (l->fsdp != CFG_FSDP_NONE) g_string_append_printf(s, " --fsdp %s", cfg_fsdp_name(l->fsdp));
  if (l->fsdp == CFG_FSDP_HYBRID) g_string_append_printf(s, " --fsdp-shard-size %d", l->fsdp_shard);
  g_string_append_printf(s, " --recompute %s", cfg_recompute_name(l));
  if (l->bucket_bytes != 25.0 * 1024 * 1024)
    g_string_append_printf(s, " --bucket-mb %g", l->bucket_bytes / (1024.0 * 1024));
  return g_string_free(s, FALSE);
}

/* ---- the picture ----------------------------------------------------------------------------- */

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about `n` ticks over `span`. */
static double tick_step(double span, int n) {
  const double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static double time_of(const search_layout *l) { return isnan(l->sim_s) ? l->analytic_s : l->sim_s; }

static int by_memory(gconstpointer pa, gconstpointer pb) {
  const search_layout *a = *(search_layout *const *)pa, *b = *(search_layout *const *)pb;
  if (a->peak_bytes != b->peak_bytes) return a->peak_bytes < b->peak_bytes ? -1 : 1;
  return time_of(a) < time_of(b) ? -1 : time_of(a) > time_of(b);
}

static void svg_text(GString *s, double x, double y, const char *anchor, const char *text) {
  char *t = g_markup_escape_text(text, -1);
  g_string_append_printf(s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%s</text>\n", x, y,
                         anchor, t);
  g_free(t);
}

GString *search_svg(const search_result *r, const char *title) {
  const double W = 760, H = 500, L = 80, R = 30, T = 50, B = 60;
  GString *s = g_string_new("");
  g_string_append_printf(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                            "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
                            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (guint i = 0; i < r->layouts->len; i++) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, i);
    x0 = MIN(x0, l->peak_bytes / 1e9), x1 = MAX(x1, l->peak_bytes / 1e9);
    y0 = MIN(y0, time_of(l)), y1 = MAX(y1, time_of(l));
  }
  if (!r->layouts->len) x0 = y0 = 0, x1 = y1 = 1;
  if (x1 - x0 < 1e-9) x0 -= 0.5, x1 += 0.5;
  if (y1 - y0 < 1e-12) y0 *= 0.9, y1 = y1 * 1.1 + 1e-12;
  const double xs = tick_step(x1 - x0, 6), ys = tick_step(y1 - y0, 6);
  x0 = floor(x0 / xs) * xs, x1 = ceil(x1 / xs) * xs, y0 = floor(y0 / ys) * ys,
  y1 = ceil(y1 / ys) * ys;
#define PX(v) (L + ((v) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (H - B - ((v) - y0) / (y1 - y0) * (H - T - B))
  svg_text(s, W / 2, 24, "middle", title);
  g_string_append_printf(s, "<g stroke=\"#ccc\">\n");
  for (double v = x0; v <= x1 + xs / 2; v += xs)
    g_string_append_printf(s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(v),
                           PY(y0), PX(v), PY(y1));
  for (double v = y0; v <= y1 + ys / 2; v += ys)
    g_string_append_printf(s, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(x0),
                           PY(v), PX(x1), PY(v));
  g_string_append(s, "</g>\n");
  for (double v = x0; v <= x1 + xs / 2; v += xs) {
    char t[32];
    g_snprintf(t, sizeof t, "%g", v);
    svg_text(s, PX(v), PY(y0) + 18, "middle", t);
  }
  for (double v = y0; v <= y1 + ys / 2; v += ys) {
    char t[32];
    g_snprintf(t, sizeof t, "%g", v);
    svg_text(s, PX(x0) - 8, PY(v) + 4, "end", t);
  }
  svg_text(s, (L + W - R) / 2, H - 18, "middle", "memory per GPU (GB)");
  g_string_append_printf(s, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" "
                            "transform=\"rotate(-90 18 %.1f)\">iteration time (s)</text>\n",
                         (T + H - B) / 2, (T + H - B) / 2);
  GPtrArray *order = g_ptr_array_new();
  for (guint i = 0; i < r->layouts->len; i++) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, i);
    g_ptr_array_add(order, (gpointer)l);
    g_string_append_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#888\" "
                              "fill-opacity=\"0.5\"/>\n", PX(l->peak_bytes / 1e9), PY(time_of(l)));
  }
  g_ptr_array_sort(order, by_memory);
  g_string_append(s, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
  double best = INFINITY;
  for (guint i = 0; i < order->len; i++) {
    const search_layout *l = order->pdata[i];
    if (time_of(l) >= best) continue; /* a smaller layout is at least as fast */
    best = time_of(l);
    g_string_append_printf(s, "%.1f,%.1f ", PX(l->peak_bytes / 1e9), PY(best));
  }
  g_string_append(s, "\"/>\n");
  g_ptr_array_free(order, TRUE);
  if (r->layouts->len) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, 0);
    char *a = search_layout_args(&l->cfg);
    g_string_append_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#d62728\"/>\n",
                           PX(l->peak_bytes / 1e9), PY(time_of(l)));
    char *label = g_strdup_printf("best: %s", a);
    svg_text(s, PX(x0) + 8, T - 6, "start", label);
    g_free(label);
    g_free(a);
  }
  g_string_append_printf(s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">"
                            "Pareto front</text>\n", W - R, T - 6);
  g_string_append(s, "</svg>\n");
#undef PX
#undef PY
  return s;
}
