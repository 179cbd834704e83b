/* analytic.h — the closed-form executor (`--mode analytic`): the planner's op lists evaluated
 * with roofline kernel times (gpuspec.h) and alpha-beta collective times (coll/cost.h), on a
 * two-stream model of each GPU (compute and communication overlap, events order them). No
 * SimGrid: routes come from the platform file read directly (platform.h).
 *
 * It also evaluates Gholami et al.'s communication equations literally (Eq. 4 for pure batch,
 * Eq. 8 for the Pr×Pc grid, with the fc-only redistribution of Eq. 6), so a user can compare the
 * paper's figure with the planner's. Where they differ, the planner is right on purpose: the
 * backward all-reduce of ΔX has the layer's input size d_{i−1}·B/Pc (the paper charges d_i·B/Pc)
 * and the first layer needs none.
 */
#ifndef ANALYTIC_H
#define ANALYTIC_H

#include <glib.h>

#include "coll/coll.h"
#include "core/config.h"
#include "exec/context.h"
#include "platform/platform.h"
#include "out/result.h"
#include "model/workload.h"

/* Summarises the group members[0..n-1] (rank = host index) of platform `pl` for the cost
 * formulas (coll/cost.h). DL_ERR_INPUT when a route is missing. */
gboolean analytic_group_init(coll_group *g, const plat *pl, const int *members, int n,
                             GError **err);

/* Adds to g (analytic_group_init'ed on the same members) the routes of the pairwise exchanges'
 * steps, each step's flows sharing the links at once (plat_flows): n - 1 steps of n flows, asked
 * only for groups that run an all-to-all. analytic_group_clear frees them. */
gboolean analytic_group_pairwise(coll_group *g, const plat *pl, const int *members, int n,
                                 GError **err);
/* The same for the ring broadcast's chain: each hop's route, its flows all at once. */
gboolean analytic_group_chain(coll_group *g, const plat *pl, const int *members, int n,
                              GError **err);
/* The same for the logarithmic algorithms' steps (coll/rhd.c). */
gboolean analytic_group_rhd(coll_group *g, const plat *pl, const int *members, int n,
                            GError **err);
/* The same for the all-reduce's two trees where every member is a node of its own: each edge's
 * route, up and down, with the edges of its depth at once and with all of them at once. */
gboolean analytic_group_tree(coll_group *g, const plat *pl, const int *members, int n,
                             GError **err);
void analytic_group_clear(coll_group *g);

/* What the closed form refuses of configuration `c` on the run's platform: more GPUs than hosts,
 * a --coll it has no formula for. DL_ERR_INPUT naming the option. */
gboolean analytic_check(const run_ctx *x, const cfg_run *c, GError **err);

/* Evaluates configuration `c` (x->cfg, or a variant of it with other degrees) of the run opened
 * in `x` into `r` (res_init'ed by the caller). DL_ERR_INPUT for configurations the platform or
 * planner cannot take. */
gboolean analytic_run(const run_ctx *x, const cfg_run *c, res_result *r, GError **err);

/* Gholami et al. 2018 Eq. 8 (Eq. 4 when Pr = 1, Eq. 3 when Pc = 1), in seconds, with alpha and
 * beta of the platform's Pr and Pc groups containing rank 0 and the rhd collective costs the paper
 * assumes; conv and linear layers only. With --grid-layers fc, conv layers use Eq. 4 over all P
 * and the redistribution of Eq. 6 is added; with --domain conv, conv layers use Eq. 9's domain
 * terms (halos within the Pr group, ΔW over all P). */
gboolean analytic_gholami_comm_s(const wl_model *m, const cfg_run *c, const plat *pl, double *out_s,
                           GError **err);



#endif
