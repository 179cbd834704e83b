/* test_search.c — `dlsim search`'s space (study/search.c) on a case worked by hand.
 *
 * gpt-tiny (4 heads, 2 residual blocks, 8 pipeline units: three embedding layers, the blocks, the
 * final norm, the output layer and the loss; attention that keeps its probabilities) on 4 GPUs,
 * batch 8, one node of 4 GPUs, sequences too short for context parallelism:
 *   tp ∈ {1, 2, 4} (divides the heads), sp ∈ {off, on} when tp > 1;
 *   pp ∈ divisors of 4/tp; dp = 4/(tp·pp); micro-batch sizes: the divisors of 8/dp;
 *   interleaving needs pp | 2 blocks and V | 2/pp blocks, V >= 2: never here;
 *   sharding: none when dp = 1; none or ZeRO 1 beside a pipeline; else none, ZeRO 1-3, FSDP full
 *   and grad-op (hybrid needs more replicas than a node's: 4/tp = dp, no);
 *   recomputation: none, selective, full.
 *   tp 1: pp 1: dp 4, 2 sizes × 6 × 3 = 36; pp 2: dp 2, 3 × 2 × 3 = 18; pp 4: dp 1, 4 × 1 × 3 = 12
 *   tp 2 (× 2 for sp): pp 1: dp 2, 3 × 6 × 3 = 54; pp 2: dp 1, 4 × 1 × 3 = 12
 *   tp 4 (× 2 for sp): pp 1: dp 1, 4 × 1 × 3 = 12
 *   66 + 2·66 + 2·12 = 222. */
#include <string.h>

#include "cu_plan.h"
#include "study/search.h"

static void test_space_by_hand(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  run_ctx x;
  memset(&x, 0, sizeof x);
  cfg_init(&x.cfg);
  x.cfg.gpus = 4;
  x.cfg.batch = 8;
  x.model = m;
  search_opts o = {.top = 10, .min_cp_tokens = SEARCH_MIN_CP_TOKENS, .jobs = 1};
  GArray *space = g_array_new(FALSE, FALSE, sizeof(cfg_run));
  search_enumerate(&x, &o, space);
  CU_ASSERT_EQUAL(space->len, 222);
  /* each (tp, sp, pp, micro-batches, sharding, recomputation) once */
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  int sp_without_tp = 0, sharded_without_dp = 0;
  for (guint i = 0; i < space->len; i++) {
    const cfg_run *c = &g_array_index(space, cfg_run, i);
    char *a = search_layout_args(c);
    CU_ASSERT_FALSE(g_hash_table_contains(seen, a));
    g_hash_table_add(seen, a);
    sp_without_tp += c->sequence_parallel && c->tp < 2;
    sharded_without_dp += (c->zero || c->fsdp != CFG_FSDP_NONE) && c->gpus / c->tp / c->pp < 2;
  }
  CU_ASSERT_EQUAL(sp_without_tp, 0);
  CU_ASSERT_EQUAL(sharded_without_dp, 0);
  /* context parallelism while each rank keeps 16 of the 32 tokens: cp 2 (ring and Ulysses)
   * joins where 4/tp/pp leaves room for it, cp 4 (8 tokens a rank) does not */
  o.min_cp_tokens = 16;
  g_array_set_size(space, 0);
  search_enumerate(&x, &o, space);
  int cp2 = 0, cp4 = 0;
  for (guint i = 0; i < space->len; i++) {
    const cfg_run *c = &g_array_index(space, cfg_run, i);
    cp2 += c->cp == 2, cp4 += c->cp == 4;
  }
  CU_ASSERT(cp2 > 0);
  CU_ASSERT_EQUAL(cp4, 0);
  g_hash_table_destroy(seen);
  g_array_free(space, TRUE);
  cfg_release(&x.cfg);
  wl_free(m);
}

static const dl_cu_test search_tests[] = {DL_CU_TEST(test_space_by_hand), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"search", search_tests}, {NULL, NULL}};
