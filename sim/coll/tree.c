/* tree.c — NCCL's double binary tree (Sanders, Speck & Träff 2009; NCCL 2.4).
 *
 * Tree A is an in-order binary tree on ranks 1..P-1 (the parent of x, with b its lowest set bit,
 * is (x - b) | 2b, or x - b when that is >= P) under rank 0, which has a single child. Tree B is
 * the same shape on the rank order 0, 2, 3, ..., P-1, 1: rank 0 stays the root and every other
 * rank moves one place, so the leaves of A (odd ranks) are the inner nodes of B and the other way
 * round. Each tree carries half of the buffer. All-reduce reduces each chunk up the tree and
 * broadcasts it down; broadcast only goes down. Both trees and both directions are pipelined in
 * chunks of COLL_PIPE_CHUNK_BYTES: a node forwards chunk k while chunk k+1 arrives, one
 * message in flight per link and direction. Progress is driven by MPI_Waitany (no polling).
 * Under NCCL's protocol model (coll/nccl.h) the all-reduce's chunks travel as the bytes the
 * protocol puts on the wire (payload-free buffers) and the call waits for what NCCL's tree
 * latency adds to the routes'. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

#define TAG_TREE 0x6c20

/* Rank of tree position `role` in tree t, and the inverse (P >= 2). */
static int role_to_rank(int t, int role, int P) {
  if (t == 0 || role == 0) return role;
  return role == P - 1 ? 1 : role + 1;
}
static int rank_to_role(int t, int rank, int P) {
  if (t == 0 || rank == 0) return rank;
  return rank == 1 ? P - 1 : rank - 1;
}
static int parent_role(int x, int P) {
  if (x == 0) return -1;
  int b = x & -x;
  int up = (x ^ b) | (b << 1);
  return up >= P ? (x ^ b) : up;
}

typedef struct {
  size_t base, n;      /* this tree's elements: [base, base + n) of the buffer */
  int k;               /* chunks */
  int parent;          /* parent rank, -1 at the root */
  int child[2], nc;    /* children ranks */
  int got[2];          /* chunks received from each child (up) */
  int reduced;         /* chunks whose up-reduction is complete here */
  int up_done;         /* chunks sent to the parent (completed) */
  int down_got;        /* chunks received from the parent (final values) */
  int down_done[2];    /* chunks sent to each child (completed) */
  int busy[6];         /* slot in flight: child recv 0/1, up send, down recv, down send 0/1 */
} tree_state;

enum { S_CREC0, S_CREC1, S_UP, S_DREC, S_DSEND0, S_DSEND1, S_PER_TREE };

typedef struct {
  int bcast;           /* broadcast (no up phase) rather than all-reduce */
  const float *src;    /* input */
  float *dst;          /* output */
  float *tmp;          /* scratch for the second child's chunks, same layout as dst */
  MPI_Op op;
  MPI_Comm comm;
  tree_state t[2];
  MPI_Request req[2 * S_PER_TREE];
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
static size_t c_off(const tree_state *s, int c) { return s->base + (size_t)c * chunk_elems(); }
static int c_len(const tree_state *s, int c) {
  size_t off = (size_t)c * chunk_elems(), left = s->n - off;
  return (int)(left < chunk_elems() ? left : chunk_elems());
}

static void tree_setup(tree_state *s, int t, int r, int P, size_t base, size_t n) {
  memset(s, 0, sizeof *s);
  s->base = base;
  s->n = n;
  s->k = (int)((n + chunk_elems() - 1) / chunk_elems());
  int me = rank_to_role(t, r, P);
  int pr = parent_role(me, P);
  s->parent = pr < 0 ? -1 : role_to_rank(t, pr, P);
  for (int x = 1; x < P; x++)
    if (parent_role(x, P) == me && s->nc < 2) s->child[s->nc++] = role_to_rank(t, x, P);
}

/* Chunks whose final value is available here. */
static int final_count(const tree_run *R, const tree_state *s) {
  if (s->parent >= 0) return s->down_got;
  return R->bcast ? s->k : s->reduced;
}
/* Buffer that holds the final value of a chunk here (the root of a broadcast sends its input). */
static const float *final_buf(const tree_run *R, const tree_state *s) {
  return (R->bcast && s->parent < 0) ? R->src : R->dst;
}

static int tree_done(const tree_run *R, const tree_state *s) {
  for (int i = 0; i < s->nc; i++)
    if (s->down_done[i] < s->k) return 0;
  if (s->parent >= 0 && s->down_got < s->k) return 0;
  (void)R;
  return 1;
}

/* Posts every message that may go now; reduces chunks whose children have all arrived. */
static int tree_post(tree_run *R, int t) {
  tree_state *s = &R->t[t];
  MPI_Request *q = &R->req[t * S_PER_TREE];
  int tag_up = TAG_TREE + 2 * t, tag_down = tag_up + 1, rc;
  if (!R->bcast) {
    for (int i = 0; i < s->nc; i++)
      if (!s->busy[S_CREC0 + i] && s->got[i] < s->k) {
        float *into = (i == 0 ? R->dst : R->tmp) + c_off(s, s->got[i]);
        rc = chunk_msg(R, 0, into, c_len(s, s->got[i]), s->child[i], tag_up, &q[S_CREC0 + i]);
        if (rc != MPI_SUCCESS) return rc;
        s->busy[S_CREC0 + i] = 1;
      }
    /* dst chunk = src + child 0 (+ child 1): inout = in op inout. */
    while (s->reduced < s->k && s->nc > 0 && s->got[0] > s->reduced &&
           (s->nc < 2 || s->got[1] > s->reduced)) {
      size_t off = c_off(s, s->reduced);
      int len = c_len(s, s->reduced);
      rc = coll_reduce(R->src + off, R->dst + off, (size_t)len, R->op);
      if (rc == MPI_SUCCESS && s->nc == 2) rc = coll_reduce(R->tmp + off, R->dst + off, (size_t)len, R->op);
      if (rc != MPI_SUCCESS) return rc;
      s->reduced++;
    }
    if (s->nc == 0) s->reduced = s->k; /* a leaf's contribution is its input */
    if (s->parent >= 0 && !s->busy[S_UP] && s->up_done < s->reduced) {
      const float *from = (s->nc == 0 ? R->src : R->dst) + c_off(s, s->up_done);
      rc = chunk_msg(R, 1, from, c_len(s, s->up_done), s->parent, tag_up, &q[S_UP]);
      if (rc != MPI_SUCCESS) return rc;
      s->busy[S_UP] = 1;
    }
  }
  /* The final value of chunk c overwrites dst only once chunk c has left for the parent. */
  int may_recv = R->bcast ? s->k : s->up_done;
  if (s->parent >= 0 && !s->busy[S_DREC] && s->down_got < may_recv) {
    rc = chunk_msg(R, 0, R->dst + c_off(s, s->down_got), c_len(s, s->down_got), s->parent,
                   tag_down, &q[S_DREC]);
    if (rc != MPI_SUCCESS) return rc;
    s->busy[S_DREC] = 1;
  }
  int fin = final_count(R, s);
  for (int i = 0; i < s->nc; i++)
    if (!s->busy[S_DSEND0 + i] && s->down_done[i] < fin) {
      const float *from = final_buf(R, s) + c_off(s, s->down_done[i]);
      rc = chunk_msg(R, 1, from, c_len(s, s->down_done[i]), s->child[i], tag_down,
                     &q[S_DSEND0 + i]);
      if (rc != MPI_SUCCESS) return rc;
      s->busy[S_DSEND0 + i] = 1;
    }
  return MPI_SUCCESS;
}

static void tree_complete(tree_run *R, int slot) {
  tree_state *s = &R->t[slot / S_PER_TREE];
  int k = slot % S_PER_TREE;
  s->busy[k] = 0;
  switch (k) {
  case S_CREC0: case S_CREC1: s->got[k - S_CREC0]++; break;
  case S_UP: s->up_done++; break;
  case S_DREC: s->down_got++; break;
  default: s->down_done[k - S_DSEND0]++; break;
  }
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
  R.rpn = topo && topo->ranks_per_node > 0 ? topo->ranks_per_node : P;
  nccl_plan(&R.nc, bcast || !topo ? NULL : topo->nccl, COLL_ALLREDUCE, "tree",
            (double)n * COLL_ELEM_BYTES, P, topo ? topo->n_nodes : 1);
  if (R.nc.proto >= 0 && !coll_buf_has_data()) {
    R.span = (size_t)nccl_wire_bytes(&R.nc, 1, COLL_PIPE_CHUNK_BYTES) + 64;
    R.wire = coll_buf_alloc(2 * R.span);
  }
  for (int i = 0; i < 2 * S_PER_TREE; i++) R.req[i] = MPI_REQUEST_NULL;
  tree_setup(&R.t[0], 0, r, P, 0, n / 2);
  tree_setup(&R.t[1], 1, r, P, n / 2, n - n / 2);
  int need_tmp = !bcast && (R.t[0].nc == 2 || R.t[1].nc == 2);
  if (need_tmp) R.tmp = coll_buf_alloc(n * sizeof(float));
  int rc = MPI_SUCCESS;
  for (;;) {
    for (int t = 0; t < 2 && rc == MPI_SUCCESS; t++) rc = tree_post(&R, t);
    if (rc != MPI_SUCCESS) break;
    if (tree_done(&R, &R.t[0]) && tree_done(&R, &R.t[1])) break;
    int idx;
    rc = MPI_Waitany(2 * S_PER_TREE, R.req, &idx, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) break;
    if (idx == MPI_UNDEFINED) { /* nothing in flight but not done: a logic error */
      rc = MPI_ERR_INTERN;
      break;
    }
    tree_complete(&R, idx);
  }
  /* Up sends of a broadcast never exist; of an all-reduce they complete before down receives. */
  coll_buf_free(R.tmp);
  coll_buf_free(R.wire);
  if (rc == MPI_SUCCESS)
    coll_tree_settle(&R.nc, P,
                     nccl_wire_bytes(&R.nc, topo && topo->n_nodes == 1,
                                     MIN((double)n / 2 * COLL_ELEM_BYTES, COLL_PIPE_CHUNK_BYTES)),
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
      rc = MPI_Send((const char *)sendbuf + head, (int)tail, MPI_BYTE, d, TAG_TREE + 9, comm);
    return rc;
  }
  return MPI_Recv((char *)recvbuf + head, (int)tail, MPI_BYTE, 0, TAG_TREE + 9, comm,
                  MPI_STATUS_IGNORE);
}
