/* mpi_groups.c — communicators per plan group (see mpi_groups.h). */
#include "exec/mpi_groups.h"

#include <glib.h>

void coll_groups_init(coll_groups *g, const cfg_run *c, int rank, const int *node_of) {
  const int P = c->gpus;
  int *members = g_new(int, P);
  for (int k = 0; k < PLAN_N_GROUPS; k++) {
    const plan_group grp = (plan_group)k;
    int n = plan_group_members(c, grp, rank, members), me = -1, rpn = 0;
    for (int i = 0; i < n; i++) {
      if (members[i] == rank) me = i;
      if (node_of[members[i]] == node_of[rank]) rpn++;
    }
    int nodes = 0;
    GHashTable *seen = g_hash_table_new(g_direct_hash, g_direct_equal);
    for (int i = 0; i < n; i++)
      if (g_hash_table_add(seen, GINT_TO_POINTER(node_of[members[i]] + 1))) nodes++;
    g_hash_table_destroy(seen);
    const int degree = plan_group_degree(c, grp);
    g->comm[k] = MPI_COMM_SELF;
    if (grp == PLAN_GRP_WORLD || (degree == P && n == P)) g->comm[k] = MPI_COMM_WORLD;
    else if (degree > 1)
      MPI_Comm_split(MPI_COMM_WORLD, me >= 0 ? members[0] : P + rank, rank, &g->comm[k]);
    if (me < 0 || degree <= 1) { /* alone: a group of one */
      n = 1, me = 0, rpn = 1, nodes = 1;
    }
    g->size[k] = n;
    g->nodes[k] = nodes;
    coll_topo_init(&g->topo[k], me, n, rpn);
  }
  g_free(members);
}

void coll_groups_release(coll_groups *g) {
  for (int k = 0; k < PLAN_N_GROUPS; k++)
    if (g->comm[k] != MPI_COMM_WORLD && g->comm[k] != MPI_COMM_SELF) MPI_Comm_free(&g->comm[k]);
}
