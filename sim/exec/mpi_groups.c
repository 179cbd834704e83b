/* mpi_groups.c — communicators per plan group (see mpi_groups.h). */
#include "exec/mpi_groups.h"

#include <glib.h>

/* Slot `k` for the members[0..n) (sorted) of a group of `degree` ranks at most, `rank` being one
 * of them or not. */
static void make_slot(coll_groups *g, int k, const int *members, int n, int degree, int P,
                      int rank, const int *node_of) {
  int me = -1, rpn = 0;
  for (int i = 0; i < n; i++) {
    if (members[i] == rank) me = i;
    if (node_of[members[i]] == node_of[rank]) rpn++;
  }
  int nodes = 0;
  GHashTable *seen = g_hash_table_new(g_direct_hash, g_direct_equal);
  for (int i = 0; i < n; i++)
    if (g_hash_table_add(seen, GINT_TO_POINTER(node_of[members[i]] + 1))) nodes++;
  g_hash_table_destroy(seen);
  g->comm[k] = MPI_COMM_SELF;
  if (degree == P && n == P) g->comm[k] = MPI_COMM_WORLD;
  else if (degree > 1)
    MPI_Comm_split(MPI_COMM_WORLD, me >= 0 ? members[0] : P + rank, rank, &g->comm[k]);
  /* the rings of coll.h need every member to agree on the layout: whole nodes of rpn
   * consecutive members; any other group counts as one member per node */
  for (int i = 0; rpn > 1 && i < n; i++)
    if (n % rpn || node_of[members[i]] != node_of[members[i - i % rpn]] ||
        (i % rpn == 0 && i > 0 && node_of[members[i]] == node_of[members[i - 1]]))
      rpn = 1;
  if (me < 0 || degree <= 1) { /* alone: a group of one */
    n = 1, me = 0, rpn = 1, nodes = 1;
  }
  g->size[k] = n;
  g->nodes[k] = nodes;
  coll_topo_init(&g->topo[k], me, n, rpn);
  g->topo[k].n_nodes = nodes; /* the nodes it spans, as the closed form counts them */
}

void coll_groups_init(coll_groups *g, const cfg_run *c, const plan_comms *comms, int rank,
                      const int *node_of) {
  const int P = c->gpus;
  g->n = PLAN_N_GROUPS + (comms ? comms->n : 0);
  g->comm = g_new(MPI_Comm, g->n);
  g->topo = g_new(coll_topo, g->n);
  g->size = g_new(int, g->n);
  g->nodes = g_new(int, g->n);
  int *members = g_new(int, P);
  for (int k = 0; k < PLAN_N_GROUPS; k++) {
    const plan_group grp = (plan_group)k;
    int n = plan_group_members(c, grp, rank, members);
    make_slot(g, k, members, n, grp == PLAN_GRP_WORLD ? P : plan_group_degree(c, grp), P, rank,
              node_of);
  }
  for (int i = 0; comms && i < comms->n; i++)
    make_slot(g, PLAN_N_GROUPS + i, comms->members[i], comms->size[i], comms->size[i], P, rank,
              node_of);
  g_free(members);
}

void coll_groups_release(coll_groups *g) {
  for (int k = 0; k < g->n; k++)
    if (g->comm[k] != MPI_COMM_WORLD && g->comm[k] != MPI_COMM_SELF) MPI_Comm_free(&g->comm[k]);
  g_free(g->comm);
  g_free(g->topo);
  g_free(g->size);
  g_free(g->nodes);
}
