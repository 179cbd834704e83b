/* test_coll_info.c — the MPI-free part of the collectives: table, default choice, byte counts. */
#include <glib.h>
#include <string.h>

#include "coll/coll.h"
#include "cu_main.h"

static void test_lookup(void) {
  CU_ASSERT_PTR_NOT_NULL(coll_info_find(COLL_ALLREDUCE, "ring"));
  CU_ASSERT_PTR_NOT_NULL(coll_info_find(COLL_ALLREDUCE, "smpi:lr"));
  CU_ASSERT_PTR_NULL(coll_info_find(COLL_ALLREDUCE, "ring:x"));
  CU_ASSERT_PTR_NULL(coll_info_find(COLL_ALLTOALL, "tree"));
  CU_ASSERT_PTR_NULL(coll_info_find(COLL_ALLREDUCE, "rin"));
  int n;
  const coll_algo_info *const *l = coll_list(COLL_ALLREDUCE, &n);
  CU_ASSERT_EQUAL(n, 5); /* ring tree hier rhd smpi */
  CU_ASSERT_STRING_EQUAL(l[0]->name, "ring");
  CU_ASSERT_PTR_NULL(l[n]);
  CU_ASSERT_EQUAL(coll_op_parse("reducescatter"), COLL_REDUCESCATTER);
  CU_ASSERT_EQUAL(coll_op_parse("reduce"), -1);
  CU_ASSERT_STRING_EQUAL(coll_op_name(COLL_SENDRECV), "sendrecv");
}

static void test_smpi_cfg(void) {
  char *c = coll_smpi_cfg(COLL_REDUCESCATTER, "smpi:ompi_ring");
  CU_ASSERT_STRING_EQUAL(c, "smpi/reduce_scatter:ompi_ring");
  g_free(c);
  CU_ASSERT_PTR_NULL(coll_smpi_cfg(COLL_ALLREDUCE, "smpi"));
  CU_ASSERT_PTR_NULL(coll_smpi_cfg(COLL_SENDRECV, "smpi:x"));
}

static void test_default(void) {
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLREDUCE, 100e6, 8, 1), "ring");
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLREDUCE, 100e6, 1024, 128), "ring");
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLREDUCE, 1e6, 1024, 128), "tree");
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLREDUCE, 1e6, 8, 8), "ring"); /* one GPU per node, P < 16 */
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLGATHER, 1e6, 1024, 128), "ring");
  CU_ASSERT_STRING_EQUAL(coll_default(COLL_ALLTOALL, 1e6, 16, 2), "pairwise");
}

static void test_wire_bytes(void) {
  /* ring all-reduce, P = 4, 1 MiB: 2·3/4 MiB */
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLREDUCE, "ring", 1048576, 4, NULL), 1572864, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLREDUCE, "tree", 1048576, 4, NULL), 1572864, 1e-6);
  /* rhd, P = 6: p2 = 4, rem = 2: (2·2·n + 2·3·n)/6 = 10n/6 */
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLREDUCE, "rhd", 600, 6, NULL), 1000, 1e-9);
  /* hier, 2 nodes × 8: (2·2·7·n + 2·1·n)/16 = 30n/16 */
  coll_topo t;
  coll_topo_init(&t, 0, 16, 8);
  CU_ASSERT_EQUAL(t.n_nodes, 2);
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLREDUCE, "hier", 1600, 16, &t), 3000, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLGATHER, "ring", 800, 8, NULL), 700, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_SENDRECV, "pairwise", 800, 8, NULL), 800, 1e-9);
  /* rhd reduce-scatter, P = 3: p2 = 2, rem = 1: (n + n + n/3)/3 */
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_REDUCESCATTER, "rhd", 900, 3, NULL), 700, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(coll_wire_bytes(COLL_ALLREDUCE, "nope", 900, 3, NULL), -1, 0);
}

static void test_busbw_round(void) {
  CU_ASSERT_DOUBLE_EQUAL(coll_busbw_factor(COLL_ALLREDUCE, 16), 30.0 / 16, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(coll_busbw_factor(COLL_ALLGATHER, 16), 15.0 / 16, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(coll_busbw_factor(COLL_BROADCAST, 16), 1, 0);
  CU_ASSERT_EQUAL(coll_round_bytes(COLL_ALLGATHER, 1000, 3), 996);
  CU_ASSERT_EQUAL(coll_round_bytes(COLL_ALLREDUCE, 1003, 3), 1000);
  CU_ASSERT_EQUAL(coll_round_bytes(COLL_ALLTOALL, 8, 3), 0);
}

/* NCCL's trees over nodes, against the pictures in NCCL's src/graph/trees.cc: 14 nodes
 * (0 -> 8 -> 4, 12; 12 -> 10, 13; 2 -> 1, 3), their mirror on 12 nodes (11 -> 3 -> 1, 7) and
 * shift on 13 (1 -> 9 -> 5, 0; 0 -> 11). */
static void test_tree_nodes(void) {
  int up, d0, d1;
  coll_tree_node(14, 0, 0, &up, &d0, &d1);
  CU_ASSERT(up == -1 && d0 == -1 && d1 == 8);
  coll_tree_node(14, 0, 8, &up, &d0, &d1);
  CU_ASSERT(up == 0 && d0 == 4 && d1 == 12);
  coll_tree_node(14, 0, 12, &up, &d0, &d1);
  CU_ASSERT(up == 8 && d0 == 10 && d1 == 13);
  coll_tree_node(14, 0, 13, &up, &d0, &d1);
  CU_ASSERT(up == 12 && d0 == -1 && d1 == -1);
  coll_tree_node(14, 0, 2, &up, &d0, &d1);
  CU_ASSERT(up == 4 && d0 == 1 && d1 == 3);
  coll_tree_node(12, 1, 11, &up, &d0, &d1);
  CU_ASSERT(up == -1 && d0 == -1 && d1 == 3);
  coll_tree_node(12, 1, 3, &up, &d0, &d1);
  CU_ASSERT(up == 11 && d0 == 7 && d1 == 1);
  coll_tree_node(13, 1, 1, &up, &d0, &d1);
  CU_ASSERT(up == -1 && d1 == 9);
  coll_tree_node(13, 1, 0, &up, &d0, &d1);
  CU_ASSERT(up == 9 && d0 == 11 && d1 == -1);
  /* every size: each tree spans all nodes (parent and child agree, the root reached from each
   * node within floor(log2 N) + 1 hops), and no node has more than 2 children in a tree */
  for (int N = 1; N <= 130; N++)
    for (int t = 0; t < 2; t++) {
      int roots = 0, ok = 1;
      for (int x = 0; x < N; x++) {
        coll_tree_node(N, t, x, &up, &d0, &d1);
        roots += up < 0;
        int kids[2] = {d0, d1};
        for (int c = 0; c < 2; c++)
          if (kids[c] >= 0) {
            int u, a, b;
            coll_tree_node(N, t, kids[c], &u, &a, &b);
            ok &= u == x;
          }
        int y = x, hops = 0;
        while (y >= 0 && hops <= 9) {
          coll_tree_node(N, t, y, &up, &d0, &d1);
          y = up, hops++;
        }
        ok &= y < 0;
      }
      CU_ASSERT_EQUAL(roots, 1);
      CU_ASSERT(ok);
    }
  /* depth as NCCL counts it: 8 GPUs of a node, 128 nodes: 7 + 7 */
  CU_ASSERT_EQUAL(coll_tree_depth(1024, 8), 14);
  CU_ASSERT_EQUAL(coll_tree_depth(8, 8), 7);
  CU_ASSERT_EQUAL(coll_tree_depth(12, 1), 3);
  CU_ASSERT_EQUAL(coll_tree_depth(1, 8), 0);
  /* flows per GPU link, trees and rings: whole nodes of 8, inside 4 x 7 against 7; across 2
   * nodes each node has one edge per tree (2), across 4 or more an inner node of one tree is a
   * leaf of the other (4), against the rings' 1; one node of 2: a chain of two, each GPU sends
   * on both pipelines one way (2) */
  double tree[2], ring[2];
  coll_tree_flows(16, 8, tree, ring);
  CU_ASSERT(tree[1] == 28 && ring[1] == 7 && tree[0] == 2 && ring[0] == 1);
  coll_tree_flows(1024, 8, tree, ring);
  CU_ASSERT(tree[1] == 28 && tree[0] == 4);
  coll_tree_flows(2, 2, tree, ring);
  CU_ASSERT(tree[1] == 2 && ring[1] == 1 && tree[0] == 0);
}

static const dl_cu_test tests[] = {DL_CU_TEST(test_lookup), DL_CU_TEST(test_smpi_cfg),
                                   DL_CU_TEST(test_tree_nodes),
                                   DL_CU_TEST(test_default), DL_CU_TEST(test_wire_bytes),
                                   DL_CU_TEST(test_busbw_round), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"coll_info", tests}, {NULL, NULL}};
