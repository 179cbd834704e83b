/* test_calibrate.c — the ping-pong fit (calibrate.h): synthetic measurements made from SMPI's
 * model with known latency, bandwidth and piecewise factors are fitted back; the written
 * platform carries the figures; malformed input is refused with one-line messages. */
#include "platform/calibrate.h"
#include "cu_main.h"
#include "core/dl_common.h"
#include "platform/platform.h"

#include <math.h>
#include <string.h>

/* Truth: L = 5 us, B = 10 GB/s; three size ranges as SMPI writes them:
 *   [0, 4096): lat 1, bw 0.5;  [4096, 65536): lat 2, bw 0.8;  [65536, ...): lat 4, bw 1. */
#define L_TRUE 5e-6
#define B_TRUE 10e9
static const calib_segment truth[] = {{0, 1, 0.5}, {4096, 2, 0.8}, {65536, 4, 1}};

static double true_time(double s) {
  const calib_segment *g = &truth[0];
  for (int k = 1; k < 3; k++)
    if (s >= truth[k].threshold_bytes) g = &truth[k];
  return g->lat_factor * L_TRUE + s / (g->bw_factor * B_TRUE);
}

/* Sizes 1 B .. 64 MiB by powers of two (27 points, as dlsim-pingpong measures), each time
 * multiplied by (1 + noise × a fixed pseudo-random sign pattern). */
static int make_points(calib_point *p, double noise) {
  int n = 0;
  for (double s = 1; s <= 64.0 * 1048576; s *= 2, n++) {
    double sign = ((n * 7) % 3) - 1.0; /* -1, 0, +1 pattern */
    p[n].size_bytes = s;
    p[n].time_s = true_time(s) * (1 + noise * sign);
  }
  return n;
}

static void test_fit_exact(void) {
  calib_point p[40];
  int n = make_points(p, 0);
  CU_ASSERT_EQUAL(n, 27);
  calib_fit f;
  GError *err = NULL;
  CU_ASSERT_FATAL(calib_fit_points(p, n, 0, &f, &err));
  CU_ASSERT_DOUBLE_EQUAL(f.latency_s, L_TRUE, L_TRUE * 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(f.bandwidth_bps, B_TRUE, B_TRUE * 1e-6);
  CU_ASSERT_EQUAL_FATAL(f.n_segments, 3);
  for (int k = 0; k < 3; k++) {
    CU_ASSERT_DOUBLE_EQUAL(f.seg[k].threshold_bytes, truth[k].threshold_bytes, 0);
    CU_ASSERT_DOUBLE_EQUAL(f.seg[k].lat_factor, truth[k].lat_factor, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(f.seg[k].bw_factor, truth[k].bw_factor, 1e-6);
  }
  /* the model reproduces every point */
  for (int i = 0; i < n; i++)
    CU_ASSERT_DOUBLE_EQUAL(calib_model_s(&f, p[i].size_bytes), p[i].time_s, p[i].time_s * 1e-9);
  /* SimGrid's spelling, largest threshold first */
  char *bw = calib_factor_string(&f, TRUE), *lat = calib_factor_string(&f, FALSE);
  CU_ASSERT_STRING_EQUAL(bw, "65536:1;4096:0.8;0:0.5");
  CU_ASSERT_STRING_EQUAL(lat, "65536:4;4096:2;0:1");
  g_free(bw);
  g_free(lat);
}

static void test_fit_noisy(void) {
  /* ±1 % noise: the same three ranges, figures within a few percent */
  calib_point p[40];
  int n = make_points(p, 0.01);
  calib_fit f;
  CU_ASSERT_FATAL(calib_fit_points(p, n, 0, &f, NULL));
  CU_ASSERT_EQUAL_FATAL(f.n_segments, 3);
  CU_ASSERT(fabs(f.latency_s / L_TRUE - 1) < 0.03);
  CU_ASSERT(fabs(f.bandwidth_bps / B_TRUE - 1) < 0.03);
  CU_ASSERT_DOUBLE_EQUAL(f.seg[1].threshold_bytes, 4096, 0);
  CU_ASSERT_DOUBLE_EQUAL(f.seg[2].threshold_bytes, 65536, 0);
  CU_ASSERT(fabs(f.seg[1].lat_factor / 2 - 1) < 0.05);
  /* (the small range's bandwidth factor is not determined by 1 % noise: its transfer time is
   * at most 8 % of the time there; the model's times are what must hold) */
  for (int i = 0; i < n; i++)
    CU_ASSERT(fabs(calib_model_s(&f, p[i].size_bytes) / true_time(p[i].size_bytes) - 1) < 0.02);
  CU_ASSERT(fabs(f.seg[2].lat_factor / 4 - 1) < 0.10);
  double mean = calib_print_table(&f, p, n, stdout);
  CU_ASSERT(mean < 0.011);
}

static void test_fit_single_range(void) {
  /* plain alpha-beta (no factors): one range, both factors 1 */
  calib_point p[8];
  for (int i = 0; i < 8; i++) {
    p[i].size_bytes = pow(8, i);
    p[i].time_s = 2e-6 + p[i].size_bytes / 4e9;
  }
  calib_fit f;
  CU_ASSERT_FATAL(calib_fit_points(p, 8, 0, &f, NULL));
  CU_ASSERT_EQUAL(f.n_segments, 1);
  CU_ASSERT_DOUBLE_EQUAL(f.latency_s, 2e-6, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(f.bandwidth_bps, 4e9, 1e3);
  char *bw = calib_factor_string(&f, TRUE);
  CU_ASSERT_STRING_EQUAL(bw, "0:1");
  g_free(bw);
}

static void test_fit_bad(void) {
  GError *err = NULL;
  calib_fit f;
  calib_point one[] = {{1, 1e-6}};
  CU_ASSERT_FALSE(calib_fit_points(one, 1, 0, &f, &err));
  CU_ASSERT_STRING_EQUAL(err->message, "calibration: expected 2 or more sizes, got 1");
  g_clear_error(&err);
  calib_point neg[] = {{1, 1e-6}, {8, -1}};
  CU_ASSERT_FALSE(calib_fit_points(neg, 2, 0, &f, &err));
  CU_ASSERT(g_str_has_prefix(err->message, "calibration: size 8: expected distinct positive"));
  g_clear_error(&err);
  calib_point flat[] = {{1, 1e-6}, {8, 1e-6}, {64, 1e-6}};
  CU_ASSERT_FALSE(calib_fit_points(flat, 3, 0, &f, &err));
  CU_ASSERT(strstr(err->message, "times do not grow with message size") != NULL);
  g_clear_error(&err);
}

static void test_parse(void) {
  GArray *pts = g_array_new(FALSE, FALSE, sizeof(calib_point));
  GError *err = NULL;
  CU_ASSERT(calib_parse_pingpong("pp.txt", "# dlsim-pingpong 1 ranks=2 repeats=5\n"
                                         "1 5e-07 4.5e-07 5\n1024 1.5e-06 1.4e-06 5\n\n",
                                         pts, &err));
  CU_ASSERT_EQUAL_FATAL(pts->len, 2);
  CU_ASSERT_DOUBLE_EQUAL(g_array_index(pts, calib_point, 1).size_bytes, 1024, 0);
  CU_ASSERT_DOUBLE_EQUAL(g_array_index(pts, calib_point, 1).time_s, 1.5e-6, 1e-18);
  CU_ASSERT_FALSE(calib_parse_pingpong("pp.txt", "# x\n1 5e-07\n2 abc\n", pts, &err));
  CU_ASSERT_STRING_EQUAL(err->message, "pp.txt:3: expected \"size_bytes median_s [min_s repeats]\" "
                                       "with positive values, got '2 abc'");
  g_clear_error(&err);
  CU_ASSERT_FALSE(calib_parse_pingpong("pp.txt", "# only comments\n", pts, &err));
  CU_ASSERT_STRING_EQUAL(err->message, "pp.txt: no ping-pong measurements");
  g_clear_error(&err);
  g_array_free(pts, TRUE);
}

static void test_platform(void) {
  calib_point p[40];
  int n = make_points(p, 0);
  calib_fit f;
  CU_ASSERT_FATAL(calib_fit_points(p, n, 0, &f, NULL));
  char *bw = calib_factor_string(&f, TRUE), *lat = calib_factor_string(&f, FALSE);
  plat_gen_params gp;
  calib_platform_params(&f, 4, bw, lat, "test", &gp);
  GError *err = NULL;
  char *xml = plat_generate_xml(&gp, &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(xml);
  CU_ASSERT(strstr(xml, "<prop id=\"smpi/bw-factor\" value=\"65536:1;4096:0.8;0:0.5\"/>") != NULL);
  CU_ASSERT(strstr(xml, "<prop id=\"smpi/lat-factor\" value=\"65536:4;4096:2;0:1\"/>") != NULL);
  plat *pl = plat_load_xml("cal.xml", xml, strlen(xml), &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  CU_ASSERT_EQUAL(plat_n_hosts(pl), 4);
  CU_ASSERT_STRING_EQUAL(plat_host_at(pl, 0)->gpu_model, "cpu");
  /* host to host: two links of L/2 each, bottleneck B */
  plat_route_info r;
  CU_ASSERT_FATAL(plat_route(pl, 0, 3, &r, &err));
  CU_ASSERT_EQUAL(r.n_links, 2);
  CU_ASSERT_DOUBLE_EQUAL(r.latency_s, L_TRUE, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(r.bottleneck_bps, B_TRUE, 1.0);
  plat_free(pl);
  g_free(xml);
  /* a malformed factor list is refused by the generator */
  gp.bw_factor = "65536:x";
  xml = plat_generate_xml(&gp, &err);
  CU_ASSERT_PTR_NULL(xml);
  CU_ASSERT_STRING_EQUAL(err->message, "smpi/bw-factor: expected \"size:factor;...\" (e.g. "
                                       "65536:0.9;0:1), got '65536:x'");
  g_clear_error(&err);
  g_free(bw);
  g_free(lat);
}

static const dl_cu_test fit_tests[] = {
    DL_CU_TEST(test_fit_exact),  DL_CU_TEST(test_fit_noisy), DL_CU_TEST(test_fit_single_range),
    DL_CU_TEST(test_fit_bad),    DL_CU_TEST(test_parse),     DL_CU_TEST(test_platform),
    DL_CU_END,
};

const dl_cu_suite dl_cu_suites[] = {{"calibrate", fit_tests}, {NULL, NULL}};
