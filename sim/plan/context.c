/* context.c — context parallelism as a row of the split table (--cp N; Megatron-Core's context
 * parallelism, Liu et al. 2023 ring attention; --cp-style ulysses: Jacobs et al. 2023).
 *
 * Every layer of a token model holds 1/cp of each sequence (seq_parts multiplied by cp, on top of
 * sequence parallelism's tp), so its work, its stash and the tensor-parallel collectives around
 * it shrink by cp; weights stay whole and their gradients are summed over dp·cp (layout.c). Only
 * attention needs the other ranks' tokens; the build (build.c, cp_attention) runs it as
 *   ring     cp steps: the attention of the local queries against one K/V chunk while the next
 *            chunk arrives from the previous rank of the ring and this one goes to the next;
 *            backward passes K/V on again with the gradients of the chunk held before (each
 *            rank adds its share once that step's kernel is done, as TransformerEngine's ring),
 *            and the gradients of the last chunk go home. Each rank holds two mirrored chunks of
 *            the causal sequence (Megatron-Core's load balance), so every step does 1/cp² of
 *            the attention's work;
 *   ulysses  an all-to-all over the cp group turns 1/cp of the tokens with every head into every
 *            token with 1/cp of the heads before attention (the QKV), and one turns it back after
 *            (the output); backward mirrors them.
 */
#include <stdarg.h>

#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "plan/strategy.h"

static gboolean applies(const cfg_run *c) { return c->cp > 1; }

/* FALSE, with DL_ERR_INPUT "--cp N: " and the message. */
static gboolean refuse(GError **err, const cfg_run *c, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean refuse(GError **err, const cfg_run *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *why = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--cp %d%s", c->cp, why);
  g_free(why);
  return FALSE;
}

static gboolean check(const wl_model *m, const cfg_run *c, GError **err) {
  if (m->seq_len <= 0)
    return refuse(err, c, ": %s is not a token model: context parallelism splits sequences",
                  m->path);
  if (c->tp > 1 && c->tp_style != CFG_TP_MEGATRON)
    return refuse(err, c, ": with --tp, context parallelism goes with --tp-style megatron");
  if (c->ep > 1) return refuse(err, c, ": leave out --ep (experts are not split by cp)");
  if (c->fsdp == CFG_FSDP_HYBRID)
    return refuse(err, c, ": leave out --fsdp hybrid (its shard groups are dp's)");
  const gboolean ring = c->cp_style == CFG_CP_RING;
  const int64_t chunks = ring ? 2 * (int64_t)c->cp : c->cp;
  if (m->seq_len % chunks)
    return refuse(err, c, ": the sequence of %" G_GINT64_FORMAT " tokens does not split into %"
                  G_GINT64_FORMAT " equal chunks (%s); choose --cp or --seq-len so that %s "
                  "divides it", m->seq_len, chunks,
                  ring ? "two mirrored chunks per rank of the ring" : "one per rank",
                  ring ? "2 x cp" : "cp");
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    if (l->kind == WL_MOE)
      return refuse(err, c, ": layer '%s' is a mixture of experts; context parallelism of MoE "
                    "models is not modelled", l->name);
    if (l->kind == WL_ATTENTION && !ring) {
      const int h = l->heads / c->tp, kv = wl_kv_heads(l) / c->tp;
      if (h % c->cp || kv % c->cp)
        return refuse(err, c, " --cp-style ulysses: layer '%s' has %d query and %d key/value "
                      "heads per tensor-parallel rank; Ulysses gives each cp rank whole heads, "
                      "so cp must divide both", l->name, h, kv);
    }
  }
  return TRUE;
}

static gboolean roles(const wl_model *m, const cfg_run *c, int tp_i, int ep_i, plan_shard *out,
                      GError **err) {
  (void)tp_i, (void)ep_i, (void)err;
  for (int i = 0; i < m->n_layers; i++) {
    plan_shard *x = &out[i];
    x->seq_parts *= c->cp;
    x->cp_parts = c->cp;
    x->fwd_bytes /= c->cp; /* the tensor-parallel collectives carry 1/cp of the tokens */
    x->bwd_bytes /= c->cp;
    x->redist_bytes /= c->cp;
    x->bwd_pre_bytes /= c->cp;
  }
  return TRUE;
}

const plan_strategy plan_context = {"context", applies, check, roles};
