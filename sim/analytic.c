/* analytic.c — closed-form evaluation of op lists (see analytic.h). */
#include "analytic.h"

#include <math.h>
#include <string.h>

#include "costmodel.h"
#include "dl_common.h"
#include "gpuspec.h"
#include "ktime.h"
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

static int rank_row_cmp(gconstpointer a, gconstpointer b) {
  return ((const res_rank *)a)->rank - ((const res_rank *)b)->rank;
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
  double T, compute, comm, overlap, exposed;
  double phase[PL_N_PHASES];
  GArray *colls; /* res_coll */
  int kernels[KDB_N_ORIGINS]; /* kernel ops by where their time came from */
  double moe_max_over_mean, moe_dropped, moe_routed; /* from the plan */
  pl_memory mem;
} rank_eval;

static void add_coll(GArray *colls, const pl_op *op, const char *algo, double t, double wire) {
  /* a receive adds its transfer time to the row of the messages; the send counts the message */
  const gboolean recv = op->kind == PL_RECV;
  for (guint i = 0; i < colls->len; i++) {
    res_coll *rc = &g_array_index(colls, res_coll, i);
    if (rc->op == op->coll && rc->group == op->group && rc->purpose == op->purpose &&
        strcmp(rc->algo, algo) == 0) {
      if (recv) {
        rc->time_s += t;
        return;
      }
      rc->calls++;
      rc->bytes += op->bytes;
      rc->wire_bytes += wire;
      rc->time_s += t;
      return;
    }
  }
  res_coll rc = {op->coll, op->group, op->purpose, algo, recv ? 0 : 1, recv ? 0 : op->bytes, wire, t};
  g_array_append_val(colls, rc);
}

/* Union length of a list of spans (sorted by start, possibly overlapping). */
static double union_s(GArray *a) {
  double tot = 0, lo = 0, hi = -1;
  for (guint i = 0; i < a->len; i++) {
    const span *x = &g_array_index(a, span, i);
    if (x->start > hi) {
      if (hi > lo) tot += hi - lo;
      lo = x->start;
      hi = x->end;
    } else if (x->end > hi) {
      hi = x->end;
    }
  }
  if (hi > lo) tot += hi - lo;
  return tot;
}

static int span_cmp(gconstpointer a, gconstpointer b) {
  const span *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

/* Merges overlapping spans in place (sorted by start). */
static void merge_spans(GArray *a) {
  g_array_sort(a, span_cmp);
  guint n = 0;
  for (guint i = 0; i < a->len; i++) {
    span x = g_array_index(a, span, i);
    if (n && x.start <= g_array_index(a, span, n - 1).end) {
      span *last = &g_array_index(a, span, n - 1);
      if (x.end > last->end) last->end = x.end;
    } else {
      g_array_index(a, span, n++) = x;
    }
  }
  g_array_set_size(a, n);
}

typedef struct {
  const pl_rank_plan *plan;
  int rank;
  int coll_seq[PL_N_GROUPS]; /* collectives this rank has finished, per communicator kind */
  int registered;           /* op index whose arrival at a collective is recorded, or -1 */
  int next[PL_N_STREAMS];  /* index of the next op of each stream */
  double free_at[PL_N_STREAMS];
  double *event_t;          /* NAN until recorded */
  GArray *spans[PL_N_STREAMS];
  rank_eval ev;
} rank_run;

/* Arrival times of point-to-point messages, keyed "src:dst:tag", and of ranks at collectives,
 * keyed "group:first member:sequence". */
typedef struct {
  GHashTable *arrival; /* -> double* */
  GHashTable *link_free;
  GHashTable *colls;   /* -> coll_meet* */
} p2p_state;

typedef struct {
  int arrived, members;
  double ready; /* latest arrival: when the collective can start */
} coll_meet;

static double *msg_slot(GHashTable *h, int src, int dst, int tag, gboolean create) {
  char key[48];
  g_snprintf(key, sizeof key, "%d:%d:%d", src, dst, tag);
  double *v = g_hash_table_lookup(h, key);
  if (!v && create) {
    v = g_new(double, 1);
    *v = NAN;
    g_hash_table_insert(h, g_strdup(key), v);
  }
  return v;
}

/* Next op of `stream` on rank `r`, or -1. */
static int next_op(const rank_run *r, int stream) {
  for (int i = r->next[stream]; i < r->plan->n_ops; i++)
    if (r->plan->ops[i].stream == stream) return i;
  return -1;
}

/* Runs every op that can run now on rank `rr`; returns how many ran. */
static int advance(rank_run *rr, const cfg_run *c, const kt_source *ks, group_cache *gc,
                   p2p_state *ps, const plat *pl, GError **err) {
  int ran = 0;
  for (int s = 0; s < PL_N_STREAMS; s++) {
    for (;;) {
      int i = next_op(rr, s);
      if (i < 0) {
        rr->next[s] = rr->plan->n_ops;
        break;
      }
      const pl_op *op = &rr->plan->ops[i];
      double start = rr->free_at[s];
      if (op->wait_event >= 0) {
        double t = rr->event_t[op->wait_event];
        if (isnan(t)) break;
        if (t > start) start = t;
      }
      double end = start, busy_from = start;
      if (op->kind == PL_KERNEL) {
        kdb_origin o;
        end = start + kt_kernel_s(ks, op, &o);
        rr->ev.compute += end - start;
        rr->ev.phase[op->phase] += end - start;
        rr->ev.kernels[o]++;
      } else if (op->kind == PL_COLL) {
        const cm_group *g = group_get(gc, op->group, rr->rank, err);
        if (!g) return -1;
        /* a collective starts when its last member arrives */
        int n = pl_group_members(c, op->group, rr->rank, gc->members);
        int me = 0;
        while (gc->members[me] != rr->rank) me++;
        char key[64];
        g_snprintf(key, sizeof key, "%d:%d:%d", (int)op->group, gc->members[0],
                   rr->coll_seq[op->group]);
        coll_meet *cm = g_hash_table_lookup(ps->colls, key);
        if (!cm) {
          cm = g_new0(coll_meet, 1);
          cm->members = n;
          g_hash_table_insert(ps->colls, g_strdup(key), cm);
        }
        if (rr->registered != i) {
          rr->registered = i;
          cm->arrived++;
          if (start > cm->ready) cm->ready = start;
        }
        if (cm->arrived < cm->members) break;
        start = cm->ready;
        rr->coll_seq[op->group]++;
        const char *algo = cm_algo(op->coll, c->coll, op->bytes, g);
        double d = op->peer_send_bytes
                       ? cm_alltoallv_s(op->peer_send_bytes, op->peer_recv_bytes, me, g)
                       : cm_coll_s(op->coll, algo, op->bytes, g);
        if (op->peer_send_bytes) algo = "pairwise";
        end = start + d;
        rr->ev.comm += d;
        add_coll(rr->ev.colls, op, algo, d, cm_coll_wire_bytes(op->coll, algo, op->bytes, g));
      } else if (op->kind == PL_SEND) {
        plat_route_info route;
        if (!plat_route(pl, rr->rank, op->peer, &route, err)) return -1;
        /* messages leaving one GPU share its link: they go one after another */
        double *lf = msg_slot(ps->link_free, rr->rank, -1, 0, TRUE);
        double go = isnan(*lf) || *lf < start ? start : *lf;
        double xfer = op->bytes / route.bottleneck_bps;
        *lf = go + xfer;
        *msg_slot(ps->arrival, rr->rank, op->peer, op->tag, TRUE) = go + route.latency_s + xfer;
        add_coll(rr->ev.colls, op, "p2p", 0, op->bytes); /* the receiver adds the time */
      } else if (op->kind == PL_RECV) {
        double *arr = msg_slot(ps->arrival, op->peer, rr->rank, op->tag, FALSE);
        if (!arr || isnan(*arr)) break;
        plat_route_info route;
        if (!plat_route(pl, op->peer, rr->rank, &route, err)) return -1;
        double xfer = route.latency_s + op->bytes / route.bottleneck_bps;
        end = *arr > start ? *arr : start;
        /* the transfer is communication; waiting for the sender to get there is bubble */
        busy_from = MAX(start, end - xfer);
        add_coll(rr->ev.colls, op, "p2p", end - busy_from, 0);
        rr->ev.comm += end - busy_from;
      }
      rr->free_at[s] = end;
      if (op->record_event >= 0) rr->event_t[op->record_event] = end;
      if (end > busy_from) {
        span sp = {busy_from, end};
        g_array_append_val(rr->spans[s], sp);
      }
      if (end > rr->ev.T) rr->ev.T = end;
      rr->next[s] = i + 1;
      ran++;
    }
  }
  return ran;
}

/* Evaluates ranks[0..n-1] together: point-to-point messages arrive when their sender posted them
 * plus the route's time; a collective starts when its last member arrives and then takes each
 * member its own alpha-beta time. `ranks` must hold every member of every group they use. */
static gboolean eval_ranks(const wl_model *m, const cfg_run *c, const double *layer_t,
                              const int *ranks, int n, const kt_source *ks, group_cache *gc,
                              const plat *pl, rank_eval *out, GError **err) {
  rank_run *rr = g_new0(rank_run, n);
  p2p_state ps = {g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
                  g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
                  g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free)};
  gboolean ok = TRUE;
  for (int k = 0; k < n && ok; k++) {
    pl_rank_plan *p = pl_build(m, c, layer_t, ranks[k], err);
    if (!p) {
      ok = FALSE;
      break;
    }
    rr[k].plan = p;
    rr[k].rank = ranks[k];
    rr[k].registered = -1;
    rr[k].event_t = g_new(double, p->n_events + 1);
    for (int e = 0; e <= p->n_events; e++) rr[k].event_t[e] = NAN;
    for (int s = 0; s < PL_N_STREAMS; s++) rr[k].spans[s] = g_array_new(FALSE, FALSE, sizeof(span));
    rr[k].ev.colls = g_array_new(FALSE, FALSE, sizeof(res_coll));
    rr[k].ev.mem = p->mem;
    rr[k].ev.moe_max_over_mean = p->moe_max_over_mean;
    rr[k].ev.moe_dropped = p->moe_dropped_tokens;
    rr[k].ev.moe_routed = p->moe_routed_tokens;
  }
  for (gboolean busy = ok; busy && ok;) {
    int ran = 0;
    for (int k = 0; k < n; k++) {
      int r = advance(&rr[k], c, ks, gc, &ps, pl, err);
      if (r < 0) {
        ok = FALSE;
        break;
      }
      ran += r;
    }
    busy = FALSE;
    for (int k = 0; k < n && ok; k++)
      for (int s = 0; s < PL_N_STREAMS; s++) busy |= next_op(&rr[k], s) >= 0;
    if (ok && busy && !ran) {
      g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "closed form: the op lists of ranks %d..%d "
                  "wait for each other (planner bug)", ranks[0], ranks[n - 1]);
      ok = FALSE;
    }
  }
  for (int k = 0; k < n; k++) {
    if (ok) {
      rank_eval *ev = &rr[k].ev;
      merge_spans(rr[k].spans[PL_STREAM_COMM]);
      ev->overlap = overlap_s(rr[k].spans[PL_STREAM_COMPUTE], rr[k].spans[PL_STREAM_COMM]);
      ev->exposed = union_s(rr[k].spans[PL_STREAM_COMM]) - ev->overlap;
      out[k] = *ev;
    } else if (rr[k].ev.colls) {
      g_array_free(rr[k].ev.colls, TRUE);
    }
    for (int s = 0; s < PL_N_STREAMS; s++)
      if (rr[k].spans[s]) g_array_free(rr[k].spans[s], TRUE);
    g_free(rr[k].event_t);
    pl_rank_plan_free((pl_rank_plan *)rr[k].plan);
  }
  g_hash_table_destroy(ps.arrival);
  g_hash_table_destroy(ps.link_free);
  g_hash_table_destroy(ps.colls);
  g_free(rr);
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
  kdb *db = NULL;
  if (!kt_open_db(c->kernels, gs->name, &db, err)) return FALSE;
  kt_source ks = {gs, c->precision, m, db};
  double *layer_t = kt_layer_times(&ks, c);
  group_cache gc = {pl, c, g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
                    g_new(int, c->gpus)};
  gboolean ok = TRUE;
  rank_eval worst = {0};
  worst.T = -1;
  double worst_peak = -1;
  /* all ranks together: messages between stages, and collectives that start when their last
   * member arrives */
  const int P = c->gpus;
  int *ranks = g_new(int, P);
  rank_eval *evs = g_new0(rank_eval, P);
  for (int k = 0; k < P; k++) ranks[k] = k;
  if (!eval_ranks(m, c, layer_t, ranks, P, &ks, &gc, pl, evs, err)) ok = FALSE;
  for (int s = 0; s < P && ok; s++) {
      {
        r->moe_max_over_mean = MAX(r->moe_max_over_mean, evs[s].moe_max_over_mean);
        r->moe_dropped_tokens += evs[s].moe_dropped;
        r->moe_routed_tokens += evs[s].moe_routed;
        rank_eval *ev = &evs[s];
        double peak = ev->mem.params + ev->mem.grads + ev->mem.optimizer + ev->mem.activations;
        res_rank rr = {ranks[s], ev->T, ev->compute, ev->comm, peak, ev->mem.activations};
        g_array_append_val(r->rank_rows, rr);
        if (peak > worst_peak) {
          worst_peak = peak;
          r->mem = ev->mem;
        }
        /* the slowest rank; among ranks that finish together, the busiest one */
        gboolean tie = fabs(ev->T - worst.T) <= 1e-9 * worst.T;
        if ((!tie && ev->T > worst.T) || (tie && ev->compute > worst.compute)) {
          if (worst.colls) g_array_free(worst.colls, TRUE);
          worst = *ev;
          r->slowest_rank = ranks[s];
        } else {
          g_array_free(ev->colls, TRUE);
        }
      }
  }
  g_free(ranks);
  g_free(evs);
  g_free(layer_t);
  if (ok) {
    /* rows in rank order */
    g_array_sort(r->rank_rows, rank_row_cmp);
    r->iteration_time_s = worst.T;
    r->compute_s = worst.compute;
    r->comm_s = worst.comm;
    memcpy(r->phase_compute_s, worst.phase, sizeof worst.phase);
    r->overlapped_comm_s = worst.overlap;
    r->exposed_comm_s = worst.exposed;
    double rest = worst.T - worst.compute - worst.exposed;
    if (rest < 0) rest = 0; /* rounding */
    /* with a pipeline, the compute stream's waits for other stages are the bubble */
    r->bubble_s = c->pp > 1 ? rest : 0;
    r->idle_s = c->pp > 1 ? 0 : rest;
    g_array_append_vals(r->colls, worst.colls->data, worst.colls->len);
    r->comm_bytes_per_gpu = 0;
    for (guint i = 0; i < worst.colls->len; i++)
      r->comm_bytes_per_gpu += g_array_index(worst.colls, res_coll, i).wire_bytes;
    r->peak_mem_bytes = worst_peak;
    r->gpu_mem_bytes = gs->mem_bytes;
    const plat_host *h = plat_host_at(pl, 0);
    if (h->gpu_mem_bytes > 0) r->gpu_mem_bytes = h->gpu_mem_bytes;
    r->fits_in_memory = worst_peak <= r->gpu_mem_bytes;
    r->gpu_model = gs->name;
    g_free(r->kdb_name);
    r->kdb_name = db ? g_strdup(kdb_name(db)) : g_strdup_printf("roofline:%s", gs->name);
    r->kdb_measured = worst.kernels[KDB_MEASURED];
    r->kdb_interpolated = worst.kernels[KDB_INTERPOLATED];
    r->kdb_estimated = worst.kernels[KDB_ESTIMATED];
    r->ranks = c->gpus;
    /* the paper's equations cover data parallelism and its grid only */
    if (c->pp == 1 && c->ep == 1 && !(c->tp > 1 && c->tp_style == CFG_TP_MEGATRON))
      ok = an_gholami_comm_s(m, c, pl, &r->gholami_comm_s, err);
  }
  if (worst.colls) g_array_free(worst.colls, TRUE);
  g_hash_table_destroy(gc.groups);
  g_free(gc.members);
  kdb_free(db);
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
    if (c->domain_conv && l->kind == WL_CONV2D && !seen_fc) {
      /* Gholami et al. 2018, Eq. 9, i in L_D: forward halo of the input, backward halo of the
       * output gradient (the paper writes k_w for a split along H; we use k_h), and ΔW over P */
      double half = l->kh / 2;
      if (Pr > 1 && half > 0) {
        t += gr.ring_alpha_s + B / Pc * l->in.w * l->in.c * half * dt / gr.ring_beta_bps;
        t += gr.ring_alpha_s + B / Pc * l->out.w * l->out.c * half * dt / gr.ring_beta_bps;
      }
      if (P > 1) t += 2.0 * (gall.ring_alpha_s * lp + (double)(P - 1) / P * w / gall.ring_beta_bps);
      continue;
    }
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
