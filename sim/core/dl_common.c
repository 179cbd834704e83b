/* dl_common.c — error domain, data directory, name resolution, whole-file I/O. */
#include "core/dl_common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
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
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: %s", what, name,
                  g_file_test(name, G_FILE_TEST_EXISTS) ? "not a regular file" : "no such file");
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

/* The file `path` would reach, newly allocated, or NULL when its directory cannot be resolved. */
static char *reached(const char *path) {
  char *r = realpath(path, NULL), *out = r ? g_strdup(r) : NULL;
  free(r);
  if (out) return out;
  char *dir = g_path_get_dirname(path), *base = g_path_get_basename(path);
  char *rd = realpath(dir, NULL);
  out = rd ? g_build_filename(rd, base, NULL) : NULL;
  free(rd);
  g_free(dir);
  g_free(base);
  return out;
}

gboolean dl_check_outputs(const char *const *out_names, const char *const *outs, int n_outs,
                          const char *const *in_names, const char *const *ins, int n_ins,
                          GError **err) {
  char **o = g_new0(char *, n_outs + 1), **in = g_new0(char *, n_ins + 1);
  gboolean ok = TRUE;
  for (int i = 0; i < n_outs; i++) o[i] = outs[i] ? reached(outs[i]) : NULL;
  for (int j = 0; j < n_ins; j++) in[j] = ins[j] ? reached(ins[j]) : NULL;
  for (int i = 0; i < n_outs && ok; i++) {
    for (int j = 0; o[i] && j < n_ins && ok; j++)
      if (in[j] && strcmp(o[i], in[j]) == 0) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s names the %s file (%s): an input is never "
                    "overwritten", out_names[i], in_names[j], outs[i]);
        ok = FALSE;
      }
    for (int k = i + 1; o[i] && k < n_outs && ok; k++)
      if (o[k] && strcmp(o[i], o[k]) == 0) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s and %s name the same file (%s)",
                    out_names[i], out_names[k], outs[i]);
        ok = FALSE;
      }
  }
  for (int i = 0; i < n_outs; i++) g_free(o[i]);
  for (int j = 0; j < n_ins; j++) g_free(in[j]);
  g_free(o);
  g_free(in);
  return ok;
}

char *dl_read_file(const char *path, gsize *len, GError **err) {
  /* O_NONBLOCK: opening a FIFO without a writer would wait forever */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cannot read: %s", path, g_strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  if (S_ISDIR(st.st_mode)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cannot read: is a directory", path);
    close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) { /* a FIFO, a device, a socket: inputs are files */
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cannot read: not a regular file", path);
    close(fd);
    return NULL;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  /* the size bound holds for a file that grows while it is read */
  GString *s = g_string_sized_new(S_ISREG(st.st_mode) ? (gsize)st.st_size + 1 : 4096);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cannot read: %s", path, g_strerror(errno));
      break;
    }
    if (n == 0) {
      close(fd);
      if (len) *len = s->len;
      return g_string_free(s, FALSE);
    }
    if (s->len + (gsize)n > DL_MAX_INPUT_BYTES) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: larger than %d MiB: not an input of dlsim",
                  path, DL_MAX_INPUT_BYTES >> 20);
      break;
    }
    g_string_append_len(s, buf, n);
  }
  close(fd);
  g_string_free(s, TRUE);
  return NULL;
}

/* `path` with its symbolic links followed (40 at most), as `cp` would write it: the final
 * target, which may not exist yet. Newly allocated. */
static char *final_target(const char *path) {
  char *cur = g_strdup(path);
  for (int hops = 0; hops < 40 && g_file_test(cur, G_FILE_TEST_IS_SYMLINK); hops++) {
    char *link = g_file_read_link(cur, NULL);
    if (!link) break;
    char *next;
    if (g_path_is_absolute(link)) {
      next = link;
    } else {
      char *dir = g_path_get_dirname(cur);
      next = g_build_filename(dir, link, NULL);
      g_free(dir);
      g_free(link);
    }
    g_free(cur);
    cur = next;
  }
  return cur;
}

double dl_phys_mem_bytes(void) {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (double)pages * (double)size : 0;
}

gboolean dl_check_writable(const char *what, const char *path, GError **err) {
  if (!path) return TRUE;
  if (!*path) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected a file name, got an empty one", what);
    return FALSE;
  }
  char *target = final_target(path), *dir = g_path_get_dirname(target);
  struct stat st;
  gboolean ok = FALSE;
  if (stat(target, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: is a directory", what, path);
    else if (!S_ISREG(st.st_mode) ? access(target, W_OK) != 0 : access(dir, W_OK | X_OK) != 0)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: cannot write there: %s", what, path,
                  g_strerror(errno));
    else
      ok = TRUE;
  } else if (!g_file_test(dir, G_FILE_TEST_IS_DIR)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: directory '%s' does not exist", what, path,
                dir);
  } else if (access(dir, W_OK | X_OK) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %s: cannot write in '%s': %s", what, path, dir,
                g_strerror(errno));
  } else {
    ok = TRUE;
  }
  g_free(dir);
  g_free(target);
  return ok;
}

gboolean dl_write_file_atomic(const char *path, const char *data, gsize len, GError **err) {
  char *target = final_target(path);
  struct stat st;
  gboolean ok = TRUE;
  if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write: is a directory", path);
    ok = FALSE;
  } else if (stat(target, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* a device, a pipe: written through, as cp does; nothing to replace atomically */
    int fd = open(target, O_WRONLY | O_CLOEXEC);
    gsize done = 0;
    while (fd >= 0 && done < len) {
      ssize_t n = write(fd, data + done, len - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += (gsize)n;
    }
    if (fd < 0 || done < len || close(fd) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write: %s", path, g_strerror(errno));
      ok = FALSE;
    }
  } else {
    /* a regular file (through its links): a temporary file beside it renamed into place */
    GError *e = NULL;
    if (!g_file_set_contents(target, data, (gssize)len, &e)) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write: %s", path, e->message);
      g_error_free(e);
      ok = FALSE;
    }
  }
  g_free(target);
  return ok;
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
  if (end == text || errno || !isfinite(v) || v < 0 || strpbrk(text, "xX")) return FALSE;
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
  return isfinite(*bytes);
}

gboolean dl_out_prefix_ok(const char *prefix, const char *writes, GError **err) {
  char *base = g_path_get_basename(prefix);
  const gboolean dir = !*prefix || g_str_has_suffix(prefix, "/") || !strcmp(base, ".") ||
                       !strcmp(base, "..");
  g_free(base);
  if (dir)
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out '%s': expected a prefix of file names (%s "
                "are written), not %s", prefix, writes, *prefix ? "a directory" : "an empty one");
  return !dir;
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

char *dl_one_line(const char *msg) {
  GString *s = g_string_new(NULL);
  for (const char *p = msg ? msg : ""; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '\n') g_string_append(s, "\\n");
    else if (ch == '\r') g_string_append(s, "\\r");
    else if (ch == '\t') g_string_append(s, "\\t");
    else if (ch < 0x20 || ch == 0x7f) g_string_append_c(s, '?');
    else g_string_append_c(s, (char)ch);
  }
  return g_string_free(s, FALSE);
}

/* The first number that is not finite under `o`, its JSON path appended to `path`. */
static gboolean find_nonfinite(const cJSON *o, GString *path) {
  if (cJSON_IsNumber(o)) return !isfinite(o->valuedouble);
  if (!cJSON_IsArray(o) && !cJSON_IsObject(o)) return FALSE;
  int i = 0;
  for (const cJSON *c = o->child; c; c = c->next, i++) {
    gsize at = path->len;
    if (cJSON_IsArray(o)) g_string_append_printf(path, "[%d]", i);
    else g_string_append_printf(path, "%s%s", at ? "." : "", c->string ? c->string : "");
    if (find_nonfinite(c, path)) return TRUE;
    g_string_truncate(path, at);
  }
  return FALSE;
}

gboolean dl_json_read_optional(const char *path, cJSON **root, GError **err) {
  *root = NULL;
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) return TRUE;
  gsize len = 0;
  char *text = dl_read_file(path, &len, err);
  *root = text ? dl_json_parse(path, text, len, err) : NULL;
  g_free(text);
  return *root != NULL;
}

cJSON *dl_json_parse(const char *path, const char *text, gsize len, GError **err) {
  const char *end = NULL;
  cJSON *root = memchr(text, '\0', len) ? NULL
                                         : cJSON_ParseWithLengthOpts(text, len + 1, &end, TRUE);
  if (!root) {
    gsize off = end && end >= text && end <= text + len ? (gsize)(end - text) : 0;
    if (memchr(text, '\0', len)) off = (gsize)((const char *)memchr(text, '\0', len) - text);
    int line = 1, col = 1;
    for (gsize k = 0; k < off; k++) {
      if (text[k] == '\n') line++, col = 1;
      else col++;
    }
    char near[24];
    gsize n = 0;
    for (gsize k = off; k < len && n + 1 < sizeof near; k++) {
      unsigned char ch = (unsigned char)text[k];
      near[n++] = ch < 0x20 || ch >= 0x7f ? ' ' : (char)ch;
    }
    near[n] = '\0';
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%d:%d: malformed JSON near '%s'", path, line,
                col, near);
    return NULL;
  }
  GString *jp = g_string_new(NULL);
  if (find_nonfinite(root, jp)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: number out of range", path,
                jp->len ? jp->str : "(top level)");
    cJSON_Delete(root);
    root = NULL;
  }
  g_string_free(jp, TRUE);
  return root;
}

void dl_format_duration(char *buf, size_t n, double s) {
  long t = (long)(s + 0.5);
  if (t >= 3600) g_snprintf(buf, n, "%ld h %02ld min", t / 3600, t / 60 % 60);
  else if (t >= 60) g_snprintf(buf, n, "%ld min %02ld s", t / 60, t % 60);
  else g_snprintf(buf, n, "%ld s", t);
}

void dl_csv_field(GString *s, const char *text) {
  if (!text) return;
  if (!strpbrk(text, ",\"\n\r")) {
    g_string_append(s, text);
    return;
  }
  g_string_append_c(s, '"');
  for (const char *p = text; *p; p++) {
    if (*p == '"') g_string_append(s, "\"\"");
    else if (*p == '\n' || *p == '\r') g_string_append_c(s, ' ');
    else g_string_append_c(s, *p);
  }
  g_string_append_c(s, '"');
}
