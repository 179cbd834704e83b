/* costmodel.h — closed-form (alpha-beta) times of collectives on a group of GPUs of a platform.
 *
 * A group is summarised by the routes between its members as the platform gives them (latency
 * alpha in s, bottleneck bandwidth beta in bytes/s): over the whole ring of members, and, for
 * hierarchical algorithms, inside one node and between nodes. Contention between concurrent
 * flows is ignored, as in Gholami et al.; the SMPI executor is where contention shows.
 *
 * n is the collective's buffer size in bytes (the full result for allgather, the full input for
 * reduce-scatter); P the group size. Formulas (Thakur, Rabenseifner & Gropp 2005; NCCL docs):
 *   ring   allreduce 2(P−1)(α + n/(Pβ)); allgather, reducescatter, alltoall (P−1)(α + n/(Pβ));
 *          broadcast (pipelined chain of P−1 hops, chunks of n/S): (P−1+S−1)(α + n/(Sβ))
 *   rhd    recursive halving-doubling / Bruck — what Gholami et al. assume:
 *          allreduce 2(α⌈log₂P⌉ + (P−1)/P · n/β); allgather, reducescatter α⌈log₂P⌉ + (P−1)/P·n/β;
 *          broadcast (scatter + allgather) α(⌈log₂P⌉ + P−1) + 2(P−1)/P · n/β; alltoall as ring
 *   tree   NCCL double binary tree: allreduce 2⌈log₂P⌉α + 2n/β (reduce then broadcast, each
 *          pipelined; each tree carries n/2); broadcast ⌈log₂P⌉α + n/β; others as ring
 *   hier   intra-node ring reduce-scatter over G GPUs, inter-node ring allreduce of n/G over the
 *          N nodes (same local GPU index: one rail), intra-node ring allgather; allgather and
 *          reducescatter likewise in two levels; groups inside one node fall back to ring.
 */
#ifndef COSTMODEL_H
#define COSTMODEL_H

#include <glib.h>

#include "plan/plan.h"
#include "platform/platform.h"

typedef struct {
  int P;                 /* members */
  int nodes;             /* distinct nodes spanned */
  int per_node;          /* members per node (the largest count on one node) */
  double ring_alpha_s;   /* largest route latency between ring neighbours (member i -> i+1) */
  double ring_beta_bps;  /* smallest bottleneck bandwidth between ring neighbours */
  double intra_alpha_s;  /* route between two members of one node (0 if none) */
  double intra_beta_bps;
  double inter_alpha_s;  /* route between members of two nodes with the same local index */
  double inter_beta_bps;
} cm_group;

/* Summarises the group `members[0..n-1]` (rank = host index) of platform `pl`. */
gboolean cm_group_init(cm_group *g, const plat *pl, const int *members, int n, GError **err);


/* The algorithm a run with --coll `family` (NULL = default) uses for this call (coll_resolve). */
const char *cm_algo(coll_op op, const char *family, double bytes, const cm_group *g);

/* Time in seconds of one collective of `bytes` with `algo` (NULL = default) on group `g`.
 * "pairwise" (all-to-all) costs as ring; "smpi:<name>" has no closed form and costs as ring. */
double cm_coll_s(coll_op op, const char *algo, double bytes, const cm_group *g);

/* Pairwise all-to-all with uneven blocks, for member `me` of group `g`: P−1 steps; at step s it
 * sends send[me+s] and receives recv[me−s] (indices mod P), each step costing
 * α + max(sent, received)/β. Seconds. */
double cm_alltoallv_s(const double *send, const double *recv, int me, const cm_group *g);

/* Bytes each member sends for one such collective (coll_wire_bytes with the group's layout). */
double cm_coll_wire_bytes(coll_op op, const char *algo, double bytes, const cm_group *g);

#endif
