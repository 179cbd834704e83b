/* smpi.c — the "smpi" rows: the plain MPI collective, so that SMPI's own algorithm runs (pinned
 * with --cfg=smpi/<collective>:<name>, which the driver adds for --coll smpi:<name>). */
#include <glib.h>
#include <string.h>

#include "coll/coll_mpi.h"

#include <limits.h>

/* MPI's collectives count in int: a larger count is refused as MPI would (coll_smpi_max_bytes
 * says the bound before a benchmark starts). */
#define FITS(count) ((count) <= (size_t)INT_MAX)

int coll_allreduce_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo;
  if (!FITS(bytes / COLL_ELEM_BYTES)) return MPI_ERR_COUNT;
  return MPI_Allreduce(sendbuf, recvbuf, (int)(bytes / COLL_ELEM_BYTES), MPI_FLOAT, op, comm);
}

int coll_allgather_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P;
  MPI_Comm_size(comm, &P);
  if (!FITS(bytes)) return MPI_ERR_COUNT;
  int b = (int)(bytes / (size_t)P);
  return MPI_Allgather(sendbuf, b, MPI_BYTE, recvbuf, b, MPI_BYTE, comm);
}

int coll_reducescatter_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                            const coll_topo *topo, MPI_Op op) {
  (void)topo;
  int P;
  MPI_Comm_size(comm, &P);
  if (!FITS(bytes / COLL_ELEM_BYTES)) return MPI_ERR_COUNT;
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
  if (!FITS(bytes)) return MPI_ERR_COUNT;
  if (r == 0) coll_copy(recvbuf, sendbuf, bytes);
  return MPI_Bcast(recvbuf, (int)bytes, MPI_BYTE, 0, comm);
}

int coll_alltoall_smpi(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                       const coll_topo *topo, MPI_Op op) {
  (void)topo, (void)op;
  int P;
  MPI_Comm_size(comm, &P);
  if (!FITS(bytes)) return MPI_ERR_COUNT;
  int b = (int)(bytes / (size_t)P);
  return MPI_Alltoall(sendbuf, b, MPI_BYTE, recvbuf, b, MPI_BYTE, comm);
}
