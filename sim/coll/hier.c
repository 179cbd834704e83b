/* hier.c — the hierarchical all-reduce. */
#include <glib.h>

#include "coll/coll_mpi.h"

/* Reduce-scatter over the node's NVSwitch, all-reduce of this rank's block with the ranks of the
 * same local index on the other nodes (ring), all-gather over the node, one phase after the
 * other: intra-node traffic 2(rpn-1)/rpn·n, inter-node 2(nodes-1)/nodes·n/rpn per rank
 * (Horovod's hierarchical all-reduce). Not one of NCCL's algorithms: plain alpha-beta, no
 * protocol model. Falls back to the flat ring unless P = ranks_per_node × n_nodes with both
 * > 1. */
int coll_allreduce_hier(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  coll_topo t;
  coll_topo_init(&t, r, P, topo ? topo->ranks_per_node : P);
  int rpn = t.ranks_per_node, nodes = t.n_nodes;
  if (rpn < 2 || nodes < 2 || rpn * nodes != P)
    return coll_allreduce_ring(sendbuf, recvbuf, bytes, comm, topo, op);
  size_t n = bytes / COLL_ELEM_BYTES;
  int *intra = g_new(int, rpn), *inter = g_new(int, nodes);
  for (int j = 0; j < rpn; j++) intra[j] = t.node * rpn + j;
  for (int k = 0; k < nodes; k++) inter[k] = k * rpn + t.local_rank;
  coll_rings a, b;
  coll_rings_list(&a, intra, rpn, t.local_rank, rpn);
  coll_rings_list(&b, inter, nodes, t.node, 1);
  float *acc = recvbuf;
  const size_t off = coll_chunk_off(n, rpn, t.local_rank), len = coll_chunk_len(n, rpn, t.local_rank);
  int rc = coll_rings_rs(sendbuf, acc, n, &a, comm, op);
  if (rc == MPI_SUCCESS) rc = coll_rings_ar(NULL, acc + off, len, &b, comm, op);
  if (rc == MPI_SUCCESS) rc = coll_rings_ag(acc, n, &a, comm);
  g_free(intra);
  g_free(inter);
  return rc;
}
