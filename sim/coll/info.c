/* info.c — the MPI-free half of coll.h: names, table rows, default choice, byte counts.
 * Compiled into both the host library and the MPI executors. */
#include "coll/coll.h"
#include "coll/nccl.h"

#include <glib.h>
#include <string.h>

static const char *const op_names[] = {
#define COLL_X(e, name) name,
    COLL_OP_LIST(COLL_X)
#undef COLL_X
};

static const coll_algo_info algo_infos[] = {
#define COLL_X(op, name, run, wire, cost, desc) {op, name, desc, wire, cost},
    COLL_ALGO_LIST(COLL_X)
#undef COLL_X
};
#define N_ALGOS ((int)G_N_ELEMENTS(algo_infos))

/* The SimGrid selector item of each operation (SimGrid's smpi/<collective> settings); NULL: none. */
static const char *const smpi_items[COLL_OP_COUNT] = {
    [COLL_ALLREDUCE] = "smpi/allreduce",     [COLL_ALLGATHER] = "smpi/allgather",
    [COLL_REDUCESCATTER] = "smpi/reduce_scatter", [COLL_BROADCAST] = "smpi/bcast",
    [COLL_ALLTOALL] = "smpi/alltoall",       [COLL_SENDRECV] = NULL,
};

void coll_topo_init(coll_topo *t, int rank, int P, int ranks_per_node) {
  int rpn = ranks_per_node < 1 ? 1 : ranks_per_node;
  t->ranks_per_node = rpn;
  t->n_nodes = P < 1 ? 1 : (P + rpn - 1) / rpn;
  t->node = rank / rpn;
  t->local_rank = rank % rpn;
  t->nccl = NULL;
  t->fold = 1;
}

int coll_ring_channels(int P, int rpn) {
  if (rpn < 2 || P % rpn || P / rpn < 2) return 1;
  return rpn < COLL_MAX_RINGS ? rpn : COLL_MAX_RINGS;
}

/* NCCL's binary tree on N nodes rooted at 0 (src/graph/trees.cc): with b the lowest set bit
 * of x, the parent is x - b + 2b, or x - b when that is past the end; the children are x - b/2
 * and x + b/2 (b/4, ... while past the end). Node 0's b is the power of two >= N, so its one
 * child is the top of the rest. */
static void btree(int N, int x, int *up, int *d0, int *d1) {
  int b = 1;
  while (b < N && !(b & x)) b <<= 1;
  if (x == 0) {
    *up = *d0 = -1;
    *d1 = N > 1 ? b >> 1 : -1;
    return;
  }
  *up = (x ^ b) | (b << 1);
  if (*up >= N) *up = x ^ b;
  int lb = b >> 1;
  *d0 = lb ? x - lb : -1;
  while (lb && x + lb >= N) lb >>= 1;
  *d1 = lb ? x + lb : -1;
}

void coll_tree_node(int N, int t, int x, int *up, int *down0, int *down1) {
  if (t == 0 || N < 2) {
    btree(N, x, up, down0, down1);
    return;
  }
  int v[3];
  if (N % 2) { /* shift by one node */
    btree(N, (x - 1 + N) % N, &v[0], &v[1], &v[2]);
    for (int i = 0; i < 3; i++) v[i] = v[i] < 0 ? -1 : (v[i] + 1) % N;
  } else { /* mirror */
    btree(N, N - 1 - x, &v[0], &v[1], &v[2]);
    for (int i = 0; i < 3; i++) v[i] = v[i] < 0 ? -1 : N - 1 - v[i];
  }
  *up = v[0], *down0 = v[1], *down1 = v[2];
}

int coll_tree_depth(int P, int rpn) {
  if (P < 2) return 0;
  if (rpn < 1 || rpn > P) rpn = P;
  int N = (P + rpn - 1) / rpn, l = 0;
  while ((2 << l) <= N) l++;
  return rpn - 1 + l;
}

void coll_tree_flows(int P, int rpn, double tree[2], double ring[2]) {
  if (rpn < 1 || rpn > P) rpn = P;
  const int N = (P + rpn - 1) / rpn, L = rpn, k = coll_ring_channels(P, rpn);
  int deg = 0; /* the most edges a node has in both node trees */
  for (int x = 0; x < N; x++) {
    int d = 0;
    for (int t = 0; t < 2; t++) {
      int v[3];
      coll_tree_node(N, t, x, &v[0], &v[1], &v[2]);
      d += (v[0] >= 0) + (v[1] >= 0) + (v[2] >= 0);
    }
    deg = MAX(deg, d);
  }
  /* a GPU in the chain of one pipeline sends up and down; with k = L channels every GPU is at
   * every place of the chain once per tree: 2(L-1) flows per tree; the rings' L channels give
   * it L-1 hops inside the node */
  tree[1] = L < 2 ? deg : k > 1 ? 4.0 * (L - 1) : 2.0 * MIN(2, L - 1);
  ring[1] = k > 1 ? L - 1 : 1;
  tree[0] = deg;
  ring[0] = 1;
}

const char *coll_op_name(coll_op op) {
  return (op >= 0 && op < COLL_OP_COUNT) ? op_names[op] : "?";
}

int coll_op_parse(const char *name) {
  for (int i = 0; name && i < COLL_OP_COUNT; i++)
    if (strcmp(name, op_names[i]) == 0) return i;
  return -1;
}

const coll_algo_info *const *coll_list(coll_op op, int *n) {
  /* Filled once; identical content for every caller (read-only afterwards). */
  static const coll_algo_info *lists[COLL_OP_COUNT][G_N_ELEMENTS(algo_infos) + 1];
  static int counts[COLL_OP_COUNT];
  static gsize done = 0;
  if (g_once_init_enter(&done)) {
    for (int i = 0; i < N_ALGOS; i++) {
      coll_op o = algo_infos[i].op;
      lists[o][counts[o]++] = &algo_infos[i];
    }
    g_once_init_leave(&done, 1);
  }
  if (op < 0 || op >= COLL_OP_COUNT) {
    if (n) *n = 0;
    return lists[0] + counts[0]; /* a NULL entry: empty list */
  }
  if (n) *n = counts[op];
  return lists[op];
}

/* SimGrid 3.32's algorithms per selector item (src/smpi/colls/smpi_coll.cpp at v3.32): an
 * "smpi:<name>" applies to the operations that have <name>, and SMPI aborts on any other. */
static const char *const smpi_algos[COLL_OP_COUNT] = {
    [COLL_ALLREDUCE] = " default lr rab1 rab2 rab_rdb rdb smp_binomial smp_binomial_pipeline "
                       "smp_rdb smp_rsag smp_rsag_lr smp_rsag_rab redbcast ompi "
                       "ompi_ring_segmented mpich mvapich2 mvapich2_rs mvapich2_two_level impi "
                       "rab automatic ",
    [COLL_ALLGATHER] = " default 2dmesh 3dmesh bruck GB loosely_lr NTSLR NTSLR_NB pair rdb rhv "
                       "ring SMP_NTS smp_simple spreading_simple ompi ompi_neighborexchange "
                       "mvapich2 mvapich2_smp mpich impi automatic ",
    [COLL_REDUCESCATTER] = " default ompi ompi_basic_recursivehalving ompi_ring ompi_butterfly "
                           "mpich mpich_pair mpich_rdb mpich_noncomm mvapich2 impi automatic ",
    [COLL_BROADCAST] = " default arrival_pattern_aware arrival_pattern_aware_wait arrival_scatter "
                       "binomial_tree flattree flattree_pipeline NTSB NTSL NTSL_Isend "
                       "scatter_LR_allgather scatter_rdb_allgather SMP_binary SMP_binomial "
                       "SMP_linear ompi ompi_split_bintree ompi_pipeline mpich mvapich2 "
                       "mvapich2_inter_node mvapich2_intra_node mvapich2_knomial_intra_node impi "
                       "automatic ",
    [COLL_ALLTOALL] = " default 2dmesh 3dmesh basic_linear bruck pair pair_rma pair_light_barrier "
                      "pair_mpi_barrier pair_one_barrier rdb ring ring_light_barrier "
                      "ring_mpi_barrier ring_one_barrier mvapich2 mvapich2_scatter_dest ompi mpich "
                      "impi automatic ",
};

/* TRUE when SMPI has algorithm `algo` for `op`. */
static gboolean smpi_has(coll_op op, const char *algo) {
  if (op < 0 || op >= COLL_OP_COUNT || !smpi_algos[op] || !*algo || strchr(algo, ' ')) return FALSE;
  char *word = g_strdup_printf(" %s ", algo);
  gboolean found = strstr(smpi_algos[op], word) != NULL;
  g_free(word);
  return found;
}

/* Length of the algorithm part of "name" or "name:param". */
static size_t base_len(const char *name) {
  const char *colon = strchr(name, ':');
  return colon ? (size_t)(colon - name) : strlen(name);
}

const coll_algo_info *coll_info_find(coll_op op, const char *name) {
  if (!name) return NULL;
  size_t len = base_len(name);
  for (int i = 0; i < N_ALGOS; i++) {
    const coll_algo_info *a = &algo_infos[i];
    if (a->op != op || strlen(a->name) != len || strncmp(a->name, name, len) != 0) continue;
    /* Only "smpi" takes a ":<algo>" parameter: one of SMPI's algorithms for this operation */
    if (name[len] == ':' && (strcmp(a->name, "smpi") != 0 || !smpi_has(op, name + len + 1)))
      return NULL;
    return a;
  }
  return NULL;
}

char *coll_smpi_cfg(coll_op op, const char *name) {
  if (op < 0 || op >= COLL_OP_COUNT || !smpi_items[op] || !name) return NULL;
  const char *colon = strchr(name, ':');
  if (!colon || !coll_info_find(op, name)) return NULL;
  return g_strdup_printf("%s:%s", smpi_items[op], colon + 1);
}

const char *coll_resolve(coll_op op, const char *family, double bytes, int P, int nodes,
                         const struct nccl_env *nccl) {
  if (family && coll_info_find(op, family)) return family;
  return coll_default_env(op, bytes, P, nodes, nccl);
}

const char *coll_default_env(coll_op op, double bytes, int P, int nodes,
                             const struct nccl_env *nccl) {
  nccl_call ring, tree;
  if (op != COLL_ALLREDUCE || P <= 1 || !nccl) return coll_default(op, bytes, P, nodes);
  nccl_plan(&ring, nccl, op, "ring", bytes, P, nodes);
  nccl_plan(&tree, nccl, op, "tree", bytes, P, nodes);
  if (ring.proto < 0 || tree.proto < 0) return coll_default(op, bytes, P, nodes);
  return tree.predicted_s < ring.predicted_s ? "tree" : "ring";
}

int coll_family_known(const char *family) {
  for (int op = 0; family && op < COLL_OP_COUNT; op++)
    if (coll_info_find((coll_op)op, family)) return 1;
  return 0;
}

const char *coll_default(coll_op op, double bytes, int P, int nodes) {
  if (op == COLL_ALLTOALL || op == COLL_SENDRECV) return "pairwise";
  if (op != COLL_ALLREDUCE || P <= 1 || nodes < 2) return "ring";
  if (bytes <= COLL_TREE_MAX_BYTES && P >= COLL_TREE_MIN_RANKS) return "tree";
  return "ring";
}

double coll_wire_bytes(coll_op op, const char *algo, double bytes, int P, const coll_topo *topo) {
  const coll_algo_info *a = P >= 1 && algo ? coll_info_find(op, algo) : NULL;
  return a ? a->wire(op, bytes, P, topo) : -1;
}

double coll_smpi_max_bytes(coll_op op, int P) {
  const double most = 2147483647.0; /* INT_MAX */
  (void)P;
  switch (op) {
  case COLL_ALLREDUCE:
  case COLL_REDUCESCATTER: return most * COLL_ELEM_BYTES; /* the floats of the whole buffer */
  case COLL_ALLGATHER:
  case COLL_ALLTOALL:
  case COLL_BROADCAST: return most; /* offsets rank x count x extent, in int */
  default: return COLL_MAX_BYTES;
  }
}

double coll_busbw_factor(coll_op op, int P) {
  if (P < 1) return 0;
  switch (op) {
  case COLL_ALLREDUCE:
    return 2.0 * (P - 1) / P;
  case COLL_ALLGATHER:
  case COLL_REDUCESCATTER:
  case COLL_ALLTOALL:
    return (double)(P - 1) / P;
  default:
    return 1.0;
  }
}

size_t coll_round_bytes(coll_op op, size_t bytes, int P) {
  size_t unit = COLL_ELEM_BYTES;
  if (op == COLL_ALLGATHER || op == COLL_REDUCESCATTER || op == COLL_ALLTOALL)
    unit *= (size_t)(P < 1 ? 1 : P);
  return bytes / unit * unit;
}
