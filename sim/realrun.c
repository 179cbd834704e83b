/* realrun.c — checking and launching the real executor (see realrun.h). */
#include "realrun.h"

#include <stdio.h>

#include "dl_common.h"
#include "launch.h"


static gboolean check_layer(const wl_model *m, const wl_layer *l, int i, GError **err) {
  const char *why = NULL;
  if (l->kind == WL_LINEAR && l->tied_to >= 0 && l->bias) why = "tied linears with a bias";
  else if (l->kind == WL_LINEAR && l->tied_to >= 0 && m->layers[l->tied_to].kind != WL_EMBEDDING)
    why = "linears tied to a linear";
  else if (l->kind == WL_EMBEDDING && l->inputs[0] != -1) why = "embeddings that read a layer";
  else if (l->kind == WL_SOFTMAX_CE && i != m->n_layers - 1) why = "losses before the last layer";
  else if (i == m->n_layers - 1 && l->kind != WL_SOFTMAX_CE) why = "models without a final loss";
  else if (m->vocab > 0 && l->kind != WL_EMBEDDING &&
           (l->inputs[0] == -1 || (l->n_inputs > 1 && l->inputs[1] == -1)))
    why = "token ids read by a layer other than an embedding";
  if (!why) return TRUE;
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: layer '%s' (%s): %s are not run "
              "for real yet", m->path, l->name, wl_layer_kind_name(l->kind), why);
  return FALSE;
}

gboolean rr_check(const wl_model *m, const cfg_run *c, GError **err) {
  if (c->grid_auto) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --grid auto searches grids without "
                "running them; name one grid, e.g. --grid 2x2");
    return FALSE;
  }
  if (c->precision == GS_FP16 || c->precision == GS_BF16) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --precision %s: the real executor's "
                "CPU kernels compute in fp32; use --precision fp32", gs_precision_name(c->precision));
    return FALSE;
  }
  if (c->recompute) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--mode real: --recompute is not run for real yet; leave it out");
    return FALSE;
  }
  for (int i = 0; i < m->n_layers; i++)
    if (!check_layer(m, &m->layers[i], i, err)) return FALSE;
  return TRUE;
}

static gboolean start_real(const char *const *prog_argv, void *data, GError **err) {
  return launch_mpirun(*(const int *)data, prog_argv, NULL, err);
}

gboolean rr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err) {
  (void)m, (void)pl;
  int np = c->gpus;
  if (!launch_executor(c, start_real, &np, r, err)) return FALSE;
  r->kdb_measured = r->kdb_estimated; /* every kernel time was measured on this machine */
  r->kdb_estimated = 0;
  r->kdb_interpolated = 0;
  g_free(r->kdb_name);
  r->kdb_name = g_strdup("measured:cpu");
  return TRUE;
}
