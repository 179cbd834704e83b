/* smpi_exec.c — `dlsim-smpi run`: the SMPI executor of the planner's op lists (see simrun.h).
 *
 * `dlsim-smpi run RESULT TRACE|- <dlsim run options>` under `smpirun -no-privatize`: all ranks
 * share this process's globals, so the workload is loaded once (by the first rank to start:
 * SMPI runs ranks one at a time and nothing here yields before the load is done) and every rank
 * leaves its figures in a shared table that rank 0 writes out after a barrier.
 *
 * Per rank: a compute-stream actor on the rank's host runs the kernels in order (an exec of
 * seconds × host speed); the rank itself runs the communication ops in order with the collectives
 * of coll_mpi.h on SMPI_SHARED_MALLOC buffers with a no-op reduction. An op that waits for an
 * event blocks on that event's semaphore (acquire, then release again so that it stays set).
 */
#include <mpi.h>
#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/semaphore.h>
#include <smpi/smpi.h>

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_mpi.h"
#include "config.h"
#include "dl_common.h"
#include "exchange.h"
#include "gpuspec.h"
#include "ktime.h"
#include "plan.h"
#include "smpi_exec.h"
#include "workload.h"

/* Process-wide, shared by all ranks (-no-privatize); written once, then read-only except each
 * rank's own slot. */
static struct {
  gboolean loaded;
  char *error;        /* set when loading failed: every rank reports it and exits */
  cfg_run cfg;
  wl_model *model;
  const gs_spec *gpu;
  kt_source kt;       /* kernel durations */
  double *layer_t;    /* per-layer times that pipeline stages are balanced with */
  int *node_of;       /* node index of each rank's host */
  gboolean debug_ops; /* DLSIM_DEBUG_OPS set: print every op as the ranks reach it */
  GHashTable *sent;   /* "src:dst:iter:tag" -> simulated time the send was posted (double*) */
  xc_out *out;        /* per rank */
} shared;

typedef struct {
  int rank, iters;
  const pl_rank_plan *plan;
  sg_sem_t *events;   /* iters × n_events */
  double speed;       /* host FLOP/s */
  xc_out *out;
} gpu_state;

static sg_sem_t event_sem(gpu_state *g, int iter, int ev) {
  return g->events[(size_t)iter * g->plan->n_events + ev];
}

static void event_wait(gpu_state *g, int iter, int ev) {
  if (ev < 0) return;
  sg_sem_t s = event_sem(g, iter, ev);
  sg_sem_acquire(s);
  sg_sem_release(s);
}

static double kernel_s(const pl_op *op) { return kt_kernel_s(&shared.kt, op, NULL); }

/* The compute stream: an actor beside the rank on the same host. */
static void gpu_actor(int argc, char **argv) {
  (void)argc, (void)argv;
  gpu_state *g = sg_actor_self_get_data();
  for (int it = 0; it < g->iters; it++)
    for (int i = 0; i < g->plan->n_ops; i++) {
      const pl_op *op = &g->plan->ops[i];
      if (op->stream != PL_STREAM_COMPUTE) continue;
      if (shared.debug_ops)
        fprintf(stderr, "dlsim-smpi: gpu %d iter %d op %d %s: waits %d records %d\n", g->rank,
                it, i, op->kname, op->wait_event, op->record_event);
      event_wait(g, it, op->wait_event);
      double t0 = simgrid_get_clock();
      double s = kernel_s(op);
      if (s > 0) sg_actor_execute(s * g->speed);
      xc_add_span(g->out, PL_STREAM_COMPUTE, t0, simgrid_get_clock(), i, it);
      if (op->record_event >= 0) sg_sem_release(event_sem(g, it, op->record_event));
    }
}

static void noop_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)in, (void)inout, (void)len, (void)type;
}


static void load_shared(int argc, char **argv) {
  if (shared.loaded) return;
  shared.loaded = TRUE;
  GError *e = NULL;
  cfg_init(&shared.cfg);
  if (!cfg_parse_args(&shared.cfg, &argc, &argv, &e) ||
      !(shared.model = wl_load(shared.cfg.workload, &e)) ||
      !cfg_resolve(&shared.cfg, (long)shared.model->default_batch, &e) ||
      (cfg_resolve_style(&shared.cfg, wl_has_tp_roles(shared.model)), FALSE)) {
    shared.error = g_strdup(e->message);
    g_error_free(e);
    return;
  }
  const char *gpu = sg_host_get_property_value(sg_host_self(), "gpu_model");
  shared.gpu = gs_find(gpu);
  if (!shared.gpu) {
    shared.error = g_strdup_printf("host %s: gpu_model '%s' has no spec sheet",
                                   sg_host_get_name(sg_host_self()), gpu ? gpu : "");
    return;
  }
  kdb *db = NULL;
  if (!kt_open_db(shared.cfg.kernels, shared.gpu->name, &db, &e)) {
    shared.error = g_strdup(e->message);
    g_error_free(e);
    return;
  }
  shared.kt = (kt_source){shared.gpu, shared.cfg.precision, shared.model, db};
  shared.layer_t = kt_layer_times(&shared.kt, &shared.cfg);
  shared.sent = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  shared.node_of = g_new0(int, shared.cfg.gpus);
  shared.debug_ops = g_getenv("DLSIM_DEBUG_OPS") != NULL;
  shared.out = g_new0(xc_out, shared.cfg.gpus);
}

int smpi_exec_main(int argc, char **argv) {
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc < 3) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi run: expected RESULT TRACE|- then run options\n");
    return 2;
  }
  const char *result_path = argv[1], *trace_path = argv[2];
  /* cfg_parse_args wants argv[0] to be the program: drop RESULT and TRACE */
  char **args = g_new0(char *, argc - 1);
  args[0] = argv[0];
  for (int i = 3; i < argc; i++) args[i - 2] = argv[i];
  load_shared(argc - 2, args);
  g_free(args);
  if (shared.error) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %s\n", shared.error);
    return 2;
  }
  const cfg_run *c = &shared.cfg;
  if (P != c->gpus) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %d ranks for --gpus %d\n", P, c->gpus);
    return 2;
  }
  GError *e = NULL;
  pl_rank_plan *plan = pl_build(shared.model, c, shared.layer_t, rank, &e);
  if (!plan) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %s\n", e->message);
    g_error_free(e);
    return 2;
  }
  const char *node = sg_host_get_property_value(sg_host_self(), "node");
  shared.node_of[rank] = node ? atoi(node) : rank;
  MPI_Barrier(MPI_COMM_WORLD);

  /* communicators and their node layout */
  MPI_Comm comm[PL_N_GROUPS];
  coll_topo topo[PL_N_GROUPS];
  int *members = g_new(int, P);
  /* communicators the plan can use (each split costs a collective over all ranks): the expert
   * replicas' group only with expert parallelism (with ep = 1 it is the dp group) */
  const int degree[PL_N_GROUPS] = {P, c->dp, c->tp, c->pp, c->ep, c->pp > 1 ? 2 : 1,
                                   c->ep > 1 ? c->dp / c->ep : 1};
  for (int g = 0; g < PL_N_GROUPS; g++) {
    comm[g] = MPI_COMM_NULL;
    int n = pl_group_members(c, (pl_group)g, rank, members);
    int rpn = 0, me = -1;
    for (int i = 0; i < n; i++) {
      if (shared.node_of[members[i]] == shared.node_of[rank]) rpn++;
      if (members[i] == rank) me = i;
    }
    /* every rank takes part in every split; a rank outside its group (a middle pipeline stage
     * and the tied-embedding group) gets a communicator of its own, never used */
    /* a group of every rank (in rank order) is the world: no split, which costs a collective
     * over all ranks (minutes at 1,024 ranks) */
    if (g == PL_GRP_WORLD || (degree[g] == P && n == P)) comm[g] = MPI_COMM_WORLD;
    else if (degree[g] > 1)
      MPI_Comm_split(MPI_COMM_WORLD, me >= 0 ? members[0] : P + rank, rank, &comm[g]);
    if (me < 0) me = 0;
    coll_topo_init(&topo[g], me, n, rpn);
  }

  /* buffers: payload-free, as large as the largest collective or message */
  double maxb = 0;
  for (int i = 0; i < plan->n_ops; i++)
    if (plan->ops[i].kind != PL_KERNEL) { /* collectives and point-to-point messages */
      double b = plan->ops[i].bytes, in = 0;
      if (plan->ops[i].peer_recv_bytes) /* uneven all-to-all: what arrives may exceed what leaves */
        for (int j = 0; j < c->ep; j++) in += plan->ops[i].peer_recv_bytes[j];
      if (MAX(b, in) > maxb) maxb = MAX(b, in);
    }
  size_t bufb = (size_t)maxb + 64;
  void *sendbuf = SMPI_SHARED_MALLOC(bufb), *recvbuf = SMPI_SHARED_MALLOC(bufb);
  MPI_Op noop;
  MPI_Op_create(noop_op, 1, &noop);

  xc_out *o = &shared.out[rank];
  xc_out_init(o, plan);
  gpu_state gs = {rank, c->iters, plan, NULL, sg_host_get_speed(sg_host_self()), o};
  gs.events = g_new(sg_sem_t, (size_t)c->iters * plan->n_events + 1);
  for (size_t i = 0; i < (size_t)c->iters * plan->n_events; i++) gs.events[i] = sg_sem_init(0);

  MPI_Barrier(MPI_COMM_WORLD);
  double t_start = simgrid_get_clock();
  char name[32];
  g_snprintf(name, sizeof name, "gpu%d", rank);
  sg_actor_t gpu = sg_actor_init(name, sg_host_self());
  /* sg_actor_init hands back a pointer whose only reference belongs to the running actor: once
   * the compute stream ends (it may end before this rank's last sends complete), SimGrid frees
   * it and sg_actor_join below would read freed memory. Hold a reference until the join. */
  sg_actor_ref(gpu);
  sg_actor_set_data(gpu, &gs);
  sg_actor_start(gpu, gpu_actor, 0, NULL);

  int it0 = c->iters > 1 ? 1 : 0;
  /* DLSIM_DEBUG_OPS=1: every communication op as the rank reaches it (finding a stuck schedule) */
  const gboolean debug_ops = shared.debug_ops;
  /* point-to-point: every receive of an iteration is posted when the iteration starts, so a
   * message moves as soon as its sender posts it; sends never block the stream */
  int n_recv = 0, n_send = 0;
  for (int i = 0; i < plan->n_ops; i++) {
    n_recv += plan->ops[i].kind == PL_RECV;
    n_send += plan->ops[i].kind == PL_SEND;
  }
  MPI_Request *rreq = g_new(MPI_Request, n_recv + 1), *sreq = g_new(MPI_Request, n_send + 1);
  for (int it = 0; it < c->iters; it++) {
    for (int i = 0, k = 0; i < plan->n_ops; i++)
      if (plan->ops[i].kind == PL_RECV)
        MPI_Irecv(recvbuf, (int)plan->ops[i].bytes, MPI_BYTE, plan->ops[i].peer, plan->ops[i].tag,
                  MPI_COMM_WORLD, &rreq[k++]);
    int ri = 0, si = 0;
    for (int i = 0; i < plan->n_ops; i++) {
      const pl_op *op = &plan->ops[i];
      if (op->stream != PL_STREAM_COMM) continue;
      if (debug_ops)
        fprintf(stderr, "dlsim-smpi: rank %d iter %d op %d %s %s %s peer %d tag %d bytes %.0f: waits %d\n",
                rank, it, i, pl_op_kind_name(op->kind), pl_group_name(op->group),
                pl_purpose_name(op->purpose), op->peer, op->tag, op->bytes, op->wait_event);
      event_wait(&gs, it, op->wait_event);
      double t0 = simgrid_get_clock();
      if (op->kind == PL_SEND) {
        char key[64];
        g_snprintf(key, sizeof key, "%d:%d:%d:%d", rank, op->peer, it, op->tag);
        double *v = g_new(double, 1);
        *v = t0;
        g_hash_table_replace(shared.sent, g_strdup(key), v);
        MPI_Isend(sendbuf, (int)op->bytes, MPI_BYTE, op->peer, op->tag, MPI_COMM_WORLD, &sreq[si++]);
        if (it >= it0) xc_add_coll(o, op, "p2p", 0, op->bytes);
      } else if (op->kind == PL_RECV) {
        MPI_Wait(&rreq[ri++], MPI_STATUS_IGNORE);
        double t1 = simgrid_get_clock();
        char key[64];
        g_snprintf(key, sizeof key, "%d:%d:%d:%d", op->peer, rank, it, op->tag);
        const double *posted = g_hash_table_lookup(shared.sent, key);
        /* the transfer is communication; waiting for the sender to get there is bubble */
        double from = posted && *posted > t0 ? *posted : t0;
        if (t1 > from) xc_add_span(o, PL_STREAM_COMM, from, t1, i, it);
        if (it >= it0) xc_add_coll(o, op, "p2p", t1 > from ? t1 - from : 0, 0);
        if (op->record_event >= 0) sg_sem_release(event_sem(&gs, it, op->record_event));
        continue;
      } else if (op->kind == PL_COLL) {
        int n = pl_group_members(c, op->group, rank, members);
        int nodes = 0;
        for (int k = 0; k < n; k++) {
          gboolean seen = FALSE;
          for (int q = 0; q < k && !seen; q++)
            seen = shared.node_of[members[q]] == shared.node_of[members[k]];
          if (!seen) nodes++;
        }
        coll_op cop = op->coll;
        const char *algo = coll_resolve(cop, c->coll, op->bytes, n, nodes);
        const coll_algo *a = coll_find(cop, algo);
        size_t bytes = coll_round_bytes(cop, (size_t)op->bytes, n);
        if (op->peer_send_bytes) { /* MoE all-to-all with uneven blocks */
          coll_alltoallv_pairwise(sendbuf, op->peer_send_bytes, recvbuf, op->peer_recv_bytes,
                                  comm[op->group]);
          algo = "pairwise";
          a = NULL;
        } else if (a && n > 1 && bytes > 0) {
          a->fn(sendbuf, recvbuf, bytes, comm[op->group], &topo[op->group], noop);
        }
        double t1 = simgrid_get_clock();
        if (it >= it0) xc_add_coll(o, op, a ? a->name : algo, t1 - t0,
                                coll_wire_bytes(cop, algo, op->bytes, n, &topo[op->group]));
      }
      if (op->kind != PL_SEND) xc_add_span(o, PL_STREAM_COMM, t0, simgrid_get_clock(), i, it);
      if (op->record_event >= 0) sg_sem_release(event_sem(&gs, it, op->record_event));
    }
    MPI_Waitall(si, sreq, MPI_STATUSES_IGNORE);
  }
  g_free(rreq);
  g_free(sreq);
  sg_actor_join(gpu, -1);
  sg_actor_unref(gpu);

  xc_out_finish(o, c->iters, t_start);

  MPI_Barrier(MPI_COMM_WORLD);
  int status = 0;
  if (rank == 0) {
    char *err = xc_write(shared.out, P, c->iters, NULL, 0, result_path, trace_path);
    if (err) {
      fprintf(stderr, "dlsim-smpi: %s\n", err);
      g_free(err);
      status = 1;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (size_t i = 0; i < (size_t)c->iters * plan->n_events; i++) sg_sem_destroy(gs.events[i]);
  g_free(gs.events);
  for (int g = 1; g < PL_N_GROUPS; g++)
    if (comm[g] != MPI_COMM_NULL && comm[g] != MPI_COMM_WORLD) MPI_Comm_free(&comm[g]);
  MPI_Op_free(&noop);
  SMPI_SHARED_FREE(sendbuf);
  SMPI_SHARED_FREE(recvbuf);
  g_free(members);
  /* the shared table and plans stay until the process ends: other ranks may still read them */
  return status;
}
