/* driver.c — runs a fuzz target over files without libFuzzer (gcc builds, CI): every file given,
 * and every file in every directory given (sorted), goes once through LLVMFuzzerTestOneInput.
 * Built with -DDLSIM_FUZZ=ON and clang, the targets link libFuzzer's own main instead. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <glib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  gchar *data = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &data, &len, NULL)) {
    fprintf(stderr, "%s: cannot read\n", path);
    return 0;
  }
  LLVMFuzzerTestOneInput((const uint8_t *)data, len);
  g_free(data);
  return 1;
}

static int cmp(const void *a, const void *b) {
  return g_strcmp0(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (!g_file_test(argv[i], G_FILE_TEST_IS_DIR)) {
      n += run_file(argv[i]);
      continue;
    }
    GDir *d = g_dir_open(argv[i], 0, NULL);
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    const char *name;
    while (d && (name = g_dir_read_name(d))) g_ptr_array_add(names, g_build_filename(argv[i], name, NULL));
    if (d) g_dir_close(d);
    qsort(names->pdata, names->len, sizeof(char *), cmp);
    for (guint k = 0; k < names->len; k++)
      if (g_file_test(names->pdata[k], G_FILE_TEST_IS_REGULAR)) n += run_file(names->pdata[k]);
    g_ptr_array_free(names, TRUE);
  }
  printf("%s: %d inputs, no crash\n", argv[0], n);
  return n > 0 ? 0 : 1;
}
