/* moe.c — mixture of experts (GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022): the
 * routing of tokens to experts, an MoE layer's ops, and expert parallelism as a strategy of the
 * split table.
 *
 * An MoE layer is a router kernel, an all-to-all dispatch of the routed tokens to the ranks
 * holding their experts (ep consecutive data-parallel ranks hold E/ep experts each), the experts'
 * kernel, and an all-to-all combine; backward mirrors it. --routing decides how many tokens each
 * expert gets per micro-batch (uniform, zipf:S with a seeded choice of the hot experts per layer
 * and micro-batch, or weights from a file); an expert takes at most capacity = factor · k ·
 * tokens / E and drops the rest; the busiest expert sets the pace. Expert gradients are
 * all-reduced among the dp/ep replicas of the same experts (gradsync.c), the router's with the
 * rest over dp.
 */
#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/build.h"
#include "plan/strategy.h"

static guint64 splitmix64(guint64 *s) {
  guint64 z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void plan_moe_loads(const cfg_run *c, int layer, int mb, int E, double assignments, double *load) {
  double *w = g_new(double, E), total = 0;
  int *rank_of_expert = g_new(int, E);
  for (int e = 0; e < E; e++) rank_of_expert[e] = e;
  if (c->routing_zipf_s > 0) {
    /* which experts are hot: a seeded permutation per layer and micro-batch (Fisher-Yates) */
    guint64 st = ((guint64)c->seed << 32) ^ ((guint64)layer << 16) ^ (guint64)mb;
    for (int e = E - 1; e > 0; e--) {
      int j = (int)(splitmix64(&st) % (guint64)(e + 1));
      int t = rank_of_expert[e];
      rank_of_expert[e] = rank_of_expert[j];
      rank_of_expert[j] = t;
    }
  }
  for (int e = 0; e < E; e++) {
    if (c->routing_zipf_s > 0) w[e] = pow(rank_of_expert[e] + 1.0, -c->routing_zipf_s);
    else if (c->n_routing_weights) w[e] = c->routing_weights[e % c->n_routing_weights];
    else w[e] = 1.0;
    total += w[e];
  }
  /* whole token copies, largest remainder first (ties to the lower expert): deterministic */
  double given = 0;
  double *frac = g_new(double, E);
  for (int e = 0; e < E; e++) {
    double exact = assignments * w[e] / total;
    load[e] = floor(exact);
    frac[e] = exact - load[e];
    given += load[e];
  }
  for (double left = round(assignments - given); left > 0; left--) {
    int best = 0;
    for (int e = 1; e < E; e++)
      if (frac[e] > frac[best]) best = e;
    load[best] += 1;
    frac[best] = -1;
  }
  g_free(frac);
  g_free(w);
  g_free(rank_of_expert);
}

void plan_moe_layer(plan_builder *b, plan_rank *p, const cfg_run *c, const wl_layer *l, int li,
                  int mb, gboolean fwd, gboolean recompute, const plan_shard *x, int ep_index,
                  int *pending) {
  GPtrArray *pool = p->pool;
  const int64_t samples = x->samples;
  const int split = x->split;
  const double dt = gpu_precision_bytes(c->precision);
  const plan_phase ph = fwd && !recompute ? PLAN_PH_FWD : PLAN_PH_BWD;
  const int E = l->experts, ep = c->ep, per = E / ep;
  const double h = (double)l->in.c, ffn = (double)l->ffn;
  const double tokens = (double)samples * l->in.h * l->in.w / split; /* this rank's tokens */
  const double assign = tokens * ep * l->top_k;                        /* the EP group's copies */
  const double cf = c->capacity_factor >= 0 ? c->capacity_factor : l->capacity_factor;
  const double cap = cf > 0 ? ceil(cf * assign / E) : INFINITY;
  double *load = g_new(double, E);
  plan_moe_loads(c, li, mb, E, assign, load);
  double maxl = 0, dropped = 0, mine = 0;
  double *send = g_new0(double, ep), *recv = g_new0(double, ep);
  gboolean even = TRUE;
  for (int e = 0; e < E; e++) {
    double kept = MIN(load[e], cap);
    maxl = MAX(maxl, load[e]);
    dropped += load[e] - kept;
    send[e / per] += kept / ep * h * dt; /* this rank's share of expert e's tokens */
    if (e / per == ep_index) mine += kept;
  }
  for (int j = 0; j < ep; j++) {
    recv[j] = send[ep_index];
    even = even && fabs(send[j] - send[0]) <= 1e-9 * send[0];
  }
  if (fwd && !recompute) {
    double mean = assign / E;
    if (mean > 0 && maxl / mean > p->moe_max_over_mean) p->moe_max_over_mean = maxl / mean;
    p->moe_dropped_tokens += dropped / ep;
    p->moe_routed_tokens += assign / ep;
  }
  /* the rank's experts, and the shared experts (on every rank) for its own tokens */
  const double expert_params = (double)per * (double)wl_moe_expert_params(l) +
                               (double)wl_moe_shared_params(l);
  const double act = l->gated ? 3 : 2; /* hidden activations per expert and token, in ffn */
  const double router_flops = tokens * 2 * h * E,
               expert_flops = (mine + tokens * l->shared) * wl_moe_expert_flops(l);
  const double router_bytes = tokens * (h + E) * dt + h * E * dt;
  const double expert_bytes = (mine + tokens * l->shared) * (2 * h + act * ffn) * dt +
                              expert_params * dt;
  const char *dir = fwd ? "fwd" : "bwd";
  const double k = fwd ? 1 : 2; /* backward: input and weight gradients */
  char kn[40];
  /* one all-to-all in each direction, tokens to experts then back */
  for (int step = 0; step < 4; step++) {
    /* forward: router, dispatch (to experts), experts, combine; backward: combine's gradient
     * (to experts), experts, dispatch's gradient (back to the tokens), router */
    gboolean to_experts = fwd ? step == 1 : step == 0;
    if ((fwd && step == 0) || (!fwd && step == 3)) { /* router */
      g_snprintf(kn, sizeof kn, "moe.router.%s", dir);
      plan_op *op = plan_b_kernel(b, ph, li, kn, TRUE, k * router_flops, k * router_bytes, samples,
                              split, pending);
      op->part = PLAN_PART_ROUTER;
      op->recompute = recompute;
    } else if ((fwd && step == 2) || (!fwd && step == 1)) { /* experts */
      g_snprintf(kn, sizeof kn, "moe.experts.%s", dir);
      plan_op *op = plan_b_kernel(b, ph, li, kn, TRUE, k * expert_flops, k * expert_bytes, samples,
                              split, pending);
      op->part = PLAN_PART_EXPERTS;
      op->recompute = recompute;
    } else if (ep > 1) { /* all-to-all */
      gboolean dispatch = fwd ? step == 1 : step == 2;
      double total = 0;
      for (int j = 0; j < ep; j++) total += send[j];
      plan_op *op = plan_b_coll(b, ph, li, COLL_ALLTOALL, PLAN_GRP_EP,
                            dispatch ? PLAN_WHY_MOE_DISPATCH : PLAN_WHY_MOE_COMBINE, total, TRUE,
                            pending);
      if (!even) {
        double *s = g_memdup2(to_experts ? send : recv, sizeof(double) * ep);
        double *r = g_memdup2(to_experts ? recv : send, sizeof(double) * ep);
        g_ptr_array_add(pool, s);
        g_ptr_array_add(pool, r);
        op->peer_send_bytes = s;
        op->peer_recv_bytes = r;
        op->bytes = 0;
        for (int j = 0; j < ep; j++) op->bytes += s[j];
      }
    }
  }
  g_free(send);
  g_free(recv);
  g_free(load);
}

gboolean plan_moe_check_routing(const wl_model *m, const cfg_run *c, GError **err) {
  for (int i = 0; i < m->n_layers && c->n_routing_weights; i++)
    if (m->layers[i].kind == WL_MOE && m->layers[i].experts != c->n_routing_weights) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--routing %s: %d weights for %d experts (layer "
                  "'%s'); give one weight per expert", c->routing ? c->routing : "file:",
                  c->n_routing_weights, m->layers[i].experts, m->layers[i].name);
      return FALSE;
    }
  return TRUE;
}

/* ---- expert parallelism in the split table ------------------------------------------------ */

static gboolean applies(const cfg_run *c) { return c->ep > 1; }

static gboolean check(const wl_model *m, const cfg_run *c, GError **err) {
  if (c->dp % c->ep) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: experts are spread over data-parallel "
                "ranks: ep must divide dp = %d", c->ep, c->dp);
    return FALSE;
  }
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == WL_MOE && m->layers[i].experts % c->ep) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: layer '%s' has %d experts; ep must "
                  "divide them", c->ep, m->layers[i].name, m->layers[i].experts);
      return FALSE;
    }
  return TRUE;
}

/* The router whole, experts [ep_i·E/ep, (ep_i+1)·E/ep) of every MoE layer. */
static gboolean roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                      GError **err) {
  (void)tp_i, (void)err;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == WL_MOE)
      plan_shard_slice(&out[i], PLAN_SPLIT_EXPERTS, m->layers[i].experts, c->ep, ep_i);
  return TRUE;
}

const plan_strategy plan_experts = {"experts", applies, check, roles};
