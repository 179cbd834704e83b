/* nccl.h — NCCL's own model of its protocols and channels, applied to dlsim's ring and tree.
 *
 * NCCL moves data with one of three protocols (LL: 8-byte lines, 4 bytes of data and a flag;
 * LL128: 128-byte lines, 120 bytes of data; Simple: large chunks with fences) and predicts, for
 * each algorithm and protocol, a latency and a bandwidth (src/graph/tuning.cc, ncclTopoTuneModel
 * and ncclTopoGetAlgoTime). dlsim takes that model as it stands, with the tables of NCCL 2.30:
 *   - the latency of a call: NCCL's base latency of the algorithm and protocol, plus its
 *     per-step hardware latencies (NVLink, PCI or network) times the steps of the call. dlsim
 *     charges max(this, the routes' own latency): NCCL's figures are end to end and already
 *     hold the wire's latency;
 *   - the protocol's bandwidth fraction: NCCL's bus bandwidth of the protocol over that of the
 *     Simple ring (LL halves it, LL128 keeps 92 %, the tree keeps 92 %, each capped per
 *     channel), times the tree's size correction. Every byte a step moves is put on the wire
 *     as bytes / fraction, so the flows hold the links as long as NCCL says they do;
 *   - NVLink: NCCL counts 20 GB/s per NVLink of 25 GB/s (SM80_NVLINK_BW in src/graph/topo.h;
 *     20.6 on Hopper, 40.1 of 50 on Blackwell). dlsim scales the NVLink hops of ring and tree
 *     by that ratio.
 *   - the protocol: the one NCCL's model predicts fastest for the call, from NCCL's own view of
 *     the bandwidth (per-GPU NVLink, NICs per node), unless the user pins one.
 * Both the closed form (coll/cost.c) and the simulation (the SMPI flavour's ring phases and
 * steps) take their figures from nccl_plan(), so they agree. Algorithms NCCL does not have
 * (recursive halving-doubling, the hierarchical all-reduce, the pairwise all-to-all, SMPI's
 * own) keep the plain alpha-beta model.
 */
#ifndef DL_COLL_NCCL_H
#define DL_COLL_NCCL_H

#include "coll/coll.h"
#include "core/config.h" /* nccl_proto */


/* What NCCL would know of the machine: its GPU generation and links. Platform-wide, found by
 * the driver (nccl_env_from_platform) and handed to the executors as a string. */
typedef struct nccl_env {
  int arch;         /* NCCL's compute-capability index: 0 Volta, 1 Ampere, 2 Hopper,
                     * 3 Blackwell; -1: no NVIDIA GPU, no NCCL model */
  int nvlink;       /* the GPUs of a node talk over NVLink (else PCIe) */
  double intra_bps; /* the route between two GPUs of one node, bytes/s (0: one GPU per node) */
  double nic_bps;   /* the route between two nodes, bytes/s (0: one node) */
  int nics;         /* NICs (rails) per node */
  int proto;        /* a nccl_proto the user pinned, NCCL_PROTO_AUTO or NCCL_PROTO_OFF */
  int cpu_amd;      /* the nodes' CPUs are AMD's (NCCL's AMD branch across nodes), else Intel's */
} nccl_env;

/* The model's figures for one call. */
typedef struct {
  int proto;        /* nccl_proto, or NCCL_PROTO_OFF: no model for this call (all below inert) */
  double lat_s;     /* NCCL's latency of the whole call, s */
  double eff;       /* bandwidth fraction of the protocol, (0, 1] */
  double nvl_eff;   /* NCCL's NVLink bandwidth over the link's, for NVLink hops, (0, 1] */
  int channels;     /* channels NCCL would open (the per-channel caps) */
  int nvlink;       /* the hops inside a node are NVLink */
  double predicted_s; /* NCCL's own prediction of the call's time (its view of the machine) */
} nccl_call;

/* Fills `out` for one call of `op` with `algo` ("ring" or "tree"; any other name gets no model)
 * on `bytes` over P ranks spanning `nodes` nodes; env NULL or arch < 0: no model. */
void nccl_plan(nccl_call *out, const nccl_env *env, coll_op op, const char *algo, double bytes,
               int P, int nodes);


/* NCCL's compute-capability index of a GPU of compute capability `cc` (80 = 8.0); -1 for 0. */
int nccl_arch_of_cc(int cc);

/* The string form executors receive, and its parser (FALSE on anything malformed). */
char *nccl_env_to_string(const nccl_env *e);
gboolean nccl_env_parse(const char *text, nccl_env *out);

/* Bytes put on the wire for `bytes` of data on a hop (intra: inside a node): bytes / (eff ×
 * nvl_eff on NVLink hops). The call's figures may be inert (no model): bytes. */
double nccl_wire_bytes(const nccl_call *c, int intra, double bytes);

#endif
