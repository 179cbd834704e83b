/* test_zero.c — ZeRO and FSDP (plan/fsdp.c) against their published figures.
 *
 * Model states per GPU (Rajbhandari et al. 2020, "ZeRO", Section 5.1, Figure 1): mixed-precision
 * Adam keeps 2Ψ bytes of fp16/bf16 parameters, 2Ψ of gradients (--grad-reduce-dtype bf16) and
 * KΨ = 12Ψ of optimizer state (fp32 master weights, momentum, variance); sharding over N ranks
 * leaves
 *   baseline 16Ψ,   P_os (stage 1) 4Ψ + 12Ψ/N,   P_os+g (stage 2) 2Ψ + 14Ψ/N,
 *   P_os+g+p (stage 3) 16Ψ/N.
 * With the gradients in fp32 (the default under bf16, as Megatron's), Megatron Core's
 * distributed-optimizer guide gives 18 bytes per parameter, 6 + 12/d distributed; in fp32
 * throughout 16, and 8 + 8/d.
 * Communication (Section 7): stages 1 and 2 move what data parallelism's all-reduce moves (a
 * reduce-scatter of the gradients and an all-gather of the parameters), stage 3 1.5 times it (the
 * parameters gathered twice: forward and backward). PyTorch FSDP (Zhao et al. 2023):
 * SHARD_GRAD_OP gathers once per forward; HYBRID_SHARD reduce-scatters inside the shard group
 * and all-reduces the shard across its replicas.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "cu_plan.h"

/* A resolved configuration: `gpus` GPUs, `tp` tensor parallel, micro-batches `mb`. */
static void config(cfg_run *c, const wl_model *m, int gpus, int tp, int mb, long batch,
                   gpu_precision prec) {
  cfg_init(c);
  c->gpus = gpus;
  c->tp = tp;
  c->microbatches = mb;
  c->batch = batch;
  c->precision = prec;
  c->mode = CFG_MODE_ANALYTIC;
  CU_ASSERT_FATAL(cfg_resolve(c, batch, NULL));
  cfg_resolve_style(c, wl_has_tp_roles(m));
}

/* Bytes of the collectives of kind `op` and purpose `why` over group `g`, and their count. */
static double sum(const plan_rank *p, coll_op op, plan_purpose why, plan_group g, int *n) {
  double s = 0;
  int k = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *x = &p->ops[i];
    if (x->kind == PLAN_COLL && x->coll == op && x->purpose == why && x->group == g) {
      s += x->bytes;
      k++;
    }
  }
  if (n) *n = k;
  return s;
}

static gboolean close_to(double got, double want, double rel) {
  const gboolean ok = fabs(got - want) <= rel * fabs(want);
  if (!ok) fprintf(stderr, "\n  got %.6g, want %.6g\n", got, want);
  return ok;
}

/* GPT 1.7B in bf16 with Adam and bf16 gradients on N = 8 and 64 data-parallel ranks: the model
 * states follow ZeRO's formulas (within 2 %; they differ only by the padding of each shard).
 * FSDP full holds what stage 3 holds, grad-op the same at rest, hybrid stage 3's over its shard
 * group. With fp32 gradients (the default) and in fp32, Megatron's figures. */
static void test_model_states(void) {
  wl_model *m = dl_cu_load("gpt-1.7b");
  const int Ns[] = {8, 64};
  for (size_t k = 0; k < G_N_ELEMENTS(Ns); k++) {
    const double N = Ns[k];
    struct {
      int zero;
      cfg_fsdp fsdp;
      int shard;
      double want_per_psi; /* bytes per parameter */
    } cases[] = {
        {0, CFG_FSDP_NONE, 0, 16},           {1, CFG_FSDP_NONE, 0, 4 + 12 / N},
        {2, CFG_FSDP_NONE, 0, 2 + 14 / N},   {3, CFG_FSDP_NONE, 0, 16 / N},
        {0, CFG_FSDP_FULL, 0, 16 / N},       {0, CFG_FSDP_GRAD_OP, 0, 16 / N},
        {0, CFG_FSDP_HYBRID, 8, 16 / 8.0},
    };
    for (size_t j = 0; j < G_N_ELEMENTS(cases); j++) {
      cfg_run c;
      config(&c, m, Ns[k], 1, 1, Ns[k], GPU_BF16);
      c.grad_reduce = GPU_BF16;
      c.zero = cases[j].zero;
      c.fsdp = cases[j].fsdp;
      c.fsdp_shard = cases[j].shard;
      plan_rank *p = dl_cu_build(m, &c, 0);
      const double psi = (double)m->params;
      CU_ASSERT_EQUAL(p->local_params, m->params);
      const double states = p->mem.params + p->mem.grads + p->mem.optimizer;
      CU_ASSERT(close_to(states, cases[j].want_per_psi * psi, 0.02));
      /* nothing is held whole beyond the shards where nothing is gathered */
      if (cases[j].zero < 2 && cases[j].fsdp == CFG_FSDP_NONE) CU_ASSERT_EQUAL(p->mem.gathered, 0);
      if (cases[j].zero == 3 || cases[j].fsdp != CFG_FSDP_NONE) CU_ASSERT(p->mem.gathered > 0);
      plan_rank_free(p);
      cfg_release(&c);
    }
    /* Megatron's distributed optimizer: bf16 parameters with fp32 gradients, and fp32 */
    const struct {
      gpu_precision prec;
      int zero;
      double want_per_psi;
    } megatron[] = {{GPU_BF16, 0, 18}, {GPU_BF16, 1, 6 + 12 / N}, {GPU_FP32, 0, 16},
                    {GPU_FP32, 1, 8 + 8 / N}};
    for (size_t j = 0; j < G_N_ELEMENTS(megatron); j++) {
      cfg_run c;
      config(&c, m, Ns[k], 1, 1, Ns[k], megatron[j].prec);
      CU_ASSERT_EQUAL(c.grad_reduce, GPU_FP32); /* the default */
      c.zero = megatron[j].zero;
      plan_rank *p = dl_cu_build(m, &c, 0);
      const double states = p->mem.params + p->mem.grads + p->mem.optimizer;
      CU_ASSERT(close_to(states, megatron[j].want_per_psi * (double)m->params, 0.02));
      plan_rank_free(p);
      cfg_release(&c);
    }
  }
  wl_free(m);
}

/* Volumes on gpt-tiny (fp32, so gradients and parameters are both 4 bytes) over dp = 4, one
 * micro-batch and then two. Ψ·4 bytes are all-reduced without sharding; with ZeRO 1 and 2 they
 * are reduce-scattered and the parameters gathered once; ZeRO 3 gathers them twice; FSDP full
 * keeps the root unit (ln_f) through backward; grad-op gathers once. On the wire (ring: each of
 * all-gather and reduce-scatter moves (N-1)/N of its buffer, all-reduce twice that) stages 1, 2
 * and grad-op move the all-reduce's volume, stage 3 1.5 times it. */
static void test_volumes(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  const double psi = (double)m->params, N = 4;
  const int root = wl_find_layer(m, "ln_f");
  CU_ASSERT_FATAL(root >= 0);
  const double root_params = (double)m->layers[root].params;
  for (int mb = 1; mb <= 2; mb++) {
    struct {
      int zero;
      cfg_fsdp fsdp;
      double gather;     /* parameter bytes gathered per iteration, in units of 4Ψ */
      double scatter;    /* gradient bytes reduce-scattered per micro-batch, in units of 4Ψ */
      gboolean per_mb;   /* reduce-scattered in every micro-batch */
      double wire_ratio; /* against the all-reduce's wire volume, with one micro-batch */
    } cases[] = {
        {1, CFG_FSDP_NONE, 1, 1, FALSE, 1.0},
        {2, CFG_FSDP_NONE, 1, 1, TRUE, 1.0},
        {3, CFG_FSDP_NONE, 2, 1, TRUE, 1.5},
        {0, CFG_FSDP_FULL, 2 - root_params / psi, 1, TRUE, (3 - root_params / psi) / 2},
        {0, CFG_FSDP_GRAD_OP, 1, 1, TRUE, 1.0},
    };
    cfg_run c;
    config(&c, m, 4, 1, mb, 8, GPU_FP32);
    plan_rank *base = dl_cu_build(m, &c, 0);
    const double ar = sum(base, COLL_ALLREDUCE, PLAN_WHY_GRAD, PLAN_GRP_DP, NULL);
    CU_ASSERT(close_to(ar, 4 * psi, 1e-12));
    plan_rank_free(base);
    for (size_t j = 0; j < G_N_ELEMENTS(cases); j++) {
      c.zero = cases[j].zero;
      c.fsdp = cases[j].fsdp;
      plan_rank *p = dl_cu_build(m, &c, 0);
      const double ag = sum(p, COLL_ALLGATHER, PLAN_WHY_PARAM_GATHER, PLAN_GRP_DP, NULL);
      const double rs = sum(p, COLL_REDUCESCATTER, PLAN_WHY_GRAD, PLAN_GRP_DP, NULL);
      /* ZeRO 1 and 2 gather once per iteration; units once (or twice) per micro-batch */
      const double gathers = cases[j].zero == 1 || cases[j].zero == 2 ? 1 : mb;
      CU_ASSERT(close_to(ag, cases[j].gather * 4 * psi * gathers, 1e-12));
      CU_ASSERT(close_to(rs, cases[j].scatter * 4 * psi * (cases[j].per_mb ? mb : 1), 1e-12));
      CU_ASSERT_EQUAL(sum(p, COLL_ALLREDUCE, PLAN_WHY_GRAD, PLAN_GRP_DP, NULL), 0);
      if (mb == 1) {
        const double wire = (N - 1) / N * (ag + rs), ar_wire = 2 * (N - 1) / N * ar;
        CU_ASSERT(close_to(wire / ar_wire, cases[j].wire_ratio, 1e-12));
      }
      /* the optimizer steps this rank's shard: ⌈Ψ/N⌉ parameters */
      const plan_op *step = &p->ops[p->n_ops - 1];
      CU_ASSERT_EQUAL(step->phase, PLAN_PH_OPT);
      CU_ASSERT_EQUAL(step->params, (m->params + 3) / 4);
      CU_ASSERT(p->step_event >= 0 && step->record_event == p->step_event);
      plan_rank_free(p);
    }
    cfg_release(&c);
  }
  wl_free(m);
}

/* HYBRID_SHARD on 8 data-parallel ranks in shard groups of 2: the gradients are
 * reduce-scattered among the 2 and the shard (Ψ/2) all-reduced among the 4 replicas; the groups
 * are what layout.c says, and tile the data-parallel ranks. */
static void test_hybrid_groups(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  cfg_run c;
  config(&c, m, 16, 2, 1, 16, GPU_FP32);
  c.fsdp = CFG_FSDP_HYBRID;
  c.fsdp_shard = 2;
  CU_ASSERT_EQUAL(plan_shard_degree(&c), 2);
  CU_ASSERT_EQUAL(plan_group_degree(&c, PLAN_GRP_SHARD), 2);
  CU_ASSERT_EQUAL(plan_group_degree(&c, PLAN_GRP_REPL), 4);
  int mem[16];
  /* rank 6 = dp 3, tp 0: shard with dp 2 (rank 4); replicas dp 1, 3, 5, 7 */
  CU_ASSERT_EQUAL(plan_group_members(&c, PLAN_GRP_SHARD, 6, mem), 2);
  CU_ASSERT(mem[0] == 4 && mem[1] == 6);
  CU_ASSERT_EQUAL(plan_group_members(&c, PLAN_GRP_REPL, 6, mem), 4);
  CU_ASSERT(mem[0] == 2 && mem[1] == 6 && mem[2] == 10 && mem[3] == 14);
  plan_rank *p = dl_cu_build(m, &c, 6);
  const double local = (double)p->local_params * 4;
  CU_ASSERT(close_to(sum(p, COLL_REDUCESCATTER, PLAN_WHY_GRAD, PLAN_GRP_SHARD, NULL), local, 1e-12));
  CU_ASSERT(close_to(sum(p, COLL_ALLREDUCE, PLAN_WHY_GRAD, PLAN_GRP_REPL, NULL), local / 2, 1e-12));
  CU_ASSERT_EQUAL(sum(p, COLL_ALLGATHER, PLAN_WHY_PARAM_GATHER, PLAN_GRP_DP, NULL), 0);
  CU_ASSERT(sum(p, COLL_ALLGATHER, PLAN_WHY_PARAM_GATHER, PLAN_GRP_SHARD, NULL) > local);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

/* The op that records event `ev`, or NULL. */
static const plan_op *recorder(const plan_rank *p, int ev) {
  for (int i = 0; i < p->n_ops && ev >= 0; i++)
    if (p->ops[i].record_event == ev) return &p->ops[i];
  return NULL;
}

/* Prefetch with FSDP's limit of two gathered blocks: in forward, block j + 1's gather (j >= 1)
 * waits for the last kernel of block j - 1 (its buffer is free), and each block's first kernel
 * waits for a communication op at or after its own gather, so compute never starts on
 * parameters that are not there. gpt-1.7b: an embedding block and 24 transformer blocks. */
static void test_prefetch(void) {
  wl_model *m = dl_cu_load("gpt-1.7b");
  cfg_run c;
  config(&c, m, 8, 1, 1, 8, GPU_BF16);
  c.fsdp = CFG_FSDP_FULL;
  plan_rank *p = dl_cu_build(m, &c, 0);
  int gathers = 0, checked = 0;
  int *gather_at = g_new(int, m->n_layers); /* op index of the forward gather of the unit of i */
  int *block_first = g_new(int, m->n_layers), n_blocks = 0; /* first layer of each block */
  for (int i = 0; i < m->n_layers; i++) {
    gather_at[i] = -1;
    if (m->layers[i].block >= 0 && (i == 0 || m->layers[i - 1].block != m->layers[i].block))
      block_first[n_blocks++] = i;
  }
  CU_ASSERT_EQUAL(n_blocks, 25); /* the embedding and 24 transformer blocks */
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind != PLAN_COLL || op->purpose != PLAN_WHY_PARAM_GATHER || op->phase != PLAN_PH_FWD)
      continue;
    gathers++;
    gather_at[op->bucket.first_layer] = i;
    int q = 0; /* which block, if any */
    while (q < n_blocks && block_first[q] != op->bucket.first_layer) q++;
    if (q >= 2 && q < n_blocks) { /* block q waits for block q - 2's last kernel */
      const plan_op *w = recorder(p, op->wait_event);
      CU_ASSERT_PTR_NOT_NULL_FATAL(w);
      CU_ASSERT_EQUAL(w->kind, PLAN_KERNEL);
      CU_ASSERT_EQUAL(w->layer, block_first[q - 1] - 1);
      checked++;
    }
  }
  CU_ASSERT_EQUAL(gathers, 2 + 24); /* the root (ln_f), the embedding block, 24 blocks */
  CU_ASSERT_EQUAL(checked, 23);
  /* each block's first forward kernel waits for its gather or a later communication op */
  int seen = -1;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind != PLAN_KERNEL || op->phase != PLAN_PH_FWD || op->layer <= seen) continue;
    seen = op->layer;
    if (gather_at[op->layer] < 0) continue; /* not a unit's first layer */
    const plan_op *w = recorder(p, op->wait_event);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT(w - p->ops >= gather_at[op->layer]);
    CU_ASSERT_EQUAL(w->stream, PLAN_STREAM_COMM);
  }
  g_free(gather_at);
  g_free(block_first);
  plan_rank_free(p);
  cfg_release(&c);
  wl_free(m);
}

/* Sharding keeps the ranks of a shard group alike: every rank's plan is its representative's
 * (what the closed form's and the simulation's folding rely on). */
static void test_equivalent_ranks(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  struct {
    int zero;
    cfg_fsdp fsdp;
    int shard;
  } cases[] = {{1, CFG_FSDP_NONE, 0}, {3, CFG_FSDP_NONE, 0}, {0, CFG_FSDP_HYBRID, 2}};
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    cfg_run c;
    config(&c, m, 16, 2, 2, 32, GPU_FP32);
    c.zero = cases[k].zero;
    c.fsdp = cases[k].fsdp;
    c.fsdp_shard = cases[k].shard;
    plan_rank *rep = dl_cu_build(m, &c, plan_representative(m, &c, 13));
    plan_rank *own = dl_cu_build(m, &c, 13);
    CU_ASSERT_EQUAL(own->n_ops, rep->n_ops);
    gboolean same = own->n_ops == rep->n_ops && own->step_event == rep->step_event &&
                    memcmp(&own->mem, &rep->mem, sizeof own->mem) == 0;
    for (int i = 0; same && i < own->n_ops; i++)
      same = own->ops[i].kind == rep->ops[i].kind && own->ops[i].bytes == rep->ops[i].bytes &&
             own->ops[i].group == rep->ops[i].group &&
             own->ops[i].wait_event == rep->ops[i].wait_event;
    CU_ASSERT(same);
    plan_rank_free(own);
    plan_rank_free(rep);
    cfg_release(&c);
  }
  wl_free(m);
}

/* --grad-reduce-dtype's default is the frameworks': fp16 under fp16 (Megatron, DeepSpeed), fp32
 * under bf16 (Megatron's fp32 gradient accumulation; PyTorch DDP under autocast reduces the fp32
 * parameters' gradients) and fp32; fp32 in --mode real, whose build reduces in fp32. The DDP
 * buckets carry Ψ times its bytes. */
static void test_grad_dtype(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  const struct {
    gpu_precision prec;
    cfg_mode mode;
    int given;
    gpu_precision want;
  } cases[] = {{GPU_FP32, CFG_MODE_ANALYTIC, -1, GPU_FP32}, {GPU_TF32, CFG_MODE_SIM, -1, GPU_FP32},
               {GPU_BF16, CFG_MODE_SIM, -1, GPU_FP32},     {GPU_FP16, CFG_MODE_SIM, -1, GPU_FP16},
               {GPU_FP16, CFG_MODE_REAL, -1, GPU_FP32},    {GPU_BF16, CFG_MODE_SIM, GPU_BF16, GPU_BF16},
               {GPU_FP32, CFG_MODE_SIM, GPU_FP16, GPU_FP16}};
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    cfg_run c;
    cfg_init(&c);
    c.gpus = 4;
    c.batch = 8;
    c.precision = cases[k].prec;
    c.mode = cases[k].mode;
    if (cases[k].given >= 0) c.grad_reduce = cases[k].given;
    CU_ASSERT_FATAL(cfg_resolve(&c, 8, NULL));
    CU_ASSERT_EQUAL(c.grad_reduce, (int)cases[k].want);
    plan_rank *p = dl_cu_build(m, &c, 0);
    CU_ASSERT(close_to(sum(p, COLL_ALLREDUCE, PLAN_WHY_GRAD, PLAN_GRP_DP, NULL),
                       (double)m->params * gpu_precision_bytes(cases[k].want), 1e-12));
    CU_ASSERT_EQUAL(p->mem.grads, (double)m->params * gpu_precision_bytes(cases[k].want));
    plan_rank_free(p);
    cfg_release(&c);
  }
  cfg_run c;
  cfg_init(&c);
  c.grad_reduce = GPU_TF32;
  GError *e = NULL;
  CU_ASSERT_FALSE(cfg_resolve(&c, 8, &e));
  CU_ASSERT(e && strstr(e->message, "--grad-reduce-dtype"));
  g_clear_error(&e);
  cfg_release(&c);
  wl_free(m);
}

static const dl_cu_test zero_tests[] = {
    DL_CU_TEST(test_grad_dtype),
    DL_CU_TEST(test_model_states), DL_CU_TEST(test_volumes), DL_CU_TEST(test_hybrid_groups),
    DL_CU_TEST(test_prefetch), DL_CU_TEST(test_equivalent_ranks), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"zero", zero_tests}, {NULL, NULL}};
