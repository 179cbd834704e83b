/* mpi_groups.c — communicators per plan group (see mpi_groups.h). */
#include "exec/mpi_groups.h"

#include <glib.h>

/* One group of a slot: its first member (the colour of its split), members, nodes spanned. */
typedef struct {
  int first, n, nodes;
} lay_group;

struct coll_layout {
  int P, n_slots;
  int *degree;      /* per slot: the most members a group of it may have */
  int *grp;         /* [slot * P + rank]: the rank's group among the slot's, -1: in none */
  int *pos;         /* [slot * P + rank]: its position in the group */
  int *rpn;         /* [slot * P + rank]: members per node as its rings see them (1: any other
                       layout) */
  GArray **groups;  /* per slot: lay_group */
};

/* The rings of coll.h need every member to agree on the layout: whole nodes of rpn consecutive
 * members; any other group counts as one member per node. `rpn`: the members on a member's own
 * node. */
static int ring_rpn(const int *members, int n, const int *node_of, int rpn) {
  for (int i = 0; rpn > 1 && i < n; i++)
    if (n % rpn || node_of[members[i]] != node_of[members[i - i % rpn]] ||
        (i % rpn == 0 && i > 0 && node_of[members[i]] == node_of[members[i - 1]]))
      rpn = 1;
  return rpn;
}

/* Group `members[0..n)` (sorted) into slot k: every member's place, found once for all of them.
 * Each member's own node count decides its rpn, as a member deciding alone would. */
static void add_group(coll_layout *L, int k, const int *members, int n, const int *node_of) {
  const int gid = (int)L->groups[k]->len;
  GHashTable *count = g_hash_table_new(g_direct_hash, g_direct_equal); /* node + 1 -> members */
  for (int i = 0; i < n; i++) {
    const gpointer key = GINT_TO_POINTER(node_of[members[i]] + 1);
    const int had = GPOINTER_TO_INT(g_hash_table_lookup(count, key));
    g_hash_table_insert(count, key, GINT_TO_POINTER(had + 1));
  }
  const lay_group G = {members[0], n, (int)g_hash_table_size(count)};
  g_array_append_val(L->groups[k], G);
  GHashTable *rpn_of = g_hash_table_new(g_direct_hash, g_direct_equal); /* count -> rpn + 1 */
  for (int i = 0; i < n; i++) {
    const int m = members[i], at = k * L->P + m;
    const int c = GPOINTER_TO_INT(g_hash_table_lookup(count, GINT_TO_POINTER(node_of[m] + 1)));
    int r = GPOINTER_TO_INT(g_hash_table_lookup(rpn_of, GINT_TO_POINTER(c))) - 1;
    if (r < 0) {
      r = ring_rpn(members, n, node_of, c);
      g_hash_table_insert(rpn_of, GINT_TO_POINTER(c), GINT_TO_POINTER(r + 1));
    }
    g_assert(L->grp[at] == -2); /* a rank is a member of one group of a kind at most */
    L->grp[at] = gid;
    L->pos[at] = i;
    L->rpn[at] = r;
  }
  g_hash_table_destroy(rpn_of);
  g_hash_table_destroy(count);
}

coll_layout *coll_layout_new(const cfg_run *c, const plan_comms *comms, const int *node_of) {
  coll_layout *L = g_new0(coll_layout, 1);
  const int P = L->P = c->gpus;
  L->n_slots = PLAN_N_GROUPS + (comms ? comms->n : 0);
  const size_t cells = (size_t)L->n_slots * (size_t)P;
  L->degree = g_new(int, L->n_slots);
  L->grp = g_new(int, cells);
  L->pos = g_new0(int, cells);
  L->rpn = g_new0(int, cells);
  L->groups = g_new(GArray *, L->n_slots);
  for (size_t i = 0; i < cells; i++) L->grp[i] = -2; /* not yet placed */
  int *members = g_new(int, P);
  for (int k = 0; k < L->n_slots; k++) {
    L->groups[k] = g_array_new(FALSE, FALSE, sizeof(lay_group));
    const int ci = k - PLAN_N_GROUPS;
    L->degree[k] = ci >= 0                ? comms->size[ci]
                   : k == PLAN_GRP_WORLD ? P
                                         : plan_group_degree(c, (plan_group)k);
    if (ci >= 0 && L->degree[k] > 1) /* a trace's communicator: one list for every rank */
      add_group(L, k, comms->members[ci], comms->size[ci], node_of);
    for (int r = 0; ci < 0 && L->degree[k] > 1 && r < P; r++) {
      if (L->grp[k * P + r] != -2) continue;
      const int n = plan_group_members(c, (plan_group)k, r, members);
      gboolean in = FALSE;
      for (int i = 0; i < n && !in; i++) in = members[i] == r;
      if (in) add_group(L, k, members, n, node_of);
      else L->grp[k * P + r] = -1; /* outside every group of its kind (a middle stage) */
    }
    for (int r = 0; r < P; r++)
      if (L->grp[k * P + r] == -2) L->grp[k * P + r] = -1;
  }
  g_free(members);
  return L;
}

void coll_layout_free(coll_layout *L) {
  if (!L) return;
  for (int k = 0; k < L->n_slots; k++) g_array_free(L->groups[k], TRUE);
  g_free(L->groups);
  g_free(L->degree);
  g_free(L->grp);
  g_free(L->pos);
  g_free(L->rpn);
  g_free(L);
}

int coll_layout_group(const coll_layout *L, int slot, int rank) {
  return slot < L->n_slots ? L->grp[(size_t)slot * L->P + rank] : -1;
}

void coll_groups_init(coll_groups *g, const coll_layout *L, int rank, MPI_Comm alone) {
  const int P = L->P;
  g->n = L->n_slots;
  g->comm = g_new(MPI_Comm, g->n);
  g->topo = g_new(coll_topo, g->n);
  g->size = g_new(int, g->n);
  g->nodes = g_new(int, g->n);
  for (int k = 0; k < g->n; k++) {
    const size_t at = (size_t)k * P + rank;
    const int gid = L->grp[at], degree = L->degree[k];
    const lay_group *G = gid >= 0 ? &g_array_index(L->groups[k], lay_group, gid) : NULL;
    g->comm[k] = alone;
    /* a rank in no group of a kind that has some (a middle stage's tied embeddings) takes part in
     * the split and, where `alone` is MPI_COMM_NULL, gets none */
    const int outside = alone == MPI_COMM_NULL ? MPI_UNDEFINED : P + rank;
    if (degree == P && (P == 1 || (G && G->n == P))) g->comm[k] = MPI_COMM_WORLD;
    else if (degree > 1) MPI_Comm_split(MPI_COMM_WORLD, G ? G->first : outside, rank, &g->comm[k]);
    if (G) {
      g->size[k] = G->n;
      g->nodes[k] = G->nodes;
      coll_topo_init(&g->topo[k], L->pos[at], G->n, L->rpn[at]);
    } else { /* alone: a group of one */
      g->size[k] = 1;
      g->nodes[k] = 1;
      coll_topo_init(&g->topo[k], 0, 1, 1);
    }
    g->topo[k].n_nodes = g->nodes[k]; /* the nodes it spans, as the closed form counts them */
  }
}

void coll_groups_release(coll_groups *g) {
  for (int k = 0; k < g->n; k++)
    if (g->comm[k] != MPI_COMM_WORLD && g->comm[k] != MPI_COMM_SELF && g->comm[k] != MPI_COMM_NULL)
      MPI_Comm_free(&g->comm[k]);
  g_free(g->comm);
  g_free(g->topo);
  g_free(g->size);
  g_free(g->nodes);
}
