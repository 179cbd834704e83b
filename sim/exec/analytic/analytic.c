/* analytic.c — closed-form evaluation of op lists (see analytic.h). */
#include "exec/analytic/analytic.h"

#include <math.h>
#include <string.h>

#include "coll/cost.h"
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "kdb/ktime.h"
#include "plan/plan.h"
#include "out/record.h"

typedef struct {
  const plat *pl;
  const cfg_run *c;
  GHashTable *groups; /* key3(slot, first member, size) -> coll_group* */
  GHashTable *by_rank; /* key3(slot, rank, 0) -> rank_group* */
  int *members;
  const gboolean *eval; /* per rank: evaluated (folding: one replica stands for the others) */
  int cp_k;             /* folding round the cp ring: cp_i < cp_k evaluated (fold_replicas) */
  const nccl_env *nccl; /* NCCL's view of the machine, NULL: none */
} group_cache;

/* Keys of the closed form's tables: three non-negative integers (group kind or rank, rank,
 * count or tag), each below 2^21. */
static gint64 key3(gint64 a, gint64 b, gint64 c) { return (((a + 1) << 42) | ((b + 1) << 21)) ^ c; }

/* Their hash: all 64 bits mixed (SplitMix64's finaliser, Steele, Lea & Flood 2014); GLib's
 * g_int64_hash keeps the low 32 bits only, where the group kind of key3 is not. */
static guint key_hash(gconstpointer p) {
  guint64 z = (guint64)*(const gint64 *)p;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (guint)(z ^ (z >> 31));
}

/* A rank's communicator of one kind: its summary, its members and the rank's place among them
 * (found once: a collective that waits for its members is asked for again and again). */
typedef struct {
  const coll_group *cg;
  int n, me;
  int *members;
} rank_group;

static void rank_group_free(gpointer p) {
  g_free(((rank_group *)p)->members);
  g_free(p);
}

/* The communicator of collective `op` of plan `p` on `rank`: its summary, members and the rank's
 * place; *slot the index of its call counter (its kind, or an explicit one). NULL (err set) when
 * the rank is not one of its members or its routes are unknown. */
static const rank_group *group_get(group_cache *gc, const plan_rank *p, const plan_op *op,
                                   int rank, int *slot, GError **err) {
  *slot = plan_op_slot(op);
  const gint64 rkey = key3(*slot, rank, 0);
  rank_group *rg = g_hash_table_lookup(gc->by_rank, &rkey);
  if (!rg) {
    const int n = plan_op_members(p, gc->c, op, rank, gc->members);
    int me = 0;
    while (me < n && gc->members[me] != rank) me++;
    if (me == n) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "rank %d: collective op %d: the rank is not a "
                  "member of its communicator", rank, (int)(op - p->ops));
      return NULL;
    }
    gint64 key = key3(*slot, gc->members[0], n);
    coll_group *cg = g_hash_table_lookup(gc->groups, &key);
    if (!cg) {
      cg = g_new(coll_group, 1);
      if (!analytic_group_init(cg, gc->pl, gc->members, n, err)) {
        g_free(cg);
        return NULL;
      }
      cg->nccl = gc->nccl;
      g_hash_table_insert(gc->groups, g_memdup2(&key, sizeof key), cg);
    }
    rg = g_new(rank_group, 1);
    *rg = (rank_group){cg, n, me, g_memdup2(gc->members, sizeof(int) * (size_t)n)};
    g_hash_table_insert(gc->by_rank, g_memdup2(&rkey, sizeof rkey), rg);
  }
  coll_group *cg = (coll_group *)rg->cg;
  const int *members = rg->members, n = rg->n;
  /* an all-to-all's steps each on their own routes: asked the first time the group runs one */
  if ((op->coll == COLL_ALLTOALL || op->peer_send_bytes) &&
      !analytic_group_pairwise(cg, gc->pl, members, n, err))
    return NULL;
  if (op->coll == COLL_BROADCAST && !analytic_group_chain(cg, gc->pl, members, n, err))
    return NULL;
  const char *algo = coll_resolve(op->coll, gc->c->coll, op->bytes, cg->P, cg->nodes, cg->nccl);
  if (strcmp(algo, "rhd") == 0 && !analytic_group_rhd(cg, gc->pl, members, n, err))
    return NULL;
  if (op->coll == COLL_ALLREDUCE && strcmp(algo, "tree") == 0 && cg->nodes == cg->P &&
      !analytic_group_tree(cg, gc->pl, members, n, err))
    return NULL;
  return rg;
}

static void group_free(gpointer p) {
  analytic_group_clear(p);
  g_free(p);
}

typedef struct {
  const plan_rank *plan;
  int rank;
  int *coll_seq;            /* collectives this rank has finished, per communicator kind, then
                               per explicit communicator */
  int registered;           /* op index whose arrival at a collective is recorded, or -1 */
  const int *order[PLAN_N_STREAMS]; /* each stream's ops, their indices in program order
                                       (the representative's: borrowed) */
  int count[PLAN_N_STREAMS];  /* how many */
  int pos[PLAN_N_STREAMS];    /* where the stream is in them: its next op */
  double free_at[PLAN_N_STREAMS];
  double host_t;            /* when the host has launched the compute ops so far (ktime_host_s) */
  const run_ctx *ctx;       /* the run (its kernel times: run_ctx_kernel_s) */
  double *event_t;          /* NAN until recorded */
  rec_rank *rec;            /* what the rank did (one iteration) */
} rank_run;

/* Arrival times of point-to-point messages, keyed (src, dst, tag), in sending order (MPI's:
 * messages of one pair and tag are received in the order they were sent), and of ranks at
 * collectives, keyed (group, first member, sequence). */
typedef struct {
  GArray *t;  /* arrival times, in sending order */
  guint head; /* the next one to receive */
} msg_fifo;

static void msg_fifo_free(gpointer p) {
  msg_fifo *f = p;
  g_array_free(f->t, TRUE);
  g_free(f);
}

typedef struct {
  GHashTable *arrival; /* -> msg_fifo* */
  GHashTable *link_free;
  GHashTable *colls;   /* -> coll_meet* */
  GHashTable *routes;  /* -> plat_flow_info* (p2p_times) */
} p2p_state;

typedef struct {
  int arrived, members, left; /* left: members that have gone on past it (then it is dropped) */
  double ready; /* latest arrival: when the collective can start */
} coll_meet;

/* A message of `bytes` from host `src` to host `dst`, alone on the network: its latency and its
 * time on the wire (s), with the platform's sharing and per-message factors as SimGrid applies
 * them. The route's flow is asked once per pair (cached in `routes`: key3(src, dst, 0)). */
static gboolean p2p_times(const plat *pl, GHashTable *routes, int src, int dst, double bytes,
                          double *lat, double *xfer, GError **err) {
  const gint64 key = key3(src, dst, 0);
  plat_flow_info *f = g_hash_table_lookup(routes, &key);
  if (!f) {
    plat_flow_info fi;
    if (!plat_flows(pl, &src, &dst, 1, &fi, err)) return FALSE;
    f = g_memdup2(&fi, sizeof fi);
    g_hash_table_insert(routes, g_memdup2(&key, sizeof key), f);
  }
  plat_msg_times(plat_lat_factor(pl), plat_bw_factor(pl), f->latency_s, f->rate_bps, bytes, lat,
                 xfer);
  return TRUE;
}

static msg_fifo *msg_queue(GHashTable *h, int src, int dst, int tag, gboolean create) {
  gint64 key = key3(src, dst, tag);
  msg_fifo *f = g_hash_table_lookup(h, &key);
  if (!f && create) {
    f = g_new0(msg_fifo, 1);
    f->t = g_array_new(FALSE, FALSE, sizeof(double));
    g_hash_table_insert(h, g_memdup2(&key, sizeof key), f);
  }
  return f;
}

static double *msg_slot(GHashTable *h, int src, int dst, int tag, gboolean create) {
  gint64 key = key3(src, dst, tag);
  double *v = g_hash_table_lookup(h, &key);
  if (!v && create) {
    v = g_new(double, 1);
    *v = NAN;
    g_hash_table_insert(h, g_memdup2(&key, sizeof key), v);
  }
  return v;
}

/* Next op of `stream` on rank `r`, or -1. */
static int next_op(const rank_run *r, int stream) {
  return r->pos[stream] < r->count[stream] ? r->order[stream][r->pos[stream]] : -1;
}

/* Runs every op that can run now on rank `rr`; returns how many ran. */
/* The iteration whose draws (--samples) the closed form's one iteration takes: the first steady
 * one of an executor running c->iters (rec_steady), so that with --iters 2 both draw alike. */
static int draw_iter(const cfg_run *c) { return c->iters > 1 ? 1 : 0; }

static int advance(rank_run *rr, const cfg_run *c, const ktime_source *ks, group_cache *gc,
                   p2p_state *ps, const plat *pl, GError **err) {
  int ran = 0;
  for (int s = 0; s < PLAN_N_STREAMS; s++) {
    for (;;) {
      int i = next_op(rr, s);
      if (i < 0) break;
      const plan_op *op = &rr->plan->ops[i];
      double start = rr->free_at[s];
      if (op->wait_event >= 0) {
        double t = rr->event_t[op->wait_event];
        if (isnan(t)) break;
        if (t > start) start = t;
      }
      if (op->kind == PLAN_SEND || op->kind == PLAN_COLL) /* --net-jitter, as exec/stream.c */
        start += run_ctx_comm_delay(rr->ctx, rr->rank, i, draw_iter(c));
      double end = start;
      const double arrived = start; /* when this rank reached the op */
      const int peer = plan_op_peer(rr->plan, op);
      if (op->kind == PLAN_KERNEL) {
        kdb_origin o;
        rr->host_t += ktime_host_s(ks, op); /* as exec/stream.c: not before the host launched it */
        if (rr->host_t > start) start = rr->host_t;
        end = start + run_ctx_kernel_s(rr->ctx, op, i, rr->rank, draw_iter(c), &o);
        rec_kernel(rr->rec, i, 0, start, end, o);
      } else if (op->kind == PLAN_COLL) {
        int slot;
        const rank_group *rg = group_get(gc, rr->plan, op, rr->rank, &slot, err);
        if (!rg) return -1;
        const coll_group *g = rg->cg;
        /* a collective starts when its last member arrives */
        const int n = rg->n, me = rg->me;
        gint64 key = key3(slot, rg->members[0], rr->coll_seq[slot]);
        coll_meet *cm = g_hash_table_lookup(ps->colls, &key);
        if (!cm) {
          cm = g_new0(coll_meet, 1);
          /* the members evaluated: a folded-away member arrives with the one standing for it */
          for (int k = 0; k < n; k++) cm->members += gc->eval[rg->members[k]];
          g_hash_table_insert(ps->colls, g_memdup2(&key, sizeof key), cm);
        }
        if (rr->registered != i) {
          rr->registered = i;
          cm->arrived++;
          if (start > cm->ready) cm->ready = start;
        }
        if (cm->arrived < cm->members) break;
        start = cm->ready;
        rr->coll_seq[slot]++;
        if (++cm->left == cm->members) g_hash_table_remove(ps->colls, &key); /* done with */
        const char *algo = coll_resolve(op->coll, c->coll, op->bytes, g->P, g->nodes, g->nccl);
        double d = op->peer_send_bytes
                       ? coll_cost_alltoallv_s(op->peer_send_bytes, op->peer_recv_bytes, me, g)
                       : coll_cost_s(op->coll, algo, op->bytes, g);
        if (op->peer_send_bytes) algo = "pairwise";
        end = start + d;
        /* from the rank's arrival: waiting for the other members is part of the collective, as
         * it is for a rank blocked in a simulated or real one */
        rec_coll(rr->rec, i, 0, arrived, end, algo,
                 coll_group_wire_bytes(op->coll, algo, op->bytes, g));
      } else if (op->kind == PLAN_SEND) {
        /* messages leaving one GPU share its link: they go one after another */
        double *lf = msg_slot(ps->link_free, rr->rank, -1, 0, TRUE);
        double go = isnan(*lf) || *lf < start ? start : *lf;
        double lat, xfer;
        if (!p2p_times(pl, ps->routes, rr->rank, peer, op->bytes, &lat, &xfer, err)) return -1;
        *lf = go + xfer;
        const double arrives = go + lat + xfer;
        g_array_append_val(msg_queue(ps->arrival, rr->rank, peer, op->tag, TRUE)->t, arrives);
        rec_send(rr->rec, i, 0, start);
      } else if (op->kind == PLAN_RECV) {
        int src = peer, dst = rr->rank;
        if (!gc->eval[peer]) { /* from a rank folded away round its ring: its counterpart */
          int dpc, tp_i, pp_i;
          plan_coords(c, peer, &dpc, &tp_i, &pp_i);
          const int back = dpc % c->cp / gc->cp_k * gc->cp_k;
          src = plan_cp_neighbour(c, peer, -back);
          dst = plan_cp_neighbour(c, rr->rank, -back);
        }
        msg_fifo *q = msg_queue(ps->arrival, src, dst, op->tag, FALSE);
        if (!q || q->head >= q->t->len) break; /* not sent yet */
        const double arr = g_array_index(q->t, double, q->head++);
        if (q->head == q->t->len) { /* drained: a later send of the key starts a new one */
          const gint64 key = key3(src, dst, op->tag);
          g_hash_table_remove(ps->arrival, &key);
        }
        double lat, bw_s;
        if (!p2p_times(pl, ps->routes, peer, rr->rank, op->bytes, &lat, &bw_s, err)) return -1;
        const double xfer = lat + bw_s;
        end = arr > start ? arr : start;
        rec_recv(rr->rec, i, 0, start, end - xfer, end); /* posted: when the transfer began */
      }
      rr->free_at[s] = end;
      if (op->record_event >= 0) rr->event_t[op->record_event] = end;
      rr->pos[s]++;
      ran++;
    }
  }
  return ran;
}

/* The op list of an equivalent rank's representative (plan_representative), built once and
 * viewed by every rank it stands for, with each stream's ops in program order. */
typedef struct {
  plan_rank *plan;            /* owned */
  int *order[PLAN_N_STREAMS]; /* owned */
  int count[PLAN_N_STREAMS];
} rep_plan;

static void rep_plan_free(gpointer p) {
  rep_plan *r = p;
  plan_rank_free(r->plan);
  for (int st = 0; st < PLAN_N_STREAMS; st++) g_free(r->order[st]);
  g_free(r);
}

/* Evaluates every rank together: point-to-point messages arrive when their sender posted them
 * plus the route's time; a collective starts when its last member arrives and then takes each
 * member its own alpha-beta time. Fills recs[0..P-1] (rec_init'ed here, one iteration) with
 * their plans in plans[]: views of their representatives' plans, which `reps` (rank ->
 * rep_plan*) holds and must outlive them. */
static gboolean eval_ranks(const run_ctx *x, const cfg_run *c, const double *layer_t,
                           const gboolean *eval, int cp_k, const int *ranks, int n,
                           plan_rank **plans, rec_rank *recs, GHashTable *reps, GError **err) {
  rank_run *rr = g_new0(rank_run, n);
  group_cache gc = {x->platform, c,
                    g_hash_table_new_full(key_hash, g_int64_equal, g_free, group_free),
                    g_hash_table_new_full(key_hash, g_int64_equal, g_free, rank_group_free),
                    g_new(int, c->gpus), eval, cp_k, &x->nccl};
  p2p_state ps = {g_hash_table_new_full(key_hash, g_int64_equal, g_free, msg_fifo_free),
                  g_hash_table_new_full(key_hash, g_int64_equal, g_free, g_free),
                  g_hash_table_new_full(key_hash, g_int64_equal, g_free, g_free),
                  g_hash_table_new_full(key_hash, g_int64_equal, g_free, g_free)};
  gboolean ok = TRUE;
  for (int k = 0; k < n && ok; k++) {
    /* equivalent ranks (data-parallel replicas, and tensor-parallel members where they run
     * alike) share one op list: an unfolded run of 8,192 GPUs builds 128, not 8,192 */
    const int rep = run_ctx_representative(x, c, ranks[k]);
    rep_plan *rp = g_hash_table_lookup(reps, GINT_TO_POINTER(rep));
    if (!rp) {
      plan_rank *q = run_ctx_plan(x, c, layer_t, rep, err);
      if (!q) {
        ok = FALSE;
        break;
      }
      rp = g_new0(rep_plan, 1);
      rp->plan = q;
      for (int st = 0; st < PLAN_N_STREAMS; st++) rp->order[st] = g_new(int, q->n_ops + 1);
      for (int i = 0; i < q->n_ops; i++) {
        const int st = q->ops[i].stream;
        rp->order[st][rp->count[st]++] = i;
      }
      g_hash_table_insert(reps, GINT_TO_POINTER(rep), rp);
    }
    plan_rank *p = plans[k] = plan_view(rp->plan, rep, ranks[k]);
    rec_init(&recs[k], ranks[k], p, 1);
    rr[k].plan = p;
    rr[k].rank = ranks[k];
    rr[k].ctx = x;
    rr[k].rec = &recs[k];
    rr[k].registered = -1;
    rr[k].event_t = g_new(double, p->n_events + 1);
    for (int e = 0; e <= p->n_events; e++) rr[k].event_t[e] = NAN;
    rr[k].coll_seq = g_new0(int, plan_n_slots(p));
    for (int st = 0; st < PLAN_N_STREAMS; st++) {
      rr[k].order[st] = rp->order[st];
      rr[k].count[st] = rp->count[st];
    }
  }
  for (gboolean busy = ok; busy && ok;) {
    int ran = 0;
    for (int k = 0; k < n; k++) {
      int r = advance(&rr[k], c, &x->kt, &gc, &ps, x->platform, err);
      if (r < 0) {
        ok = FALSE;
        break;
      }
      ran += r;
    }
    busy = FALSE;
    for (int k = 0; k < n && ok; k++)
      for (int s = 0; s < PLAN_N_STREAMS; s++) busy |= next_op(&rr[k], s) >= 0;
    if (ok && busy && !ran) {
      g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "closed form: the op lists of the %d ranks "
                  "evaluated wait for each other (planner bug)", n);
      ok = FALSE;
    }
  }
  for (int k = 0; k < n; k++) {
    if (ok) rec_finish(&recs[k], 0);
    g_free(rr[k].event_t);
    g_free(rr[k].coll_seq);
  }
  g_hash_table_destroy(ps.arrival);
  g_hash_table_destroy(ps.link_free);
  g_hash_table_destroy(ps.colls);
  g_hash_table_destroy(ps.routes);
  g_hash_table_destroy(gc.by_rank); /* before the groups its entries point at */
  g_hash_table_destroy(gc.groups);
  g_free(gc.members);
  g_free(rr);
  return ok;
}

gboolean analytic_check(const run_ctx *x, const cfg_run *c, GError **err) {
  if (c->gpus > plat_n_hosts(x->platform)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus %d: platform %s has only %d GPUs", c->gpus,
                c->platform, plat_n_hosts(x->platform));
    return FALSE;
  }
  if (c->coll && g_str_has_prefix(c->coll, "smpi") && c->mode != CFG_MODE_ANALYTIC &&
      !coll_family_known(c->coll)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--coll %s: SimGrid 3.32 has no collective "
                "algorithm of that name (e.g. smpi:lr, smpi:rab_rdb for allreduce; smpi:bruck for "
                "allgather; see SimGrid's smpi/<collective> settings)", c->coll);
    return FALSE;
  }
  /* SMPI's own algorithms have no closed form: a simulation's closed-form pre-run costs them
   * as rings, a closed-form run refuses them */
  if (c->coll && (!coll_family_known(c->coll) ||
                  (c->mode == CFG_MODE_ANALYTIC && g_str_has_prefix(c->coll, "smpi")))) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--coll %s: expected ring, tree, hier, rhd or pairwise (smpi:<name> only in "
                "--mode sim)", c->coll);
    return FALSE;
  }
  return TRUE;
}

/* Folding: when every data-parallel replica runs the same op list on routes of the same
 * classes, replica 0 stands for all of them. Same op lists: no expert parallelism (expert
 * shards differ). Same routes: the platform is a generated cluster whose route classes
 * (plat_route_class) between any two of a replica's ranks are those between the corresponding
 * ranks of replica 0. Under Megatron tensor parallelism (no MoE layer) the members of a tp group
 * run the same op list too (every split charges 1/tp of the layer), so a replica is then one
 * pipeline: the ranks of one (dp, tp) coordinate, and (0, 0) stands for all. With context
 * parallelism a replica holds its cp ranks (a replica's data-parallel coordinates are cp
 * consecutive ones), whose ring or all-to-alls stay inside it.
 *
 * The cp ranks of a sequence run one op list turned round the ring: rank i sends what rank
 * i + 1 receives, as rank i - 1 sends to rank i. When turning the ranks evaluated k places round
 * the ring (cp_i to cp_i + k, k the least divisor of cp that does it) keeps the route class of
 * every pair among them, cp_i < k stand for their ring (k = 1: a ring inside a node; k = 4: a
 * ring of 8 over two nodes): a message from a rank folded away arrives as its counterpart
 * arrives, the one turned back by a multiple of k onto an evaluated sender. */
typedef struct {
  int reps;    /* replicas: the ranks each evaluated one stands for (1: no folding) */
  gboolean tp; /* a replica is one tp coordinate of one dp replica */
  int cp_k;    /* cp_i < cp_k stand for their ring (cp: no folding round the ring) */
} folding;

/* Rank `a` of replica `k` (a replica's ranks in rank order: tp, then cp, then pp). */
static int replica_rank(const cfg_run *c, const folding *f, int k, int a) {
  const int tp = f->tp ? 1 : c->tp, dp_k = f->tp ? k / c->tp : k;
  const int tp_i = f->tp ? k % c->tp : a % tp;
  return plan_rank_of(c, dp_k * c->cp + a / tp % c->cp, tp_i, a / tp / c->cp);
}

/* The rank evaluated for `rank` under folding f. */
static int folded_rep(const cfg_run *c, const folding *f, int rank) {
  int dpc, tp_i, pp_i;
  plan_coords(c, rank, &dpc, &tp_i, &pp_i);
  int dp_i = dpc / c->cp, cp_i = dpc % c->cp;
  if (f->reps > 1) {
    dp_i = 0;
    if (f->tp) tp_i = 0;
  }
  cp_i %= f->cp_k;
  return plan_rank_of(c, dp_i * c->cp + cp_i, tp_i, pp_i);
}

/* Whether the ranks R[0..n-1] keep the class of every route among them when turned k places
 * round their cp ring. */
static gboolean ring_alike(const plat *pl, const cfg_run *c, const int *R, int n, int k) {
  int *T = g_new(int, n);
  for (int a = 0; a < n; a++) T[a] = plan_cp_neighbour(c, R[a], k);
  const gboolean same = plat_routes_alike(pl, R, T, n);
  g_free(T);
  return same;
}

/* Sets eval[] (the ranks evaluated) and returns the folding. */
static folding fold_replicas(const run_ctx *x, const cfg_run *c, gboolean *eval) {
  const int P = c->gpus;
  folding f = {1, FALSE, c->cp};
  for (int r = 0; r < P; r++) eval[r] = TRUE;
  if (c->no_folding || x->trace || c->ep > 1 || x->sample != 0) return f;
  folding g = {1, plan_tp_alike(x->model, c), c->cp};
  const int reps = g.tp ? c->dp * c->tp : c->dp, n = P / reps;
  gboolean same = reps >= 2;
  int *R0 = g_new(int, n), *Rk = g_new(int, n);
  for (int a = 0; a < n; a++) R0[a] = replica_rank(c, &g, 0, a);
  for (int k = 1; k < reps && same; k++) {
    for (int a = 0; a < n; a++) Rk[a] = replica_rank(c, &g, k, a);
    same = plat_routes_alike(x->platform, R0, Rk, n);
  }
  g_free(R0);
  g_free(Rk);
  g.reps = same ? reps : 1; /* g.tp counts only with replicas folded (folded_rep) */
  if (c->cp > 1) { /* the ring: among the ranks evaluated so far */
    int *R = g_new(int, P), m = 0;
    for (int r = 0; r < P; r++)
      if (folded_rep(c, &g, r) == r) R[m++] = r;
    for (int k = 1; k < c->cp; k++)
      if (c->cp % k == 0 && ring_alike(x->platform, c, R, m, k)) {
        g.cp_k = k;
        break;
      }
    g_free(R);
  }
  /* stragglers: a rank stands for others of its kind only */
  for (int r = 0; r < P && x->slow && (g.reps > 1 || g.cp_k < c->cp); r++)
    if (x->slow[r] != x->slow[folded_rep(c, &g, r)]) return f;
  for (int r = 0; r < P; r++) eval[r] = folded_rep(c, &g, r) == r;
  return g;
}

/* A folded result as the unfolded one reads: a row per rank (the row of the rank evaluated for
 * it), and the MoE token sums over every rank. */
static void unfold_result(const cfg_run *c, const folding *f, res_result *r) {
  if (f->reps == 1 && f->cp_k == c->cp) return;
  const int per = c->gpus / (int)r->rank_rows->len; /* ranks each evaluated one stands for */
  GArray *rows = g_array_sized_new(FALSE, FALSE, sizeof(res_rank), (guint)c->gpus);
  int *at = g_new(int, c->gpus); /* each evaluated rank's row */
  for (int rank = 0; rank < c->gpus; rank++) at[rank] = -1;
  for (guint i = 0; i < r->rank_rows->len; i++)
    at[g_array_index(r->rank_rows, res_rank, i).rank] = (int)i;
  for (int rank = 0; rank < c->gpus; rank++) {
    const int i = at[folded_rep(c, f, rank)];
    if (i < 0) continue;
    res_rank row = g_array_index(r->rank_rows, res_rank, i);
    row.rank = rank;
    g_array_append_val(rows, row);
  }
  g_free(at);
  g_array_free(r->rank_rows, TRUE);
  r->rank_rows = rows;
  r->moe_dropped_tokens *= per;
  r->moe_routed_tokens *= per;
  r->folded = per;
}

gboolean analytic_run(const run_ctx *x, const cfg_run *c, res_result *r, GError **err) {
  if (!analytic_check(x, c, err)) return FALSE;
  gint64 t0 = g_get_monotonic_time();
  const int P = c->gpus;
  double *layer_t = ktime_layer_times(&x->kt, c);
  gboolean *eval = g_new(gboolean, P);
  const folding fold = fold_replicas(x, c, eval);
  int *ranks = g_new(int, P), n = 0;
  for (int k = 0; k < P; k++)
    if (eval[k]) ranks[n++] = k;
  plan_rank **plans = g_new0(plan_rank *, n);
  rec_rank *recs = g_new0(rec_rank, n);
  GHashTable *reps = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, rep_plan_free);
  gboolean ok = eval_ranks(x, c, layer_t, eval, fold.cp_k, ranks, n, plans, recs, reps, err);
  if (ok && !x->trace) {
    /* Every strategy dlsim plans synchronises its ranks each iteration (gradient sums, the
     * pipeline's flush), so in steady state, as the simulation and real runs measure it, every
     * rank's iteration lasts as long as the last rank's. Rank by rank from a common start, a
     * pipeline's first stage would end last and the result would describe it; as a period, the
     * ranks tie and the result describes the busiest, as in the other modes. A trace need not
     * synchronise its ranks: each keeps its own. */
    double T = 0;
    for (int k = 0; k < n; k++) T = MAX(T, recs[k].iteration_time_s);
    for (int k = 0; k < n; k++) recs[k].iteration_time_s = T;
  }
  if (ok) {
    rec_result(recs, n, c, x->gpu_mem_bytes, r);
    unfold_result(c, &fold, r);
    r->gpu_model = x->gpu->name;
    res_kdb_set_source(&r->kdb, &x->kernels);
    /* the paper's equations cover data parallelism and its grid only */
    if (!x->trace && c->pp == 1 && c->ep == 1 &&
        !(c->tp > 1 && c->tp_style == CFG_TP_MEGATRON))
      ok = analytic_gholami_comm_s(x->model, c, x->platform, &r->gholami_comm_s, err);
  }
  for (int k = 0; k < n; k++) {
    if (recs[k].colls) rec_release(&recs[k]);
    plan_rank_free(plans[k]);
  }
  g_hash_table_destroy(reps); /* after the views */
  g_free(recs);
  g_free(plans);
  g_free(ranks);
  g_free(eval);
  g_free(layer_t);
  r->wall_s = (g_get_monotonic_time() - t0) / 1e6;
  return ok;
}

gboolean analytic_gholami_comm_s(const wl_model *m, const cfg_run *c, const plat *pl, double *out_s,
                           GError **err) {
  const int P = c->gpus, Pr = c->tp, Pc = c->dp;
  const double dt = gpu_precision_bytes(c->precision);
  const double B = (double)c->batch;
  int *mem = g_new(int, P);
  coll_group gr, gcol, gall;
  gboolean ok =
      analytic_group_init(&gr, pl, mem, plan_group_members(c, PLAN_GRP_TP, 0, mem), err) &&
      analytic_group_init(&gcol, pl, mem, plan_group_members(c, PLAN_GRP_DP, 0, mem), err) &&
      analytic_group_init(&gall, pl, mem, plan_group_members(c, PLAN_GRP_WORLD, 0, mem), err);
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
    if (Pr > 1)
      t += 3.0 * (gr.ring_alpha_s * lr + B * (double)(Pr - 1) / Pr * d / Pc / gr.ring_beta_bps);
    if (Pc > 1)
      t += 2.0 * (gcol.ring_alpha_s * lc + (double)(Pc - 1) / Pc * w / Pr / gcol.ring_beta_bps);
  }
  *out_s = t;
  return TRUE;
}
