/* pairwise.c — pairwise exchanges: all-to-all (even blocks, and uneven ones for MoE dispatch and
 * combine under skewed routing) and nccl-tests' sendrecv. At step s a rank sends its block for
 * r+s while it receives the block of r-s. */
#include <string.h>

#include "coll/coll_mpi.h"

#define TAG_PAIR (COLL_TAG_BASE + 0x30)

int coll_alltoall_pairwise(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                           const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  size_t b = bytes / (size_t)P;
  const char *s = sendbuf;
  char *d = recvbuf;
  coll_copy(d + (size_t)r * b, s + (size_t)r * b, b);
  for (int k = 1; k < P; k++) {
    int to = (r + k) % P, from = (r - k + P) % P;
    int rc = coll_sendrecv_bytes(s + (size_t)to * b, b, to, d + (size_t)from * b, b, from,
                                 TAG_PAIR, comm);
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
    coll_copy(recvbuf, sendbuf, bytes);
    return MPI_SUCCESS;
  }
  return coll_sendrecv_bytes(sendbuf, bytes, (r + 1) % P, recvbuf, bytes, (r - 1 + P) % P,
                             TAG_PAIR, comm);
}

int coll_alltoallv_pairwise(const void *sendbuf, const double *send_bytes, void *recvbuf,
                            const double *recv_bytes, MPI_Comm comm) {
  int P, me, rc = MPI_SUCCESS;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &me);
  for (int s = 1; s < P && rc == MPI_SUCCESS; s++) {
    int dst = (me + s) % P, src = (me - s + P) % P;
    size_t soff = 0, roff = 0;
    for (int j = 0; j < dst; j++) soff += (size_t)send_bytes[j];
    for (int j = 0; j < src; j++) roff += (size_t)recv_bytes[j];
    rc = coll_sendrecv_bytes((const char *)sendbuf + soff, (size_t)send_bytes[dst], dst,
                             (char *)recvbuf + roff, (size_t)recv_bytes[src], src, 7, comm);
  }
  return rc;
}
