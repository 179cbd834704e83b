/* phase.c — the SMPI flavour's side of coll_mpi.h: payload-free scratch memory, and ring phases
 * simulated as one message each way (coll_ring_phase), or computed inside a node whose NVLink
 * carries nothing else (see "ring phases inside a node, computed" below).
 *
 * A ring phase of k steps, each sending a chunk c to the right neighbour and receiving one from
 * the left, takes k·(λ·fλ(c) + c/(β·fβ(c))) on a ring whose ranks move in lock step: λ the route's
 * latency, β its bandwidth as the flows share it, fλ and fβ SimGrid's latency and bandwidth
 * factors at that size. One message of k·c each way, with the same flows on the same links for
 * the whole phase, takes λ·fλ(kc) + kc/(β·fβ(kc)); waiting k·λ·fλ(c) − λ·fλ(kc) after it gives
 * the same time as long as fβ(c) = fβ(kc), which is checked (else the steps run). A rank's λ is
 * its route to the right neighbour; on the rings of dlsim's platforms (within a node, or one rail
 * across nodes) every rank's route has the same latency. Several rings (NCCL's channels) send
 * one message each, concurrently; the caller then waits for the longest of their latency waits.
 * NCCL's protocol model (coll/nccl.h) widens each message to the bytes the protocol puts on the
 * wire, and its latency of the call replaces the routes' where it is larger: each rank waits
 * for what that latency exceeds its own routes' by, so the call ends at max(NCCL's latency, the
 * ring's route latency) plus the transfers, as the closed form has it.
 */
#include <mpi.h>
#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/semaphore.h>
#include <smpi/smpi.h>

#include <glib.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "coll/coll_mpi.h"
#include "exec/smpi/run.h"
#include "platform/platform.h"

char *dl_sg_cfg_string(const char *key); /* sgcfg.cpp */

#define TAG_PHASE (COLL_TAG_BASE + 0x100) /* + ring: apart from the steps' tags (ring.c, tree.c) */

static gboolean coll_real_data; /* TRUE: real malloc'd memory (--check); set before any call */
static gboolean phases_off;     /* --message-level */
static sg_host_t *host_of_rank; /* MPI_COMM_WORLD rank -> its host */
static int n_ranks;
static gboolean *may_defer;     /* per world rank: smpi_phase_defer's */
static double *deferred;        /* per world rank: the latency wait left to the executor, s */

int coll_buf_real(int want_real) {
  coll_real_data = want_real != 0;
  return coll_real_data;
}

int coll_buf_has_data(void) { return coll_real_data; }

/* Payload-free scratch: a few shared regions for every rank and call, their contents meaning
 * nothing (a mapping per call, SMPI_SHARED_MALLOC maps a file, cost more host time than the
 * collective's simulation). Regions only grow; old ones stay mapped (a rank may still be sending
 * from one). Successive allocations rotate over the regions, so that two buffers one call holds
 * at once never alias. */
#define SCRATCH_SLOTS 4
static void *scratch[SCRATCH_SLOTS];
static size_t scratch_bytes[SCRATCH_SLOTS];
static int scratch_next;

void *coll_buf_alloc(size_t bytes) {
  if (bytes == 0) return NULL;
  if (coll_real_data) return g_malloc(bytes);
  int k = scratch_next++ % SCRATCH_SLOTS;
  if (bytes > scratch_bytes[k]) {
    /* doubling, up to a gigabyte: past that exactly what is asked, as a machine refuses to map
     * one region much larger than its memory (SimGrid's shared malloc reserves it whole) */
    scratch_bytes[k] = bytes > COLL_MSG_MAX ? bytes : MAX(bytes, MIN(2 * scratch_bytes[k], COLL_MSG_MAX));
    scratch[k] = SMPI_SHARED_MALLOC(scratch_bytes[k]);
  }
  return scratch[k];
}

void coll_buf_free(void *p) {
  if (p && coll_real_data) g_free(p);
}

void smpi_scratch_reserve(size_t bytes) {
  if (coll_real_data) return;
  for (int k = 0; k < SCRATCH_SLOTS; k++)
    if (bytes > scratch_bytes[k]) {
      scratch_bytes[k] = bytes;
      scratch[k] = SMPI_SHARED_MALLOC(bytes);
    }
}

void coll_buf_message_level(int on) { phases_off = on != 0; }

void smpi_phase_init(int rank, int P) {
  if (!host_of_rank) {
    host_of_rank = g_new0(sg_host_t, P);
    n_ranks = P;
    may_defer = g_new0(gboolean, P);
    deferred = g_new0(double, P);
  }
  host_of_rank[rank] = sg_host_self();
}

void smpi_meet(void) {
  static sg_bar_t all; /* made by the first rank here: nothing yields before it exists */
  if (!all) all = sg_barrier_init((unsigned)n_ranks);
  sg_barrier_wait(all);
}

/* ---- ring phases ----------------------------------------------------------------------------- */

static gboolean factors_read;
static plat_factor bw_factor, lat_factor;

static void read_factors(void) {
  if (factors_read) return;
  factors_read = TRUE;
  char *bw = dl_sg_cfg_string("smpi/bw-factor"), *lat = dl_sg_cfg_string("smpi/lat-factor");
  if (!plat_factor_parse(bw, &bw_factor)) plat_factor_clear(&bw_factor);
  if (!plat_factor_parse(lat, &lat_factor)) plat_factor_clear(&lat_factor);
  free(bw);
  free(lat);
}

/* The world rank of rank `r` of `comm` (cached per communicator). */
static int world_rank(MPI_Comm comm, int r) {
  static GHashTable *cache;
  if (!cache) cache = g_hash_table_new(g_direct_hash, g_direct_equal);
  int *map = g_hash_table_lookup(cache, comm);
  if (!map) {
    int P;
    MPI_Comm_size(comm, &P);
    MPI_Group g, w;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    int *ranks = g_new(int, P);
    map = g_new(int, P);
    for (int i = 0; i < P; i++) ranks[i] = i;
    MPI_Group_translate_ranks(g, P, ranks, w, map);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    g_free(ranks);
    g_hash_table_insert(cache, comm, map);
  }
  return map[r];
}

/* The route between the hosts of world ranks `a` and `b` (cached): [0] its raw latency, s,
 * [1] its narrowest link, bytes/s. */
static const double *route_of(int a, int b) {
  static GHashTable *cache;
  if (!cache) cache = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  gint64 key = (gint64)a * n_ranks + b;
  double *v = g_hash_table_lookup(cache, &key);
  if (!v) {
    v = g_new(double, 2);
    v[0] = sg_host_get_route_latency(host_of_rank[a], host_of_rank[b]);
    v[1] = sg_host_get_route_bandwidth(host_of_rank[a], host_of_rank[b]);
    g_hash_table_insert(cache, g_memdup2(&key, sizeof key), v);
  }
  return v;
}

static double route_latency(int a, int b) { return route_of(a, b)[0]; }

/* Whether the factor is one value over sizes [lo, hi]. */
static gboolean factor_flat(const plat_factor *f, double lo, double hi) {
  const double v = plat_factor_at(f, lo);
  for (int i = 0; i < f->n; i++)
    if (f->pairs[2 * i] >= lo && f->pairs[2 * i] < hi && f->pairs[2 * i + 1] != v) return FALSE;
  return plat_factor_at(f, hi) == v;
}

/* Holds the caller `s` seconds: after its collective when the executor takes the wait over
 * (smpi_phase_defer), else now. */
static void hold(int me, double s) {
  if (!(s > 0)) return;
  if (may_defer[me]) deferred[me] += s;
  else sg_actor_sleep_for(s);
}

/* Whether messages that stand for several may go: payload-free, not --message-level, and one
 * bandwidth factor over every size from `lo` to `hi` bytes that the steps or the whole send. */
static gboolean may_bundle(double lo, double hi) {
  if (phases_off || coll_real_data || !host_of_rank) return FALSE;
  read_factors();
  return factor_flat(&bw_factor, lo, hi);
}

/* What one message of `whole` bytes on a route of latency `lat` lacks of the latencies of the
 * `steps` messages of `chunk` bytes it stands for, s. */
static double bundled_wait(double lat, int steps, double chunk, double whole) {
  return steps * lat * plat_factor_at(&lat_factor, chunk) - lat * plat_factor_at(&lat_factor, whole);
}

/* The largest route latency of any hop of R's rings, s: what a lock-step ring waits for at
 * every step. The same for every member: found once per communicator and layout. */
static double ring_latency(const coll_rings *R, MPI_Comm comm) {
  static GHashTable *cache;
  if (!cache) cache = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  char key[128]; /* the group by its size, layout and a few members' world ranks */
  g_snprintf(key, sizeof key, "%d:%d:%d:%d:%d:%d:%d", world_rank(comm, coll_ring_rank(R, 0, 0)),
             world_rank(comm, coll_ring_rank(R, 0, 1)), world_rank(comm, coll_ring_rank(R, 0, R->g / 2)),
             world_rank(comm, coll_ring_rank(R, 0, R->g - 1)), R->g, R->k, R->rpn);
  double *v = g_hash_table_lookup(cache, key);
  if (!v) {
    v = g_new0(double, 1);
    for (int j = 0; j < R->k; j++)
      for (int i = 0; i < R->g; i++)
        *v = MAX(*v, route_latency(world_rank(comm, coll_ring_rank(R, j, i)),
                                   world_rank(comm, coll_ring_rank(R, j, i + 1))));
    g_hash_table_insert(cache, g_strdup(key), v);
  }
  return *v;
}

/* ---- ring phases inside a node, computed --------------------------------------------------------
 * Where every NVLink flow inside a node belongs to one kind of group (the executor's
 * smpi_phase_node_private) and the platform keeps a flow between two GPUs of a node alone on its
 * links while nothing else leaves its sender or enters its receiver (plat_node_links_private),
 * the one message of a ring phase (one ring: a group inside one node) from member i to i+1 is
 * alone on its links from start to end: i sends nothing else and i+1 receives nothing else
 * during the phase, and a message of the group's next collective cannot start before both ends
 * have finished this one (sends are never detached: smpi/send-is-detached-thresh:0). SimGrid
 * would start it when the later of the two posts it, a(i) or a(i+1), and end it the route's
 * latency times the latency factor and its bytes over the narrowest link times the bandwidth
 * factor later, in that order. So each member, instead of sending, waits for its neighbours to
 * arrive and holds itself until both its message and its left neighbour's would have ended: the
 * same times, with no simulated message. */

/* A group whose ring phases are computed, shared by its members (-no-privatize: one process).
 * Neighbours are at most one call apart (a member leaves call n only once both of its
 * neighbours have arrived at it), so members g/2 places apart at most g/2 calls: 2g slots, each
 * call in slot call mod 2g, are never used by two calls at once. */
typedef struct {
  int g;
  int *world;       /* world rank per ring position */
  double *at;       /* [slot * g + position]: when the member arrived at the slot's call, s */
  double *wire;     /* and the bytes it sends to its right neighbour */
  guint64 *call;    /* [slot * g + position]: the call it arrived at there, + 1 (0: none) */
  sg_sem_t *sem;    /* per position: a member waiting for a neighbour blocks on its own */
  guint64 *asleep;  /* per position: the call + 1 it waits in, 0 when not waiting */
} node_group;

#define PRIVATE_MAX 8 /* communicators per rank */
typedef struct {
  MPI_Comm comm;
  guint64 calls;    /* computed phases so far */
  node_group *grp;  /* set at the first call */
  int pos;          /* the rank's ring position */
} private_comm;
typedef struct {
  private_comm c[PRIVATE_MAX];
  int n;
} private_comms;
static private_comms *private_of; /* per world rank */
static GHashTable *node_groups;   /* world rank of ring position 0 -> node_group */

void smpi_phase_node_private(int rank, MPI_Comm comm) {
  if (!private_of) private_of = g_new0(private_comms, n_ranks);
  private_comms *p = &private_of[rank];
  if (p->n < PRIVATE_MAX) p->c[p->n++] = (private_comm){.comm = comm};
}

double smpi_phase_computed(void) {
  double n = 0;
  for (int r = 0; private_of && r < n_ranks; r++)
    for (int i = 0; i < private_of[r].n; i++) n += (double)private_of[r].c[i].calls;
  return n;
}

/* The caller's record of `comm`, or NULL when its phases are sent. */
static private_comm *private_find(int me, MPI_Comm comm) {
  if (!private_of) return NULL;
  private_comms *p = &private_of[me];
  for (int i = 0; i < p->n; i++)
    if (p->c[i].comm == comm) return &p->c[i];
  return NULL;
}

/* Fills pc at its first call: the group and the caller's place in it. */
static void private_setup(private_comm *pc, const coll_rings *R, MPI_Comm comm) {
  if (!node_groups) node_groups = g_hash_table_new(g_direct_hash, g_direct_equal);
  const int g = R->g, first = world_rank(comm, coll_ring_rank(R, 0, 0));
  node_group *x = g_hash_table_lookup(node_groups, GINT_TO_POINTER(first + 1));
  if (!x) {
    x = g_new0(node_group, 1);
    x->g = g;
    x->world = g_new(int, g);
    for (int i = 0; i < g; i++) x->world[i] = world_rank(comm, coll_ring_rank(R, 0, i));
    x->at = g_new0(double, 2 * g * g);
    x->wire = g_new0(double, 2 * g * g);
    x->call = g_new0(guint64, 2 * g * g);
    x->sem = g_new(sg_sem_t, g);
    for (int i = 0; i < g; i++) x->sem[i] = sg_sem_init(0);
    x->asleep = g_new0(guint64, g);
    g_hash_table_insert(node_groups, GINT_TO_POINTER(first + 1), x);
  }
  pc->grp = x;
  pc->pos = R->me[0];
}

/* When a message of `bytes` from world rank a to b, started at `t`, ends alone on its route:
 * SimGrid's order of operations. */
static double alone_end(int a, int b, double bytes, double t) {
  const double *r = route_of(a, b);
  return (t + r[0] * plat_factor_at(&lat_factor, bytes)) +
         bytes / (r[1] * plat_factor_at(&bw_factor, bytes));
}

/* The ring phase of the caller's group computed: it sends `wire` bytes to its right neighbour.
 * Returns how long from now its message and its left neighbour's would still take, s. */
static double node_phase_run(private_comm *pc, double wire) {
  node_group *x = pc->grp;
  const int g = x->g, pos = pc->pos, lp = coll_mod(pos - 1, g), rp = coll_mod(pos + 1, g);
  const guint64 call = pc->calls++;
  const int slot = (int)(call % (guint64)(2 * g)) * g;
  x->at[slot + pos] = simgrid_get_clock();
  x->wire[slot + pos] = wire;
  x->call[slot + pos] = call + 1;
  for (int n = 0; n < 2; n++) { /* wake a neighbour waiting for this member */
    const int q = n ? rp : lp;
    if (x->asleep[q] == call + 1) {
      x->asleep[q] = 0;
      sg_sem_release(x->sem[q]);
    }
  }
  /* ranks of a group usually arrive at one simulated time, one after the other: let the others
   * of this round run first, and block only when a neighbour is still not there */
  for (int tries = 0; x->call[slot + lp] != call + 1 || x->call[slot + rp] != call + 1; tries++) {
    if (tries == 0) {
      sg_actor_yield();
      continue;
    }
    x->asleep[pos] = call + 1;
    sg_sem_acquire(x->sem[pos]);
  }
  const int me = x->world[pos];
  const double sent = alone_end(me, x->world[rp], wire, MAX(x->at[slot + pos], x->at[slot + rp]));
  const double got = alone_end(x->world[lp], me, x->wire[slot + lp],
                               MAX(x->at[slot + lp], x->at[slot + pos]));
  return MAX(sent, got) - simgrid_get_clock();
}

int coll_ring_phase(const coll_rings *R, int steps, const size_t *bytes, size_t n_bytes,
                    MPI_Comm comm) {
  /* every rank of the ring must decide alike: from what they share (steps, n_bytes) */
  if (steps < 2 || n_bytes == 0) return 0;
  /* the protocol puts more bytes on the wire than the data (nccl.h) */
  double widen = 1;
  for (int intra = 0; intra < 2; intra++)
    widen = MAX(widen, nccl_wire_bytes(&R->nc, intra, 1.0));
  if (!may_bundle(floor((double)n_bytes / R->k / (steps + 2)) - 8, 2.0 * widen * (double)n_bytes))
    return 0;
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  size_t wire[COLL_MAX_RINGS], in[COLL_MAX_RINGS];
  int right[COLL_MAX_RINGS], left[COLL_MAX_RINGS];
  for (int j = 0; j < R->k; j++) {
    right[j] = coll_ring_rank(R, j, R->me[j] + 1);
    left[j] = coll_ring_rank(R, j, R->me[j] - 1);
    /* a rank whose chunks all round to nothing still takes part */
    const double b = (double)(bytes[j] ? bytes[j] : 1);
    wire[j] = (size_t)(nccl_wire_bytes(&R->nc, coll_ring_intra(R, R->rank, right[j]), b) + 0.5);
    in[j] = (size_t)(nccl_wire_bytes(&R->nc, coll_ring_intra(R, left[j], R->rank), b) + 0.5);
  }
  int size;
  MPI_Comm_size(comm, &size);
  private_comm *pc = R->k == 1 && !R->members && R->g == size ? private_find(me, comm) : NULL;
  double wait = 0, chunk_max = 0, ends = 0;
  for (int j = 0; j < R->k; j++) { /* every ring's latencies, folded or not */
    const int wr = world_rank(comm, right[j]);
    g_assert(wr >= 0 && wr < n_ranks && host_of_rank[wr]); /* every rank registered at start */
    const double chunk = (double)wire[j] / steps;
    wait = MAX(wait, bundled_wait(route_latency(me, wr), steps, chunk, (double)wire[j]));
    chunk_max = MAX(chunk_max, chunk);
  }
  if (pc) { /* inside a node whose links are the group's alone: computed, not sent */
    if (!pc->grp) private_setup(pc, R, comm);
    ends = node_phase_run(pc, (double)wire[0]);
  } else {
    /* what a left neighbour sends may differ from this rank's bytes by the rounding of chunks;
     * a message past MPI's int count goes as np pieces, as many on both sides: np follows from
     * what the ring shares (a ring's wire bytes are at most 2 widen n_bytes: an all-reduce's
     * two phases as one). Payload-free messages carry nothing, so every piece goes from, and
     * into, the same scratch; only the rings that send (folded: ring 0) post. */
    const size_t slack = 64, most = (size_t)INT_MAX - 2 * slack,
                 np = MAX(1, (size_t)ceil(2.0 * widen * (double)n_bytes / (double)most));
    size_t out_most = 0, in_most = 0;
    for (int j = 0; j < R->kr; j++) {
      out_most = MAX(out_most, wire[j] / np + 1);
      in_most = MAX(in_most, in[j] / np + 1 + slack);
    }
    char *buf = coll_buf_alloc(out_most + in_most);
    MPI_Request *q = g_new(MPI_Request, 2 * (size_t)R->kr * np);
    int m = 0;
    for (int j = 0; j < R->kr; j++)
      for (size_t i = 0; i < np; i++) {
        MPI_Irecv(buf + out_most, (int)(coll_chunk_len(in[j], (int)np, (int)i) + slack), MPI_BYTE,
                  left[j], TAG_PHASE + j, comm, &q[m++]);
        MPI_Isend(buf, (int)coll_chunk_len(wire[j], (int)np, (int)i), MPI_BYTE, right[j],
                  TAG_PHASE + j, comm, &q[m++]);
      }
    MPI_Waitall(m, q, MPI_STATUSES_IGNORE);
    g_free(q);
    coll_buf_free(buf);
    if (R->kr < R->k) coll_fold_sync(comm, R->rank - R->rank % R->rpn, R->rpn);
  }
  /* NCCL's latency of the call, where it exceeds the routes' (every step waiting for the
   * ring's slowest hop) */
  const double routes = R->nc.proto >= 0 ? steps * ring_latency(R, comm) *
                                               plat_factor_at(&lat_factor, chunk_max) : 0;
  hold(me, MAX(ends, 0) + MAX(wait, 0) + MAX(0, R->nc.proto >= 0 ? R->nc.lat_s - routes : 0));
  return 1;
}

void coll_ring_settle(const coll_rings *R, int steps, double chunk_bytes, MPI_Comm comm) {
  if (R->nc.proto < 0 || !host_of_rank || coll_real_data) return;
  read_factors();
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const double wire = nccl_wire_bytes(&R->nc, 1, chunk_bytes);
  const double routes = steps * ring_latency(R, comm) * plat_factor_at(&lat_factor, wire);
  hold(me, R->nc.lat_s - routes);
}

void coll_tree_settle(const nccl_call *nc, int P, int rpn, int steps, double chunk_bytes,
                      MPI_Comm comm) {
  if (nc->proto < 0 || !host_of_rank || coll_real_data || P < 2) return;
  read_factors();
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  /* the route latency the closed form charges a tree: the slowest hop of the group's rings
   * (coll_ring_channels) at every chunk time */
  const coll_rings ring = {.k = coll_ring_channels(P, rpn), .g = P, .rpn = rpn};
  hold(me, nc->lat_s - steps * ring_latency(&ring, comm) * plat_factor_at(&lat_factor, chunk_bytes));
}

/* A node's ranks meeting at a folded collective: the last to arrive wakes the others (each
 * blocked on the semaphore, so each release hands one of them the token). */
typedef struct {
  int waiting;
  sg_sem_t sem;
} fold_meet;

void coll_fold_sync(MPI_Comm comm, int first, int size) {
  static GHashTable *meets; /* world rank of the node's first member + 1 -> fold_meet */
  if (size < 2) return;
  if (!meets) meets = g_hash_table_new(g_direct_hash, g_direct_equal);
  const gpointer key = GINT_TO_POINTER(world_rank(comm, first) + 1);
  fold_meet *m = g_hash_table_lookup(meets, key);
  if (!m) {
    m = g_new0(fold_meet, 1);
    m->sem = sg_sem_init(0);
    g_hash_table_insert(meets, key, m);
  }
  if (++m->waiting < size) {
    sg_sem_acquire(m->sem);
    return;
  }
  m->waiting = 0;
  for (int i = 1; i < size; i++) sg_sem_release(m->sem);
}

int coll_tree_bulk(double chunk_bytes, double whole_bytes) {
  return may_bundle(floor(chunk_bytes) - 8, ceil(whole_bytes) + 64);
}

void coll_tree_hold(const int *peers, int n, int steps, double chunk_bytes, double whole_bytes,
                    MPI_Comm comm) {
  if (!host_of_rank || coll_real_data || steps < 2) return;
  read_factors();
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  double lat = 0;
  for (int i = 0; i < n; i++) lat = MAX(lat, route_latency(me, world_rank(comm, peers[i])));
  hold(me, bundled_wait(lat, steps, chunk_bytes, whole_bytes));
}

void smpi_phase_defer(int rank) {
  may_defer[rank] = TRUE;
  deferred[rank] = 0;
}

double smpi_phase_deferred(int rank) {
  const double d = deferred[rank];
  may_defer[rank] = FALSE;
  deferred[rank] = 0;
  return d;
}
