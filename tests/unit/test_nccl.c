/* test_nccl.c — NCCL's protocol model against NCCL 2.30's formulas worked by hand
 * (src/graph/tuning.cc: ncclTopoTuneModel, ncclTopoGetAlgoTime), the channel rings' layout,
 * and the closed form's ring under the model. */
#include <glib.h>
#include <math.h>

#include "coll/coll.h"
#include "coll/cost.h"
#include "coll/nccl.h"
#include "cu_main.h"

/* ThetaGPU as NCCL sees it: A100 (Ampere), NVLink 12 x 25 GB/s, eight 25 GB/s NICs a node, AMD
 * EPYC CPUs. */
static nccl_env thetagpu(int proto) { return (nccl_env){1, 1, 300e9, 25e9, 8, proto, 1}; }

static void test_one_node(void) {
  nccl_env e = thetagpu(NCCL_SIMPLE);
  nccl_call c;
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 256e6, 8, 1);
  CU_ASSERT_EQUAL(c.proto, NCCL_SIMPLE);
  /* base 8.4 us + 2(8-1) steps x NVLink ring Simple 3.4 us */
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (8.4 + 14 * 3.4) * 1e-6, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(c.eff, 1, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(c.nvl_eff, 20.0 / 25.0, 1e-12); /* SM80_NVLINK_BW over the link's rate */
  CU_ASSERT_EQUAL(c.channels, 12);                       /* 300 GB/s of 25 GB/s links */
  /* NCCL's prediction: latency + bytes / (bus bandwidth 12 x 20 GB/s x P / nsteps) */
  CU_ASSERT_DOUBLE_EQUAL(c.predicted_s, c.lat_s + 256e6 / (240e9 * 8 / 14), 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(nccl_wire_bytes(&c, 1, 1000), 1000 / 0.8, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(nccl_wire_bytes(&c, 0, 1000), 1000, 1e-9);

  e.proto = NCCL_LL; /* half the bus, at most llMaxBw (Ampere, one node) 87.7 GB/s */
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 256e6, 8, 1);
  CU_ASSERT_DOUBLE_EQUAL(c.eff, 87.7 / 240, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (6.6 + 14 * 0.6) * 1e-6, 1e-12);
  e.proto = NCCL_LL128; /* 92 %, at most 20 GB/s a channel: 220.8 of 240 */
  nccl_plan(&c, &e, COLL_ALLGATHER, "ring", 1e6, 8, 1);
  CU_ASSERT_DOUBLE_EQUAL(c.eff, 0.92, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (14.0 + 7 * 1.9) * 1e-6, 1e-12); /* P-1 steps */

  /* auto: LL for 8 bytes (latency 15 us against 56), Simple for 256 MB */
  e.proto = NCCL_PROTO_AUTO;
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 8, 8, 1);
  CU_ASSERT_EQUAL(c.proto, NCCL_LL);
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 256e6, 8, 1);
  CU_ASSERT_EQUAL(c.proto, NCCL_SIMPLE);
}

static void test_nodes(void) {
  nccl_env e = thetagpu(NCCL_SIMPLE);
  nccl_call c;
  /* 8 nodes of 8: intra-node steps max(3.4, 3 x 2 us network overhead on AMD), 2(8-1) network
   * steps at 14 us, times the ring's plateau 1.4; on Intel the overhead is 1 us */
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 512e6, 64, 8);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (8.4 + 112 * 6.0 + 14 * 14.0) * 1.4e-6, 1e-12);
  e.cpu_amd = 0;
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 512e6, 64, 8);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (8.4 + 112 * 3.4 + 14 * 14.0) * 1.4e-6, 1e-12);
  e.cpu_amd = 1;
  CU_ASSERT_EQUAL(c.channels, 16); /* two per NIC */
  CU_ASSERT_DOUBLE_EQUAL(c.predicted_s, c.lat_s + 512e6 / (200e9 * 64 / 126), 1e-12);
  e.proto = NCCL_LL128; /* 92 % of 8 x 25 GB/s, under 16 x 20 */
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 512e6, 64, 8);
  CU_ASSERT_DOUBLE_EQUAL(c.eff, 0.92, 1e-12);
  /* tree, 2 nodes: base 8.4 + 2((8-1) x NVLink tree 4.0 + log2(2) x network tree 14) */
  e.proto = NCCL_SIMPLE;
  nccl_plan(&c, &e, COLL_ALLREDUCE, "tree", 1 << 26, 16, 2);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (8.4 + 2 * (7 * 4.0 + 14.0)) * 1e-6, 1e-12);
  /* 92 % (under 16 x 23.6 GB/s), times treeCorrectionFactor[Simple][log2(2^26 / 64) = 20] .8 */
  CU_ASSERT_DOUBLE_EQUAL(c.eff, 0.92 * 0.8, 1e-12);
  /* one GPU per node: the network tree latency for the ring's steps, one NIC */
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 1e6, 8, 8);
  CU_ASSERT_DOUBLE_EQUAL(c.lat_s, (8.4 + 14 * 14.0) * 1.4e-6, 1e-12);
  CU_ASSERT_EQUAL(c.channels, 2);
}

static void test_inert_and_choice(void) {
  nccl_env e = thetagpu(NCCL_PROTO_OFF);
  nccl_call c;
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 1e6, 8, 1);
  CU_ASSERT_EQUAL(c.proto, NCCL_PROTO_OFF);
  CU_ASSERT_DOUBLE_EQUAL(nccl_wire_bytes(&c, 1, 1000), 1000, 0);
  e = thetagpu(NCCL_PROTO_AUTO);
  nccl_plan(&c, &e, COLL_ALLREDUCE, "hier", 1e6, 16, 2); /* not one of NCCL's algorithms */
  CU_ASSERT_EQUAL(c.proto, NCCL_PROTO_OFF);
  nccl_plan(&c, &e, COLL_BROADCAST, "ring", 1e6, 16, 2);
  CU_ASSERT_EQUAL(c.proto, NCCL_PROTO_OFF);
  e.arch = -1; /* the CPU twins: no NCCL */
  nccl_plan(&c, &e, COLL_ALLREDUCE, "ring", 1e6, 8, 1);
  CU_ASSERT_EQUAL(c.proto, NCCL_PROTO_OFF);
  /* NCCL's choice: the ring at two nodes for 25 MB, the tree at 512 nodes, where a ring's
   * 8,190 steps cost (8.4 + 7168 x 6 + 1022 x 14) x 1.4 us = 80 ms */
  e = thetagpu(NCCL_PROTO_AUTO);
  CU_ASSERT_STRING_EQUAL(coll_default_env(COLL_ALLREDUCE, 25e6, 16, 2, &e), "ring");
  CU_ASSERT_STRING_EQUAL(coll_default_env(COLL_ALLREDUCE, 25e6, 4096, 512, &e), "tree");
  CU_ASSERT_STRING_EQUAL(coll_default_env(COLL_ALLGATHER, 25e6, 4096, 512, &e), "ring");
  CU_ASSERT_STRING_EQUAL(coll_default_env(COLL_ALLREDUCE, 100e6, 1024, 128, NULL),
                         coll_default(COLL_ALLREDUCE, 100e6, 1024, 128));
}

static void test_env_string(void) {
  nccl_env e = thetagpu(NCCL_LL128), back;
  char *s = nccl_env_to_string(&e);
  CU_ASSERT_TRUE(nccl_env_parse(s, &back));
  CU_ASSERT_EQUAL(back.arch, 1);
  CU_ASSERT_EQUAL(back.nics, 8);
  CU_ASSERT_EQUAL(back.proto, NCCL_LL128);
  CU_ASSERT_DOUBLE_EQUAL(back.intra_bps, 300e9, 0);
  g_free(s);
  CU_ASSERT_EQUAL(back.cpu_amd, 1);
  CU_ASSERT_FALSE(nccl_env_parse("1,1,3e11,2.5e10,8,0", &back));   /* a field short */
  CU_ASSERT_FALSE(nccl_env_parse("1,1,3e11,2.5e10,8,7,0", &back)); /* no protocol 7 */
  CU_ASSERT_FALSE(nccl_env_parse("9,1,3e11,2.5e10,8,0,0", &back)); /* no generation 9 */
  CU_ASSERT_FALSE(nccl_env_parse(NULL, &back));
  int p;
  CU_ASSERT_TRUE(nccl_proto_parse("ll128", &p));
  CU_ASSERT_EQUAL(p, NCCL_LL128);
  CU_ASSERT_FALSE(nccl_proto_parse("LL64", &p));
}

/* The channel rings: every ring visits every member once, and each hop between nodes joins two
 * GPUs of one local index (one rail), each rail used once each way per ring set. */
static void test_ring_layout(void) {
  const int rpn = 8, P = 40, k = coll_ring_channels(P, rpn); /* 5 nodes: an odd count */
  CU_ASSERT_EQUAL(k, 8);
  CU_ASSERT_EQUAL(coll_ring_channels(12, 8), 1); /* not whole nodes */
  CU_ASSERT_EQUAL(coll_ring_channels(8, 8), 1);  /* one node */
  int cross_rail = 0;
  for (int j = 0; j < k; j++) {
    int seen[40] = {0};
    for (int i = 0; i < P; i++) {
      const int m = coll_flat_ring_member(k, P, rpn, j, i), n = coll_flat_ring_member(k, P, rpn, j, i + 1);
      seen[m]++;
      CU_ASSERT_EQUAL(coll_flat_ring_pos(k, rpn, j, m), i);
      if (m / rpn != n / rpn && m % rpn != n % rpn) cross_rail++;
    }
    for (int m = 0; m < P; m++) CU_ASSERT_EQUAL(seen[m], 1);
  }
  CU_ASSERT_EQUAL(cross_rail, k); /* only the wrap-around of an odd node count */
}

/* The closed form's ring under the model: max(NCCL's latency, the steps' route latency) plus
 * the steps' bytes, widened on NVLink, at the slower of the two hop classes. */
static void test_cost(void) {
  nccl_env e = thetagpu(NCCL_SIMPLE);
  coll_group g = {.P = 8, .nodes = 1, .per_node = 8, .ring_alpha_s = 2e-6, .ring_beta_bps = 300e9,
                  .chan_k = 1, .chan_alpha_s = 2e-6, .chan_intra_beta_bps = 300e9,
                  .chan_inter_beta_bps = INFINITY, .nccl = &e};
  const double n = 256e6, lat = (8.4 + 14 * 3.4) * 1e-6;
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLREDUCE, "ring", n, &g),
                         lat + 14 * (n / 8) / (0.8 * 300e9), 1e-12);
  g.nccl = NULL;
  CU_ASSERT_DOUBLE_EQUAL(coll_cost_s(COLL_ALLREDUCE, "ring", n, &g),
                         14 * (2e-6 + (n / 8) / 300e9), 1e-12);
}

static const dl_cu_test tests[] = {DL_CU_TEST(test_one_node), DL_CU_TEST(test_nodes),
                                   DL_CU_TEST(test_inert_and_choice), DL_CU_TEST(test_env_string),
                                   DL_CU_TEST(test_ring_layout), DL_CU_TEST(test_cost), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"nccl", tests}, {NULL, NULL}};
