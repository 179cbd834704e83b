/* coll.h — NCCL-like collective algorithms: names, defaults and byte counts (this header), and
 * the algorithms themselves written on MPI point-to-point (coll_mpi.h, coll*.c).
 *
 * This header needs no MPI: the command-line driver uses it for --help, option checking, the
 * default choice and the bytes each algorithm puts on the wire. The algorithm table lives here
 * as one X-macro list, COLL_ALGO_LIST; coll.c expands it into {op, name, description, fn}.
 *
 * Conventions shared by every operation (as nccl-tests reports them):
 *   `bytes` is the size of the whole buffer that the operation is about:
 *     allreduce      send = recv = bytes, reduced element-wise
 *     allgather      recv = bytes, each rank contributes bytes / P (its block, at offset r·bytes/P)
 *     reducescatter  send = bytes, recv = bytes / P (rank r gets reduced block r)
 *     alltoall       send = recv = bytes, block j of rank r's send goes to block r of rank j's recv
 *     broadcast      root 0's send (bytes) ends up in every rank's recv
 *     sendrecv       each rank sends bytes to rank r+1 and receives bytes from rank r-1 (mod P)
 *   Reductions work on elements of COLL_ELEM_BYTES (float) with the caller's MPI_Op; bytes must
 *   be a multiple of COLL_ELEM_BYTES, and of COLL_ELEM_BYTES · P for allgather, reducescatter and
 *   alltoall (coll_round_bytes rounds down to that).
 *
 * Topology (coll_topo): the ranks of the communicator are grouped into nodes of
 * ranks_per_node consecutive ranks (rank r is on node r / ranks_per_node, local rank
 * r % ranks_per_node), which is how dlsim maps ranks to the hosts of a platform (node-major).
 */
#ifndef DL_COLL_H
#define DL_COLL_H

#include <stddef.h>

#include "platform/platform.h"

/* Element size of reductions: float32 gradients. */
#define COLL_ELEM_BYTES 4

/* Pipelining chunk of the tree algorithms and of the ring broadcast, bytes: NCCL splits its
 * 4 MiB channel buffer into 8 steps of 512 KiB (NCCL_STEPS, ncclParamBuffSize); each tree half
 * (and the broadcast chain) moves in chunks of at most this size, so a chunk is forwarded while
 * the next one is still arriving. */
#define COLL_PIPE_CHUNK_BYTES (512 * 1024)

/* X(enum, printable name, nccl-tests bus-bandwidth factor numerator kind) */
#define COLL_OP_LIST(X)                    \
  X(COLL_ALLREDUCE, "allreduce")           \
  X(COLL_ALLGATHER, "allgather")           \
  X(COLL_REDUCESCATTER, "reducescatter")   \
  X(COLL_BROADCAST, "broadcast")           \
  X(COLL_ALLTOALL, "alltoall")             \
  X(COLL_SENDRECV, "sendrecv")

typedef enum {
#define COLL_X(e, name) e,
  COLL_OP_LIST(COLL_X)
#undef COLL_X
  COLL_OP_COUNT
} coll_op;

/* Where a rank sits. Invariant: ranks are node-major (see file comment). */
typedef struct {
  int ranks_per_node; /* GPUs per node used by this communicator (>= 1) */
  int n_nodes;        /* nodes spanned: ceil(P / ranks_per_node) */
  int node;           /* this rank's node index within the communicator: rank / ranks_per_node */
  int local_rank;     /* this rank's index within its node: rank % ranks_per_node */
  /* NCCL's view of the machine (coll/nccl.h), for the protocol model of the ring and tree
   * collectives; NULL: none (the real flavour, platforms without NVIDIA GPUs). Borrowed. */
  const struct nccl_env *nccl;
  /* Channels folded (1: none): the ranks run channel 0 of the group's coll_ring_channels rings
   * or tree pipelines, on a platform where it stands for all of them (plat_fold_xml); set only
   * where that many channels run, on payload-free buffers, by the SMPI executor. */
  int fold;
} coll_topo;

/* Fills `t` for rank `rank` of `P` ranks with `ranks_per_node` (values < 1 mean 1); nccl NULL. */
void coll_topo_init(coll_topo *t, int rank, int P, int ranks_per_node);

/* dlsim's ring collectives run as NCCL runs its channels: a group of P ranks that fills whole
 * nodes of rpn consecutive ranks (P a multiple of rpn, rpn > 1, two nodes or more) runs rpn
 * rings at once, ring j on slice j of the buffer. Ring j visits the nodes in order; inside an
 * even node it goes through local ranks j, j+1, ..., j-1, inside an odd node j-1, j-2, ..., j,
 * so every hop between nodes joins two GPUs of one local index (one rail), and each NIC
 * carries one ring each way. Any other group runs one ring, in rank order. */
#define COLL_MAX_RINGS 32
int coll_ring_channels(int P, int rpn);

/* The collectives' message tags (and the SMPI executor's ring phases) lie in [COLL_TAG_BASE,
 * COLL_TAG_BASE + 0x400); a plan's own messages (plan.h) stay below COLL_TAG_BASE, for they share
 * MPI_COMM_WORLD with the collectives of groups that span every rank. 2^18 + 2^10 is below the
 * MPI_TAG_UB of SMPI, Open MPI (ob1 and UCX) and MPICH. */
#define COLL_TAG_BASE 0x40000

/* a mod m in [0, m) for any a. */
static inline int coll_mod(int a, int m) { return ((a % m) + m) % m; }

/* Recursive halving-doubling over P ranks (coll/rhd.c): p2, the largest power of two <= P (P >= 1),
 * its log2 into *lg (may be NULL); the rem = P - p2 ranks 2i fold into 2i + 1 (i < rem), and
 * virtual rank v (0..p2-1) is real rank coll_rhd_real(v, rem). */
static inline int coll_pow2_floor(int P, int *lg) {
  int p2 = 1, l = 0;
  while (2 * p2 <= P) p2 *= 2, l++;
  if (lg) *lg = l;
  return p2;
}
static inline int coll_rhd_real(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }
/* The reduce-scatter's halving step at mask m: how many blocks of n / P virtual rank v sends
 * (the half it does not keep), a virtual rank standing for a folded pair (v < rem) holding two. */
static inline double coll_rhd_rs_blocks(int v, int m, int rem) {
  const int lo = v / (2 * m) * (2 * m), a = v & m ? lo : lo + m, b = a + m;
  return (double)(b - a) + (rem > a ? (rem < b ? rem : b) - a : 0);
}

/* Member (0..P-1) at position i (any integer, taken mod P) of ring j of k such rings. */
static inline int coll_flat_ring_member(int k, int P, int rpn, int j, int i) {
  i = coll_mod(i, P);
  if (k == 1) return i;
  const int node = i / rpn, t = i % rpn;
  return node * rpn + (node % 2 ? coll_mod(j - 1 - t, rpn) : (j + t) % rpn);
}
/* Position of member m in ring j (the inverse). */
static inline int coll_flat_ring_pos(int k, int rpn, int j, int m) {
  if (k == 1) return m;
  const int node = m / rpn, local = m % rpn;
  return node * rpn + (node % 2 ? coll_mod(j - 1 - local, rpn) : coll_mod(local - j, rpn));
}

/* dlsim's tree collectives run as NCCL builds its trees (src/graph/connect.cc, trees.cc): on
 * channel j (of coll_ring_channels(P, rpn), as the rings), the GPUs of each node form a chain
 * that starts at local GPU j (the head; j mod the node's GPUs) and runs up through j+1, ...,
 * j-1; the heads of the nodes form NCCL's double binary tree over the nodes, tree 0 on
 * channels 0..k-1 and tree 1 (the mirror of tree 0 for an even node count, tree 0 shifted by
 * one node for an odd one) on channels k..2k-1, each of the 2k pipelines carrying 1/(2k) of the
 * buffer. Every hop between nodes joins two GPUs of one local index (one rail). Nodes here are
 * blocks of rpn consecutive ranks (the last one may be short). */
/* Node tree t (0, 1) over N nodes: the parent of node x (-1 at the root) and its children (-1:
 * none), as NCCL's ncclGetDtree. */
void coll_tree_node(int N, int t, int x, int *up, int *down0, int *down1);
/* Depth of the trees as NCCL counts it: the GPUs of a node but one, plus floor(log2(nodes)). */
int coll_tree_depth(int P, int rpn);
/* Flows on the busiest link out of a GPU when every flow of the all-reduce's trees is on
 * (tree[]) and when the ring collectives' channels are (coll_ring_channels, ring[]); [0] the
 * links across nodes, [1] those inside a node. With whole nodes of L GPUs: inside, 4(L-1)
 * against L-1 (a GPU sends up and down on both trees at every place of the chain); across, the
 * most edges a node has in the two node trees against one. */
void coll_tree_flows(int P, int rpn, double tree[2], double ring[2]);

/* A communicator as the cost formulas see it: its size, how it spans nodes, and the latency
 * (s) and bottleneck bandwidth (bytes/s) of its routes — over the ring of members, inside one
 * node and between nodes (same local GPU index: one rail). The closed form summarises a group
 * of platform hosts this way (exec/analytic/groups.c). */
#define COLL_CHAIN_WINDOWS_MAX 64
/* Cells of the chain's tables for H hops, and the cell of window lo..hi: every window up to
 * COLL_CHAIN_WINDOWS_MAX hops (lo H + hi); beyond, each hop alone (lo), the first hi + 1 hops
 * (H + hi), the last from lo (2H + lo), and a window inside the chain as the first hops of its
 * length. */
static inline size_t coll_chain_cells(int H) {
  return H <= COLL_CHAIN_WINDOWS_MAX ? (size_t)H * H : 3 * (size_t)H;
}
static inline size_t coll_chain_window(int H, int lo, int hi) {
  if (H <= COLL_CHAIN_WINDOWS_MAX) return (size_t)lo * H + hi;
  if (lo == hi) return (size_t)lo;
  if (lo == 0) return (size_t)H + hi;
  if (hi == H - 1) return 2 * (size_t)H + lo;
  return (size_t)H + (hi - lo);
}
typedef struct {
  int P;                 /* members */
  int nodes;             /* distinct nodes spanned */
  int per_node;          /* members per node (the largest count on one node) */
  double ring_alpha_s;   /* largest route latency between ring neighbours (member i -> i+1) */
  double ring_beta_bps;  /* smallest bottleneck bandwidth between ring neighbours */
  /* the ring broadcast's chain 0 -> 1 -> ... -> P-1 of H = P-1 hops: with hops lo..hi busy at
   * once, their largest route latency and slowest rate, index lo * H + hi (NULL: not summarised,
   * the ring's step stands for every hop). Every window up to COLL_CHAIN_WINDOWS_MAX hops; on
   * longer chains the first L hops, the last L and each hop alone, other windows taken as the
   * first hops of their length. */
  double *chain_alpha_s, *chain_beta_bps;
  /* the logarithmic algorithms' steps (coll/rhd.c), each step's flows all at once, flow by flow:
   * route latency and rate (NULL: not summarised, the ring's step for every one), P flows a
   * step: rhd_*[i] the fold of the ranks past the largest power of two p2 (2i -> 2i+1,
   * i < P - p2), rhd_*[k P + v] (k = 1 + log2 m) virtual rank v's flow to v ^ m,
   * rhd_*[(1 + log2 p2) P + i] the way back (2i+1 -> 2i);
   * bruck_*[k P + r] rank r's flow to r - d at Bruck's step k (d = 2^k). The rates are those
   * of the step's flows with their bytes (all alike but for the reduce-scatter's halving steps,
   * rs_beta_bps[k P + v], whose halves follow coll_rhd_rs_blocks): where the short ones end,
   * the long ones speed up. */
  double *rhd_alpha_s, *rhd_beta_bps, *rs_beta_bps, *bruck_alpha_s, *bruck_beta_bps;
  /* the all-reduce's two node trees where every member is a node of its own (coll_tree_node,
   * NULL: not summarised, the channels' figures above stand for every edge): for member x in
   * tree t (index t P + x) the route latency of its edge up to its parent and down from it,
   * and the edge's rate with the edges of its depth and direction in both trees on at once
   * (the first chunk's way) and with every edge of both trees, both ways, on at once (the
   * pipeline's steady state); tree_depth[t P + x] its depth */
  double *tree_up_alpha_s, *tree_down_alpha_s, *tree_up_lvl_bps, *tree_down_lvl_bps,
      *tree_up_all_bps, *tree_down_all_bps;
  int *tree_depth;
  double intra_alpha_s;  /* route between two members of one node (0 if none) */
  double intra_beta_bps;
  double inter_alpha_s;  /* route between members of two nodes with the same local index */
  double inter_beta_bps;
  /* the step of the ring collectives' coll_ring_channels rings, all at once: the largest
   * latency, and the slowest rate of a hop inside a node and of one between nodes (INFINITY:
   * no such hop) */
  int chan_k;
  double chan_alpha_s, chan_intra_beta_bps, chan_inter_beta_bps;
  /* the pairwise exchanges' steps (all-to-all): at step s (1..P-1) the flows member i -> i+s all
   * at once, their largest latency and slowest rate (index s; NULL: not summarised, the ring's
   * step stands for every one) */
  double *pair_alpha_s, *pair_beta_bps;
  const struct nccl_env *nccl; /* NCCL's view of the machine (coll/nccl.h), NULL: none */
  /* SimGrid's per-message factors of the platform (plat_bw_factor, plat_lat_factor): a message
   * of s bytes sees latency × lat(s) and bandwidth × bw(s); NULL for none (borrowed) */
  const plat_factor *bw_factor, *lat_factor;
} coll_group;

/* Bytes each rank sends for one call, averaged over the P ranks (topo may be NULL: one node). */
typedef double (*coll_wire_fn)(coll_op op, double bytes, int P, const coll_topo *topo);
/* Alpha-beta time of one call on group `g` (coll/cost.h), s. */
typedef double (*coll_cost_fn)(coll_op op, double bytes, const coll_group *g);

/* The algorithm table: X(op, name, implementing function, wire-bytes function, cost function,
 * description). One row is one algorithm: its MPI code (the files of coll/, expanded only by the MPI side,
 * coll_mpi.h), the bytes it puts on the wire and its closed-form time (coll/cost.c), and what
 * --help says of it. "smpi" calls the plain MPI collective, so that SMPI's own algorithm chosen
 * with --cfg=smpi/<coll>:<name> runs; users spell it "smpi:<name>"; it has no closed form of its
 * own and is counted as a ring. */
#define COLL_ALGO_LIST(X)                                                                        \
  X(COLL_ALLREDUCE, "ring", coll_allreduce_ring, coll_wire_ring, coll_cost_ring,               \
    "NCCL ring: reduce-scatter then all-gather around a ring, 2(P-1) steps of bytes/P; across " \
    "whole nodes one ring per GPU of a node, each on its own rails (NCCL's channels)")         \
  X(COLL_ALLREDUCE, "tree", coll_allreduce_tree, coll_wire_ring, coll_cost_tree,               \
    "NCCL's trees: per channel a chain through each node's GPUs and a double binary tree "    \
    "across nodes (two complementary trees, half the data each); reduce up, broadcast down, " \
    "512 KiB chunks")                                                                          \
  X(COLL_ALLREDUCE, "hier", coll_allreduce_hier, coll_wire_hier, coll_cost_hier,               \
    "hierarchical: ring reduce-scatter in the node, ring all-reduce of the shard across "      \
    "nodes among same-local-rank GPUs, ring all-gather in the node")                           \
  X(COLL_ALLREDUCE, "rhd", coll_allreduce_rhd, coll_wire_rhd, coll_cost_rhd,                   \
    "Rabenseifner: recursive halving reduce-scatter + recursive doubling all-gather, "         \
    "2 log2(P) steps (non-powers of two fold the extra ranks first)")                          \
  X(COLL_ALLREDUCE, "smpi", coll_allreduce_smpi, coll_wire_ring, coll_cost_ring,               \
    "MPI_Allreduce: SMPI's algorithm, pinned with smpi:<name> (e.g. smpi:lr)")                 \
  X(COLL_ALLGATHER, "ring", coll_allgather_ring, coll_wire_ring, coll_cost_ring,               \
    "NCCL ring: P-1 steps of bytes/P")                                                         \
  X(COLL_ALLGATHER, "rhd", coll_allgather_bruck, coll_wire_ring, coll_cost_rhd,                \
    "Bruck: ceil(log2 P) steps, block counts doubling, any P")                                 \
  X(COLL_ALLGATHER, "smpi", coll_allgather_smpi, coll_wire_ring, coll_cost_ring,               \
    "MPI_Allgather (smpi:<name>)")                                                             \
  X(COLL_REDUCESCATTER, "ring", coll_reducescatter_ring, coll_wire_ring, coll_cost_ring,       \
    "NCCL ring: P-1 steps of bytes/P")                                                         \
  X(COLL_REDUCESCATTER, "rhd", coll_reducescatter_rhd, coll_wire_rhd, coll_cost_rhd,           \
    "recursive halving: log2(P) steps (non-powers of two fold the extra ranks first)")         \
  X(COLL_REDUCESCATTER, "smpi", coll_reducescatter_smpi, coll_wire_ring, coll_cost_ring,       \
    "MPI_Reduce_scatter (smpi:<name>)")                                                        \
  X(COLL_BROADCAST, "ring", coll_broadcast_ring, coll_wire_ring, coll_cost_ring,               \
    "NCCL ring: a chain from the root, pipelined in 512 KiB chunks")                           \
  X(COLL_BROADCAST, "tree", coll_broadcast_tree, coll_wire_ring, coll_cost_tree,               \
    "NCCL's tree from the root (one channel): a chain in each node, a binary tree across "   \
    "nodes, half the data in each of two pipelines, 512 KiB chunks")                          \
  X(COLL_BROADCAST, "smpi", coll_broadcast_smpi, coll_wire_ring, coll_cost_ring,               \
    "MPI_Bcast (smpi:<name>)")                                                                 \
  X(COLL_ALLTOALL, "pairwise", coll_alltoall_pairwise, coll_wire_ring, coll_cost_ring,         \
    "P-1 steps: at step s send to r+s and receive from r-s")                                   \
  X(COLL_ALLTOALL, "smpi", coll_alltoall_smpi, coll_wire_ring, coll_cost_ring,                 \
    "MPI_Alltoall (smpi:<name>)")                                                              \
  X(COLL_SENDRECV, "pairwise", coll_sendrecv_pairwise, coll_wire_ring, coll_cost_ring,         \
    "send to r+1 while receiving from r-1 (nccl-tests sendrecv)")

/* The MPI-free functions of the rows (coll/cost.c). */
#define COLL_DECLARE_MODEL(op, name, run, wire, cost, desc)                                      \
  double wire(coll_op o, double bytes, int P, const coll_topo *topo);                           \
  double cost(coll_op o, double bytes, const coll_group *g);
COLL_ALGO_LIST(COLL_DECLARE_MODEL)
#undef COLL_DECLARE_MODEL

/* One row of the table, without its MPI code (see coll_mpi.h for coll_algo). */
typedef struct {
  coll_op op;              /* operation it implements */
  const char *name;        /* name as given to --coll ("ring"...) */
  const char *description; /* one line for --help */
  coll_wire_fn wire;       /* bytes each rank sends per call */
  coll_cost_fn cost;       /* alpha-beta time per call */
} coll_algo_info;

/* Printable name of an operation; "?" when out of range. */
const char *coll_op_name(coll_op op);
/* Parses a printable name; -1 when unknown. */
int coll_op_parse(const char *name);

/* Rows of the table for `op`, in table order. Stores the count in *n; returns a static array of
 * pointers (borrowed, NULL-terminated). */
const coll_algo_info *const *coll_list(coll_op op, int *n);

/* The table row for (op, name), NULL if none. `name` may be "smpi:<algo>": it matches "smpi"
 * when <algo> is one of SimGrid 3.32's algorithms for `op`. */
const coll_algo_info *coll_info_find(coll_op op, const char *name);

/* For "smpi:<algo>": the SimGrid config item that pins it, as a new string
 * "smpi/allreduce:<algo>" (g_free), or NULL when `name` has no ":<algo>" part, `op` has no SMPI
 * selector (sendrecv) or no algorithm of that name (a run's --coll smpi:<algo> applies to the
 * operations that have <algo>; the others keep dlsim's default). */
char *coll_smpi_cfg(coll_op op, const char *name);

/* The algorithm dlsim picks without NCCL's model (platforms without NVIDIA GPUs, --nccl-proto
 * off; the order of NCCL 2.x's choices):
 *   P == 1                                      -> "ring" ("pairwise" for alltoall/sendrecv)
 *   allreduce, nodes >= 2, bytes <= 4 MiB, P >= 16 -> "tree" (latency-bound: log-depth trees)
 *   allreduce otherwise                           -> "ring" (one ring per GPU of a node across
 *                                                   nodes: NCCL's channels, every rail busy)
 *   allgather, reducescatter, broadcast           -> "ring"
 *   alltoall, sendrecv                            -> "pairwise"
 * `nodes` is the number of nodes the P ranks span. Returns a static name. */
#define COLL_TREE_MAX_BYTES (4.0 * 1024 * 1024)
#define COLL_TREE_MIN_RANKS 16
const char *coll_default(coll_op op, double bytes, int P, int nodes);

/* The algorithm NCCL picks: for an all-reduce under NCCL's model (nccl not NULL, an NVIDIA GPU,
 * a protocol not "off"), ring or tree, whichever NCCL's tuning model predicts faster
 * (ncclTopoGetAlgoTime, coll/nccl.h); anything else as coll_default. */
const char *coll_default_env(coll_op op, double bytes, int P, int nodes,
                             const struct nccl_env *nccl);

/* The algorithm a run uses for one call: `family` (the --coll value, NULL = default) when `op`
 * has an algorithm of that name, else coll_default_env(). "smpi:<name>" is kept as given when
 * the op has an SMPI selector. Returns a static name, or `family` itself (borrowed). */
const char *coll_resolve(coll_op op, const char *family, double bytes, int P, int nodes,
                         const struct nccl_env *nccl);

/* TRUE when `family` names an algorithm of at least one operation (a valid --coll value). */
int coll_family_known(const char *family);

/* Bytes sent per rank, averaged over the P ranks (total bytes on the wire / P), for one call of
 * `algo` (unknown -> -1) on `bytes` (convention above): the row's wire function (coll/cost.h
 * has the formulas). */
double coll_wire_bytes(coll_op op, const char *algo, double bytes, int P, const coll_topo *topo);

/* The largest size `dlsim coll` sweeps to, bytes: 16 GiB, where nccl-tests users' sweeps end.
 * Every algorithm of the table sends messages of any size (coll_mpi.h), but "smpi"; the
 * payload-free buffers of a simulation are mapped whole, and a machine refuses to map one region
 * much larger than its memory. */
#define COLL_MAX_BYTES (16.0 * 1024 * 1024 * 1024)

/* The largest `bytes` (convention above) that SMPI's own algorithm for `op` ("smpi") takes over
 * P ranks: MPI's collectives count in int, and SimGrid's algorithms compute totals and offsets
 * (rank x count x extent) in int: the whole buffer's floats (all-reduce, reduce-scatter) or
 * bytes (the others). */
double coll_smpi_max_bytes(coll_op op, int P);

/* nccl-tests bus-bandwidth factor (busbw = algbw · factor): allreduce 2(P-1)/P; allgather,
 * reducescatter, alltoall (P-1)/P; broadcast, sendrecv 1 (nccl-tests doc/PERFORMANCE.md). */
double coll_busbw_factor(coll_op op, int P);

/* Largest size <= bytes that the operation accepts for P ranks (see conventions); 0 if none. */
size_t coll_round_bytes(coll_op op, size_t bytes, int P);

#endif
