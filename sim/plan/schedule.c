/* schedule.c — the order of a pipeline stage's forward and backward micro-batch steps.
 *
 * GPipe runs all m forwards, then all backwards (in reverse micro-batch order, as torchgpipe);
 * 1F1B (PipeDream-Flush, Narayanan et al. 2021) runs pp − stage − 1 warm-up forwards, then
 * alternates one forward and one backward, then drains. Interleaved 1F1B (Narayanan et al. 2021,
 * Section 2.2; Megatron-LM's forward_backward_pipelining_with_interleaving) runs V model chunks
 * per rank: forward k of the rank's m·V runs chunk (k mod pp·V) / pp on micro-batch
 * (k / (pp·V))·pp + k mod pp, backward k the chunks in the reverse order; (pp − stage − 1)·2 +
 * (V − 1)·pp warm-up forwards (all of them when m = pp), then one forward and one backward, then
 * the drain. Without a pipeline the m micro-batches are gradient accumulation: each one's
 * backward follows its forward.
 */
#include "plan/build.h"

void plan_schedule(const cfg_run *c, int stage, plan_step *out) {
  const int m = c->microbatches, pp = c->pp;
  int n = 0;
  if (pp == 1) { /* gradient accumulation: each micro-batch's backward right after its forward */
    for (int k = 0; k < m; k++) {
      out[n++] = (plan_step){TRUE, k, 0};
      out[n++] = (plan_step){FALSE, k, 0};
    }
  } else if (c->schedule == CFG_SCHED_INTERLEAVED) {
    const int V = c->virtual_stages, total = m * V, group = pp * V;
    int warm = m == pp ? total : MIN((pp - stage - 1) * 2 + (V - 1) * pp, total), f = 0, b = 0;
#define STEP(k, fwd)                                                                            \
  (plan_step) {                                                                                 \
    fwd, (k) / group * pp + (k) % pp, fwd ? (k) % group / pp : V - 1 - (k) % group / pp         \
  }
    for (; f < warm; f++) out[n++] = STEP(f, TRUE);
    while (f < total) {
      out[n++] = STEP(f, TRUE);
      f++;
      out[n++] = STEP(b, FALSE);
      b++;
    }
    while (b < total) {
      out[n++] = STEP(b, FALSE);
      b++;
    }
#undef STEP
  } else if (c->schedule == CFG_SCHED_1F1B) {
    int warm = MIN(pp - stage - 1, m), f = 0, b = 0;
    for (; f < warm; f++) out[n++] = (plan_step){TRUE, f, 0};
    while (f < m) {
      out[n++] = (plan_step){TRUE, f++, 0};
      out[n++] = (plan_step){FALSE, b++, 0};
    }
    while (b < m) out[n++] = (plan_step){FALSE, b++, 0};
  } else {
    for (int f = 0; f < m; f++) out[n++] = (plan_step){TRUE, f, 0};
    for (int b = m - 1; b >= 0; b--) out[n++] = (plan_step){FALSE, b, 0};
  }
}

gboolean plan_schedule_last_backward(const cfg_run *c, plan_step s) {
  if (s.fwd) return FALSE;
  /* GPipe runs its backwards in reverse micro-batch order */
  return c->schedule == CFG_SCHED_GPIPE && c->pp > 1 ? s.mb == 0 : s.mb == c->microbatches - 1;
}
