/* run.c — `dlsim-smpi run REQUEST RESULT`: the SMPI executor of the planner's op lists.
 *
 * Run by the driver (exec.c) under `smpirun -no-privatize`: all ranks share this process's
 * globals, so the run is opened once (by the first rank to start: SMPI runs ranks one at a time
 * and nothing here yields before the open is done), and every rank leaves its record in a shared
 * table that rank 0 turns into the result after a barrier.
 *
 * Equivalent ranks (run_ctx_representative: the data-parallel replicas, the members of a
 * Megatron tensor-parallel group) share one op list, built by the first of them to start; each
 * rank holds a view of it with its own peers (plan_view), so memory grows with the ranks' state,
 * not with P copies of the same list.
 *
 * Per rank, the two streams of stream.h: a compute-stream actor on the rank's host runs the
 * kernels in order (an exec of seconds × host speed); the rank itself runs the communication ops
 * in order with the collectives of coll_mpi.h on SMPI_SHARED_MALLOC buffers with a no-op
 * reduction. Events are flags with the simulated time they were recorded at; a stream that waits
 * for one not yet recorded blocks on its own SimGrid semaphore, which the recording stream
 * releases: no polling, and no SimGrid object per event.
 *
 * A stream may hold time that it has not spent in SimGrid: a collective that is one ring phase
 * leaves the latency of its remaining steps (phase.c) to the rank, whose communication stream
 * then reads the clock that much later (ready_at) and sleeps it off only before its next MPI
 * call; an event carries that later time, and a stream that waits for it holds the difference
 * too, the compute stream adding it to its next execution. The simulated times are those of
 * sleeping at once (the golden results are unchanged to the last digit); what is saved is a
 * SimGrid activity per collective: 3 to 16 % of the wall time of a 1,024-GPU gpt-18b run (runs
 * alternated with the executor that sleeps).
 *
 * The op lists' point-to-point messages (pipeline activations and gradients, ring attention's
 * chunks) travel through SimGrid mailboxes of their own, one per sender, receiver and tag, whose
 * receiver is permanent: a message starts flowing when it is sent, as it would to a receive
 * posted at the start of the iteration, and the receiver takes the messages of each mailbox in
 * order, as MPI matches a repeated (source, tag). Posted as MPI receives, the iteration's
 * thousands of them (a ring attention step per layer, micro-batch and cp rank) sat in the rank's
 * one MPI mailbox, and every message of every collective walked past them to its match: most of
 * a ring-attention run's wall time. A message carries its simulated post time, so the receive
 * knows how long it waited for the sender (bubble) and how long the transfer took
 * (communication).
 *
 * Sends are waited for at the end of the iteration, but one whose receive has completed is
 * waited for (at no simulated time: it is over) before the sender's next call. SimGrid keeps a
 * list of each actor's unfinished communications and walks it whenever one of them ends; a
 * middle pipeline stage's 32 finished sends on it made every message of the data-parallel
 * all-reduce that follows walk 32 more entries.
 */
#include <mpi.h>
#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
#include <simgrid/semaphore.h>
#include <smpi/smpi.h>

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/mpi_groups.h"
#include "coll/coll_mpi.h"
#include "exec/context.h"
#include "core/dl_common.h"
#include "exec/exec.h"
#include "out/record.h"
#include "exec/smpi/run.h"
#include "exec/stream.h"

/* One op list of a set of equivalent ranks, and what every rank of the set reads of it. */
typedef struct {
  plan_rank *plan;       /* the representative's (owned) */
  int n_send;            /* the pieces of its sends */
  double max_bytes;      /* the largest collective buffer or all-to-all arrival */
} shared_plan;

/* Rail folding (the request's fold_rails): a node's data-parallel collectives over one GPU per
 * node, as GPU 0's group runs them. GPU 0 counts the calls it has finished; a GPU of another
 * index waiting for call c of its own blocks on its semaphore until GPU 0 has finished c. */
typedef struct {
  guint64 done;          /* calls GPU 0 of the node has finished */
  guint64 *want;         /* per GPU of the node: the call + 1 it waits for, 0 when not waiting */
  sg_sem_t *sem;         /* per GPU of the node */
} rail_fold;

/* Process-wide, shared by all ranks (-no-privatize); written once, then read-only except each
 * rank's own slots. */
static struct {
  gboolean loaded;
  char *error;           /* set when opening failed: every rank reports it and exits */
  run_ctx ctx;           /* the run, opened from the request */
  exec_request req;      /* output paths */
  int *node_of;          /* node index of each rank's host */
  int *gpu_of;           /* its GPU index in the node (host property gpu), -1 if unknown */
  guint32 *node_traffic; /* per rank: node_traffic's */
  int *node_first;       /* per node index: where its ranks start in node_ranks (n_nodes + 1) */
  int *node_ranks;       /* ranks by node */
  coll_layout *layout;   /* every rank's groups (coll_groups_init's), made by the first rank */
  int max_gpu;           /* the largest GPU index of a node (gpu_of), -1 if none is known */
  GHashTable *gpu_count; /* slot · P + group -> its members by GPU index + 1 (group_traffic) */
  gboolean debug_ops;    /* DLSIM_DEBUG_OPS set: print every op as the ranks reach it */
  GHashTable *p2p;       /* "dlsim:p2p:src:dst:tag" -> its p2p_link (owned) */
  struct smpi_rank **rank; /* per rank: its backend, while it runs */
  rec_rank *recs;        /* per rank */
  shared_plan **plans;   /* per representative rank (run_ctx_representative), else NULL */
  guint64 clock_reads;   /* report_progress calls, to look at the host's clock on few of them */
  gint64 next_report_us; /* host time of the next progress line */
  size_t buf_bytes;      /* the largest message or collective of any rank, bytes */
  void *sendbuf, *recvbuf; /* payload-free buffers every rank uses (one mapping each) */
  rail_fold *rails;      /* per node, when data-parallel groups fold onto GPU 0's (rail_folds) */
  gboolean rail_decided; /* rail_folds has run */
  gboolean rail_uneven;  /* some rank runs a collective that treats its members unlike (a tree's
                            chain, a root): no rail folding (rail_symmetric) */
} shared;

/* A posted send, as its receiver finds it (p2p_link). */
typedef struct {
  double posted_s;       /* simulated time the send was posted */
  int slot, n;           /* its comms among the sender's sends of the iteration: its pieces (a
                            message past COLL_MSG_MAX goes as several, as collectives send it) */
  int iter;
} sent_note;

/* A stream blocked on an event not yet recorded. */
typedef struct {
  gint64 ev;             /* iter · n_events + event, -1: nobody waits here */
  sg_sem_t sem;          /* the waiting stream blocks on it */
} ev_waiter;

/* One rank's backend of the two-stream loop. */
typedef struct smpi_rank {
  int rank;
  const plan_rank *plan;
  const shared_plan *sp; /* what plan is a view of */
  guint8 *ev_set;        /* iters × n_events: recorded yet */
  ev_waiter waiter[PLAN_N_STREAMS]; /* each stream waits for one event at a time */
  double speed;          /* host FLOP/s */
  coll_groups groups;
  void *sendbuf, *recvbuf; /* payload-free: shared.sendbuf, shared.recvbuf */
  MPI_Op noop;
  sg_comm_t *sreq;       /* the iteration's sends (NULL once waited for), n_sreq slots */
  int n_sreq;
  int n_sends;
  int send_iter;         /* the iteration of sreq's sends */
  struct { int iter, slot, n; } *sends_over; /* sends whose receive completed, n_over of them */
  int n_over;
  sg_actor_t gpu;        /* the compute stream's actor */
  int rail_fold;         /* its data-parallel group folds onto GPU 0's: 1 on GPU 0 (which
                            runs it and counts), 2 on other GPUs (which wait), 0: neither */
  guint64 rail_calls;    /* data-parallel collectives it has reached (rail_fold 2) */
  double ready_at[PLAN_N_STREAMS]; /* a stream's clock reads at least this (held time), s */
  double *ev_time;       /* iters × n_events: when it was recorded, s */
} smpi_rank;

/* The stream the calling actor runs. */
static int stream_of(const smpi_rank *g) {
  return sg_actor_self() == g->gpu ? PLAN_STREAM_COMPUTE : PLAN_STREAM_COMM;
}

static double stream_now(const smpi_rank *g, int s) {
  return MAX(simgrid_get_clock(), g->ready_at[s]);
}

/* Waits for the sends that its receivers have seen complete (no simulated time); a note from
 * an iteration whose sends were all waited for is dropped. */
static void reap_sends(smpi_rank *g) {
  for (int i = 0; i < g->n_over; i++) {
    if (g->sends_over[i].iter != g->send_iter) continue;
    for (int k = g->sends_over[i].slot; k < g->sends_over[i].slot + g->sends_over[i].n; k++) {
      if (g->sreq[k]) sg_comm_wait(g->sreq[k]); /* NULL: waited for at the iteration's end */
      g->sreq[k] = NULL;
    }
  }
  g->n_over = 0;
}

/* Before it next calls MPI, the communication stream spends the time it holds and waits for
 * its sends that are over. */
static void settle(smpi_rank *g) {
  const double d = g->ready_at[PLAN_STREAM_COMM] - simgrid_get_clock();
  if (d > 0) sg_actor_sleep_for(d);
  reap_sends(g);
}

/* About once a second of host time, a progress line for the driver (exec.h) with the simulated
 * time t; looked at on one call in 4,096. */
static void report_progress(double t) {
  if (++shared.clock_reads % 4096 == 0) {
    const gint64 now = g_get_monotonic_time();
    if (now >= shared.next_report_us) {
      shared.next_report_us = now + G_USEC_PER_SEC;
      fprintf(stderr, EXEC_PROGRESS "%.9g\n", t);
    }
  }
}

/* Inside a collective, at each message it posts (coll_msg_tick): a long one does not hold the
 * progress line back. */
static void collective_tick(void) { report_progress(simgrid_get_clock()); }

/* The simulated clock, with the progress line. */
static double be_now(void *be) {
  const smpi_rank *g = be;
  const double t = stream_now(g, stream_of(g));
  report_progress(t);
  return t;
}

static double be_host_time(void *be, const plan_op *op, int iter) {
  (void)be;
  (void)iter;
  return ktime_host_s(&shared.ctx.kt, op);
}

static double be_kernel_time(void *be, const plan_op *op, int iter, kdb_origin *origin) {
  const smpi_rank *g = be;
  return run_ctx_kernel_s(&shared.ctx, op, (int)(op - g->plan->ops), g->rank, iter, origin);
}

/* A batch of kernels: one execution on the rank's host, nothing else computing there, after the
 * time the compute stream holds. */
static void be_run_for(void *be, double seconds) {
  smpi_rank *g = be;
  const double held = g->ready_at[PLAN_STREAM_COMPUTE] - simgrid_get_clock();
  if (seconds > 0) sg_actor_execute((MAX(held, 0) + seconds) * g->speed);
}

static kdb_origin be_kernel(void *be, const plan_op *op, int iter) {
  kdb_origin origin;
  be_run_for(be, be_kernel_time(be, op, iter, &origin));
  return origin;
}

sg_comm_t dl_p2p_put_async(sg_mailbox_t mailbox, void *payload, long bytes); /* p2p.cpp */

/* The messages from one rank to another with one tag: their SimGrid mailbox, and the notes of
 * those sent and not yet received, in order (a message that ends before its receiver asks for
 * it hands its payload to nobody: the notes wait here). */
typedef struct {
  sg_mailbox_t mb;
  GQueue notes;
} p2p_link;

/* The link from `src` to `dst` with `tag`, made on first use (actors run one at a time). */
static p2p_link *p2p_mailbox(int src, int dst, int tag) {
  char name[64];
  g_snprintf(name, sizeof name, "dlsim:p2p:%d:%d:%d", src, dst, tag);
  p2p_link *l = g_hash_table_lookup(shared.p2p, name);
  if (l) return l;
  sg_mailbox_t mb = sg_mailbox_by_name(name); /* a simcall: other actors may run meanwhile */
  if ((l = g_hash_table_lookup(shared.p2p, name))) return l;
  l = g_new0(p2p_link, 1);
  l->mb = mb;
  g_queue_init(&l->notes);
  g_hash_table_insert(shared.p2p, g_strdup(name), l);
  return l;
}

static double be_recv_wait(void *be, const plan_op *op, int iter) {
  (void)iter;
  smpi_rank *g = be;
  settle(g);
  const int peer = plan_op_peer(g->plan, op);
  p2p_link *l = p2p_mailbox(peer, g->rank, op->tag);
  for (size_t k = 0; k < coll_msg_pieces((size_t)op->bytes); k++) sg_mailbox_get(l->mb);
  sent_note *s = g_queue_pop_head(&l->notes);
  const double posted = s->posted_s;
  /* the sender waits for it before its next call (settle) */
  smpi_rank *sender = shared.rank[peer];
  if (sender && sender->n_over < sender->sp->n_send) {
    sender->sends_over[sender->n_over].iter = s->iter;
    sender->sends_over[sender->n_over].n = s->n;
    sender->sends_over[sender->n_over++].slot = s->slot;
  }
  g_free(s);
  return posted;
}

static void be_send(void *be, const plan_op *op, int iter) {
  smpi_rank *g = be;
  settle(g);
  const size_t bytes = (size_t)op->bytes, n = coll_msg_pieces(bytes);
  sent_note *v = g_new(sent_note, 1);
  v->posted_s = simgrid_get_clock();
  v->slot = g->n_sends;
  v->n = (int)n;
  v->iter = iter;
  g->send_iter = iter;
  if (g->n_sends + (int)n > g->n_sreq) {
    g->n_sreq = MAX(2 * g->n_sreq, g->n_sends + (int)n);
    g->sreq = g_renew(sg_comm_t, g->sreq, g->n_sreq);
  }
  p2p_link *l = p2p_mailbox(g->rank, plan_op_peer(g->plan, op), op->tag);
  g_queue_push_tail(&l->notes, v);
  for (size_t k = 0; k < n; k++) /* pieces as a collective sends them (coll_isend_bytes) */
    g->sreq[g->n_sends++] =
        dl_p2p_put_async(l->mb, v, (long)(k + 1 < n ? COLL_MSG_MAX : bytes - k * COLL_MSG_MAX));
}

static void be_sends_wait(void *be, int iter) {
  (void)iter;
  smpi_rank *g = be;
  settle(g);
  for (int k = 0; k < g->n_sends; k++) {
    if (g->sreq[k]) sg_comm_wait(g->sreq[k]);
    g->sreq[k] = NULL;
  }
  g->n_sends = 0;
  g->n_over = 0;
}

/* Makes the calling rank the permanent receiver of every mailbox its op list receives from
 * (p2p_mailbox), before any rank sends. */
static void p2p_receive(const smpi_rank *g) {
  GHashTable *seen = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
  for (int i = 0; i < g->plan->n_ops; i++) {
    const plan_op *op = &g->plan->ops[i];
    if (op->kind != PLAN_RECV) continue;
    gint64 *key = g_new(gint64, 1);
    *key = (gint64)plan_op_peer(g->plan, op) << 32 | (guint32)op->tag;
    if (g_hash_table_contains(seen, key)) {
      g_free(key);
      continue;
    }
    g_hash_table_add(seen, key);
    sg_mailbox_set_receiver(sg_mailbox_get_name(p2p_mailbox(plan_op_peer(g->plan, op), g->rank,
                                                            op->tag)->mb));
  }
  g_hash_table_destroy(seen);
}

/* Rail folding (rail_folds): GPU j != 0 waits until GPU 0 of its node has finished its call of
 * the same rank in order; GPU 0 counts its calls and wakes those waiting for one it finished. */
static void rail_wait(smpi_rank *g) {
  rail_fold *f = &shared.rails[shared.node_of[g->rank]];
  const int gpu = shared.gpu_of[g->rank];
  if (f->done >= ++g->rail_calls) return;
  f->want[gpu] = g->rail_calls;
  sg_sem_acquire(f->sem[gpu]);
}

static void rail_done(const smpi_rank *g) {
  const int node = shared.node_of[g->rank];
  rail_fold *f = &shared.rails[node];
  f->done++;
  for (int i = shared.node_first[node]; i < shared.node_first[node + 1]; i++) {
    const int gpu = shared.gpu_of[shared.node_ranks[i]];
    if (f->want[gpu] && f->want[gpu] <= f->done) {
      f->want[gpu] = 0;
      sg_sem_release(f->sem[gpu]);
    }
  }
}

static const char *be_coll(void *be, const plan_op *op, int iter, double *wire) {
  (void)iter;
  smpi_rank *g = be;
  const int grp = plan_op_slot(op);
  const int n = g->groups.size[grp];
  const coll_op cop = op->coll;
  const char *algo = coll_resolve(cop, shared.ctx.cfg.coll, op->bytes, n, g->groups.nodes[grp],
                                  &shared.ctx.nccl);
  const coll_algo *a = coll_find(cop, algo);
  const size_t bytes = coll_round_bytes(cop, (size_t)op->bytes, n);
  /* a folded run (sim_fold_channels) holds only collectives whose channel 0 stands for all */
  if (shared.req.fold_channels > 1 &&
      (g->groups.topo[grp].fold != shared.req.fold_channels || op->peer_send_bytes || !a ||
       !((strcmp(a->name, "ring") == 0 && cop != COLL_BROADCAST) ||
         (strcmp(a->name, "tree") == 0 && cop == COLL_ALLREDUCE))))
    g_error("dlsim-smpi: a folded run called %s (%s) over %d ranks: a planner bug, please report "
            "this command", coll_op_name(cop), algo, n);
  settle(g);
  const gboolean rail = grp == PLAN_GRP_DP && n > 1; /* rail folding's calls (rail_folds) */
  if (rail && g->rail_fold == 2) { /* GPU 0's group stands for this one */
    rail_wait(g);
  } else if (op->peer_send_bytes) { /* MoE all-to-all with uneven blocks (none alone) */
    if (n > 1)
      coll_alltoallv_pairwise(g->sendbuf, op->peer_send_bytes, g->recvbuf, op->peer_recv_bytes,
                              g->groups.comm[grp]);
    algo = "pairwise";
    a = NULL;
  } else if (a && n > 1 && bytes > 0) {
    /* a ring all-reduce, all-gather or reduce-scatter is one ring phase and nothing after it */
    if (strcmp(a->name, "ring") == 0 &&
        (cop == COLL_ALLREDUCE || cop == COLL_ALLGATHER || cop == COLL_REDUCESCATTER))
      smpi_phase_defer(g->rank);
    a->fn(g->sendbuf, g->recvbuf, bytes, g->groups.comm[grp], &g->groups.topo[grp], g->noop);
    const double held = smpi_phase_deferred(g->rank);
    if (held > 0) g->ready_at[PLAN_STREAM_COMM] = simgrid_get_clock() + held;
  }
  if (rail && g->rail_fold == 1) { /* once the call's held latency is over (settle) */
    settle(g);
    rail_done(g);
  }
  *wire = coll_wire_bytes(cop, algo, op->bytes, n, &g->groups.topo[grp]);
  if (a && g_str_has_prefix(algo, "smpi:")) return g_intern_string(algo); /* which of SMPI's */
  return a ? a->name : algo;
}

static gint64 event_index(const smpi_rank *g, int iter, int ev) {
  return (gint64)iter * g->plan->n_events + ev;
}

static void be_ev_wait(void *be, int iter, int ev) {
  smpi_rank *g = be;
  const gint64 i = event_index(g, iter, ev);
  if (!g->ev_set[i]) {
    ev_waiter *w = g->waiter[0].ev < 0 ? &g->waiter[0] : &g->waiter[1];
    w->ev = i;
    sg_sem_acquire(w->sem);
  }
  const int s = stream_of(g);
  g->ready_at[s] = MAX(g->ready_at[s], g->ev_time[i]);
}

static void be_ev_record(void *be, int iter, int ev) {
  smpi_rank *g = be;
  const gint64 i = event_index(g, iter, ev);
  g->ev_time[i] = stream_now(g, stream_of(g));
  g->ev_set[i] = 1;
  for (int s = 0; s < PLAN_N_STREAMS; s++)
    if (g->waiter[s].ev == i) {
      g->waiter[s].ev = -1;
      sg_sem_release(g->waiter[s].sem);
    }
}

/* --net-jitter: the rank's communication stream holds the delay as time it has not spent yet
 * (ready_at), slept off before its next MPI call. */
static void be_comm_delay(void *be, const plan_op *op, int op_index, int iter) {
  (void)op;
  smpi_rank *g = be;
  const double d = run_ctx_comm_delay(&shared.ctx, g->rank, op_index, iter);
  if (d > 0)
    g->ready_at[PLAN_STREAM_COMM] = MAX(simgrid_get_clock(), g->ready_at[PLAN_STREAM_COMM]) + d;
}

static const exec_stream_ops smpi_stream = {
    .now = be_now, .kernel = be_kernel, .kernel_time = be_kernel_time, .run_for = be_run_for,
    .host_time = be_host_time, .recv_post = NULL, /* p2p_receive */ .recv_wait = be_recv_wait,
    .send = be_send, .sends_wait = be_sends_wait, .coll = be_coll, .ev_wait = be_ev_wait,
    .ev_record = be_ev_record, .comm_delay = be_comm_delay,
};

/* The compute stream: an actor beside the rank on the same host. */
static void gpu_actor(int argc, char **argv) {
  (void)argc, (void)argv;
  exec_stream_compute(sg_actor_self_get_data());
}

static void noop_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)in, (void)inout, (void)len, (void)type;
}

static void open_shared(const char *request_path) {
  if (shared.loaded) return;
  shared.loaded = TRUE;
  GError *e = NULL;
  cfg_run c;
  cfg_init(&c);
  if (!exec_request_read(request_path, &c, &shared.req, &e) ||
      !run_ctx_open_resolved(&shared.ctx, &c, shared.req.gpu_model, shared.req.gpu_mem_bytes, shared.req.nccl, &e)) {
    shared.error = g_strdup(e->message);
    g_error_free(e);
    cfg_release(&c);
    return;
  }
  shared.ctx.sample = shared.req.kernel_sample;
  shared.p2p = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  shared.node_of = g_new0(int, shared.ctx.cfg.gpus);
  shared.node_traffic = g_new0(guint32, shared.ctx.cfg.gpus);
  shared.gpu_of = g_new0(int, shared.ctx.cfg.gpus);
  shared.debug_ops = g_getenv("DLSIM_DEBUG_OPS") != NULL;
  shared.recs = g_new0(rec_rank, shared.ctx.cfg.gpus);
  shared.rank = g_new0(smpi_rank *, shared.ctx.cfg.gpus);
  shared.plans = g_new0(shared_plan *, shared.ctx.cfg.gpus);
  coll_msg_tick = collective_tick;
}

/* The op list of representative rank `rep`, built on first use. NULL with DL_ERR_INPUT. */
static const shared_plan *plan_of_set(int rep, GError **err) {
  if (shared.plans[rep]) return shared.plans[rep];
  const run_ctx *x = &shared.ctx;
  plan_rank *p = run_ctx_plan(x, &x->cfg, x->layer_t, rep, err);
  if (!p) return NULL;
  shared_plan *sp = g_new0(shared_plan, 1);
  sp->plan = p;
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind == PLAN_SEND) sp->n_send += (int)coll_msg_pieces((size_t)op->bytes);
    /* messages carry no buffer (p2p_mailbox) */
    if (op->kind == PLAN_KERNEL || op->kind == PLAN_SEND || op->kind == PLAN_RECV) continue;
    double in = 0; /* uneven all-to-all: what arrives may exceed what leaves */
    if (op->peer_recv_bytes) {
      const int n = op->comm >= 0 ? p->comms->size[op->comm] : x->cfg.ep;
      for (int j = 0; j < n; j++) in += op->peer_recv_bytes[j];
    }
    sp->max_bytes = MAX(sp->max_bytes, MAX(op->bytes, in));
  }
  shared.plans[rep] = sp;
  return sp;
}

/* Rank 0: the result of every rank's record, and the trace. NULL or a newly allocated message. */
static char *write_result(int P, const char *result_path) {
  const run_ctx *x = &shared.ctx;
  res_result r;
  res_init(&r);
  rec_result(shared.recs, P, &x->cfg, x->gpu_mem_bytes, &r);
  r.gpu_model = x->gpu->name;
  r.computed_phases = smpi_phase_computed();
  r.folded_channels = shared.req.fold_channels;
  r.folded_rails = shared.rails ? shared.req.fold_rails : 1;
  res_kdb_set_source(&r.kdb, &x->kernels);
  GString *trace = shared.req.trace ? rec_trace(shared.recs, P, &x->cfg) : NULL;
  char *err = exec_result_write(&r, x, result_path, shared.req.trace, trace);
  if (trace) g_string_free(trace, TRUE);
  res_release(&r);
  return err;
}

/* Ranks by node, once every rank has said its node. */
static void index_nodes(int P) {
  if (shared.node_first) return;
  int n = 0;
  for (int r = 0; r < P; r++) n = MAX(n, shared.node_of[r] + 1);
  shared.node_first = g_new0(int, n + 2);
  shared.node_ranks = g_new(int, P);
  for (int r = 0; r < P; r++) shared.node_first[shared.node_of[r] + 2]++;
  for (int i = 2; i < n + 2; i++) shared.node_first[i] += shared.node_first[i - 1];
  for (int r = 0; r < P; r++) shared.node_ranks[shared.node_first[shared.node_of[r] + 1]++] = r;
}

/* Traffic between rank `me` and `peer` as node_traffic counts it into *mask for slot bit `s`. */
static void count_peer(int me, int peer, int s, guint32 *mask) {
  if (peer == me) return;
  if (shared.node_of[peer] == shared.node_of[me]) *mask |= 1u << s;
  else if (shared.gpu_of[peer] != shared.gpu_of[me] || shared.gpu_of[me] < 0) *mask |= 1u << 30;
}

/* Members of group `gid` of `slot` (op's) by GPU index: [gpu + 1], [0] where unknown; counted
 * once per group from the caller's members. */
static const int *gpu_count(const smpi_rank *g, const cfg_run *c, const plan_op *op, int slot,
                            int gid, int *members) {
  if (!shared.gpu_count)
    shared.gpu_count = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  const gint64 key = (gint64)slot * c->gpus + gid;
  int *h = g_hash_table_lookup(shared.gpu_count, &key);
  if (h) return h;
  const int n = plan_op_members(g->plan, c, op, g->rank, members);
  h = g_new0(int, shared.max_gpu + 2);
  for (int i = 0; i < n; i++) h[shared.gpu_of[members[i]] + 1]++;
  g_hash_table_insert(shared.gpu_count, g_memdup2(&key, sizeof key), h);
  return h;
}

/* What count_peer finds over every member of the caller's group `gid` of `slot` (bit `s`),
 * without walking the group: its members on the caller's node, and by GPU index the others. */
static void group_traffic(const smpi_rank *g, const cfg_run *c, const plan_op *op, int slot,
                          int gid, int s, guint32 *mask, int *members) {
  const int me = g->rank, node = shared.node_of[me], gpu = shared.gpu_of[me];
  int here = 0, here_other = 0; /* members on the node (the caller too); of another GPU index */
  for (int i = shared.node_first[node]; i < shared.node_first[node + 1]; i++) {
    const int q = shared.node_ranks[i];
    if (coll_layout_group(shared.layout, slot, q) != gid) continue;
    here++;
    here_other += gpu < 0 || shared.gpu_of[q] != gpu;
  }
  if (here > 1) *mask |= 1u << s;
  const int n = g->groups.size[slot];
  /* members on other nodes at another GPU index (at any, where the caller's is unknown) */
  const int far =
      gpu < 0 ? n - here : n - gpu_count(g, c, op, slot, gid, members)[gpu + 1] - here_other;
  if (far > 0) *mask |= 1u << 30;
}

/* What this rank's communication does inside its node: the slots (plan_op_slot) whose ops reach
 * another rank of the node, a bit each (bit 31 for point-to-point messages and slots past 29);
 * bit 30 when any op reaches a GPU of another index on another node (another rail: such a route
 * may cross NVLink). */
static guint32 node_traffic(const smpi_rank *g, const cfg_run *c) {
  const int P = c->gpus, me = g->rank;
  int *members = g_new(int, P);
  guint32 mask = 0, seen = 0;
  index_nodes(P);
  for (int i = 0; i < g->plan->n_ops; i++) {
    const plan_op *op = &g->plan->ops[i];
    if (op->kind == PLAN_SEND || op->kind == PLAN_RECV) {
      const int peer = plan_op_peer(g->plan, op);
      if (peer >= 0 && peer < P) count_peer(me, peer, 31, &mask);
    } else if (op->kind == PLAN_COLL) {
      const int slot = plan_op_slot(op), s = slot < 30 ? slot : 31;
      if (s < 30 && (seen & (1u << s))) continue;
      if (s < 30) seen |= 1u << s;
      const int gid = coll_layout_group(shared.layout, slot, me);
      if (gid >= 0) {
        group_traffic(g, c, op, slot, gid, s, &mask, members);
        continue;
      }
      const int n = plan_op_members(g->plan, c, op, me, members);
      for (int j = 0; j < n; j++) count_peer(me, members[j], s, &mask);
    }
  }
  g_free(members);
  return mask;
}

/* Whether every collective of the rank but its data-parallel ones treats the members alike (a
 * ring, but no broadcast; no uneven all-to-all), so that the GPUs of a node reach their
 * data-parallel calls at the same times: what rail folding needs. */
static gboolean rail_symmetric(const smpi_rank *g, const cfg_run *c) {
  for (int i = 0; i < g->plan->n_ops; i++) {
    const plan_op *op = &g->plan->ops[i];
    if (op->kind != PLAN_COLL) continue;
    const int slot = plan_op_slot(op), n = g->groups.size[slot];
    if (slot == PLAN_GRP_DP || n <= 1) continue;
    const char *algo = coll_resolve(op->coll, c->coll, op->bytes, n, g->groups.nodes[slot],
                                    &shared.ctx.nccl);
    if (op->peer_send_bytes || op->coll == COLL_BROADCAST || strcmp(algo, "ring") != 0)
      return FALSE;
  }
  return TRUE;
}

/* Tells phase.c which of the rank's groups may have their ring phases computed: a group inside
 * the node, on a platform that keeps flows inside a node apart (plat_node_links_private), whose
 * kind is the only one with traffic between GPUs of the node. */
static void node_private_groups(const smpi_rank *g, int P) {
  if (!shared.req.node_links_private || shared.ctx.cfg.message_level ||
      g_getenv("DLSIM_SEND_NODE_PHASES"))
    return;
  index_nodes(P);
  const int node = shared.node_of[g->rank];
  guint32 all = 0;
  for (int i = shared.node_first[node]; i < shared.node_first[node + 1]; i++)
    all |= shared.node_traffic[shared.node_ranks[i]];
  for (int k = 0; k < g->groups.n && k < 30; k++)
    if (g->groups.size[k] > 1 && g->groups.nodes[k] == 1 && all == 1u << k)
      smpi_phase_node_private(g->rank, g->groups.comm[k]);
}

/* Rail folding (the driver's request: a rail-optimised cluster, tp filling the node). A
 * data-parallel group of one GPU per node, every member on GPU j != 0, runs on rail j; GPU 0 of
 * the same nodes run an equivalent group (the same op list: tensor-parallel peers) on rail 0,
 * whose links rail j does not share. Where the node's GPUs reach each data-parallel call
 * together (rail_symmetric, and nothing crosses rails), GPU j's calls end when GPU 0's do, and
 * its group waits for those instead of running (rail_fold 2); GPU 0 runs its group and counts
 * (1). GPU j's other messages on rail j then run without its data-parallel flows beside them
 * and may end sooner; the node's tensor-parallel rings wait for GPU 0 after them, and the
 * fidelity test compares every rank. All or nothing: decided once for every group. */

/* Whether the data-parallel group of rank r (GPU j != 0) may wait for GPU 0's. */
static gboolean rail_group_ok(const cfg_run *c, int r, int *members) {
  const int j = shared.gpu_of[r];
  const int n = plan_group_members(c, PLAN_GRP_DP, r, members);
  const guint32 cross_rail = 1u << 30; /* node_traffic's bit */
  if (j <= 0 || n < 2) return FALSE;
  for (int i = 0; i < n; i++) {
    const int m = members[i], m0 = m - j; /* node-major: GPU 0 of m's node */
    if (shared.gpu_of[m] != j || m0 < 0 || shared.node_of[m0] != shared.node_of[m] ||
        shared.gpu_of[m0] != 0 || (shared.node_traffic[m] & cross_rail) ||
        (shared.node_traffic[m0] & cross_rail) ||
        (i > 0 && shared.node_of[m] == shared.node_of[members[i - 1]])) /* one per node */
      return FALSE;
    int dp, tp, pp, dp0, tp0, pp0;
    plan_coords(c, m, &dp, &tp, &pp);
    plan_coords(c, m0, &dp0, &tp0, &pp0);
    if (dp0 != dp || pp0 != pp) return FALSE;
  }
  return TRUE;
}

static void rail_folds(int P) {
  if (shared.rail_decided) return;
  shared.rail_decided = TRUE; /* the first rank here decides for all (one at a time) */
  const cfg_run *c = &shared.ctx.cfg;
  /* tensor-parallel peers run one op list (the same as run_ctx_representative's) */
  gboolean all = shared.req.fold_rails > 1 && !shared.rail_uneven && !shared.ctx.trace &&
                 plan_tp_alike(shared.ctx.model, c);
  int *members = g_new(int, P), folded = 0;
  for (int r = 0; all && r < P; r++)
    if (shared.gpu_of[r] != 0) {
      all = rail_group_ok(c, r, members);
      folded++;
    }
  g_free(members);
  if (!all || !folded) return;
  index_nodes(P);
  int nodes = 0, gpus = 0;
  for (int r = 0; r < P; r++) {
    nodes = MAX(nodes, shared.node_of[r] + 1);
    gpus = MAX(gpus, shared.gpu_of[r] + 1);
  }
  shared.rails = g_new0(rail_fold, nodes);
  for (int x = 0; x < nodes; x++) {
    shared.rails[x].want = g_new0(guint64, gpus);
    shared.rails[x].sem = g_new(sg_sem_t, gpus);
    for (int i = 0; i < gpus; i++) shared.rails[x].sem[i] = sg_sem_init(0);
  }
}

int smpi_exec_main(int argc, char **argv) {
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi run: expected REQUEST RESULT\n");
    return 2;
  }
  open_shared(argv[1]);
  if (shared.error) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %s\n", shared.error);
    return 2;
  }
  const run_ctx *x = &shared.ctx;
  const cfg_run *c = &x->cfg;
  coll_buf_message_level(c->message_level);
  if (P != c->gpus) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %d ranks for --gpus %d\n", P, c->gpus);
    return 2;
  }
  GError *e = NULL;
  const int rep = run_ctx_representative(x, c, rank);
  const shared_plan *sp = plan_of_set(rep, &e);
  if (!sp) {
    if (rank == 0) fprintf(stderr, "dlsim-smpi: %s\n", e->message);
    g_error_free(e);
    return 2;
  }
  plan_rank *plan = plan_view(sp->plan, rep, rank);
  const char *node = sg_host_get_property_value(sg_host_self(), "node");
  shared.node_of[rank] = node ? atoi(node) : rank;
  const char *gpu_index = sg_host_get_property_value(sg_host_self(), "gpu");
  shared.gpu_of[rank] = gpu_index ? atoi(gpu_index) : -1;
  /* buffers: payload-free, as large as the largest collective or message of any rank */
  shared.buf_bytes = MAX(shared.buf_bytes, (size_t)sp->max_bytes + 64);
  smpi_meet();
  if (!shared.sendbuf) { /* the first rank past the barrier: every rank has said its size */
    shared.sendbuf = SMPI_SHARED_MALLOC(shared.buf_bytes);
    shared.recvbuf = SMPI_SHARED_MALLOC(shared.buf_bytes);
    /* what a ring phase asks at most: an all-reduce's one phase sends about twice the buffer
     * (coll_ring_ar), and the phase maps twice what it sends (coll_ring_phase) */
    smpi_scratch_reserve(4 * shared.buf_bytes + 4096);
  }

  smpi_rank g;
  memset(&g, 0, sizeof g);
  g.rank = rank;
  g.plan = plan;
  g.sp = sp;
  g.speed = sg_host_get_speed(sg_host_self());
  if (!shared.layout) { /* the first rank past the barrier: every rank has said its node */
    shared.layout = coll_layout_new(c, plan->comms, shared.node_of);
    shared.max_gpu = -1;
    for (int r = 0; r < P; r++) shared.max_gpu = MAX(shared.max_gpu, shared.gpu_of[r]);
  }
  coll_groups_init(&g.groups, shared.layout, rank, MPI_COMM_NULL);
  for (int k = 0; k < g.groups.n; k++) {
    g.groups.topo[k].nccl = &shared.ctx.nccl;
    /* folded (the driver's sim_fold_channels): the one group, every rank in whole nodes */
    if (shared.req.fold_channels > 1 && g.groups.size[k] == P &&
        coll_ring_channels(P, g.groups.topo[k].ranks_per_node) == shared.req.fold_channels)
      g.groups.topo[k].fold = shared.req.fold_channels;
  }
  shared.node_traffic[rank] = node_traffic(&g, c);
  if (shared.req.fold_rails > 1 && !rail_symmetric(&g, c)) shared.rail_uneven = TRUE;
  g.sendbuf = shared.sendbuf;
  g.recvbuf = shared.recvbuf;
  MPI_Op_create(noop_op, 1, &g.noop);
  g.sends_over = g_malloc_n((size_t)sp->n_send + 1, sizeof *g.sends_over);
  g.ev_set = g_new0(guint8, (size_t)c->iters * plan->n_events + 1);
  g.ev_time = g_new0(double, (size_t)c->iters * plan->n_events + 1);
  for (int s = 0; s < PLAN_N_STREAMS; s++) {
    g.waiter[s].ev = -1;
    g.waiter[s].sem = sg_sem_init(0);
  }

  rec_rank *rec = &shared.recs[rank];
  rec_init(rec, rank, plan, c->iters);
  exec_stream stream = {&smpi_stream, &g, plan, rec, c->iters, shared.debug_ops};
  shared.rank[rank] = &g;

  p2p_receive(&g);
  smpi_meet();
  node_private_groups(&g, P); /* every rank has said what its traffic is */
  rail_folds(P);
  if (shared.rails && g.groups.size[PLAN_GRP_DP] > 1) g.rail_fold = shared.gpu_of[rank] ? 2 : 1;
  double t_start = simgrid_get_clock();
  char name[32];
  g_snprintf(name, sizeof name, "gpu%d", rank);
  sg_actor_t gpu = sg_actor_init(name, sg_host_self());
  g.gpu = gpu;
  /* sg_actor_init hands back a pointer whose only reference belongs to the running actor: once
   * the compute stream ends (it may end before this rank's last sends complete), SimGrid frees
   * it and sg_actor_join below would read freed memory. Hold a reference until the join. */
  sg_actor_ref(gpu);
  sg_actor_set_data(gpu, &stream);
  sg_actor_start(gpu, gpu_actor, 0, NULL);
  exec_stream_comm(&stream);
  sg_actor_join(gpu, -1);
  sg_actor_unref(gpu);
  rec_finish(rec, t_start);

  smpi_meet();
  int status = 0;
  if (rank == 0) {
    char *err = write_result(P, argv[2]);
    if (err) {
      fprintf(stderr, "dlsim-smpi: %s\n", err);
      g_free(err);
      status = 1;
    }
  }
  smpi_meet();
  shared.rank[rank] = NULL; /* every rank is past its last receive */
  for (int s = 0; s < PLAN_N_STREAMS; s++) sg_sem_destroy(g.waiter[s].sem);
  g_free(g.ev_set);
  g_free(g.ev_time);
  g_free(g.sreq);
  g_free(g.sends_over);
  coll_groups_release(&g.groups);
  MPI_Op_free(&g.noop);
  /* the shared table, records and plans stay until the process ends: other ranks may still
   * read them */
  return status;
}
