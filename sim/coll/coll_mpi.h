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
#include "coll/nccl.h"

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

/* Messages of any size (msg.c): MPI counts are int, so a message over COLL_MSG_MAX bytes goes as
 * pieces of at most that many, all posted at once on one tag, which MPI matches in order; on one
 * route they share its bandwidth and end together, as the whole message would. Sender and
 * receiver must name the same size. */
#define COLL_MSG_MAX ((size_t)1 << 30)
/* Pieces of a message of `bytes` (an empty message is one). */
static inline size_t coll_msg_pieces(size_t bytes) {
  return bytes ? (bytes + COLL_MSG_MAX - 1) / COLL_MSG_MAX : 1;
}
/* Called before every message the algorithms post (NULL: nothing): the SMPI executor's progress
 * line, which a long collective would otherwise hold back. */
extern void (*coll_msg_tick)(void);
/* Posts the pieces, appending their requests at q[*m] (room for coll_msg_pieces(bytes)). */
int coll_isend_bytes(const void *buf, size_t bytes, int dst, int tag, MPI_Comm comm,
                     MPI_Request *q, int *m);
int coll_irecv_bytes(void *buf, size_t bytes, int src, int tag, MPI_Comm comm, MPI_Request *q,
                     int *m);
/* MPI_Sendrecv, MPI_Send and MPI_Recv of bytes, of any size. */
int coll_sendrecv_bytes(const void *sbuf, size_t sbytes, int dst, void *rbuf, size_t rbytes,
                        int src, int tag, MPI_Comm comm);
int coll_send_bytes(const void *buf, size_t bytes, int dst, int tag, MPI_Comm comm);
int coll_recv_bytes(void *buf, size_t bytes, int src, int tag, MPI_Comm comm);

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

/* inout = in op inout over `n` floats (any n), when the buffers hold data. */
int coll_reduce(const float *in, float *inout, size_t n, MPI_Op op);

/* Asks the flavour to run every step as its own messages (--message-level). */
void coll_buf_message_level(int on);

#define COLL_DECLARE(op, name, fn, wire, cost, desc)                                           \
  int fn(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm, const coll_topo *topo, \
         MPI_Op reduce_op);
COLL_ALGO_LIST(COLL_DECLARE)
#undef COLL_DECLARE

/* ---- shared by the algorithm files ---------------------------------------------------------- */

/* ---- rings ----------------------------------------------------------------------------------
 * k concurrent rings over the g members of a group, as NCCL runs its channels: the flat rings
 * of coll.h (coll_ring_channels) over comm ranks 0..g-1 laid out node-major, rpn per node
 * (members == NULL), or one ring over an explicit member list (members[i] is the comm rank at
 * position i).
 * The buffer of n floats is cut into g blocks (coll_chunk_off(n, g, b)); every block into k
 * slices, slice j travelling on ring j. Flat rings: block b belongs to comm rank b; explicit
 * list: to position b. A reduce-scatter leaves each member its own block, fully reduced; an
 * all-gather starts from it. */
typedef struct {
  int k, g, rpn;      /* rings, members, consecutive comm ranks per node */
  int kr;             /* rings that run: k, or 1 when the topology folds the k channels (ring 0
                         stands for all; the buffer is still cut into k slices) */
  const int *members; /* explicit positions (k = 1), or NULL: flat rings (borrowed) */
  int rank;           /* the caller's comm rank */
  int me[COLL_MAX_RINGS]; /* its position in each ring */
  nccl_call nc;       /* NCCL's figures for the call (coll/nccl.h; inert: plain alpha-beta) */
} coll_rings;

/* Comm rank at position i (any integer, taken mod g) of ring j. */
static inline int coll_ring_rank(const coll_rings *R, int j, int i) {
  if (R->members) return R->members[coll_mod(i, R->g)];
  return coll_flat_ring_member(R->k, R->g, R->rpn, j, i);
}

/* Whether comm ranks a and b are on one node (flat rings; an explicit list says nothing: FALSE
 * unless the whole list is one node, rpn >= g). */
static inline int coll_ring_intra(const coll_rings *R, int a, int b) {
  if (R->members) return R->rpn >= R->g;
  return a / R->rpn == b / R->rpn;
}

/* Flat rings over the P ranks of `topo`'s layout, coll_ring_channels of them (1 when the group
 * does not fill whole nodes); `op`, `algo`, `bytes` pick NCCL's figures from topo->nccl. */
void coll_rings_flat(coll_rings *R, int P, int rank, const coll_topo *topo, coll_op op,
                     double bytes);
/* One ring over an explicit list; `me` the caller's position; no NCCL figures. `rpn` as above. */
void coll_rings_list(coll_rings *R, const int *members, int g, int me, int rpn);

/* Reduce-scatter of src (NULL: acc holds the input, reduced in place) into acc: after it, the
 * caller's block of acc holds the reduction over the members. acc is n floats. */
int coll_rings_rs(const float *src, float *acc, size_t n, const coll_rings *R, MPI_Comm comm,
                  MPI_Op op);
/* All-gather: the caller's block of buf is valid on entry, every block on exit. */
int coll_rings_ag(float *buf, size_t n, const coll_rings *R, MPI_Comm comm);
/* Both: the all-reduce of src (NULL: in place) into acc. */
int coll_rings_ar(const float *src, float *acc, size_t n, const coll_rings *R, MPI_Comm comm,
                  MPI_Op op);

/* A ring phase the flavour may simulate at once: `steps` steps on every ring of R, in each of
 * which the caller sends one chunk to its right neighbour of ring j and receives one from its
 * left, bytes[j] in all each way; `n_bytes` is the buffer the chunks are cut from, the same on
 * every rank, so that all of them decide alike. Returns 1 when it did: the SMPI flavour on
 * payload-free buffers sends one message of bytes[j] each way on each ring (as NCCL's protocol
 * puts them on the wire, R->nc) and then waits for the latencies of the other steps, which on a
 * lock-step ring takes the same simulated time as the steps, with the same flows on the same
 * links (unless --message-level, or the platform's bandwidth factor differs between a chunk and
 * the whole), then for what NCCL's latency of the call adds. Returns 0 when the caller must run
 * the steps. */
int coll_ring_phase(const coll_rings *R, int steps, const size_t *bytes, size_t n_bytes,
                    MPI_Comm comm);
/* After a call's steps: waits for what NCCL's latency of the call (R->nc) adds to `steps` steps
 * of the routes' own latency, with chunks of `chunk_bytes`. The SMPI flavour's; a no-op with
 * inert figures. */
void coll_ring_settle(const coll_rings *R, int steps, double chunk_bytes, MPI_Comm comm);
/* The same after the trees' all-reduce over P ranks of rpn per node, `steps` chunk times of
 * chunk_bytes on the wire (2 coll_tree_depth + chunks - 1): waits for what NCCL's latency (nc)
 * adds to `steps` route latencies of the group's slowest ring hop (what the closed form charges
 * the tree, coll/cost.c). */
void coll_tree_settle(const nccl_call *nc, int P, int rpn, int steps, double chunk_bytes,
                      MPI_Comm comm);

/* Whether the trees may send a long pipeline's middle chunks as one message per link and
 * direction (tree.c: first chunk, middle chunks, last chunk): the SMPI flavour on payload-free
 * buffers, unless --message-level or the platform's bandwidth factor differs between
 * `chunk_bytes` and `whole_bytes`, both as they go on the wire. Every rank must decide alike:
 * the arguments are the same on every rank of the call. */
int coll_tree_bulk(double chunk_bytes, double whole_bytes);
/* After a tree call whose middle chunks went as one message of whole_bytes: holds the
 * caller for the route latencies of the `steps` chunks of chunk_bytes that it stood for, less
 * its own, on the slowest route between the caller and comm ranks peers[0..n-1]. The SMPI
 * flavour's; a no-op in the real one. */
void coll_tree_hold(const int *peers, int n, int steps, double chunk_bytes, double whole_bytes,
                    MPI_Comm comm);

/* Channels of k that a collective runs: 1 where `topo` folds exactly k channels on payload-free
 * buffers (channel 0 standing for all), else k. */
static inline int coll_channels_run(const coll_topo *topo, int k) {
  return topo && topo->fold > 1 && topo->fold == k && !coll_buf_has_data() ? 1 : k;
}

/* A folded collective (coll_topo.fold): channel j of a rank is channel 0 of the rank j places
 * before it in its node, so a rank is through a phase of every channel when every rank of its
 * node is through channel 0's. The caller waits for the other `size` - 1 ranks of its node
 * (comm ranks first .. first + size - 1) to reach the same call, at no simulated time. The
 * SMPI flavour's; never called in the real one (nothing folds there). */
void coll_fold_sync(MPI_Comm comm, int first, int size);

/* Chunk c of n elements cut into k chunks: first element and count. */
static inline size_t coll_chunk_off(size_t n, int k, int c) {
  return (size_t)((unsigned long long)n * (unsigned)c / (unsigned)k);
}
static inline size_t coll_chunk_len(size_t n, int k, int c) {
  return coll_chunk_off(n, k, c + 1) - coll_chunk_off(n, k, c);
}

#endif
