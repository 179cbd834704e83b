/* test_sweep.c — spec expansion, row formatting and the resumable store of `dlsim sweep`. */
#include <glib/gstdio.h>
#include <string.h>

#include "cu_main.h"
#include "core/dl_common.h"
#include "study/sweep.h"

static const char *SPEC30 =
    "{\"fixed\": {\"workload\": \"resnet18-cifar100\", \"mode\": \"analytic\"},"
    " \"axes\": {\"gpus\": [1, 2, 4, 8, 16], \"batch\": [256, 512],"
    "  \"strategy\": [{\"label\": \"dp\"}, {\"label\": \"grid\", \"grid\": \"2x2\"}, {\"tp\": "
    "2}]}}";

static sweep_config *at(GPtrArray *a, guint i) { return g_ptr_array_index(a, i); }

static void test_expand_order(void) {
  GError *e = NULL;
  GPtrArray *a = sweep_expand(SPEC30, "s.json", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_EQUAL(a->len, 5 * 2 * 3);
  /* the last axis varies fastest; options in the table's order, not the spec's */
  CU_ASSERT_STRING_EQUAL(at(a, 0)->key,
                         "--workload resnet18-cifar100 --mode analytic --gpus 1 --batch 256");
  CU_ASSERT_STRING_EQUAL(
      at(a, 1)->key,
      "--workload resnet18-cifar100 --mode analytic --gpus 1 --batch 256 --grid 2x2");
  CU_ASSERT_STRING_EQUAL(
      at(a, 2)->key, "--workload resnet18-cifar100 --mode analytic --gpus 1 --batch 256 --tp 2");
  CU_ASSERT_STRING_EQUAL(at(a, 3)->key,
                         "--workload resnet18-cifar100 --mode analytic --gpus 1 --batch 512");
  CU_ASSERT_STRING_EQUAL(
      at(a, 29)->key, "--workload resnet18-cifar100 --mode analytic --gpus 16 --batch 512 --tp 2");
  CU_ASSERT_STRING_EQUAL(at(a, 0)->label, "dp");
  CU_ASSERT_STRING_EQUAL(at(a, 1)->label, "grid");
  CU_ASSERT_STRING_EQUAL(at(a, 2)->label, "tp=2"); /* no label: the options themselves */
  char *joined = g_strjoinv(" ", at(a, 1)->args);
  CU_ASSERT_STRING_EQUAL(joined, at(a, 1)->key);
  g_free(joined);
  CU_ASSERT_EQUAL(g_strv_length(at(a, 1)->args), 10);
  g_ptr_array_unref(a);
}

static void test_expand_dedup_and_per_gpu(void) {
  GError *e = NULL;
  GPtrArray *a = sweep_expand("{\"axes\": {\"gpus\": [2, 4, 2], \"batch_per_gpu\": [32],"
                           " \"recompute\": [false, true]}}",
                           "s.json", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_EQUAL(a->len, 4); /* the second gpus 2 repeats the first two keys */
  CU_ASSERT_STRING_EQUAL(at(a, 0)->key, "--gpus 2 --batch 64");
  CU_ASSERT_STRING_EQUAL(at(a, 1)->key, "--gpus 2 --batch 64 --recompute");
  CU_ASSERT_STRING_EQUAL(at(a, 3)->key, "--gpus 4 --batch 128 --recompute");
  CU_ASSERT_STRING_EQUAL(at(a, 0)->label, "");
  g_ptr_array_unref(a);
}

static void expect_error(const char *spec, const char *msg) {
  GError *e = NULL;
  GPtrArray *a = sweep_expand(spec, "s.json", &e);
  CU_ASSERT_PTR_NULL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_EQUAL(e->code, DL_ERR_INPUT);
  if (!g_str_has_prefix(e->message, msg)) fprintf(stderr, "\n  got: %s\n", e->message);
  CU_ASSERT_TRUE(g_str_has_prefix(e->message, msg));
  g_error_free(e);
  if (a) g_ptr_array_unref(a);
}

static void test_expand_errors(void) {
  expect_error("{\"axes\": {\"strategy\": [{\"dp\": 2}, {\"pr\": 2}]}}",
               "s.json: axes.strategy[1].pr: unknown option (known: platform, workload,");
  expect_error("{\"axes\": {\"gpus\": [2, 2.5]}}", "s.json: axes.gpus[1]: expected an integer");
  expect_error("{\"fixed\": {\"gpus\": 4}, \"axes\": {\"gpus\": [2]}}",
               "s.json: axes.gpus[0]: 'gpus' is already set by fixed");
  expect_error("{\"axes\": {\"batch_per_gpu\": [2]}}",
               "s.json: axes.batch_per_gpu: batch_per_gpu needs gpus to be set");
  expect_error("{\"axes\": {\"gpus\": []}}", "s.json: axes.gpus: expected a non-empty array");
  expect_error("{\"fixd\": {}}", "s.json: fixd: unknown key");
  expect_error("{\"axes\": ", "s.json:1:10: malformed JSON near ''");
}

static void test_shard(void) {
  GError *e = NULL;
  GPtrArray *a = sweep_expand("{\"axes\": {\"gpus\": [1, 2, 3, 4, 5, 6, 7]}}", "s.json", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  sweep_shard(a, 1, 3);
  CU_ASSERT_EQUAL_FATAL(a->len, 2);
  CU_ASSERT_STRING_EQUAL(at(a, 0)->key, "--gpus 2");
  CU_ASSERT_STRING_EQUAL(at(a, 1)->key, "--gpus 5");
  g_ptr_array_unref(a);
  int i = -1, n = -1;
  CU_ASSERT_TRUE(sweep_shard_parse("3/8", &i, &n, NULL));
  CU_ASSERT_EQUAL(i, 3);
  CU_ASSERT_EQUAL(n, 8);
  CU_ASSERT_FALSE(sweep_shard_parse("8/8", &i, &n, NULL));
  CU_ASSERT_FALSE(sweep_shard_parse("1/", &i, &n, NULL));
  CU_ASSERT_FALSE(sweep_shard_parse("-1/2", &i, &n, NULL));
}

static void test_rows(void) {
  GError *e = NULL;
  GPtrArray *a = sweep_expand(
      "{\"axes\": {\"gpus\": [4], \"strategy\": [{\"label\": \"a, \\\"b\\\"\","
      " \"grid\": \"2x2\"}]}}",
      "s.json", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  char *row = sweep_csv_row(at(a, 0), "invalid", "x, y", NULL);
  /* key, status, quoted reason, quoted label, then platform, workload, mode, gpus (requested) */
  CU_ASSERT_TRUE(
      g_str_has_prefix(row, "--gpus 4 --grid 2x2,invalid,\"x, y\",\"a, \"\"b\"\"\",,,,4,"));
  CU_ASSERT_TRUE(g_str_has_suffix(row, "\n"));
  char *k = sweep_csv_first_field(row);
  CU_ASSERT_STRING_EQUAL(k, "--gpus 4 --grid 2x2");
  g_free(k);
  /* as many fields as the header */
  int commas_h = 0;
  for (const char *p = sweep_csv_header(); *p; p++) commas_h += *p == ',';
  CU_ASSERT_EQUAL(commas_h, 42); /* 43 columns: ... kdb_measured .. kdb_recorded */
  g_free(row);

  cJSON *res = cJSON_Parse("{\"mode\": \"analytic\", \"config\": {\"gpus\": 4, \"grid\": \"2x2\"},"
                           " \"iteration_time_s\": 0.125, \"breakdown_s\": {\"compute\": 0.1},"
                           " \"fits_in_memory\": true}");
  row = sweep_csv_row(at(a, 0), "ok", NULL, res);
  CU_ASSERT_PTR_NOT_NULL(strstr(row, ",ok,,"));
  CU_ASSERT_PTR_NOT_NULL(strstr(row, ",analytic,4,"));
  CU_ASSERT_PTR_NOT_NULL(strstr(row, ",0.125,,,0.1,"));
  CU_ASSERT_PTR_NOT_NULL(strstr(row, ",true,"));
  g_free(row);
  char *jl = sweep_jsonl_row(at(a, 0), "ok", NULL, res);
  CU_ASSERT_PTR_EQUAL(strchr(jl, '\n'), jl + strlen(jl) - 1); /* one line */
  cJSON *o = cJSON_Parse(jl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(o);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "key")->valuestring, "--gpus 4 --grid 2x2");
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(o, "iteration_time_s")->valuedouble, 0.125);
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "options"), "gpus")->valueint, 4);
  cJSON_Delete(o);
  g_free(jl);
  cJSON_Delete(res);
  g_ptr_array_unref(a);
}

static void put(const char *path, const char *text) {
  CU_ASSERT_TRUE(g_file_set_contents(path, text, -1, NULL));
}

static char *get(const char *path) {
  char *t = NULL;
  g_file_get_contents(path, &t, NULL, NULL);
  return t;
}

static void test_store_resume(void) {
  char *dir = g_dir_make_tmp("test-sweep-XXXXXX", NULL);
  char *csv = g_build_filename(dir, "s.csv", NULL), *jsonl = g_build_filename(dir, "s.jsonl", NULL);
  const char *h = sweep_csv_header();
  /* rows a and b in the CSV, a torn row c; the JSONL holds a, c and a torn line */
  char *ctext = g_strconcat(h, "a,ok,\n", "b,invalid,\"no, really\"\n", "c,o", NULL);
  put(csv, ctext);
  put(jsonl, "{\"key\":\"a\"}\n{\"key\":\"c\"}\n{\"key\":\"b\",\"st");
  sweep_store st;
  GError *e = NULL;
  CU_ASSERT_TRUE_FATAL(sweep_store_open(&st, csv, jsonl, &e));
  CU_ASSERT_EQUAL(g_hash_table_size(st.done), 1);
  CU_ASSERT_STRING_EQUAL(g_hash_table_lookup(st.done, "a"), "ok");
  CU_ASSERT_EQUAL(st.dropped, 4); /* two torn lines, b (CSV only), c (JSONL only) */
  CU_ASSERT_TRUE(sweep_store_append(&st, "b", "invalid", "b,invalid,x\n", "{\"key\":\"b\"}\n", &e));
  sweep_store_close(&st);
  char *got = get(csv), *want = g_strconcat(h, "a,ok,\n", "b,invalid,x\n", NULL);
  CU_ASSERT_STRING_EQUAL(got, want);
  g_free(got);
  got = get(jsonl);
  CU_ASSERT_STRING_EQUAL(got, "{\"key\":\"a\"}\n{\"key\":\"b\"}\n");
  g_free(got);

  /* reopening a consistent pair drops nothing */
  CU_ASSERT_TRUE_FATAL(sweep_store_open(&st, csv, jsonl, &e));
  CU_ASSERT_EQUAL(st.dropped, 0);
  CU_ASSERT_EQUAL(g_hash_table_size(st.done), 2);
  sweep_store_close(&st);

  /* merge with a second shard that repeats a: one row per key, the first file wins */
  char *csv2 = g_build_filename(dir, "t.csv", NULL), *out = g_build_filename(dir, "m.csv", NULL);
  char *c2 = g_strconcat(h, "a,invalid,later\n", "d,ok,\n", NULL);
  put(csv2, c2);
  char *inputs[] = {csv, csv2, NULL};
  CU_ASSERT_EQUAL(sweep_merge(out, NULL, inputs, &e), 3);
  got = get(out);
  g_free(want);
  want = g_strconcat(h, "a,ok,\n", "b,invalid,x\n", "d,ok,\n", NULL);
  CU_ASSERT_STRING_EQUAL(got, want);

  /* a CSV of another layout is refused, not appended to */
  put(out, "key,status\n");
  CU_ASSERT_FALSE(sweep_store_open(&st, out, NULL, &e));
  CU_ASSERT_TRUE(e && e->code == DL_ERR_INPUT);
  g_clear_error(&e);

  g_free(got);
  g_free(want);
  g_free(c2);
  g_free(ctext);
  const char *names[] = {"s.csv", "s.jsonl", "t.csv", "m.csv"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    char *p = g_build_filename(dir, names[i], NULL);
    g_unlink(p);
    g_free(p);
  }
  g_rmdir(dir);
  g_free(csv2);
  g_free(out);
  g_free(csv);
  g_free(jsonl);
  g_free(dir);
}

static const dl_cu_test expand_tests[] = {
    DL_CU_TEST(test_expand_order), DL_CU_TEST(test_expand_dedup_and_per_gpu),
    DL_CU_TEST(test_expand_errors), DL_CU_TEST(test_shard), DL_CU_END};
static const dl_cu_test file_tests[] = {DL_CU_TEST(test_rows), DL_CU_TEST(test_store_resume),
                                        DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"sweep_expand", expand_tests}, {"sweep_files", file_tests},
                                    {NULL, NULL}};
