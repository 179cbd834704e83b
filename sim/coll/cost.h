/* cost.h — the collectives' closed-form physics: the bytes each algorithm puts on the wire and
 * its alpha-beta time on a group (coll_group, coll.h). Each row of COLL_ALGO_LIST names its two
 * functions here; this header adds the lookups by name. No MPI, no platform: the closed form
 * summarises its groups from the platform's routes (exec/analytic/groups.c).
 *
 * n is the collective's buffer size in bytes (the full result for allgather, the full input for
 * reduce-scatter); P the group size; α latency (s), β bandwidth (bytes/s) of the group's routes.
 * Contention between concurrent flows is ignored, as in Gholami et al.; the SMPI executor is
 * where contention shows. Formulas (Thakur, Rabenseifner & Gropp 2005; NCCL docs):
 *   ring   allreduce 2(P−1)(α + n/(Pβ)); allgather, reducescatter, alltoall (P−1)(α + n/(Pβ));
 *          broadcast (pipelined chain of P−1 hops, chunks of n/S): (P−1+S−1)(α + n/(Sβ));
 *          sendrecv α + n/β
 *   rhd    recursive halving-doubling / Bruck — what Gholami et al. assume:
 *          allreduce 2(α⌈log₂P⌉ + (P−1)/P · n/β); allgather, reducescatter α⌈log₂P⌉ + (P−1)/P·n/β
 *   tree   NCCL's trees (coll.h): 2k pipelines of n/(2k) over k channels, depth D = GPUs per
 *          node − 1 + ⌊log₂ nodes⌋, C chunks of c = min(n/(2k), 512 KiB): allreduce
 *          (2D + C − 1)α + Σ over the 2D hops of c/β_hop + (n/(2kc) − 1)·c/β_slowest (reduce
 *          then broadcast), β_hop the link's rate over the trees' flows on it at once
 *          (coll_tree_flows, a share C/(C + 2D − 1) of them); broadcast (k = 1, one tree, D
 *          hops) likewise, its two halves sharing a link
 *   hier   intra-node ring reduce-scatter over G GPUs, inter-node ring allreduce of n/G over the
 *          N nodes (same local GPU index: one rail), intra-node ring allgather; a group inside one
 *          node, or of one GPU per node, costs a flat ring.
 * Wire bytes per rank (p2 = largest power of two <= P, rem = P − p2; rpn, nodes from the topo):
 *   ring, tree: allreduce 2(P−1)n/P, sendrecv n, others (P−1)n/P;
 *   rhd: allreduce (2 rem n + 2(p2−1) n)/P, reducescatter (rem n + (p2−1) n + rem n/P)/P;
 *   hier allreduce (2 nodes (rpn−1) n + 2 (nodes−1) n)/P (topo NULL: one node).
 */
#ifndef DL_COLL_COST_H
#define DL_COLL_COST_H

#include "coll/coll.h"

/* Time in seconds of one collective of `bytes` with `algo` (NULL: the default for the group,
 * coll_resolve) on group `g`; 0 for one member or no bytes. */
double coll_cost_s(coll_op op, const char *algo, double bytes, const coll_group *g);

/* Pairwise all-to-all with uneven blocks, for member `me` of group `g`: P−1 steps; at step s it
 * sends send[me+s] and receives recv[me−s] (indices mod P), each step costing
 * α + max(sent, received)/β. Seconds. */
double coll_cost_alltoallv_s(const double *send, const double *recv, int me, const coll_group *g);

/* Bytes each member sends for one such collective (coll_wire_bytes with the group's layout). */
double coll_group_wire_bytes(coll_op op, const char *algo, double bytes, const coll_group *g);

#endif
