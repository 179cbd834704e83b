/* run.c — `dlsim-real run REQUEST RESULT`: the real executor of the planner's op lists.
 *
 * Run by the driver (exec.c) under mpirun, one process per rank. Each rank opens the run from the
 * driver's request (context.h: the same plan as the SMPI executor, with the same stage balance),
 * holds its layers' real tensors (real_model.h) and runs the op list on the two streams of
 * stream.h:
 *   compute stream  a thread that runs the kernel ops in order (CPU twins);
 *   comm stream     the rank's main thread, the only one that calls MPI (MPI_THREAD_FUNNELED),
 *                   runs the communication ops in order: gradient buckets packed in the plan's
 *                   order, all-reduced with coll_mpi.h's algorithm and MPI_SUM, unpacked (ZeRO
 *                   and FSDP: reduce-scattered into the rank's shard, and the parameters
 *                   gathered); the tensor- and sequence-parallel collectives of the layers'
 *                   buffers (xfer.c); activations and their gradients as MPI_Isend/MPI_Irecv,
 *                   to and from the neighbours of each of the rank's model chunks.
 * An op that waits for an event sleeps on a condition variable until the op that records it is
 * done (no polling). Times are host wall-clock seconds since a barrier before the first
 * iteration; every message carries its sender's post time after the payload, so a receive knows
 * when both sides were there. Rank 0 gathers every rank's record, the losses and
 * (--dump-weights) the weights of the first data-parallel replica of each stage, then writes the
 * result, the trace and the weights.
 *
 * Tied weights across stages: the planner all-reduces the last stage's copy over dp (it is in no
 * bucket), then sums the pair over the "embed" group (first and last stage), as Megatron does.
 * MPI calls are not checked one by one: Open MPI's default error handler aborts on failure.
 */
#include <mpi.h>

#include <cjson/cJSON.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/mpi_groups.h"
#include "coll/coll_mpi.h"
#include "exec/context.h"
#include "core/dl_common.h"
#include "exec/exec.h"
#include "kernels.h"
#include "plan/plan.h"
#include "exec/real/run.h"
#include "exec/real/model.h"
#include "exec/real/shard.h"
#include "out/record.h"
#include "exec/stream.h"

typedef struct {
  coll_groups g;      /* communicators of the plan's groups */
  float *send, *recv; /* bucket staging, `cap` floats each */
  size_t cap;
  const nccl_env *nccl; /* the driver's: the simulation's choice of algorithm, no timing model */
  /* sharded data parallelism: the group whose members hold one shard each (-1: none yet); per
   * first layer of a bucket, whether the plan all-reduces its reduce-scattered shard over the
   * replicas (HYBRID_SHARD); that shard while it waits for that all-reduce */
  int shard_group;
  gboolean *repl_after;
  float *pend;
  int pend_first;
} comms;

/* Runs collective `cop` on host buffers over group `g` with the run's algorithm (conventions of
 * coll.h: `bytes` the whole buffer; `send` and `recv` apart); a group of one copies. Returns the
 * algorithm's name. */
static const char *host_coll(comms *k, const cfg_run *c, coll_op cop, plan_group g,
                             const float *send, float *recv, size_t bytes, MPI_Op op,
                             double *wire) {
  const int P = k->g.size[g];
  const char *algo = coll_resolve(cop, c->coll, (double)bytes, P, k->g.nodes[g], k->nccl);
  const coll_algo *a = coll_find(cop, algo);
  *wire += coll_wire_bytes(cop, algo, (double)bytes, P, &k->g.topo[g]);
  if (P < 2 || !a)
    memcpy(recv, send, cop == COLL_REDUCESCATTER ? bytes / (size_t)P : bytes);
  else
    a->fn(send, recv, bytes, k->g.comm[g], &k->g.topo[g], op);
  return a ? a->name : algo;
}

/* All-reduces `n` floats of `in` into `out` (they may be the same buffer; memory of backend `dev`,
 * moved through host staging) over group `g` with the run's algorithm and `op`; returns the
 * algorithm's name. */
static const char *allreduce_op(comms *k, const cfg_run *c, plan_group g, const kn_backend *dev,
                                const float *in, float *out, size_t n, MPI_Op op, double *wire) {
  const size_t bytes = n * sizeof(float);
  const char *algo = coll_resolve(COLL_ALLREDUCE, c->coll, (double)bytes, k->g.size[g],
                                  k->g.nodes[g], k->nccl);
  const coll_algo *a = coll_find(COLL_ALLREDUCE, algo);
  *wire = coll_wire_bytes(COLL_ALLREDUCE, algo, (double)bytes, k->g.size[g], &k->g.topo[g]);
  if (!a || k->g.size[g] < 2 || n == 0) {
    dev->copy(out, in, bytes);
    return a ? a->name : algo;
  }
  if (n > k->cap) {
    g_free(k->send);
    g_free(k->recv);
    k->cap = n;
    k->send = g_new(float, n);
    k->recv = g_new(float, n);
  }
  dev->download(k->send, in, bytes);
  a->fn(k->send, k->recv, bytes, k->g.comm[g], &k->g.topo[g], op);
  dev->upload(out, k->recv, bytes);
  return a->name;
}

/* Sum-all-reduces `n` floats of `buf` (memory of backend `dev`) in place over group `g`. */
static const char *allreduce(comms *k, const cfg_run *c, plan_group g, const kn_backend *dev,
                             float *buf, size_t n, double *wire) {
  return allreduce_op(k, c, g, dev, buf, buf, n, MPI_SUM, wire);
}

/* Runs a tensor- or expert-parallel collective on the buffers real_model.c names. */
static const char *run_xfer(comms *k, const cfg_run *c, real_model_rank *rm, const plan_op *op,
                            int mb, double *wire) {
  real_model_xfer x;
  const char *name = "none";
  const plan_group g = op->group;
  *wire = 0;
  if (!real_model_coll_begin(rm, op, mb, &x)) return name;
  if (x.how == REAL_MODEL_X_COUNTS) { /* MoE: the group's routing counts before the tokens */
    MPI_Allgather(x.isend, (int)x.n, MPI_INT, x.irecv, (int)x.n, MPI_INT, k->g.comm[g]);
    *wire += (double)x.n * sizeof(int) * (k->g.size[g] - 1);
    real_model_coll_begin(rm, op, mb, &x);
  }
  switch (x.how) {
  case REAL_MODEL_X_ALLREDUCE_SUM:
  case REAL_MODEL_X_ALLREDUCE_MAX: {
    double w = 0;
    name = allreduce_op(k, c, g, real_model_backend(rm), x.send, x.recv, x.n,
                        x.how == REAL_MODEL_X_ALLREDUCE_MAX ? MPI_MAX : MPI_SUM, &w);
    *wire += w;
    break;
  }
  case REAL_MODEL_X_ALLGATHER:
  case REAL_MODEL_X_REDUCESCATTER: {
    /* through host copies where the tensors are a device's (sequence parallelism) */
    const size_t P = (size_t)k->g.size[g], whole = x.n * P;
    const gboolean ag = x.how == REAL_MODEL_X_ALLGATHER;
    const kn_backend *dev = real_model_backend(rm);
    const gboolean host = real_model_on_host(rm);
    const size_t sn = ag ? x.n : whole, rn = ag ? whole : x.n;
    float *hs = host ? (float *)x.send : g_new(float, sn + 1);
    float *hr = host ? x.recv : g_new(float, rn + 1);
    if (!host) dev->download(hs, x.send, sizeof(float) * sn);
    name = host_coll(k, c, ag ? COLL_ALLGATHER : COLL_REDUCESCATTER, g, hs, hr,
                     whole * sizeof(float), MPI_SUM, wire);
    if (!host) {
      dev->upload(x.recv, hr, sizeof(float) * rn);
      g_free(hs);
      g_free(hr);
    }
    break;
  }
  case REAL_MODEL_X_ALLTOALLV: {
    int me = 0;
    MPI_Comm_rank(k->g.comm[g], &me);
    /* through host copies where the tensors are a device's (context parallelism's heads) */
    const kn_backend *dev = real_model_backend(rm);
    const gboolean host = real_model_on_host(rm);
    size_t sb = 0, rb = 0;
    for (int j = 0; j < k->g.size[g]; j++) sb += (size_t)x.send_n[j], rb += (size_t)x.recv_n[j];
    char *hs = host ? (char *)x.send : g_malloc(sb + 1), *hr = host ? (char *)x.recv
                                                                     : g_malloc(rb + 1);
    if (!host) dev->download(hs, x.send, sb);
    coll_alltoallv_pairwise(hs, x.send_n, hr, x.recv_n, k->g.comm[g]);
    size_t soff = 0, roff = 0; /* the pairwise exchange leaves out the rank's own block */
    for (int j = 0; j < me; j++) soff += (size_t)x.send_n[j], roff += (size_t)x.recv_n[j];
    memcpy(hr + roff, hs + soff, (size_t)x.send_n[me]);
    if (!host) {
      dev->upload(x.recv, hr, rb);
      g_free(hs);
      g_free(hr);
    }
    for (int j = 0; j < k->g.size[g]; j++)
      if (j != me) *wire += x.send_n[j];
    name = "pairwise";
    break;
  }
  case REAL_MODEL_X_COUNTS: break;
  }
  real_model_coll_end(rm, op, mb);
  return name;
}

/* ---- sharded data parallelism (--zero, --fsdp) ---------------------------------------------- */

/* A bucket's (or a unit's) layers packed in the planner's order: layer[j]'s n[j] floats at off[j]
 * of `total`; their gradients of micro-batch mb, or (mb < -1) their parameters. */
typedef struct {
  int count;
  int *layer;
  int64_t *off, *n;
  float **buf; /* backend memory */
  int64_t total;
} packing;

static void packing_init(packing *p, const wl_model *m, real_model_rank *rm, const plan_op *op,
                         int mb) {
  const int max = op->bucket.end_layer - op->bucket.first_layer + 1;
  p->layer = g_new(int, max);
  p->off = g_new(int64_t, max);
  p->n = g_new(int64_t, max);
  p->buf = g_new(float *, max);
  p->count = 0;
  p->total = 0;
  int *layers = g_new(int, max);
  const int nl = plan_bucket_layers(m, op, layers);
  for (int j = 0; j < nl; j++) {
    int64_t n = 0;
    float *b = mb < -1 ? real_model_layer_weights(rm, layers[j], &n)
                       : real_model_layer_grad_mb(rm, layers[j], mb, &n);
    if (!b || n <= 0) continue;
    const int q = p->count++;
    p->layer[q] = layers[j], p->off[q] = p->total, p->n[q] = n, p->buf[q] = b;
    p->total += n;
  }
  g_free(layers);
}

static void packing_free(packing *p) {
  g_free(p->layer);
  g_free(p->off);
  g_free(p->n);
  g_free(p->buf);
}

/* This rank's shard of packing p over group g: floats [*lo, *hi) of it, each member's shard sz
 * floats (the packing padded to sz·N, as FSDP pads); returns sz. */
static int64_t shard_of(const comms *k, plan_group g, const packing *p, int64_t *lo,
                        int64_t *hi) {
  const int N = k->g.size[g];
  int me = 0;
  MPI_Comm_rank(k->g.comm[g], &me);
  const int64_t sz = (p->total + N - 1) / N;
  *lo = MIN(p->total, me * sz);
  *hi = MIN(p->total, *lo + sz);
  return sz;
}

/* The packed floats [lo, hi) as this rank's shard of each layer. */
static void packing_own(const packing *p, real_model_rank *rm, int64_t lo, int64_t hi) {
  for (int j = 0; j < p->count; j++) {
    const int64_t a = MAX(lo, p->off[j]), b = MIN(hi, p->off[j] + p->n[j]);
    if (a < b) real_model_shard_own(rm, p->layer[j], a - p->off[j], b - p->off[j]);
    else real_model_shard_own(rm, p->layer[j], 0, 0);
  }
}

/* Adds the reduced packed floats [lo, lo + n) (host `v`) to the layers' shard gradients. */
static void packing_add(const packing *p, real_model_rank *rm, int64_t lo, const float *v,
                        int64_t n) {
  for (int j = 0; j < p->count; j++) {
    const int64_t a = MAX(lo, p->off[j]), b = MIN(lo + n, p->off[j] + p->n[j]);
    if (a < b) real_model_shard_add(rm, p->layer[j], a - p->off[j], v + (a - lo), b - a);
  }
}

/* Copies between the layers' buffers and the packed host floats [lo, lo + n) of `h`. */
static void packing_move(const packing *p, const kn_backend *dev, float *h, int64_t lo, int64_t n,
                         gboolean to_host) {
  for (int j = 0; j < p->count; j++) {
    const int64_t a = MAX(lo, p->off[j]), b = MIN(lo + n, p->off[j] + p->n[j]);
    if (a >= b) continue;
    float *d = p->buf[j] + (a - p->off[j]);
    const size_t bytes = sizeof(float) * (size_t)(b - a);
    if (to_host) dev->download(h + (a - lo), d, bytes);
    else dev->upload(d, h + (a - lo), bytes);
  }
}

/* A gradient op of a sharded run: the bucket of micro-batch op->microbatch packed, reduce-
 * scattered over the shard group (member r keeps floats [r·s, (r+1)·s) of the packing, padded to
 * N·s as FSDP pads), its shard added to the layers' shard gradients, or first all-reduced over the
 * replicas where the plan says so (HYBRID_SHARD); an all-reduce of a whole bucket (a shard group
 * of one) adds the whole bucket. */
static const char *sharded_grad(comms *k, const wl_model *m, const cfg_run *c, real_model_rank *rm,
                                const plan_op *op, double *wire) {
  const plan_group g = op->group;
  const int first = op->bucket.first_layer;
  packing p;
  packing_init(&p, m, rm, op, op->microbatch);
  const kn_backend *dev = real_model_backend(rm);
  const char *name;
  int64_t lo = 0, hi = 0;
  if (op->coll == COLL_REDUCESCATTER) {
    const int N = k->g.size[g];
    const int64_t sz = shard_of(k, g, &p, &lo, &hi);
    float *all = g_new0(float, (size_t)(sz * N) + 1), *mine = g_new0(float, (size_t)sz + 1);
    packing_move(&p, dev, all, 0, p.total, TRUE);
    name = host_coll(k, c, COLL_REDUCESCATTER, g, all, mine, sizeof(float) * (size_t)(sz * N),
                     MPI_SUM, wire);
    g_free(all);
    k->shard_group = g;
    packing_own(&p, rm, lo, hi);
    if (k->repl_after[first]) {
      g_free(k->pend);
      k->pend = mine, k->pend_first = first;
    } else {
      packing_add(&p, rm, lo, mine, hi - lo);
      g_free(mine);
    }
  } else if (g == PLAN_GRP_REPL && k->pend && k->pend_first == first) {
    const int64_t sz = shard_of(k, k->shard_group, &p, &lo, &hi);
    float *sum = g_new(float, (size_t)sz + 1); /* the algorithms do not work in place */
    name = host_coll(k, c, COLL_ALLREDUCE, g, k->pend, sum, sizeof(float) * (size_t)sz, MPI_SUM,
                     wire);
    packing_add(&p, rm, lo, sum, hi - lo);
    g_free(sum);
    g_free(k->pend);
    k->pend = NULL;
  } else {
    float *all = g_new0(float, (size_t)p.total + 1), *sum = g_new(float, (size_t)p.total + 1);
    packing_move(&p, dev, all, 0, p.total, TRUE);
    name = host_coll(k, c, COLL_ALLREDUCE, g, all, sum, sizeof(float) * (size_t)p.total, MPI_SUM,
                     wire);
    packing_own(&p, rm, 0, p.total);
    packing_add(&p, rm, 0, sum, p.total);
    g_free(all);
    g_free(sum);
  }
  packing_free(&p);
  return name;
}

/* A parameter gather: each member's shard of the bucket's (or unit's) parameters, all-gathered
 * into every member's layers. */
static const char *param_gather(comms *k, const wl_model *m, const cfg_run *c,
                                real_model_rank *rm, const plan_op *op, double *wire) {
  const plan_group g = op->group;
  packing p;
  packing_init(&p, m, rm, op, -2);
  const kn_backend *dev = real_model_backend(rm);
  const int N = k->g.size[g];
  int64_t lo = 0, hi = 0;
  const int64_t sz = shard_of(k, g, &p, &lo, &hi);
  float *mine = g_new0(float, (size_t)sz + 1), *all = g_new0(float, (size_t)(sz * N) + 1);
  packing_move(&p, dev, mine, lo, hi - lo, TRUE);
  const char *name = host_coll(k, c, COLL_ALLGATHER, g, mine, all,
                               sizeof(float) * (size_t)(sz * N), MPI_SUM, wire);
  packing_own(&p, rm, lo, hi);
  packing_move(&p, dev, all, 0, p.total, FALSE);
  k->shard_group = g;
  g_free(mine);
  g_free(all);
  packing_free(&p);
  return name;
}

/* Per first layer of a bucket: whether the plan reduce-scatters it and then all-reduces the shard
 * over the replicas. */
static gboolean *repl_after_of(const wl_model *m, const plan_rank *plan) {
  gboolean *rs = g_new0(gboolean, m->n_layers + 1), *out = g_new0(gboolean, m->n_layers + 1);
  for (int i = 0; i < plan->n_ops; i++) {
    const plan_op *op = &plan->ops[i];
    const int f = op->bucket.first_layer;
    if (op->kind != PLAN_COLL || op->purpose != PLAN_WHY_GRAD || f < 0 || f >= m->n_layers)
      continue;
    if (op->coll == COLL_REDUCESCATTER) rs[f] = TRUE;
    else if (op->group == PLAN_GRP_REPL && rs[f]) out[f] = TRUE;
  }
  g_free(rs);
  return out;
}

/* After the last step each member holds its shard's parameters: put each layer together over
 * the shard group (the others' parts are NaN here, and sums of one value and zeros are exact). */
static void shards_assemble(comms *k, real_model_rank *rm, const wl_model *m) {
  if (!real_model_sharded(rm) || k->shard_group < 0) return;
  const kn_backend *dev = real_model_backend(rm);
  for (int i = 0; i < m->n_layers; i++) { /* those of every chunk this rank holds */
    int64_t lo = 0, hi = 0, n = 0;
    float *w = real_model_layer_weights(rm, i, &n);
    /* every member, for every sharded layer: one may hold a layer whole, the others none of it */
    if (!w || !real_model_shard_range(rm, i, &lo, &hi)) continue;
    float *h = g_new0(float, (size_t)n + 1);
    if (hi > lo) dev->download(h + lo, w + lo, sizeof(float) * (size_t)(hi - lo));
    MPI_Allreduce(MPI_IN_PLACE, h, (int)n, MPI_FLOAT, MPI_SUM, k->g.comm[k->shard_group]);
    dev->upload(w, h, sizeof(float) * (size_t)n);
    g_free(h);
  }
}

/* Sequence parallelism: the gradients of the stage's layers that saw part of each sequence
 * (norms, a position table) are partial sums over tp: all-reduced over it, packed in layer order. */
static const char *sp_norm_grads(comms *k, const cfg_run *c, real_model_rank *rm,
                                 const plan_op *op, double *wire) {
  const kn_backend *dev = real_model_backend(rm);
  GArray *layers = g_array_new(FALSE, FALSE, sizeof(int));
  size_t n = 0;
  /* those of the op's model chunk (the plan sums each chunk's once it is done) */
  for (int i = op->layer; i < real_model_chunk_end(rm, op->layer); i++) {
    int64_t len = 0;
    if (!real_model_seq_split(rm, i) || !real_model_layer_grad(rm, i, REAL_MODEL_GRAD_ALL, &len))
      continue;
    g_array_append_val(layers, i);
    n += (size_t)len;
  }
  float *all = g_new0(float, n + 1), *sum = g_new0(float, n + 1);
  size_t at = 0;
  for (guint j = 0; j < layers->len; j++) {
    int64_t len = 0;
    const float *gr = real_model_layer_grad(rm, g_array_index(layers, int, j), REAL_MODEL_GRAD_ALL,
                                            &len);
    dev->download(all + at, gr, sizeof(float) * (size_t)len);
    at += (size_t)len;
  }
  const char *name = host_coll(k, c, COLL_ALLREDUCE, op->group, all, sum, n * sizeof(float),
                               MPI_SUM, wire);
  at = 0;
  for (guint j = 0; j < layers->len; j++) {
    int64_t len = 0;
    float *gr = real_model_layer_grad(rm, g_array_index(layers, int, j), REAL_MODEL_GRAD_ALL, &len);
    dev->upload(gr, sum + at, sizeof(float) * (size_t)len);
    at += (size_t)len;
  }
  g_free(all);
  g_free(sum);
  g_array_free(layers, TRUE);
  return name;
}

/* Runs PLAN_COLL op `op` on real gradients. */
static const char *run_coll(comms *k, const wl_model *m, const cfg_run *c, real_model_rank *rm,
                            const plan_op *op, double *wire) {
  *wire = 0;
  const kn_backend *dev = real_model_backend(rm);
  if (op->purpose == PLAN_WHY_PARAM_GATHER) return param_gather(k, m, c, rm, op, wire);
  if (op->purpose == PLAN_WHY_SP_NORM_GRAD) return sp_norm_grads(k, c, rm, op, wire);
  if (op->purpose == PLAN_WHY_GRAD && real_model_sharded(rm))
    return sharded_grad(k, m, c, rm, op, wire);
  if (op->purpose == PLAN_WHY_GRAD) { /* the bucket's layers, packed in the planner's order */
    int *layers = g_new(int, op->bucket.end_layer - op->bucket.first_layer + 1);
    const int nl = plan_bucket_layers(m, op, layers);
    size_t n = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      real_model_layer_grad(rm, layers[j], REAL_MODEL_GRAD_DENSE, &len);
      n += (size_t)len;
    }
    float *packed = g_new(float, n + 1);
    size_t at = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      const float *gr = real_model_layer_grad(rm, layers[j], REAL_MODEL_GRAD_DENSE, &len);
      dev->download(packed + at, gr, sizeof(float) * (size_t)len);
      at += (size_t)len;
    }
    const char *name = allreduce(k, c, op->group, &kn_cpu, packed, n, wire);
    at = 0;
    for (int j = 0; j < nl; j++) {
      int64_t len = 0;
      float *gr = real_model_layer_grad(rm, layers[j], REAL_MODEL_GRAD_DENSE, &len);
      dev->upload(gr, packed + at, sizeof(float) * (size_t)len);
      at += (size_t)len;
    }
    g_free(packed);
    g_free(layers);
    return name;
  }
  if (op->purpose == PLAN_WHY_TIED) {
    const int i = op->layer, t = m->layers[i].tied_to;
    int64_t n = 0;
    float *gr = real_model_layer_grad(rm, i, REAL_MODEL_GRAD_ALL, &n);
    if (!gr) gr = real_model_layer_grad(rm, t, REAL_MODEL_GRAD_ALL, &n);
    double w = 0;
    const char *name = allreduce(k, c, op->group, dev, gr, gr ? (size_t)n : 0, &w);
    *wire += w;
    return name;
  }
  if (op->purpose == PLAN_WHY_EXPERT_GRAD) { /* among the replicas of the same experts */
    int64_t n = 0;
    float *gr = real_model_layer_grad(rm, op->layer, REAL_MODEL_GRAD_EXPERTS, &n);
    return allreduce(k, c, op->group, dev, gr, gr ? (size_t)n : 0, wire);
  }
  return run_xfer(k, c, rm, op, op->microbatch, wire);
}

/* Rank 0 writes the weights in the serial layout: for each layer, the first data-parallel
 * replica of its stage sends its slice from every tp rank (and, for experts, from each of the
 * ep ranks that hold them); rank 0 places each value by real_shard_param_index. */
static char *dump_weights(const wl_model *m, const cfg_run *c, const plan_rank *plan,
                          real_model_rank *rm, int rank, const char *path) {
  const int *first = plan->stage_first;
  GError *e = NULL;
  char *err = NULL;
  /* rank 0 needs every (tp, ep) slice layout: made before any message moves, so a failure
   * (none is expected: each succeeded on its owner) stops every rank at the same point */
  real_shard_layer *rs = g_new(real_shard_layer, (size_t)c->tp * c->ep * m->n_layers);
  int ok = 1;
  for (int t = 0; t < c->tp && rank == 0 && ok; t++)
    for (int x = 0; x < c->ep && ok; x++)
      ok = real_shard_plan(m, c, t, x, 0, rs + ((size_t)t * c->ep + x) * m->n_layers, &e);
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) {
    err = e ? g_strdup(e->message) : g_strdup("--dump-weights: a rank's slices are unknown");
    g_clear_error(&e);
    g_free(rs);
    return err;
  }
  GString *head = g_string_new("{\"format\": \"dlsim-weights-1\", \"layers\": [");
  GByteArray *data = g_byte_array_new();
  gboolean sep = FALSE;
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->params <= 0) continue;
    int vstage = 0; /* (virtual) stage j is held by pipeline rank j mod pp */
    while (vstage + 1 < c->pp * plan->n_chunks && i >= first[vstage + 1]) vstage++;
    const int stage = vstage % c->pp;
    const int eps = l->kind == WL_MOE ? c->ep : 1;
    float *w = rank == 0 ? g_new0(float, l->params) : NULL;
    for (int t = 0; t < c->tp; t++)
      for (int x = 0; x < eps; x++) {
        const int owner = plan_rank_of(c, x, t, stage);
        int64_t n = 0;
        if (rank == owner && rank != 0) {
          float *mine = real_model_layer_params(rm, i, &n);
          MPI_Send(mine, (int)n, MPI_FLOAT, 0, i, MPI_COMM_WORLD);
          g_free(mine);
        } else if (rank == 0) {
          const real_shard_layer *li = rs + ((size_t)t * c->ep + x) * m->n_layers + i;
          n = real_shard_param_index(l, li, NULL);
          int64_t *idx = g_new(int64_t, n + 1);
          float *got = NULL;
          real_shard_param_index(l, li, idx);
          if (owner == 0) {
            got = real_model_layer_params(rm, i, &n);
          } else {
            got = g_new(float, n + 1);
            MPI_Recv(got, (int)n, MPI_FLOAT, owner, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          }
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
    if (!dl_write_file_atomic(path, head->str, head->len, &e)) {
      err = g_strdup(e->message);
      g_clear_error(&e);
    }
  }
  g_free(rs);
  g_string_free(head, TRUE);
  g_byte_array_free(data, TRUE);
  return err;
}

/* ---- the two streams on this machine ------------------------------------------------------- */

typedef struct {
  const run_ctx *x;
  const plan_rank *plan;
  real_model_rank *model;
  comms *k;
  double origin_s;    /* monotonic seconds at the start barrier */
  GMutex lock;        /* guards `done` */
  GCond cond;
  guint8 *done;       /* iters × n_events: event recorded */
  MPI_Request *rreq;  /* per op index: the posted receive */
  MPI_Request *sreq;  /* the iteration's sends */
  int n_sends;
  float **stage;      /* per op index: the host copy a device backend's p2p buffer moves through */
} real_backend;

static double be_now(void *be) {
  const real_backend *g = be;
  return g_get_monotonic_time() / 1e6 - g->origin_s;
}

/* Making the synthetic batch (and zeroing gradients) is host work the op lists do not describe,
 * as a data loader's would be: the stream times it and leaves it out of the iteration. */
static void be_iter_begin(void *be, int iter) {
  real_backend *g = be;
  real_model_iter_begin(g->model, iter);
  real_model_backend(g->model)->sync();
}

/* The real run's kernel times are its own: measured on this machine's CPU or GPU as they ran. */
static void real_kernels(res_kdb *k, const kn_backend *be) {
  res_kdb_clear_source(k);
  const gboolean cuda = strcmp(be->name, "cuda") == 0;
  kn_cuda_info info;
  memset(&info, 0, sizeof info);
  if (cuda && kn_cuda_info_get(&info) != 0) snprintf(info.name, sizeof info.name, "cuda");
  const gpu_spec *cpu = gpu_local_cpu();
  const gpu_spec *gpu = cuda ? gpu_for_device_name(info.name, info.mem_bytes) : NULL;
  k->name = g_strdup(cuda ? "measured:cuda" : "measured:cpu");
  k->file = g_strdup("");
  k->device = g_strdup(!cuda ? "cpu" : gpu && strcmp(gpu->name, "cpu") != 0 ? gpu->name
                                                                          : info.name);
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "backend", be->name);
  cJSON_AddStringToObject(p, "device_full_name", cuda ? info.name : cpu->full_name);
  if (cuda) {
    cJSON_AddNumberToObject(p, "driver_version", info.driver_version);
    cJSON_AddNumberToObject(p, "runtime_version", info.runtime_version);
    cJSON_AddNumberToObject(p, "sm_count", info.sm_count);
  }
  cJSON_AddStringToObject(p, "timing", cuda ? "CLOCK_MONOTONIC around each kernel op, the device "
                                              "synchronised after it"
                                            : "CLOCK_MONOTONIC around each kernel as it ran");
  char *t = cJSON_PrintUnformatted(p);
  k->provenance = g_strdup(t);
  cJSON_free(t);
  cJSON_Delete(p);
}

/* A device backend queues its kernels: the op ends when they are done, so that its time is
 * theirs and the communication thread sees their results. */
static kdb_origin be_kernel(void *be, const plan_op *op, int iter) {
  real_backend *g = be;
  real_model_kernel(g->model, op, iter);
  real_model_backend(g->model)->sync();
  return KDB_MEASURED; /* it ran, on this machine */
}

/* The buffer of a point-to-point op: halo rows, an activation or its gradient. */
static float *p2p_buf(real_backend *g, const plan_op *op, int64_t *n) {
  if (op->purpose == PLAN_WHY_HALO)
    return real_model_halo_buf(g->model, op, plan_op_peer(g->plan, op), n);
  if (op->purpose == PLAN_WHY_CP_KV) return real_model_cp_buf(g->model, op, n);
  if (op->kind == PLAN_SEND)
    return op->tag & 1 ? real_model_grad_out(g->model, op->layer, op->microbatch, n)
                       : real_model_act_out(g->model, op->layer, op->microbatch, n);
  return op->tag & 1 ? real_model_grad_in(g->model, op->layer, op->microbatch, n)
                     : real_model_act_in(g->model, op->layer, op->microbatch, n);
}

/* What MPI moves for a point-to-point op: the backend's buffer itself on a host backend, else a
 * host copy of it (kept per op: a send's copy is read until the iteration's sends are waited
 * for). *dev gets the backend's buffer. */
static float *p2p_host(real_backend *g, const plan_op *op, float **dev, int64_t *n) {
  *dev = p2p_buf(g, op, n);
  if (real_model_on_host(g->model)) return *dev;
  float **st = &g->stage[op - g->plan->ops];
  if (!*st) *st = g_new0(float, (size_t)*n + REAL_MODEL_P2P_TRAILER_FLOATS);
  return *st;
}

static void be_recv_post(void *be, const plan_op *op, int iter) {
  (void)iter;
  real_backend *g = be;
  int64_t n = 0;
  float *dev, *buf = p2p_host(g, op, &dev, &n);
  MPI_Irecv(buf, (int)n + REAL_MODEL_P2P_TRAILER_FLOATS, MPI_FLOAT, plan_op_peer(g->plan, op),
            op->tag, MPI_COMM_WORLD, &g->rreq[op - g->plan->ops]);
}

static double be_recv_wait(void *be, const plan_op *op, int iter) {
  (void)iter;
  real_backend *g = be;
  MPI_Wait(&g->rreq[op - g->plan->ops], MPI_STATUS_IGNORE);
  int64_t n = 0;
  float *dev, *buf = p2p_host(g, op, &dev, &n);
  if (buf != dev) real_model_backend(g->model)->upload(dev, buf, sizeof(float) * (size_t)n);
  real_model_p2p_done(g->model, op);
  double posted;
  memcpy(&posted, buf + n, sizeof posted);
  return posted - g->origin_s; /* the sender's clock is this machine's */
}

static void be_send(void *be, const plan_op *op, int iter) {
  (void)iter;
  real_backend *g = be;
  int64_t n = 0;
  float *dev, *buf = p2p_host(g, op, &dev, &n); /* a halo send packs its rows here */
  if (buf != dev) real_model_backend(g->model)->download(buf, dev, sizeof(float) * (size_t)n);
  double posted = g_get_monotonic_time() / 1e6;
  memcpy(buf + n, &posted, sizeof posted);
  MPI_Isend(buf, (int)n + REAL_MODEL_P2P_TRAILER_FLOATS, MPI_FLOAT, plan_op_peer(g->plan, op),
            op->tag, MPI_COMM_WORLD, &g->sreq[g->n_sends++]);
}

static void be_sends_wait(void *be, int iter) {
  (void)iter;
  real_backend *g = be;
  MPI_Waitall(g->n_sends, g->sreq, MPI_STATUSES_IGNORE);
  g->n_sends = 0;
}

static const char *be_coll(void *be, const plan_op *op, int iter, double *wire) {
  (void)iter;
  real_backend *g = be;
  return run_coll(g->k, g->x->model, &g->x->cfg, g->model, op, wire);
}

static void be_ev_wait(void *be, int iter, int ev) {
  real_backend *g = be;
  g_mutex_lock(&g->lock);
  while (!g->done[(size_t)iter * g->plan->n_events + ev]) g_cond_wait(&g->cond, &g->lock);
  g_mutex_unlock(&g->lock);
}

static void be_ev_record(void *be, int iter, int ev) {
  real_backend *g = be;
  g_mutex_lock(&g->lock);
  g->done[(size_t)iter * g->plan->n_events + ev] = 1;
  g_cond_broadcast(&g->cond);
  g_mutex_unlock(&g->lock);
}

static const exec_stream_ops real_stream = {
    .now = be_now, .iter_begin = be_iter_begin, .kernel = be_kernel,
    /* kernels run one by one, for real: no kernel_time, run_for or host_time */
    .recv_post = be_recv_post, .recv_wait = be_recv_wait, .send = be_send,
    .sends_wait = be_sends_wait, .coll = be_coll, .ev_wait = be_ev_wait,
    .ev_record = be_ev_record,
};

static gpointer compute_thread(gpointer data) {
  const exec_stream *s = data;
  real_model_backend(((real_backend *)s->be)->model)->bind(); /* the rank's GPU, on this thread */
  exec_stream_compute(data);
  return NULL;
}

/* Rank 0: every rank's record (gathered as bytes), the losses, the result and the trace. NULL
 * or a newly allocated message. */
static char *gather_and_write(const run_ctx *x, const exec_request *req, const rec_rank *mine,
                              real_model_rank *rm, const plan_rank *plan, int rank, int P,
                              const char *result_path) {
  const cfg_run *c = &x->cfg;
  double *loss = g_new0(double, c->iters), *loss_all = g_new0(double, c->iters);
  for (int it = 0; it < c->iters; it++) loss[it] = real_model_loss_sum(rm, it);
  MPI_Reduce(loss, loss_all, c->iters, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  GByteArray *bytes = g_byte_array_new();
  rec_pack(mine, bytes);
  int len = (int)bytes->len, *lens = NULL, *offs = NULL;
  guint8 *all = NULL;
  if (rank == 0) lens = g_new(int, P), offs = g_new(int, P);
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    int tot = 0;
    for (int r = 0; r < P; r++) offs[r] = tot, tot += lens[r];
    all = g_malloc(tot + 1);
  }
  MPI_Gatherv(bytes->data, len, MPI_BYTE, all, lens, offs, MPI_BYTE, 0, MPI_COMM_WORLD);
  char *err = NULL;
  if (rank == 0) {
    plan_rank **plans = g_new0(plan_rank *, P);
    rec_rank *recs = g_new0(rec_rank, P);
    for (int r = 0; r < P && !err; r++) {
      plans[r] = r == 0 ? NULL : plan_build(x->model, c, x->layer_t, r, NULL);
      rec_init(&recs[r], r, r == 0 ? plan : plans[r], c->iters);
      if (!recs[r].plan || !rec_unpack(&recs[r], all + offs[r], (gsize)lens[r]))
        err = g_strdup_printf("rank %d: unreadable measurements", r);
      else rec_finish(&recs[r], 0);
    }
    if (!err) {
      res_result res;
      res_init(&res);
      rec_result(recs, P, c, x->gpu_mem_bytes, &res);
      res.gpu_model = x->gpu->name;
      real_kernels(&res.kdb, real_model_backend(rm));
      for (int it = 0; it < c->iters; it++) {
        /* each rank's is the mean over its share of the positions (context parallelism) */
        double l = loss_all[it] / ((double)c->dp * c->cp * c->microbatches);
        g_array_append_val(res.loss, l);
      }
      GString *trace = req->trace ? rec_trace(recs, P, c) : NULL;
      err = exec_result_write(&res, x, result_path, req->trace, trace);
      if (trace) g_string_free(trace, TRUE);
      res_release(&res);
    }
    for (int r = 0; r < P; r++) {
      if (recs[r].colls) rec_release(&recs[r]);
      plan_rank_free(plans[r]);
    }
    g_free(recs);
    g_free(plans);
  }
  g_free(all);
  g_free(lens);
  g_free(offs);
  g_byte_array_free(bytes, TRUE);
  g_free(loss);
  g_free(loss_all);
  return err;
}

/* The backend of --device: the CPU twins (behind a device boundary when DLSIM_REAL_GUARDED is set
 * and not 0: kernels.h's kn_cpu_guarded, which checks that the executor reaches a device's memory
 * only through the backend), or the CUDA kernels. NULL with *msg set when there is none. */
static const kn_backend *pick_backend(const cfg_run *c, char **msg) {
  if (c->device == CFG_DEVICE_CUDA) {
    const char *why = NULL;
    const kn_backend *b = kn_cuda(&why);
    if (!b) *msg = g_strdup_printf("--device cuda: %s", why ? why : "no CUDA backend");
    return b;
  }
  const char *guard = g_getenv("DLSIM_REAL_GUARDED");
  return guard && *guard && strcmp(guard, "0") != 0 ? &kn_cpu_guarded : &kn_cpu;
}

int real_exec_main(int argc, char **argv) {
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "dlsim-real run: expected REQUEST RESULT\n");
    return 2;
  }
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  exec_request req;
  memset(&req, 0, sizeof req);
  plan_rank *plan = NULL;
  real_model_rank *rm = NULL;
  GError *e = NULL;
  char *msg = NULL;
  int status = 2;
  if (!exec_request_read(argv[1], &parsed, &req, &e) || !run_ctx_open_resolved(&x, &parsed, req.gpu_model, req.gpu_mem_bytes, req.nccl, &e) ||
      !exec_for(CFG_MODE_REAL)->check(&x, &x.cfg, &e))
    msg = g_strdup(e->message);
  const cfg_run *c = &x.cfg;
  if (!msg && P != c->gpus) msg = g_strdup_printf("%d ranks for --gpus %d", P, c->gpus);
  g_clear_error(&e);
  if (!msg && !(plan = plan_build(x.model, c, x.layer_t, rank, &e))) msg = g_strdup(e->message);
  g_clear_error(&e);
  const kn_backend *kb = NULL;
  if (!msg) kb = pick_backend(c, &msg);
  if (!msg && !(rm = real_model_new(x.model, c, plan, rank, kb, &e))) msg = g_strdup(e->message);
  g_clear_error(&e);
  /* every rank reaches the same verdict from the same request, except for local failures */
  int bad = msg != NULL, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (msg) fprintf(stderr, "dlsim-real: rank %d: %s\n", rank, msg);
    goto out;
  }

  comms k;
  memset(&k, 0, sizeof k);
  k.nccl = &x.nccl;
  k.shard_group = -1;
  k.repl_after = repl_after_of(x.model, plan);
  int *node_of = g_new0(int, P); /* every rank on this machine */
  coll_layout *layout = coll_layout_new(c, NULL, node_of);
  coll_groups_init(&k.g, layout, rank, MPI_COMM_SELF);
  coll_layout_free(layout);
  g_free(node_of);
  int n_send = 0;
  for (int i = 0; i < plan->n_ops; i++) n_send += plan->ops[i].kind == PLAN_SEND;
  real_backend g;
  memset(&g, 0, sizeof g);
  g.x = &x, g.plan = plan, g.model = rm, g.k = &k;
  g_mutex_init(&g.lock);
  g_cond_init(&g.cond);
  g.done = g_new0(guint8, (size_t)c->iters * plan->n_events + 1);
  g.rreq = g_new(MPI_Request, plan->n_ops + 1);
  g.sreq = g_new(MPI_Request, n_send + 1);
  g.stage = g_new0(float *, plan->n_ops + 1);
  rec_rank rec;
  rec_init(&rec, rank, plan, c->iters);
  exec_stream stream = {&real_stream, &g,       plan,
                        &rec,         c->iters, g_getenv("DLSIM_DEBUG_OPS") != NULL};

  MPI_Barrier(MPI_COMM_WORLD);
  g.origin_s = g_get_monotonic_time() / 1e6;
  GThread *th = g_thread_new("compute", compute_thread, &stream);
  exec_stream_comm(&stream);
  g_thread_join(th);

  status = 0;
  char *werr = gather_and_write(&x, &req, &rec, rm, plan, rank, P, argv[2]);
  if (!werr && req.dump_weights) shards_assemble(&k, rm, x.model);
  if (!werr && req.dump_weights) werr = dump_weights(x.model, c, plan, rm, rank, req.dump_weights);
  if (werr) {
    fprintf(stderr, "dlsim-real: %s\n", werr);
    g_free(werr);
    status = 1;
  }
  rec_release(&rec);
  for (int i = 0; i < plan->n_ops; i++) g_free(g.stage[i]);
  g_free(g.stage);
  g_free(g.rreq);
  g_free(g.sreq);
  g_free(g.done);
  g_mutex_clear(&g.lock);
  g_cond_clear(&g.cond);
  coll_groups_release(&k.g);
  g_free(k.send);
  g_free(k.recv);
  g_free(k.repl_after);
  g_free(k.pend);
out:
  g_free(msg);
  real_model_free(rm);
  plan_rank_free(plan);
  exec_request_release(&req);
  run_ctx_release(&x);
  cfg_release(&parsed);
  return status;
}
