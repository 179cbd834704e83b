/* interval.c — prediction intervals from kernel draws and validation cases (interval.h). */
#include "study/interval.h"

#include <math.h>

int interval_loo(const double *e, int n, double *lo, double *hi) {
  double *rest = g_new(double, MAX(n - 1, 1));
  int covered = 0;
  for (int i = 0; i < n; i++) {
    int m = 0;
    for (int j = 0; j < n; j++)
      if (j != i) rest[m++] = e[j];
    const double a = res_percentile(rest, m, 5), b = res_percentile(rest, m, 95);
    if (lo) lo[i] = a;
    if (hi) hi[i] = b;
    covered += e[i] >= a && e[i] <= b;
  }
  g_free(rest);
  return covered;
}

void interval_set(res_result *r, const kdb *db) {
  const double *real, *pred;
  const char *name = NULL;
  const int n = kdb_validation(db, &real, &pred, &name);
  r->interval = FALSE;
  r->interval_cases = 0;
  if (!(r->iteration_time_s > 0)) return;
  if (n < 2) { /* no model error known: the draws' spread alone, where there are draws */
    if (!r->samples_s) return;
    const double *t = (const double *)r->samples_s->data;
    const int m = (int)r->samples_s->len;
    r->interval = TRUE;
    r->interval_p5_s = res_percentile(t, m, 5);
    r->interval_p50_s = res_percentile(t, m, 50);
    r->interval_p95_s = res_percentile(t, m, 95);
    return;
  }
  double *e = g_new(double, n);
  for (int i = 0; i < n; i++) e[i] = log(real[i] / pred[i]);
  const int draws = r->samples_s ? (int)r->samples_s->len : 1;
  const double *t = r->samples_s ? (const double *)r->samples_s->data : &r->iteration_time_s;
  double *x = g_new(double, (gsize)draws * (gsize)n); /* <= 10,000 draws x 1,000 cases */
  for (int s = 0; s < draws; s++)
    for (int i = 0; i < n; i++) x[(gsize)s * n + i] = t[s] * exp(e[i]);
  r->interval_p5_s = res_percentile(x, draws * n, 5);
  r->interval_p50_s = res_percentile(x, draws * n, 50);
  r->interval_p95_s = res_percentile(x, draws * n, 95);
  r->interval = TRUE;
  r->interval_cases = n;
  r->interval_loo_covered = interval_loo(e, n, NULL, NULL);
  g_free(r->interval_source);
  r->interval_source = g_strdup(name);
  g_free(x);
  g_free(e);
}
