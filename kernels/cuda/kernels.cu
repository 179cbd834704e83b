/* kernels.cu — CUDA versions of the kernels in kernels.h (device pointers, default stream), the
 * CUDA backend table, and the CUDA clock for the timing harness. GEMMs go through cuBLAS
 * (cublasGemmEx with fp32 accumulation; fp16/bf16 inputs are converted into a scratch buffer
 * first); the other kernels are straightforward one-thread-per-output kernels, written for
 * clarity and compared with the CPU twins by tests/kernels/test_kernels_cuda.c.
 *
 * This file is built into the loadable module libdlsim-cuda.so, never into the driver: the CUDA
 * runtime and cuBLAS take a third of a second to load, which every `dlsim run` would pay.
 * kernels/cuda_loader.c opens the module on first use and looks up the three entry points at the
 * end of this file (dlsim_cuda_backend, dlsim_cuda_info, dlsim_cuda_device). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

static cublasHandle_t handle;
static void *scratch;
static size_t scratch_bytes;

#define GRID(n) (unsigned)(((n) + 255) / 256), 256

static void *scratch_get(size_t bytes) {
  if (bytes > scratch_bytes) {
    cudaFree(scratch);
    scratch = NULL;
    scratch_bytes = 0;
    if (cudaMalloc(&scratch, bytes) != cudaSuccess) return NULL;
    scratch_bytes = bytes;
  }
  return scratch;
}

__global__ void to_half(__half *d, const float *s, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) d[i] = __float2half(s[i]);
}
__global__ void to_bf16(__nv_bfloat16 *d, const float *s, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) d[i] = __float2bfloat16(s[i]);
}

/* Row-major C (M,N) = alpha·op(A)·op(B) + beta·C as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ. */
static void gemm_strided(int ta, int tb, int M, int N, int K, float alpha, const float *A, long sA,
                         const float *B, long sB, float beta, float *C, long sC, int batch,
                         kn_math math) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = ta ? M : K, ldb = tb ? K : N;
  const void *a = A, *b = B;
  cudaDataType_t ty = CUDA_R_32F;
  cublasComputeType_t ct = math == KN_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (math == KN_MATH_FP16 || math == KN_MATH_BF16) {
    long na = (batch - 1) * sA + (long)M * K, nb = (batch - 1) * sB + (long)K * N;
    char *s = (char *)scratch_get(2 * (size_t)(na + nb));
    if (!s) return;
    if (math == KN_MATH_FP16) {
      to_half<<<GRID(na)>>>((__half *)s, A, na);
      to_half<<<GRID(nb)>>>((__half *)s + na, B, nb);
      ty = CUDA_R_16F;
      b = (__half *)s + na;
    } else {
      to_bf16<<<GRID(na)>>>((__nv_bfloat16 *)s, A, na);
      to_bf16<<<GRID(nb)>>>((__nv_bfloat16 *)s + na, B, nb);
      ty = CUDA_R_16BF;
      b = (__nv_bfloat16 *)s + na;
    }
    a = s;
  }
  cublasGemmStridedBatchedEx(handle, ob, oa, N, M, K, &alpha, b, ty, ldb, sB, a, ty, lda, sA,
                             &beta, C, CUDA_R_32F, N, sC, batch, ct, CUBLAS_GEMM_DEFAULT);
}

extern "C" void kn_gemm_cuda(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                             const float *B, float beta, float *C, kn_math math) {
  gemm_strided(ta, tb, M, N, K, alpha, A, 0, B, 0, beta, C, 0, 1, math);
}

extern "C" void kn_gemm_batched_cuda(int ta, int tb, int M, int N, int K, float alpha,
                                     const float *A, long sA, const float *B, long sB, float beta,
                                     float *C, long sC, int batch, kn_math math) {
  gemm_strided(ta, tb, M, N, K, alpha, A, sA, B, sB, beta, C, sC, batch, math);
}

/* ---- linear ---- */
__global__ void rows_set(float *out, const float *b, long M, int OC) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < M * OC) out[i] = b[i % OC];
}
__global__ void col_sum_add(float *db, const float *d, long M, int OC) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0.0f;
  for (long i = 0; i < M; i++) s += d[i * OC + o];
  db[o] += s;
}

extern "C" void kn_linear_fwd_cuda(float *out, const float *in, const float *w, const float *b,
                                   int M, int IC, int OC, kn_math math) {
  if (b) rows_set<<<GRID((long)M * OC)>>>(out, b, M, OC);
  kn_gemm_cuda(0, 1, M, OC, IC, 1.0f, in, w, b ? 1.0f : 0.0f, out, math);
}

extern "C" void kn_linear_bwd_cuda(float *din, float *dw, float *db, const float *dout,
                                   const float *in, const float *w, int M, int IC, int OC,
                                   kn_math math) {
  if (din) kn_gemm_cuda(0, 0, M, IC, OC, 1.0f, dout, w, 1.0f, din, math);
  kn_gemm_cuda(1, 0, OC, IC, M, 1.0f, dout, in, 1.0f, dw, math);
  if (db) col_sum_add<<<GRID(OC)>>>(db, dout, M, OC);
}

/* ---- convolution: im2col + cuBLAS, one image and group at a time ---- */
__global__ void im2col_k(float *col, const float *img, int c0, kn_conv s, int Ho, int Wo) {
  long P = (long)Ho * Wo, Cg = s.C_in / s.groups;
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= Cg * s.kh * s.kw * P) return;
  long r = i / P, p = i % P;
  int c = (int)(r / (s.kh * s.kw)), ki = (int)(r / s.kw % s.kh), kj = (int)(r % s.kw);
  int iy = (int)(p / Wo) * s.stride - s.pad + ki, ix = (int)(p % Wo) * s.stride - s.pad + kj;
  col[i] = (iy >= 0 && iy < s.H && ix >= 0 && ix < s.W)
               ? img[((long)(c0 + c) * s.H + iy) * s.W + ix] : 0.0f;
}
/* Adjoint of im2col, one thread per input pixel (gather: deterministic). */
__global__ void col2im_k(float *img, const float *col, int c0, kn_conv s, int Ho, int Wo) {
  long Cg = s.C_in / s.groups;
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= Cg * s.H * s.W) return;
  int c = (int)(i / ((long)s.H * s.W)), y = (int)(i / s.W % s.H), x = (int)(i % s.W);
  float acc = 0.0f;
  for (int ki = 0; ki < s.kh; ki++)
    for (int kj = 0; kj < s.kw; kj++) {
      int ty = y + s.pad - ki, tx = x + s.pad - kj;
      if (ty < 0 || tx < 0 || ty % s.stride || tx % s.stride) continue;
      int oy = ty / s.stride, ox = tx / s.stride;
      if (oy >= Ho || ox >= Wo) continue;
      acc += col[(((long)c * s.kh + ki) * s.kw + kj) * Ho * Wo + (long)oy * Wo + ox];
    }
  img[((long)(c0 + c) * s.H + y) * s.W + x] += acc;
}
__global__ void add_bias_k(float *out, const float *b, int C, long P) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < C * P) out[i] += b[i / P];
}
__global__ void plane_sum_add(float *db, const float *d, int C, long P) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (long p = 0; p < P; p++) s += d[c * P + p];
  db[c] += s;
}

extern "C" void kn_conv2d_fwd_cuda(float *out, float *ws, const float *in, const float *w,
                                   const float *b, const kn_conv *s, kn_math math) {
  int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s);
  long P = (long)Ho * Wo;
  int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  for (int n = 0; n < s->N; n++) {
    const float *img = in + (long)n * s->C_in * s->H * s->W;
    float *o = out + (long)n * s->C_out * P;
    for (int g = 0; g < s->groups; g++) {
      im2col_k<<<GRID((long)Kc * P)>>>(ws, img, g * Cg, *s, Ho, Wo);
      kn_gemm_cuda(0, 0, Og, (int)P, Kc, 1.0f, w + (long)g * Og * Kc, ws, 0.0f, o + (long)g * Og * P,
                   math);
    }
    if (b) add_bias_k<<<GRID(s->C_out * P)>>>(o, b, s->C_out, P);
  }
}

extern "C" void kn_conv2d_bwd_cuda(float *din, float *dw, float *db, float *ws, const float *dout,
                                   const float *in, const float *w, const kn_conv *s,
                                   kn_math math) {
  int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s);
  long P = (long)Ho * Wo;
  int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  for (int n = 0; n < s->N; n++) {
    const float *img = in + (long)n * s->C_in * s->H * s->W;
    const float *dy = dout + (long)n * s->C_out * P;
    for (int g = 0; g < s->groups; g++) {
      const float *dyg = dy + (long)g * Og * P;
      im2col_k<<<GRID((long)Kc * P)>>>(ws, img, g * Cg, *s, Ho, Wo);
      kn_gemm_cuda(0, 1, Og, Kc, (int)P, 1.0f, dyg, ws, 1.0f, dw + (long)g * Og * Kc, math);
      if (din) {
        kn_gemm_cuda(1, 0, Kc, (int)P, Og, 1.0f, w + (long)g * Og * Kc, dyg, 0.0f, ws, math);
        col2im_k<<<GRID((long)Cg * s->H * s->W)>>>(din + (long)n * s->C_in * s->H * s->W, ws,
                                                   g * Cg, *s, Ho, Wo);
      }
    }
    if (db) plane_sum_add<<<GRID(s->C_out)>>>(db, dy, s->C_out, P);
  }
}

/* ---- normalisations: one thread per channel (batch norm) or row (layer norm) ---- */
__global__ void bn_fwd_k(float *out, float *mean, float *rstd, const float *in, const float *gm,
                         const float *bt, int N, int C, int HW) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0, s2 = 0, cnt = (double)N * HW;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < HW; p++) s += in[((long)n * C + c) * HW + p];
  double mu = s / cnt;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < HW; p++) {
      double d = in[((long)n * C + c) * HW + p] - mu;
      s2 += d * d;
    }
  double rs = 1.0 / sqrt(s2 / cnt + 1e-5);
  mean[c] = (float)mu;
  rstd[c] = (float)rs;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < HW; p++) {
      long i = ((long)n * C + c) * HW + p;
      out[i] = (float)((in[i] - mu) * rs) * gm[c] + bt[c];
    }
}
__global__ void bn_bwd_k(float *din, float *dg, float *db, const float *dout, const float *in,
                         const float *mean, const float *rstd, const float *gm, int N, int C,
                         int HW) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sdy = 0, sdyx = 0, cnt = (double)N * HW;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < HW; p++) {
      long i = ((long)n * C + c) * HW + p;
      sdy += dout[i];
      sdyx += dout[i] * ((in[i] - mean[c]) * rstd[c]);
    }
  dg[c] += (float)sdyx;
  db[c] += (float)sdy;
  if (!din) return;
  for (int n = 0; n < N; n++)
    for (int p = 0; p < HW; p++) {
      long i = ((long)n * C + c) * HW + p;
      double xh = (in[i] - mean[c]) * rstd[c];
      din[i] += (float)(gm[c] * rstd[c] * (dout[i] - sdy / cnt - xh * sdyx / cnt));
    }
}
extern "C" void kn_batchnorm_fwd_cuda(float *out, float *mean, float *rstd, const float *in,
                                      const float *gamma, const float *beta, int N, int C,
                                      int HW) {
  bn_fwd_k<<<GRID(C)>>>(out, mean, rstd, in, gamma, beta, N, C, HW);
}
extern "C" void kn_batchnorm_bwd_cuda(float *din, float *dgamma, float *dbeta, const float *dout,
                                      const float *in, const float *mean, const float *rstd,
                                      const float *gamma, int N, int C, int HW) {
  bn_bwd_k<<<GRID(C)>>>(din, dgamma, dbeta, dout, in, mean, rstd, gamma, N, C, HW);
}

__global__ void ln_fwd_k(float *out, float *mean, float *rstd, const float *in, const float *gm,
                         const float *bt, int M, int C) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M) return;
  const float *x = in + (long)r * C;
  double s = 0, s2 = 0;
  for (int c = 0; c < C; c++) s += x[c];
  double mu = s / C;
  for (int c = 0; c < C; c++) s2 += (x[c] - mu) * (x[c] - mu);
  double rs = 1.0 / sqrt(s2 / C + 1e-5);
  mean[r] = (float)mu;
  rstd[r] = (float)rs;
  for (int c = 0; c < C; c++) out[(long)r * C + c] = (float)((x[c] - mu) * rs) * gm[c] + bt[c];
}
__global__ void ln_bwd_dx_k(float *din, const float *dout, const float *in, const float *gm,
                            const float *mean, const float *rstd, int M, int C) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M) return;
  const float *x = in + (long)r * C, *dy = dout + (long)r * C;
  double sd = 0, sdx = 0;
  for (int c = 0; c < C; c++) {
    double xh = (x[c] - mean[r]) * rstd[r], d = dy[c] * gm[c];
    sd += d;
    sdx += d * xh;
  }
  for (int c = 0; c < C; c++) {
    double xh = (x[c] - mean[r]) * rstd[r];
    din[(long)r * C + c] += (float)(rstd[r] * (dy[c] * gm[c] - sd / C - xh * sdx / C));
  }
}
__global__ void ln_bwd_dw_k(float *dg, float *db, const float *dout, const float *in,
                            const float *mean, const float *rstd, int M, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sg = 0.0f, sb = 0.0f;
  for (int r = 0; r < M; r++) {
    float dy = dout[(long)r * C + c];
    sg += dy * ((in[(long)r * C + c] - mean[r]) * rstd[r]);
    sb += dy;
  }
  dg[c] += sg;
  db[c] += sb;
}
extern "C" void kn_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *in,
                                      const float *gamma, const float *beta, int M, int C) {
  ln_fwd_k<<<GRID(M)>>>(out, mean, rstd, in, gamma, beta, M, C);
}
extern "C" void kn_layernorm_bwd_cuda(float *din, float *dgamma, float *dbeta, const float *dout,
                                      const float *in, const float *gamma, const float *mean,
                                      const float *rstd, int M, int C) {
  if (din) ln_bwd_dx_k<<<GRID(M)>>>(din, dout, in, gamma, mean, rstd, M, C);
  ln_bwd_dw_k<<<GRID(C)>>>(dgamma, dbeta, dout, in, mean, rstd, M, C);
}

__global__ void lrn_fwd_k(float *out, float *scale, const float *in, int N, int C, int HW,
                          int size, float alpha, float beta, float k) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * C * HW) return;
  int p = (int)(i % HW), c = (int)(i / HW % C);
  long n = i / ((long)HW * C);
  float s = 0.0f;
  for (int j = c - size / 2; j <= c + (size - 1) / 2; j++)
    if (j >= 0 && j < C) {
      float v = in[(n * C + j) * HW + p];
      s += v * v;
    }
  scale[i] = k + alpha / size * s;
  out[i] = in[i] * powf(scale[i], -beta);
}
__global__ void lrn_bwd_k(float *din, const float *dout, const float *in, const float *out,
                          const float *scale, int N, int C, int HW, int size, float alpha,
                          float beta) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * C * HW) return;
  int p = (int)(i % HW), c = (int)(i / HW % C);
  long n = i / ((long)HW * C);
  float acc = 0.0f;
  for (int j = c - (size - 1) / 2; j <= c + size / 2; j++)
    if (j >= 0 && j < C) {
      long q = (n * C + j) * HW + p;
      acc += dout[q] * out[q] / scale[q];
    }
  din[i] += dout[i] * powf(scale[i], -beta) - 2.0f * alpha * beta / size * in[i] * acc;
}
extern "C" void kn_lrn_fwd_cuda(float *out, float *scale, const float *in, int N, int C, int HW,
                                int size, float alpha, float beta, float k) {
  lrn_fwd_k<<<GRID((long)N * C * HW)>>>(out, scale, in, N, C, HW, size, alpha, beta, k);
}
extern "C" void kn_lrn_bwd_cuda(float *din, const float *dout, const float *in, const float *out,
                                const float *scale, int N, int C, int HW, int size, float alpha,
                                float beta, float k) {
  (void)k;
  lrn_bwd_k<<<GRID((long)N * C * HW)>>>(din, dout, in, out, scale, N, C, HW, size, alpha, beta);
}

/* ---- elementwise ---- */
#define EW(name, body)                                                              \
  __global__ void name##_k(float *o, const float *a, const float *b, long n) {      \
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;                           \
    if (i < n) { body; }                                                            \
  }
#define GK 0.7978845608028654f
EW(relu_fwd, o[i] = a[i] > 0.0f ? a[i] : 0.0f)
EW(relu_bwd, o[i] += b[i] > 0.0f ? a[i] : 0.0f)
EW(gelu_fwd, float x = a[i]; o[i] = 0.5f * x * (1.0f + tanhf(GK * (x + 0.044715f * x * x * x))))
EW(gelu_bwd, float x = b[i]; float t = tanhf(GK * (x + 0.044715f * x * x * x));
   o[i] += a[i] * (0.5f * (1.0f + t) +
                   0.5f * x * (1.0f - t * t) * GK * (1.0f + 3.0f * 0.044715f * x * x)))
EW(add_fwd, o[i] = a[i] + b[i])

__global__ void add_bwd_k(float *da, float *db, const float *d, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) da[i] += d[i], db[i] += d[i];
}

extern "C" void kn_relu_fwd_cuda(float *out, const float *in, long n) {
  relu_fwd_k<<<GRID(n)>>>(out, in, NULL, n);
}
extern "C" void kn_relu_bwd_cuda(float *din, const float *dout, const float *out, long n) {
  relu_bwd_k<<<GRID(n)>>>(din, dout, out, n);
}
extern "C" void kn_gelu_fwd_cuda(float *out, const float *in, long n) {
  gelu_fwd_k<<<GRID(n)>>>(out, in, NULL, n);
}
extern "C" void kn_gelu_bwd_cuda(float *din, const float *dout, const float *in, long n) {
  gelu_bwd_k<<<GRID(n)>>>(din, dout, in, n);
}
extern "C" void kn_add_fwd_cuda(float *out, const float *a, const float *b, long n) {
  add_fwd_k<<<GRID(n)>>>(out, a, b, n);
}
extern "C" void kn_add_bwd_cuda(float *da, float *db, const float *dout, long n) {
  add_bwd_k<<<GRID(n)>>>(da, db, dout, n);
}

__device__ int keep_d(unsigned long long seed, unsigned long long i, float p) {
  unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0) >= (double)p;
}
__global__ void dropout_k(float *o, const float *a, long n, float p, unsigned long long seed,
                          int acc) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = keep_d(seed, i, p) ? a[i] / (1.0f - p) : 0.0f;
  if (acc) o[i] += v;
  else o[i] = v;
}
extern "C" void kn_dropout_fwd_cuda(float *out, const float *in, long n, float p, uint64_t seed) {
  dropout_k<<<GRID(n)>>>(out, in, n, p, seed, 0);
}
extern "C" void kn_dropout_bwd_cuda(float *din, const float *dout, long n, float p,
                                    uint64_t seed) {
  dropout_k<<<GRID(n)>>>(din, dout, n, p, seed, 1);
}

__global__ void sgd_k(float *w, float *m, const float *g, long n, float lr, float mu, float wd) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  m[i] = mu * m[i] + g[i] + wd * w[i];
  w[i] -= lr * m[i];
}
__global__ void adam_k(float *w, float *m, float *v, const float *g, long n, float lr, float b1,
                       float b2, float eps, float wd, float c1, float c2) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  m[i] = b1 * m[i] + (1.0f - b1) * g[i];
  v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
  w[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + eps) + wd * w[i]);
}
extern "C" void kn_sgd_momentum_step_cuda(float *w, float *mom, const float *g, long n, float lr,
                                          float mu, float wd) {
  sgd_k<<<GRID(n)>>>(w, mom, g, n, lr, mu, wd);
}
extern "C" void kn_adam_step_cuda(float *w, float *m, float *v, const float *g, long n, float lr,
                                  float beta1, float beta2, float eps, float wd, int t) {
  adam_k<<<GRID(n)>>>(w, m, v, g, n, lr, beta1, beta2, eps, wd, 1.0f - powf(beta1, (float)t),
                      1.0f - powf(beta2, (float)t));
}

/* ---- pooling ---- */
__global__ void maxpool_fwd_k(float *out, int *arg, const float *in, kn_pool s, int Ho, int Wo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)s.N * s.C * Ho * Wo) return;
  int xo = (int)(i % Wo), y = (int)(i / Wo % Ho);
  const float *x = in + i / ((long)Ho * Wo) * s.H * s.W;
  float best = 0.0f;
  int a = -1;
  for (int ki = 0; ki < s.kh; ki++) {
    int iy = y * s.stride - s.pad + ki;
    if (iy < 0 || iy >= s.H) continue;
    for (int kj = 0; kj < s.kw; kj++) {
      int ix = xo * s.stride - s.pad + kj;
      if (ix < 0 || ix >= s.W) continue;
      if (a < 0 || x[iy * s.W + ix] > best) best = x[iy * s.W + ix], a = iy * s.W + ix;
    }
  }
  out[i] = best;
  arg[i] = a;
}
/* gather: each input pixel sums the outputs whose argmax it is (deterministic) */
__global__ void maxpool_bwd_k(float *din, const float *dout, const int *arg, kn_pool s, int Ho,
                              int Wo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)s.N * s.C * s.H * s.W) return;
  int pix = (int)(i % ((long)s.H * s.W)), y = pix / s.W, x = pix % s.W;
  long nc = i / ((long)s.H * s.W);
  float acc = 0.0f;
  for (int oy = 0; oy < Ho; oy++) {
    int y0 = oy * s.stride - s.pad;
    if (y < y0 || y >= y0 + s.kh) continue;
    for (int ox = 0; ox < Wo; ox++) {
      int x0 = ox * s.stride - s.pad;
      if (x < x0 || x >= x0 + s.kw) continue;
      long o = nc * Ho * Wo + (long)oy * Wo + ox;
      if (arg[o] == pix) acc += dout[o];
    }
  }
  din[i] += acc;
}
__global__ void avgpool_fwd_k(float *out, const float *in, kn_pool s, int Ho, int Wo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)s.N * s.C * Ho * Wo) return;
  int xo = (int)(i % Wo), y = (int)(i / Wo % Ho);
  const float *x = in + i / ((long)Ho * Wo) * s.H * s.W;
  float acc = 0.0f;
  for (int ki = 0; ki < s.kh; ki++) {
    int iy = y * s.stride - s.pad + ki;
    if (iy < 0 || iy >= s.H) continue;
    for (int kj = 0; kj < s.kw; kj++) {
      int ix = xo * s.stride - s.pad + kj;
      if (ix >= 0 && ix < s.W) acc += x[iy * s.W + ix];
    }
  }
  out[i] = acc / (float)(s.kh * s.kw);
}
__global__ void avgpool_bwd_k(float *din, const float *dout, kn_pool s, int Ho, int Wo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)s.N * s.C * s.H * s.W) return;
  int pix = (int)(i % ((long)s.H * s.W)), y = pix / s.W, x = pix % s.W;
  long nc = i / ((long)s.H * s.W);
  float acc = 0.0f;
  for (int oy = 0; oy < Ho; oy++) {
    int y0 = oy * s.stride - s.pad;
    if (y < y0 || y >= y0 + s.kh) continue;
    for (int ox = 0; ox < Wo; ox++) {
      int x0 = ox * s.stride - s.pad;
      if (x >= x0 && x < x0 + s.kw) acc += dout[nc * Ho * Wo + (long)oy * Wo + ox];
    }
  }
  din[i] += acc / (float)(s.kh * s.kw);
}
extern "C" void kn_maxpool_fwd_cuda(float *out, int *argmax, const float *in, const kn_pool *s) {
  int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  maxpool_fwd_k<<<GRID((long)s->N * s->C * Ho * Wo)>>>(out, argmax, in, *s, Ho, Wo);
}
extern "C" void kn_maxpool_bwd_cuda(float *din, const float *dout, const int *argmax,
                                    const kn_pool *s) {
  int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  maxpool_bwd_k<<<GRID((long)s->N * s->C * s->H * s->W)>>>(din, dout, argmax, *s, Ho, Wo);
}
extern "C" void kn_avgpool_fwd_cuda(float *out, const float *in, const kn_pool *s) {
  int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  avgpool_fwd_k<<<GRID((long)s->N * s->C * Ho * Wo)>>>(out, in, *s, Ho, Wo);
}
extern "C" void kn_avgpool_bwd_cuda(float *din, const float *dout, const kn_pool *s) {
  int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  avgpool_bwd_k<<<GRID((long)s->N * s->C * s->H * s->W)>>>(din, dout, *s, Ho, Wo);
}

/* ---- embedding ---- */
__global__ void embed_fwd_k(float *out, const int *tok, const float *wte, const float *wpe, int N,
                            int T, int C) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * C) return;
  int c = (int)(i % C), t = (int)(i / C % T);
  long nt = i / C;
  int id = tok ? tok[nt] : t;
  out[i] = wte[(long)id * C + c] + (wpe ? wpe[(long)t * C + c] : 0.0f);
}
__global__ void embed_bwd_k(float *dwte, float *dwpe, const float *dout, const int *tok, int N,
                            int T, int C) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * C) return;
  int c = (int)(i % C), t = (int)(i / C % T);
  long nt = i / C;
  int id = tok ? tok[nt] : t;
  atomicAdd(&dwte[(long)id * C + c], dout[i]);
  if (dwpe) atomicAdd(&dwpe[(long)t * C + c], dout[i]);
}
extern "C" void kn_embedding_fwd_cuda(float *out, const int *tokens, const float *wte,
                                      const float *wpe, int N, int T, int C) {
  embed_fwd_k<<<GRID((long)N * T * C)>>>(out, tokens, wte, wpe, N, T, C);
}
extern "C" void kn_embedding_bwd_cuda(float *dwte, float *dwpe, const float *dout,
                                      const int *tokens, int N, int T, int C) {
  embed_bwd_k<<<GRID((long)N * T * C)>>>(dwte, dwpe, dout, tokens, N, T, C);
}

/* ---- attention: permutes, two batched GEMMs, masked softmax ---- */
/* dir 0: (N,T,3C) -> q,k,v (N,NH,T,hs); dir 1: y (N,NH,T,hs) -> out (N,T,C), set (acc 0) or
 * added (acc 1); dir 2: dq,dk,dv -> dqkv added */
__global__ void heads_k(float *a, float *b, float *c, float *x, int N, int T, int C, int NH,
                        int dir) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * C) return;
  int hs = C / NH, d = (int)(i % hs), h = (int)(i / hs % NH), t = (int)(i / C % T);
  long n = i / ((long)T * C);
  long hm = ((n * NH + h) * T + t) * hs + d;
  long row = (n * T + t);
  if (dir == 0) {
    a[hm] = x[row * 3 * C + h * hs + d];
    b[hm] = x[row * 3 * C + C + h * hs + d];
    c[hm] = x[row * 3 * C + 2 * C + h * hs + d];
  } else if (dir == 1) {
    x[row * C + h * hs + d] = a[hm];
  } else if (dir == 3) {
    a[hm] = x[row * C + h * hs + d];
  } else {
    x[row * 3 * C + h * hs + d] += a[hm];
    x[row * 3 * C + C + h * hs + d] += b[hm];
    x[row * 3 * C + 2 * C + h * hs + d] += c[hm];
  }
}
__global__ void causal_softmax_k(float *att, long rows, int T) {
  long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float *row = att + r * T;
  int t = (int)(r % T);
  float mx = row[0], sum = 0.0f;
  for (int j = 1; j <= t; j++) mx = fmaxf(mx, row[j]);
  for (int j = 0; j <= t; j++) sum += (row[j] = expf(row[j] - mx));
  for (int j = 0; j <= t; j++) row[j] /= sum;
  for (int j = t + 1; j < T; j++) row[j] = 0.0f;
}
__global__ void softmax_bwd_rows_k(float *d, const float *p, long rows, int T) {
  long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float dot = 0.0f;
  for (int j = 0; j < T; j++) dot += p[r * T + j] * d[r * T + j];
  for (int j = 0; j < T; j++) d[r * T + j] = p[r * T + j] * (d[r * T + j] - dot);
}
extern "C" void kn_attention_fwd_cuda(float *out, float *att, float *ws, const float *qkv, int N,
                                      int T, int C, int NH, kn_math math) {
  int hs = C / NH, B = N * NH;
  long X = (long)N * T * C;
  float *q = ws, *k = ws + X, *v = ws + 2 * X;
  heads_k<<<GRID(X)>>>(q, k, v, (float *)qkv, N, T, C, NH, 0);
  kn_gemm_batched_cuda(0, 1, T, T, hs, 1.0f / sqrtf((float)hs), q, (long)T * hs, k, (long)T * hs,
                       0.0f, att, (long)T * T, B, math);
  causal_softmax_k<<<GRID((long)B * T)>>>(att, (long)B * T, T);
  kn_gemm_batched_cuda(0, 0, T, hs, T, 1.0f, att, (long)T * T, v, (long)T * hs, 0.0f, q,
                       (long)T * hs, B, math);
  heads_k<<<GRID(X)>>>(q, NULL, NULL, out, N, T, C, NH, 1);
}
extern "C" void kn_attention_bwd_cuda(float *dqkv, float *ws, const float *dout, const float *qkv,
                                      const float *att, int N, int T, int C, int NH,
                                      kn_math math) {
  int hs = C / NH, B = N * NH;
  long X = (long)N * T * C, sh = (long)T * hs, sa = (long)T * T;
  float *q = ws, *k = ws + X, *v = ws + 2 * X, *dq = ws + 3 * X, *dk = ws + 4 * X,
        *dv = ws + 5 * X, *dy = ws + 6 * X, *datt = ws + 7 * X;
  float sc = 1.0f / sqrtf((float)hs);
  heads_k<<<GRID(X)>>>(q, k, v, (float *)qkv, N, T, C, NH, 0);
  heads_k<<<GRID(X)>>>(dy, NULL, NULL, (float *)dout, N, T, C, NH, 3);
  kn_gemm_batched_cuda(0, 1, T, T, hs, 1.0f, dy, sh, v, sh, 0.0f, datt, sa, B, math);
  kn_gemm_batched_cuda(1, 0, T, hs, T, 1.0f, att, sa, dy, sh, 0.0f, dv, sh, B, math);
  softmax_bwd_rows_k<<<GRID((long)B * T)>>>(datt, att, (long)B * T, T);
  kn_gemm_batched_cuda(0, 0, T, hs, T, sc, datt, sa, k, sh, 0.0f, dq, sh, B, math);
  kn_gemm_batched_cuda(1, 0, T, hs, T, sc, datt, sa, q, sh, 0.0f, dk, sh, B, math);
  heads_k<<<GRID(X)>>>(dq, dk, dv, dqkv, N, T, C, NH, 2);
}

/* ---- softmax cross-entropy ---- */
__global__ void sce_fwd_k(float *probs, float *loss, const float *z, const int *tg, int M, int V) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M) return;
  const float *x = z + (long)r * V;
  float mx = x[0];
  for (int j = 1; j < V; j++) mx = fmaxf(mx, x[j]);
  double sum = 0.0;
  for (int j = 0; j < V; j++) sum += (probs[(long)r * V + j] = expf(x[j] - mx));
  for (int j = 0; j < V; j++) probs[(long)r * V + j] = (float)(probs[(long)r * V + j] / sum);
  loss[r] = (float)(-(x[tg[r]] - mx - log(sum)));
}
__global__ void sce_bwd_k(float *d, const float *p, const int *tg, int M, int V) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * V) return;
  int r = (int)(i / V), j = (int)(i % V);
  d[i] += (p[i] - (j == tg[r] ? 1.0f : 0.0f)) / (float)M;
}
extern "C" float kn_softmax_ce_fwd_cuda(float *probs, const float *logits, const int *targets,
                                        int M, int V) {
  float *loss = (float *)scratch_get(sizeof(float) * M);
  if (!loss) return NAN;
  sce_fwd_k<<<GRID(M)>>>(probs, loss, logits, targets, M, V);
  float *h = (float *)malloc(sizeof(float) * M);
  cudaMemcpy(h, loss, sizeof(float) * M, cudaMemcpyDeviceToHost);
  double s = 0;
  for (int i = 0; i < M; i++) s += h[i];
  free(h);
  return (float)(s / M);
}
extern "C" void kn_softmax_ce_bwd_cuda(float *dlogits, const float *probs, const int *targets,
                                       int M, int V) {
  sce_bwd_k<<<GRID((long)M * V)>>>(dlogits, probs, targets, M, V);
}

/* ---- mixture of experts ---- */
__global__ void moe_route_k(float *probs, int *expert, int M, int E, int K) {
  int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  float *p = probs + (long)m * E, mx = p[0], sum = 0.0f;
  for (int e = 1; e < E; e++) mx = fmaxf(mx, p[e]);
  for (int e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
  for (int e = 0; e < E; e++) p[e] /= sum;
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int j = 0; j < k; j++) taken |= expert[m * K + j] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    expert[m * K + k] = best;
  }
}
/* capacity assignment in priority order: sequential, hence deterministic (one thread) */
__global__ void moe_assign_k(int *slot, int *count, int *token, const int *expert, int M, int E,
                             int K, int cap) {
  for (int e = 0; e < E; e++) count[e] = 0;
  for (int k = 0; k < K; k++)
    for (int m = 0; m < M; m++) {
      int e = expert[m * K + k];
      if (count[e] < cap) {
        int r = count[e]++;
        slot[m * K + k] = r;
        token[(long)e * cap + r] = m;
      } else {
        slot[m * K + k] = -1;
      }
    }
}
__global__ void moe_gather_k(float *xe, const float *in, const int *token, const int *count,
                             int E, int cap, int C) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)E * cap * C) return;
  long row = i / C;
  int e = (int)(row / cap), r = (int)(row % cap);
  if (r < count[e]) xe[i] = in[(long)token[row] * C + i % C];
}
__global__ void moe_combine_k(float *out, const float *ye, const float *probs, const int *expert,
                              const int *slot, int M, int E, int K, int cap, int C) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * C) return;
  int m = (int)(i / C), c = (int)(i % C);
  float acc = 0.0f;
  for (int k = 0; k < K; k++) {
    int e = expert[m * K + k], r = slot[m * K + k];
    if (r >= 0) acc += probs[(long)m * E + e] * ye[((long)e * cap + r) * C + c];
  }
  out[i] = acc;
}
__global__ void moe_gate_bwd_k(float *dye, float *dp, const float *dout, const float *ye,
                               const float *probs, const int *expert, const int *slot, int M,
                               int E, int K, int cap, int C) {
  int mk = blockIdx.x * blockDim.x + threadIdx.x;
  if (mk >= M * K) return;
  int m = mk / K, e = expert[mk], r = slot[mk];
  if (r < 0) return;
  float g = probs[(long)m * E + e], dot = 0.0f;
  for (int c = 0; c < C; c++) {
    dye[((long)e * cap + r) * C + c] = g * dout[(long)m * C + c];
    dot += dout[(long)m * C + c] * ye[((long)e * cap + r) * C + c];
  }
  dp[(long)m * E + e] += dot;
}
__global__ void moe_scatter_bwd_k(float *din, const float *dxe, const int *expert,
                                  const int *slot, int M, int K, int cap, int C) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * C) return;
  int m = (int)(i / C), c = (int)(i % C);
  float acc = 0.0f;
  for (int k = 0; k < K; k++) {
    int r = slot[m * K + k];
    if (r >= 0) acc += dxe[((long)expert[m * K + k] * cap + r) * C + c];
  }
  din[i] += acc;
}

extern "C" void kn_moe_fwd_cuda(float *out, const kn_moe_saved *sv, const float *in,
                                const kn_moe_weights *w, const kn_moe_shape *s, kn_math math) {
  const int M = s->M, C = s->C, E = s->E, K = s->top_k, F = s->F, cap = kn_moe_capacity(s);
  kn_linear_fwd_cuda(sv->probs, in, w->wr, w->br, M, C, E, math);
  moe_route_k<<<GRID(M)>>>(sv->probs, sv->expert, M, E, K);
  moe_assign_k<<<1, 1>>>(sv->slot, sv->count, sv->token, sv->expert, M, E, K, cap);
  moe_gather_k<<<GRID((long)E * cap * C)>>>(sv->xe, in, sv->token, sv->count, E, cap, C);
  int *cnt = (int *)malloc(sizeof(int) * E);
  cudaMemcpy(cnt, sv->count, sizeof(int) * E, cudaMemcpyDeviceToHost);
  for (int e = 0; e < E; e++) {
    if (!cnt[e]) continue;
    long r0 = (long)e * cap;
    kn_linear_fwd_cuda(sv->h + r0 * F, sv->xe + r0 * C, w->w1 + (long)e * F * C,
                       w->b1 + (long)e * F, cnt[e], C, F, math);
    kn_gelu_fwd_cuda(sv->a + r0 * F, sv->h + r0 * F, (long)cnt[e] * F);
    kn_linear_fwd_cuda(sv->ye + r0 * C, sv->a + r0 * F, w->w2 + (long)e * C * F,
                       w->b2 + (long)e * C, cnt[e], F, C, math);
  }
  free(cnt);
  moe_combine_k<<<GRID((long)M * C)>>>(out, sv->ye, sv->probs, sv->expert, sv->slot, M, E, K, cap,
                                       C);
}

extern "C" void kn_moe_bwd_cuda(float *din, const kn_moe_grads *g, float *ws, const float *dout,
                                const float *in, const kn_moe_saved *sv, const kn_moe_weights *w,
                                const kn_moe_shape *s, kn_math math) {
  const int M = s->M, C = s->C, E = s->E, K = s->top_k, F = s->F, cap = kn_moe_capacity(s);
  const long rows = (long)E * cap;
  float *dye = ws, *da = dye + rows * C, *dh = da + rows * F, *dxe = dh + rows * F,
        *dp = dxe + rows * C;
  cudaMemsetAsync(ws, 0, sizeof(float) * kn_moe_ws_floats(s));
  moe_gate_bwd_k<<<GRID(M * K)>>>(dye, dp, dout, sv->ye, sv->probs, sv->expert, sv->slot, M, E, K,
                                  cap, C);
  int *cnt = (int *)malloc(sizeof(int) * E);
  cudaMemcpy(cnt, sv->count, sizeof(int) * E, cudaMemcpyDeviceToHost);
  for (int e = 0; e < E; e++) {
    if (!cnt[e]) continue;
    long r0 = (long)e * cap;
    kn_linear_bwd_cuda(da + r0 * F, g->dw2 + (long)e * C * F, g->db2 + (long)e * C, dye + r0 * C,
                       sv->a + r0 * F, w->w2 + (long)e * C * F, cnt[e], F, C, math);
    kn_gelu_bwd_cuda(dh + r0 * F, da + r0 * F, sv->h + r0 * F, (long)cnt[e] * F);
    kn_linear_bwd_cuda(dxe + r0 * C, g->dw1 + (long)e * F * C, g->db1 + (long)e * F, dh + r0 * F,
                       sv->xe + r0 * C, w->w1 + (long)e * F * C, cnt[e], C, F, math);
  }
  free(cnt);
  moe_scatter_bwd_k<<<GRID((long)M * C)>>>(din, dxe, sv->expert, sv->slot, M, K, cap, C);
  softmax_bwd_rows_k<<<GRID(M)>>>(dp, sv->probs, M, E);
  kn_linear_bwd_cuda(din, g->dwr, g->dbr, dp, in, w->wr, M, C, E, math);
}

/* ---- backend table, device information, clock ---- */
static void *cu_alloc(size_t bytes) {
  void *p = NULL;
  return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}
static void cu_release(void *p) { cudaFree(p); }
static void cu_up(void *d, const void *s, size_t b) { cudaMemcpy(d, s, b, cudaMemcpyHostToDevice); }
static void cu_down(void *d, const void *s, size_t b) {
  cudaMemcpy(d, s, b, cudaMemcpyDeviceToHost);
}
static void cu_sync(void) { cudaDeviceSynchronize(); }

static const kn_backend cuda_backend = {
    "cuda", cu_alloc, cu_release, cu_up, cu_down, cu_sync,
#define KN_CUDA_ENTRY(name, ret, params) kn_##name##_cuda,
    KN_FUNCS(KN_CUDA_ENTRY)
#undef KN_CUDA_ENTRY
};

extern "C" const kn_backend *dlsim_cuda_backend(const char **why) {
  static int state = 0; /* 0 unknown, 1 ready, -1 none */
  if (state == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      state = -1;
    } else if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      state = -1;
    } else {
      state = 1;
    }
  }
  if (state < 0) {
    if (why) *why = "no CUDA device";
    return NULL;
  }
  return &cuda_backend;
}

extern "C" int dlsim_cuda_info(kn_cuda_info *info) {
  if (!dlsim_cuda_backend(NULL)) return -1;
  int dev = 0;
  cudaDeviceProp p;
  cudaGetDevice(&dev);
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%.127s", p.name);
  info->sm_count = p.multiProcessorCount;
  int v = 0;
  cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, dev);
  info->clock_mhz = v / 1000;
  cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, dev);
  info->mem_clock_mhz = v / 1000;
  info->l2_bytes = p.l2CacheSize;
  info->mem_bytes = (double)p.totalGlobalMem;
  cudaDriverGetVersion(&info->driver_version);
  cudaRuntimeGetVersion(&info->runtime_version);
  return 0;
}

static cudaEvent_t ev0, ev1;
static void *l2_buf;
static size_t l2_size;
static void cu_flush(void) {
  if (!l2_buf) {
    int dev = 0, l2 = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    l2_size = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    if (cudaMalloc(&l2_buf, l2_size) != cudaSuccess) {
      l2_buf = NULL;
      return;
    }
  }
  cudaMemsetAsync(l2_buf, 0, l2_size);
}
static void cu_start(void) {
  if (!ev0) {
    cudaEventCreate(&ev0);
    cudaEventCreate(&ev1);
  }
  cudaEventRecord(ev0);
}
static double cu_stop(void) {
  float ms = 0.0f;
  cudaEventRecord(ev1);
  cudaEventSynchronize(ev1);
  cudaEventElapsedTime(&ms, ev0, ev1);
  return ms * 1e-3;
}
static const kh_device cuda_device = {"cuda", cu_flush, cu_start, cu_stop};

extern "C" const kh_device *dlsim_cuda_device(void) {
  return dlsim_cuda_backend(NULL) ? &cuda_device : NULL;
}
