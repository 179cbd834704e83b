/* test_kernels_cuda.c — every CUDA kernel against its CPU twin on the same inputs (tolerance
 * 1e-4 relative for fp32; TF32 GEMM 2e-2), through the backend table that kernels/cuda_loader.c
 * loads. Without a CUDA device it prints "skipped: no CUDA device" and passes, unless
 * DLSIM_REQUIRE_GPU=1 asks for the device: then a missing one is a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_main.h"
#include "kernels.h"

static const kn_backend *gpu;
static unsigned long long seed_ = 11;
static float rnd(void) {
  seed_ = seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((seed_ >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *h_rand(size_t n) {
  float *v = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) v[i] = rnd();
  return v;
}
static void *up(const void *h, size_t bytes) {
  void *d = gpu->alloc(bytes);
  gpu->upload(d, h, bytes);
  return d;
}
/* max |gpu − cpu| / max(1, |cpu|) over n floats */
static double diff(const float *d, const float *h, size_t n) {
  float *g = malloc(sizeof(float) * n);
  gpu->sync();
  gpu->download(g, d, sizeof(float) * n);
  double worst = 0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(g[i] - h[i]) / fmax(1.0, fabs(h[i])));
  free(g);
  return worst;
}

static void test_gemm_linear_conv(void) {
  if (!gpu) return;
  const int M = 33, N = 17, K = 29;
  float *A = h_rand(M * K), *B = h_rand(K * N), *C = calloc(M * N, 4);
  float *dA = up(A, M * K * 4), *dB = up(B, K * N * 4), *dC = up(C, M * N * 4);
  for (int m = 0; m < KN_N_MATHS; m++) {
    kn_gemm_cpu(0, 1, M, N, K, 1.0f, A, B, 0.0f, C, KN_MATH_FP32);
    gpu->gemm(0, 1, M, N, K, 1.0f, dA, dB, 0.0f, dC, (kn_math)m);
    CU_ASSERT(diff(dC, C, M * N) < (m == KN_MATH_FP32 ? 1e-4 : m == KN_MATH_BF16 ? 1e-1 : 3e-2));
  }
  kn_conv s = {2, 4, 9, 8, 6, 3, 3, 2, 1, 2};
  size_t nin = 2 * 4 * 9 * 8, nw = 6 * 2 * 9, no = 2 * 6 * kn_conv_out_h(&s) * kn_conv_out_w(&s);
  float *x = h_rand(nin), *w = h_rand(nw), *b = h_rand(6), *dy = h_rand(no);
  float *y = calloc(no, 4), *ws = calloc(kn_conv_ws_floats(&s), 4), *dx = calloc(nin, 4),
        *dw = calloc(nw, 4), *db = calloc(6, 4);
  float *gx = up(x, nin * 4), *gw = up(w, nw * 4), *gb = up(b, 24), *gdy = up(dy, no * 4),
        *gy = up(y, no * 4), *gws = up(ws, kn_conv_ws_floats(&s) * 4), *gdx = up(dx, nin * 4),
        *gdw = up(dw, nw * 4), *gdb = up(db, 24);
  kn_conv2d_fwd_cpu(y, ws, x, w, b, &s, KN_MATH_FP32);
  gpu->conv2d_fwd(gy, gws, gx, gw, gb, &s, KN_MATH_FP32);
  CU_ASSERT(diff(gy, y, no) < 1e-4);
  kn_conv2d_bwd_cpu(dx, dw, db, ws, dy, x, w, &s, KN_MATH_FP32);
  gpu->conv2d_bwd(gdx, gdw, gdb, gws, gdy, gx, gw, &s, KN_MATH_FP32);
  CU_ASSERT(diff(gdx, dx, nin) < 1e-4);
  CU_ASSERT(diff(gdw, dw, nw) < 1e-4);
  CU_ASSERT(diff(gdb, db, 6) < 1e-4);
  /* linear: reuse A (M,K) as input, B as weights (N,K) */
  float *lo = calloc(M * N, 4), *lb = h_rand(N), *ldin = calloc(M * K, 4), *ldw = calloc(N * K, 4),
        *ldb = calloc(N, 4), *ldy = h_rand(M * N);
  float *glo = up(lo, M * N * 4), *glb = up(lb, N * 4), *gldin = up(ldin, M * K * 4),
        *gldw = up(ldw, N * K * 4), *gldb = up(ldb, N * 4), *gldy = up(ldy, M * N * 4);
  kn_linear_fwd_cpu(lo, A, B, lb, M, K, N, KN_MATH_FP32);
  gpu->linear_fwd(glo, dA, dB, glb, M, K, N, KN_MATH_FP32);
  CU_ASSERT(diff(glo, lo, M * N) < 1e-4);
  kn_linear_bwd_cpu(ldin, ldw, ldb, ldy, A, B, M, K, N, KN_MATH_FP32);
  gpu->linear_bwd(gldin, gldw, gldb, gldy, dA, dB, M, K, N, KN_MATH_FP32);
  CU_ASSERT(diff(gldin, ldin, M * K) < 1e-4);
  CU_ASSERT(diff(gldw, ldw, N * K) < 1e-4);
  CU_ASSERT(diff(gldb, ldb, N) < 1e-4);
  void *hs[] = {A, B, C, x, w, b, dy, y, ws, dx, dw, db, lo, lb, ldin, ldw, ldb, ldy};
  void *ds[] = {dA, dB, dC, gx, gw, gb, gdy, gy, gws, gdx, gdw, gdb, glo, glb, gldin, gldw, gldb, gldy};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]), gpu->release(ds[i]);
}

static void test_norms_elementwise(void) {
  if (!gpu) return;
  const int N = 3, C = 8, HW = 10, n = N * C * HW;
  float *x = h_rand(n), *g = h_rand(C), *b = h_rand(C), *dy = h_rand(n);
  float *y = calloc(n, 4), *mu = calloc(N * HW, 4), *rs = calloc(N * HW, 4), *dx = calloc(n, 4),
        *dg = calloc(C, 4), *dbt = calloc(C, 4), *sc = calloc(n, 4);
  float *gx = up(x, n * 4), *gg = up(g, C * 4), *gbt = up(b, C * 4), *gdy = up(dy, n * 4),
        *gy = up(y, n * 4), *gmu = up(mu, N * HW * 4), *grs = up(rs, N * HW * 4),
        *gdx = up(dx, n * 4), *gdg = up(dg, C * 4), *gdb = up(dbt, C * 4), *gsc = up(sc, n * 4);
  kn_batchnorm_fwd_cpu(y, mu, rs, x, g, b, N, C, HW);
  gpu->batchnorm_fwd(gy, gmu, grs, gx, gg, gbt, N, C, HW);
  CU_ASSERT(diff(gy, y, n) < 1e-4);
  kn_batchnorm_bwd_cpu(dx, dg, dbt, dy, x, mu, rs, g, N, C, HW);
  gpu->batchnorm_bwd(gdx, gdg, gdb, gdy, gx, gmu, grs, gg, N, C, HW);
  CU_ASSERT(diff(gdx, dx, n) < 1e-4);
  CU_ASSERT(diff(gdg, dg, C) < 1e-4);
  kn_layernorm_fwd_cpu(y, mu, rs, x, g, b, N * HW, C);
  gpu->layernorm_fwd(gy, gmu, grs, gx, gg, gbt, N * HW, C);
  CU_ASSERT(diff(gy, y, n) < 1e-4);
  kn_layernorm_bwd_cpu(dx, dg, dbt, dy, x, g, mu, rs, N * HW, C);
  gpu->layernorm_bwd(gdx, gdg, gdb, gdy, gx, gg, gmu, grs, N * HW, C);
  CU_ASSERT(diff(gdx, dx, n) < 1e-4);
  CU_ASSERT(diff(gdb, dbt, C) < 1e-4);
  kn_lrn_fwd_cpu(y, sc, x, N, C, HW, 5, 1e-4f, 0.75f, 2.0f);
  gpu->lrn_fwd(gy, gsc, gx, N, C, HW, 5, 1e-4f, 0.75f, 2.0f);
  CU_ASSERT(diff(gy, y, n) < 1e-4);
  kn_lrn_bwd_cpu(dx, dy, x, y, sc, N, C, HW, 5, 1e-4f, 0.75f, 2.0f);
  gpu->lrn_bwd(gdx, gdy, gx, gy, gsc, N, C, HW, 5, 1e-4f, 0.75f, 2.0f);
  CU_ASSERT(diff(gdx, dx, n) < 1e-4);
  kn_gelu_fwd_cpu(y, x, n);
  gpu->gelu_fwd(gy, gx, n);
  CU_ASSERT(diff(gy, y, n) < 1e-5);
  kn_gelu_bwd_cpu(dx, dy, x, n);
  gpu->gelu_bwd(gdx, gdy, gx, n);
  CU_ASSERT(diff(gdx, dx, n) < 1e-4);
  kn_relu_fwd_cpu(y, x, n);
  gpu->relu_fwd(gy, gx, n);
  CU_ASSERT(diff(gy, y, n) == 0);
  kn_dropout_fwd_cpu(y, x, n, 0.4f, 5);
  gpu->dropout_fwd(gy, gx, n, 0.4f, 5);
  CU_ASSERT(diff(gy, y, n) < 1e-6);
  kn_pool ps = {N, C, 2, 5, 3, 3, 2, 1};
  int no = N * C * kn_pool_out_h(&ps) * kn_pool_out_w(&ps);
  int *arg = calloc(no, sizeof(int));
  int *garg = up(arg, no * sizeof(int));
  kn_maxpool_fwd_cpu(y, arg, x, &ps);
  gpu->maxpool_fwd(gy, garg, gx, &ps);
  CU_ASSERT(diff(gy, y, no) == 0);
  kn_maxpool_bwd_cpu(dx, dy, arg, &ps);
  gpu->maxpool_bwd(gdx, gdy, garg, &ps);
  CU_ASSERT(diff(gdx, dx, n) < 1e-5);
  kn_avgpool_fwd_cpu(y, x, &ps);
  gpu->avgpool_fwd(gy, gx, &ps);
  CU_ASSERT(diff(gy, y, no) < 1e-5);
  kn_avgpool_bwd_cpu(dx, dy, &ps);
  gpu->avgpool_bwd(gdx, gdy, &ps);
  CU_ASSERT(diff(gdx, dx, n) < 1e-5);
  kn_adam_step_cpu(y, mu, sc, x, n < N * HW ? n : N * HW, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  gpu->adam_step(gy, gmu, gsc, gx, n < N * HW ? n : N * HW, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  CU_ASSERT(diff(gy, y, N * HW) < 1e-5);
  kn_sgd_momentum_step_cpu(y, sc, x, n, 0.1f, 0.9f, 0.0f);
  gpu->sgd_momentum_step(gy, gsc, gx, n, 0.1f, 0.9f, 0.0f);
  CU_ASSERT(diff(gy, y, n) < 1e-5);
  void *hs[] = {x, g, b, dy, y, mu, rs, dx, dg, dbt, sc, arg};
  void *ds[] = {gx, gg, gbt, gdy, gy, gmu, grs, gdx, gdg, gdb, gsc, garg};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]), gpu->release(ds[i]);
}

static void test_sequence(void) {
  if (!gpu) return;
  const int N = 2, T = 7, C = 8, NH = 2, V = 11;
  size_t X = (size_t)N * T * C, A = (size_t)N * NH * T * T;
  float *qkv = h_rand(3 * X), *dy = h_rand(X), *o = calloc(X, 4), *att = calloc(A, 4),
        *ws = calloc(kn_attention_ws_floats(N, T, C, NH, 1), 4), *dqkv = calloc(3 * X, 4);
  float *gqkv = up(qkv, 12 * X), *gdy = up(dy, 4 * X), *go = up(o, 4 * X), *gatt = up(att, 4 * A),
        *gws = up(ws, 4 * kn_attention_ws_floats(N, T, C, NH, 1)), *gdqkv = up(dqkv, 12 * X);
  kn_attention_fwd_cpu(o, att, ws, qkv, N, T, C, NH, KN_MATH_FP32);
  gpu->attention_fwd(go, gatt, gws, gqkv, N, T, C, NH, KN_MATH_FP32);
  CU_ASSERT(diff(go, o, X) < 1e-4);
  kn_attention_bwd_cpu(dqkv, ws, dy, qkv, att, N, T, C, NH, KN_MATH_FP32);
  gpu->attention_bwd(gdqkv, gws, gdy, gqkv, gatt, N, T, C, NH, KN_MATH_FP32);
  CU_ASSERT(diff(gdqkv, dqkv, 3 * X) < 1e-4);
  /* softmax cross-entropy over M = N·T rows of V logits */
  int M = N * T, *tg = malloc(sizeof(int) * M);
  for (int i = 0; i < M; i++) tg[i] = (i * 7) % V;
  float *z = h_rand((size_t)M * V), *p = calloc((size_t)M * V, 4), *dz = calloc((size_t)M * V, 4);
  int *gtg = up(tg, sizeof(int) * M);
  float *gz = up(z, 4 * M * V), *gp = up(p, 4 * M * V), *gdz = up(dz, 4 * M * V);
  float l1 = kn_softmax_ce_fwd_cpu(p, z, tg, M, V), l2 = gpu->softmax_ce_fwd(gp, gz, gtg, M, V);
  CU_ASSERT_DOUBLE_EQUAL(l1, l2, 1e-5);
  kn_softmax_ce_bwd_cpu(dz, p, tg, M, V);
  gpu->softmax_ce_bwd(gdz, gp, gtg, M, V);
  CU_ASSERT(diff(gdz, dz, (size_t)M * V) < 1e-5);
  /* embedding with positions */
  float *wte = h_rand((size_t)V * C), *wpe = h_rand((size_t)T * C), *dwte = calloc((size_t)V * C, 4);
  float *gwte = up(wte, 4 * V * C), *gwpe = up(wpe, 4 * T * C), *gdwte = up(dwte, 4 * V * C);
  kn_embedding_fwd_cpu(o, tg, wte, wpe, N, T, C);
  gpu->embedding_fwd(go, gtg, gwte, gwpe, N, T, C);
  CU_ASSERT(diff(go, o, X) < 1e-6);
  kn_embedding_bwd_cpu(dwte, NULL, dy, tg, N, T, C);
  gpu->embedding_bwd(gdwte, NULL, gdy, gtg, N, T, C);
  CU_ASSERT(diff(gdwte, dwte, (size_t)V * C) < 1e-5);
  /* MoE */
  kn_moe_shape s = {N * T, C, 4, 2, 6, 1.0};
  size_t E = 4, F = 6, nw = E * C + E + 2 * E * F * C + E * F + E * C;
  float *w = h_rand(nw), *gr = calloc(nw, 4), *sf = calloc(kn_moe_saved_floats(&s), 4),
        *mws = calloc(kn_moe_ws_floats(&s), 4), *din = calloc(X, 4);
  int *si = calloc(kn_moe_saved_ints(&s), sizeof(int));
  float *gw = up(w, 4 * nw), *ggr = up(gr, 4 * nw), *gsf = up(sf, 4 * kn_moe_saved_floats(&s)),
        *gmws = up(mws, 4 * kn_moe_ws_floats(&s)), *gdin = up(din, 4 * X);
  int *gsi = up(si, sizeof(int) * kn_moe_saved_ints(&s));
  kn_moe_saved sv, gsv;
  kn_moe_saved_bind(&sv, sf, si, &s);
  kn_moe_saved_bind(&gsv, gsf, gsi, &s);
#define MW(p) {p, p + E * C, p + E * C + E, p + E * C + E + E * F * C, \
               p + E * C + E + E * F * C + E * F, p + E * C + E + 2 * E * F * C + E * F}
  kn_moe_weights hw = MW(w), dw = MW(gw);
  kn_moe_grads hg = MW(gr), dg = MW(ggr);
  kn_moe_fwd_cpu(o, &sv, qkv, &hw, &s, KN_MATH_FP32);
  gpu->moe_fwd(go, &gsv, gqkv, &dw, &s, KN_MATH_FP32);
  CU_ASSERT(diff(go, o, X) < 1e-4);
  kn_moe_bwd_cpu(din, &hg, mws, dy, qkv, &sv, &hw, &s, KN_MATH_FP32);
  gpu->moe_bwd(gdin, &dg, gmws, gdy, gqkv, &gsv, &dw, &s, KN_MATH_FP32);
  CU_ASSERT(diff(gdin, din, X) < 1e-4);
  CU_ASSERT(diff(ggr, gr, nw) < 1e-4);
  void *hs[] = {qkv, dy, o, att, ws, dqkv, tg, z, p, dz, wte, wpe, dwte, w, gr, sf, mws, din, si};
  void *ds[] = {gqkv, gdy, go, gatt, gws, gdqkv, gtg, gz, gp, gdz, gwte, gwpe, gdwte, gw, ggr,
                gsf, gmws, gdin, gsi};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]), gpu->release(ds[i]);
}

static void probe(void) {
  const char *why = NULL;
  kn_cpu_init();
  gpu = kn_cuda(&why);
  const char *req = getenv("DLSIM_REQUIRE_GPU");
  if (req && strcmp(req, "1") == 0) {
    if (!gpu) printf("DLSIM_REQUIRE_GPU=1 but %s\n", why);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gpu);
  } else if (!gpu) {
    printf("skipped: %s\n", why);
  }
}

static const dl_cu_test cuda_tests[] = {DL_CU_TEST(probe), DL_CU_TEST(test_gemm_linear_conv),
                                        DL_CU_TEST(test_norms_elementwise),
                                        DL_CU_TEST(test_sequence), DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"kernels_cuda", cuda_tests}, {NULL, NULL}};
