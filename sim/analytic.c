/* analytic.c — closed-form evaluation of op lists (see analytic.h). */
#include "analytic.h"

#include <math.h>
#include <string.h>

#include "costmodel.h"
#include "dl_common.h"
#include "gpuspec.h"
#include "plan.h"

typedef struct {
  double start, end;
} span;

/* Length of the intersection of two sorted lists of disjoint intervals. */
static double overlap_s(const GArray *a, const GArray *b) {
  double tot = 0;
  guint i = 0, j = 0;
  while (i < a->len && j < b->len) {
    const span *x = &g_array_index(a, span, i), *y = &g_array_index(b, span, j);
    double lo = MAX(x->start, y->start), hi = MIN(x->end, y->end);
    if (hi > lo) tot += hi - lo;
    if (x->end < y->end) i++;
    else j++;
  }
  return tot;
}

typedef struct {
  const plat *pl;
  const cfg_run *c;
  GHashTable *groups; /* "<group>:<first member>" -> cm_group* */
  int *members;
} group_cache;

static const cm_group *group_get(group_cache *gc, pl_group g, int rank, GError **err) {
  int n = pl_group_members(gc->c, g, rank, gc->members);
  char key[48];
  g_snprintf(key, sizeof key, "%d:%d:%d", (int)g, gc->members[0], n);
  cm_group *cg = g_hash_table_lookup(gc->groups, key);
  if (cg) return cg;
  cg = g_new(cm_group, 1);
  if (!cm_group_init(cg, gc->pl, gc->members, n, err)) {
    g_free(cg);
    return NULL;
  }
  g_hash_table_insert(gc->groups, g_strdup(key), cg);
  return cg;
}

typedef struct {
  double T, compute, comm, overlap;
  double phase[PL_N_PHASES];
  GArray *colls; /* res_coll */
  int kernels;
} rank_eval;

static void add_coll(GArray *colls, const pl_op *op, const char *algo, double t, double wire) {
  for (guint i = 0; i < colls->len; i++) {
    res_coll *rc = &g_array_index(colls, res_coll, i);
    if (rc->op == op->coll && rc->group == op->group && rc->purpose == op->purpose &&
        strcmp(rc->algo, algo) == 0) {
      rc->calls++;
      rc->bytes += op->bytes;
      rc->wire_bytes += wire;
      rc->time_s += t;
      return;
    }
  }
  res_coll rc = {op->coll, op->group, op->purpose, algo, 1, op->bytes, wire, t};
  g_array_append_val(colls, rc);
}

static gboolean eval_rank(const pl_rank_plan *p, const cfg_run *c, int rank, const gs_spec *gs,
                          group_cache *gc, rank_eval *ev, GError **err) {
  double free_at[PL_N_STREAMS] = {0};
  double *event_t = g_new0(double, p->n_events + 1);
  GArray *spans[PL_N_STREAMS] = {g_array_new(FALSE, FALSE, sizeof(span)),
                                 g_array_new(FALSE, FALSE, sizeof(span))};
  gboolean ok = TRUE;
  memset(ev, 0, sizeof *ev);
  ev->colls = g_array_new(FALSE, FALSE, sizeof(res_coll));
  for (int i = 0; i < p->n_ops; i++) {
    const pl_op *op = &p->ops[i];
    double start = free_at[op->stream];
    if (op->wait_event >= 0 && event_t[op->wait_event] > start) start = event_t[op->wait_event];
    double dur = 0;
    if (op->kind == PL_KERNEL) {
      dur = gs_roofline_s(gs, c->precision, op->gemm_like, op->flops, op->mem_bytes);
      ev->compute += dur;
      ev->phase[op->phase] += dur;
      ev->kernels++;
    } else if (op->kind == PL_COLL) {
      const cm_group *g = group_get(gc, op->group, rank, err);
      if (!g) {
        ok = FALSE;
        break;
      }
      const char *algo = cm_algo(op->coll, c->coll, op->bytes, g);
      dur = cm_coll_s(op->coll, algo, op->bytes, g);
      ev->comm += dur;
      add_coll(ev->colls, op, algo, dur, cm_coll_wire_bytes(op->coll, algo, op->bytes, g));
    }
    double end = start + dur;
    free_at[op->stream] = end;
    if (op->record_event >= 0) event_t[op->record_event] = end;
    if (dur > 0) {
      span s = {start, end};
      g_array_append_val(spans[op->stream], s);
    }
    if (end > ev->T) ev->T = end;
  }
  if (ok) ev->overlap = overlap_s(spans[PL_STREAM_COMPUTE], spans[PL_STREAM_COMM]);
  g_array_free(spans[0], TRUE);
  g_array_free(spans[1], TRUE);
  g_free(event_t);
  return ok;
}

static const gs_spec *platform_gpu(const plat *pl, GError **err) {
  const plat_host *h = plat_host_at(pl, 0);
  const gs_spec *gs = h ? gs_find(h->gpu_model) : NULL;
  if (!gs) {
    GString *known = g_string_new(NULL);
    for (const gs_spec *const *s = gs_all(); *s; s++)
      g_string_append_printf(known, "%s%s", known->len ? ", " : "", (*s)->name);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "%s: host property gpu_model '%s' has no spec sheet (known: %s)", plat_path(pl),
                h ? h->gpu_model : "", known->str);
    g_string_free(known, TRUE);
  }
  return gs;
}

gboolean an_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r,
                GError **err) {
  if (c->gpus > plat_n_hosts(pl)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus %d: platform %s has only %d GPUs", c->gpus,
                c->platform, plat_n_hosts(pl));
    return FALSE;
  }
  if (c->coll && (!coll_family_known(c->coll) || g_str_has_prefix(c->coll, "smpi"))) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--coll %s: expected ring, tree, hier, rhd or pairwise (smpi:<name> only in "
                "--mode sim)", c->coll);
    return FALSE;
  }
  const gs_spec *gs = platform_gpu(pl, err);
  if (!gs) return FALSE;
  gint64 t0 = g_get_monotonic_time();
  group_cache gc = {pl, c, g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
                    g_new(int, c->gpus)};
  gboolean ok = TRUE;
  rank_eval worst = {0};
  worst.T = -1;
  pl_memory mem = {0};
  double worst_peak = -1;
  for (int rank = 0; rank < c->gpus && ok; rank++) {
    pl_rank_plan *p = pl_build(m, c, rank, err);
    if (!p) {
      ok = FALSE;
      break;
    }
    rank_eval ev;
    ok = eval_rank(p, c, rank, gs, &gc, &ev, err);
    if (ok) {
      res_rank rr = {rank, ev.T, ev.compute, ev.comm};
      g_array_append_val(r->rank_rows, rr);
      if (ev.T > worst.T) {
        if (worst.colls) g_array_free(worst.colls, TRUE);
        worst = ev;
        r->slowest_rank = rank;
      } else {
        g_array_free(ev.colls, TRUE);
      }
      double peak = p->mem.params + p->mem.grads + p->mem.optimizer + p->mem.activations;
      if (peak > worst_peak) {
        worst_peak = peak;
        mem = p->mem;
      }
    } else if (ev.colls) {
      g_array_free(ev.colls, TRUE);
    }
    pl_rank_plan_free(p);
  }
  if (ok) {
    r->iteration_time_s = worst.T;
    r->compute_s = worst.compute;
    r->comm_s = worst.comm;
    memcpy(r->phase_compute_s, worst.phase, sizeof worst.phase);
    r->overlapped_comm_s = worst.overlap;
    r->exposed_comm_s = worst.comm - worst.overlap;
    r->bubble_s = 0;
    r->idle_s = worst.T - worst.compute - r->exposed_comm_s;
    if (r->idle_s < 0) r->idle_s = 0; /* rounding */
    g_array_append_vals(r->colls, worst.colls->data, worst.colls->len);
    r->comm_bytes_per_gpu = 0;
    for (guint i = 0; i < worst.colls->len; i++)
      r->comm_bytes_per_gpu += g_array_index(worst.colls, res_coll, i).wire_bytes;
    r->mem = mem;
    r->peak_mem_bytes = worst_peak;
    r->gpu_mem_bytes = gs->mem_bytes;
    const plat_host *h = plat_host_at(pl, 0);
    if (h->gpu_mem_bytes > 0) r->gpu_mem_bytes = h->gpu_mem_bytes;
    r->fits_in_memory = worst_peak <= r->gpu_mem_bytes;
    r->gpu_model = gs->name;
    g_free(r->kdb_name);
    r->kdb_name = g_strdup_printf("roofline:%s", gs->name);
    r->kdb_estimated = worst.kernels;
    r->ranks = c->gpus;
    ok = an_gholami_comm_s(m, c, pl, &r->gholami_comm_s, err);
  }
  if (worst.colls) g_array_free(worst.colls, TRUE);
  g_hash_table_destroy(gc.groups);
  g_free(gc.members);
  r->wall_s = (g_get_monotonic_time() - t0) / 1e6;
  return ok;
}

gboolean an_gholami_comm_s(const wl_model *m, const cfg_run *c, const plat *pl, double *out_s,
                           GError **err) {
  const int P = c->gpus, Pr = c->tp, Pc = c->dp;
  const double dt = gs_precision_bytes(c->precision);
  const double B = (double)c->batch;
  int *mem = g_new(int, P);
  cm_group gr, gcol, gall;
  gboolean ok = cm_group_init(&gr, pl, mem, pl_group_members(c, PL_GRP_TP, 0, mem), err) &&
                cm_group_init(&gcol, pl, mem, pl_group_members(c, PL_GRP_DP, 0, mem), err) &&
                cm_group_init(&gall, pl, mem, pl_group_members(c, PL_GRP_WORLD, 0, mem), err);
  g_free(mem);
  if (!ok) return FALSE;
  double lr = Pr > 1 ? ceil(log2(Pr)) : 0, lc = Pc > 1 ? ceil(log2(Pc)) : 0,
         lp = P > 1 ? ceil(log2(P)) : 0;
  double t = 0;
  gboolean seen_fc = FALSE;
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->kind != WL_CONV2D && l->kind != WL_LINEAR) continue;
    double d = (double)l->out_elems * dt, w = (double)l->params * dt;
    if (c->grid_fc_only && l->kind == WL_CONV2D && !seen_fc) {
      /* Eq. 4 over all P for the batch-parallel convolutions */
      if (P > 1) t += 2.0 * (gall.ring_alpha_s * lp + (double)(P - 1) / P * w / gall.ring_beta_bps);
      continue;
    }
    if (c->grid_fc_only && !seen_fc && i > 0 && Pr > 1) {
      /* Eq. 6 redistribution before the first fully connected layer (within the Pr group) */
      double din = (double)l->in.c * l->in.h * l->in.w * dt;
      t += gr.ring_alpha_s * lr + (double)(Pr - 1) / Pr * B * din / Pc / gr.ring_beta_bps;
    }
    seen_fc = seen_fc || l->kind == WL_LINEAR;
    /* Gholami et al. 2018, Eq. 8 */
    if (Pr > 1) t += 3.0 * (gr.ring_alpha_s * lr + B * (double)(Pr - 1) / Pr * d / Pc / gr.ring_beta_bps);
    if (Pc > 1)
      t += 2.0 * (gcol.ring_alpha_s * lc + (double)(Pc - 1) / Pc * w / Pr / gcol.ring_beta_bps);
  }
  *out_s = t;
  return TRUE;
}

gboolean an_grid_search(const wl_model *m, cfg_run *c, const plat *pl, res_result *r,
                        GError **err) {
  const int P = c->gpus;
  double best = INFINITY;
  int best_pr = 0;
  for (int pr = 1; pr <= P; pr++) {
    if (P % pr) continue;
    int pc = P / pr;
    if (c->batch % pc || (c->grid_fc_only && c->batch % P)) continue;
    cfg_run t = *c;
    t.grid_auto = FALSE;
    t.grid_pr = pr;
    t.grid_pc = pc;
    t.tp = pr;
    t.dp = pc;
    res_result tr;
    res_init(&tr);
    if (!an_run(m, &t, pl, &tr, err)) {
      res_release(&tr);
      return FALSE;
    }
    res_grid_row row;
    memset(&row, 0, sizeof row);
    g_snprintf(row.grid, sizeof row.grid, "%dx%d", pr, pc);
    row.iteration_time_s = tr.iteration_time_s;
    row.comm_s = tr.comm_s;
    row.gholami_comm_s = tr.gholami_comm_s;
    g_array_append_val(r->grid_search, row);
    if (tr.iteration_time_s < best) {
      best = tr.iteration_time_s;
      best_pr = pr;
    }
    res_release(&tr);
  }
  if (!best_pr) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--grid auto: no factorisation of --gpus %d divides --batch %ld", P, c->batch);
    return FALSE;
  }
  c->grid_auto = FALSE;
  c->grid_pr = c->tp = best_pr;
  c->grid_pc = c->dp = P / best_pr;
  GArray *rows = r->grid_search;
  r->grid_search = NULL;
  res_release(r);
  res_init(r);
  g_array_free(r->grid_search, TRUE);
  r->grid_search = rows;
  c->grid_auto = FALSE;
  gboolean ok = an_run(m, c, pl, r, err);
  c->grid_auto = TRUE; /* the configuration echo says how the grid was chosen */
  return ok;
}
