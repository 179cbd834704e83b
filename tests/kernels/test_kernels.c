/* test_kernels.c — the CPU twins against simple references: naive loops for GEMM, convolution and
 * attention (multi-head and grouped-query, flash-style against stored probabilities), direct
 * formulas for RMSNorm, SwiGLU and the rotary embedding, hand-computed values for the loss and
 * the optimizer steps, central finite differences for every backward, a same-bits check for
 * determinism, and the guarded backend (its results, and a crash on a host read of its memory). */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu_main.h"
#include "kernels.h"

static unsigned long long seed_;
static float rnd(void) {
  seed_ = seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((seed_ >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rvec(size_t n) {
  float *v = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) v[i] = rnd();
  return v;
}
static float *zvec(size_t n) { return calloc(n, sizeof(float)); }

/* loss = Σ out·R for the current forward; each test sets `fwd_loss`. */
static double (*fwd_loss)(void);
static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

/* Central differences on `k` spread elements of p against the analytic gradient g. */
static void fd_check(float *p, const float *g, size_t n, int k, float h) {
  for (int t = 0; t < k; t++) {
    size_t i = (size_t)t * 7919 % n;
    float keep = p[i];
    p[i] = keep + h;
    double lp = fwd_loss();
    p[i] = keep - h;
    double lm = fwd_loss();
    p[i] = keep;
    double fd = (lp - lm) / (2.0 * h);
    double tol = 2e-2 * fmax(1.0, fabs(fd));
    if (fabs(fd - g[i]) > tol) {
      fprintf(stderr, "\n  fd mismatch at %zu: fd %.6g analytic %.6g\n", i, fd, g[i]);
      CU_FAIL("finite difference mismatch");
      return;
    }
  }
  CU_PASS("fd");
}

static void test_gemm(void) {
  seed_ = 1;
  const int M = 5, N = 7, K = 6;
  float *A = rvec(M * K), *B = rvec(K * N), *C = rvec(M * N), *C0 = malloc(sizeof(float) * M * N);
  memcpy(C0, C, sizeof(float) * M * N);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      memcpy(C, C0, sizeof(float) * M * N);
      kn_gemm_cpu(ta, tb, M, N, K, 0.5f, A, B, 2.0f, C, KN_MATH_FP32);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = 0;
          for (int q = 0; q < K; q++)
            s += (double)(ta ? A[q * M + i] : A[i * K + q]) * (tb ? B[j * K + q] : B[q * N + j]);
          CU_ASSERT_DOUBLE_EQUAL(C[i * N + j], 0.5 * s + 2.0 * C0[i * N + j], 1e-5);
        }
    }
  free(A), free(B), free(C), free(C0);
}

/* ---- convolution ---- */
static kn_conv cs = {2, 4, 7, 6, 6, 3, 3, 2, 1, 2};
static float *cin, *cw, *cb, *cout_, *cws, *cR;
static double conv_loss(void) {
  kn_conv2d_fwd_cpu(cout_, cws, cin, cw, cb, &cs, KN_MATH_FP32);
  return dot(cout_, cR, (size_t)cs.N * cs.C_out * kn_conv_out_h(&cs) * kn_conv_out_w(&cs));
}

static void test_conv(void) {
  seed_ = 2;
  const int Ho = kn_conv_out_h(&cs), Wo = kn_conv_out_w(&cs), Cg = cs.C_in / cs.groups,
            Og = cs.C_out / cs.groups;
  size_t nin = (size_t)cs.N * cs.C_in * cs.H * cs.W, nw = (size_t)cs.C_out * Cg * 9,
         nout = (size_t)cs.N * cs.C_out * Ho * Wo;
  cin = rvec(nin), cw = rvec(nw), cb = rvec(cs.C_out), cout_ = zvec(nout);
  cws = zvec(kn_conv_ws_floats(&cs)), cR = rvec(nout);
  CU_ASSERT_EQUAL(Ho, 4);
  CU_ASSERT_EQUAL(Wo, 3);
  kn_conv2d_fwd_cpu(cout_, cws, cin, cw, cb, &cs, KN_MATH_FP32);
  for (int n = 0; n < cs.N; n++) /* naive direct convolution */
    for (int o = 0; o < cs.C_out; o++)
      for (int y = 0; y < Ho; y++)
        for (int x = 0; x < Wo; x++) {
          double s = cb[o];
          int g = o / Og;
          for (int c = 0; c < Cg; c++)
            for (int i = 0; i < 3; i++)
              for (int j = 0; j < 3; j++) {
                int iy = y * 2 - 1 + i, ix = x * 2 - 1 + j;
                if (iy < 0 || iy >= cs.H || ix < 0 || ix >= cs.W) continue;
                s += (double)cin[((n * cs.C_in + g * Cg + c) * cs.H + iy) * cs.W + ix] *
                     cw[((o * Cg + c) * 3 + i) * 3 + j];
              }
          CU_ASSERT_DOUBLE_EQUAL(cout_[((n * cs.C_out + o) * Ho + y) * Wo + x], s, 1e-5);
        }
  float *din = zvec(nin), *dw = zvec(nw), *db = zvec(cs.C_out);
  kn_conv2d_bwd_cpu(din, dw, db, cws, cR, cin, cw, &cs, KN_MATH_FP32);
  fwd_loss = conv_loss;
  fd_check(cin, din, nin, 12, 1e-2f);
  fd_check(cw, dw, nw, 12, 1e-2f);
  fd_check(cb, db, cs.C_out, 6, 1e-2f);
  /* determinism: the same inputs give the same bits */
  float *din2 = zvec(nin), *dw2 = zvec(nw), *db2 = zvec(cs.C_out);
  kn_conv2d_bwd_cpu(din2, dw2, db2, cws, cR, cin, cw, &cs, KN_MATH_FP32);
  CU_ASSERT(memcmp(din, din2, sizeof(float) * nin) == 0);
  CU_ASSERT(memcmp(dw, dw2, sizeof(float) * nw) == 0);
  free(din), free(dw), free(db), free(din2), free(dw2), free(db2);
  free(cin), free(cw), free(cb), free(cout_), free(cws), free(cR);
}

/* ---- linear ---- */
static float *lin, *lw, *lb, *lout, *lR;
static const int LM = 5, LI = 6, LO = 4;
static double linear_loss(void) {
  kn_linear_fwd_cpu(lout, lin, lw, lb, LM, LI, LO, KN_MATH_FP32);
  return dot(lout, lR, LM * LO);
}
static void test_linear(void) {
  seed_ = 3;
  lin = rvec(LM * LI), lw = rvec(LO * LI), lb = rvec(LO), lout = zvec(LM * LO), lR = rvec(LM * LO);
  float *din = zvec(LM * LI), *dw = zvec(LO * LI), *db = zvec(LO);
  kn_linear_bwd_cpu(din, dw, db, lR, lin, lw, LM, LI, LO, KN_MATH_FP32);
  fwd_loss = linear_loss;
  fd_check(lin, din, LM * LI, 10, 1e-2f);
  fd_check(lw, dw, LO * LI, 10, 1e-2f);
  fd_check(lb, db, LO, 4, 1e-2f);
  linear_loss();
  double s = lb[1];
  for (int i = 0; i < LI; i++) s += (double)lin[2 * LI + i] * lw[1 * LI + i];
  CU_ASSERT_DOUBLE_EQUAL(lout[2 * LO + 1], s, 1e-5);
  free(din), free(dw), free(db), free(lin), free(lw), free(lb), free(lout), free(lR);
}

/* ---- norms ---- */
static float *nin_, *ng, *nb, *nout, *nmean, *nrstd, *nR;
static const int BN_N = 3, BN_C = 4, BN_HW = 5;
static double bn_loss(void) {
  kn_batchnorm_fwd_cpu(nout, nmean, nrstd, nin_, ng, nb, BN_N, BN_C, BN_HW);
  return dot(nout, nR, BN_N * BN_C * BN_HW);
}
static double ln_loss(void) {
  kn_layernorm_fwd_cpu(nout, nmean, nrstd, nin_, ng, nb, BN_N * BN_HW, BN_C);
  return dot(nout, nR, BN_N * BN_C * BN_HW);
}
static void test_norms(void) {
  seed_ = 4;
  const int n = BN_N * BN_C * BN_HW;
  nin_ = rvec(n), ng = rvec(BN_C), nb = rvec(BN_C), nout = zvec(n), nR = rvec(n);
  nmean = zvec(BN_N * BN_HW), nrstd = zvec(BN_N * BN_HW);
  for (int pass = 0; pass < 2; pass++) {
    fwd_loss = pass ? ln_loss : bn_loss;
    fwd_loss();
    if (!pass) { /* batch statistics: each channel of the output has mean beta */
      double s = 0;
      for (int i = 0; i < BN_N; i++)
        for (int p = 0; p < BN_HW; p++) s += nout[(i * BN_C + 1) * BN_HW + p];
      CU_ASSERT_DOUBLE_EQUAL(s / (BN_N * BN_HW), nb[1], 1e-5);
    }
    float *din = zvec(n), *dg = zvec(BN_C), *db = zvec(BN_C);
    if (pass)
      kn_layernorm_bwd_cpu(din, dg, db, nR, nin_, ng, nmean, nrstd, BN_N * BN_HW, BN_C);
    else
      kn_batchnorm_bwd_cpu(din, dg, db, nR, nin_, nmean, nrstd, ng, BN_N, BN_C, BN_HW);
    fd_check(nin_, din, n, 12, 1e-2f);
    fd_check(ng, dg, BN_C, 4, 1e-2f);
    fd_check(nb, db, BN_C, 4, 1e-2f);
    free(din), free(dg), free(db);
  }
  free(nin_), free(ng), free(nb), free(nout), free(nR), free(nmean), free(nrstd);
}

/* ---- LRN ---- */
static float *rin, *rout, *rscale, *rR;
static double lrn_loss(void) {
  kn_lrn_fwd_cpu(rout, rscale, rin, 2, 7, 3, 5, 0.5f, 0.75f, 2.0f);
  return dot(rout, rR, 42);
}
static void test_lrn(void) {
  seed_ = 5;
  rin = rvec(42), rout = zvec(42), rscale = zvec(42), rR = rvec(42);
  float *din = zvec(42);
  lrn_loss();
  /* channel 0 of sample 0, position 0: window is channels 0..2 */
  double s = 0;
  for (int c = 0; c < 3; c++) s += (double)rin[c * 3] * rin[c * 3];
  CU_ASSERT_DOUBLE_EQUAL(rout[0], rin[0] * pow(2.0 + 0.5 / 5 * s, -0.75), 1e-6);
  kn_lrn_bwd_cpu(din, rR, rin, rout, rscale, 2, 7, 3, 5, 0.5f, 0.75f, 2.0f);
  fwd_loss = lrn_loss;
  fd_check(rin, din, 42, 14, 1e-2f);
  free(din), free(rin), free(rout), free(rscale), free(rR);
}

/* ---- elementwise ---- */
static float *ein, *eout, *eR;
static const long EN = 50;
static int ekind;
static double elem_loss(void) {
  if (ekind == 0) kn_relu_fwd_cpu(eout, ein, EN);
  else if (ekind == 1) kn_gelu_fwd_cpu(eout, ein, EN);
  else kn_dropout_fwd_cpu(eout, ein, EN, 0.3f, 99);
  return dot(eout, eR, EN);
}
static void test_elementwise(void) {
  seed_ = 6;
  ein = rvec(EN), eout = zvec(EN), eR = rvec(EN);
  for (ekind = 0; ekind < 3; ekind++) {
    float *din = zvec(EN);
    elem_loss();
    if (ekind == 0) kn_relu_bwd_cpu(din, eR, eout, EN);
    else if (ekind == 1) kn_gelu_bwd_cpu(din, eR, ein, EN);
    else kn_dropout_bwd_cpu(din, eR, EN, 0.3f, 99);
    fwd_loss = elem_loss;
    fd_check(ein, din, EN, 20, 1e-3f);
    free(din);
  }
  /* GELU(1) = 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.841192 */
  float one = 1.0f, g;
  kn_gelu_fwd_cpu(&g, &one, 1);
  CU_ASSERT_DOUBLE_EQUAL(g, 0.841192, 1e-5);
  /* dropout keeps about 1 - p of a large vector, and the mask is the seed's */
  long kept = 0;
  for (long i = 0; i < 100000; i++) kept += kn_dropout_keep(7, (uint64_t)i, 0.25f);
  CU_ASSERT(kept > 74000 && kept < 76000);
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, o[3], da[3] = {0}, db[3] = {1, 1, 1};
  kn_add_fwd_cpu(o, a, b, 3);
  CU_ASSERT_DOUBLE_EQUAL(o[2], 33.0, 0);
  kn_add_bwd_cpu(da, db, b, 3);
  CU_ASSERT_DOUBLE_EQUAL(da[1], 20.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(db[1], 21.0, 0);
  kn_scale_cpu(a, 3, 0.5f); /* a = {0.5, 1, 1.5} */
  CU_ASSERT_DOUBLE_EQUAL(a[2], 1.5, 0);
  kn_axpy_cpu(a, b, 3, -0.25f); /* a += -b/4 = {-2, -4, -6} */
  CU_ASSERT_DOUBLE_EQUAL(a[0], -2.0, 0);
  CU_ASSERT_DOUBLE_EQUAL(a[2], -6.0, 0);
  free(ein), free(eout), free(eR);
}

/* ---- pooling ---- */
static kn_pool ps = {2, 3, 6, 5, 3, 3, 2, 1};
static float *pin, *pout, *pR;
static int *parg, pmax;
static double pool_loss(void) {
  if (pmax) kn_maxpool_fwd_cpu(pout, parg, pin, &ps);
  else kn_avgpool_fwd_cpu(pout, pin, &ps);
  return dot(pout, pR, (size_t)ps.N * ps.C * kn_pool_out_h(&ps) * kn_pool_out_w(&ps));
}
static void test_pool(void) {
  seed_ = 7;
  size_t nin = (size_t)ps.N * ps.C * ps.H * ps.W, no = (size_t)ps.N * ps.C * 3 * 3;
  CU_ASSERT_EQUAL(kn_pool_out_h(&ps), 3);
  CU_ASSERT_EQUAL(kn_pool_out_w(&ps), 3);
  pin = rvec(nin), pout = zvec(no), pR = rvec(no), parg = calloc(no, sizeof(int));
  for (pmax = 0; pmax < 2; pmax++) {
    float *din = zvec(nin);
    pool_loss();
    if (pmax) kn_maxpool_bwd_cpu(din, pR, parg, &ps);
    else kn_avgpool_bwd_cpu(din, pR, &ps);
    fwd_loss = pool_loss;
    fd_check(pin, din, nin, 20, 1e-3f);
    free(din);
  }
  /* global average pooling = the mean of the plane */
  kn_pool gs = {1, 1, 2, 2, 2, 2, 1, 0};
  float x[4] = {1, 2, 3, 6}, y;
  kn_avgpool_fwd_cpu(&y, x, &gs);
  CU_ASSERT_DOUBLE_EQUAL(y, 3.0, 0);
  free(pin), free(pout), free(pR), free(parg);
}

/* ---- embedding ---- */
static void test_embedding(void) {
  const int N = 2, T = 3, C = 2;
  float wte[4 * 2] = {0, 1, 2, 3, 4, 5, 6, 7}, wpe[3 * 2] = {10, 20, 30, 40, 50, 60};
  int tok[6] = {3, 0, 3, 1, 1, 2};
  float out[12], dwte[8] = {0}, dwpe[6] = {0}, dout[12];
  kn_embedding_fwd_cpu(out, tok, wte, wpe, N, T, C);
  CU_ASSERT_DOUBLE_EQUAL(out[0], 16.0, 0); /* wte[3][0] + wpe[0][0] */
  CU_ASSERT_DOUBLE_EQUAL(out[11], 65.0, 0); /* wte[2][1] + wpe[2][1] */
  for (int i = 0; i < 12; i++) dout[i] = 1.0f;
  kn_embedding_bwd_cpu(dwte, dwpe, dout, tok, N, T, C);
  CU_ASSERT_DOUBLE_EQUAL(dwte[3 * 2], 2.0, 0); /* token 3 appears twice */
  CU_ASSERT_DOUBLE_EQUAL(dwpe[0], 2.0, 0);     /* position 0 in both sequences */
  kn_embedding_fwd_cpu(out, NULL, wpe, NULL, N, T, C); /* positions alone */
  CU_ASSERT_DOUBLE_EQUAL(out[6 + 5], 60.0, 0);
}

/* ---- attention ---- */
/* out (N,T,C) against causal attention computed element by element from qkv: the packed Q|K|V
 * layout (KVH 0), or the grouped one, written out here (not with kn_qkv_offset): query head h
 * reads K and V of its group h / (NH/KVH). T <= 8. */
static void check_naive_attention(const float *out, const float *qkv, int N, int T, int C, int NH,
                                  int KVH) {
  const int hs = C / NH, r = KVH ? NH / KVH : 1, W = KVH ? (NH + 2 * KVH) * hs : 3 * C;
  for (int n = 0; n < N; n++)
    for (int h = 0; h < NH; h++) {
      const int g = h / r;
      const int qo = KVH ? (g * (r + 2) + h % r) * hs : h * hs,
                ko = KVH ? (g * (r + 2) + r) * hs : C + h * hs,
                vo = KVH ? (g * (r + 2) + r + 1) * hs : 2 * C + h * hs;
      for (int t = 0; t < T; t++) {
        double s[8], mx = -1e30, sum = 0;
        const float *q = qkv + (n * T + t) * W + qo;
        for (int j = 0; j <= t; j++) {
          const float *k = qkv + (n * T + j) * W + ko;
          s[j] = 0;
          for (int d = 0; d < hs; d++) s[j] += (double)q[d] * k[d];
          s[j] /= sqrt((double)hs);
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
        for (int d = 0; d < hs; d++) {
          double y = 0;
          for (int j = 0; j <= t; j++) y += s[j] / sum * qkv[(n * T + j) * W + vo + d];
          CU_ASSERT_DOUBLE_EQUAL(out[(n * T + t) * C + h * hs + d], y, 1e-5);
        }
      }
    }
}

static const int AN = 2, AT = 5, AC = 6, AH = 2;
static float *aqkv, *aout, *aatt, *aws, *aR;
static double attn_loss(void) {
  kn_attention_fwd_cpu(aout, aatt, aws, aqkv, AN, AT, AC, AH, 0, KN_MATH_FP32);
  return dot(aout, aR, AN * AT * AC);
}
static void test_attention(void) {
  seed_ = 8;
  aqkv = rvec(AN * AT * 3 * AC), aout = zvec(AN * AT * AC), aatt = zvec(AN * AH * AT * AT);
  aws = zvec(kn_attention_ws_floats(AN, AT, AC, AH, 1, 0)), aR = rvec(AN * AT * AC);
  attn_loss();
  check_naive_attention(aout, aqkv, AN, AT, AC, AH, 0);
  float *dqkv = zvec(AN * AT * 3 * AC);
  kn_attention_bwd_cpu(dqkv, aws, aR, aqkv, aatt, AN, AT, AC, AH, 0, KN_MATH_FP32);
  fwd_loss = attn_loss;
  fd_check(aqkv, dqkv, AN * AT * 3 * AC, 30, 1e-2f);
  free(dqkv), free(aqkv), free(aout), free(aatt), free(aws), free(aR);
}

/* ---- grouped-query attention, flash-style, RMSNorm, SwiGLU, rotary embedding ---- */
static const int GN = 2, GT = 5, GH = 4, GKV = 2, GHS = 4; /* 2 query heads per group */
static float *gqkv, *gout, *gws, *gR;
static int g_flash;
static double gqa_loss(void) {
  static float att[2 * 4 * 5 * 5];
  kn_attention_fwd_cpu(gout, g_flash ? NULL : att, gws, gqkv, GN, GT, GH * GHS, GH, GKV,
                       KN_MATH_FP32);
  return dot(gout, gR, GN * GT * GH * GHS);
}
static void test_gqa_attention(void) {
  seed_ = 21;
  const int C = GH * GHS, W = (GH + 2 * GKV) * GHS, r = GH / GKV;
  CU_ASSERT_EQUAL(kn_qkv_width(C, GH, GKV), W);
  CU_ASSERT_EQUAL(kn_qkv_offset(0, 3, C, GH, GKV), (1 * (r + 2) + 1) * GHS); /* q head 3 */
  CU_ASSERT_EQUAL(kn_qkv_offset(1, 3, C, GH, GKV), (1 * (r + 2) + r) * GHS); /* K of group 1 */
  CU_ASSERT_EQUAL(kn_qkv_offset(2, 0, C, GH, GKV), (r + 1) * GHS);           /* V of group 0 */
  CU_ASSERT_EQUAL(kn_qkv_slot((1 * (r + 2) + 1) * GHS + 2, GHS, GH, GKV), 1); /* in q head 3 */
  CU_ASSERT_EQUAL(kn_qkv_slot((r + 1) * GHS, GHS, GH, GKV), r + 1);            /* V_0 */
  gqkv = rvec(GN * GT * W), gout = zvec(GN * GT * C), gR = rvec(GN * GT * C);
  gws = zvec(kn_attention_ws_floats(GN, GT, C, GH, 1, 1));
  g_flash = 0;
  gqa_loss();
  check_naive_attention(gout, gqkv, GN, GT, C, GH, GKV);
  float *d1 = zvec(GN * GT * W), *d2 = zvec(GN * GT * W), *o1 = zvec(GN * GT * C);
  static float att[2 * 4 * 5 * 5];
  kn_attention_fwd_cpu(o1, att, gws, gqkv, GN, GT, C, GH, GKV, KN_MATH_FP32);
  kn_attention_bwd_cpu(d1, gws, gR, gqkv, att, GN, GT, C, GH, GKV, KN_MATH_FP32);
  fwd_loss = gqa_loss;
  fd_check(gqkv, d1, GN * GT * W, 40, 1e-2f);
  /* flash-style: the same output and gradients without the probabilities */
  g_flash = 1;
  gqa_loss();
  CU_ASSERT_EQUAL(memcmp(o1, gout, sizeof(float) * GN * GT * C), 0);
  kn_attention_bwd_cpu(d2, gws, gR, gqkv, NULL, GN, GT, C, GH, GKV, KN_MATH_FP32);
  CU_ASSERT_EQUAL(memcmp(d1, d2, sizeof(float) * GN * GT * W), 0);
  free(d1), free(d2), free(o1), free(gqkv), free(gout), free(gws), free(gR);
}

/* ---- ring attention blocks: cp ranks of two mirrored chunks each, every step's block, equal
 * the whole sequence's causal attention (outputs, and Q, K, V gradients summed over the ranks) */
static void ring_case(int NH, int KVH, int hs) {
  const int N = 2, cp = 3, L = 2, T = 2 * cp * L, n = 2 * L, C = NH * hs;
  const int W = kn_qkv_width(C, NH, KVH), KW = kn_ring_kv_width(C, NH, KVH);
  const int G = KVH > 0 ? KVH : NH, rep = NH / G;
  float *qkv = rvec((size_t)N * T * W), *R = rvec((size_t)N * T * C);
  float *out = zvec((size_t)N * T * C), *dqkv = zvec((size_t)N * T * W);
  float *ws = zvec(kn_attention_ws_floats(N, T, C, NH, 1, 1));
  kn_attention_fwd_cpu(out, NULL, ws, qkv, N, T, C, NH, KVH, KN_MATH_FP32);
  kn_attention_bwd_cpu(dqkv, ws, R, qkv, NULL, N, T, C, NH, KVH, KN_MATH_FP32);
  /* each rank's rows: positions of its chunks i and 2·cp − 1 − i */
  float *lq[3], *lkv[3], *lo[3], *llse[3], *ldq[3];
  float *ring_dqkv = zvec((size_t)N * T * W);
  int pos[3][4];
  for (int i = 0; i < cp; i++) {
    lq[i] = zvec((size_t)N * n * W), lkv[i] = zvec((size_t)N * n * KW);
    lo[i] = zvec((size_t)N * n * C), llse[i] = zvec((size_t)N * NH * n);
    ldq[i] = zvec((size_t)N * n * W);
    for (int t = 0; t < n; t++) pos[i][t] = t < L ? i * L + t : (2 * cp - 1 - i) * L + t - L;
    for (int b = 0; b < N; b++)
      for (int t = 0; t < n; t++) {
        const float *src = qkv + ((size_t)b * T + pos[i][t]) * W;
        memcpy(lq[i] + ((size_t)b * n + t) * W, src, sizeof(float) * W);
        for (int g = 0; g < G; g++) {
          memcpy(lkv[i] + ((size_t)b * n + t) * KW + g * hs,
                 src + kn_qkv_offset(1, g * rep, C, NH, KVH), sizeof(float) * hs);
          memcpy(lkv[i] + ((size_t)b * n + t) * KW + (G + g) * hs,
                 src + kn_qkv_offset(2, g * rep, C, NH, KVH), sizeof(float) * hs);
        }
      }
  }
  float *dout = zvec((size_t)N * n * C), *dkv = zvec((size_t)N * n * KW);
  for (int i = 0; i < cp; i++) {
    for (int j = 0; j < cp; j++) {
      const int src = ((i - j) % cp + cp) % cp;
      kn_ring k = {N, n, C, NH, KVH, i, 2 * cp - 1 - i, src, 2 * cp - 1 - src, j == 0};
      kn_attention_ring_fwd_cpu(lo[i], llse[i], lq[i], lkv[src], &k);
    }
    for (int b = 0; b < N; b++)
      for (int t = 0; t < n; t++) {
        for (int c = 0; c < C; c++) {
          CU_ASSERT_DOUBLE_EQUAL(lo[i][((size_t)b * n + t) * C + c],
                                 out[((size_t)b * T + pos[i][t]) * C + c], 1e-5);
          dout[((size_t)b * n + t) * C + c] = R[((size_t)b * T + pos[i][t]) * C + c];
        }
      }
    for (int j = 0; j < cp; j++) { /* the chunk's K/V gradients go to its rank's positions */
      const int src = ((i - j) % cp + cp) % cp;
      kn_ring k = {N, n, C, NH, KVH, i, 2 * cp - 1 - i, src, 2 * cp - 1 - src, j == 0};
      memset(dkv, 0, sizeof(float) * (size_t)N * n * KW);
      kn_attention_ring_bwd_cpu(ldq[i], dkv, dout, lo[i], llse[i], lq[i], lkv[src], &k);
      for (int b = 0; b < N; b++)
        for (int t = 0; t < n; t++)
          for (int g = 0; g < G; g++) {
            float *row = ring_dqkv + ((size_t)b * T + pos[src][t]) * W;
            const float *d = dkv + ((size_t)b * n + t) * KW;
            for (int e = 0; e < hs; e++) {
              row[kn_qkv_offset(1, g * rep, C, NH, KVH) + e] += d[g * hs + e];
              row[kn_qkv_offset(2, g * rep, C, NH, KVH) + e] += d[(G + g) * hs + e];
            }
          }
    }
    for (int b = 0; b < N; b++) /* the Q gradients stay on the rank */
      for (int t = 0; t < n; t++)
        for (int h = 0; h < NH; h++)
          for (int e = 0; e < hs; e++) {
            const int o = kn_qkv_offset(0, h, C, NH, KVH) + e;
            ring_dqkv[((size_t)b * T + pos[i][t]) * W + o] = ldq[i][((size_t)b * n + t) * W + o];
          }
  }
  for (size_t e = 0; e < (size_t)N * T * W; e++)
    CU_ASSERT_DOUBLE_EQUAL(ring_dqkv[e], dqkv[e], 1e-5);
  for (int i = 0; i < cp; i++) free(lq[i]), free(lkv[i]), free(lo[i]), free(llse[i]), free(ldq[i]);
  free(qkv), free(R), free(out), free(dqkv), free(ws), free(ring_dqkv), free(dout), free(dkv);
}
static void test_ring_attention(void) {
  seed_ = 33;
  ring_case(4, 2, 4); /* grouped: two query heads per key/value head */
  ring_case(2, 0, 3); /* multi-head, packed Q|K|V */
}

static float *rin, *rg, *rout, *rrs, *rR2;
static const int RM = 3, RC = 7;
static double rms_loss(void) {
  kn_rmsnorm_fwd_cpu(rout, rrs, rin, rg, RM, RC, 1e-5f);
  return dot(rout, rR2, RM * RC);
}
static float *sin_, *sout, *sR;
static double swiglu_loss(void) {
  kn_swiglu_fwd_cpu(sout, sin_, 9);
  return dot(sout, sR, 9);
}
static float *qin, *qout, *qR;
static const int QN = 2, QT = 3, QH = 4, QKV = 2, QHS = 6;
static double rope_loss(void) {
  kn_rope_fwd_cpu(qout, qin, QN, QT, QHS, QH, QKV, 500000.0f, 1);
  return dot(qout, qR, QN * QT * (QH + 2 * QKV) * QHS);
}
static void test_llama_kernels(void) {
  seed_ = 22;
  /* RMSNorm against y = x/√(mean x² + eps)·γ */
  rin = rvec(RM * RC), rg = rvec(RC), rout = zvec(RM * RC), rrs = zvec(RM), rR2 = rvec(RM * RC);
  rms_loss();
  for (int i = 0; i < RM; i++) {
    double ms = 0;
    for (int c = 0; c < RC; c++) ms += (double)rin[i * RC + c] * rin[i * RC + c] / RC;
    for (int c = 0; c < RC; c++)
      CU_ASSERT_DOUBLE_EQUAL(rout[i * RC + c], rin[i * RC + c] / sqrt(ms + 1e-5) * rg[c], 1e-5);
  }
  float *din = zvec(RM * RC), *dg = zvec(RC);
  kn_rmsnorm_bwd_cpu(din, dg, rR2, rin, rg, rrs, RM, RC);
  fwd_loss = rms_loss;
  fd_check(rin, din, RM * RC, 15, 1e-2f);
  fd_check(rg, dg, RC, RC, 1e-2f);
  free(din), free(dg), free(rin), free(rg), free(rout), free(rrs), free(rR2);
  /* SwiGLU against silu(gate)·up on interleaved pairs */
  sin_ = rvec(18), sout = zvec(9), sR = rvec(9);
  swiglu_loss();
  for (int j = 0; j < 9; j++) {
    const double a = sin_[2 * j], b = sin_[2 * j + 1];
    CU_ASSERT_DOUBLE_EQUAL(sout[j], a / (1 + exp(-a)) * b, 1e-6);
  }
  float *ds = zvec(18);
  kn_swiglu_bwd_cpu(ds, sR, sin_, 9);
  fwd_loss = swiglu_loss;
  fd_check(sin_, ds, 18, 18, 1e-2f);
  free(ds), free(sin_), free(sout), free(sR);
  /* rope against the rotate-half formula at positions 1..QT (pos0 = 1); V untouched */
  const int W = (QH + 2 * QKV) * QHS, r = QH / QKV, half = QHS / 2;
  qin = rvec(QN * QT * W), qout = zvec(QN * QT * W), qR = rvec(QN * QT * W);
  rope_loss();
  for (int n = 0; n < QN; n++)
    for (int t = 0; t < QT; t++)
      for (int c = 0; c < W; c++) {
        const int slot = c / QHS % (r + 2), d = c % QHS, i = d % half;
        const float *x = qin + (n * QT + t) * W + (c - d);
        const double a = (t + 1) * pow(500000.0, -2.0 * i / QHS);
        const double want = slot == r + 1 ? x[d]
                            : d < half    ? x[i] * cos(a) - x[i + half] * sin(a)
                                          : x[i] * sin(a) + x[i + half] * cos(a);
        CU_ASSERT_DOUBLE_EQUAL(qout[(n * QT + t) * W + c], want, 1e-5);
      }
  float *dq = zvec(QN * QT * W);
  kn_rope_bwd_cpu(dq, qR, QN, QT, QHS, QH, QKV, 500000.0f, 1);
  fwd_loss = rope_loss;
  fd_check(qin, dq, QN * QT * W, 40, 1e-2f);
  free(dq), free(qin), free(qout), free(qR);
}

/* ---- softmax cross-entropy ---- */
static float *slog, *sprob;
static int stgt[3] = {0, 2, 1};
static double sce_loss(void) { return kn_softmax_ce_fwd_cpu(sprob, slog, stgt, 3, 4); }
static void test_softmax_ce(void) {
  float z[4] = {1, 2, 3, 4}, p[4];
  int t = 3;
  /* −log(e⁴/(e¹+e²+e³+e⁴)) = 0.4401897 */
  CU_ASSERT_DOUBLE_EQUAL(kn_softmax_ce_fwd_cpu(p, z, &t, 1, 4), 0.4401897, 1e-6);
  seed_ = 9;
  slog = rvec(12), sprob = zvec(12);
  float *d = zvec(12);
  sce_loss();
  kn_softmax_ce_bwd_cpu(d, sprob, stgt, 3, 4);
  fwd_loss = sce_loss;
  fd_check(slog, d, 12, 12, 1e-2f);
  free(d), free(slog), free(sprob);
}

/* ---- MoE ---- */
static kn_moe_shape ms = {6, 4, 3, 2, 5, 1.0};
static kn_moe_saved msv;
static kn_moe_weights mw;
static float *mwbuf, *min_, *mout, *mR, *msf;
static int *msi;
static double moe_loss(void) {
  kn_moe_fwd_cpu(mout, &msv, min_, &mw, &ms, KN_MATH_FP32);
  return dot(mout, mR, ms.M * ms.C);
}
static void test_moe(void) {
  seed_ = 10;
  const size_t E = ms.E, C = ms.C, Fh = ms.F;
  CU_ASSERT_EQUAL(kn_moe_capacity(&ms), 4); /* ceil(1.0·2·6/3) */
  size_t nw = E * C + E + 2 * E * Fh * C + E * Fh + E * C;
  mwbuf = rvec(nw), min_ = rvec(ms.M * C), mout = zvec(ms.M * C), mR = rvec(ms.M * C);
  for (size_t i = 0; i < E * C; i++) mwbuf[i] *= 3.0f; /* a decisive router */
  msf = zvec(kn_moe_saved_floats(&ms)), msi = calloc(kn_moe_saved_ints(&ms), sizeof(int));
  kn_moe_saved_bind(&msv, msf, msi, &ms);
  float *w = mwbuf;
  mw = (kn_moe_weights){w, w + E * C, w + E * C + E, w + E * C + E + E * Fh * C,
                        w + E * C + E + E * Fh * C + E * Fh, w + E * C + E + 2 * E * Fh * C + E * Fh};
  float *g = zvec(nw), *din = zvec(ms.M * C), *ws = zvec(kn_moe_ws_floats(&ms));
  kn_moe_grads mg = {g, g + E * C, g + E * C + E, g + E * C + E + E * Fh * C,
                     g + E * C + E + E * Fh * C + E * Fh, g + E * C + E + 2 * E * Fh * C + E * Fh};
  moe_loss();
  int kept = 0;
  for (size_t e = 0; e < E; e++) {
    CU_ASSERT(msv.count[e] <= 4);
    kept += msv.count[e];
  }
  int assigned = 0;
  for (int i = 0; i < ms.M * ms.top_k; i++) assigned += msv.slot[i] >= 0;
  CU_ASSERT_EQUAL(kept, assigned);
  kn_moe_bwd_cpu(din, &mg, ws, mR, min_, &msv, &mw, &ms, KN_MATH_FP32);
  fwd_loss = moe_loss;
  fd_check(min_, din, ms.M * C, 12, 1e-3f);
  fd_check(mwbuf, g, nw, 40, 1e-3f);
  free(g), free(din), free(ws), free(mwbuf), free(min_), free(mout), free(mR), free(msf), free(msi);
}

/* ---- optimizers: one step by hand ---- */
static void test_optim(void) {
  float w = 1.0f, m = 0.5f, g = 0.2f;
  kn_sgd_momentum_step_cpu(&w, &m, &g, 1, 0.1f, 0.9f, 0.01f);
  /* g' = 0.2 + 0.01 = 0.21; m = 0.45 + 0.21 = 0.66; w = 1 − 0.066 */
  CU_ASSERT_DOUBLE_EQUAL(m, 0.66, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(w, 0.934, 1e-6);
  float aw = 1.0f, am = 0.0f, av = 0.0f, ag = 0.5f;
  kn_adam_step_cpu(&aw, &am, &av, &ag, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  /* first step: m̂ = g, v̂ = g², update = lr·g/|g| = 0.01 */
  CU_ASSERT_DOUBLE_EQUAL(aw, 0.99, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(am, 0.05, 1e-7);
  CU_ASSERT_DOUBLE_EQUAL(av, 0.00025, 1e-7); /* 1 − 0.999 rounds in fp32 */
}

/* ---- Megatron's vocabulary slices: two slices together give the whole kernels' values ---- */
static void test_vocab_slices(void) {
  enum { M = 5, V = 7, C = 3, A = 3 }; /* words [0, 3) and [3, 7) */
  seed_ = 21;
  const int tok[M] = {0, 6, 2, 3, 5};
  float *w = rvec(V * C), *dout = rvec(M * C), *z = rvec(M * V);
  float full[M * C], part[M * C], sum[M * C];
  /* embedding: each token's row comes from exactly one slice */
  kn_embedding_fwd_cpu(full, tok, w, NULL, 1, M, C);
  kn_embedding_slice_fwd_cpu(sum, tok, w, M, C, 0, A);
  kn_embedding_slice_fwd_cpu(part, tok, w + A * C, M, C, A, V - A);
  for (int i = 0; i < M * C; i++) sum[i] += part[i];
  CU_ASSERT(memcmp(sum, full, sizeof full) == 0);
  float dwf[V * C] = {0}, dws[V * C] = {0};
  kn_embedding_bwd_cpu(dwf, NULL, dout, tok, 1, M, C);
  kn_embedding_slice_bwd_cpu(dws, dout, tok, M, C, 0, A);
  kn_embedding_slice_bwd_cpu(dws + A * C, dout, tok, M, C, A, V - A);
  CU_ASSERT(memcmp(dws, dwf, sizeof dwf) == 0);
  /* cross-entropy: the slices' column blocks of z */
  float za[M * A], zb[M * (V - A)];
  for (int r = 0; r < M; r++) {
    memcpy(za + r * A, z + r * V, sizeof(float) * A);
    memcpy(zb + r * (V - A), z + r * V + A, sizeof(float) * (V - A));
  }
  float mx[M], ma[M], mb[M], sa[M], sb[M], ta[M], tb[M], s[M], t[M];
  kn_row_max_cpu(mx, z, M, V);
  kn_row_max_cpu(ma, za, M, A);
  kn_row_max_cpu(mb, zb, M, V - A);
  for (int r = 0; r < M; r++) CU_ASSERT(mx[r] == (ma[r] > mb[r] ? ma[r] : mb[r]));
  const int lab[M] = {1, 4, 6, 0, 3};
  kn_softmax_ce_slice_fwd_cpu(sa, ta, za, mx, lab, M, A, 0);
  kn_softmax_ce_slice_fwd_cpu(sb, tb, zb, mx, lab, M, V - A, A);
  for (int r = 0; r < M; r++) s[r] = sa[r] + sb[r], t[r] = ta[r] + tb[r];
  for (int r = 0; r < M; r++) CU_ASSERT(t[r] == z[r * V + lab[r]]);
  float probs[M * V], dfull[M * V] = {0}, da[M * A] = {0}, db[M * (V - A)] = {0};
  const float loss = kn_softmax_ce_fwd_cpu(probs, z, lab, M, V);
  kn_softmax_ce_bwd_cpu(dfull, probs, lab, M, V);
  const float la = kn_softmax_ce_slice_bwd_cpu(da, za, mx, s, t, lab, M, A, 0);
  const float lb = kn_softmax_ce_slice_bwd_cpu(db, zb, mx, s, t, lab, M, V - A, A);
  CU_ASSERT_DOUBLE_EQUAL(la, loss, 1e-6 * fabs(loss)); /* each slice returns the whole loss */
  CU_ASSERT_DOUBLE_EQUAL(lb, loss, 1e-6 * fabs(loss));
  for (int r = 0; r < M; r++)
    for (int j = 0; j < V; j++) {
      const float d = j < A ? da[r * A + j] : db[r * (V - A) + j - A];
      CU_ASSERT_DOUBLE_EQUAL(d, dfull[r * V + j], 1e-6);
    }
  free(w), free(dout), free(z);
}

/* ---- the guarded backend: the CPU twins' results, and no host access to its memory ---- */
static void test_guarded(void) {
  const kn_backend *k = &kn_cpu_guarded;
  const long n = 5000;
  float *h = rvec((size_t)n), *ref = zvec((size_t)n), *back = zvec((size_t)n);
  float *d = k->alloc(sizeof(float) * (size_t)n), *e = k->alloc(sizeof(float) * (size_t)n);
  CU_ASSERT_FATAL(d != NULL && e != NULL);
  k->upload(d, h, sizeof(float) * (size_t)n);
  k->zero(e, sizeof(float) * (size_t)n);
  k->relu_fwd(e, d, n);
  k->axpy(e, d, n, 2.0f);
  k->copy(d, e, sizeof(float) * (size_t)n);
  k->scale(d, n, 0.5f);
  k->download(back, d, sizeof(float) * (size_t)n);
  kn_relu_fwd_cpu(ref, h, n);
  kn_axpy_cpu(ref, h, n, 2.0f);
  kn_scale_cpu(ref, n, 0.5f);
  CU_ASSERT(memcmp(back, ref, sizeof(float) * (size_t)n) == 0);
  /* a host read of the backend's memory outside its functions must not succeed */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* die quietly, also under a sanitizer's handler */
    volatile float v = d[n / 2];
    (void)v;
    _exit(42);
  }
  int st = 0;
  CU_ASSERT_FATAL(pid > 0 && waitpid(pid, &st, 0) == pid);
  CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
  k->release(d);
  k->release(e);
  free(h), free(ref), free(back);
}

/* --precision's names are the arithmetic's: each one parses to the value that prints it */
static void test_math_names(void) {
  for (int m = 0; m < KN_N_MATHS; m++) {
    kn_math got = KN_N_MATHS;
    CU_ASSERT(kn_math_parse(kn_math_name((kn_math)m), &got) && got == (kn_math)m);
  }
  kn_math keep = KN_MATH_TF32;
  CU_ASSERT(!kn_math_parse("fp8", &keep) && keep == KN_MATH_TF32);
  CU_ASSERT(!kn_math_parse(NULL, &keep));
}

static void setup_blas(void) { kn_cpu_init(); }

static const dl_cu_test kernel_tests[] = {
    DL_CU_TEST(setup_blas), DL_CU_TEST(test_gemm), DL_CU_TEST(test_conv),
    DL_CU_TEST(test_linear), DL_CU_TEST(test_norms), DL_CU_TEST(test_lrn),
    DL_CU_TEST(test_elementwise), DL_CU_TEST(test_pool), DL_CU_TEST(test_embedding),
    DL_CU_TEST(test_attention), DL_CU_TEST(test_gqa_attention), DL_CU_TEST(test_ring_attention),
    DL_CU_TEST(test_llama_kernels),
    DL_CU_TEST(test_softmax_ce), DL_CU_TEST(test_moe),
    DL_CU_TEST(test_optim), DL_CU_TEST(test_vocab_slices), DL_CU_TEST(test_guarded),
    DL_CU_TEST(test_math_names),
    DL_CU_END};

const dl_cu_suite dl_cu_suites[] = {{"kernels_cpu", kernel_tests}, {NULL, NULL}};
