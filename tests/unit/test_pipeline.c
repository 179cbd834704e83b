/* test_pipeline.c — interleaved 1F1B (plan/schedule.c, build.c) against Megatron's schedule.
 *
 * Narayanan et al. 2021 (Section 2.2) and Megatron-LM's forward_backward_pipelining_with_
 * interleaving: with V model chunks per rank, rank s of p runs (p − s − 1)·2 + (V − 1)·p warm-up
 * forwards (all m·V when m = p), so it keeps that many micro-batch chunks plus one in flight;
 * every virtual stage boundary (p·V − 1 of them) carries each micro-batch forward and its
 * gradient back: the point-to-point traffic grows from 2(p − 1)·m to 2(pV − 1)·m messages. The
 * bubble itself, (p − 1)/(V·m) of the ideal time, is checked on timed runs
 * (tests/sim/check_pipeline.py).
 */
#include <stdio.h>
#include <string.h>

#include "cu_plan.h"

static void config(cfg_run *c, const wl_model *m, int gpus, int tp, int pp, int V, int mb) {
  cfg_init(c);
  c->gpus = gpus;
  c->tp = tp;
  c->pp = pp;
  c->microbatches = mb;
  c->batch = 2L * mb * (gpus / tp / pp);
  c->mode = CFG_MODE_ANALYTIC;
  c->schedule = V > 1 ? CFG_SCHED_INTERLEAVED : CFG_SCHED_1F1B;
  c->virtual_stages = V;
  GError *e = NULL;
  if (!cfg_resolve(c, c->batch, &e)) fprintf(stderr, "\n%s\n", e->message);
  CU_ASSERT_FATAL(e == NULL);
  cfg_resolve_style(c, wl_has_tp_roles(m));
}

/* gpt-1.7b (26 pipeline units: the embedding, 24 blocks, the head's layers) on p = 4 with
 * V = 2 and 3, m = 8 and m = p: each micro-batch chunk's forward precedes its backward, each
 * runs once, and the most chunks in flight is Megatron's warm-up plus one. */
static void test_interleaved_order(void) {
  wl_model *m = dl_cu_load("gpt-1.7b");
  const int cases[][3] = {{4, 2, 8}, {4, 3, 8}, {4, 2, 4}, {2, 4, 6}};
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    const int p = cases[k][0], V = cases[k][1], mb = cases[k][2];
    cfg_run c;
    config(&c, m, p, 1, p, V, mb);
    for (int s = 0; s < p; s++) {
      plan_rank *pl = dl_cu_build(m, &c, s);
      CU_ASSERT_EQUAL(pl->n_chunks, V);
      /* forwards and backwards of each (micro-batch, chunk): once each, in that order */
      int *fwd_at = g_new(int, mb * V), *bwd_at = g_new(int, mb * V), k_op = 0;
      for (int i = 0; i < mb * V; i++) fwd_at[i] = bwd_at[i] = -1;
      for (int i = 0; i < pl->n_ops; i++) {
        const plan_op *op = &pl->ops[i];
        if (op->kind != PLAN_KERNEL || op->microbatch < 0) continue;
        int v = -1;
        for (int w = 0; w < V && v < 0; w++) {
          int l0, l1;
          plan_chunk_layers(pl, w, &l0, &l1);
          if (op->layer >= l0 && op->layer < l1) v = w;
        }
        CU_ASSERT_FATAL(v >= 0);
        int *at = op->phase == PLAN_PH_FWD ? fwd_at : bwd_at;
        const int key = op->microbatch * V + v;
        if (at[key] < 0) at[key] = k_op;
        k_op++;
      }
      gboolean ordered = TRUE;
      for (int i = 0; i < mb * V; i++)
        ordered = ordered && fwd_at[i] >= 0 && bwd_at[i] > fwd_at[i];
      CU_ASSERT(ordered);
      const int want = mb == p ? mb * V : MIN((p - s - 1) * 2 + (V - 1) * p + 1, mb * V);
      if (pl->max_stash != want)
        fprintf(stderr, "\np %d V %d m %d stage %d: %d in flight, want %d\n", p, V, mb, s,
                pl->max_stash, want);
      CU_ASSERT_EQUAL(pl->max_stash, want);
      g_free(fwd_at);
      g_free(bwd_at);
      plan_rank_free(pl);
    }
    cfg_release(&c);
  }
  wl_free(m);
}

/* Messages: 2(pV − 1)·m over the pipeline with V chunks, 2(p − 1)·m without; every send has
 * its receive on the peer with the same tag and bytes. */
static void test_interleaved_messages(void) {
  wl_model *m = dl_cu_load("gpt-1.7b");
  const int p = 4, mb = 8;
  for (int V = 1; V <= 3; V++) {
    cfg_run c;
    config(&c, m, p, 1, p, V, mb);
    plan_rank *pl[4];
    int sends = 0, matched = 0;
    for (int s = 0; s < p; s++) pl[s] = dl_cu_build(m, &c, s);
    for (int s = 0; s < p; s++)
      for (int i = 0; i < pl[s]->n_ops; i++) {
        const plan_op *op = &pl[s]->ops[i];
        if (op->kind != PLAN_SEND) continue;
        sends++;
        const plan_rank *q = pl[plan_op_peer(pl[s], op)];
        int found = 0;
        for (int j = 0; j < q->n_ops; j++)
          found += q->ops[j].kind == PLAN_RECV && plan_op_peer(q, &q->ops[j]) == s &&
                   q->ops[j].tag == op->tag && q->ops[j].bytes == op->bytes;
        matched += found == 1;
        CU_ASSERT(op->tag >= 0 && op->tag < COLL_TAG_BASE);
      }
    CU_ASSERT_EQUAL(sends, 2 * (p * V - 1) * mb);
    CU_ASSERT_EQUAL(matched, sends);
    for (int s = 0; s < p; s++) plan_rank_free(pl[s]);
    cfg_release(&c);
  }
  wl_free(m);
}

/* Every rank of an interleaved 3-D layout runs its representative's op list (what folding
 * needs), and the chunks of all ranks cover each layer once. */
static void test_interleaved_equivalent(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  cfg_run c;
  config(&c, m, 16, 2, 2, 2, 4);
  int *owners = g_new0(int, m->n_layers);
  for (int r = 0; r < c.gpus; r++) {
    plan_rank *own = dl_cu_build(m, &c, r);
    plan_rank *rep = dl_cu_build(m, &c, plan_representative(m, &c, r));
    gboolean same = own->n_ops == rep->n_ops;
    for (int i = 0; same && i < own->n_ops; i++)
      same = own->ops[i].kind == rep->ops[i].kind && own->ops[i].bytes == rep->ops[i].bytes &&
             own->ops[i].tag == rep->ops[i].tag && own->ops[i].wait_event == rep->ops[i].wait_event;
    CU_ASSERT(same);
    int dp_i, tp_i, pp_i;
    plan_coords(&c, r, &dp_i, &tp_i, &pp_i);
    for (int i = 0; dp_i == 0 && tp_i == 0 && i < m->n_layers; i++) owners[i] += plan_holds_layer(own, i);
    plan_rank_free(own);
    plan_rank_free(rep);
  }
  gboolean once = TRUE;
  for (int i = 0; i < m->n_layers; i++) once = once && owners[i] == 1;
  CU_ASSERT(once);
  g_free(owners);
  cfg_release(&c);
  wl_free(m);
}

/* What the configuration refuses: V without interleaving, interleaving without V or a
 * pipeline, micro-batches that are not a multiple of pp, more chunks than pipeline units. */
static void test_interleaved_refusals(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  struct {
    int pp, V, mb;
    cfg_schedule sched;
    const char *says;
  } cases[] = {
      {2, 2, 4, CFG_SCHED_1F1B, "--virtual-stages 2: only with --schedule interleaved"},
      {2, 0, 4, CFG_SCHED_INTERLEAVED, "needs --pp 2 or more and --virtual-stages V >= 2"},
      {2, 2, 3, CFG_SCHED_INTERLEAVED, "--microbatches 3 must be a multiple of --pp 2"},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    cfg_run c;
    cfg_init(&c);
    c.gpus = cases[k].pp;
    c.pp = cases[k].pp;
    c.virtual_stages = cases[k].V;
    c.microbatches = cases[k].mb;
    c.schedule = cases[k].sched;
    c.batch = 12;
    GError *e = NULL;
    CU_ASSERT_FALSE(cfg_resolve(&c, 12, &e));
    CU_ASSERT(e && strstr(e->message, cases[k].says));
    if (e && !strstr(e->message, cases[k].says)) fprintf(stderr, "\n%s\n", e->message);
    g_clear_error(&e);
    cfg_release(&c);
  }
  /* gpt-tiny has 7 pipeline units: 4 x 2 chunks do not fit */
  cfg_run c;
  config(&c, m, 4, 1, 4, 1, 4);
  c.schedule = CFG_SCHED_INTERLEAVED;
  c.virtual_stages = 2;
  GError *e = NULL;
  CU_ASSERT_PTR_NULL(plan_build(m, &c, NULL, 0, &e));
  CU_ASSERT(e && strstr(e->message, "--pp 4 --virtual-stages 2") &&
            strstr(e->message, "model chunks"));
  g_clear_error(&e);
  cfg_release(&c);
  wl_free(m);
}

/* --recompute under Megatron tp (gpt-tiny, tp 2, pp 2, m 4, with and without sp): the
 * recomputed forward runs the forward's tensor-parallel sums again, as Megatron's checkpointed
 * forward does: per micro-batch and layer, one re-run collective of the same kind, group and
 * bytes in backward for each forward one, right after that layer's recomputed kernel. */
static void test_recompute_reruns_tp_sums(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  for (int sp = 0; sp < 2; sp++) {
    cfg_run c;
    config(&c, m, 4, 2, 2, 1, 4);
    c.sequence_parallel = sp;
    c.recompute = TRUE;
    for (int r = 0; r < c.gpus; r++) {
      plan_rank *p = dl_cu_build(m, &c, r);
      int fwd = 0, again = 0;
      double fwd_bytes = 0, again_bytes = 0;
      for (int i = 0; i < p->n_ops; i++) {
        const plan_op *op = &p->ops[i];
        if (op->kind != PLAN_COLL || op->purpose != PLAN_WHY_FWD_REDUCE) continue;
        if (op->phase == PLAN_PH_FWD) {
          fwd++, fwd_bytes += op->bytes;
          continue;
        }
        CU_ASSERT(op->recompute && op->group == PLAN_GRP_TP);
        /* right after the layer's recomputed kernel */
        const plan_op *k = &p->ops[i - 1];
        CU_ASSERT(k->kind == PLAN_KERNEL && k->recompute && k->layer == op->layer);
        again++, again_bytes += op->bytes;
      }
      CU_ASSERT(fwd > 0);
      CU_ASSERT_EQUAL(again, fwd);
      CU_ASSERT_DOUBLE_EQUAL(again_bytes, fwd_bytes, 1e-9 * fwd_bytes);
      plan_rank_free(p);
    }
    cfg_release(&c);
  }
  wl_free(m);
}

static const dl_cu_test pipeline_tests[] = {
    DL_CU_TEST(test_recompute_reruns_tp_sums),
    DL_CU_TEST(test_interleaved_order), DL_CU_TEST(test_interleaved_messages),
    DL_CU_TEST(test_interleaved_equivalent), DL_CU_TEST(test_interleaved_refusals), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"pipeline", pipeline_tests}, {NULL, NULL}};
