/* gridsearch.h — --grid auto: the best Gholami grid for a run. */
#ifndef DL_STUDY_GRIDSEARCH_H
#define DL_STUDY_GRIDSEARCH_H

#include <glib.h>

#include "core/config.h"
#include "exec/context.h"
#include "out/result.h"

/* In closed form: evaluates every factorisation Pr×Pc of --gpus that the batch allows, appends
 * one row per grid to r->grid_search, and leaves in `r` the full result of the fastest (ties:
 * the smaller Pr). Sets c->grid_pr/grid_pc/tp/dp to the winner (c->grid_auto stays TRUE: the
 * configuration echo says how the grid was chosen). */
gboolean gridsearch_analytic(const run_ctx *x, cfg_run *c, res_result *r, GError **err);

/* In simulation, after gridsearch_analytic: simulates the fastest few grids of r's table (their
 * rows say so), and leaves the fastest simulated one in `c`. */
gboolean gridsearch_simulate(const run_ctx *x, cfg_run *c, res_result *r, GError **err);

#endif
