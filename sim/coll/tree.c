/* tree.c — NCCL's trees: a chain through the GPUs of each node, and a double binary tree across
 * the nodes (Sanders, Speck & Träff 2009; NCCL 2.4 on), one pair of trees per channel.
 *
 * The layout is coll.h's (coll_tree_node, coll_ring_channels): on channel j of k, each node's
 * GPUs form a chain from local GPU j up, whose head joins the heads of the parent and child
 * nodes of a binary tree over the nodes; tree 0 serves channels 0..k-1 and its mirror (or shift)
 * tree 1 channels k..2k-1, so a node that is an inner node of one is a leaf of the other. Each
 * of the 2k pipelines carries 1/(2k) of the buffer. All-reduce reduces each chunk up its
 * pipeline and broadcasts it down; broadcast only goes down (k = 1 and tree 0 for both halves,
 * so rank 0 is the root). Every pipeline moves in chunks of COLL_PIPE_CHUNK_BYTES: a rank
 * forwards chunk c while chunk c+1 arrives, one message in flight per link and direction.
 * Progress is driven by MPI_Waitany over the messages in flight (no polling). Under NCCL's
 * protocol model (coll/nccl.h) the all-reduce's chunks travel as the bytes the protocol puts on
 * the wire (payload-free buffers), and the call waits for what NCCL's tree latency adds to the
 * routes'. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <limits.h>
#include <string.h>

/* + 2 pipeline (up), + 2 pipeline + 1 (down), for up to 2 COLL_MAX_RINGS pipelines: apart from
 * ring.c, rhd.c, pairwise.c and the SMPI phases (COLL_TAG_BASE + 0x30 to + 0x11f) */
#define TAG_TREE (COLL_TAG_BASE + 0x200)
#define TAG_TAIL (TAG_TREE + 4 * COLL_MAX_RINGS)
#define MAX_CHILDREN 3 /* the next GPU of the chain and two child nodes */
/* Pipelines of this many chunks or more go as three messages per link and direction where the
 * flavour allows (coll_tree_bulk): the first chunk, the middle ones, the last. With fewer, the
 * middle message running ahead of chunks still on their way to the sender shifts the links'
 * sharing too much (4 to 8 chunks: up to 9.5 % faster than chunk by chunk); from 16 on, the
 * all-reduce alone comes within 0.2 to 3.6 % (16 and 64 ThetaGPU GPUs, 128 to 512 MB; 5 to 16
 * nodes of one GPU, 32 to 256 MB: -2.6 to +1.4 %), an iteration within 1 %
 * (tests/sim/check_fidelity.py). */
#define TREE_BULK_CHUNKS 16

enum { S_CREC0, S_UP = MAX_CHILDREN, S_DREC, S_DSEND0, S_PER_PIPE = S_DSEND0 + MAX_CHILDREN };

typedef struct {
  size_t base, n;              /* this pipeline's elements: [base, base + n) of the buffer */
  int k;                       /* messages per link and direction, which the counts below
                                  count as chunks: the chunks, or 3 in bulk */
  int chunks;                  /* chunks */
  int bulk;                    /* first chunk, the middle ones as one message, last chunk */
  int parent;                  /* parent rank, -1 at the root */
  int child[MAX_CHILDREN], nc; /* children ranks */
  int got[MAX_CHILDREN];       /* chunks received from each child (up) */
  int reduced;                 /* chunks whose up-reduction is complete here */
  int up_done;                 /* chunks sent to the parent (completed) */
  int down_got;                /* chunks received from the parent (final values) */
  int down_done[MAX_CHILDREN]; /* chunks sent to each child (completed) */
  int busy[S_PER_PIPE];        /* slot in flight */
} pipe_state;

typedef struct {
  int bcast;           /* broadcast (no up phase) rather than all-reduce */
  const float *src;    /* input */
  float *dst;          /* output */
  float *tmp[MAX_CHILDREN]; /* scratch for the chunks of children 1, 2 (same layout as dst) */
  MPI_Op op;
  MPI_Comm comm;
  int np;              /* pipelines */
  pipe_state *p;
  /* messages in flight: request and the slot (pipeline * S_PER_PIPE + slot) it stands for */
  MPI_Request *req;
  int *slot_of, n_req;
  int rank, rpn;       /* this rank, consecutive ranks per node */
  nccl_call nc;        /* NCCL's figures for the call (inert: plain alpha-beta) */
  char *wire;          /* payload-free under NCCL's model: scratch for the wire's bytes */
  size_t span;         /* bytes of one message at most; sends from wire, receives at wire + span */
} tree_run;

/* A chunk of `len` floats to or from `peer`: payload-free under NCCL's model it travels as the
 * bytes the protocol puts on the wire (coll/nccl.h), from and into scratch; else as is. */
static int chunk_msg(tree_run *R, int send, const float *buf, int len, int peer, int tag,
                     MPI_Request *q) {
  if (!R->wire)
    return send ? MPI_Isend(buf, len, MPI_FLOAT, peer, tag, R->comm, q)
                : MPI_Irecv((float *)buf, len, MPI_FLOAT, peer, tag, R->comm, q);
  const int intra = peer / R->rpn == R->rank / R->rpn;
  const int w = (int)(nccl_wire_bytes(&R->nc, intra, (double)len * COLL_ELEM_BYTES) + 0.5);
  return send ? MPI_Isend(R->wire, w, MPI_BYTE, peer, tag, R->comm, q)
              : MPI_Irecv(R->wire + R->span, w, MPI_BYTE, peer, tag, R->comm, q);
}

static size_t chunk_elems(void) { return COLL_PIPE_CHUNK_BYTES / COLL_ELEM_BYTES; }
static int chunk_count(size_t n) { return (int)((n + chunk_elems() - 1) / chunk_elems()); }
/* First chunk of message c: in bulk, message 1 is chunks 1 .. C-2, message 2 chunk C-1. */
static int m_first(const pipe_state *s, int c) { return s->bulk && c == 2 ? s->chunks - 1 : c; }
static size_t c_off(const pipe_state *s, int c) {
  return s->base + (size_t)m_first(s, c) * chunk_elems();
}
static int c_len(const pipe_state *s, int c) {
  const size_t off = (size_t)m_first(s, c) * chunk_elems();
  const size_t end = c + 1 < s->k ? (size_t)m_first(s, c + 1) * chunk_elems() : s->n;
  return (int)(end - off);
}
/* Messages that may go on, of `got` that have arrived (or been reduced): in bulk the middle
 * chunks start on once the first has (as the chunks behind it would, one link after the
 * other), the last only once it has arrived, so that a pipeline ends no earlier than its last
 * chunk could. */
static int ready(const pipe_state *s, int got) { return s->bulk && got == 1 ? 2 : got; }

/* Comm rank at place `pos` of the chain of channel j in node x (P ranks, rpn per node; the last
 * node may be short): local GPU (j + pos) mod the node's GPUs. */
static int chain_rank(int x, int pos, int j, int P, int rpn) {
  return x * rpn + (j + pos) % MIN(rpn, P - x * rpn);
}

/* Rank `r`'s place in the pipeline of channel j and node tree t, over P ranks of rpn per node:
 * its parent and children. */
static void pipe_setup(pipe_state *s, int j, int t, int r, int P, int rpn, size_t base, size_t n) {
  memset(s, 0, sizeof *s);
  s->base = base;
  s->n = n;
  s->k = s->chunks = chunk_count(n);
  const int N = (P + rpn - 1) / rpn, node = r / rpn;
  const int L = MIN(rpn, P - node * rpn), i = coll_mod(r % rpn - j, L);
  s->parent = i > 0 ? chain_rank(node, i - 1, j, P, rpn) : -1;
  if (i + 1 < L) s->child[s->nc++] = chain_rank(node, i + 1, j, P, rpn);
  if (i == 0) {
    int up, d[2];
    coll_tree_node(N, t, node, &up, &d[0], &d[1]);
    if (up >= 0) s->parent = chain_rank(up, 0, j, P, rpn);
    for (int c = 0; c < 2; c++)
      if (d[c] >= 0) s->child[s->nc++] = chain_rank(d[c], 0, j, P, rpn);
  }
}

/* Messages whose final value is available here (to send on). */
static int final_count(const tree_run *R, const pipe_state *s) {
  if (s->parent >= 0) return ready(s, s->down_got);
  return R->bcast ? s->k : ready(s, s->reduced);
}
/* Buffer that holds the final value of a chunk here (the root of a broadcast sends its input). */
static const float *final_buf(const tree_run *R, const pipe_state *s) {
  return (R->bcast && s->parent < 0) ? R->src : R->dst;
}

static int pipe_done(const tree_run *R, const pipe_state *s) {
  for (int i = 0; i < s->nc; i++)
    if (s->down_done[i] < s->k || (!R->bcast && s->got[i] < s->k)) return 0;
  return s->parent < 0 || (s->down_got >= s->k && (R->bcast || s->up_done >= s->k));
}

/* Starts a message of pipeline p's slot `slot`. */
static int post(tree_run *R, int p, int slot, int send, const float *buf, int len, int peer,
                int tag) {
  int rc = chunk_msg(R, send, buf, len, peer, tag, &R->req[R->n_req]);
  if (rc != MPI_SUCCESS) return rc;
  R->slot_of[R->n_req++] = p * S_PER_PIPE + slot;
  R->p[p].busy[slot] = 1;
  return MPI_SUCCESS;
}

/* Posts every message of pipeline p that may go now; reduces chunks whose children have all
 * arrived. */
static int pipe_post(tree_run *R, int p) {
  pipe_state *s = &R->p[p];
  const int tag_up = TAG_TREE + 2 * p, tag_down = tag_up + 1;
  int rc;
  if (!R->bcast) {
    for (int i = 0; i < s->nc; i++)
      if (!s->busy[S_CREC0 + i] && s->got[i] < s->k) {
        float *into = (i == 0 ? R->dst : R->tmp[i]) + c_off(s, s->got[i]);
        if ((rc = post(R, p, S_CREC0 + i, 0, into, c_len(s, s->got[i]), s->child[i], tag_up)))
          return rc;
      }
    /* dst chunk = src + child 0 (+ child 1, + child 2): inout = in op inout */
    for (;;) {
      int ready = s->reduced < s->k && s->nc > 0;
      for (int i = 0; ready && i < s->nc; i++) ready = s->got[i] > s->reduced;
      if (!ready) break;
      const size_t off = c_off(s, s->reduced);
      const int len = c_len(s, s->reduced);
      rc = coll_reduce(R->src + off, R->dst + off, (size_t)len, R->op);
      for (int i = 1; rc == MPI_SUCCESS && i < s->nc; i++)
        rc = coll_reduce(R->tmp[i] + off, R->dst + off, (size_t)len, R->op);
      if (rc != MPI_SUCCESS) return rc;
      s->reduced++;
    }
    if (s->nc == 0) s->reduced = s->k; /* a leaf's contribution is its input */
    if (s->parent >= 0 && !s->busy[S_UP] && s->up_done < ready(s, s->reduced)) {
      const float *from = (s->nc == 0 ? R->src : R->dst) + c_off(s, s->up_done);
      if ((rc = post(R, p, S_UP, 1, from, c_len(s, s->up_done), s->parent, tag_up))) return rc;
    }
  }
  /* The final value of chunk c overwrites dst only once chunk c has left for the parent (in
   * bulk, payload-free, the middle chunks may come once the first has). */
  const int may_recv = R->bcast ? s->k : ready(s, s->up_done);
  if (s->parent >= 0 && !s->busy[S_DREC] && s->down_got < may_recv &&
      (rc = post(R, p, S_DREC, 0, R->dst + c_off(s, s->down_got), c_len(s, s->down_got),
                 s->parent, tag_down)))
    return rc;
  const int fin = final_count(R, s);
  for (int i = 0; i < s->nc; i++)
    if (!s->busy[S_DSEND0 + i] && s->down_done[i] < fin &&
        (rc = post(R, p, S_DSEND0 + i, 1, final_buf(R, s) + c_off(s, s->down_done[i]),
                   c_len(s, s->down_done[i]), s->child[i], tag_down)))
      return rc;
  return MPI_SUCCESS;
}

/* The message at index idx of the requests in flight completed. */
static void complete(tree_run *R, int idx) {
  const int p = R->slot_of[idx] / S_PER_PIPE, k = R->slot_of[idx] % S_PER_PIPE;
  R->n_req--;
  R->req[idx] = R->req[R->n_req];
  R->slot_of[idx] = R->slot_of[R->n_req];
  pipe_state *s = &R->p[p];
  s->busy[k] = 0;
  if (k < S_UP) s->got[k - S_CREC0]++;
  else if (k == S_UP) s->up_done++;
  else if (k == S_DREC) s->down_got++;
  else s->down_done[k - S_DSEND0]++;
}

/* n floats; src on every rank (all-reduce) or on rank 0 (broadcast). */
static int tree_collective(int bcast, const float *src, float *dst, size_t n, MPI_Comm comm,
                           const coll_topo *topo, MPI_Op op) {
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  if (P == 1 || (bcast && r == 0)) {
    coll_copy(dst, src, n * sizeof(float));
    if (P == 1) return MPI_SUCCESS;
  }
  tree_run R = {.bcast = bcast, .src = src, .dst = dst, .op = op, .comm = comm, .rank = r};
  R.rpn = topo && topo->ranks_per_node > 0 ? MIN(topo->ranks_per_node, P) : P;
  const int k = bcast ? 1 : coll_ring_channels(P, R.rpn);
  /* folded (coll_topo): channel 0's two pipelines run, on a platform where they stand for all */
  const int kr = coll_channels_run(topo, k);
  R.np = 2 * k;
  nccl_plan(&R.nc, bcast || !topo ? NULL : topo->nccl, COLL_ALLREDUCE, "tree",
            (double)n * COLL_ELEM_BYTES, P, topo ? topo->n_nodes : 1);
  /* Long pipelines send their middle chunks as one message where the flavour allows
   * (coll_tree_bulk): every size they would have gone as must get one bandwidth factor, the
   * smallest being a pipeline's last chunk. */
  size_t most_elems = 0, last = chunk_elems();
  double widen = 1;
  for (int p = 0; p < R.np; p++) {
    const size_t len = coll_chunk_len(n, R.np, p);
    most_elems = MAX(most_elems, len);
    if (len) last = MIN(last, len - (size_t)(chunk_count(len) - 1) * chunk_elems());
  }
  for (int intra = 0; intra < 2; intra++) widen = MAX(widen, nccl_wire_bytes(&R.nc, intra, 1.0));
  const double middle = (double)(chunk_count(most_elems) - 2) * COLL_PIPE_CHUNK_BYTES;
  const int bulk = chunk_count(most_elems) >= TREE_BULK_CHUNKS && widen * middle < INT_MAX / 2 &&
                   coll_tree_bulk((double)last * COLL_ELEM_BYTES, widen * middle);
  if (R.nc.proto >= 0 && !coll_buf_has_data()) {
    R.span = (size_t)nccl_wire_bytes(&R.nc, 1, bulk ? middle : COLL_PIPE_CHUNK_BYTES) + 64;
    R.wire = coll_buf_alloc(2 * R.span);
  }
  R.p = g_new(pipe_state, R.np);
  R.req = g_new(MPI_Request, R.np * S_PER_PIPE);
  R.slot_of = g_new(int, R.np * S_PER_PIPE);
  int most = 0, chunks = 0, n_peers = 0;
  int *peers = g_new(int, R.np * (MAX_CHILDREN + 1)); /* of the bulk pipelines */
  for (int t = 0; t < 2; t++)
    for (int j = 0; j < k; j++) {
      const int p = t * k + j;
      pipe_state *s = &R.p[p];
      pipe_setup(s, j, bcast ? 0 : t, r, P, R.rpn, coll_chunk_off(n, R.np, p),
                 coll_chunk_len(n, R.np, p));
      most = MAX(most, s->nc);
      chunks = MAX(chunks, s->chunks);
      if (bulk && s->chunks >= TREE_BULK_CHUNKS) {
        s->bulk = 1;
        s->k = 3;
        if (s->parent >= 0) peers[n_peers++] = s->parent;
        for (int i = 0; i < s->nc; i++) peers[n_peers++] = s->child[i];
      }
      /* a folded-away pipeline moves nothing, but its peers' latencies are held for as the
       * full run holds them */
      if (j >= kr) pipe_setup(s, j, bcast ? 0 : t, r, P, R.rpn, coll_chunk_off(n, R.np, p), 0);
    }
  /* payload-free with NCCL's model every chunk comes into the wire scratch */
  for (int i = 1; !bcast && !R.wire && i < most; i++) R.tmp[i] = coll_buf_alloc(n * sizeof(float));
  int rc = MPI_SUCCESS, left = R.np;
  for (int p = 0; p < R.np && rc == MPI_SUCCESS; p++) rc = pipe_post(&R, p);
  for (int p = 0; p < R.np; p++) left -= pipe_done(&R, &R.p[p]);
  while (rc == MPI_SUCCESS && left > 0) {
    int idx;
    if (R.n_req == 0) { /* nothing in flight but not done: a logic error */
      rc = MPI_ERR_INTERN;
      break;
    }
    if ((rc = MPI_Waitany(R.n_req, R.req, &idx, MPI_STATUS_IGNORE)) != MPI_SUCCESS) break;
    const int p = R.slot_of[idx] / S_PER_PIPE, was = pipe_done(&R, &R.p[p]);
    complete(&R, idx);
    rc = pipe_post(&R, p);
    left -= pipe_done(&R, &R.p[p]) - was;
  }
  /* folded: through every channel's pipelines once the node is through channel 0's */
  if (rc == MPI_SUCCESS && kr < k) coll_fold_sync(comm, r - r % R.rpn, R.rpn);
  for (int i = 1; i < MAX_CHILDREN; i++) coll_buf_free(R.tmp[i]);
  coll_buf_free(R.wire);
  g_free(R.p);
  g_free(R.req);
  g_free(R.slot_of);
  /* the route latencies of the middle chunks, which went as one message */
  if (rc == MPI_SUCCESS && n_peers)
    coll_tree_hold(peers, n_peers, chunks - 2, nccl_wire_bytes(&R.nc, 0, COLL_PIPE_CHUNK_BYTES),
                   nccl_wire_bytes(&R.nc, 0, middle), comm);
  g_free(peers);
  /* NCCL's latency where it exceeds the routes' of the chunks' 2D + C - 1 chunk times */
  if (rc == MPI_SUCCESS)
    coll_tree_settle(&R.nc, P, R.rpn, 2 * coll_tree_depth(P, R.rpn) + chunks - 1,
                     nccl_wire_bytes(&R.nc, topo && topo->n_nodes == 1,
                                     MIN((double)n / R.np * COLL_ELEM_BYTES, COLL_PIPE_CHUNK_BYTES)),
                     comm);
  return rc;
}

int coll_allreduce_tree(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  return tree_collective(0, sendbuf, recvbuf, bytes / COLL_ELEM_BYTES, comm, topo, op);
}

/* Broadcast moves bytes, not floats: whole floats go down the trees, a tail of bytes % 4 goes
 * from the root to everyone directly (only for sizes that are not multiples of 4). */
int coll_broadcast_tree(const void *sendbuf, void *recvbuf, size_t bytes, MPI_Comm comm,
                        const coll_topo *topo, MPI_Op op) {
  int rc = tree_collective(1, sendbuf, recvbuf, bytes / COLL_ELEM_BYTES, comm, topo, op);
  size_t tail = bytes % COLL_ELEM_BYTES, head = bytes - tail;
  if (rc != MPI_SUCCESS || tail == 0) return rc;
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  if (r == 0) {
    coll_copy((char *)recvbuf + head, (const char *)sendbuf + head, tail);
    for (int d = 1; d < P && rc == MPI_SUCCESS; d++)
      rc = MPI_Send((const char *)sendbuf + head, (int)tail, MPI_BYTE, d, TAG_TAIL, comm);
    return rc;
  }
  return MPI_Recv((char *)recvbuf + head, (int)tail, MPI_BYTE, 0, TAG_TAIL, comm,
                  MPI_STATUS_IGNORE);
}
