/* gemm.c — CPU twins of the GEMM-shaped kernels: GEMM, batched GEMM, linear and convolution
 * (im2col + GEMM, one image and one group at a time). GEMMs go through OpenBLAS's cblas_sgemm;
 * with one BLAS thread (kn_cpu_init) the summation order, hence the result, is fixed. The `math`
 * argument is accepted for signature parity with CUDA and ignored: the CPU computes in fp32. */
#include <cblas.h>
#include <string.h>

#include "kernels.h"

void kn_gemm_cpu(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 const float *B, float beta, float *C, kn_math math) {
  (void)math;
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
              N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void kn_gemm_batched_cpu(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                         long sA, const float *B, long sB, float beta, float *C, long sC,
                         int batch, kn_math math) {
  for (int i = 0; i < batch; i++)
    kn_gemm_cpu(ta, tb, M, N, K, alpha, A + i * sA, B + i * sB, beta, C + i * sC, math);
}

void kn_linear_fwd_cpu(float *out, const float *in, const float *w, const float *b, int M,
                       int IC, int OC, kn_math math) {
  /* out (M,OC) = in (M,IC) · wᵀ (IC,OC) + b */
  if (b)
    for (int i = 0; i < M; i++) memcpy(out + (size_t)i * OC, b, sizeof(float) * OC);
  kn_gemm_cpu(0, 1, M, OC, IC, 1.0f, in, w, b ? 1.0f : 0.0f, out, math);
}

void kn_linear_bwd_cpu(float *din, float *dw, float *db, const float *dout, const float *in,
                       const float *w, int M, int IC, int OC, kn_math math) {
  if (din) kn_gemm_cpu(0, 0, M, IC, OC, 1.0f, dout, w, 1.0f, din, math); /* dX = dY·W */
  kn_gemm_cpu(1, 0, OC, IC, M, 1.0f, dout, in, 1.0f, dw, math);          /* dW += dYᵀ·X */
  if (db)
    for (int i = 0; i < M; i++)
      for (int o = 0; o < OC; o++) db[o] += dout[(size_t)i * OC + o];
}

int kn_conv_out_h(const kn_conv *s) { return (s->H + 2 * s->pad - s->kh) / s->stride + 1; }
int kn_conv_out_w(const kn_conv *s) { return (s->W + 2 * s->pad - s->kw) / s->stride + 1; }

size_t kn_conv_ws_floats(const kn_conv *s) {
  return (size_t)(s->C_in / s->groups) * s->kh * s->kw * kn_conv_out_h(s) * kn_conv_out_w(s);
}

/* col (Cg·kh·kw, Ho·Wo) from channels [c0, c0+Cg) of one image (C_in, H, W). */
static void im2col(float *col, const float *img, int c0, const kn_conv *s) {
  const int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s), Cg = s->C_in / s->groups;
  size_t r = 0;
  for (int c = 0; c < Cg; c++)
    for (int i = 0; i < s->kh; i++)
      for (int j = 0; j < s->kw; j++, r++) {
        const float *plane = img + (size_t)(c0 + c) * s->H * s->W;
        float *row = col + r * Ho * Wo;
        for (int y = 0; y < Ho; y++) {
          int iy = y * s->stride - s->pad + i;
          for (int x = 0; x < Wo; x++) {
            int ix = x * s->stride - s->pad + j;
            row[y * Wo + x] =
                (iy >= 0 && iy < s->H && ix >= 0 && ix < s->W) ? plane[iy * s->W + ix] : 0.0f;
          }
        }
      }
}

/* The adjoint of im2col: adds col back into channels [c0, c0+Cg) of one image. */
static void col2im_add(float *img, const float *col, int c0, const kn_conv *s) {
  const int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s), Cg = s->C_in / s->groups;
  size_t r = 0;
  for (int c = 0; c < Cg; c++)
    for (int i = 0; i < s->kh; i++)
      for (int j = 0; j < s->kw; j++, r++) {
        float *plane = img + (size_t)(c0 + c) * s->H * s->W;
        const float *row = col + r * Ho * Wo;
        for (int y = 0; y < Ho; y++) {
          int iy = y * s->stride - s->pad + i;
          if (iy < 0 || iy >= s->H) continue;
          for (int x = 0; x < Wo; x++) {
            int ix = x * s->stride - s->pad + j;
            if (ix >= 0 && ix < s->W) plane[iy * s->W + ix] += row[y * Wo + x];
          }
        }
      }
}

void kn_conv2d_fwd_cpu(float *out, float *ws, const float *in, const float *w, const float *b,
                       const kn_conv *s, kn_math math) {
  const int P = kn_conv_out_h(s) * kn_conv_out_w(s);
  const int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  for (int n = 0; n < s->N; n++) {
    const float *img = in + (size_t)n * s->C_in * s->H * s->W;
    float *o = out + (size_t)n * s->C_out * P;
    for (int g = 0; g < s->groups; g++) {
      im2col(ws, img, g * Cg, s);
      /* out_g (Og, P) = w_g (Og, Kc) · col (Kc, P) */
      kn_gemm_cpu(0, 0, Og, P, Kc, 1.0f, w + (size_t)g * Og * Kc, ws, 0.0f,
                  o + (size_t)g * Og * P, math);
    }
    if (b)
      for (int c = 0; c < s->C_out; c++)
        for (int p = 0; p < P; p++) o[(size_t)c * P + p] += b[c];
  }
}

void kn_conv2d_bwd_cpu(float *din, float *dw, float *db, float *ws, const float *dout,
                       const float *in, const float *w, const kn_conv *s, kn_math math) {
  const int P = kn_conv_out_h(s) * kn_conv_out_w(s);
  const int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  for (int n = 0; n < s->N; n++) {
    const float *img = in + (size_t)n * s->C_in * s->H * s->W;
    const float *dy = dout + (size_t)n * s->C_out * P;
    for (int g = 0; g < s->groups; g++) {
      const float *dyg = dy + (size_t)g * Og * P;
      im2col(ws, img, g * Cg, s);
      /* dW_g (Og, Kc) += dY_g (Og, P) · colᵀ (P, Kc) */
      kn_gemm_cpu(0, 1, Og, Kc, P, 1.0f, dyg, ws, 1.0f, dw + (size_t)g * Og * Kc, math);
      if (din) {
        /* dcol (Kc, P) = W_gᵀ (Kc, Og) · dY_g (Og, P), then scattered back */
        kn_gemm_cpu(1, 0, Kc, P, Og, 1.0f, w + (size_t)g * Og * Kc, dyg, 0.0f, ws, math);
        col2im_add(din + (size_t)n * s->C_in * s->H * s->W, ws, g * Cg, s);
      }
    }
    if (db)
      for (int c = 0; c < s->C_out; c++) {
        float acc = 0.0f;
        for (int p = 0; p < P; p++) acc += dy[(size_t)c * P + p];
        db[c] += acc;
      }
  }
}
