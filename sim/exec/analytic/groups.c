/* groups.c — a group of platform hosts summarised for the cost formulas (coll_group): the flows
 * of one step of its ring, of the ring collectives' concurrent rings (NCCL's channels), of its
 * rings inside nodes and of its rings across nodes, each set
 * sharing the links as SimGrid would share them (plat_flows). */
#include "exec/analytic/analytic.h"

#include <math.h>
#include <string.h>

/* The step of flows src[i] -> dst[i]: its latency and slowest rate into *alpha and *beta. */
static gboolean step(const plat *pl, const int *src, const int *dst, int n, double *alpha,
                     double *beta, GError **err) {
  plat_flow_info f;
  if (!plat_flows(pl, src, dst, n, &f, err)) return FALSE;
  *alpha = f.latency_s;
  *beta = f.rate_bps;
  return TRUE;
}

gboolean analytic_group_pairwise(coll_group *g, const plat *pl, const int *members, int n,
                                 GError **err) {
  if (g->pair_alpha_s || n < 2) return TRUE;
  g->pair_alpha_s = g_new0(double, n);
  g->pair_beta_bps = g_new0(double, n);
  int *src = g_new(int, n), *dst = g_new(int, n);
  gboolean ok = TRUE;
  for (int s = 1; ok && s < n; s++) {
    for (int i = 0; i < n; i++) src[i] = members[i], dst[i] = members[(i + s) % n];
    ok = step(pl, src, dst, n, &g->pair_alpha_s[s], &g->pair_beta_bps[s], err);
  }
  g_free(src);
  g_free(dst);
  if (!ok) analytic_group_clear(g); /* asked again, it fails again rather than read zeros */
  return ok;
}

gboolean analytic_group_chain(coll_group *g, const plat *pl, const int *members, int n,
                              GError **err) {
  if (g->chain_alpha_s || n < 2) return TRUE;
  const int H = n - 1, every = H <= COLL_CHAIN_WINDOWS_MAX;
  g->chain_alpha_s = g_new0(double, coll_chain_cells(H));
  g->chain_beta_bps = g_new0(double, coll_chain_cells(H));
  gboolean ok = TRUE;
  for (int lo = 0; ok && lo < H; lo++)
    for (int hi = lo; ok && hi < H; hi++)
      if (every || lo == 0 || hi == H - 1 || lo == hi) {
        const size_t w = coll_chain_window(H, lo, hi);
        ok = step(pl, members + lo, members + lo + 1, hi - lo + 1, &g->chain_alpha_s[w],
                  &g->chain_beta_bps[w], err);
      }
  if (!ok) analytic_group_clear(g);
  return ok;
}

gboolean analytic_group_rhd(coll_group *g, const plat *pl, const int *members, int n,
                            GError **err) {
  if (g->rhd_alpha_s || n < 2) return TRUE;
  int lg;
  const int p2 = coll_pow2_floor(n, &lg), rem = n - p2;
  const size_t cells = (size_t)(lg + 2) * n;
  g->rhd_alpha_s = g_new0(double, cells);
  g->rhd_beta_bps = g_new0(double, cells);
  g->rs_beta_bps = g_new0(double, cells);
  g->bruck_alpha_s = g_new0(double, cells);
  g->bruck_beta_bps = g_new0(double, cells);
  int *src = g_new(int, n), *dst = g_new(int, n);
  double *bytes = g_new(double, n);
  gboolean ok = TRUE;
  for (int i = 0; i < rem; i++) src[i] = members[2 * i], dst[i] = members[2 * i + 1];
  if (rem) ok = plat_flows_each(pl, src, dst, rem, g->rhd_beta_bps, g->rhd_alpha_s, err);
  for (int m = 1, k = 1; ok && m < p2; m *= 2, k++) { /* both ways: a Sendrecv */
    for (int v = 0; v < p2; v++) {
      src[v] = members[coll_rhd_real(v, rem)], dst[v] = members[coll_rhd_real(v ^ m, rem)];
    }
    ok = plat_flows_each(pl, src, dst, p2, g->rhd_beta_bps + (size_t)k * n,
                         g->rhd_alpha_s + (size_t)k * n, err);
    for (int v = 0; v < p2; v++) bytes[v] = coll_rhd_rs_blocks(v, m, rem);
    if (ok && rem) /* the reduce-scatter's halves, unequal where ranks folded */
      ok = plat_flows_bytes(pl, src, dst, bytes, p2, g->rs_beta_bps + (size_t)k * n, NULL, err);
    else if (ok)
      memcpy(g->rs_beta_bps + (size_t)k * n, g->rhd_beta_bps + (size_t)k * n,
             sizeof(double) * (size_t)p2);
  }
  for (int i = 0; i < rem; i++) src[i] = members[2 * i + 1], dst[i] = members[2 * i];
  if (ok && rem)
    ok = plat_flows_each(pl, src, dst, rem, g->rhd_beta_bps + (size_t)(lg + 1) * n,
                         g->rhd_alpha_s + (size_t)(lg + 1) * n, err);
  for (int d = 1, k = 0; ok && d < n; d *= 2, k++) {
    for (int r = 0; r < n; r++) src[r] = members[r], dst[r] = members[(r - d % n + n) % n];
    ok = plat_flows_each(pl, src, dst, n, g->bruck_beta_bps + (size_t)k * n,
                         g->bruck_alpha_s + (size_t)k * n, err);
  }
  g_free(src);
  g_free(dst);
  g_free(bytes);
  if (!ok) analytic_group_clear(g);
  return ok;
}

gboolean analytic_group_tree(coll_group *g, const plat *pl, const int *members, int n,
                             GError **err) {
  if (g->tree_up_alpha_s || n < 2) return TRUE;
  const size_t cells = 2 * (size_t)n;
  double **arr[] = {&g->tree_up_alpha_s, &g->tree_down_alpha_s, &g->tree_up_lvl_bps,
                    &g->tree_down_lvl_bps, &g->tree_up_all_bps, &g->tree_down_all_bps};
  for (size_t i = 0; i < G_N_ELEMENTS(arr); i++) *arr[i] = g_new0(double, cells);
  g->tree_depth = g_new0(int, cells);
  int *parent = g_new(int, cells), *src = g_new(int, 2 * cells), *dst = g_new(int, 2 * cells),
      *at = g_new(int, 2 * cells);
  double *rate = g_new(double, 2 * cells), *lat = g_new(double, 2 * cells);
  int deepest = 0;
  for (int t = 0; t < 2; t++)
    for (int x = 0; x < n; x++) {
      int d0, d1;
      coll_tree_node(n, t, x, &parent[t * n + x], &d0, &d1);
    }
  for (size_t e = 0; e < cells; e++) { /* depth: the hops up to the root */
    int d = 0;
    for (int y = (int)e % n, t = (int)e / n; parent[t * n + y] >= 0; y = parent[t * n + y]) d++;
    g->tree_depth[e] = d;
    deepest = MAX(deepest, d);
  }
  gboolean ok = TRUE;
  /* level d > 0: the edges below depth-d nodes' parents, in one direction (0 up, child to
   * parent; 1 down), of both trees at once; level 0: every edge, both ways, at once */
  for (int lvl = 0; ok && lvl <= deepest; lvl++)
    for (int dir = 0; ok && dir < (lvl ? 2 : 1); dir++) {
      int m = 0;
      for (int both = 0; both < (lvl ? 1 : 2); both++)
        for (size_t e = 0; e < cells; e++) {
          const int x = (int)e % n, up = parent[e], d = lvl ? dir : both;
          if (up < 0 || (lvl > 0 && g->tree_depth[e] != lvl)) continue;
          src[m] = members[d ? up : x], dst[m] = members[d ? x : up], at[m++] = (int)e;
        }
      if (m == 0) continue;
      ok = plat_flows_each(pl, src, dst, m, rate, lat, err);
      for (int f = 0; ok && f < m; f++) {
        const int down = lvl ? dir : f >= m / 2;
        (down ? g->tree_down_alpha_s : g->tree_up_alpha_s)[at[f]] = lat[f];
        (lvl ? (down ? g->tree_down_lvl_bps : g->tree_up_lvl_bps)
             : (down ? g->tree_down_all_bps : g->tree_up_all_bps))[at[f]] = rate[f];
      }
    }
  g_free(parent);
  g_free(src);
  g_free(dst);
  g_free(at);
  g_free(rate);
  g_free(lat);
  if (!ok) analytic_group_clear(g);
  return ok;
}

void analytic_group_clear(coll_group *g) {
  double **tree[] = {&g->tree_up_alpha_s, &g->tree_down_alpha_s, &g->tree_up_lvl_bps,
                     &g->tree_down_lvl_bps, &g->tree_up_all_bps, &g->tree_down_all_bps};
  for (size_t i = 0; i < G_N_ELEMENTS(tree); i++) g_clear_pointer(tree[i], g_free);
  g_clear_pointer(&g->tree_depth, g_free);
  g_free(g->pair_alpha_s);
  g_free(g->pair_beta_bps);
  g_free(g->chain_alpha_s);
  g_free(g->chain_beta_bps);
  g_free(g->rhd_alpha_s);
  g_free(g->rhd_beta_bps);
  g_free(g->rs_beta_bps);
  g_free(g->bruck_alpha_s);
  g_free(g->bruck_beta_bps);
  g->pair_alpha_s = g->pair_beta_bps = g->chain_alpha_s = g->chain_beta_bps = NULL;
  g->rhd_alpha_s = g->rhd_beta_bps = g->rs_beta_bps = g->bruck_alpha_s = g->bruck_beta_bps = NULL;
}

gboolean analytic_group_init(coll_group *g, const plat *pl, const int *members, int n,
                             GError **err) {
  memset(g, 0, sizeof *g);
  g->P = n;
  g->ring_beta_bps = INFINITY;
  g->intra_beta_bps = INFINITY;
  g->inter_beta_bps = INFINITY;
  g->chan_k = 1;
  g->chan_intra_beta_bps = g->chan_inter_beta_bps = INFINITY;
  g->bw_factor = plat_bw_factor(pl);
  g->lat_factor = plat_lat_factor(pl);
  if (n < 1) return TRUE;
  GHashTable *per = g_hash_table_new(g_direct_hash, g_direct_equal);
  for (int i = 0; i < n; i++) {
    const plat_host *h = plat_host_at(pl, members[i]);
    int cnt = GPOINTER_TO_INT(g_hash_table_lookup(per, GINT_TO_POINTER(h->node + 1))) + 1;
    g_hash_table_insert(per, GINT_TO_POINTER(h->node + 1), GINT_TO_POINTER(cnt));
    if (cnt > g->per_node) g->per_node = cnt;
  }
  g->nodes = (int)g_hash_table_size(per);
  g_hash_table_destroy(per);
  if (n < 2) return TRUE;
  const int rpn = g->per_node, nodes = n / (rpn > 0 ? rpn : 1);
  /* whole nodes of rpn consecutive members, as the executors' communicators check */
  gboolean blocks = n % (rpn > 0 ? rpn : 1) == 0;
  for (int i = 0; blocks && rpn > 1 && i < n; i++) {
    const int nd = plat_host_at(pl, members[i])->node;
    blocks = nd == plat_host_at(pl, members[i - i % rpn])->node &&
             !(i % rpn == 0 && i > 0 && nd == plat_host_at(pl, members[i - 1])->node);
  }
  const int k = g->chan_k = blocks ? coll_ring_channels(n, rpn) : 1;
  int *src = g_new(int, (size_t)n * k), *dst = g_new(int, (size_t)n * k);
  /* the ring: member i sends to member i + 1 */
  for (int i = 0; i < n; i++) src[i] = members[i], dst[i] = members[(i + 1) % n];
  plat_flow_info f;
  gboolean ok = plat_flows(pl, src, dst, n, &f, err);
  g->ring_alpha_s = f.latency_s;
  g->ring_beta_bps = f.rate_bps;
  /* the ring collectives' k rings at once (coll.h, coll_ring_channels) */
  if (ok && k > 1) {
    for (int j = 0; j < k; j++)
      for (int i = 0; i < n; i++) {
        src[j * n + i] = members[coll_flat_ring_member(k, n, rpn, j, i)];
        dst[j * n + i] = members[coll_flat_ring_member(k, n, rpn, j, i + 1)];
      }
    ok = plat_flows(pl, src, dst, n * k, &f, err);
  }
  g->chan_alpha_s = f.latency_s;
  g->chan_intra_beta_bps = f.intra_rate_bps;
  g->chan_inter_beta_bps = f.inter_rate_bps;
  /* the hierarchical all-reduce's rings (coll/hier.c): blocks of rpn consecutive members are the
   * nodes; inside each, a ring; across them, one ring per local index */
  if (ok && rpn > 1 && nodes > 1 && rpn * nodes == n) {
    for (int i = 0; i < n; i++) {
      const int k = i / rpn, j = i % rpn;
      src[i] = members[i];
      dst[i] = members[k * rpn + (j + 1) % rpn];
    }
    ok = step(pl, src, dst, n, &g->intra_alpha_s, &g->intra_beta_bps, err);
    for (int i = 0; ok && i < n; i++) {
      const int k = i / rpn, j = i % rpn;
      dst[i] = members[((k + 1) % nodes) * rpn + j];
    }
    if (ok) ok = step(pl, src, dst, n, &g->inter_alpha_s, &g->inter_beta_bps, err);
  }
  g_free(src);
  g_free(dst);
  return ok;
}
