/* groups.c — a group of platform hosts summarised for the cost formulas (coll_group): the
 * routes between ring neighbours, inside one node and between nodes, as the platform gives them. */
#include "exec/analytic/analytic.h"

#include <math.h>
#include <string.h>

gboolean analytic_group_init(coll_group *g, const plat *pl, const int *members, int n,
                             GError **err) {
  memset(g, 0, sizeof *g);
  g->P = n;
  g->ring_beta_bps = INFINITY;
  g->intra_beta_bps = INFINITY;
  g->inter_beta_bps = INFINITY;
  g->bw_factor = plat_bw_factor(pl);
  g->lat_factor = plat_lat_factor(pl);
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
