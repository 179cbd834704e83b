/* degrade.c — links of a platform file with their bandwidth scaled (--degrade; platform.h). */
#include "platform/platform.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"

/* The value of attribute `name` inside the tag [tag, end): its first character and length, or
 * NULL. Either quote; the name must stand alone (" id=" is not "xid="). */
static const char *attr(const char *tag, const char *end, const char *name, size_t *len) {
  const size_t n = strlen(name);
  for (const char *p = tag; p + n + 2 < end; p++) {
    if (!g_ascii_isspace(p[0]) || strncmp(p + 1, name, n) != 0) continue;
    const char *q = p + 1 + n;
    while (q < end && g_ascii_isspace(*q)) q++;
    if (q >= end || *q != '=') continue;
    q++;
    while (q < end && g_ascii_isspace(*q)) q++;
    if (q >= end || (*q != '"' && *q != '\'')) continue;
    const char *close = memchr(q + 1, *q, (size_t)(end - q - 1));
    if (!close) return NULL;
    *len = (size_t)(close - q - 1);
    return q + 1;
  }
  return NULL;
}

char *plat_xml_scale_links(const char *path, const char *xml, const char *const *names,
                           const double *factors, int n, GError **err) {
  GHashTable *want = g_hash_table_new(g_str_hash, g_str_equal); /* name -> index + 1 */
  for (int i = 0; i < n; i++) g_hash_table_insert(want, (gpointer)names[i], GINT_TO_POINTER(i + 1));
  int *seen = g_new0(int, MAX(n, 1));
  GString *out = g_string_sized_new(strlen(xml) + 64 * (gsize)n);
  const char *p = xml;
  gboolean ok = TRUE;
  for (const char *at; ok && (at = strstr(p, "<link")) != NULL;) {
    const char *end = strchr(at, '>');
    if (!end) break; /* SimGrid has read the file: it is well formed */
    size_t il, bl;
    const char *id = g_ascii_isspace(at[5]) ? attr(at + 5, end, "id", &il) : NULL;
    char *name = id ? g_strndup(id, il) : NULL;
    const int k = name ? GPOINTER_TO_INT(g_hash_table_lookup(want, name)) - 1 : -1;
    g_free(name);
    const char *bw = k >= 0 ? attr(at + 5, end, "bandwidth", &bl) : NULL;
    if (k < 0) {
      g_string_append_len(out, p, end + 1 - p);
      p = end + 1;
      continue;
    }
    char *text = bw ? g_strndup(bw, bl) : NULL;
    double bps = 0;
    if (!text || !plat_parse_bandwidth(text, &bps) || !(bps > 0)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--degrade %s: %s: the link's bandwidth '%s' is "
                  "not a single figure dlsim can scale", names[k], path, text ? text : "");
      ok = FALSE;
    } else {
      seen[k]++;
      g_string_append_len(out, p, bw - p);
      g_string_append_printf(out, "%.17gBps", bps * factors[k]);
      p = bw + bl;
    }
    g_free(text);
  }
  for (int i = 0; ok && i < n; i++)
    if (seen[i] != 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--degrade %s: %s has %s <link id=\"%s\"> (name a "
                  "link of the file; a <cluster>'s links have no element to change)", names[i],
                  path, seen[i] ? "more than one" : "no", names[i]);
      ok = FALSE;
    }
  if (ok) g_string_append(out, p);
  g_free(seen);
  g_hash_table_destroy(want);
  return g_string_free(out, !ok);
}
