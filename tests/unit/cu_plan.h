/* cu_plan.h — what the planner's unit tests share: loading a workload and building a rank's
 * plan, each failing the test (with the loader's or planner's message) when it cannot. */
#ifndef CU_PLAN_H
#define CU_PLAN_H
#include <stdio.h>

#include "cu_main.h"
#include "plan/plan.h"

static inline wl_model *dl_cu_load(const char *name) {
  GError *e = NULL;
  wl_model *m = wl_load(name, &e);
  if (!m) fprintf(stderr, "\nwl_load %s: %s\n", name, e ? e->message : "?");
  g_clear_error(&e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  return m;
}

static inline plan_rank *dl_cu_build(const wl_model *m, const cfg_run *c, int rank) {
  GError *e = NULL;
  plan_rank *p = plan_build(m, c, NULL, rank, &e);
  if (!p) fprintf(stderr, "\nplan_build: %s\n", e ? e->message : "?");
  g_clear_error(&e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return p;
}
#endif
