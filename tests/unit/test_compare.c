/* test_compare.c — attribution of the difference between two results (compare.h) on two
 * handmade documents, the validation table, its CSV, and bad input.
 *
 * By hand, A (reference) against B:
 *   T        10 ms -> 12.5 ms            total   +2.5 / 10 = +0.25
 *   compute   6    -> 7                  compute +1 / 10   = +0.10
 *   comm_s    5    -> 5                  comm     0
 *   hidden    2    -> 1                  overlap −(1 − 2) / 10 = +0.10
 *                                        skew    0.25 − 0.10 − 0 − 0.10 = +0.05 (idle 1 -> 1.5)
 */
#include "study/compare.h"
#include "cu_main.h"
#include "core/dl_common.h"

#include <math.h>
#include <string.h>

static const char doc_a[] =
    "{\"mode\": \"real\", \"config\": {\"workload\": \"mlp-small\", \"gpus\": 2, \"batch\": 256,"
    " \"dp\": 2, \"tp\": 1, \"pp\": 1}, \"iteration_time_s\": 0.010,"
    " \"breakdown_s\": {\"compute\": 0.006, \"exposed_comm\": 0.003, \"overlapped_comm\": 0.002,"
    "  \"bubble\": 0, \"idle\": 0.001}, \"comm_s\": 0.005,"
    " \"collectives\": [{\"op\": \"allreduce\", \"group\": \"dp\", \"purpose\": \"grad_sync\","
    "  \"calls\": 2, \"time_s\": 0.004}],"
    " \"ranks\": [{\"iteration_time_s\": 0.010, \"compute_s\": 0.006},"
    "  {\"iteration_time_s\": 0.009, \"compute_s\": 0.0055}]}";

static const char doc_b[] =
    "{\"mode\": \"sim\", \"config\": {\"workload\": \"mlp-small\", \"gpus\": 2, \"batch\": 256,"
    " \"dp\": 2}, \"iteration_time_s\": 0.0125,"
    " \"breakdown_s\": {\"compute\": 0.007, \"exposed_comm\": 0.004, \"overlapped_comm\": 0.001,"
    "  \"bubble\": 0, \"idle\": 0.0015}, \"comm_s\": 0.005,"
    " \"collectives\": [{\"op\": \"allreduce\", \"group\": \"dp\", \"purpose\": \"grad_sync\","
    "  \"calls\": 1, \"time_s\": 0.003}, {\"op\": \"allreduce\", \"group\": \"dp\","
    "  \"purpose\": \"grad_sync\", \"calls\": 1, \"time_s\": 0.002}],"
    " \"ranks\": [{\"iteration_time_s\": 0.0125, \"compute_s\": 0.007},"
    "  {\"iteration_time_s\": 0.0115, \"compute_s\": 0.0068}]}";

static void test_split(void) {
  GError *err = NULL;
  compare_doc *a = compare_doc_parse("a.json", doc_a, &err),
              *b = compare_doc_parse("b.json", doc_b, &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT(compare_check_match(a, b, &err));
  compare_split s;
  compare_split_error(a, b, &s);
  CU_ASSERT_DOUBLE_EQUAL(s.total, 0.25, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(s.compute, 0.10, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(s.comm, 0.0, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(s.overlap, 0.10, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(s.skew, 0.05, 1e-12);
  /* the parts add up to the total */
  CU_ASSERT_DOUBLE_EQUAL(s.compute + s.comm + s.overlap + s.skew, s.total, 1e-15);
  /* B's two allreduce entries are one kind: 3 + 2 ms, 2 calls */
  CU_ASSERT_EQUAL_FATAL(b->colls->len, 1);
  CU_ASSERT_STRING_EQUAL(g_array_index(b->colls, compare_coll, 0).key, "allreduce/dp/grad_sync");
  CU_ASSERT_DOUBLE_EQUAL(g_array_index(b->colls, compare_coll, 0).time_s, 0.005, 1e-15);
  CU_ASSERT_EQUAL(g_array_index(b->colls, compare_coll, 0).calls, 2);
  /* per-rank spread: 10 - 9 ms and 12.5 - 11.5 ms */
  CU_ASSERT_DOUBLE_EQUAL(compare_rank_spread_s(a), 0.001, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(compare_rank_spread_s(b), 0.001, 1e-15);
  /* B against itself: no difference anywhere */
  compare_split_error(b, b, &s);
  CU_ASSERT_EQUAL(s.total, 0);
  CU_ASSERT_EQUAL(s.skew, 0);
  compare_doc_free(a);
  compare_doc_free(b);
}

static void test_comm_default(void) {
  /* without comm_s, all communication is exposed + overlapped */
  char *t = g_strdup(doc_a);
  char *p = strstr(t, "\"comm_s\": 0.005,");
  memcpy(p, "\"xomm_s\"", 8);
  compare_doc *a = compare_doc_parse("a.json", t, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_DOUBLE_EQUAL(a->comm_s, 0.005, 1e-15);
  compare_doc_free(a);
  g_free(t);
}

static void expect_error(const char *text, const char *message) {
  GError *err = NULL;
  compare_doc *d = compare_doc_parse("x.json", text, &err);
  CU_ASSERT_PTR_NULL(d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(err);
  CU_ASSERT_STRING_EQUAL(err->message, message);
  if (strcmp(err->message, message) != 0) fprintf(stderr, "got: %s\n", err->message);
  CU_ASSERT_EQUAL(err->code, DL_ERR_INPUT);
  g_error_free(err);
  compare_doc_free(d);
}

static void test_bad_input(void) {
  /* (cJSON reports the byte after the bad "]" here; the column convention is the workload
   * loader's) */
  expect_error("{\n  \"mode\": \"sim\",\n  \"config\": {]\n}", "x.json:3:15: malformed JSON near ' }'");
  expect_error("[1, 2]", "x.json: expected a JSON object (a dlsim result)");
  expect_error("{\"config\": {\"gpus\": 2}}",
               "x.json: mode: expected sim, analytic or real (a dlsim result), got nothing");
  expect_error("{\"mode\": \"sim\", \"config\": {\"gpus\": 2}}",
               "x.json: config.workload: expected a string");
  expect_error("{\"mode\": \"sim\", \"config\": {\"workload\": \"w\", \"gpus\": 2, \"batch\": 8}, "
               "\"iteration_time_s\": 1, \"breakdown_s\": {\"compute\": 1, \"exposed_comm\": "
               "\"x\"}}",
               "x.json: breakdown_s.exposed_comm: expected a number >= 0");
  expect_error("{\"mode\": \"sim\", \"config\": {\"workload\": \"w\", \"gpus\": 2, \"batch\": 8}, "
               "\"iteration_time_s\": 0, \"breakdown_s\": {}}",
               "x.json: iteration_time_s: expected a time in (0, 1e9] s, got 0");
  expect_error(
      "{\"mode\": \"real\", \"config\": {\"workload\": \"w\", \"gpus\": 2, \"batch\": 8}, "
      "\"iteration_time_s\": 1, \"breakdown_s\": {\"compute\": 1, \"exposed_comm\": 0, "
      "\"overlapped_comm\": 0, \"bubble\": 0, \"idle\": 0}, \"ranks\": [{\"compute_s\": 1}]}",
      "x.json: ranks[0].iteration_time_s: expected a number >= 0, got nothing");

  /* different configurations */
  GError *err = NULL;
  compare_doc *a = compare_doc_parse("a.json", doc_a, NULL);
  char *t = g_strdup(doc_b);
  memcpy(strstr(t, "\"batch\": 256"), "\"batch\": 128", 12);
  compare_doc *b = compare_doc_parse("b.json", t, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_FALSE(compare_check_match(a, b, &err));
  CU_ASSERT_STRING_EQUAL(err->message,
                         "b.json: config.batch: expected 256 (as in a.json), got 128");
  g_clear_error(&err);
  compare_doc_free(a);
  compare_doc_free(b);
  g_free(t);
}

static void test_table(void) {
  compare_row rows[3] = {
      {g_strdup("dp1-mlp-small-b64"), 1, 3, 0.010, 0.009, 0.011, 0.011,
       {0.10, 0.08, 0.0, 0.0, 0.02}, NULL},
      {g_strdup("dp2-mlp-small-b64"), 2, 3, 0.020, 0.019, 0.022, 0.016,
       {-0.20, -0.05, -0.10, -0.03, -0.02}, NULL},
      {g_strdup("dp4-mlp-small-b64"), 4, 0, 0, 0, 0, -1, {0, 0, 0, 0, 0},
       g_strdup("skipped: \"oversubscribed\"")},
  };
  double mean = -1, mx = -1;
  int used = -1;
  compare_table_stats(rows, 3, &mean, &mx, &used);
  CU_ASSERT_EQUAL(used, 2);
  CU_ASSERT_DOUBLE_EQUAL(mean, 0.15, 1e-12); /* (10 % + 20 %) / 2 */
  CU_ASSERT_DOUBLE_EQUAL(mx, 0.20, 1e-12);
  char *csv = compare_table_csv(rows, 3);
  CU_ASSERT_STRING_EQUAL(csv,
      "config,gpus,repeats,real_s,real_min_s,real_max_s,sim_s,error,err_compute,err_comm,"
      "err_overlap,err_skew,note\n"
      "dp1-mlp-small-b64,1,3,0.01,0.009,0.011,0.011,0.1,0.08,0,0,0.02,\n"
      "dp2-mlp-small-b64,2,3,0.02,0.019,0.022,0.016,-0.2,-0.05,-0.1,-0.03,-0.02,\n"
      "dp4-mlp-small-b64,4,0,,,,,,,,,,\"skipped: \"\"oversubscribed\"\"\"\n");
  g_free(csv);

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  compare_table_print(rows, 3, f);
  fclose(f);
  CU_ASSERT_STRING_EQUAL(buf,
      "config                   reps   real (ms)    sim (ms)    error  compute     comm  overlap"
      "     skew\n"
      "dp1-mlp-small-b64           3      10.000      11.000   +10.0%    +8.0%    +0.0%    +0.0%"
      "    +2.0%\n"
      "dp2-mlp-small-b64           3      20.000      16.000   -20.0%    -5.0%   -10.0%    -3.0%"
      "    -2.0%\n"
      "dp4-mlp-small-b64           0           -           - (skipped: \"oversubscribed\")\n"
      "mean absolute error 15.0%, max 20.0% (2 configurations); largest part: compute (mean "
      "|6.5%|)\n");
  free(buf);
  for (int i = 0; i < 3; i++) compare_row_release(&rows[i]);
}

static const dl_cu_test compare_tests[] = {
    DL_CU_TEST(test_split), DL_CU_TEST(test_comm_default), DL_CU_TEST(test_bad_input),
    DL_CU_TEST(test_table), DL_CU_END,
};

const dl_cu_suite dl_cu_suites[] = {{"compare", compare_tests}, {NULL, NULL}};
