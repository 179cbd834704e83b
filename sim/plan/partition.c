/* partition.c — cutting the layers into pipeline stages (plan_partition, plan.h). */
#include <math.h>

#include "core/dl_common.h"
#include "plan/plan.h"

static gboolean unit_starts(const wl_model *m, int i) {
  return i == 0 || m->layers[i].block < 0 || m->layers[i].block != m->layers[i - 1].block;
}

int plan_pipeline_units(const wl_model *m) {
  int nu = 0;
  for (int i = 0; i < m->n_layers; i++) nu += unit_starts(m, i);
  return nu;
}

gboolean plan_partition(const wl_model *m, const cfg_run *c, const double *layer_time_s,
                      int *stage_first, GError **err) {
  /* with interleaving, pp·V virtual stages: rank s holds virtual stages s, s + pp, ... */
  const int n = m->n_layers, pp = c->pp * MAX(1, c->virtual_stages);
  /* units: maximal runs of one residual block, or single layers outside blocks */
  int *unit_first = g_new(int, n + 1), nu = 0;
  for (int i = 0; i < n; i++)
    if (unit_starts(m, i)) unit_first[nu++] = i;
  unit_first[nu] = n;
  gboolean ok = TRUE;
  if (c->n_pp_balance) {
    int at = 0;
    for (int s = 0; s < pp; s++) {
      stage_first[s] = at;
      at += c->pp_balance[s];
    }
    stage_first[pp] = n;
    if (at != n) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: the stage sizes add up to %d "
                  "layers; %s has %d", at, m->name, n);
      ok = FALSE;
    }
    for (int s = 1; s < pp && ok; s++) {
      int f = stage_first[s];
      if (f < n && m->layers[f].block >= 0 && m->layers[f].block == m->layers[f - 1].block) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: stage %d would start inside "
                    "residual block '%s' (at layer '%s'); blocks stay whole", s,
                    m->block_names[m->layers[f].block], m->layers[f].name);
        ok = FALSE;
      }
    }
    g_free(unit_first);
    return ok;
  }
  if (nu < pp && c->virtual_stages > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp %d --virtual-stages %d: %s has only %d "
                "pipeline units (residual blocks and layers outside blocks) for %d model chunks; "
                "use fewer", c->pp, c->virtual_stages, m->name, nu, pp);
    g_free(unit_first);
    return FALSE;
  }
  if (nu < pp) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp %d: %s has only %d pipeline units (residual "
                "blocks and layers outside blocks); use --pp %d or less", pp, m->name, nu, nu);
    g_free(unit_first);
    return FALSE;
  }
  double *pre = g_new0(double, nu + 1); /* prefix sums of unit costs */
  for (int u = 0; u < nu; u++) {
    double cost = 0;
    for (int i = unit_first[u]; i < unit_first[u + 1]; i++)
      cost += layer_time_s ? layer_time_s[i] : m->layers[i].fwd_flops + m->layers[i].bwd_flops;
    pre[u + 1] = pre[u] + cost;
  }
  /* best[s][u]: smallest possible largest stage cost cutting units [0, u) into s stages */
  double *best = g_new(double, (size_t)(pp + 1) * (nu + 1));
  int *cut = g_new(int, (size_t)(pp + 1) * (nu + 1));
#define B(s, u) best[(size_t)(s) * (nu + 1) + (u)]
#define C(s, u) cut[(size_t)(s) * (nu + 1) + (u)]
  for (int u = 0; u <= nu; u++) B(1, u) = pre[u], C(1, u) = 0;
  for (int s = 2; s <= pp; s++)
    for (int u = s; u <= nu; u++) {
      /* the first cut is always a valid one (every stage non-empty), even when costs are
       * infinite or equal */
      B(s, u) = MAX(B(s - 1, s - 1), pre[u] - pre[s - 1]), C(s, u) = s - 1;
      for (int k = s; k < u; k++) {
        double v = MAX(B(s - 1, k), pre[u] - pre[k]);
        if (v < B(s, u) * (1 - 1e-12)) B(s, u) = v, C(s, u) = k;
      }
    }
  int u = nu;
  for (int s = pp; s >= 1; s--) {
    int k = s > 1 ? C(s, u) : 0;
    stage_first[s - 1] = unit_first[k];
    u = k;
  }
  stage_first[pp] = n;
#undef B
#undef C
  g_free(best);
  g_free(cut);
  g_free(pre);
  g_free(unit_first);
  return TRUE;
}
