/* calibrate.h — fitting SMPI's network model to ping-pong measurements on the machine at hand,
 * and writing a platform for it (`dlsim platform --calibrate`).
 *
 * Model (SimGrid's SMPI network model, src/surf/network_smpi.cpp, with TCP-gamma 0 and weight-S 0):
 * the one-way time of a message of s bytes over a route of latency L and bottleneck bandwidth B is
 *
 *     t(s) = lat_factor(s) × L + s / (bw_factor(s) × B)
 *
 * where the factors are piecewise constant in s: `smpi/lat-factor` and `smpi/bw-factor` are
 * "threshold:factor;..." lists, "size >= threshold -> factor" for the largest such threshold.
 * The fit segments the measured sizes (dynamic programming over contiguous runs of sizes, each
 * run fitted by least squares on relative error, a fixed penalty per extra run) and fits
 * t = a_k + c_k × s in run k. L is the first run's intercept (small messages), B = 1 / c of the
 * last run (large messages); run k gets lat_factor a_k / L and bw_factor 1 / (c_k × B), so the
 * first run's lat_factor and the last run's bw_factor are 1. A run whose times do not grow with
 * size gets bw_factor 1 and its intercept refitted with the slope 1 / B.
 *
 * Units: bytes, seconds, bytes per second.
 */
#ifndef DL_CALIBRATE_H
#define DL_CALIBRATE_H

#include <glib.h>
#include <stdio.h>

#include "platform/platform.h"

#define CALIB_MAX_SEGMENTS 12

/* One ping-pong measurement. */
typedef struct {
  double size_bytes; /* message size, bytes (> 0) */
  double time_s;     /* one-way time (half a round trip), median of the repeats, s */
} calib_point;

/* One run of message sizes with its factors. */
typedef struct {
  double threshold_bytes; /* the run applies to sizes >= this (0 for the first run) */
  double lat_factor;      /* multiplies the route latency, >= 0 */
  double bw_factor;       /* multiplies the route bandwidth, > 0 */
} calib_segment;

/* The fitted model. */
typedef struct {
  double latency_s;                       /* L: one-way latency of a small message, s */
  double bandwidth_bps;                   /* B: large-message bandwidth, bytes/s */
  int n_segments;                         /* runs, 1..CALIB_MAX_SEGMENTS, ascending thresholds */
  calib_segment seg[CALIB_MAX_SEGMENTS];      /* the runs */
} calib_fit;

/* Fits the model to `n` points (any order; sizes must be distinct and positive, times positive,
 * n >= 2). `penalty` is the cost of one more run in units of summed squared relative residuals
 * (<= 0: the default 0.02). FALSE with DL_ERR_INPUT when the points cannot be fitted (too few,
 * a non-positive value, or times that do not grow with size at all). */
gboolean calib_fit_points(const calib_point *pts, int n, double penalty, calib_fit *out,
                          GError **err);

/* The model's one-way time for `size_bytes`, s. */
double calib_model_s(const calib_fit *f, double size_bytes);

/* SimGrid's "threshold:factor;..." text for the bandwidth (bw TRUE) or latency factors, largest
 * threshold first as in SimGrid's defaults, e.g. "65536:0.9;0:1". Newly allocated (g_free). */
char *calib_factor_string(const calib_fit *f, gboolean bw);

/* Parses dlsim-pingpong's output (kernels/calib_pingpong.c: '#' comments, then lines
 * "size median_s min_s repeats") into `points` (GArray of calib_point, appended). `what` names the
 * text in messages. FALSE with DL_ERR_INPUT ("WHAT:LINE: ...") on a malformed line or no data. */
gboolean calib_parse_pingpong(const char *what, const char *text, GArray *points, GError **err);

/* Runs the ping-pong program under mpirun with 2 ranks and returns its output (g_free).
 * The program is $DLSIM_PINGPONG_EXEC or <build dir>/dlsim-pingpong; mpirun is $DLSIM_MPIRUN or
 * the one on PATH; --oversubscribe always, --allow-run-as-root when root. `quick`: a few sizes.
 * NULL with DL_ERR_IO when either is missing or the run fails (its last stderr line). */
char *calib_run_pingpong(gboolean quick, GError **err);

/* Platform parameters for this machine: the workstation preset's shape (one node, `ranks` hosts
 * on one switch, each "GPU" the local CPU, gpu_model "cpu"), both links of a host-to-host route
 * with half of L and bandwidth B, the factors in <config>. `bw_factor`/`lat_factor`/`comment`
 * are borrowed into `p` and must outlive it. */
void calib_platform_params(const calib_fit *f, int ranks, const char *bw_factor,
                         const char *lat_factor, const char *comment, plat_gen_params *p);

/* Prints the table "size, measured us, model us, error %" for `pts` under `f` to `out`, then
 * the mean absolute error. Returns the mean absolute relative error (0.05 = 5 %). */
double calib_print_table(const calib_fit *f, const calib_point *pts, int n, FILE *out);

#endif
