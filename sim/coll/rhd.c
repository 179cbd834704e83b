/* rhd.c — logarithmic-latency algorithms: Rabenseifner's all-reduce (recursive-halving
 * reduce-scatter + recursive-doubling all-gather; Thakur, Rabenseifner & Gropp 2005, §4), the
 * recursive-halving reduce-scatter, and Bruck's all-gather (Bruck et al. 1997). These give the
 * α log P + β n cost model that Gholami et al. 2018 assume for their communication terms.
 *
 * Non-powers of two (Thakur et al. §4.1): with p2 the largest power of two <= P and rem = P - p2,
 * ranks 2i and 2i+1 (i < rem) first fold: the even one sends its whole input to the odd one and
 * sits out; the p2 remaining ranks run the power-of-two algorithm on "virtual" ranks; at the end
 * the odd ones hand the result back. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

#define TAG_RHD (COLL_TAG_BASE + 0x40)

/* sn floats to `peer` and rn from it, of any size (msg.c). */
static int exchange(const float *sbuf, size_t sn, float *rbuf, size_t rn, int peer, MPI_Comm comm) {
  return coll_sendrecv_bytes(sbuf, sn * sizeof(float), peer, rbuf, rn * sizeof(float), peer,
                             TAG_RHD, comm);
}

/* Virtual rank of a real rank (-1: folded away); back: coll_rhd_real. */
static int virt_of(int r, int rem) {
  if (r < 2 * rem) return (r % 2) ? r / 2 : -1;
  return r - rem;
}

/* Recursive halving over p2 virtual ranks; virtual block v = elements [vb[v], vb[v+1]).
 * src != NULL: the input is src and partial sums go to acc; src == NULL: acc holds the input.
 * On return acc's block `v` holds the reduction over all ranks. */
static int halving(const float *src, float *acc, const size_t *vb, int p2, int v, int rem,
                   MPI_Comm comm, MPI_Op op) {
  float *tmp = NULL;
  if (p2 > 1) {
    size_t half = vb[p2 / 2] > vb[p2] - vb[p2 / 2] ? vb[p2 / 2] : vb[p2] - vb[p2 / 2];
    tmp = coll_buf_alloc(half * sizeof(float));
  }
  int lo = 0, hi = p2, rc = MPI_SUCCESS;
  for (int mask = p2 / 2; mask >= 1 && rc == MPI_SUCCESS; mask /= 2) {
    int mid = lo + mask, klo, khi, slo, shi;
    if (v & mask) klo = mid, khi = hi, slo = lo, shi = mid;
    else klo = lo, khi = mid, slo = mid, shi = hi;
    size_t kn = vb[khi] - vb[klo], sn = vb[shi] - vb[slo];
    const float *sb = (src ? src : acc) + vb[slo];
    float *rb = src ? acc + vb[klo] : tmp;
    rc = exchange(sb, sn, rb, kn, coll_rhd_real(v ^ mask, rem), comm);
    if (rc == MPI_SUCCESS)
      rc = src ? coll_reduce(src + vb[klo], acc + vb[klo], kn, op) : coll_reduce(tmp, acc + vb[klo], kn, op);
    src = NULL;
    lo = klo, hi = khi;
  }
  coll_buf_free(tmp);
  return rc;
}

/* Recursive doubling: block v of buf valid on entry, all p2 blocks on exit. */
static int doubling(float *buf, const size_t *vb, int p2, int v, int rem, MPI_Comm comm) {
  int rc = MPI_SUCCESS;
  for (int mask = 1; mask < p2 && rc == MPI_SUCCESS; mask *= 2) {
    int mine = v & ~(mask - 1), theirs = (v ^ mask) & ~(mask - 1);
    rc = exchange(buf + vb[mine], vb[mine + mask] - vb[mine], buf + vb[theirs],
                  vb[theirs + mask] - vb[theirs], coll_rhd_real(v ^ mask, rem), comm);
  }
  return rc;
}

/* Folding step: even ranks below 2·rem send their input to the odd neighbour, which adds it into
 * acc. Returns the input the rank goes on with (NULL: acc) through *src. */
static int fold(const float **src, float *acc, size_t n, int r, int rem, MPI_Comm comm,
                MPI_Op op) {
  if (r >= 2 * rem) return MPI_SUCCESS;
  if (r % 2 == 0) return coll_send_bytes(*src, n * sizeof(float), r + 1, TAG_RHD, comm);
  int rc = coll_recv_bytes(acc, n * sizeof(float), r - 1, TAG_RHD, comm);
  if (rc == MPI_SUCCESS) rc = coll_reduce(*src, acc, n, op);
  *src = NULL;
  return rc;
}

int coll_allreduce_rhd(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                       const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t n = bytes / COLL_ELEM_BYTES;
  const float *src = sendbuf;
  float *acc = recvbuf;
  if (P == 1) {
    coll_copy(acc, src, n * sizeof(float));
    return MPI_SUCCESS;
  }
  int p2 = coll_pow2_floor(P, NULL), rem = P - p2, v = virt_of(r, rem);
  size_t *vb = g_new(size_t, p2 + 1);
  for (int i = 0; i <= p2; i++) vb[i] = coll_chunk_off(n, p2, i);
  int rc = fold(&src, acc, n, r, rem, comm, op);
  if (rc == MPI_SUCCESS && v >= 0) rc = halving(src, acc, vb, p2, v, rem, comm, op);
  if (rc == MPI_SUCCESS && v >= 0) rc = doubling(acc, vb, p2, v, rem, comm);
  if (rc == MPI_SUCCESS && r < 2 * rem) {
    if (r % 2) rc = coll_send_bytes(acc, n * sizeof(float), r - 1, TAG_RHD, comm);
    else rc = coll_recv_bytes(acc, n * sizeof(float), r + 1, TAG_RHD, comm);
  }
  g_free(vb);
  return rc;
}

/* Virtual blocks follow the real ranks' output blocks: virtual rank v < rem covers the blocks
 * of real ranks 2v and 2v+1, so after halving the odd rank forwards block 2v to its partner. */
int coll_reducescatter_rhd(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                           const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t n = bytes / COLL_ELEM_BYTES, b = n / (size_t)P;
  const float *src = sendbuf;
  if (P == 1) {
    coll_copy(recvbuf, src, b * sizeof(float));
    return MPI_SUCCESS;
  }
  int p2 = coll_pow2_floor(P, NULL), rem = P - p2, v = virt_of(r, rem);
  size_t *vb = g_new(size_t, p2 + 1);
  for (int i = 0; i < p2; i++) vb[i] = (size_t)(i < rem ? 2 * i : i + rem) * b;
  vb[p2] = n;
  float *acc = coll_buf_alloc(n * sizeof(float));
  int rc = fold(&src, acc, n, r, rem, comm, op);
  if (rc == MPI_SUCCESS && v >= 0) rc = halving(src, acc, vb, p2, v, rem, comm, op);
  if (rc == MPI_SUCCESS) {
    if (r < 2 * rem && r % 2 == 0)
      rc = coll_recv_bytes(recvbuf, b * sizeof(float), r + 1, TAG_RHD, comm);
    else {
      if (r < 2 * rem)
        rc = coll_send_bytes(acc + (size_t)(r - 1) * b, b * sizeof(float), r - 1, TAG_RHD, comm);
      if (rc == MPI_SUCCESS) coll_copy(recvbuf, acc + (size_t)r * b, b * sizeof(float));
    }
  }
  coll_buf_free(acc);
  g_free(vb);
  return rc;
}

/* Bruck: after the step of distance d a rank holds the blocks of ranks r .. r+2d-1 (mod P); it
 * sends the ones it has to r-d and receives r+d's. Blocks stay at their final offsets, so a
 * range that wraps past P travels as two messages. */
int coll_allgather_bruck(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                         const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t b = bytes / (size_t)P;
  char *d = recvbuf;
  coll_copy(d + (size_t)r * b, sendbuf, b);
  int rc = MPI_SUCCESS;
  for (int dist = 1; dist < P && rc == MPI_SUCCESS; dist *= 2) {
    int cnt = dist < P - dist ? dist : P - dist;
    int to = (r - dist + P) % P, from = (r + dist) % P;
    /* each way a range of cnt blocks, as at most two messages */
    MPI_Request *req = g_new(MPI_Request, 2 * (coll_msg_pieces((size_t)cnt * b) + 1));
    int nreq = 0;
    /* Receive blocks from .. from+cnt-1, send r .. r+cnt-1, each split where it wraps. */
    int firsts[2] = {from, r};
    for (int dir = 0; dir < 2 && rc == MPI_SUCCESS; dir++) {
      int first = firsts[dir];
      int n1 = first + cnt <= P ? cnt : P - first, n2 = cnt - n1;
      int starts[2] = {first, 0}, lens[2] = {n1, n2};
      for (int seg = 0; seg < 2 && rc == MPI_SUCCESS; seg++) {
        if (lens[seg] == 0) continue;
        char *p = d + (size_t)starts[seg] * b;
        const size_t count = (size_t)lens[seg] * b;
        rc = dir == 0 ? coll_irecv_bytes(p, count, from, TAG_RHD, comm, req, &nreq)
                      : coll_isend_bytes(p, count, to, TAG_RHD, comm, req, &nreq);
      }
    }
    if (rc == MPI_SUCCESS) rc = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    g_free(req);
  }
  return rc;
}
