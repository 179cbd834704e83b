/* test_interval.c — prediction intervals (study/interval.c) and percentiles (out/result.c) on
 * cases worked by hand. */
#include <math.h>

#include "cu_plan.h"
#include "study/interval.h"

/* Type 7 percentiles: h = (n - 1) p / 100, linear between the order statistics around h. */
static void test_percentile(void) {
  const double x[] = {4, 1, 3, 2, 5}; /* sorted 1..5: h = 4p / 100 */
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(x, 5, 0), 1, 0);
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(x, 5, 50), 3, 0);
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(x, 5, 5), 1.2, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(x, 5, 95), 4.8, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(x, 5, 100), 5, 0);
  const double one = 7;
  CU_ASSERT_DOUBLE_EQUAL(res_percentile(&one, 1, 95), 7, 0);
}

/* Errors -0.2, -0.1, 0, 0.1, 0.2. Without -0.2 the others' 5th percentile is
 * -0.1 + 0.15 x 0.1 = -0.085: -0.2 lies outside, as 0.2 does by symmetry. Without -0.1: 5th
 * -0.2 + 0.15 x 0.2 = -0.17, 95th 0.1 + 0.85 x 0.1 = 0.185: covered; 0 and 0.1 likewise. */
static void test_leave_one_out(void) {
  const double e[] = {-0.2, -0.1, 0, 0.1, 0.2};
  double lo[5], hi[5];
  CU_ASSERT_EQUAL(interval_loo(e, 5, lo, hi), 3);
  CU_ASSERT_DOUBLE_EQUAL(lo[0], -0.085, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(lo[1], -0.17, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(hi[1], 0.185, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(hi[4], 0.085, 1e-15);
}

/* Without a database's cases there is no interval, or with draws the draws' own percentiles; a
 * result with cases takes its iteration time times each exp(e_i) (checked end to end by
 * tests/sim/check_intervals.py). */
static void test_no_cases(void) {
  res_result r;
  res_init(&r);
  r.iteration_time_s = 1;
  interval_set(&r, NULL);
  CU_ASSERT_FALSE(r.interval);
  /* with draws and no cases: the draws' percentiles alone */
  const double t[] = {1, 2, 3, 4, 5};
  res_set_samples(&r, t, 5);
  interval_set(&r, NULL);
  CU_ASSERT(r.interval && r.interval_cases == 0);
  CU_ASSERT_DOUBLE_EQUAL(r.interval_p5_s, 1.2, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(r.interval_p95_s, 4.8, 1e-15);
  res_release(&r);
}

static const dl_cu_test tests[] = {DL_CU_TEST(test_percentile), DL_CU_TEST(test_leave_one_out),
                                   DL_CU_TEST(test_no_cases), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"interval", tests}, {NULL, NULL}};
