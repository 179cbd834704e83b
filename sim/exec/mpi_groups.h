/* mpi_groups.h — the MPI communicators of a rank's plan groups (plan.h: dp, tp, pp, ep, ...)
 * and their node layout, made once per run for the collectives of coll_mpi.h. Shared by the SMPI
 * and real executors.
 *
 * Every rank takes part in every split (MPI_Comm_split is collective over MPI_COMM_WORLD), for
 * the groups the plan can use (plan_group_degree > 1). A group of every rank in rank order is
 * MPI_COMM_WORLD itself: a split over all ranks costs a collective over all of them (minutes at
 * 1,024 simulated ranks). A rank outside a group of its kind (a middle pipeline stage and the
 * tied-embedding group) gets a communicator of its own, never used.
 */
#ifndef DL_COLL_GROUPS_H
#define DL_COLL_GROUPS_H

#include <mpi.h>

#include "coll/coll.h"
#include "core/config.h"
#include "plan/plan.h"

/* Slots: one per group kind (plan_group), then one per explicit communicator of the plan
 * (plan_comms: a trace's), as plan_op_slot numbers them. */
typedef struct {
  int n;           /* slots */
  MPI_Comm *comm;  /* MPI_COMM_WORLD, a split, or coll_groups_init's `alone` (size 1) */
  coll_topo *topo; /* this rank's place, members grouped by node */
  int *size;       /* members of the rank's group (1 when it is alone) */
  int *nodes;      /* nodes the group spans */
} coll_groups;

/* Every rank's group of every slot under configuration `c` and `comms` (may be NULL; the same
 * list on every rank), node_of[r] being the node of rank r (all 0 on one machine): made once,
 * in time linear in the ranks, for all the ranks that share a process (the SMPI executor's), so
 * that a rank's communicators cost no walk over a group of every rank. */
typedef struct coll_layout coll_layout;
coll_layout *coll_layout_new(const cfg_run *c, const plan_comms *comms, const int *node_of);
void coll_layout_free(coll_layout *L);
/* The group of `rank` among those of `slot`, -1 when it is in none (alone). Ranks of one group
 * share its index. */
int coll_layout_group(const coll_layout *L, int slot, int rank);

/* Makes the communicators of `rank` as L places it. A slot where the rank is in no group of more
 * than itself gets `alone`: MPI_COMM_SELF, or MPI_COMM_NULL under SMPI, whose self communicator
 * (and any other) holds a table over every simulated process: O(P) bytes a rank, 134 MB at 8,192
 * ranks by heaptrack, growing as the square of the ranks. With MPI_COMM_NULL, a rank outside
 * every group of a kind that has groups also gets none (MPI_UNDEFINED in the split) rather than
 * a communicator of its own. Collective over MPI_COMM_WORLD. */
void coll_groups_init(coll_groups *g, const coll_layout *L, int rank, MPI_Comm alone);
void coll_groups_release(coll_groups *g);

#endif
