/* test_kernels_cuda.c — every CUDA kernel against its CPU twin on the same inputs, through the
 * backend table that kernels/cuda_loader.c loads.
 *
 * Tolerances. fp32: max |gpu − cpu| / max(1, |cpu|) < 1e-4 (only the order of the sums differs).
 * The GEMM-like kernels (GEMM, linear, convolution, attention, MoE) also run with tf32, fp16 and
 * bf16 inputs; there the error is ‖gpu − cpu‖ / ‖cpu‖ over the whole output, and must be under
 * 5e-3 (tf32 and fp16: 10 stored mantissa bits) or 2e-2 (bf16: 7). MoE's routing is discrete,
 * so its low-precision forward is compared only when the routing agrees with fp32's (it says so
 * when it does not); see test_moe_large.
 *
 * Shapes are chosen so that every path runs: several chunks of images in a convolution
 * (DLSIM_CUDA_WS_KB set small), a 1x1 convolution (no im2col), grouped convolution, several
 * blocks per batch-norm channel, layer-norm rows longer than a warp, softmax rows of 70 and
 * 1,000, and more MoE tokens than one block of the capacity assignment holds.
 *
 * Without a CUDA device it prints "skipped: no CUDA device" and passes, unless
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
  for (size_t i = 0; i < n; i++) {
    const double e = fabs(g[i] - h[i]) / fmax(1.0, fabs(h[i]));
    if (!(e <= worst)) worst = e; /* a NaN stays (fmax would drop it) */
  }
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
  /* what the real executor moves between kernels: zero, copy, scale, axpy (exact in fp32) */
  memset(y, 0, sizeof(float) * n);
  gpu->zero(gy, sizeof(float) * n);
  CU_ASSERT(diff(gy, y, n) == 0);
  kn_axpy_cpu(y, x, n, 1.0f);
  kn_scale_cpu(y, n, 0.25f);
  gpu->copy(gy, gx, sizeof(float) * n);
  gpu->scale(gy, n, 0.25f);
  CU_ASSERT(diff(gy, y, n) == 0);
  kn_axpy_cpu(y, dy, n, -3.0f);
  gpu->axpy(gy, gdy, n, -3.0f);
  CU_ASSERT(diff(gy, y, n) < 1e-6);
  void *hs[] = {x, g, b, dy, y, mu, rs, dx, dg, dbt, sc, arg};
  void *ds[] = {gx, gg, gbt, gdy, gy, gmu, grs, gdx, gdg, gdb, gsc, garg};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]), gpu->release(ds[i]);
}

/* Megatron's vocabulary slices: rows in several blocks, a slice in the middle of the vocabulary,
 * tokens and targets inside and outside it, repeated tokens (the backward's atomics) */
static void test_vocab_slices(void) {
  if (!gpu) return;
  const int M = 300, C = 64, lo = 500, n = 1000, V = n;
  int *tok = malloc(sizeof(int) * M), *lab = malloc(sizeof(int) * M);
  for (int i = 0; i < M; i++) tok[i] = (i * 37) % 2000, lab[i] = (i * 53) % 2000;
  float *w = h_rand((size_t)n * C), *dout = h_rand((size_t)M * C), *z = h_rand((size_t)M * V);
  float *out = calloc((size_t)M * C, 4), *dw = calloc((size_t)n * C, 4), *mx = calloc(M, 4),
        *sum = calloc(M, 4), *zt = calloc(M, 4), *din = calloc((size_t)M * V, 4);
  int *gtok = up(tok, sizeof(int) * M), *glab = up(lab, sizeof(int) * M);
  float *gw = up(w, 4 * (size_t)n * C), *gdout = up(dout, 4 * (size_t)M * C),
        *gz = up(z, 4 * (size_t)M * V), *gout = up(out, 4 * (size_t)M * C),
        *gdw = up(dw, 4 * (size_t)n * C), *gmx = up(mx, 4 * M), *gsum = up(sum, 4 * M),
        *gzt = up(zt, 4 * M), *gdin = up(din, 4 * (size_t)M * V);
  kn_embedding_slice_fwd_cpu(out, tok, w, M, C, lo, n);
  gpu->embedding_slice_fwd(gout, gtok, gw, M, C, lo, n);
  CU_ASSERT(diff(gout, out, (size_t)M * C) == 0);
  kn_embedding_slice_bwd_cpu(dw, dout, tok, M, C, lo, n);
  gpu->embedding_slice_bwd(gdw, gdout, gtok, M, C, lo, n);
  CU_ASSERT(diff(gdw, dw, (size_t)n * C) < 1e-5);
  kn_row_max_cpu(mx, z, M, V);
  gpu->row_max(gmx, gz, M, V);
  CU_ASSERT(diff(gmx, mx, M) == 0);
  kn_softmax_ce_slice_fwd_cpu(sum, zt, z, mx, lab, M, V, lo);
  gpu->softmax_ce_slice_fwd(gsum, gzt, gz, gmx, glab, M, V, lo);
  CU_ASSERT(diff(gsum, sum, M) < 1e-5);
  CU_ASSERT(diff(gzt, zt, M) == 0);
  const float l = kn_softmax_ce_slice_bwd_cpu(din, z, mx, sum, zt, lab, M, V, lo);
  const float gl = gpu->softmax_ce_slice_bwd(gdin, gz, gmx, gsum, gzt, glab, M, V, lo);
  CU_ASSERT_DOUBLE_EQUAL(gl, l, 1e-5 * fabs(l));
  CU_ASSERT(diff(gdin, din, (size_t)M * V) < 1e-6);
  void *hs[] = {tok, lab, w, dout, z, out, dw, mx, sum, zt, din};
  void *ds[] = {gtok, glab, gw, gdout, gz, gout, gdw, gmx, gsum, gzt, gdin};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]), gpu->release(ds[i]);
}

/* Ring attention blocks (grouped heads, two mirrored chunks against another rank's): the GPU's
 * output, log-sum-exp and gradients equal the CPU twin's. */
static void test_ring(void) {
  if (!gpu) return;
  const int N = 2, n = 6, NH = 4, KVH = 2, hs = 8, C = NH * hs;
  const int W = kn_qkv_width(C, NH, KVH), KW = kn_ring_kv_width(C, NH, KVH);
  const size_t X = (size_t)N * n * C, Q = (size_t)N * n * W, K = (size_t)N * n * KW,
               Lz = (size_t)N * NH * n;
  float *qkv = h_rand(Q), *kv = h_rand(K), *kv2 = h_rand(K), *dy = h_rand(X);
  float *o = calloc(X, 4), *lse = calloc(Lz, 4), *dq = calloc(Q, 4), *dkv = calloc(K, 4);
  float *gqkv = up(qkv, 4 * Q), *gkv = up(kv, 4 * K), *gkv2 = up(kv2, 4 * K), *gdy = up(dy, 4 * X);
  float *go = up(o, 4 * X), *glse = up(lse, 4 * Lz), *gdq = up(dq, 4 * Q), *gdkv = up(dkv, 4 * K);
  kn_ring first = {N, n, C, NH, KVH, 1, 4, 1, 4, 1}, other = {N, n, C, NH, KVH, 1, 4, 0, 5, 0};
  kn_attention_ring_fwd_cpu(o, lse, qkv, kv, &first);
  gpu->attention_ring_fwd(go, glse, gqkv, gkv, &first);
  kn_attention_ring_fwd_cpu(o, lse, qkv, kv2, &other);
  gpu->attention_ring_fwd(go, glse, gqkv, gkv2, &other);
  CU_ASSERT(diff(go, o, X) < 1e-5);
  CU_ASSERT(diff(glse, lse, Lz) < 1e-5);
  kn_attention_ring_bwd_cpu(dq, dkv, dy, o, lse, qkv, kv2, &other);
  gpu->attention_ring_bwd(gdq, gdkv, gdy, go, glse, gqkv, gkv2, &other);
  CU_ASSERT(diff(gdq, dq, Q) < 1e-5);
  CU_ASSERT(diff(gdkv, dkv, K) < 1e-5);
  void *hs_[] = {qkv, kv, kv2, dy, o, lse, dq, dkv};
  void *ds[] = {gqkv, gkv, gkv2, gdy, go, glse, gdq, gdkv};
  for (size_t i = 0; i < sizeof hs_ / sizeof hs_[0]; i++) free(hs_[i]), gpu->release(ds[i]);
}

static void test_sequence(void) {
  if (!gpu) return;
  const int N = 2, T = 7, C = 8, NH = 2, V = 11;
  size_t X = (size_t)N * T * C, A = (size_t)N * NH * T * T;
  float *qkv = h_rand(3 * X), *dy = h_rand(X), *o = calloc(X, 4), *att = calloc(A, 4),
        *ws = calloc(kn_attention_ws_floats(N, T, C, NH, 1, 0), 4), *dqkv = calloc(3 * X, 4);
  float *gqkv = up(qkv, 12 * X), *gdy = up(dy, 4 * X), *go = up(o, 4 * X), *gatt = up(att, 4 * A),
        *gws = up(ws, 4 * kn_attention_ws_floats(N, T, C, NH, 1, 0)), *gdqkv = up(dqkv, 12 * X);
  kn_attention_fwd_cpu(o, att, ws, qkv, N, T, C, NH, 0, KN_MATH_FP32);
  gpu->attention_fwd(go, gatt, gws, gqkv, N, T, C, NH, 0, KN_MATH_FP32);
  CU_ASSERT(diff(go, o, X) < 1e-4);
  kn_attention_bwd_cpu(dqkv, ws, dy, qkv, att, N, T, C, NH, 0, KN_MATH_FP32);
  gpu->attention_bwd(gdqkv, gws, gdy, gqkv, gatt, N, T, C, NH, 0, KN_MATH_FP32);
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


/* ‖gpu − cpu‖ / ‖cpu‖ over n floats */
static double nrel(const float *d, const float *h, size_t n) {
  float *g = malloc(sizeof(float) * n);
  gpu->sync();
  gpu->download(g, d, sizeof(float) * n);
  double e = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    double x = (double)g[i] - h[i];
    e += x * x;
    r += (double)h[i] * h[i];
    if (g[i] != g[i]) e = INFINITY; /* NaN never passes */
  }
  free(g);
  return r > 0 ? sqrt(e / r) : sqrt(e);
}
static const double lowp_tol[KN_N_MATHS] = {0, 5e-3, 5e-3, 2e-2};
/* Asserts gpu buffer d matches host h in math m; prints the error. */
static void check(const char *what, kn_math m, const float *d, const float *h, size_t n) {
  double err = m == KN_MATH_FP32 ? diff(d, h, n) : nrel(d, h, n);
  double tol = m == KN_MATH_FP32 ? 1e-4 : lowp_tol[m];
  printf("  %-28s %-4s error %.2e (tolerance %.0e)%s\n", what, kn_math_name(m), err, tol,
         err < tol ? "" : "  FAILED");
  CU_ASSERT(err < tol);
}
static float *dzero(size_t n) {
  float *d = gpu->alloc(sizeof(float) * (n ? n : 1));
  float *z = calloc(n ? n : 1, sizeof(float));
  gpu->upload(d, z, sizeof(float) * (n ? n : 1));
  free(z);
  return d;
}

/* One convolution shape, forward and backward, against the CPU twin in every precision. */
static void conv_case(const char *name, kn_conv s, int bias, int with_dx) {
  int Ho = kn_conv_out_h(&s), Wo = kn_conv_out_w(&s);
  size_t nin = (size_t)s.N * s.C_in * s.H * s.W, nw = (size_t)s.C_out * (s.C_in / s.groups) * s.kh * s.kw,
         no = (size_t)s.N * s.C_out * Ho * Wo, nws = kn_conv_ws_floats(&s);
  float *x = h_rand(nin), *w = h_rand(nw), *b = h_rand(s.C_out), *dy = h_rand(no);
  float *gx = up(x, nin * 4), *gw = up(w, nw * 4), *gb = up(b, s.C_out * 4), *gdy = up(dy, no * 4);
  float *y = malloc(no * 4), *ws = malloc(nws * 4), *dx = malloc(nin * 4), *dw = malloc(nw * 4),
        *db = malloc(s.C_out * 4);
  kn_conv2d_fwd_cpu(y, ws, x, w, bias ? b : NULL, &s, KN_MATH_FP32);
  memset(dx, 0, nin * 4), memset(dw, 0, nw * 4), memset(db, 0, s.C_out * 4);
  kn_conv2d_bwd_cpu(with_dx ? dx : NULL, dw, bias ? db : NULL, ws, dy, x, w, &s, KN_MATH_FP32);
  for (int m = 0; m < KN_N_MATHS; m++) {
    float *gy = dzero(no), *gws = dzero(nws), *gdx = dzero(nin), *gdw = dzero(nw),
          *gdb = dzero(s.C_out);
    gpu->conv2d_fwd(gy, gws, gx, gw, bias ? gb : NULL, &s, (kn_math)m);
    char t[64];
    snprintf(t, sizeof t, "conv %s fwd", name);
    check(t, (kn_math)m, gy, y, no);
    gpu->conv2d_bwd(with_dx ? gdx : NULL, gdw, bias ? gdb : NULL, gws, gdy, gx, gw, &s, (kn_math)m);
    snprintf(t, sizeof t, "conv %s dw", name);
    check(t, (kn_math)m, gdw, dw, nw);
    if (with_dx) {
      snprintf(t, sizeof t, "conv %s dx", name);
      check(t, (kn_math)m, gdx, dx, nin);
    }
    if (bias) {
      snprintf(t, sizeof t, "conv %s db", name);
      check(t, KN_MATH_FP32, gdb, db, s.C_out); /* no GEMM: fp32 sums */
    }
    void *ds[] = {gy, gws, gdx, gdw, gdb};
    for (size_t i = 0; i < 5; i++) gpu->release(ds[i]);
  }
  void *hs[] = {x, w, b, dy, y, ws, dx, dw, db};
  void *ds[] = {gx, gw, gb, gdy};
  for (size_t i = 0; i < 9; i++) free(hs[i]);
  for (size_t i = 0; i < 4; i++) gpu->release(ds[i]);
}

static void test_conv_shapes(void) {
  if (!gpu) return;
  setenv("DLSIM_CUDA_WS_KB", "4", 1); /* a few images per chunk: the chunk loop runs */
  conv_case("3x3 s1 p1", (kn_conv){5, 6, 9, 8, 10, 3, 3, 1, 1, 1}, 0, 1);
  conv_case("3x3 s2 g2 bias", (kn_conv){5, 4, 9, 8, 6, 3, 3, 2, 1, 2}, 1, 1);
  conv_case("1x1 s1 direct", (kn_conv){3, 16, 7, 7, 24, 1, 1, 1, 0, 1}, 1, 1);
  conv_case("1x1 s2 shortcut", (kn_conv){3, 16, 8, 8, 12, 1, 1, 2, 0, 1}, 0, 1);
  conv_case("7x7 s2 p3 first", (kn_conv){2, 3, 20, 20, 8, 7, 7, 2, 3, 1}, 0, 0);
  setenv("DLSIM_CUDA_WS_KB", "524288", 1);
}

static void test_gemm_linear_precisions(void) {
  if (!gpu) return;
  const int M = 67, N = 45, K = 130, B = 3;
  float *A = h_rand((size_t)B * M * K), *Bm = h_rand((size_t)B * K * N), *C = malloc(4 * B * M * N);
  float *dA = up(A, 4 * B * M * K), *dB = up(Bm, 4 * B * K * N);
  for (int i = 0; i < B; i++)
    kn_gemm_cpu(1, 0, M, N, K, 0.5f, A + (size_t)i * M * K, Bm + (size_t)i * K * N, 0.0f,
                C + (size_t)i * M * N, KN_MATH_FP32);
  for (int m = 0; m < KN_N_MATHS; m++) {
    float *dC = dzero((size_t)B * M * N);
    gpu->gemm_batched(1, 0, M, N, K, 0.5f, dA, (long)M * K, dB, (long)K * N, 0.0f, dC,
                      (long)M * N, B, (kn_math)m);
    check("gemm batched (ta)", (kn_math)m, dC, C, (size_t)B * M * N);
    gpu->release(dC);
  }
  /* linear on M rows: in (M,K), w (N,K), bias; backward with input gradient */
  float *b = h_rand(N), *dy = h_rand((size_t)M * N), *o = malloc(4 * M * N),
        *din = calloc((size_t)M * K, 4), *dw = calloc((size_t)N * K, 4), *db = calloc(N, 4);
  float *gb = up(b, 4 * N), *gdy = up(dy, 4 * M * N);
  kn_linear_fwd_cpu(o, A, Bm, b, M, K, N, KN_MATH_FP32);
  kn_linear_bwd_cpu(din, dw, db, dy, A, Bm, M, K, N, KN_MATH_FP32);
  for (int m = 0; m < KN_N_MATHS; m++) {
    float *go = dzero((size_t)M * N), *gdin = dzero((size_t)M * K), *gdw = dzero((size_t)N * K),
          *gdb = dzero(N);
    gpu->linear_fwd(go, dA, dB, gb, M, K, N, (kn_math)m);
    check("linear fwd", (kn_math)m, go, o, (size_t)M * N);
    gpu->linear_bwd(gdin, gdw, gdb, gdy, dA, dB, M, K, N, (kn_math)m);
    check("linear dx", (kn_math)m, gdin, din, (size_t)M * K);
    check("linear dw", (kn_math)m, gdw, dw, (size_t)N * K);
    check("linear db", KN_MATH_FP32, gdb, db, N);
    gpu->release(go), gpu->release(gdin), gpu->release(gdw), gpu->release(gdb);
  }
  free(A), free(Bm), free(C), free(b), free(dy), free(o), free(din), free(dw), free(db);
  gpu->release(dA), gpu->release(dB), gpu->release(gb), gpu->release(gdy);
}

/* The Llama-style kernels against their CPU twins: grouped-query attention (stored and
 * flash-style), RMSNorm, SwiGLU and the rotary embedding. */
static void test_llama(void) {
  if (!gpu) return;
  const int N = 2, T = 37, NH = 8, KVH = 2, hs = 16, C = NH * hs, Wq = (NH + 2 * KVH) * hs;
  size_t X = (size_t)N * T * C, Q = (size_t)N * T * Wq, A = (size_t)N * NH * T * T;
  size_t W = kn_attention_ws_floats(N, T, C, NH, 1, 1);
  float *qkv = h_rand(Q), *dy = h_rand(X), *o = calloc(X, 4), *att = calloc(A, 4),
        *ws = calloc(W, 4), *dqkv = calloc(Q, 4);
  kn_attention_fwd_cpu(o, att, ws, qkv, N, T, C, NH, KVH, KN_MATH_FP32);
  kn_attention_bwd_cpu(dqkv, ws, dy, qkv, att, N, T, C, NH, KVH, KN_MATH_FP32);
  float *gqkv = up(qkv, 4 * Q), *gdy = up(dy, 4 * X);
  for (int flash = 0; flash < 2; flash++) {
    float *go = dzero(X), *gatt = dzero(A), *gws = dzero(W), *gd = dzero(Q);
    gpu->attention_fwd(go, flash ? NULL : gatt, gws, gqkv, N, T, C, NH, KVH, KN_MATH_FP32);
    check(flash ? "flash gqa fwd" : "gqa fwd", KN_MATH_FP32, go, o, X);
    gpu->attention_bwd(gd, gws, gdy, gqkv, flash ? NULL : gatt, N, T, C, NH, KVH, KN_MATH_FP32);
    check(flash ? "flash gqa dqkv" : "gqa dqkv", KN_MATH_FP32, gd, dqkv, Q);
    gpu->release(go), gpu->release(gatt), gpu->release(gws), gpu->release(gd);
  }
  /* RMSNorm over M rows of C */
  const int M = N * T;
  float *x = h_rand((size_t)M * C), *g = h_rand(C), *y = calloc((size_t)M * C, 4),
        *rs = calloc(M, 4), *dx = calloc((size_t)M * C, 4), *dg = calloc(C, 4);
  kn_rmsnorm_fwd_cpu(y, rs, x, g, M, C, 1e-5f);
  kn_rmsnorm_bwd_cpu(dx, dg, dy, x, g, rs, M, C);
  float *gx = up(x, 4 * (size_t)M * C), *gg = up(g, 4 * C), *gy = dzero((size_t)M * C),
        *grs = dzero(M), *gdx = dzero((size_t)M * C), *gdg = dzero(C);
  gpu->rmsnorm_fwd(gy, grs, gx, gg, M, C, 1e-5f);
  check("rmsnorm fwd", KN_MATH_FP32, gy, y, (size_t)M * C);
  gpu->rmsnorm_bwd(gdx, gdg, gdy, gx, gg, grs, M, C);
  check("rmsnorm dx", KN_MATH_FP32, gdx, dx, (size_t)M * C);
  check("rmsnorm dgamma", KN_MATH_FP32, gdg, dg, C);
  /* SwiGLU on X outputs from 2X inputs of their own */
  float *sx = h_rand(2 * X), *sy = calloc(X, 4), *sdx = calloc(2 * X, 4);
  kn_swiglu_fwd_cpu(sy, sx, (long)X);
  kn_swiglu_bwd_cpu(sdx, dy, sx, (long)X);
  float *gsx = up(sx, 4 * 2 * X), *gsy = dzero(X), *gsdx = dzero(2 * X);
  gpu->swiglu_fwd(gsy, gsx, (long)X);
  check("swiglu fwd", KN_MATH_FP32, gsy, sy, X);
  gpu->swiglu_bwd(gsdx, gdy, gsx, (long)X);
  check("swiglu dx", KN_MATH_FP32, gsdx, sdx, 2 * X);
  /* rope of the grouped QKV at positions 3.. */
  float *ry = calloc(Q, 4), *rdx = calloc(Q, 4);
  kn_rope_fwd_cpu(ry, qkv, N, T, hs, NH, KVH, 500000.0f, 3);
  kn_rope_bwd_cpu(rdx, qkv, N, T, hs, NH, KVH, 500000.0f, 3);
  float *gry = dzero(Q), *grdx = dzero(Q);
  gpu->rope_fwd(gry, gqkv, N, T, hs, NH, KVH, 500000.0f, 3);
  check("rope fwd", KN_MATH_FP32, gry, ry, Q);
  gpu->rope_bwd(grdx, gqkv, N, T, hs, NH, KVH, 500000.0f, 3);
  check("rope bwd", KN_MATH_FP32, grdx, rdx, Q);
  void *hs_[] = {qkv, dy, o, att, ws, dqkv, x, g, y, rs, dx, dg, sx, sy, sdx, ry, rdx};
  void *ds[] = {gqkv, gdy, gx, gg, gy, grs, gdx, gdg, gsx, gsy, gsdx, gry, grdx};
  for (size_t i = 0; i < sizeof hs_ / sizeof hs_[0]; i++) free(hs_[i]);
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) gpu->release(ds[i]);
}

static void test_attention_precisions(void) {
  if (!gpu) return;
  const int N = 2, T = 70, C = 48, NH = 3;
  size_t X = (size_t)N * T * C, A = (size_t)N * NH * T * T,
         W = kn_attention_ws_floats(N, T, C, NH, 1, 0);
  float *qkv = h_rand(3 * X), *dy = h_rand(X), *o = malloc(4 * X), *att = malloc(4 * A),
        *ws = malloc(4 * W), *dqkv = calloc(3 * X, 4);
  kn_attention_fwd_cpu(o, att, ws, qkv, N, T, C, NH, 0, KN_MATH_FP32);
  kn_attention_bwd_cpu(dqkv, ws, dy, qkv, att, N, T, C, NH, 0, KN_MATH_FP32);
  float *gqkv = up(qkv, 12 * X), *gdy = up(dy, 4 * X);
  for (int m = 0; m < KN_N_MATHS; m++) {
    float *go = dzero(X), *gatt = dzero(A), *gws = dzero(W), *gdqkv = dzero(3 * X);
    gpu->attention_fwd(go, gatt, gws, gqkv, N, T, C, NH, 0, (kn_math)m);
    check("attention fwd (T 70)", (kn_math)m, go, o, X);
    check("attention probabilities", (kn_math)m, gatt, att, A);
    gpu->attention_bwd(gdqkv, gws, gdy, gqkv, gatt, N, T, C, NH, 0, (kn_math)m);
    check("attention dqkv", (kn_math)m, gdqkv, dqkv, 3 * X);
    gpu->release(go), gpu->release(gatt), gpu->release(gws), gpu->release(gdqkv);
  }
  free(qkv), free(dy), free(o), free(att), free(ws), free(dqkv);
  gpu->release(gqkv), gpu->release(gdy);
}

static void test_rows_and_channels(void) {
  if (!gpu) return;
  /* batch norm with several blocks per channel */
  {
    const int N = 4, C = 3, HW = 3000;
    size_t n = (size_t)N * C * HW;
    float *x = h_rand(n), *g = h_rand(C), *b = h_rand(C), *dy = h_rand(n), *y = malloc(4 * n),
          *mu = malloc(4 * C), *rs = malloc(4 * C), *dx = calloc(n, 4), *dg = calloc(C, 4),
          *dbt = calloc(C, 4);
    for (size_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i]; /* a mean away from zero */
    kn_batchnorm_fwd_cpu(y, mu, rs, x, g, b, N, C, HW);
    kn_batchnorm_bwd_cpu(dx, dg, dbt, dy, x, mu, rs, g, N, C, HW);
    float *gx = up(x, 4 * n), *gg = up(g, 4 * C), *gbt = up(b, 4 * C), *gdy = up(dy, 4 * n),
          *gy = dzero(n), *gmu = dzero(C), *grs = dzero(C), *gdx = dzero(n), *gdg = dzero(C),
          *gdb = dzero(C);
    gpu->batchnorm_fwd(gy, gmu, grs, gx, gg, gbt, N, C, HW);
    check("batchnorm fwd (HW 3000)", KN_MATH_FP32, gy, y, n);
    check("batchnorm mean", KN_MATH_FP32, gmu, mu, C);
    check("batchnorm rstd", KN_MATH_FP32, grs, rs, C);
    gpu->batchnorm_bwd(gdx, gdg, gdb, gdy, gx, gmu, grs, gg, N, C, HW);
    check("batchnorm dx", KN_MATH_FP32, gdx, dx, n);
    check("batchnorm dgamma", KN_MATH_FP32, gdg, dg, C);
    check("batchnorm dbeta", KN_MATH_FP32, gdb, dbt, C);
    void *hs[] = {x, g, b, dy, y, mu, rs, dx, dg, dbt};
    void *ds[] = {gx, gg, gbt, gdy, gy, gmu, grs, gdx, gdg, gdb};
    for (size_t i = 0; i < 10; i++) free(hs[i]), gpu->release(ds[i]);
  }
  /* layer norm with rows longer than a warp, and enough rows for several column chunks */
  {
    const int M = 700, C = 100;
    size_t n = (size_t)M * C;
    float *x = h_rand(n), *g = h_rand(C), *b = h_rand(C), *dy = h_rand(n), *y = malloc(4 * n),
          *mu = malloc(4 * M), *rs = malloc(4 * M), *dx = calloc(n, 4), *dg = calloc(C, 4),
          *dbt = calloc(C, 4);
    kn_layernorm_fwd_cpu(y, mu, rs, x, g, b, M, C);
    kn_layernorm_bwd_cpu(dx, dg, dbt, dy, x, g, mu, rs, M, C);
    float *gx = up(x, 4 * n), *gg = up(g, 4 * C), *gbt = up(b, 4 * C), *gdy = up(dy, 4 * n),
          *gy = dzero(n), *gmu = dzero(M), *grs = dzero(M), *gdx = dzero(n), *gdg = dzero(C),
          *gdb = dzero(C);
    gpu->layernorm_fwd(gy, gmu, grs, gx, gg, gbt, M, C);
    check("layernorm fwd (C 100)", KN_MATH_FP32, gy, y, n);
    gpu->layernorm_bwd(gdx, gdg, gdb, gdy, gx, gg, gmu, grs, M, C);
    check("layernorm dx", KN_MATH_FP32, gdx, dx, n);
    check("layernorm dgamma (700 rows)", KN_MATH_FP32, gdg, dg, C);
    check("layernorm dbeta", KN_MATH_FP32, gdb, dbt, C);
    void *hs[] = {x, g, b, dy, y, mu, rs, dx, dg, dbt};
    void *ds[] = {gx, gg, gbt, gdy, gy, gmu, grs, gdx, gdg, gdb};
    for (size_t i = 0; i < 10; i++) free(hs[i]), gpu->release(ds[i]);
  }
  /* softmax cross-entropy over rows of 1,000 */
  {
    const int M = 20, V = 1000;
    int *tg = malloc(sizeof(int) * M);
    for (int i = 0; i < M; i++) tg[i] = (i * 379) % V;
    float *z = h_rand((size_t)M * V), *p = malloc(4 * M * V), *dz = calloc((size_t)M * V, 4);
    for (size_t i = 0; i < (size_t)M * V; i++) z[i] *= 8.0f;
    float l1 = kn_softmax_ce_fwd_cpu(p, z, tg, M, V);
    kn_softmax_ce_bwd_cpu(dz, p, tg, M, V);
    int *gtg = up(tg, sizeof(int) * M);
    float *gz = up(z, 4 * M * V), *gp = dzero((size_t)M * V), *gdz = dzero((size_t)M * V);
    float l2 = gpu->softmax_ce_fwd(gp, gz, gtg, M, V);
    printf("  softmax_ce loss cpu %.6f gpu %.6f\n", l1, l2);
    CU_ASSERT_DOUBLE_EQUAL(l1, l2, 1e-4 * fmax(1.0, fabs(l1)));
    check("softmax_ce probs (V 1000)", KN_MATH_FP32, gp, p, (size_t)M * V);
    gpu->softmax_ce_bwd(gdz, gp, gtg, M, V);
    check("softmax_ce dlogits", KN_MATH_FP32, gdz, dz, (size_t)M * V);
    free(tg), free(z), free(p), free(dz);
    gpu->release(gtg), gpu->release(gz), gpu->release(gp), gpu->release(gdz);
  }
  /* pooling with a larger map: the window ranges of the backward gather */
  {
    kn_pool ps = {2, 3, 17, 19, 3, 3, 2, 1};
    size_t n = 2 * 3 * 17 * 19, no = 2 * 3 * (size_t)kn_pool_out_h(&ps) * kn_pool_out_w(&ps);
    float *x = h_rand(n), *dy = h_rand(no), *y = malloc(4 * no), *dx = calloc(n, 4);
    int *arg = malloc(sizeof(int) * no);
    kn_maxpool_fwd_cpu(y, arg, x, &ps);
    kn_maxpool_bwd_cpu(dx, dy, arg, &ps);
    float *gx = up(x, 4 * n), *gdy = up(dy, 4 * no), *gy = dzero(no), *gdx = dzero(n);
    int *garg = gpu->alloc(sizeof(int) * no);
    gpu->maxpool_fwd(gy, garg, gx, &ps);
    check("maxpool fwd (17x19)", KN_MATH_FP32, gy, y, no);
    gpu->maxpool_bwd(gdx, gdy, garg, &ps);
    check("maxpool bwd", KN_MATH_FP32, gdx, dx, n);
    memset(dx, 0, 4 * n);
    kn_avgpool_fwd_cpu(y, x, &ps);
    kn_avgpool_bwd_cpu(dx, dy, &ps);
    float *gdx2 = dzero(n);
    gpu->avgpool_fwd(gy, gx, &ps);
    check("avgpool fwd", KN_MATH_FP32, gy, y, no);
    gpu->avgpool_bwd(gdx2, gdy, &ps);
    check("avgpool bwd", KN_MATH_FP32, gdx2, dx, n);
    free(x), free(dy), free(y), free(dx), free(arg);
    gpu->release(gx), gpu->release(gdy), gpu->release(gy), gpu->release(gdx),
        gpu->release(garg), gpu->release(gdx2);
  }
}

/* MoE with more tokens than one block of the capacity assignment (1,024), capacity binding. */
static void test_moe_large(void) {
  if (!gpu) return;
  kn_moe_shape s = {1500, 8, 4, 2, 6, 0.8};
  size_t M = s.M, C = s.C, E = s.E, F = s.F, X = M * C;
  size_t nw = E * C + E + 2 * E * F * C + E * F + E * C;
  float *in = h_rand(X), *dy = h_rand(X), *w = h_rand(nw), *gr = calloc(nw, 4), *o = malloc(4 * X),
        *sf = calloc(kn_moe_saved_floats(&s), 4), *mws = calloc(kn_moe_ws_floats(&s), 4),
        *din = calloc(X, 4);
  int *si = calloc(kn_moe_saved_ints(&s), sizeof(int));
  float *gin = up(in, 4 * X), *gdy = up(dy, 4 * X), *gw = up(w, 4 * nw), *ggr = dzero(nw),
        *go = dzero(X), *gsf = dzero(kn_moe_saved_floats(&s)), *gmws = dzero(kn_moe_ws_floats(&s)),
        *gdin = dzero(X);
  int *gsi = gpu->alloc(sizeof(int) * kn_moe_saved_ints(&s));
  kn_moe_saved sv, gsv;
  kn_moe_saved_bind(&sv, sf, si, &s);
  kn_moe_saved_bind(&gsv, gsf, gsi, &s);
#define MWL(p) {p, p + E * C, p + E * C + E, p + E * C + E + E * F * C, \
                p + E * C + E + E * F * C + E * F, p + E * C + E + 2 * E * F * C + E * F}
  kn_moe_weights hw = MWL(w), dw = MWL(gw);
  kn_moe_grads hg = MWL(gr), dg = MWL(ggr);
  kn_moe_fwd_cpu(o, &sv, in, &hw, &s, KN_MATH_FP32);
  gpu->moe_fwd(go, &gsv, gin, &dw, &s, KN_MATH_FP32);
  int cap = kn_moe_capacity(&s);
  int *gcount = malloc(sizeof(int) * E), *gslot = malloc(sizeof(int) * M * s.top_k);
  gpu->sync();
  gpu->download(gcount, gsv.count, sizeof(int) * E);
  gpu->download(gslot, gsv.slot, sizeof(int) * M * s.top_k);
  int same = 1;
  for (size_t e = 0; e < E; e++) same &= gcount[e] == sv.count[e];
  for (size_t i = 0; i < M * (size_t)s.top_k; i++) same &= gslot[i] == sv.slot[i];
  printf("  moe 1500 tokens: capacity %d, counts %d %d %d %d, slots %s\n", cap, gcount[0],
         gcount[1], gcount[2], gcount[3], same ? "equal" : "DIFFERENT");
  CU_ASSERT(same);
  check("moe fwd (1500 tokens)", KN_MATH_FP32, go, o, X);
  kn_moe_bwd_cpu(din, &hg, mws, dy, in, &sv, &hw, &s, KN_MATH_FP32);
  gpu->moe_bwd(gdin, &dg, gmws, gdy, gin, &gsv, &dw, &s, KN_MATH_FP32);
  check("moe dx", KN_MATH_FP32, gdin, din, X);
  check("moe weight grads", KN_MATH_FP32, ggr, gr, nw);
  /* the same routing in low precision: the expert GEMMs' error */
  for (int m = 1; m < KN_N_MATHS; m++) {
    gpu->moe_fwd(go, &gsv, gin, &dw, &s, (kn_math)m);
    gpu->sync();
    gpu->download(gslot, gsv.slot, sizeof(int) * M * s.top_k);
    int agree = 1;
    for (size_t i = 0; i < M * (size_t)s.top_k; i++) agree &= gslot[i] == sv.slot[i];
    if (agree) check("moe fwd", (kn_math)m, go, o, X);
    else printf("  moe fwd %s: routing differs from fp32 (rounded router logits); not compared\n",
                kn_math_name((kn_math)m));
  }
  free(in), free(dy), free(w), free(gr), free(o), free(sf), free(mws), free(din), free(si),
      free(gcount), free(gslot);
  void *ds[] = {gin, gdy, gw, ggr, go, gsf, gmws, gdin, gsi};
  for (size_t i = 0; i < 9; i++) gpu->release(ds[i]);
}

/* The timing harness's device-side fills: random floats in [-1, 1), constants, ints in range. */
static void test_fills(void) {
  if (!gpu) return;
  const size_t n = 1000003;
  float *d = gpu->alloc(sizeof(float) * n), *h = malloc(sizeof(float) * n);
  int *di = gpu->alloc(sizeof(int) * n), *hi = malloc(sizeof(int) * n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(gpu->fill_floats);
  gpu->fill_floats(d, n, NAN, 7);
  gpu->sync();
  gpu->download(h, d, sizeof(float) * n);
  double sum = 0, lo = 1, hi_ = -1;
  int in_range = 1;
  for (size_t i = 0; i < n; i++) {
    in_range &= h[i] >= -1.0f && h[i] < 1.0f;
    sum += h[i], lo = fmin(lo, h[i]), hi_ = fmax(hi_, h[i]);
  }
  printf("  fill_floats: mean %.4f, min %.4f, max %.4f\n", sum / n, lo, hi_);
  CU_ASSERT(in_range && fabs(sum / n) < 0.01 && lo < -0.99 && hi_ > 0.99);
  gpu->fill_floats(d, n, 0.25f, 7);
  gpu->sync();
  gpu->download(h, d, sizeof(float) * n);
  int all = 1;
  for (size_t i = 0; i < n; i++) all &= h[i] == 0.25f;
  CU_ASSERT(all);
  gpu->fill_ints(di, n, 37, 9);
  gpu->sync();
  gpu->download(hi, di, sizeof(int) * n);
  int seen[37] = {0}, ok = 1;
  for (size_t i = 0; i < n; i++) {
    ok &= hi[i] >= 0 && hi[i] < 37;
    if (ok) seen[hi[i]] = 1;
  }
  for (int k = 0; k < 37; k++) ok &= seen[k];
  CU_ASSERT(ok);
  gpu->release(d), gpu->release(di), free(h), free(hi);
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
                                        DL_CU_TEST(test_sequence), DL_CU_TEST(test_ring),
                                        DL_CU_TEST(test_vocab_slices),
                                        DL_CU_TEST(test_conv_shapes),
                                        DL_CU_TEST(test_gemm_linear_precisions),
                                        DL_CU_TEST(test_attention_precisions),
                                        DL_CU_TEST(test_llama),
                                        DL_CU_TEST(test_rows_and_channels),
                                        DL_CU_TEST(test_moe_large), DL_CU_TEST(test_fills),
                                        DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"kernels_cuda", cuda_tests}, {NULL, NULL}};
