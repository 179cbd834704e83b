/* dl_common.c — error domain, data directory, name resolution, whole-file I/O. */
#include "core/dl_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifndef DLSIM_SOURCE_DIR
#define DLSIM_SOURCE_DIR "."
#endif

GQuark dl_error_quark(void) { return g_quark_from_static_string("dlsim-error"); }

const char *dl_datadir(void) {
  const char *env = g_getenv("DLSIM_DATA_DIR");
  return (env && *env) ? env : DLSIM_SOURCE_DIR;
}

static char *list_names(const char *dir, const char *ext) {
  GString *s = g_string_new(NULL);
  GDir *d = g_dir_open(dir, 0, NULL);
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  if (d) {
    const char *n;
    while ((n = g_dir_read_name(d)) != NULL)
      if (g_str_has_suffix(n, ext))
        g_ptr_array_add(names, g_strndup(n, strlen(n) - strlen(ext)));
    g_dir_close(d);
  }
  for (guint i = 0; i < names->len; i++) { /* few names: a plain sort keeps the message stable */
    for (guint j = i + 1; j < names->len; j++)
      if (strcmp(names->pdata[i], names->pdata[j]) > 0) {
        gpointer t = names->pdata[i];
        names->pdata[i] = names->pdata[j];
        names->pdata[j] = t;
      }
  }
  for (guint i = 0; i < names->len; i++)
    g_string_append_printf(s, "%s%s", i ? ", " : "", (char *)names->pdata[i]);
  g_ptr_array_free(names, TRUE);
  return g_string_free(s, FALSE);
}

char *dl_resolve(const char *what, const char *subdir, const char *name, const char *ext,
                 GError **err) {
  if (!name || !*name) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: empty name", what);
    return NULL;
  }
  if (strchr(name, '/') || g_file_test(name, G_FILE_TEST_IS_REGULAR)) {
    if (!g_file_test(name, G_FILE_TEST_IS_REGULAR)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: no such file", what, name);
      return NULL;
    }
    return g_strdup(name);
  }
  char *dir = g_build_filename(dl_datadir(), subdir, NULL);
  char *file = g_strconcat(name, ext, NULL);
  char *path = g_build_filename(dir, file, NULL);
  g_free(file);
  if (!g_file_test(path, G_FILE_TEST_IS_REGULAR)) {
    char *names = list_names(dir, ext);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: unknown name '%s' (known: %s; or give a file path)",
                what, name, *names ? names : "none");
    g_free(names);
    g_free(path);
    path = NULL;
  }
  g_free(dir);
  return path;
}

char *dl_read_file(const char *path, gsize *len, GError **err) {
  char *data = NULL;
  GError *e = NULL;
  if (!g_file_get_contents(path, &data, len, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cannot read: %s", path, e->message);
    g_error_free(e);
    return NULL;
  }
  return data;
}

gboolean dl_write_file_atomic(const char *path, const char *data, gsize len, GError **err) {
  GError *e = NULL;
  /* g_file_set_contents writes a temporary file beside `path` and renames it into place. */
  if (!g_file_set_contents(path, data, (gssize)len, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write: %s", path, e->message);
    g_error_free(e);
    return FALSE;
  }
  return TRUE;
}

gboolean dl_parse_bytes(const char *text, double *bytes) {
  static const struct { const char *suffix; double mult; } units[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},         {"GB", 1e9},            {"TB", 1e12},
      {"K", 1e3},      {"M", 1e6},          {"G", 1e9},             {"B", 1.0},
  };
  char *end = NULL;
  errno = 0;
  double v = g_ascii_strtod(text, &end);
  if (end == text || errno || v < 0) return FALSE;
  double mult = 1.0;
  if (*end) {
    gboolean found = FALSE;
    for (size_t i = 0; i < G_N_ELEMENTS(units); i++)
      if (strcmp(end, units[i].suffix) == 0) {
        mult = units[i].mult;
        found = TRUE;
        break;
      }
    if (!found) return FALSE;
  }
  *bytes = v * mult;
  return TRUE;
}

char *dl_last_line(const char *text) {
  char **lines = g_strsplit(text ? text : "", "\n", -1);
  const char *found = NULL;
  for (int i = 0; lines[i]; i++)
    if (*g_strstrip(lines[i])) found = lines[i];
  char *out = g_strdup(found ? found : "(no message)");
  g_strfreev(lines);
  return out;
}
