/* test_child.c — a child's progress lines: dl_child_run_watched hands every standard-error line
 * with the prefix to the callback as it arrives (split across reads or not, the last one without
 * a line break too) and keeps every other line, in order, for the error text. */
#include <string.h>

#include "cu_main.h"
#include "core/child.h"

static void collect(const char *text, void *data) { g_ptr_array_add(data, g_strdup(text)); }

static void test_watched_lines(void) {
  GPtrArray *got = g_ptr_array_new_with_free_func(g_free);
  const dl_child_watch w = {"dlsim-progress: ", collect, got};
  /* a long unwatched line, watched lines around it, one written in two pieces, none at the end */
  const char *script =
      "printf 'dlsim-progress: 1\\nwarning: a\\n' >&2; "
      "printf 'dlsim-progress: 2' >&2; sleep 0.05; printf '5\\n' >&2; "
      "head -c 70000 /dev/zero | tr '\\0' x >&2; printf '\\nlast\\n' >&2; "
      "printf 'dlsim-progress: 3' >&2; echo out";
  const char *argv[] = {"/bin/sh", "-c", script, NULL};
  char *out = NULL, *errtext = NULL;
  int ws = 0;
  GError *e = NULL;
  CU_ASSERT_FATAL(dl_child_run_watched(argv, &out, &errtext, &ws, &w, &e));
  CU_ASSERT_EQUAL(ws, 0);
  CU_ASSERT_STRING_EQUAL(out, "out\n");
  CU_ASSERT_EQUAL_FATAL(got->len, 3);
  CU_ASSERT_STRING_EQUAL(g_ptr_array_index(got, 0), "1");
  CU_ASSERT_STRING_EQUAL(g_ptr_array_index(got, 1), "25");
  CU_ASSERT_STRING_EQUAL(g_ptr_array_index(got, 2), "3");
  CU_ASSERT(g_str_has_prefix(errtext, "warning: a\nxxx"));
  CU_ASSERT(g_str_has_suffix(errtext, "xxx\nlast\n"));
  CU_ASSERT_EQUAL(strlen(errtext), strlen("warning: a\n") + 70000 + strlen("\nlast\n"));
  g_free(out);
  g_free(errtext);
  g_ptr_array_free(got, TRUE);
}

static const dl_cu_test child_tests[] = {DL_CU_TEST(test_watched_lines), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"child", child_tests}, {NULL, NULL}};
