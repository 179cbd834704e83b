/* coll_mpi.h — the collective algorithms of coll.h, callable from MPI code (SMPI and real
 * flavours). Every algorithm uses MPI point-to-point only (MPI_Isend/MPI_Irecv/MPI_Waitall/
 * MPI_Waitany/MPI_Sendrecv): no nonblocking collectives (naive in SMPI), no MPI_IN_PLACE (SMPI
 * copies a full buffer), no MPI_Test polling (each failed test costs simulated time). The "smpi"
 * entries are the exception by design: they call the plain MPI collective.
 *
 * Reductions are element-wise on floats (MPI_FLOAT) through MPI_Reduce_local with the caller's
 * op: the SMPI flavour passes a no-op user op (payload-free buffers), the real flavour MPI_SUM.
 * Every rank ends with bit-identical results (each element is reduced once, then copied).
 *
 * Temporary buffers come from coll_buf_alloc/coll_buf_free, which the executor flavour defines
 * (SMPI: SMPI_SHARED_MALLOC unless real data is asked for; real: g_malloc).
 */
#ifndef DL_COLL_MPI_H
#define DL_COLL_MPI_H

#include <mpi.h>
#include <string.h>

#include "coll/coll.h"

/* An algorithm: `bytes` and buffers as in coll.h's conventions (sendbuf and recvbuf distinct,
 * neither aliased with the other); `topo` describes the calling rank (may be NULL: one node).
 * Returns MPI_SUCCESS or the first MPI error code. Collective: every rank of `comm` calls it
 * with the same op, bytes and algorithm. */
typedef int (*coll_fn)(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                       const coll_topo *topo, MPI_Op reduce_op);

typedef struct {
  coll_op op;              /* operation */
  const char *name;        /* --coll name */
  const char *description; /* one line for --help */
  coll_fn fn;              /* implementation */
} coll_algo;

/* The table row for (op, name) ("smpi:<algo>" matches "smpi"), NULL if none. Borrowed. */
const coll_algo *coll_find(coll_op op, const char *name);

/* All-to-all with uneven blocks: `send_bytes[j]` go to member j (blocks packed in member order in
 * sendbuf), `recv_bytes[j]` come from member j (packed likewise in recvbuf). Pairwise, P-1
 * steps of MPI_Sendrecv. */
int coll_alltoallv_pairwise(const void *sendbuf, const double *send_bytes, void *recvbuf,
                            const double *recv_bytes, MPI_Comm comm);

/* The flavour's choice of data: `want_real` is --check's request for real data; returns whether
 * the buffers hold real data (SMPI: as asked, payload-free otherwise; real flavour: always). */
int coll_buf_real(int want_real);

/* `coll` mode of both executors: the nccl-tests-style benchmark (coll_bench.c). argv[0] is
 * "coll"; collective over MPI_COMM_WORLD; returns the exit status. */
int coll_bench_main(int argc, char **argv);

/* Flavour-provided scratch memory, `bytes` >= 0 (0 may return NULL). */
void *coll_buf_alloc(size_t bytes);
void coll_buf_free(void *p);

/* Whether the buffers hold data (real flavour, SMPI with --check); payload-free otherwise, and
 * nothing is copied or reduced (a copy between payload-free buffers costs host time and page
 * faults, and changes nothing). */
int coll_buf_has_data(void);

/* memcpy, when the buffers hold data. */
static inline void coll_copy(void *dst, const void *src, size_t bytes) {
  if (bytes && coll_buf_has_data()) memcpy(dst, src, bytes);
}

/* inout = in op inout over `n` floats, when the buffers hold data. */
static inline int coll_reduce(const float *in, float *inout, size_t n, MPI_Op op) {
  return n && coll_buf_has_data() ? MPI_Reduce_local(in, inout, (int)n, MPI_FLOAT, op)
                                  : MPI_SUCCESS;
}

/* A ring phase the flavour may simulate at once: `steps` steps in each of which this rank sends
 * one chunk to comm rank `right` and receives one from `left`, `bytes` in all each way (chunks
 * of equal size but for rounding); `n_bytes` is the buffer the chunks are cut from, the same on
 * every rank, so that all of them decide alike. Returns 1 when it did: the SMPI flavour on
 * payload-free buffers sends one message of `bytes` each way and then waits for the latencies
 * of the other steps, which on a lock-step ring takes the same simulated time as the steps,
 * with the same flows on the same links (unless --message-level, or the platform's bandwidth
 * factor differs between a chunk and the whole). Returns 0 when the caller must run the steps. */
int coll_ring_phase(int steps, size_t bytes, size_t n_bytes, int right, int left, MPI_Comm comm);

/* Asks the flavour to run every step as its own messages (--message-level). */
void coll_buf_message_level(int on);

#define COLL_DECLARE(op, name, fn, wire, cost, desc)                                           \
  int fn(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm, const coll_topo *topo, \
         MPI_Op reduce_op);
COLL_ALGO_LIST(COLL_DECLARE)
#undef COLL_DECLARE

/* ---- shared by the algorithm files ---------------------------------------------------------- */

/* Group ring primitives over `g` members whose ranks in `comm` are members[0..g-1]; `me` is the
 * caller's index. The buffer holds `n` floats cut into g chunks, chunk c = [c·n/g, (c+1)·n/g).
 * coll_ring_rs: after it, chunk (me+1) % g of `acc` holds the reduction over the members of their
 * `src` (src == NULL: `acc` is both input and accumulator). coll_ring_ag: chunk (me+1) % g of
 * `buf` is valid on entry; all chunks are valid on exit. */
int coll_ring_rs(const float *src, float *acc, size_t n, const int *members, int g, int me,
                 MPI_Comm comm, MPI_Op op);
int coll_ring_ag(float *buf, size_t n, const int *members, int g, int me, MPI_Comm comm);
/* coll_ring_rs then coll_ring_ag: the all-reduce of `src` into `acc` (src == NULL: in place). */
int coll_ring_ar(const float *src, float *acc, size_t n, const int *members, int g, int me,
                 MPI_Comm comm, MPI_Op op);

/* Chunk c of n elements cut into k chunks: first element and count. */
static inline size_t coll_chunk_off(size_t n, int k, int c) {
  return (size_t)((unsigned long long)n * (unsigned)c / (unsigned)k);
}
static inline size_t coll_chunk_len(size_t n, int k, int c) {
  return coll_chunk_off(n, k, c + 1) - coll_chunk_off(n, k, c);
}

#endif
