/* ring.c — NCCL's ring algorithms on MPI point-to-point, with its channels.
 *
 * Each step every rank sends one chunk to its right neighbour and receives one from its left, so
 * on a contention-free network a step costs α + chunk/β and the all-reduce takes
 * 2(P-1)(α + n/(Pβ)) (Patarasuk & Yuan 2009; NCCL's ring). A group that fills whole nodes runs
 * one ring per GPU of a node at once, each on its slice of the buffer and crossing between
 * nodes on its own pair of rails (coll_rings, coll_mpi.h): NCCL's channels, one or two per NIC,
 * so that a ring across nodes gets every rail of a node rather than one. Chunks are reduced as
 * they arrive (MPI_Reduce_local), straight into the output buffer; every element is reduced
 * once and then copied, so all ranks end with bit-identical results. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

#define TAG_RING (COLL_TAG_BASE + 0x80) /* + ring: apart from tree.c, rhd.c, pairwise.c, the phases */
#define TAG_PAD (TAG_RING + COLL_MAX_RINGS)

void coll_rings_flat(coll_rings *R, int P, int rank, const coll_topo *topo, coll_op op,
                     double bytes) {
  memset(R, 0, sizeof *R);
  int rpn = topo ? topo->ranks_per_node : P;
  rpn = rpn < 1 ? 1 : rpn > P ? P : rpn;
  R->g = P;
  R->rpn = rpn;
  R->rank = rank;
  R->k = coll_ring_channels(P, rpn);
  for (int j = 0; j < R->k; j++) R->me[j] = coll_flat_ring_pos(R->k, rpn, j, rank);
  R->kr = coll_channels_run(topo, R->k);
  nccl_plan(&R->nc, topo ? topo->nccl : NULL, op, "ring", bytes, P, topo ? topo->n_nodes : 1);
}

void coll_rings_list(coll_rings *R, const int *members, int g, int me, int rpn) {
  memset(R, 0, sizeof *R);
  R->k = R->kr = 1;
  R->g = g;
  R->rpn = rpn < 1 ? 1 : rpn;
  R->members = members;
  R->rank = members[me];
  R->me[0] = me;
  nccl_plan(&R->nc, NULL, COLL_ALLREDUCE, NULL, 0, g, 1);
}

/* Chunk at position `pos` of ring j: slice j of the block that position owns. */
static void chunk(const coll_rings *R, size_t n, int j, int pos, size_t *off, size_t *len) {
  const int b = R->members ? coll_mod(pos, R->g) : coll_ring_rank(R, j, pos);
  const size_t bo = coll_chunk_off(n, R->g, b), bl = coll_chunk_len(n, R->g, b);
  *off = bo + coll_chunk_off(bl, R->k, j);
  *len = coll_chunk_len(bl, R->k, j);
}

/* One step on every ring: ring j sends sn[j] floats from sb[j] to its right neighbour and
 * receives rn[j] into rb[j] from its left; under NCCL's figures the protocol's extra wire bytes
 * travel beside them (payload-free padding: they carry no data). Messages of any size (msg.c). */
static int rings_step(const coll_rings *R, const float *const *sb, const size_t *sn,
                      float *const *rb, const size_t *rn, MPI_Comm comm) {
  if (R->k == 1 && R->nc.proto < 0) /* one MPI call: under SMPI each call costs host time */
    return coll_sendrecv_bytes(sb[0], sn[0] * COLL_ELEM_BYTES, coll_ring_rank(R, 0, R->me[0] + 1),
                               rb[0], rn[0] * COLL_ELEM_BYTES, coll_ring_rank(R, 0, R->me[0] - 1),
                               TAG_RING, comm);
  int right[COLL_MAX_RINGS], left[COLL_MAX_RINGS];
  size_t ps[COLL_MAX_RINGS], pr[COLL_MAX_RINGS], pad_max = 0, span = 0, n_req = 0;
  for (int j = 0; j < R->kr; j++) {
    right[j] = coll_ring_rank(R, j, R->me[j] + 1);
    left[j] = coll_ring_rank(R, j, R->me[j] - 1);
    const double s = (double)sn[j] * COLL_ELEM_BYTES, r = (double)rn[j] * COLL_ELEM_BYTES;
    /* the left neighbour sends the chunk this rank receives: the same formula on both sides */
    ps[j] = (size_t)(nccl_wire_bytes(&R->nc, coll_ring_intra(R, R->rank, right[j]), s) - s + 0.5);
    pr[j] = (size_t)(nccl_wire_bytes(&R->nc, coll_ring_intra(R, left[j], R->rank), r) - r + 0.5);
    pad_max = MAX(pad_max, MAX(ps[j], pr[j]));
    span = MAX(span, MAX(sn[j] * COLL_ELEM_BYTES + ps[j], rn[j] * COLL_ELEM_BYTES + pr[j]));
    n_req += coll_msg_pieces(sn[j] * COLL_ELEM_BYTES + ps[j]) +
             coll_msg_pieces(rn[j] * COLL_ELEM_BYTES + pr[j]) + 2;
  }
  /* payload-free buffers: each ring's chunk and its padding as one message, which SimGrid's
   * per-message factors then see at the size the wire does; from and into scratch memory (the
   * message is longer than the chunk) */
  const int whole = pad_max > 0 && !coll_buf_has_data();
  char *pad = pad_max ? coll_buf_alloc(whole ? 2 * span : pad_max) : NULL;
  MPI_Request *q = g_new(MPI_Request, n_req);
  int m = 0, rc = MPI_SUCCESS;
  for (int j = 0; j < R->kr && rc == MPI_SUCCESS && whole; j++) {
    rc = coll_irecv_bytes(pad + span, rn[j] * COLL_ELEM_BYTES + pr[j], left[j], TAG_RING + j,
                          comm, q, &m);
    if (rc == MPI_SUCCESS)
      rc = coll_isend_bytes(pad, sn[j] * COLL_ELEM_BYTES + ps[j], right[j], TAG_RING + j, comm,
                            q, &m);
  }
  for (int j = 0; j < R->kr && rc == MPI_SUCCESS && !whole; j++) {
    rc = coll_irecv_bytes(rb[j], rn[j] * COLL_ELEM_BYTES, left[j], TAG_RING + j, comm, q, &m);
    if (rc == MPI_SUCCESS)
      rc = coll_isend_bytes(sb[j], sn[j] * COLL_ELEM_BYTES, right[j], TAG_RING + j, comm, q, &m);
    if (rc == MPI_SUCCESS && pr[j] > 0)
      rc = coll_irecv_bytes(pad, pr[j], left[j], TAG_PAD + j, comm, q, &m);
    if (rc == MPI_SUCCESS && ps[j] > 0)
      rc = coll_isend_bytes(pad, ps[j], right[j], TAG_PAD + j, comm, q, &m);
  }
  if (rc == MPI_SUCCESS) rc = MPI_Waitall(m, q, MPI_STATUSES_IGNORE);
  g_free(q);
  coll_buf_free(pad);
  /* folded: through this step of every ring once the node is through ring 0's */
  if (rc == MPI_SUCCESS && R->kr < R->k) coll_fold_sync(comm, R->rank - R->rank % R->rpn, R->rpn);
  return rc;
}

/* Bytes the caller sends on ring j over g-1 steps that send every chunk of its slice but the
 * one at position `skip` (slices taken as equal shares: the phase only needs the sizes). */
static size_t phase_bytes(const coll_rings *R, size_t n, int j, int skip) {
  size_t off, len;
  chunk(R, n, j, skip, &off, &len);
  return (coll_chunk_len(n, R->k, j) - MIN(len, coll_chunk_len(n, R->k, j))) * sizeof(float);
}

/* The reduce-scatter's steps (see coll_rings_rs): at step s the caller at position i sends
 * chunk i-s-1 and receives chunk i-s-2, reducing it; after g-1 steps chunk i is complete. */
static int rs_steps(const float *src, float *acc, size_t n, const coll_rings *R, MPI_Comm comm,
                    MPI_Op op) {
  const int g = R->g, k = R->kr;
  const size_t stride = n / (size_t)g + 2;
  float *tmp = src ? NULL : coll_buf_alloc((size_t)k * stride * sizeof(float));
  const float *sb[COLL_MAX_RINGS];
  float *rb[COLL_MAX_RINGS];
  size_t sn[COLL_MAX_RINGS], rn[COLL_MAX_RINGS], ro[COLL_MAX_RINGS];
  int rc = MPI_SUCCESS;
  for (int s = 0; s < g - 1 && rc == MPI_SUCCESS; s++) {
    for (int j = 0; j < k; j++) {
      size_t so, sl, rl;
      chunk(R, n, j, R->me[j] - s - 1, &so, &sl);
      chunk(R, n, j, R->me[j] - s - 2, &ro[j], &rl);
      sb[j] = (s == 0 && src) ? src + so : acc + so;
      rb[j] = src ? acc + ro[j] : tmp + (size_t)j * stride;
      sn[j] = sl;
      rn[j] = rl;
    }
    rc = rings_step(R, sb, sn, rb, rn, comm);
    for (int j = 0; j < k && rc == MPI_SUCCESS; j++)
      rc = src ? coll_reduce(src + ro[j], acc + ro[j], rn[j], op)
               : coll_reduce(rb[j], acc + ro[j], rn[j], op);
  }
  coll_buf_free(tmp);
  return rc;
}

/* The all-gather's steps: at step s the caller at position i sends chunk i-s and receives chunk
 * i-s-1. */
static int ag_steps(float *buf, size_t n, const coll_rings *R, MPI_Comm comm) {
  const float *sb[COLL_MAX_RINGS];
  float *rb[COLL_MAX_RINGS];
  size_t sn[COLL_MAX_RINGS], rn[COLL_MAX_RINGS];
  int rc = MPI_SUCCESS;
  for (int s = 0; s < R->g - 1 && rc == MPI_SUCCESS; s++) {
    for (int j = 0; j < R->kr; j++) {
      size_t so, sl, ro, rl;
      chunk(R, n, j, R->me[j] - s, &so, &sl);
      chunk(R, n, j, R->me[j] - s - 1, &ro, &rl);
      sb[j] = buf + so;
      rb[j] = buf + ro;
      sn[j] = sl;
      rn[j] = rl;
    }
    rc = rings_step(R, sb, sn, rb, rn, comm);
  }
  return rc;
}

/* The chunk size NCCL's latency is weighed at: a ring's share of one block. */
static double chunk_bytes(size_t n, const coll_rings *R) {
  return (double)n * sizeof(float) / R->g / R->k;
}

int coll_rings_rs(const float *src, float *acc, size_t n, const coll_rings *R, MPI_Comm comm,
                  MPI_Op op) {
  if (R->g == 1) {
    if (src) coll_copy(acc, src, n * sizeof(float));
    return MPI_SUCCESS;
  }
  size_t bytes[COLL_MAX_RINGS];
  for (int j = 0; j < R->k; j++) bytes[j] = phase_bytes(R, n, j, R->me[j]);
  if (coll_ring_phase(R, R->g - 1, bytes, n * sizeof(float), comm)) return MPI_SUCCESS;
  const int rc = rs_steps(src, acc, n, R, comm, op);
  if (rc == MPI_SUCCESS) coll_ring_settle(R, R->g - 1, chunk_bytes(n, R), comm);
  return rc;
}

int coll_rings_ag(float *buf, size_t n, const coll_rings *R, MPI_Comm comm) {
  if (R->g == 1) return MPI_SUCCESS;
  size_t bytes[COLL_MAX_RINGS];
  for (int j = 0; j < R->k; j++) bytes[j] = phase_bytes(R, n, j, R->me[j] + 1);
  if (coll_ring_phase(R, R->g - 1, bytes, n * sizeof(float), comm)) return MPI_SUCCESS;
  const int rc = ag_steps(buf, n, R, comm);
  if (rc == MPI_SUCCESS) coll_ring_settle(R, R->g - 1, chunk_bytes(n, R), comm);
  return rc;
}

int coll_rings_ar(const float *src, float *acc, size_t n, const coll_rings *R, MPI_Comm comm,
                  MPI_Op op) {
  if (R->g == 1) return coll_rings_rs(src, acc, n, R, comm, op);
  /* the two phases run the same flows one after the other: one phase of twice the steps */
  size_t bytes[COLL_MAX_RINGS];
  for (int j = 0; j < R->k; j++)
    bytes[j] = phase_bytes(R, n, j, R->me[j]) + phase_bytes(R, n, j, R->me[j] + 1);
  if (coll_ring_phase(R, 2 * (R->g - 1), bytes, n * sizeof(float), comm)) return MPI_SUCCESS;
  int rc = rs_steps(src, acc, n, R, comm, op);
  if (rc == MPI_SUCCESS) rc = ag_steps(acc, n, R, comm);
  if (rc == MPI_SUCCESS) coll_ring_settle(R, 2 * (R->g - 1), chunk_bytes(n, R), comm);
  return rc;
}

int coll_allreduce_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  coll_rings R;
  coll_rings_flat(&R, P, r, topo, COLL_ALLREDUCE, (double)bytes);
  return coll_rings_ar(sendbuf, recvbuf, bytes / COLL_ELEM_BYTES, &R, comm, op);
}

/* Rank r's block r goes round the rings. */
int coll_allgather_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  const size_t n = bytes / COLL_ELEM_BYTES;
  coll_copy((float *)recvbuf + coll_chunk_off(n, P, r), sendbuf,
            coll_chunk_len(n, P, r) * sizeof(float));
  coll_rings R;
  coll_rings_flat(&R, P, r, topo, COLL_ALLGATHER, (double)bytes);
  return coll_rings_ag(recvbuf, n, &R, comm);
}

/* Partial sums go round the rings, each rank adding its own part; after P-1 steps rank r holds
 * block r, copied out of the scratch accumulator. */
int coll_reducescatter_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                            const coll_topo *topo, MPI_Op op) {
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  const size_t n = bytes / COLL_ELEM_BYTES;
  coll_rings R;
  coll_rings_flat(&R, P, r, topo, COLL_REDUCESCATTER, (double)bytes);
  float *acc = coll_buf_alloc(n * sizeof(float));
  const int rc = coll_rings_rs(sendbuf, acc, n, &R, comm, op);
  coll_copy(recvbuf, acc + coll_chunk_off(n, P, r), coll_chunk_len(n, P, r) * sizeof(float));
  coll_buf_free(acc);
  return rc;
}

/* A chain 0 -> 1 -> ... -> P-1, pipelined in COLL_PIPE_CHUNK_BYTES chunks: each rank forwards
 * chunk j while receiving chunk j+1, so with k chunks the broadcast takes
 * (k + P - 2)(α + chunk/β) on a contention-free network. */
int coll_broadcast_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  if (r == 0) coll_copy(recvbuf, sendbuf, bytes);
  if (P == 1 || bytes == 0) return MPI_SUCCESS;
  size_t C = COLL_PIPE_CHUNK_BYTES;
  size_t k = (bytes + C - 1) / C;
  const char *from = r == 0 ? sendbuf : recvbuf;
  char *to = recvbuf;
  int last = r == P - 1;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  if (r > 0) rc = MPI_Irecv(to, (int)(C < bytes ? C : bytes), MPI_BYTE, r - 1, TAG_RING, comm, &rreq);
  for (size_t j = 0; j < k && rc == MPI_SUCCESS; j++) {
    size_t off = j * C, len = bytes - off < C ? bytes - off : C;
    if (r > 0) {
      rc = MPI_Wait(&rreq, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && j + 1 < k) {
        size_t noff = off + C, nlen = bytes - noff < C ? bytes - noff : C;
        rc = MPI_Irecv(to + noff, (int)nlen, MPI_BYTE, r - 1, TAG_RING, comm, &rreq);
      }
    }
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&sreq, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !last)
      rc = MPI_Isend(from + off, (int)len, MPI_BYTE, r + 1, TAG_RING, comm, &sreq);
  }
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&sreq, MPI_STATUS_IGNORE);
  return rc;
}
