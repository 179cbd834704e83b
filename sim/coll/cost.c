/* cost.c — wire bytes and alpha-beta costs of the collective algorithms (formulas in cost.h). */
#include "coll/cost.h"
#include "coll/nccl.h"

#include <glib.h>
#include <math.h>

static double clog2(int P) { return P > 1 ? ceil(log2((double)P)) : 0.0; }

/* ---- wire bytes ------------------------------------------------------------------------------ */

double coll_wire_ring(coll_op op, double n, int P, const coll_topo *topo) {
  (void)topo;
  if (P == 1) return op == COLL_SENDRECV ? n : 0;
  switch (op) {
  case COLL_ALLREDUCE: return 2.0 * (P - 1) * n / P;
  case COLL_SENDRECV: return n;
  default: return (P - 1) * n / P;
  }
}

double coll_wire_rhd(coll_op op, double n, int P, const coll_topo *topo) {
  if (P == 1) return coll_wire_ring(op, n, P, topo);
  const int p2 = coll_pow2_floor(P, NULL), rem = P - p2;
  if (op == COLL_ALLREDUCE) return (2.0 * rem * n + 2.0 * (p2 - 1) * n) / P;
  if (op == COLL_REDUCESCATTER) return (rem * n + (p2 - 1) * n + rem * n / P) / P;
  return coll_wire_ring(op, n, P, topo);
}

double coll_wire_hier(coll_op op, double n, int P, const coll_topo *topo) {
  const int rpn = topo ? topo->ranks_per_node : P, nodes = topo ? topo->n_nodes : 1;
  if (P == 1 || op != COLL_ALLREDUCE || rpn < 1 || rpn * nodes != P || rpn == 1 || nodes == 1)
    return coll_wire_ring(op, n, P, topo); /* falls back to the flat ring */
  return (2.0 * nodes * (rpn - 1) * n + 2.0 * (nodes - 1) * n) / P;
}

/* ---- alpha-beta times ------------------------------------------------------------------------ */

/* One message of `s` bytes on a route of latency `a` and bandwidth `b`, with the group's
 * per-message factors (SimGrid's smpi/lat-factor and smpi/bw-factor). */
static double msg_s(const coll_group *g, double a, double b, double s) {
  double lat, xfer;
  plat_msg_times(g->lat_factor, g->bw_factor, a, b, s, &lat, &xfer);
  return lat + xfer;
}

/* A ring of P members: every step sends one message of n/P bytes (n for sendrecv) to the next
 * member. */
static double ring_s(coll_op op, double n, int P, double a, double b, const coll_group *g) {
  if (P <= 1) return 0;
  switch (op) {
  case COLL_ALLREDUCE: return 2.0 * (P - 1) * msg_s(g, a, b, n / P);
  case COLL_ALLGATHER:
  case COLL_REDUCESCATTER:
  case COLL_ALLTOALL: return (P - 1) * msg_s(g, a, b, n / P);
  case COLL_SENDRECV: return msg_s(g, a, b, n);
  default: return 0;
  }
}

/* The ring collectives on the group's chan_k rings at once (coll.h), under NCCL's protocol
 * model when the group has one (coll/nccl.h): each of the `steps` steps moves a chunk of
 * n / (P k) on every ring, put on the wire as the protocol does, its time set by the slower of
 * a hop inside a node and one between nodes; the latency of the call is the larger of NCCL's
 * and the routes'. */
static double channels_s(coll_op op, double n, const coll_group *g) {
  const int P = g->P, k = g->chan_k > 0 ? g->chan_k : 1;
  const int steps = op == COLL_ALLREDUCE ? 2 * (P - 1) : P - 1;
  nccl_call nc;
  nccl_plan(&nc, g->nccl, op, "ring", n, P, g->nodes);
  const double c = n / P / k;
  double lat = 0, xfer = 0;
  for (int intra = 0; intra < 2; intra++) {
    const double b = intra ? g->chan_intra_beta_bps : g->chan_inter_beta_bps;
    if (!isfinite(b)) continue;
    double l, x;
    plat_msg_times(g->lat_factor, g->bw_factor, g->chan_alpha_s, b, nccl_wire_bytes(&nc, intra, c),
                   &l, &x);
    lat = MAX(lat, l);
    xfer = MAX(xfer, x);
  }
  return MAX(steps * lat, nc.proto >= 0 ? nc.lat_s : 0) + steps * xfer;
}

/* The ring broadcast's chain (ring.c) of H = P-1 hops pipelines k chunks of
 * COLL_PIPE_CHUNK_BYTES, the last one c_k: a member forwards a chunk once it has arrived and
 * its chunk before has left. In stage j (0 .. k+H-2) hop h carries chunk j - h where there is
 * one, all busy hops at once, so a stage takes what its slowest hop takes with the flows of
 * that stage sharing the links: the busy hops are the first ones while the pipeline fills, all
 * of them (k >= H) or k consecutive ones in between, the last ones while it drains (coll.h says
 * which windows a long chain has summarised). On hops alike and unshared that is (k + H - 1)
 * chunk times, the last one c_k's. */
static double chain_s(double n, const coll_group *g) {
  const int H = g->P - 1;
  const double C = COLL_PIPE_CHUNK_BYTES, k = MAX(1.0, ceil(n / C));
  if (!g->chain_alpha_s) { /* not summarised: the ring's step for every hop */
    if (k <= 1) return H * msg_s(g, g->ring_alpha_s, g->ring_beta_bps, n);
    return (k + H - 2) * msg_s(g, g->ring_alpha_s, g->ring_beta_bps, C) +
           msg_s(g, g->ring_alpha_s, g->ring_beta_bps, n - (k - 1) * C);
  }
  const double last = n - (k - 1) * C;
  double t = 0;
  for (double j = 0; j <= k + H - 2; j++) {
    /* busy hops lo .. hi: chunk j - h exists for 0 <= j - h <= k - 1 */
    const int lo = (int)MAX(0.0, j - k + 1), hi = (int)MIN((double)H - 1, j);
    const size_t w = coll_chain_window(H, lo, hi);
    const double a = g->chain_alpha_s[w], b = g->chain_beta_bps[w];
    /* the stage's largest chunk: a full one unless only the last chunk is on the way */
    t += msg_s(g, a, b, lo == hi && j - lo == k - 1 ? last : (k <= 1 ? n : C));
    if (k > H + 1 && j == H - 1) { /* every stage until the drain is alike: all hops busy */
      const double full = k - H - 1;
      const size_t all = coll_chain_window(H, 0, H - 1);
      t += full * msg_s(g, g->chain_alpha_s[all], g->chain_beta_bps[all], C);
      j += full;
    }
  }
  return t;
}

/* Step s of the pairwise exchanges: its route latency and rate (the ring's where not known). */
static void pair_step(const coll_group *g, int s, double *a, double *b) {
  *a = g->pair_alpha_s ? g->pair_alpha_s[s] : g->ring_alpha_s;
  *b = g->pair_beta_bps ? g->pair_beta_bps[s] : g->ring_beta_bps;
}

double coll_cost_ring(coll_op op, double n, const coll_group *g) {
  if (op == COLL_ALLREDUCE || op == COLL_ALLGATHER || op == COLL_REDUCESCATTER)
    return g->P > 1 ? channels_s(op, n, g) : 0;
  if (op == COLL_ALLTOALL && g->pair_alpha_s) { /* pairwise: step s on its own routes */
    double t = 0, a, b;
    for (int s = 1; s < g->P; s++) {
      pair_step(g, s, &a, &b);
      t += msg_s(g, a, b, n / g->P);
    }
    return t;
  }
  if (op == COLL_BROADCAST) return g->P > 1 ? chain_s(n, g) : 0;
  return ring_s(op, n, g->P, g->ring_alpha_s, g->ring_beta_bps, g);
}

/* coll/rhd.c step by step, each step on its routes with its flows sharing the links (coll.h):
 * Rabenseifner's all-reduce folds the ranks past p2 (n bytes), halves (n m / p2 at mask m),
 * doubles back and unfolds; the reduce-scatter folds, halves and hands the odd ranks' blocks
 * back (n / P); Bruck's all-gather sends min(d, P - d) blocks of n / P at distance d. */
static double rhd_steps_s(coll_op op, double n, const coll_group *g) {
  const int P = g->P;
  int lg;
  const int p2 = coll_pow2_floor(P, &lg), rem = P - p2, up = (lg + 1) * P;
  double t = 0;
  if (op == COLL_ALLGATHER) {
    for (int d = 1, k = 0; d < P; d *= 2, k++) {
      double step = 0;
      for (int r = 0; r < P; r++)
        step = MAX(step, msg_s(g, g->bruck_alpha_s[k * P + r], g->bruck_beta_bps[k * P + r],
                               MIN(d, P - d) * (n / P)));
      t += step;
    }
    return t;
  }
  for (int m = 1, k = 1; m < p2; m *= 2, k++) {
    double step = 0;
    for (int v = 0; v < p2; v++) { /* v sends the half it does not keep */
      const int at = k * P + v;
      step = op == COLL_REDUCESCATTER
                 ? MAX(step, msg_s(g, g->rhd_alpha_s[at], g->rs_beta_bps[at],
                                   coll_rhd_rs_blocks(v, m, rem) * (n / P)))
                 : MAX(step, msg_s(g, g->rhd_alpha_s[at], g->rhd_beta_bps[at], n * m / p2));
    }
    t += step;
  }
  /* the whole input to the odd neighbour; back the other way, the result (all-reduce) or the
   * even rank's block (reduce-scatter) */
  double fold = 0, back = 0;
  for (int i = 0; i < rem; i++) {
    fold = MAX(fold, msg_s(g, g->rhd_alpha_s[i], g->rhd_beta_bps[i], n));
    back = MAX(back, msg_s(g, g->rhd_alpha_s[up + i], g->rhd_beta_bps[up + i],
                           op == COLL_ALLREDUCE ? n : n / P));
  }
  if (op == COLL_ALLREDUCE) return fold + 2 * t + back;
  return fold + t + back;
}

double coll_cost_rhd(coll_op op, double n, const coll_group *g) {
  const int P = g->P;
  if (g->rhd_alpha_s && P > 1 &&
      (op == COLL_ALLREDUCE || op == COLL_ALLGATHER || op == COLL_REDUCESCATTER))
    return rhd_steps_s(op, n, g);
  const double a = g->ring_alpha_s, lg = clog2(P), vol = (double)(P - 1) / P * n / g->ring_beta_bps;
  if ((g->bw_factor || g->lat_factor) &&
      (op == COLL_ALLREDUCE || op == COLL_ALLGATHER || op == COLL_REDUCESCATTER)) {
    /* per-message factors: the halving steps one by one, n/2, n/4, ... of the buffer, their
     * bytes scaled to the (P-1)/P·n the formula below moves (the same time with factors 1) */
    double sum = 0, t = 0, s = n;
    for (int k = 0; k < (int)lg; k++) sum += (s /= 2);
    s = n;
    for (int k = 0; k < (int)lg; k++) {
      double l, x;
      plat_msg_times(g->lat_factor, g->bw_factor, a, g->ring_beta_bps, s /= 2, &l, &x);
      t += l + x * (P - 1) / P * n / sum;
    }
    return op == COLL_ALLREDUCE ? 2.0 * t : t;
  }
  if (op == COLL_ALLREDUCE) return 2.0 * (a * lg + vol); /* Gholami et al. 2018, §2 */
  if (op == COLL_ALLGATHER || op == COLL_REDUCESCATTER) return a * lg + vol; /* Bruck */
  return coll_cost_ring(op, n, g);
}

/* A chunk of w bytes on a tree edge of route latency a: its latency and time on the wire at the
 * first chunk's rate (lvl) into *l and *t; the largest of each at the pipeline's rate (all)
 * kept in *a_max and *t_max. */
static void edge_times(const coll_group *g, double a, double lvl, double all, double w,
                       double *l, double *t, double *a_max, double *t_max) {
  double la, ta;
  plat_msg_times(g->lat_factor, g->bw_factor, a, lvl, w, l, t);
  plat_msg_times(g->lat_factor, g->bw_factor, a, all, w, &la, &ta);
  *a_max = MAX(*a_max, la), *t_max = MAX(*t_max, ta);
}

/* The all-reduce's trees where every member is a node of its own, each edge on its route
 * (coll_group's tree_*): the first chunk of each of the two pipelines climbs to its root, a
 * parent sending up once every child's chunk is in, and comes down, each edge at its rate with
 * the edges of its depth on at once; that path, the longest of the two trees, is the fill; the
 * other chunks follow at the slowest edge's rate with every edge of both trees, both ways, on at
 * once (reduction and broadcast overlap in the pipeline). */
static double tree_routes_s(const coll_group *g, const nccl_call *nc, double part, double c) {
  const int P = g->P;
  const double w = nccl_wire_bytes(nc, 0, c), chunks = ceil(part / c);
  double *up_a = g_new0(double, 2 * (size_t)P), *up_t = g_new0(double, 2 * (size_t)P);
  double crit_a = 0, crit_t = 0, a_max = 0, t_max = 0;
  for (int t = 0; t < 2; t++) {
    const int at = t * P;
    /* up, deepest first: a node's chunk is in when its slowest child's is */
    int deepest = 0;
    for (int x = 0; x < P; x++) deepest = MAX(deepest, g->tree_depth[at + x]);
    for (int d = deepest; d >= 1; d--)
      for (int x = 0; x < P; x++) {
        if (g->tree_depth[at + x] != d) continue;
        double l, tt;
        edge_times(g, g->tree_up_alpha_s[at + x], g->tree_up_lvl_bps[at + x],
                   g->tree_up_all_bps[at + x], w, &l, &tt, &a_max, &t_max);
        int up, d0, d1;
        coll_tree_node(P, t, x, &up, &d0, &d1);
        const double a = up_a[at + x] + l, tx = up_t[at + x] + tt;
        if (a + tx > up_a[at + up] + up_t[at + up]) up_a[at + up] = a, up_t[at + up] = tx;
      }
    /* down, from the root: each node's chunk arrives after its parent's */
    double *dn_a = g_new0(double, P), *dn_t = g_new0(double, P);
    int root = 0;
    for (int x = 0; x < P; x++)
      if (g->tree_depth[at + x] == 0) root = x;
    dn_a[root] = up_a[at + root], dn_t[root] = up_t[at + root];
    for (int d = 1; d <= deepest; d++)
      for (int x = 0; x < P; x++) {
        if (g->tree_depth[at + x] != d) continue;
        int up, d0, d1;
        coll_tree_node(P, t, x, &up, &d0, &d1);
        double l, tt;
        edge_times(g, g->tree_down_alpha_s[at + x], g->tree_down_lvl_bps[at + x],
                   g->tree_down_all_bps[at + x], w, &l, &tt, &a_max, &t_max);
        dn_a[x] = dn_a[up] + l, dn_t[x] = dn_t[up] + tt;
      }
    for (int x = 0; x < P; x++)
      if (dn_a[x] + dn_t[x] > crit_a + crit_t) crit_a = dn_a[x], crit_t = dn_t[x];
    g_free(dn_a);
    g_free(dn_t);
  }
  g_free(up_a);
  g_free(up_t);
  return MAX(crit_a + (chunks - 1) * a_max, nc->proto >= 0 ? nc->lat_s : 0) + crit_t +
         (part / c - 1) * t_max;
}

/* The trees as the executors build them (coll.h, coll/tree.c): 2k pipelines of n / (2k) each,
 * in C chunks; a chunk climbs D = coll_tree_depth hops up, L - 1 of them inside a node, and D
 * down (all-reduce). The first chunk is home after every hop's chunk time, the others follow at
 * the slowest hop's. A link's bandwidth is what the channel rings see times their flows on it
 * (coll_tree_flows); of the trees' flows on it, a share C / (C + 2D - 1) is on at once (each is
 * busy for C of the C + 2D - 1 chunk times; the channels' chains start at different GPUs, so
 * the busy times of one link's flows are spread over the call; one node's single chain has its
 * two pipelines in step). The broadcast (k = 1, both halves down one tree) shares a link
 * between its two halves. Under NCCL's model (coll/nccl.h) the chunks are widened as the
 * protocol puts them on the wire, and NCCL's latency counts where larger than the routes'. */
double coll_cost_tree(coll_op op, double n, const coll_group *g) {
  if (op != COLL_ALLREDUCE && op != COLL_BROADCAST) return coll_cost_ring(op, n, g);
  const int P = g->P, ar = op == COLL_ALLREDUCE;
  if (P < 2 || !(n > 0)) return 0;
  if (ar && g->tree_up_alpha_s && g->nodes == P) {
    nccl_call nc;
    nccl_plan(&nc, g->nccl, op, "tree", n, P, g->nodes);
    const double part = n / 2.0; /* one channel: the two trees' pipelines */
    return tree_routes_s(g, &nc, part, MIN(part, (double)COLL_PIPE_CHUNK_BYTES));
  }
  const int rpn = g->chan_k > 1 ? g->per_node : g->nodes <= 1 ? P : 1;
  const int k = ar ? MAX(1, g->chan_k) : 1, depth = coll_tree_depth(P, rpn);
  const double hops = (ar ? 2 : 1) * depth, part = n / (2.0 * k);
  const double c = MIN(part, (double)COLL_PIPE_CHUNK_BYTES), chunks = ceil(part / c);
  /* hops of a chunk's way across nodes [0] and inside one [1] */
  const double path[2] = {hops / depth * (depth - (rpn - 1)), hops / depth * (rpn - 1)};
  double tree[2] = {2, 2}, ring[2] = {1, 1};
  if (ar) coll_tree_flows(P, rpn, tree, ring);
  /* the share of a link's flows on at once (all of them on one node's chain) */
  const double on = rpn < P ? chunks / (chunks + hops - 1) : 1;
  nccl_call nc;
  nccl_plan(&nc, g->nccl, op, "tree", n, P, g->nodes);
  double lat = 0, slowest = 0, fill = 0;
  for (int x = 0; x < 2; x++) {
    const double b = ar ? (x ? g->chan_intra_beta_bps : g->chan_inter_beta_bps) : g->ring_beta_bps;
    if (!isfinite(b) || !(path[x] > 0)) continue;
    double l, t;
    plat_msg_times(g->lat_factor, g->bw_factor, ar ? g->chan_alpha_s : g->ring_alpha_s,
                   b * ring[x] / MAX(1.0, tree[x] * on), nccl_wire_bytes(&nc, x, c), &l, &t);
    lat = MAX(lat, l);
    slowest = MAX(slowest, t);
    fill += path[x] * t;
  }
  return MAX((hops + chunks - 1) * lat, nc.proto >= 0 ? nc.lat_s : 0) + fill +
         (part / c - 1) * slowest;
}

double coll_cost_hier(coll_op op, double n, const coll_group *g) {
  if (op != COLL_ALLREDUCE || g->nodes <= 1 || g->per_node <= 1) return coll_cost_ring(op, n, g);
  const int G = g->per_node, N = g->nodes;
  return ring_s(COLL_REDUCESCATTER, n, G, g->intra_alpha_s, g->intra_beta_bps, g) +
         ring_s(COLL_ALLREDUCE, n / G, N, g->inter_alpha_s, g->inter_beta_bps, g) +
         ring_s(COLL_ALLGATHER, n, G, g->intra_alpha_s, g->intra_beta_bps, g);
}

double coll_cost_s(coll_op op, const char *algo, double n, const coll_group *g) {
  if (g->P <= 1 || n <= 0) return 0;
  const coll_algo_info *a = coll_info_find(op, algo ? algo : coll_resolve(op, NULL, n, g->P, g->nodes,
                                                                           g->nccl));
  return a ? a->cost(op, n, g) : coll_cost_ring(op, n, g);
}

double coll_group_wire_bytes(coll_op op, const char *algo, double bytes, const coll_group *g) {
  coll_topo t;
  coll_topo_init(&t, 0, g->P, g->nodes > 1 ? g->per_node : g->P);
  return coll_wire_bytes(op, algo, bytes, g->P, &t);
}

double coll_cost_alltoallv_s(const double *send, const double *recv, int me, const coll_group *g) {
  const int P = g->P;
  double t = 0;
  for (int s = 1; s < P; s++) {
    double out = send[(me + s) % P], in = recv[(me - s + P) % P], a, b;
    pair_step(g, s, &a, &b);
    t += msg_s(g, a, b, out > in ? out : in);
  }
  return t;
}
