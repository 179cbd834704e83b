/* costmodel.c — alpha-beta collective costs (formulas in costmodel.h). */
#include "coll/cost.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"

#define BCAST_CHUNKS 8 /* pipelined ring broadcast: chunks of n/8 */

static double clog2(int P) { return P > 1 ? ceil(log2((double)P)) : 0.0; }

gboolean cm_group_init(cm_group *g, const plat *pl, const int *members, int n, GError **err) {
  memset(g, 0, sizeof *g);
  g->P = n;
  g->ring_beta_bps = INFINITY;
  g->intra_beta_bps = INFINITY;
  g->inter_beta_bps = INFINITY;
  if (n < 1) return TRUE;
  GHashTable *per = g_hash_table_new(g_direct_hash, g_direct_equal);
  plat_route_info r;
  for (int i = 0; i < n; i++) {
    const plat_host *h = plat_host_at(pl, members[i]);
    int cnt = GPOINTER_TO_INT(g_hash_table_lookup(per, GINT_TO_POINTER(h->node + 1))) + 1;
    g_hash_table_insert(per, GINT_TO_POINTER(h->node + 1), GINT_TO_POINTER(cnt));
    if (cnt > g->per_node) g->per_node = cnt;
    if (n > 1) {
      if (!plat_route(pl, members[i], members[(i + 1) % n], &r, err)) goto fail;
      if (r.latency_s > g->ring_alpha_s) g->ring_alpha_s = r.latency_s;
      if (r.bottleneck_bps < g->ring_beta_bps) g->ring_beta_bps = r.bottleneck_bps;
    }
  }
  g->nodes = (int)g_hash_table_size(per);
  /* intra: first two members sharing a node; inter: member 0 and the first member on another
   * node with the same local GPU index (one rail), else any other node. */
  const plat_host *h0 = plat_host_at(pl, members[0]);
  int intra = -1, inter = -1, inter_any = -1;
  for (int i = 1; i < n; i++) {
    const plat_host *h = plat_host_at(pl, members[i]);
    if (h->node == h0->node && intra < 0) intra = i;
    if (h->node != h0->node && inter_any < 0) inter_any = i;
    if (h->node != h0->node && h->gpu == h0->gpu && inter < 0) inter = i;
  }
  if (inter < 0) inter = inter_any;
  if (intra > 0) {
    if (!plat_route(pl, members[0], members[intra], &r, err)) goto fail;
    g->intra_alpha_s = r.latency_s;
    g->intra_beta_bps = r.bottleneck_bps;
  }
  if (inter > 0) {
    if (!plat_route(pl, members[0], members[inter], &r, err)) goto fail;
    g->inter_alpha_s = r.latency_s;
    g->inter_beta_bps = r.bottleneck_bps;
  }
  g_hash_table_destroy(per);
  return TRUE;
fail:
  g_hash_table_destroy(per);
  return FALSE;
}

const char *cm_algo(coll_op op, const char *family, double bytes, const cm_group *g) {
  return coll_resolve(op, family, bytes, g->P, g->nodes);
}

static double ring_s(coll_op op, double n, int P, double a, double b) {
  if (P <= 1) return 0;
  switch (op) {
  case COLL_ALLREDUCE: return 2.0 * (P - 1) * (a + n / P / b);
  case COLL_ALLGATHER:
  case COLL_REDUCESCATTER:
  case COLL_ALLTOALL: return (P - 1) * (a + n / P / b);
  case COLL_BROADCAST: return (P - 1 + BCAST_CHUNKS - 1) * (a + n / BCAST_CHUNKS / b);
  default: break; /* sendrecv */
  }
  return 0;
}

double cm_coll_s(coll_op op, const char *algo, double n, const cm_group *g) {
  int P = g->P;
  if (P <= 1 || n <= 0) return 0;
  if (!algo) algo = cm_algo(op, NULL, n, g);
  double a = g->ring_alpha_s, b = g->ring_beta_bps;
  if (strcmp(algo, "rhd") == 0) {
    double lg = clog2(P), vol = (double)(P - 1) / P * n / b;
    switch (op) {
    case COLL_ALLREDUCE: return 2.0 * (a * lg + vol); /* Gholami et al. 2018, §2 */
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER: return a * lg + vol;     /* Bruck all-gather */
    case COLL_BROADCAST: return a * (lg + P - 1) + 2.0 * vol;
    default: return ring_s(op, n, P, a, b);
    }
  }
  if (strcmp(algo, "tree") == 0) {
    if (op == COLL_ALLREDUCE) return 2.0 * clog2(P) * a + 2.0 * n / b;
    if (op == COLL_BROADCAST) return clog2(P) * a + n / b;
    return ring_s(op, n, P, a, b);
  }
  if (strcmp(algo, "hier") == 0 && g->nodes > 1 && g->per_node > 1 && op != COLL_ALLTOALL &&
      op != COLL_BROADCAST) {
    int G = g->per_node, N = g->nodes;
    double ai = g->intra_alpha_s, bi = g->intra_beta_bps, ax = g->inter_alpha_s,
           bx = g->inter_beta_bps;
    switch (op) {
    case COLL_ALLREDUCE:
      return ring_s(COLL_REDUCESCATTER, n, G, ai, bi) + ring_s(COLL_ALLREDUCE, n / G, N, ax, bx) +
             ring_s(COLL_ALLGATHER, n, G, ai, bi);
    case COLL_ALLGATHER:
      return ring_s(COLL_ALLGATHER, n / G, N, ax, bx) + ring_s(COLL_ALLGATHER, n, G, ai, bi);
    case COLL_REDUCESCATTER:
      return ring_s(COLL_REDUCESCATTER, n, G, ai, bi) + ring_s(COLL_REDUCESCATTER, n / G, N, ax, bx);
    default: break;
    }
  }
  return ring_s(op, n, P, a, b);
}

double cm_coll_wire_bytes(coll_op op, const char *algo, double bytes, const cm_group *g) {
  coll_topo t;
  coll_topo_init(&t, 0, g->P, g->nodes > 1 ? g->per_node : g->P);
  return coll_wire_bytes(op, algo, bytes, g->P, &t);
}

double cm_alltoallv_s(const double *send, const double *recv, int me, const cm_group *g) {
  const int P = g->P;
  double t = 0;
  for (int s = 1; s < P; s++) {
    double out = send[(me + s) % P], in = recv[(me - s + P) % P];
    t += g->ring_alpha_s + (out > in ? out : in) / g->ring_beta_bps;
  }
  return t;
}
