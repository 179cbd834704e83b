/* test_plan.c — the planner's communication volumes against the closed-form formulas, and the
 * closed-form executor against hand-computed alpha-beta times on a contention-free platform.
 *
 * The network is mlp-small (784 -> 512 -> 512 -> 10, biases, ReLU, softmax-CE):
 *   |W_1| = 784·512 + 512 = 401,920   d_1 = 512
 *   |W_2| = 512·512 + 512 = 262,656   d_2 = 512
 *   |W_3| = 512·10 + 10   =   5,130   d_3 = 10
 * fp32 throughout (4 bytes per element).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec/analytic/analytic.h"
#include "exec/context.h"
#include "coll/cost.h"
#include "cu_main.h"
#include "plan/plan.h"
#include "plan/strategy.h"
#include "platform/platform.h"

static const double W[3] = {401920, 262656, 5130};
static const double D[3] = {512, 512, 10};
static const double DIN[3] = {784, 512, 512};

static wl_model *mlp(void) {
  GError *e = NULL;
  wl_model *m = wl_load("mlp-small", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  return m;
}

static void config(cfg_run *c, int gpus, long batch, const char *grid) {
  cfg_init(c);
  c->gpus = gpus;
  c->batch = batch;
  c->mode = CFG_MODE_ANALYTIC;
  if (grid) CU_ASSERT_FATAL(cfg_grid_parse(c, grid, NULL));
  CU_ASSERT_FATAL(cfg_resolve(c, 64, NULL));
}

/* Sum of bytes of collectives of one purpose and group, and their count. */
static double sum_bytes(const plan_rank *p, plan_purpose why, plan_group g, int layer, int *count) {
  double s = 0;
  int n = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind == PLAN_COLL && op->purpose == why && op->group == g &&
        (layer < 0 || op->layer == layer)) {
      s += op->bytes;
      n++;
    }
  }
  if (count) *count = n;
  return s;
}

static int layer_index(const wl_model *m, const char *name) { return wl_find_layer(m, name); }

static void test_grid_volumes_eq8(void) {
  /* Gholami Eq. 8 term by term on a 2x2 grid, B = 64: per linear layer i,
   *   forward all-gather in Pr:  d_i·B/Pc elements
   *   backward ΔX all-reduce in Pr: d_{i-1}·B/Pc (none for the first layer)
   *   ΔW all-reduce in Pc: |W_i|/Pr */
  wl_model *m = mlp();
  cfg_run c;
  config(&c, 4, 64, "2x2");
  for (int rank = 0; rank < 4; rank++) {
    plan_rank *p = plan_build(m, &c, NULL, rank, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const char *names[3] = {"fc1", "fc2", "fc3"};
    for (int i = 0; i < 3; i++) {
      int li = layer_index(m, names[i]), n;
      CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_FWD_GATHER, PLAN_GRP_TP, li, &n), D[i] * 32 * 4,
                             1e-9);
      CU_ASSERT_EQUAL(n, 1);
      double dx = sum_bytes(p, PLAN_WHY_BWD_DX, PLAN_GRP_TP, li, &n);
      CU_ASSERT_DOUBLE_EQUAL(dx, i == 0 ? 0 : DIN[i] * 32 * 4, 1e-9);
      CU_ASSERT_EQUAL(n, i == 0 ? 0 : 1);
      CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_GRAD, PLAN_GRP_DP, li, &n), W[i] / 2 * 4, 1e-9);
      CU_ASSERT_EQUAL(n, 1);
    }
    CU_ASSERT_EQUAL(p->local_params, (int64_t)((W[0] + W[1] + W[2]) / 2));
    plan_rank_free(p);
  }
  cfg_release(&c);
  wl_free(m);
}

static void test_pure_model_and_batch(void) {
  /* 4x1 (Eq. 3): no ΔW all-reduce; 1x4 (Eq. 4): one ΔW all-reduce of |W_i| per layer, nothing in
   * the model dimension. */
  wl_model *m = mlp();
  cfg_run c;
  config(&c, 4, 64, "4x1");
  plan_rank *p = plan_build(m, &c, NULL, 1, NULL);
  int n;
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_GRAD, PLAN_GRP_DP, -1, &n), 0, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_FWD_GATHER, PLAN_GRP_TP, -1, &n),
                         (D[0] + D[1] + D[2]) * 64 * 4, 1e-9);
  plan_rank_free(p);
  cfg_release(&c);
  config(&c, 4, 64, "1x4");
  p = plan_build(m, &c, NULL, 3, NULL);
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_GRAD, PLAN_GRP_DP, -1, &n), (W[0] + W[1] + W[2]) * 4,
                         1e-9);
  CU_ASSERT_EQUAL(n, 3);
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_FWD_GATHER, PLAN_GRP_TP, -1, &n), 0, 1e-9);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

static void test_ddp_buckets(void) {
  /* Data parallel: every gradient byte is all-reduced exactly once, in buckets filled in reverse
   * layer order; with a 1 MiB first bucket and 25 MiB after, mlp-small (2.7 MB of gradients)
   * gives two buckets: fc3+fc2 (1,071,144 B >= 1 MiB) then fc1 (1,607,680 B). */
  wl_model *m = mlp();
  cfg_run c;
  config(&c, 4, 64, NULL);
  plan_rank *p = plan_build(m, &c, NULL, 0, NULL);
  int n;
  double tot = sum_bytes(p, PLAN_WHY_GRAD, PLAN_GRP_DP, -1, &n);
  CU_ASSERT_DOUBLE_EQUAL(tot, (W[0] + W[1] + W[2]) * 4, 1e-9);
  CU_ASSERT_EQUAL(n, 2);
  int seen = 0;
  for (int i = 0; i < p->n_ops; i++)
    if (p->ops[i].kind == PLAN_COLL) {
      CU_ASSERT_DOUBLE_EQUAL(p->ops[i].bytes, seen == 0 ? (W[2] + W[1]) * 4 : W[0] * 4, 1e-9);
      CU_ASSERT_EQUAL(p->ops[i].stream, PLAN_STREAM_COMM);
      seen++;
    }
  /* the optimizer step is last and waits for the last bucket */
  const plan_op *last = &p->ops[p->n_ops - 1];
  CU_ASSERT_EQUAL(last->phase, PLAN_PH_OPT);
  CU_ASSERT(last->wait_event >= 0);
  /* memory: fp32 SGD-momentum: 4 B params, 4 B grads, 4 B momentum per parameter */
  double params = W[0] + W[1] + W[2];
  CU_ASSERT_DOUBLE_EQUAL(p->mem.params, params * 4, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(p->mem.grads, params * 4, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(p->mem.optimizer, params * 4, 1e-6);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

static plat *star(int gpus, double *alpha, double *beta) {
  plat_gen_params gp;
  CU_ASSERT_FATAL(plat_gen_preset("star", &gp, NULL));
  gp.nodes = 1;
  gp.gpus_per_node = gpus;
  char *xml = plat_generate_xml(&gp, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(xml);
  plat *pl = plat_load_xml("star.xml", xml, strlen(xml), NULL);
  g_free(xml);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  plat_route_info r;
  CU_ASSERT_FATAL(plat_route(pl, 0, 1, &r, NULL));
  *alpha = r.latency_s;
  *beta = r.bottleneck_bps;
  return pl;
}

/* The same star written to a file, for a run context (context.h). */
static char *star_file(int gpus) {
  plat_gen_params gp;
  CU_ASSERT_FATAL(plat_gen_preset("star", &gp, NULL));
  gp.nodes = 1;
  gp.gpus_per_node = gpus;
  char *xml = plat_generate_xml(&gp, NULL);
  char *path = NULL;
  int fd = g_file_open_tmp("test_plan_star_XXXXXX.xml", &path, NULL);
  CU_ASSERT_FATAL(fd >= 0 && xml);
  close(fd);
  CU_ASSERT_FATAL(g_file_set_contents(path, xml, -1, NULL));
  g_free(xml);
  return path;
}

static void test_gholami_equation_literal(void) {
  /* Eq. 8 by hand for mlp-small on a 2x2 grid, B = 64, fp32, on a star (every route = alpha, beta):
   *   3 Σ_i (α⌈log2 2⌉ + β·64·(1/2)·d_i/2·4) + 2 Σ_i (α⌈log2 2⌉ + β(1/2)·|W_i|/2·4) */
  double a, b;
  plat *pl = star(4, &a, &b);
  wl_model *m = mlp();
  cfg_run c;
  config(&c, 4, 64, "2x2");
  double expect = 0;
  for (int i = 0; i < 3; i++) {
    expect += 3 * (a + 64 * 0.5 * D[i] / 2 * 4 / b);
    expect += 2 * (a + 0.5 * W[i] / 2 * 4 / b);
  }
  double got;
  CU_ASSERT_FATAL(analytic_gholami_comm_s(m, &c, pl, &got, NULL));
  CU_ASSERT_DOUBLE_EQUAL(got, expect, expect * 1e-12);
  cfg_release(&c);
  wl_free(m);
  plat_free(pl);
}

static void test_alpha_beta_collectives(void) {
  /* ring all-reduce 2(P-1)(α + n/(Pβ)); rhd 2(α⌈log2 P⌉ + (P-1)/P·n/β) */
  double a, b;
  plat *pl = star(8, &a, &b);
  int members[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  coll_group g;
  CU_ASSERT_FATAL(analytic_group_init(&g, pl, members, 8, NULL));
  CU_ASSERT_DOUBLE_EQUAL(g.ring_alpha_s, a, 1e-15);
  double n = 100e6;
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLREDUCE, "ring", n, &g), 14 * (a + n / 8 / b), 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLREDUCE, "rhd", n, &g), 2 * (3 * a + 7.0 / 8 * n / b),
                         1e-12);
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLGATHER, "rhd", n, &g), 3 * a + 7.0 / 8 * n / b, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLGATHER, "ring", n, &g), 7 * (a + n / 8 / b), 1e-12);
  /* the ring broadcast's chain in 512 KiB chunks (ring.c): one chunk alone crosses P - 1 hops;
   * k chunks, the last c_k, arrive after (k + P - 3) full-chunk times and c_k's own */
  const double C = 524288;
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_BROADCAST, "ring", 65536, &g), 7 * (a + 65536 / b),
                         1e-15);
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_BROADCAST, "ring", 2.5 * C, &g),
                         8 * (a + C / b) + (a + 0.5 * C / b), 1e-15);
  plat_free(pl);
}

static void test_analytic_data_parallel_buckets(void) {
  /* mlp-small data parallel on 4 GPUs of a star, ring all-reduce: the 1 MiB first bucket
   * (fc3 + fc2) is reduced while fc1's backward runs; fc1's gradients (401,920 x 4 B) make the
   * last bucket, which starts after the last backward kernel and cannot hide. By hand, each
   * bucket costs 2·3·(α + n/(4β)); the two add up to the communication, part of the first hides
   * under fc1's backward, the last is exposed whole, and the compute stream never idles:
   * iteration = compute + exposed communication. */
  double a, b;
  plat *pl = star(4, &a, &b);
  cfg_run c;
  config(&c, 4, 64, NULL);
  res_result r;
  res_init(&r);
  g_free(c.coll);
  c.coll = g_strdup("ring");
  c.nccl_proto = NCCL_PROTO_OFF; /* alpha-beta by hand: no NCCL protocol model */
  char *file = star_file(4);
  g_free(c.platform);
  c.platform = g_strdup(file);
  g_free(c.workload);
  c.workload = g_strdup("mlp-small");
  run_ctx x;
  CU_ASSERT_FATAL(run_ctx_open(&x, &c, NULL));
  CU_ASSERT_FATAL(analytic_run(&x, &x.cfg, &r, NULL));
  const double last = 2 * 3 * (a + W[0] * 4 / 4 / b);
  CU_ASSERT(r.exposed_comm_s >= last * (1 - 1e-12));
  const double first = 2 * 3 * (a + (W[1] + W[2]) * 4 / 4 / b);
  CU_ASSERT(r.exposed_comm_s <= (last + first) * (1 + 1e-12)); /* at most both buckets */
  CU_ASSERT(r.overlapped_comm_s > 0);                          /* the first one hides in part */
  CU_ASSERT_DOUBLE_EQUAL(r.exposed_comm_s + r.overlapped_comm_s, last + first, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(r.idle_s, 0, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(r.iteration_time_s, r.compute_s + r.exposed_comm_s, 1e-12);
  res_release(&r);
  run_ctx_release(&x);
  cfg_release(&c);
  plat_free(pl);
  unlink(file);
  g_free(file);
}

/* Bytes of point-to-point ops of one kind and purpose for one layer and direction. */
static double p2p_bytes(const plan_rank *p, plan_op_kind kind, int layer, plan_phase ph, int *n) {
  double s = 0;
  *n = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind == kind && op->purpose == PLAN_WHY_HALO && op->layer == layer && op->phase == ph) {
      s += op->bytes;
      (*n)++;
    }
  }
  return s;
}

/* Grid 4x1 with --domain conv on 4 GPUs. */
static void domain_config(cfg_run *c, int batch) {
  cfg_init(c);
  c->gpus = 4;
  c->batch = batch;
  c->domain_conv = TRUE;
  CU_ASSERT_FATAL(cfg_grid_parse(c, "4x1", NULL));
  CU_ASSERT_FATAL(cfg_resolve(c, 64, NULL));
}

static void test_domain_halos(void) {
  /* cnn-small split 4 ways along the height (grid 4x1, --domain conv), batch 8, fp32.
   * conv1 (3x3, stride 1, pad 1, input 3x32x32): rank 1 holds input rows [8, 16) and needs
   *   [7, 17): one row from each neighbour, 32 x 3 x 8 x 4 = 3,072 B each; it sends one row each
   *   way; backward it exchanges one output-gradient row each way, 32 x 16 x 8 x 4 = 16,384 B.
   *   Rank 0 (top edge) only talks to rank 1.
   * pool1 (2x2, stride 2) reads exactly its own rows: no halo.
   * conv2 (3x3 on 16x16x16): one row of 16 x 16 x 8 x 4 = 8,192 B each way.
   * bn1 sums 2 x 16 floats over the group; the activations are gathered before flatten
   *   (2048 x 8 x 4 = 65,536 B); conv weights are all-reduced over all P (432 x 4 B). */
  GError *e = NULL;
  wl_model *m = wl_load("cnn-small", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  cfg_run c;
  domain_config(&c, 8);
  plan_rank *p = plan_build(m, &c, NULL, 1, &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  int n;
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_RECV, 0, PLAN_PH_FWD, &n), 2 * 3072, 1e-9);
  CU_ASSERT_EQUAL(n, 2);
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_SEND, 0, PLAN_PH_FWD, &n), 2 * 3072, 1e-9);
  CU_ASSERT_EQUAL(n, 2);
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_RECV, 0, PLAN_PH_BWD, &n), 2 * 16384, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_RECV, 3, PLAN_PH_FWD, &n), 0, 1e-9);
  CU_ASSERT_EQUAL(n, 0);
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_RECV, 4, PLAN_PH_FWD, &n), 2 * 8192, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_BN_STATS, PLAN_GRP_TP, 1, &n), 2 * (2 * 16 * 4),
                         1e-9);
  CU_ASSERT_EQUAL(n, 2); /* forward and backward */
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_REDIST, PLAN_GRP_TP, -1, &n), 65536, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(sum_bytes(p, PLAN_WHY_GRAD, PLAN_GRP_WORLD, 0, &n), 432 * 4, 1e-9);
  plan_rank_free(p);
  p = plan_build(m, &c, NULL, 0, &e);
  CU_ASSERT_DOUBLE_EQUAL(p2p_bytes(p, PLAN_RECV, 0, PLAN_PH_FWD, &n), 3072, 1e-9);
  CU_ASSERT_EQUAL(n, 1);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

static void test_op_says_what_it_is(void) {
  /* Buckets name their layers: mlp-small's two buckets are [fc2, fc3] then [fc1] (highest layer
   * first), and every weighted layer is in exactly one bucket. */
  wl_model *m = mlp();
  cfg_run c;
  config(&c, 4, 64, NULL);
  c.microbatches = 2;
  plan_rank *p = plan_build(m, &c, NULL, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  int in_buckets[8] = {0}, layers[8], nb = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind == PLAN_COLL && op->purpose == PLAN_WHY_GRAD) {
      int n = plan_bucket_layers(m, op, layers);
      if (nb == 0) {
        CU_ASSERT_EQUAL(n, 2);
        CU_ASSERT_EQUAL(layers[0], layer_index(m, "fc3"));
        CU_ASSERT_EQUAL(layers[1], layer_index(m, "fc2"));
      }
      for (int k = 0; k < n; k++) in_buckets[layers[k]]++;
      nb++;
      CU_ASSERT_EQUAL(op->microbatch, 1); /* the last micro-batch's backward */
    }
    /* every op of a step knows its micro-batch; only the optimizer step belongs to none */
    CU_ASSERT(op->phase == PLAN_PH_OPT ? op->microbatch == -1
                                     : op->microbatch >= 0 && op->microbatch < 2);
  }
  CU_ASSERT_EQUAL(nb, 2);
  for (int i = 0; i < m->n_layers; i++)
    CU_ASSERT_EQUAL(in_buckets[i], plan_layer_has_grads(&m->layers[i]) ? 1 : 0);
  /* the optimizer step counts its parameters */
  CU_ASSERT_EQUAL(p->ops[p->n_ops - 1].params, p->local_params);
  CU_ASSERT_EQUAL(p->local_params, (int64_t)(W[0] + W[1] + W[2]));
  plan_rank_free(p);

  /* --recompute: each layer's forward runs again in backward as its own kernel, right before
   * the layer's backward kernel, and the backward kernel keeps its own FLOP */
  c.recompute = TRUE;
  p = plan_build(m, &c, NULL, 0, NULL);
  int recomputed = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (!op->recompute) continue;
    recomputed++;
    CU_ASSERT_EQUAL(op->phase, PLAN_PH_BWD);
    CU_ASSERT(g_str_has_suffix(op->kname, ".fwd"));
    const plan_op *next = &p->ops[i + 1];
    CU_ASSERT_EQUAL(next->layer, op->layer);
    CU_ASSERT(g_str_has_suffix(next->kname, ".bwd"));
    CU_ASSERT_DOUBLE_EQUAL(next->flops, m->layers[op->layer].bwd_flops * 8,
                           1e-6); /* B/dp/m = 64/4/2 */
    CU_ASSERT_DOUBLE_EQUAL(op->flops, m->layers[op->layer].fwd_flops * 8, 1e-6);
  }
  CU_ASSERT_EQUAL(recomputed, 2 * m->n_layers); /* every layer, both micro-batches */
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

static void test_domain_parts(void) {
  /* A windowed domain layer computes its interior rows while the halo rows travel, then its
   * boundary rows; the two kernels say which is which and together hold the rank's share. */
  GError *e = NULL;
  wl_model *m = wl_load("cnn-small", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  cfg_run c;
  domain_config(&c, 8);
  plan_rank *p = plan_build(m, &c, NULL, 1, &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  double interior = 0, boundary = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind != PLAN_KERNEL || op->layer != 0 || op->phase != PLAN_PH_FWD) continue;
    if (op->part == PLAN_PART_INTERIOR) interior += op->flops;
    else if (op->part == PLAN_PART_BOUNDARY) boundary += op->flops;
    else CU_FAIL("conv1 forward is split into interior and boundary");
  }
  /* rank 1 holds 8 of 32 output rows; 2 of them need a neighbour's row */
  const double share = m->layers[0].fwd_flops * 8 * 8.0 / 32;
  CU_ASSERT_DOUBLE_EQUAL(interior + boundary, share, 1e-6 * share);
  CU_ASSERT_DOUBLE_EQUAL(boundary, share * 2 / 8, 1e-6 * share);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}


/* Field by field: rank `rank`'s own plan `a` and the view `b` it is given in its place. */
static void assert_same_plan(const cfg_run *c, const plan_rank *a, const plan_rank *b,
                             const char *what, int rank) {
  gboolean same = a->stage == b->stage && a->first_layer == b->first_layer &&
                  a->end_layer == b->end_layer && a->max_stash == b->max_stash &&
                  a->n_ops == b->n_ops && a->n_events == b->n_events &&
                  a->mem.params == b->mem.params && a->mem.grads == b->mem.grads &&
                  a->mem.optimizer == b->mem.optimizer &&
                  a->mem.activations == b->mem.activations &&
                  a->local_params == b->local_params &&
                  a->moe_max_over_mean == b->moe_max_over_mean &&
                  a->moe_dropped_tokens == b->moe_dropped_tokens &&
                  a->moe_routed_tokens == b->moe_routed_tokens;
  for (int i = 0; same && i < a->n_ops; i++) {
    const plan_op *x = &a->ops[i], *y = &b->ops[i];
    same = x->kind == y->kind && x->stream == y->stream && x->phase == y->phase &&
           x->layer == y->layer && x->wait_event == y->wait_event &&
           x->record_event == y->record_event && x->microbatch == y->microbatch &&
           strcmp(x->kname, y->kname) == 0 && x->gemm_like == y->gemm_like &&
           x->flops == y->flops && x->mem_bytes == y->mem_bytes && x->samples == y->samples &&
           x->split == y->split && x->part == y->part && x->recompute == y->recompute &&
           x->params == y->params && x->coll == y->coll && x->group == y->group &&
           x->purpose == y->purpose && x->bytes == y->bytes &&
           plan_op_peer(a, x) == plan_op_peer(b, y) && x->tag == y->tag &&
           x->bucket.first_layer == y->bucket.first_layer &&
           x->bucket.end_layer == y->bucket.end_layer && x->fixed_s == y->fixed_s &&
           x->comm == y->comm && !x->peer_send_bytes == !y->peer_send_bytes;
    if (same && x->peer_send_bytes) { /* uneven all-to-all blocks, one per group member */
      const int n = plan_group_degree(c, x->group);
      for (int j = 0; same && j < n; j++)
        same = x->peer_send_bytes[j] == y->peer_send_bytes[j] &&
               x->peer_recv_bytes[j] == y->peer_recv_bytes[j];
    }
    if (!same) fprintf(stderr, "\n%s: rank %d differs from its view at op %d\n", what, rank, i);
  }
  CU_ASSERT(same);
}

/* Every rank's op list is its representative's with peers shifted (plan_representative), in
 * every strategy: this is what lets the simulation hold one op list per set of equivalent ranks.
 */
static void test_equivalent_ranks(void) {
  static const struct {
    const char *workload;
    int gpus, tp, pp, ep, mb;
    const char *grid, *style;
    gboolean domain, recompute;
    long batch;
  } cases[] = {
      {"mlp-small", 4, 1, 1, 1, 0, NULL, NULL, FALSE, FALSE, 64},         /* data parallel */
      {"mlp-small", 8, 0, 0, 1, 0, "2x4", NULL, FALSE, FALSE, 64},        /* Gholami grid */
      {"cnn-small", 8, 0, 0, 1, 0, "4x2", NULL, TRUE, FALSE, 16},         /* domain, halos */
      {"resnet18-cifar100", 8, 1, 4, 1, 8, NULL, NULL, FALSE, FALSE, 256}, /* GPipe x dp */
      {"gpt-tiny", 16, 2, 2, 1, 4, NULL, "megatron", FALSE, TRUE, 64},    /* 3-D, 1F1B */
      {"mlp-deep", 12, 2, 3, 1, 2, NULL, "gholami", FALSE, FALSE, 24},    /* 3-D, Gholami tp */
      {"moe-gpt-8x", 16, 1, 2, 4, 2, NULL, NULL, FALSE, FALSE, 64},       /* experts, pipeline */
      {"switch-base-8", 8, 2, 1, 2, 0, NULL, "megatron", FALSE, FALSE, 32}, /* experts, tp */
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    GError *e = NULL;
    wl_model *m = wl_load(cases[k].workload, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cfg_run c;
    cfg_init(&c);
    c.gpus = cases[k].gpus;
    c.batch = cases[k].batch;
    c.tp = cases[k].tp;
    c.pp = cases[k].pp;
    c.ep = cases[k].ep;
    c.microbatches = cases[k].mb;
    c.domain_conv = cases[k].domain;
    c.recompute = cases[k].recompute;
    c.schedule = k == 4 ? CFG_SCHED_1F1B : CFG_SCHED_GPIPE;
    if (cases[k].grid) CU_ASSERT_FATAL(cfg_grid_parse(&c, cases[k].grid, NULL));
    if (cases[k].style) CU_ASSERT_FATAL(cfg_tp_style_parse(cases[k].style, &c.tp_style));
    if (c.ep > 1) CU_ASSERT_FATAL(cfg_routing_parse(&c, "zipf:1.2", NULL)); /* uneven experts */
    CU_ASSERT_FATAL(cfg_resolve(&c, 64, NULL));
    cfg_resolve_style(&c, wl_has_tp_roles(m));
    int shared = 0;
    for (int r = 0; r < c.gpus; r++) {
      const int rep = plan_representative(m, &c, r);
      plan_rank *own = plan_build(m, &c, NULL, r, &e);
      plan_rank *of_rep = plan_build(m, &c, NULL, rep, &e);
      CU_ASSERT_PTR_NOT_NULL_FATAL(own);
      CU_ASSERT_PTR_NOT_NULL_FATAL(of_rep);
      plan_rank *view = plan_view(of_rep, rep, r);
      assert_same_plan(&c, own, view, cases[k].workload, r);
      shared += rep != r;
      plan_rank_free(view);
      plan_rank_free(of_rep);
      plan_rank_free(own);
    }
    CU_ASSERT(shared > 0); /* every case has ranks that share */
    cfg_release(&c);
    wl_free(m);
  }
}

/* A plan's messages share MPI_COMM_WORLD with the collectives of groups that span every rank
 * (a domain-parallel run's weight all-reduce): their tags stay below the collectives'. A model
 * too deep for the halo tags is refused, naming the option. */
static void test_tags_below_collectives(void) {
  GError *e = NULL;
  wl_model *m = wl_load("resnet50-imagenet", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  cfg_run c;
  domain_config(&c, 16);
  int max_tag = -1, n_p2p = 0;
  for (int rank = 0; rank < 4; rank++) {
    plan_rank *p = plan_build(m, &c, NULL, rank, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    for (int i = 0; i < p->n_ops; i++)
      if (p->ops[i].kind == PLAN_SEND || p->ops[i].kind == PLAN_RECV) {
        max_tag = MAX(max_tag, p->ops[i].tag);
        n_p2p++;
      }
    plan_rank_free(p);
  }
  CU_ASSERT(n_p2p > 0);
  CU_ASSERT(max_tag >= 0 && max_tag < COLL_TAG_BASE);
  wl_model deep = *m;
  deep.n_layers = (COLL_TAG_BASE - 16384) / 256 + 1;
  CU_ASSERT_FALSE(plan_domain.check(&deep, &c, &e));
  char want[32]; /* 960 layers: the last one's tags end at COLL_TAG_BASE - 1 */
  g_snprintf(want, sizeof want, "has %d layers", deep.n_layers);
  CU_ASSERT_EQUAL(deep.n_layers, 961);
  CU_ASSERT_TRUE(e && strstr(e->message, "--domain conv") && strstr(e->message, want));
  g_clear_error(&e);
  deep.n_layers--;
  CU_ASSERT_TRUE(plan_domain.check(&deep, &c, &e));
  cfg_release(&c);
  wl_free(m);
}

static const dl_cu_test plan_tests[] = {
    DL_CU_TEST(test_equivalent_ranks),
    DL_CU_TEST(test_op_says_what_it_is), DL_CU_TEST(test_domain_parts),
    DL_CU_TEST(test_domain_halos), DL_CU_TEST(test_tags_below_collectives),
    DL_CU_TEST(test_grid_volumes_eq8), DL_CU_TEST(test_pure_model_and_batch),
    DL_CU_TEST(test_ddp_buckets), DL_CU_END};
static const dl_cu_test analytic_tests[] = {
    DL_CU_TEST(test_gholami_equation_literal), DL_CU_TEST(test_alpha_beta_collectives),
    DL_CU_TEST(test_analytic_data_parallel_buckets), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {
    {"plan", plan_tests}, {"analytic", analytic_tests}, {NULL, NULL}};
