/* coll.c — the algorithm table, the "smpi" pass-throughs, pairwise exchanges and the
 * hierarchical all-reduce. Ring, tree and halving-doubling algorithms live in coll_ring.c,
 * coll_tree.c and coll_rhd.c. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

static const coll_algo algos[] = {
#define COLL_X(op, name, fn, desc) {op, name, desc, fn},
    COLL_ALGO_LIST(COLL_X)
#undef COLL_X
};

const coll_algo *coll_find(coll_op op, const char *name) {
  const coll_algo_info *info = coll_info_find(op, name);
  if (!info) return NULL;
  for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
    if (algos[i].op == op && strcmp(algos[i].name, info->name) == 0) return &algos[i];
  return NULL;
}

/* ---- SMPI's own algorithms ------------------------------------------------------------------ */

int coll_allreduce_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo;
  return MPI_Allreduce(sendbuf, recvbuf, (int)(bytes / COLL_ELEM_BYTES), MPI_FLOAT, op, comm);
}

int coll_allgather_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P;
  MPI_Comm_size(comm, &P);
  int b = (int)(bytes / (size_t)P);
  return MPI_Allgather(sendbuf, b, MPI_BYTE, recvbuf, b, MPI_BYTE, comm);
}

int coll_reducescatter_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                            const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P;
  MPI_Comm_size(comm, &P);
  int *counts = g_new(int, P);
  for (int i = 0; i < P; i++) counts[i] = (int)(bytes / COLL_ELEM_BYTES / (size_t)P);
  int rc = MPI_Reduce_scatter(sendbuf, recvbuf, counts, MPI_FLOAT, op, comm);
  g_free(counts);
  return rc;
}

int coll_broadcast_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int r;
  MPI_Comm_rank(comm, &r);
  if (r == 0 && bytes) memcpy(recvbuf, sendbuf, bytes);
  return MPI_Bcast(recvbuf, (int)bytes, MPI_BYTE, 0, comm);
}

int coll_alltoall_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                       const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P;
  MPI_Comm_size(comm, &P);
  int b = (int)(bytes / (size_t)P);
  return MPI_Alltoall(sendbuf, b, MPI_BYTE, recvbuf, b, MPI_BYTE, comm);
}

/* ---- pairwise exchanges ---------------------------------------------------------------------- */

#define TAG_PAIR 0x6c30

int coll_alltoall_pairwise(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                           const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t b = bytes / (size_t)P;
  const char *s = sendbuf;
  char *d = recvbuf;
  if (b) memcpy(d + (size_t)r * b, s + (size_t)r * b, b);
  for (int k = 1; k < P; k++) {
    int to = (r + k) % P, from = (r - k + P) % P;
    int rc = MPI_Sendrecv(s + (size_t)to * b, (int)b, MPI_BYTE, to, TAG_PAIR, d + (size_t)from * b,
                          (int)b, MPI_BYTE, from, TAG_PAIR, comm, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

int coll_sendrecv_pairwise(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                           const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  if (P == 1) {
    if (bytes) memcpy(recvbuf, sendbuf, bytes);
    return MPI_SUCCESS;
  }
  return MPI_Sendrecv(sendbuf, (int)bytes, MPI_BYTE, (r + 1) % P, TAG_PAIR, recvbuf, (int)bytes,
                      MPI_BYTE, (r - 1 + P) % P, TAG_PAIR, comm, MPI_STATUS_IGNORE);
}

/* ---- hierarchical all-reduce ---------------------------------------------------------------- */

/* Reduce-scatter over the node's NVSwitch, all-reduce of this rank's shard with the ranks of the
 * same local index on the other nodes (ring), all-gather over the node: intra-node traffic
 * 2(rpn-1)/rpn·n, inter-node 2(nodes-1)/nodes·n/rpn per rank (NCCL's NVLS/CollNet split, done
 * with rings). Falls back to the flat ring unless P = ranks_per_node × n_nodes with both > 1. */
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
  float *acc = recvbuf;
  int own = (t.local_rank + 1) % rpn;
  size_t off = coll_chunk_off(n, rpn, own), len = coll_chunk_len(n, rpn, own);
  int rc = coll_ring_rs(sendbuf, acc, n, intra, rpn, t.local_rank, comm, op);
  if (rc == MPI_SUCCESS) rc = coll_ring_rs(NULL, acc + off, len, inter, nodes, t.node, comm, op);
  if (rc == MPI_SUCCESS) rc = coll_ring_ag(acc + off, len, inter, nodes, t.node, comm);
  if (rc == MPI_SUCCESS) rc = coll_ring_ag(acc, n, intra, rpn, t.local_rank, comm);
  g_free(intra);
  g_free(inter);
  return rc;
}
