/* calibrate.c — ping-pong measurement, the piecewise fit of SMPI's network model, and the
 * calibrated platform (calibrate.h). */
#include "platform/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/child.h"
#include "core/dl_common.h"

/* ---- fitting ----------------------------------------------------------------------------------
 */

static int compare_point(const void *a, const void *b) {
  double x = ((const calib_point *)a)->size_bytes, y = ((const calib_point *)b)->size_bytes;
  return (x > y) - (x < y);
}

/* Least squares of t = a + c × s over pts[i..j) with weights 1/t² (relative error), a >= 0 and
 * c >= 0 (a negative estimate is clamped to 0 and the other refitted). Returns the summed squared
 * relative residuals. Sizes are scaled by the run's largest size for conditioning. */
static double fit_run(const calib_point *pts, int i, int j, double *a_out, double *c_out) {
  double scale = pts[j - 1].size_bytes;
  double Sw = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
  for (int k = i; k < j; k++) {
    double w = 1.0 / (pts[k].time_s * pts[k].time_s), x = pts[k].size_bytes / scale,
           y = pts[k].time_s;
    Sw += w;
    Sx += w * x;
    Sy += w * y;
    Sxx += w * x * x;
    Sxy += w * x * y;
  }
  double det = Sw * Sxx - Sx * Sx, a, c;
  if (j - i < 2 || det <= 1e-12 * Sw * Sxx) {
    c = 0;
    a = Sy / Sw;
  } else {
    c = (Sw * Sxy - Sx * Sy) / det;
    a = (Sy - c * Sx) / Sw;
  }
  if (c < 0) {
    c = 0;
    a = Sy / Sw;
  } else if (a < 0) {
    a = 0;
    c = Sxy / Sxx;
  }
  double sse = 0;
  for (int k = i; k < j; k++) {
    double r = (pts[k].time_s - a - c * pts[k].size_bytes / scale) / pts[k].time_s;
    sse += r * r;
  }
  *a_out = a;
  *c_out = c / scale;
  return sse;
}

gboolean calib_fit_points(const calib_point *in, int n, double penalty, calib_fit *out,
                          GError **err) {
  memset(out, 0, sizeof *out);
  if (n < 2) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "calibration: expected 2 or more sizes, got %d", n);
    return FALSE;
  }
  if (penalty <= 0) penalty = 0.02;
  calib_point *pts = g_memdup2(in, sizeof(calib_point) * (gsize)n);
  qsort(pts, (size_t)n, sizeof *pts, compare_point);
  gboolean ok = FALSE;
  double *best = NULL;
  int *from = NULL;
  for (int k = 0; k < n; k++)
    if (!(pts[k].size_bytes > 0) || !(pts[k].time_s > 0) || !isfinite(pts[k].time_s) ||
        (k > 0 && pts[k].size_bytes == pts[k - 1].size_bytes)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "calibration: size %.0f: expected distinct positive sizes and positive times, "
                  "got time %g s", pts[k].size_bytes, pts[k].time_s);
      goto out;
    }

  /* best[m][j]: cheapest cover of pts[0..j) by m runs; from[m][j]: where its last run starts. */
  const int K = CALIB_MAX_SEGMENTS, minlen = n >= 12 ? 3 : 2;
  best = g_new(double, (gsize)(K + 1) * (n + 1));
  from = g_new(int, (gsize)(K + 1) * (n + 1));
#define BEST(m, j) best[(m) * (n + 1) + (j)]
#define FROM(m, j) from[(m) * (n + 1) + (j)]
  for (int m = 0; m <= K; m++)
    for (int j = 0; j <= n; j++) {
      BEST(m, j) = INFINITY;
      FROM(m, j) = -1;
    }
  BEST(0, 0) = 0;
  for (int m = 1; m <= K; m++)
    for (int j = minlen; j <= n; j++)
      for (int i = 0; i <= j - minlen; i++) {
        if (!isfinite(BEST(m - 1, i))) continue;
        double a, c;
        double cost = BEST(m - 1, i) + fit_run(pts, i, j, &a, &c) + penalty;
        if (cost < BEST(m, j)) {
          BEST(m, j) = cost;
          FROM(m, j) = i;
        }
      }
  int mbest = 1;
  for (int m = 1; m <= K; m++)
    if (BEST(m, n) < BEST(mbest, n)) mbest = m;
  if (!isfinite(BEST(mbest, n))) mbest = 1;

  int starts[CALIB_MAX_SEGMENTS + 1];
  starts[mbest] = n;
  for (int m = mbest, j = n; m >= 1; m--) {
    j = FROM(m, j);
    starts[m - 1] = j < 0 ? 0 : j;
  }
#undef BEST
#undef FROM
  double a[CALIB_MAX_SEGMENTS], c[CALIB_MAX_SEGMENTS];
  for (int m = 0; m < mbest; m++) fit_run(pts, starts[m], starts[m + 1], &a[m], &c[m]);
  double L = a[0], B_inv = c[mbest - 1];
  if (!(L > 0)) L = pts[0].time_s; /* a run through the origin: its smallest time */
  if (!(B_inv > 0)) {
    double a0;
    fit_run(pts, 0, n, &a0, &B_inv);
  }
  if (!(B_inv > 0)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "calibration: times do not grow with message size (%.0f..%.0f bytes): no "
                "bandwidth to fit", pts[0].size_bytes, pts[n - 1].size_bytes);
    goto out;
  }
  out->latency_s = L;
  out->bandwidth_bps = 1.0 / B_inv;
  out->n_segments = mbest;
  for (int m = 0; m < mbest; m++) {
    calib_segment *s = &out->seg[m];
    s->threshold_bytes = m == 0 ? 0 : pts[starts[m]].size_bytes;
    if (c[m] > 0) {
      s->bw_factor = B_inv / c[m];
      s->lat_factor = a[m] / L;
    } else {
      /* flat run: transfer at B, the rest is latency (weighted mean of t - s/B) */
      double sw = 0, sy = 0;
      for (int k = starts[m]; k < starts[m + 1]; k++) {
        double w = 1.0 / (pts[k].time_s * pts[k].time_s);
        sw += w;
        sy += w * (pts[k].time_s - pts[k].size_bytes * B_inv);
      }
      s->bw_factor = 1.0;
      s->lat_factor = MAX(0.0, sy / sw) / L;
    }
  }
  ok = TRUE;
out:
  g_free(best);
  g_free(from);
  g_free(pts);
  return ok;
}

double calib_model_s(const calib_fit *f, double size_bytes) {
  const calib_segment *s = &f->seg[0];
  for (int m = 1; m < f->n_segments; m++)
    if (size_bytes >= f->seg[m].threshold_bytes) s = &f->seg[m];
  /* SMPI network model with factors: SimGrid's src/surf/network_smpi.cpp */
  return s->lat_factor * f->latency_s + size_bytes / (s->bw_factor * f->bandwidth_bps);
}

char *calib_factor_string(const calib_fit *f, gboolean bw) {
  GString *s = g_string_new(NULL);
  for (int m = f->n_segments - 1; m >= 0; m--) {
    char num[G_ASCII_DTOSTR_BUF_SIZE];
    g_ascii_formatd(num, sizeof num, "%.6g", bw ? f->seg[m].bw_factor : f->seg[m].lat_factor);
    g_string_append_printf(s, "%s%.0f:%s", s->len ? ";" : "", f->seg[m].threshold_bytes, num);
  }
  return g_string_free(s, FALSE);
}

/* ---- measuring --------------------------------------------------------------------------------
 */

gboolean calib_parse_pingpong(const char *what, const char *text, GArray *points, GError **err) {
  char **lines = g_strsplit(text, "\n", -1);
  gboolean ok = TRUE;
  int got = 0;
  for (int i = 0; lines[i] && ok; i++) {
    char *l = g_strstrip(lines[i]);
    if (!*l || *l == '#') continue;
    char **f = g_strsplit_set(l, " \t", -1);
    int nf = 0;
    double v[4] = {0};
    for (int k = 0; f[k]; k++) {
      if (!*f[k]) continue;
      char *end = NULL;
      double x = nf < 4 ? g_ascii_strtod(f[k], &end) : 0;
      if (nf >= 4 || end == f[k] || *end) {
        nf = -1;
        break;
      }
      v[nf++] = x;
    }
    g_strfreev(f);
    if (nf < 2 || !(v[0] > 0) || !(v[1] > 0)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "%s:%d: expected \"size_bytes median_s [min_s repeats]\" with positive values, "
                  "got '%s'", what, i + 1, l);
      ok = FALSE;
      break;
    }
    calib_point p = {v[0], v[1]};
    g_array_append_val(points, p);
    got++;
  }
  g_strfreev(lines);
  if (ok && got == 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no ping-pong measurements", what);
    ok = FALSE;
  }
  return ok;
}

char *calib_run_pingpong(gboolean quick, GError **err) {
  const char *env_exe = g_getenv("DLSIM_PINGPONG_EXEC"), *env_run = g_getenv("DLSIM_MPIRUN");
  char *exe =
      env_exe ? g_strdup(env_exe) : g_build_filename(DLSIM_BINARY_DIR, "dlsim-pingpong", NULL);
  char *mpirun = env_run ? g_strdup(env_run) : g_find_program_in_path("mpirun");
  char *out_txt = NULL, *err_txt = NULL, *result = NULL;
  GPtrArray *argv = g_ptr_array_new();
  if (!g_file_test(exe, G_FILE_TEST_IS_EXECUTABLE)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO,
                "calibration: ping-pong program %s not found (build target dlsim-pingpong, or set "
                "DLSIM_PINGPONG_EXEC)", exe);
    goto out;
  }
  if (!mpirun) {
    g_set_error(err, DL_ERROR, DL_ERR_IO,
                "calibration: mpirun not found on PATH (install Open MPI or set DLSIM_MPIRUN)");
    goto out;
  }
  g_ptr_array_add(argv, mpirun);
  g_ptr_array_add(argv, "-np");
  g_ptr_array_add(argv, "2");
  g_ptr_array_add(argv, "--oversubscribe");
  if (geteuid() == 0) g_ptr_array_add(argv, "--allow-run-as-root");
  g_ptr_array_add(argv, exe);
  if (quick) g_ptr_array_add(argv, "--quick");
  g_ptr_array_add(argv, NULL);
  int wait_status = 0;
  GError *e = NULL;
  if (!dl_child_run((const char *const *)argv->pdata, &out_txt, &err_txt, &wait_status, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "calibration: %s", e->message);
    g_error_free(e);
    goto out;
  }
  if (!g_spawn_check_wait_status(wait_status, &e)) {
    char *last = dl_last_line(err_txt && *err_txt ? err_txt : out_txt);
    g_set_error(err, DL_ERROR, DL_ERR_IO, "calibration: %s -np 2 %s: %s: %s", mpirun, exe,
                e->message, last);
    g_free(last);
    g_error_free(e);
    goto out;
  }
  result = out_txt;
  out_txt = NULL;
out:
  g_ptr_array_free(argv, TRUE);
  g_free(out_txt);
  g_free(err_txt);
  g_free(exe);
  g_free(mpirun);
  return result;
}

/* ---- platform and report ----------------------------------------------------------------------
 */

void calib_platform_params(const calib_fit *f, int ranks, const char *bw_factor,
                         const char *lat_factor, const char *comment, plat_gen_params *p) {
  plat_gen_preset("workstation", p, NULL);
  p->gpus_per_node = ranks;
  p->gpu_model = "cpu";
  plat_gpu_spec("cpu", &p->gpu_mem_bytes, &p->speed_flops);
  /* host -> switch -> host: two links, so each carries half the latency; the bottleneck is B */
  p->nvlink_lat_s = f->latency_s / 2;
  p->nvlink_bps = f->bandwidth_bps;
  p->bw_factor = bw_factor;
  p->lat_factor = lat_factor;
  p->comment = comment;
}

static void fmt_size(char *buf, size_t n, double b) {
  if (b >= 1048576 && fmod(b, 1048576) == 0) g_snprintf(buf, n, "%.0f MiB", b / 1048576);
  else if (b >= 1024 && fmod(b, 1024) == 0) g_snprintf(buf, n, "%.0f KiB", b / 1024);
  else g_snprintf(buf, n, "%.0f B", b);
}

double calib_print_table(const calib_fit *f, const calib_point *pts, int n, FILE *out) {
  double sum = 0;
  fprintf(out, "%12s %14s %14s %9s\n", "size", "measured (us)", "model (us)", "error");
  for (int i = 0; i < n; i++) {
    char sz[32];
    fmt_size(sz, sizeof sz, pts[i].size_bytes);
    double m = calib_model_s(f, pts[i].size_bytes), e = (m - pts[i].time_s) / pts[i].time_s;
    sum += fabs(e);
    fprintf(out, "%12s %14.3f %14.3f %+8.1f%%\n", sz, pts[i].time_s * 1e6, m * 1e6, e * 100);
  }
  double mean = n > 0 ? sum / n : 0;
  fprintf(out, "mean absolute error %.1f%% over %d sizes; latency %.3f us, bandwidth %.3f GB/s, "
               "%d size ranges\n",
          mean * 100, n, f->latency_s * 1e6, f->bandwidth_bps / 1e9, f->n_segments);
  return mean;
}
