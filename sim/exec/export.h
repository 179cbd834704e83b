/* export.h — a run's op lists written as Chakra execution traces (`dlsim export --format
 * chakra`), which `--workload chakra:DIR` (plan/trace.h), ASTRA-sim and Chakra's own tools read.
 *
 * Per rank, DIR/<prefix>.<rank>.et holds one node per op of the rank's list, in list order, ids
 * 0, 1, ...:
 *   kernel          COMP_NODE: num_ops (FLOP), tensor_size (bytes to and from device memory),
 *                   duration_micros (the kernel time dlsim uses, rounded to µs) and
 *                   dlsim_duration_s (the same, s, unrounded), is_cpu_op false, dlsim_kernel
 *                   ("conv2d.fwd"), dlsim_kernel_key (its kernel-database key), dlsim_samples,
 *                   dlsim_layer (the workload layer's name);
 *   collective      COMM_COLL_NODE: comm_type, comm_size (bytes, dlsim's conventions: coll.h),
 *                   pg_name (an id of DIR/comm_groups.json), dlsim_algorithm (the algorithm the
 *                   run's --coll picks for it), dlsim_group (the kind: dp, tp, ...), uneven
 *                   all-to-all blocks as dlsim_send_bytes / dlsim_recv_bytes;
 *   send, receive   COMM_SEND_NODE / COMM_RECV_NODE: comm_src, comm_dst, comm_tag, comm_size;
 * and on every node dlsim_stream ("compute" or "comm"), dlsim_phase, dlsim_microbatch,
 * dlsim_purpose, and dlsim_bytes (exact bytes, comm_size being an integer). data_deps name the
 * op before on the same stream and the op recording the event the op waits for (Chakra's
 * convention: order in data_deps; ctrl_deps, a parent, unused).
 * GlobalMetadata: version "0.0.4" (chakra.h), dlsim_config (the run's configuration echo as
 * JSON text), dlsim_dp, _tp, _pp, _ep, _microbatches, _batch, _precision, _rank, _stage,
 * _max_stash and the rank's memory (dlsim_memory_{params,grads,optimizer,activations}_bytes).
 */
#ifndef DL_EXPORT_H
#define DL_EXPORT_H

#include <glib.h>

#include "exec/context.h"

/* FALSE with DL_ERR_INPUT when `dir` holds the traces of another run: .et files of another
 * prefix, or a comm_groups.json beside no `prefix` traces (an export would mix two runs). */
gboolean exec_export_dir_free(const char *dir, const char *prefix, GError **err);

/* Writes the traces of every rank of run `x` under `dir` (created if missing, and removed again
 * if the export fails; files of an earlier export with the same prefix and more ranks are
 * removed). Writes nothing unless every rank's trace is made. DL_ERR_INPUT or DL_ERR_IO naming the file on failure. `progress`, when
 * TRUE, prints a line per 10% of ranks to stderr. */
gboolean exec_export_chakra(const run_ctx *x, const char *dir, const char *prefix,
                            gboolean progress, GError **err);

#endif
