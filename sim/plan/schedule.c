/* schedule.c — the order of a pipeline stage's forward and backward micro-batch steps.
 *
 * GPipe runs all m forwards, then all backwards (in reverse micro-batch order, as torchgpipe);
 * 1F1B (PipeDream-Flush, Narayanan et al. 2021) runs pp − stage − 1 warm-up forwards, then
 * alternates one forward and one backward, then drains. Without a pipeline the m micro-batches
 * are gradient accumulation: each one's backward follows its forward.
 */
#include "plan/build.h"

void plan_schedule(const cfg_run *c, int stage, plan_step *out) {
  const int m = c->microbatches, pp = c->pp;
  int n = 0;
  if (pp == 1) { /* gradient accumulation: each micro-batch's backward right after its forward */
    for (int k = 0; k < m; k++) {
      out[n++] = (plan_step){TRUE, k};
      out[n++] = (plan_step){FALSE, k};
    }
  } else if (c->schedule == CFG_SCHED_1F1B) {
    int warm = MIN(pp - stage - 1, m), f = 0, b = 0;
    for (; f < warm; f++) out[n++] = (plan_step){TRUE, f};
    while (f < m) {
      out[n++] = (plan_step){TRUE, f++};
      out[n++] = (plan_step){FALSE, b++};
    }
    while (b < m) out[n++] = (plan_step){FALSE, b++};
  } else {
    for (int f = 0; f < m; f++) out[n++] = (plan_step){TRUE, f};
    for (int b = m - 1; b >= 0; b--) out[n++] = (plan_step){FALSE, b};
  }
}

gboolean plan_schedule_last_backward(const cfg_run *c, plan_step s) {
  if (s.fwd) return FALSE;
  /* GPipe runs its backwards in reverse micro-batch order */
  return c->schedule == CFG_SCHED_GPIPE && c->pp > 1 ? s.mb == 0 : s.mb == c->microbatches - 1;
}
