/* ring.c — NCCL's ring algorithms on MPI point-to-point.
 *
 * Each step every rank sends one chunk to its right neighbour and receives one from its left, so
 * on a contention-free network a step costs α + chunk/β and the all-reduce takes
 * 2(P-1)(α + n/(Pβ)) (Patarasuk & Yuan 2009; NCCL's ring). Chunks are reduced as they arrive
 * (MPI_Reduce_local), straight into the output buffer: no full-size copies or temporaries. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

#define TAG_RING 0x6c10

static inline int mod(int a, int m) { return ((a % m) + m) % m; }

/* One ring step: receive `rn` elements from `left` into rbuf while sending `sn` from sbuf (one
 * MPI call: under SMPI each call costs host time of its own). */
static int ring_step(const void *sbuf, int sn, int right, void *rbuf, int rn, int left,
                     MPI_Datatype type, MPI_Comm comm) {
  return MPI_Sendrecv(sbuf, sn, type, right, TAG_RING, rbuf, rn, type, left, TAG_RING, comm,
                      MPI_STATUS_IGNORE);
}

int coll_ring_rs(const float *src, float *acc, size_t n, const int *members, int g, int me,
                 MPI_Comm comm, MPI_Op op) {
  if (g == 1) {
    if (src) coll_copy(acc, src, n * sizeof(float));
    return MPI_SUCCESS;
  }
  int right = members[mod(me + 1, g)], left = members[mod(me - 1, g)];
  /* it sends every chunk but (me + 1)'s */
  if (coll_ring_phase(g - 1, (n - coll_chunk_len(n, g, mod(me + 1, g))) * sizeof(float),
                      n * sizeof(float), right, left, comm))
    return MPI_SUCCESS;
  float *tmp = NULL;
  if (!src) tmp = coll_buf_alloc((n / (size_t)g + 1) * sizeof(float));
  int rc = MPI_SUCCESS;
  for (int s = 0; s < g - 1 && rc == MPI_SUCCESS; s++) {
    int sc = mod(me - s, g), rc_ = mod(me - s - 1, g);
    const float *sb = (s == 0 && src) ? src + coll_chunk_off(n, g, sc) : acc + coll_chunk_off(n, g, sc);
    float *rb = src ? acc + coll_chunk_off(n, g, rc_) : tmp;
    size_t rn = coll_chunk_len(n, g, rc_);
    rc = ring_step(sb, (int)coll_chunk_len(n, g, sc), right, rb, (int)rn, left, MPI_FLOAT, comm);
    if (rc != MPI_SUCCESS) break;
    float *dst = acc + coll_chunk_off(n, g, rc_);
    rc = src ? coll_reduce(src + coll_chunk_off(n, g, rc_), dst, rn, op) : coll_reduce(tmp, dst, rn, op);
  }
  coll_buf_free(tmp);
  return rc;
}

int coll_ring_ag(float *buf, size_t n, const int *members, int g, int me, MPI_Comm comm) {
  if (g == 1) return MPI_SUCCESS;
  int right = members[mod(me + 1, g)], left = members[mod(me - 1, g)];
  /* it sends every chunk but (me + 2)'s */
  if (coll_ring_phase(g - 1, (n - coll_chunk_len(n, g, mod(me + 2, g))) * sizeof(float),
                      n * sizeof(float), right, left, comm))
    return MPI_SUCCESS;
  int rc = MPI_SUCCESS;
  for (int s = 0; s < g - 1 && rc == MPI_SUCCESS; s++) {
    int sc = mod(me + 1 - s, g), rc_ = mod(me - s, g);
    rc = ring_step(buf + coll_chunk_off(n, g, sc), (int)coll_chunk_len(n, g, sc), right,
                   buf + coll_chunk_off(n, g, rc_), (int)coll_chunk_len(n, g, rc_), left,
                   MPI_FLOAT, comm);
  }
  return rc;
}

static int *identity(int P) {
  int *m = g_new(int, P);
  for (int i = 0; i < P; i++) m[i] = i;
  return m;
}

int coll_allreduce_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t n = bytes / COLL_ELEM_BYTES;
  int *m = identity(P);
  int rc = coll_ring_ar(sendbuf, recvbuf, n, m, P, r, comm, op);
  g_free(m);
  return rc;
}

int coll_ring_ar(const float *src, float *acc, size_t n, const int *members, int g, int me,
                 MPI_Comm comm, MPI_Op op) {
  if (g == 1) return coll_ring_rs(src, acc, n, members, g, me, comm, op);
  /* the two phases run the same flows one after the other: one phase of twice the steps */
  size_t sent = 2 * n - coll_chunk_len(n, g, mod(me + 1, g)) - coll_chunk_len(n, g, mod(me + 2, g));
  if (coll_ring_phase(2 * (g - 1), sent * sizeof(float), 2 * n * sizeof(float),
                      members[mod(me + 1, g)], members[mod(me - 1, g)], comm))
    return MPI_SUCCESS;
  int rc = coll_ring_rs(src, acc, n, members, g, me, comm, op);
  return rc == MPI_SUCCESS ? coll_ring_ag(acc, n, members, g, me, comm) : rc;
}

/* Rank r's block r goes round the ring: P-1 steps of bytes/P. */
int coll_allgather_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t b = bytes / (size_t)P;
  char *d = recvbuf;
  coll_copy(d + (size_t)r * b, sendbuf, b);
  if (coll_ring_phase(P - 1, (size_t)(P - 1) * b, (size_t)P * b, (r + 1) % P, mod(r - 1, P), comm))
    return MPI_SUCCESS;
  int rc = MPI_SUCCESS;
  for (int s = 0; s < P - 1 && rc == MPI_SUCCESS; s++) {
    int sc = mod(r - s, P), rc_ = mod(r - s - 1, P);
    rc = ring_step(d + (size_t)sc * b, (int)b, (r + 1) % P, d + (size_t)rc_ * b, (int)b,
                   mod(r - 1, P), MPI_BYTE, comm);
  }
  return rc;
}

/* Partial sums go round the ring, each rank adding its own block: at step s rank r forwards the
 * partial sum of block r-s-1 and receives that of block r-s-2; after P-1 steps it holds block r.
 * Partial sums live in two alternating scratch blocks; the last step lands in recvbuf. */
int coll_reducescatter_ring(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                            const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t b = bytes / COLL_ELEM_BYTES / (size_t)P; /* floats per block */
  const float *src = sendbuf;
  if (P == 1) {
    coll_copy(recvbuf, src, b * sizeof(float));
    return MPI_SUCCESS;
  }
  if (coll_ring_phase(P - 1, (size_t)(P - 1) * b * sizeof(float), (size_t)P * b * sizeof(float),
                      (r + 1) % P, mod(r - 1, P), comm))
    return MPI_SUCCESS;
  float *tmp[2] = {coll_buf_alloc(b * sizeof(float)), coll_buf_alloc(b * sizeof(float))};
  int rc = MPI_SUCCESS;
  for (int s = 0; s < P - 1 && rc == MPI_SUCCESS; s++) {
    int sc = mod(r - s - 1, P), rc_ = mod(r - s - 2, P);
    const float *sb = s == 0 ? src + (size_t)sc * b : tmp[(s - 1) % 2];
    float *rb = s == P - 2 ? (float *)recvbuf : tmp[s % 2];
    rc = ring_step(sb, (int)b, (r + 1) % P, rb, (int)b, mod(r - 1, P), MPI_FLOAT, comm);
    if (rc == MPI_SUCCESS) rc = coll_reduce(src + (size_t)rc_ * b, rb, b, op);
  }
  coll_buf_free(tmp[0]);
  coll_buf_free(tmp[1]);
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
