/* factor.c — SimGrid's piecewise bandwidth and latency factors (smpi/bw-factor, smpi/lat-factor),
 * read as SimGrid 3.32 reads them (src/smpi/internals/smpi_utils.cpp parse_factor, and
 * NetworkSmpiModel::get_bandwidth_factor): "SIZE:VALUE;SIZE:VALUE;..." sorted by SIZE; a message
 * of `size` bytes gets the VALUE of the largest SIZE strictly below it, and 1 when there is
 * none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

static int by_threshold(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

gboolean plat_factor_parse(const char *spec, plat_factor *f) {
  memset(f, 0, sizeof *f);
  if (!spec || !*spec) return FALSE;
  char **items = g_strsplit(spec, ";", -1);
  int n = (int)g_strv_length(items);
  double *pairs = g_new0(double, 2 * (n > 0 ? n : 1));
  gboolean ok = n > 0;
  int k = 0;
  for (int i = 0; ok && i < n; i++) {
    if (!*g_strstrip(items[i])) continue; /* "a:b;" */
    char *colon = strchr(items[i], ':'), *end = NULL;
    double t = g_ascii_strtod(items[i], &end);
    ok = colon && end == colon && t >= 0 && t <= G_MAXINT;
    if (!ok) break;
    double v = g_ascii_strtod(colon + 1, &end);
    ok = end != colon + 1 && *end == '\0' && isfinite(v) && v >= 0;
    pairs[2 * k] = floor(t), pairs[2 * k + 1] = v;
    k++;
  }
  g_strfreev(items);
  if (!ok || k == 0) {
    g_free(pairs);
    return FALSE;
  }
  qsort(pairs, (size_t)k, 2 * sizeof(double), by_threshold);
  f->n = k;
  f->pairs = pairs;
  return TRUE;
}

double plat_factor_at(const plat_factor *f, double size) {
  double current = 1.0;
  for (int i = 0; f && i < f->n; i++) {
    if (size <= f->pairs[2 * i]) return current;
    current = f->pairs[2 * i + 1];
  }
  return current;
}

void plat_msg_times(const plat_factor *lat, const plat_factor *bw, double latency_s, double bps,
                    double bytes, double *lat_s, double *xfer_s) {
  *lat_s = latency_s * plat_factor_at(lat, bytes);
  *xfer_s = bytes / (bps * plat_factor_at(bw, bytes));
}

void plat_factor_clear(plat_factor *f) {
  g_free(f->pairs);
  memset(f, 0, sizeof *f);
}
