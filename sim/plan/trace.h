/* trace.h — op lists read from Chakra execution traces (model/chakra.h) rather than planned: the
 * workload `chakra:DIR` of `dlsim run`.
 *
 * DIR holds one file per rank, <prefix>.<rank>.et for ranks 0..P-1 (one prefix), and optionally
 * comm_groups.json, {"<id>": [ranks...], ...}, the members of the communicator a collective
 * node names by its attribute pg_name (ASTRA-sim's --comm-group-configuration file). Groups the
 * file does not name may come from METADATA nodes of Chakra's PyTorch converter (their
 * inputs.values list the process groups: pg_name and ranks, none for every rank). A collective
 * without pg_name, with "", or with "0" when no group "0" is listed (PyTorch's default group)
 * spans every rank.
 *
 * A rank's nodes become its op list in a topological order of their dependencies, file order
 * among ready nodes (so a file written from an op list reads back as that list). Dependencies
 * follow Chakra's convention: data_deps order, ctrl_deps name a parent and order nothing (a file
 * without data_deps, or one of dlsim's earlier exports, dlsim_config in its metadata, orders by
 * both). Host operators (is_cpu_op true) are not ops: a dependency on one passes to the device
 * nodes it depends on; a file of host operators only is refused. Each op runs on a stream: the attribute dlsim_stream ("compute" or "comm"), else
 * compute for compute and memory nodes and comm for communication nodes. Ops of a stream run in
 * order; an op whose dependencies include ops of the other stream waits for the last of them
 * (an event it records).
 *
 *   COMP_NODE       a kernel: its time is the kernel database's when the node's dlsim_kernel_key
 *                   is an entry of the run's database, else the recorded duration
 *                   (dlsim_duration_s, s, else duration_micros), else, for a node with neither,
 *                   the roofline of num_ops FLOP and tensor_size bytes (ktime.h).
 *   MEM_LOAD_NODE,  the roofline of tensor_size bytes of device memory traffic.
 *   MEM_STORE_NODE
 *   METADATA_NODE   no time (it keeps its place in the dependencies).
 *   COMM_COLL_NODE  comm_type ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST or ALL_TO_ALL of
 *                   comm_size bytes (dlsim's byte conventions: coll.h) over pg_name's ranks;
 *                   uneven all-to-all blocks in dlsim_send_bytes / dlsim_recv_bytes (one per
 *                   member, bytes). The algorithm is the run's --coll choice.
 *   COMM_SEND_NODE, comm_size bytes to comm_dst / from comm_src, matched by comm_tag.
 *   COMM_RECV_NODE
 * Anything else (REDUCE, GATHER, SCATTER, REDUCE_SCATTER_BLOCK and BARRIER collectives, invalid
 * node types, a peer or group member that is not a rank, a collective on a group without the
 * rank, dependency cycles) is refused with a one-line DL_ERR_INPUT naming the file and the node.
 * The optional dlsim_* attributes dlsim writes itself (phase, micro-batch, purpose, group kind)
 * only label the result's rows.
 */
#ifndef DL_PLAN_TRACE_H
#define DL_PLAN_TRACE_H

#include <glib.h>

#include "model/chakra.h"
#include "plan/plan.h"

typedef struct plan_trace plan_trace;

/* Opens the traces under `dir`: every file is read and checked, and with `check` every rank's
 * op list is built once and all of them are run together without times, matching messages by
 * (source, destination, tag) in order and each communicator's collectives in order, so that a
 * trace that cannot be run (sizes or kinds that disagree, a message or collective a peer never
 * joins, ranks that wait for each other) is refused before any run starts, alike in every mode
 * (an executor opening what the driver checked passes FALSE). NULL with a one-line
 * DL_ERR_INPUT naming the file on failure. */
plan_trace *plan_trace_open(const char *dir, gboolean check, GError **err);
void plan_trace_free(plan_trace *t);

int plan_trace_ranks(const plan_trace *t);
/* Rank 0's file: its metadata carries what dlsim wrote about the run (chakra.h). Borrowed. */
const et_file *plan_trace_file(const plan_trace *t, int rank);
/* The explicit communicators (plan.h's plan_comms), borrowed. */
const plan_comms *plan_trace_comms(const plan_trace *t);

/* Rank `rank`'s op list for one iteration (plan_rank_free), or NULL with DL_ERR_INPUT. Its
 * collectives name communicators of plan_trace_comms(t), which must outlive it. */
plan_rank *plan_trace_rank(const plan_trace *t, int rank, GError **err);

/* The CollectiveCommType of dlsim's collective `op`, or -1 (sendrecv has none). */
int plan_trace_comm_type(coll_op op);

/* The file name of rank `rank`'s trace under a prefix: "<prefix>.<rank>.et" (g_free). */
char *plan_trace_file_name(const char *prefix, int rank);
/* The other way: "<prefix>.<rank>.et" gives the prefix (newly allocated) and the rank; any other
 * name gives NULL. */
char *plan_trace_name_prefix(const char *name, int *rank);

#endif
