/* msg.c — messages of any size. MPI counts are int, and SMPI's too: a message over COLL_MSG_MAX
 * bytes goes as pieces of at most that many, all posted at once on one tag. MPI matches the
 * pieces of one (source, tag) in order, and on one route they share its bandwidth and end
 * together, as the whole message would. Every algorithm sends through these, so that a
 * collective runs at any size the benchmark sweeps to. */
#include <stdlib.h>

#include <glib.h>

#include "coll/coll_mpi.h"

void (*coll_msg_tick)(void);

static int post(int send, void *buf, size_t bytes, int peer, int tag, MPI_Comm comm,
                MPI_Request *q, int *m) {
  const size_t k = coll_msg_pieces(bytes);
  if (coll_msg_tick) coll_msg_tick();
  int rc = MPI_SUCCESS;
  for (size_t i = 0; i < k && rc == MPI_SUCCESS; i++) {
    const size_t off = i * COLL_MSG_MAX, len = MIN(COLL_MSG_MAX, bytes - off);
    rc = send ? MPI_Isend((char *)buf + off, (int)len, MPI_BYTE, peer, tag, comm, &q[(*m)++])
              : MPI_Irecv((char *)buf + off, (int)len, MPI_BYTE, peer, tag, comm, &q[(*m)++]);
  }
  return rc;
}

int coll_isend_bytes(const void *buf, size_t bytes, int dst, int tag, MPI_Comm comm,
                     MPI_Request *q, int *m) {
  return post(1, (void *)buf, bytes, dst, tag, comm, q, m);
}

int coll_irecv_bytes(void *buf, size_t bytes, int src, int tag, MPI_Comm comm, MPI_Request *q,
                     int *m) {
  return post(0, buf, bytes, src, tag, comm, q, m);
}

/* Waits for the m requests of q (unless posting failed: rc), then frees q. */
static int wait_all(MPI_Request *q, int m, int rc) {
  if (rc == MPI_SUCCESS) rc = MPI_Waitall(m, q, MPI_STATUSES_IGNORE);
  free(q);
  return rc;
}

int coll_sendrecv_bytes(const void *sbuf, size_t sbytes, int dst, void *rbuf, size_t rbytes,
                        int src, int tag, MPI_Comm comm) {
  if (sbytes <= COLL_MSG_MAX && rbytes <= COLL_MSG_MAX)
    return MPI_Sendrecv(sbuf, (int)sbytes, MPI_BYTE, dst, tag, rbuf, (int)rbytes, MPI_BYTE, src,
                        tag, comm, MPI_STATUS_IGNORE);
  MPI_Request *q = malloc(sizeof *q * (coll_msg_pieces(sbytes) + coll_msg_pieces(rbytes)));
  if (!q) return MPI_ERR_NO_MEM;
  int m = 0, rc = coll_irecv_bytes(rbuf, rbytes, src, tag, comm, q, &m);
  if (rc == MPI_SUCCESS) rc = coll_isend_bytes(sbuf, sbytes, dst, tag, comm, q, &m);
  return wait_all(q, m, rc);
}

/* MPI_Send (send) or MPI_Recv of bytes, of any size. */
static int blocking(int send, void *buf, size_t bytes, int peer, int tag, MPI_Comm comm) {
  if (bytes <= COLL_MSG_MAX)
    return send ? MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, comm)
                : MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
  MPI_Request *q = malloc(sizeof *q * coll_msg_pieces(bytes));
  if (!q) return MPI_ERR_NO_MEM;
  int m = 0;
  const int rc = post(send, buf, bytes, peer, tag, comm, q, &m);
  return wait_all(q, m, rc);
}

int coll_send_bytes(const void *buf, size_t bytes, int dst, int tag, MPI_Comm comm) {
  return blocking(1, (void *)buf, bytes, dst, tag, comm);
}

int coll_recv_bytes(void *buf, size_t bytes, int src, int tag, MPI_Comm comm) {
  return blocking(0, buf, bytes, src, tag, comm);
}

int coll_reduce(const float *in, float *inout, size_t n, MPI_Op op) {
  if (!coll_buf_has_data()) return MPI_SUCCESS;
  const size_t most = COLL_MSG_MAX / sizeof(float);
  int rc = MPI_SUCCESS;
  for (size_t off = 0; off < n && rc == MPI_SUCCESS; off += most)
    rc = MPI_Reduce_local(in + off, inout + off, (int)MIN(most, n - off), MPI_FLOAT, op);
  return rc;
}
