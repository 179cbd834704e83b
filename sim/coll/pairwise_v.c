/* coll_v.c — all-to-all with uneven blocks (MoE dispatch and combine under skewed routing).
 * Pairwise exchange as coll_alltoall_pairwise: at step s a rank sends its block for r+s while it
 * receives the block of r-s; block sizes come from the caller (bytes, per member). */
#include <stdint.h>

#include "coll/coll_mpi.h"

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
    rc = MPI_Sendrecv((const char *)sendbuf + soff, (int)send_bytes[dst], MPI_BYTE, dst, 7,
                      (char *)recvbuf + roff, (int)recv_bytes[src], MPI_BYTE, src, 7, comm,
                      MPI_STATUS_IGNORE);
  }
  return rc;
}
