/* test_projection.c — the whole-run projection (study/projection.c) on cases worked by hand. */
#include <math.h>
#include <string.h>

#include "cu_plan.h"
#include "study/projection.h"

/* One segment, no restart time, M = 1: M (e^{L/M} − 1) = e − 1 (Daly 2006, Eq. 13). Ten
 * segments of 0.1 with a checkpoint of 0.01 each: 10 (e^{0.11} − 1). */
static void test_daly_by_hand(void) {
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_wall_s(1, 1, 0, 0, 1), M_E - 1, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_wall_s(1, 0.1, 0.01, 0, 1), 10 * (exp(0.11) - 1), 1e-12);
  /* a restart R multiplies by e^{R/M} */
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_wall_s(1, 1, 0, 0.5, 1), exp(0.5) * (M_E - 1), 1e-12);
  /* a remainder segment: 2.5 of work in segments of 1 */
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_wall_s(2.5, 1, 0, 0, 1), 2 * (M_E - 1) + expm1(0.5), 1e-12);
  /* without failures: the work and the checkpoints */
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_wall_s(10, 2, 0.5, 3, INFINITY), 10 + 5 * 0.5, 1e-12);
}

/* Young's first order sqrt(2 δ M) where δ ≪ M; Daly's optimum is the minimum of the expected
 * time per unit of work M e^{R/M} (e^{(τ+δ)/M} − 1) / τ (found here by a fine scan) to 0.1 %
 * while δ < M / 10. */
static void test_daly_interval(void) {
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_interval_s(1, 1e8), sqrt(2e8), sqrt(2e8) * 1e-3);
  CU_ASSERT_DOUBLE_EQUAL(proj_daly_interval_s(3, 1), 1, 0); /* δ ≥ 2M: τ = M */
  const double deltas[] = {0.001, 0.01, 0.05, 0.1};
  for (size_t i = 0; i < G_N_ELEMENTS(deltas); i++) {
    const double d = deltas[i], M = 1;
    double best_f = INFINITY;
    for (double tau = 1e-3; tau < 3; tau *= 1.0001) best_f = MIN(best_f, expm1((tau + d) / M) / tau);
    const double daly = proj_daly_interval_s(d, M);
    const double f_daly = expm1((daly + d) / M) / daly;
    CU_ASSERT(f_daly <= best_f * (1 + 1e-3));
  }
}

/* The Monte Carlo of synchronous checkpoints converges to Daly's expectation: 4000 timelines of
 * 100 h of work, M = 5 h, δ = 0.1 h, R = 0.25 h, τ at Daly's optimum, within four standard errors
 * (the spread of the timelines measured here). The same seed gives the same timelines. */
static void test_monte_carlo_sync(void) {
  const double U = 100, M = 5, d = 0.1, R = 0.25, tau = proj_daly_interval_s(d, M);
  proj_result a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  proj_monte_carlo(U, tau, FALSE, d, d, R, M, 4000, 7, &a);
  proj_monte_carlo(U, tau, FALSE, d, d, R, M, 4000, 7, &b);
  CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
  const double want = proj_daly_wall_s(U, tau, d, R, M);
  CU_ASSERT(a.wall_sd_s > 0);
  CU_ASSERT(fabs(a.wall_s - want) < 4 * a.wall_sd_s / sqrt(4000));
  /* interruptions: the wall time over M, every failure counted, in restarts too */
  CU_ASSERT(fabs(a.interruptions - a.wall_s / M) < 0.05 * a.wall_s / M);
  /* lost work, checkpoints and restarts add up to the wall time */
  CU_ASSERT_DOUBLE_EQUAL(U + a.lost_work_s + a.ckpt_s + a.restarting_s, a.wall_s, 1e-6 * U);
  CU_ASSERT(a.wall_p5_s < a.wall_p50_s && a.wall_p50_s < a.wall_p95_s);
}

/* Asynchronous checkpoints: without failures, the work, one copy per interval and the last write;
 * with rare failures (M ≫ τ) the Monte Carlo is within 1 % of the first-order expectation, and
 * beats synchronous checkpoints of the same write. */
static void test_monte_carlo_async(void) {
  proj_result a;
  memset(&a, 0, sizeof a);
  proj_monte_carlo(10, 2, TRUE, 0.1, 1, 0, INFINITY, 1, 1, &a);
  CU_ASSERT_DOUBLE_EQUAL(a.wall_s, 10 + 5 * 0.1 + 1, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(proj_async_wall_s(10, 2, 0.1, 1, 0, INFINITY), 10 + 5 * 0.1 + 1, 1e-12);
  const double U = 1000, M = 50, c = 0.01, w = 0.2, R = 0.3, tau = 2;
  memset(&a, 0, sizeof a);
  proj_monte_carlo(U, tau, TRUE, c, w, R, M, 2000, 3, &a);
  const double first = proj_async_wall_s(U, tau, c, w, R, M);
  CU_ASSERT(fabs(a.wall_s / first - 1) < 0.01);
  CU_ASSERT_DOUBLE_EQUAL(U + a.lost_work_s + a.ckpt_s + a.restarting_s, a.wall_s, 1e-6 * U);
  CU_ASSERT(a.wall_s < proj_daly_wall_s(U, tau, w, R, M));
}

/* --failures: unit MTBFs, the job's, a scale; bad specs refused. */
static void test_failure_spec(void) {
  proj_opts o;
  proj_opts_init(&o);
  GError *e = NULL;
  const double gpu = o.mtbf_h[PROJ_GPU];
  CU_ASSERT_TRUE(proj_parse_failures(&o, "scale=2", &e));
  CU_ASSERT_DOUBLE_EQUAL(o.mtbf_h[PROJ_GPU], gpu / 2, 1e-9);
  proj_opts_init(&o);
  CU_ASSERT_TRUE(proj_parse_failures(&o, "gpu=1000,nic=5e4", &e));
  CU_ASSERT_DOUBLE_EQUAL(o.mtbf_h[PROJ_GPU], 1000, 0);
  CU_ASSERT_DOUBLE_EQUAL(o.mtbf_h[PROJ_NIC], 5e4, 0);
  CU_ASSERT_TRUE(proj_parse_failures(&o, "none", &e));
  CU_ASSERT_FALSE(o.failures);
  const char *bad[] = {"", "gpu", "gpu=", "gpu=0", "gpu=-1", "gpu=nan", "cpu=10", "gpu=1,", "x"};
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    CU_ASSERT_FALSE(proj_parse_failures(&o, bad[i], &e));
    CU_ASSERT_PTR_NOT_NULL(e);
    g_clear_error(&e);
  }
  /* Llama 3's fleet: 419 interruptions in 54 days on 16,384 GPUs, 2,048 nodes, 16,384 NICs */
  proj_opts_init(&o);
  const double units[PROJ_N_UNITS] = {16384, 2048, 16384, 2048, 2048, 16384};
  double rate = 0;
  for (int u = 0; u < PROJ_N_UNITS; u++) rate += units[u] / o.mtbf_h[u];
  CU_ASSERT_DOUBLE_EQUAL(rate, 419 / (54 * 24.0), 1e-9);
}

/* The projection of a result made by hand: two ranks on one node with a NIC each, an iteration of
 * 2 s whose kernels take 1.5 s, 1 s of them compute-bound; the others move 0.4 s of what the
 * bandwidth gives (bandwidth × GPU_EFF_MEMORY); idle 100 W, board 700 W, s_mem 0.5: per GPU
 * E = 100·2 + 600·(1 + 0.5·min(0.5, 0.4)) = 920 J; NICs 20 W; two NICs fit one switch: one port
 * each at 10 W; host 300 W per node; PUE 1.25. Failures off: the wall time is the iterations
 * times 2 s. */
static void test_projection_by_hand(void) {
  wl_model *m = dl_cu_load("gpt-tiny");
  cfg_run c;
  cfg_init(&c);
  c.gpus = 2;
  c.batch = 4;
  c.precision = GPU_BF16;
  const gpu_spec *g = gpu_find("h100-sxm");
  res_result r;
  res_init(&r);
  r.iteration_time_s = 2;
  for (int k = 0; k < 2; k++) {
    res_rank row = {k, 2, 1.5, 0, 0, 0, 0, 0, 1.0, 0.4 * g->mem_bw_bps * GPU_EFF_MEMORY};
    g_array_append_val(r.rank_rows, row);
  }
  proj_opts o;
  proj_opts_init(&o);
  o.tokens = 10 * (double)c.batch * (double)m->seq_len - 1; /* 10 iterations, the last partly */
  o.failures = FALSE;
  o.gpu_idle_w = 100, o.gpu_board_w = 700, o.mem_power_share = 0.5;
  o.nic_w = 20, o.switch_port_w = 10, o.host_w = 300, o.pue = 1.25;
  proj_result p;
  GError *e = NULL;
  CU_ASSERT_TRUE_FATAL(proj_run(&o, &r, &c, m, g, 2, 2, &p, &e));
  CU_ASSERT_DOUBLE_EQUAL(p.iterations, 10, 0);
  CU_ASSERT_DOUBLE_EQUAL(p.useful_s, 20, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(p.wall_s, 20, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(p.wall_s_closed_form, 20, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(p.goodput, 1, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(p.gpu_busy_j, 2 * 600 * (1 + 0.5 * 0.4), 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(p.gpu_idle_j, 2 * 100 * 2, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(p.nic_j, 2 * 20 * 2, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(p.switch_j, 2 * 1 * 10 * 2, 1e-9); /* two NICs on one switch */
  CU_ASSERT_DOUBLE_EQUAL(p.host_j, 300 * 2, 1e-9);           /* one node of two GPUs */
  const double it = 1440 + 400 + 80 + 40 + 600;
  CU_ASSERT_DOUBLE_EQUAL(p.iteration_j, 1.25 * it, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(p.energy_j, 10 * 1.25 * it, 1e-6);
  /* the checkpoint: every parameter's weights (bf16) and Adam state (fp32 moments and master) */
  CU_ASSERT_DOUBLE_EQUAL(p.ckpt_bytes, (double)m->params * (2 + 12), 0);
  /* bandwidth-bound kernels moving more than their time allows are held to their time */
  g_array_index(r.rank_rows, res_rank, 0).elementwise_mem_bytes = 2 * g->mem_bw_bps * GPU_EFF_MEMORY;
  CU_ASSERT_TRUE_FATAL(proj_run(&o, &r, &c, m, g, 2, 2, &p, &e));
  CU_ASSERT_DOUBLE_EQUAL(p.gpu_busy_j, 600 * (1 + 0.5 * 0.5) + 600 * (1 + 0.5 * 0.4), 1e-9);
  /* a budget a model without sequences cannot take */
  wl_model *cnn = dl_cu_load("cnn-small");
  CU_ASSERT_FALSE(proj_run(&o, &r, &c, cnn, g, 2, 2, &p, &e));
  CU_ASSERT_PTR_NOT_NULL(e);
  g_clear_error(&e);
  wl_free(cnn);
  res_release(&r);
  cfg_release(&c);
  wl_free(m);
}

static const dl_cu_test projection_tests[] = {
    DL_CU_TEST(test_daly_by_hand),      DL_CU_TEST(test_daly_interval),
    DL_CU_TEST(test_monte_carlo_sync),  DL_CU_TEST(test_monte_carlo_async),
    DL_CU_TEST(test_failure_spec),      DL_CU_TEST(test_projection_by_hand), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"projection", projection_tests}, {NULL, NULL}};
