/* real_exec.c — `dlsim-real run`: the real executor of the planner's op lists (see realrun.h).
 *
 * `dlsim-real run RESULT TRACE|- <dlsim run options>` under mpirun, one process per rank. Each
 * rank builds the same plan as the SMPI executor (pl_build with kt_layer_times, so pipeline
 * stages match), holds its layers' real tensors (real_model.h) and runs the op list on two
 * streams, as smpi_exec.c does:
 *   compute stream  a thread that runs the kernel ops in order (CPU twins);
 *   comm stream     the rank's main thread, the only one that calls MPI (MPI_THREAD_FUNNELED),
 *                   runs the communication ops in order: gradient buckets packed in the plan's
 *                   reverse layer order, all-reduced with coll_mpi.h's algorithm and MPI_SUM,
 *                   unpacked; activations and their gradients as MPI_Isend/MPI_Irecv.
 * An op that waits for an event sleeps on a condition variable until the op that records it is
 * done (no polling). Spans are host wall-clock seconds since a barrier before the first
 * iteration; every message carries its sender's post time after the payload, so a receive's
 * span starts when both sides were there (waiting for the sender is bubble, as in simulation).
 * Rank 0 gathers every rank's record, the losses and (--dump-weights) the weights of the first
 * data-parallel replica of each stage, then writes the exchange file, the trace and the weights.
 *
 * Tied weights across stages: the planner all-reduces the last stage's copy over dp (it is in no
 * bucket), then sums the pair over the "embed" group (first and last stage), as Megatron does.
 */
#include <mpi.h>

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll_mpi.h"
#include "config.h"
#include "dl_common.h"
#include "exchange.h"
#include "gpuspec.h"
#include "kernels.h"
#include "ktime.h"
#include "plan.h"
#include "platform.h"
#include "real_exec.h"
#include "real_model.h"
#include "real_shard.h"
#include "realrun.h"
#include "workload.h"

typedef struct {
  const pl_rank_plan *plan;
  rm_rank *model;
  int iters;
  xc_out *out;
  double origin_s;   /* monotonic seconds at the start barrier */
  GMutex lock;       /* guards `done` */
  GCond cond;
  guint8 *done;      /* iters × n_events: event recorded */
} rank_state;

static double now_s(const rank_state *g) { return g_get_monotonic_time() / 1e6 - g->origin_s; }

static void event_wait(rank_state *g, int iter, int ev) {
  if (ev < 0) return;
  g_mutex_lock(&g->lock);
  while (!g->done[(size_t)iter * g->plan->n_events + ev]) g_cond_wait(&g->cond, &g->lock);
  g_mutex_unlock(&g->lock);
}

static void event_record(rank_state *g, int iter, int ev) {
  if (ev < 0) return;
  g_mutex_lock(&g->lock);
  g->done[(size_t)iter * g->plan->n_events + ev] = 1;
  g_cond_broadcast(&g->cond);
  g_mutex_unlock(&g->lock);
}

/* The compute stream. */
static gpointer compute_thread(gpointer data) {
  rank_state *g = data;
  for (int it = 0; it < g->iters; it++) {
    /* making the synthetic batch (and zeroing gradients) is host work the op lists do not
     * describe, as a data loader's would be: it is timed and left out of the iteration */
    double h0 = now_s(g);
    rm_iter_begin(g->model, it);
    if (it >= (g->iters > 1 ? 1 : 0)) g->out->host_s += now_s(g) - h0;
    for (int i = 0; i < g->plan->n_ops; i++) {
      const pl_op *op = &g->plan->ops[i];
      if (op->stream != PL_STREAM_COMPUTE) continue;
      event_wait(g, it, op->wait_event);
      double t0 = now_s(g);
      rm_kernel(g->model, op, it);
      xc_add_span(g->out, PL_STREAM_COMPUTE, t0, now_s(g), i, it);
      event_record(g, it, op->record_event);
    }
  }
  return NULL;
}

typedef struct {
  MPI_Comm comm[PL_N_GROUPS];
  coll_topo topo[PL_N_GROUPS];
  int size[PL_N_GROUPS];
  float *send, *recv; /* bucket staging, `cap` floats each */
  size_t cap;
} comms;

/* All-reduces `n` floats of `in` into `out` (they may be the same buffer) over group `g` with
 * the run's algorithm and `op`; returns the algorithm's name. */
static const char *allreduce_op(comms *k, const cfg_run *c, pl_group g, const float *in, float *out,
                                size_t n, MPI_Op op, double *wire) {
  const size_t bytes = n * sizeof(float);
  const char *algo = coll_resolve(COLL_ALLREDUCE, c->coll, (double)bytes, k->size[g], 1);
  const coll_algo *a = coll_find(COLL_ALLREDUCE, algo);
  *wire = coll_wire_bytes(COLL_ALLREDUCE, algo, (double)bytes, k->size[g], &k->topo[g]);
  if (!a || k->size[g] < 2 || n == 0) {
    if (out != in) memcpy(out, in, bytes);
    return a ? a->name : algo;
  }
  if (n > k->cap) {
    g_free(k->send);
    g_free(k->recv);
    k->cap = n;
    k->send = g_new(float, n);
    k->recv = g_new(float, n);
  }
  memcpy(k->send, in, bytes);
  a->fn(k->send, k->recv, bytes, k->comm[g], &k->topo[g], op);
  memcpy(out, k->recv, bytes);
  return a->name;
}

/* Sum-all-reduces `n` floats of `buf` in place over group `g`. */
static const char *allreduce(comms *k, const cfg_run *c, pl_group g, float *buf, size_t n,
                             double *wire) {
  return allreduce_op(k, c, g, buf, buf, n, MPI_SUM, wire);
}

/* Runs a tensor- or expert-parallel collective on the buffers real_model.c names. */
static const char *run_xfer(comms *k, const cfg_run *c, rm_rank *rm, const pl_op *op, int mb,
                            double *wire) {
  rm_xfer x;
  const char *name = "none";
  const pl_group g = op->group;
  *wire = 0;
  if (!rm_coll_begin(rm, op, mb, &x)) return name;
  if (x.how == RM_X_COUNTS) { /* MoE: the group's routing counts before the tokens */
    MPI_Allgather(x.isend, (int)x.n, MPI_INT, x.irecv, (int)x.n, MPI_INT, k->comm[g]);
    *wire += (double)x.n * sizeof(int) * (k->size[g] - 1);
    rm_coll_begin(rm, op, mb, &x);
  }
  switch (x.how) {
  case RM_X_ALLREDUCE_SUM:
  case RM_X_ALLREDUCE_MAX: {
    double w = 0;
    name = allreduce_op(k, c, g, x.send, x.recv, x.n, x.how == RM_X_ALLREDUCE_MAX ? MPI_MAX : MPI_SUM,
                        &w);
    *wire += w;
    break;
  }
  case RM_X_ALLGATHER: {
    const size_t bytes = x.n * sizeof(float) * (size_t)k->size[g];
    const char *algo = coll_resolve(COLL_ALLGATHER, c->coll, (double)bytes, k->size[g], 1);
    const coll_algo *a = coll_find(COLL_ALLGATHER, algo);
    *wire += coll_wire_bytes(COLL_ALLGATHER, algo, (double)bytes, k->size[g], &k->topo[g]);
    if (k->size[g] < 2 || !a) memcpy(x.recv, x.send, x.n * sizeof(float));
    else a->fn(x.send, x.recv, bytes, k->comm[g], &k->topo[g], MPI_SUM);
    name = a ? a->name : algo;
    break;
  }
  case RM_X_ALLTOALLV: {
    int me = 0;
    MPI_Comm_rank(k->comm[g], &me);
    coll_alltoallv_pairwise(x.send, x.send_n, x.recv, x.recv_n, k->comm[g]);
    size_t soff = 0, roff = 0; /* the pairwise exchange leaves out the rank's own block */
    for (int j = 0; j < me; j++) soff += (size_t)x.send_n[j], roff += (size_t)x.recv_n[j];
    memcpy((char *)x.recv + roff, (const char *)x.send + soff, (size_t)x.send_n[me]);
    for (int j = 0; j < k->size[g]; j++)
      if (j != me) *wire += x.send_n[j];
    name = "pairwise";
    break;
  }
  case RM_X_COUNTS: break;
  }
  rm_coll_end(rm, op, mb);
  return name;
}

/* Runs PL_COLL op `op` on real gradients. */
static const char *run_coll(comms *k, const wl_model *m, const cfg_run *c, rm_rank *rm,
                            const pl_op *op, double *wire) {
  *wire = 0;
  if (op->purpose == PL_WHY_GRAD) { /* the bucket's layers, packed in the planner's order */
    int *layers = g_new(int, op->bucket.end_layer - op->bucket.first_layer + 1);
    const int nl = pl_bucket_layers(m, op, layers);
    size_t n = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      rm_layer_grad(rm, layers[j], RM_GRAD_DENSE, &len);
      n += (size_t)len;
    }
    float *packed = g_new(float, n + 1);
    size_t at = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      const float *gr = rm_layer_grad(rm, layers[j], RM_GRAD_DENSE, &len);
      memcpy(packed + at, gr, sizeof(float) * (size_t)len);
      at += (size_t)len;
    }
    const char *name = allreduce(k, c, op->group, packed, n, wire);
    at = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      float *gr = rm_layer_grad(rm, layers[j], RM_GRAD_DENSE, &len);
      memcpy(gr, packed + at, sizeof(float) * (size_t)len);
      at += (size_t)len;
    }
    g_free(packed);
    g_free(layers);
    return name;
  }
  if (op->purpose == PL_WHY_TIED) {
    const int i = op->layer, t = m->layers[i].tied_to;
    int64_t n = 0;
    float *gr = rm_layer_grad(rm, i, RM_GRAD_ALL, &n);
    if (!gr) gr = rm_layer_grad(rm, t, RM_GRAD_ALL, &n);
    double w = 0;
    const char *name = allreduce(k, c, op->group, gr, gr ? (size_t)n : 0, &w);
    *wire += w;
    return name;
  }
  if (op->purpose == PL_WHY_EXPERT_GRAD) { /* among the replicas of the same experts */
    int64_t n = 0;
    float *gr = rm_layer_grad(rm, op->layer, RM_GRAD_EXPERTS, &n);
    return allreduce(k, c, op->group, gr, gr ? (size_t)n : 0, wire);
  }
  return run_xfer(k, c, rm, op, op->microbatch, wire);
}

static gboolean make_comms(comms *k, const cfg_run *c, int rank) {
  const int P = c->gpus;
  int *members = g_new(int, P);
  for (int g = 0; g < PL_N_GROUPS; g++) {
    k->comm[g] = MPI_COMM_NULL;
    int n = pl_group_members(c, (pl_group)g, rank, members), me = -1;
    for (int i = 0; i < n; i++)
      if (members[i] == rank) me = i;
    if (g == PL_GRP_WORLD) {
      k->comm[g] = MPI_COMM_WORLD;
    } else { /* every rank takes part in every split */
      MPI_Comm_split(MPI_COMM_WORLD, me >= 0 && n > 1 ? members[0] : MPI_UNDEFINED, rank,
                     &k->comm[g]);
    }
    k->size[g] = me >= 0 ? n : 0;
    coll_topo_init(&k->topo[g], me < 0 ? 0 : me, n, n); /* all ranks on this machine */
  }
  g_free(members);
  return TRUE;
}

/* Rank 0 writes the weights in the serial layout: for each layer, the first data-parallel
 * replica of its stage sends its slice from every tp rank (and, for experts, from each of the
 * ep ranks that hold them); rank 0 places each value by rs_param_index. */
static char *dump_weights(const wl_model *m, const cfg_run *c, const double *layer_t,
                          rm_rank *rm, int rank) {
  int *first = g_new(int, c->pp + 1);
  GError *e = NULL;
  char *err = NULL;
  pl_partition(m, c, layer_t, first, &e); /* succeeded in pl_build already */
  g_clear_error(&e);
  GString *head = g_string_new("{\"format\": \"dlsim-weights-1\", \"layers\": [");
  GByteArray *data = g_byte_array_new();
  gboolean sep = FALSE;
  rs_layer *rs = g_new(rs_layer, m->n_layers);
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->params <= 0) continue;
    int stage = 0;
    while (stage + 1 < c->pp && i >= first[stage + 1]) stage++;
    const int eps = l->kind == WL_MOE ? c->ep : 1;
    float *w = rank == 0 ? g_new0(float, l->params) : NULL;
    for (int t = 0; t < c->tp; t++)
      for (int x = 0; x < eps; x++) {
        const int owner = pl_rank_of(c, x, t, stage);
        int64_t n = 0;
        if (rank == owner && rank != 0) {
          const float *mine = rm_layer_params(rm, i, &n);
          MPI_Send(mine, (int)n, MPI_FLOAT, 0, i, MPI_COMM_WORLD);
        } else if (rank == 0) {
          rs_plan(m, c, t, x, rs, NULL); /* succeeded on the owner */
          n = rs_param_index(l, &rs[i], NULL);
          int64_t *idx = g_new(int64_t, n + 1);
          float *got = g_new(float, n + 1);
          rs_param_index(l, &rs[i], idx);
          if (owner == 0) memcpy(got, rm_layer_params(rm, i, &n), sizeof(float) * (size_t)n);
          else MPI_Recv(got, (int)n, MPI_FLOAT, owner, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          for (int64_t j = 0; j < n; j++) w[idx[j]] = got[j];
          g_free(idx);
          g_free(got);
        }
      }
    if (rank == 0) {
      g_byte_array_append(data, (const guint8 *)w, (guint)(sizeof(float) * (size_t)l->params));
      char *name = g_strescape(l->name, NULL);
      g_string_append_printf(head, "%s{\"name\": \"%s\", \"params\": %" G_GINT64_FORMAT "}",
                             sep ? ", " : "", name, l->params);
      g_free(name);
      sep = TRUE;
    }
    g_free(w);
  }
  if (rank == 0) {
    g_string_append(head, "]}\n");
    g_string_append_len(head, (const char *)data->data, data->len);
    if (!dl_write_file_atomic(c->dump_weights, head->str, head->len, &e)) {
      err = g_strdup(e->message);
      g_clear_error(&e);
    }
  }
  g_free(rs);
  g_string_free(head, TRUE);
  g_byte_array_free(data, TRUE);
  g_free(first);
  return err;
}

/* Loads and checks everything a rank needs; NULL message on success. */
static char *setup(int argc, char **argv, cfg_run *c, wl_model **m, double **layer_t) {
  GError *e = NULL;
  plat *pl = NULL;
  kdb *db = NULL;
  char *msg = NULL;
  cfg_init(c);
  if (!cfg_parse_args(c, &argc, &argv, &e) || !(*m = wl_load(c->workload, &e)) ||
      !cfg_resolve(c, (long)(*m)->default_batch, &e) || !rr_check(*m, c, &e) ||
      !(pl = plat_load(c->platform, &e)))
    goto out;
  const gs_spec *gpu = gs_find(plat_host_at(pl, 0)->gpu_model);
  if (!gpu) {
    msg = g_strdup_printf("%s: gpu_model '%s' has no spec sheet", c->platform,
                          plat_host_at(pl, 0)->gpu_model);
    goto out;
  }
  if (!kt_open_db(c->kernels, gpu->name, &db, &e)) goto out;
  /* the same stage balance as the SMPI executor */
  kt_source kt = {gpu, c->precision, *m, db};
  *layer_t = kt_layer_times(&kt, c);
out:
  if (e) msg = g_strdup(e->message);
  g_clear_error(&e);
  kdb_free(db);
  plat_free(pl);
  return msg;
}

int real_exec_main(int argc, char **argv) {
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "dlsim-real run: expected RESULT TRACE|- then run options\n");
    return 2;
  }
  const char *result_path = argv[1], *trace_path = argv[2];
  char **args = g_new0(char *, argc - 1);
  args[0] = argv[0];
  for (int i = 3; i < argc; i++) args[i - 2] = argv[i];
  cfg_run cfg;
  wl_model *m = NULL;
  double *layer_t = NULL;
  char *msg = setup(argc - 2, args, &cfg, &m, &layer_t);
  g_free(args);
  const cfg_run *c = &cfg;
  pl_rank_plan *plan = NULL, **plans = NULL;
  rm_rank *rm = NULL;
  GError *e = NULL;
  int status = 2;
  if (!msg && P != c->gpus) msg = g_strdup_printf("%d ranks for --gpus %d", P, c->gpus);
  if (!msg && !(plan = pl_build(m, c, layer_t, rank, &e))) msg = g_strdup(e->message);
  if (!msg && !(rm = rm_new(m, c, plan, rank, &e))) msg = g_strdup(e->message);
  g_clear_error(&e);
  /* every rank reaches the same verdict from the same options, except for local failures */
  int bad = msg != NULL, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (msg) fprintf(stderr, "dlsim-real: rank %d: %s\n", rank, msg);
    goto out;
  }

  comms k;
  memset(&k, 0, sizeof k);
  make_comms(&k, c, rank);
  xc_out o;
  xc_out_init(&o, plan);
  rank_state gs;
  memset(&gs, 0, sizeof gs);
  gs.plan = plan, gs.model = rm, gs.iters = c->iters, gs.out = &o;
  g_mutex_init(&gs.lock);
  g_cond_init(&gs.cond);
  gs.done = g_new0(guint8, (size_t)c->iters * plan->n_events + 1);
  int n_recv = 0, n_send = 0;
  for (int i = 0; i < plan->n_ops; i++) {
    n_recv += plan->ops[i].kind == PL_RECV;
    n_send += plan->ops[i].kind == PL_SEND;
  }
  MPI_Request *rreq = g_new(MPI_Request, n_recv + 1), *sreq = g_new(MPI_Request, n_send + 1);

  MPI_Barrier(MPI_COMM_WORLD);
  gs.origin_s = g_get_monotonic_time() / 1e6;
  GThread *th = g_thread_new("compute", compute_thread, &gs);
  const int it0 = c->iters > 1 ? 1 : 0;
  for (int it = 0; it < c->iters; it++) {
    /* every receive of an iteration is posted when it starts, as in simulation */
    for (int i = 0, q = 0; i < plan->n_ops; i++) {
      const pl_op *op = &plan->ops[i];
      if (op->kind != PL_RECV) continue;
      int64_t n = 0;
      float *buf = op->purpose == PL_WHY_HALO ? rm_halo_buf(rm, op, &n)
                   : op->tag & 1              ? rm_grad_in(rm, op->microbatch, &n)
                                              : rm_act_in(rm, op->microbatch, &n);
      MPI_Irecv(buf, (int)n + RM_P2P_TRAILER_FLOATS, MPI_FLOAT, op->peer, op->tag, MPI_COMM_WORLD,
                &rreq[q++]);
    }
    int ri = 0, si = 0;
    for (int i = 0; i < plan->n_ops; i++) {
      const pl_op *op = &plan->ops[i];
      if (op->stream != PL_STREAM_COMM) continue;
      event_wait(&gs, it, op->wait_event);
      double t0 = now_s(&gs);
      if (op->kind == PL_SEND) {
        int64_t n = 0;
        float *buf = op->purpose == PL_WHY_HALO ? rm_halo_buf(rm, op, &n)
                     : op->tag & 1              ? rm_grad_out(rm, op->microbatch, &n)
                                                : rm_act_out(rm, op->microbatch, &n);
        double posted = t0 + gs.origin_s; /* the receiver's clock is the same machine's */
        memcpy(buf + n, &posted, sizeof posted);
        MPI_Isend(buf, (int)n + RM_P2P_TRAILER_FLOATS, MPI_FLOAT, op->peer, op->tag,
                  MPI_COMM_WORLD, &sreq[si++]);
        if (it >= it0) xc_add_coll(&o, op, "p2p", 0, op->bytes);
        continue;
      }
      if (op->kind == PL_RECV) {
        MPI_Wait(&rreq[ri++], MPI_STATUS_IGNORE);
        double t1 = now_s(&gs), posted;
        int64_t n = 0;
        float *buf = op->purpose == PL_WHY_HALO ? rm_halo_buf(rm, op, &n)
                     : op->tag & 1              ? rm_grad_in(rm, op->microbatch, &n)
                                                : rm_act_in(rm, op->microbatch, &n);
        memcpy(&posted, buf + n, sizeof posted);
        posted -= gs.origin_s;
        /* the transfer is communication; waiting for the sender to get there is bubble */
        double from = posted > t0 ? MIN(posted, t1) : t0;
        if (t1 > from) xc_add_span(&o, PL_STREAM_COMM, from, t1, i, it);
        if (it >= it0) xc_add_coll(&o, op, "p2p", t1 > from ? t1 - from : 0, 0);
      } else if (op->kind == PL_COLL) {
        double wire = 0;
        const char *algo = run_coll(&k, m, c, rm, op, &wire);
        double t1 = now_s(&gs);
        xc_add_span(&o, PL_STREAM_COMM, t0, t1, i, it);
        if (it >= it0) xc_add_coll(&o, op, algo, t1 - t0, wire);
      }
      event_record(&gs, it, op->record_event);
    }
    MPI_Waitall(si, sreq, MPI_STATUSES_IGNORE);
  }
  g_thread_join(th);
  xc_out_finish(&o, c->iters, 0);

  /* rank 0 gathers the records, the losses and the weights */
  double *loss = g_new0(double, c->iters), *loss_all = g_new0(double, c->iters);
  for (int it = 0; it < c->iters; it++) loss[it] = rm_loss_sum(rm, it);
  MPI_Reduce(loss, loss_all, c->iters, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  for (int it = 0; it < c->iters; it++) loss_all[it] /= (double)c->dp * c->microbatches;
  GByteArray *mine = g_byte_array_new();
  xc_out_pack(&o, mine);
  int len = (int)mine->len, *lens = NULL, *offs = NULL;
  guint8 *all = NULL;
  if (rank == 0) lens = g_new(int, P), offs = g_new(int, P);
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    int tot = 0;
    for (int r = 0; r < P; r++) offs[r] = tot, tot += lens[r];
    all = g_malloc(tot + 1);
  }
  MPI_Gatherv(mine->data, len, MPI_BYTE, all, lens, offs, MPI_BYTE, 0, MPI_COMM_WORLD);
  status = 0;
  char *werr = NULL;
  if (c->dump_weights) werr = dump_weights(m, c, layer_t, rm, rank);
  if (rank == 0) {
    plans = g_new0(pl_rank_plan *, P);
    xc_out *outs = g_new0(xc_out, P);
    for (int r = 0; r < P && !werr; r++) {
      plans[r] = r == 0 ? NULL : pl_build(m, c, layer_t, r, NULL);
      xc_out_init(&outs[r], r == 0 ? plan : plans[r]);
      if (!outs[r].plan || !xc_out_unpack(&outs[r], all + offs[r], (gsize)lens[r]))
        werr = g_strdup_printf("rank %d: unreadable measurements", r);
    }
    if (!werr) werr = xc_write(outs, P, c->iters, loss_all, c->iters, result_path, trace_path);
    for (int r = 0; r < P; r++) {
      if (outs[r].colls) xc_out_release(&outs[r]);
      pl_rank_plan_free(plans[r]);
    }
    g_free(outs);
  }
  if (werr) {
    fprintf(stderr, "dlsim-real: %s\n", werr);
    g_free(werr);
    status = 1;
  }
  g_free(all);
  g_free(lens);
  g_free(offs);
  g_byte_array_free(mine, TRUE);
  g_free(loss);
  g_free(loss_all);
  g_free(rreq);
  g_free(sreq);
  g_free(gs.done);
  g_mutex_clear(&gs.lock);
  g_cond_clear(&gs.cond);
  xc_out_release(&o);
  for (int g = 1; g < PL_N_GROUPS; g++)
    if (k.comm[g] != MPI_COMM_NULL) MPI_Comm_free(&k.comm[g]);
  g_free(k.send);
  g_free(k.recv);
out:
  g_free(plans);
  rm_free(rm);
  pl_rank_plan_free(plan);
  g_free(layer_t);
  g_free(msg);
  wl_free(m);
  cfg_release(&cfg);
  return status;
}
