/* kernels.cu — CUDA versions of the kernels in kernels.h (device pointers, default stream), the
 * CUDA backend table, and the CUDA clock for the timing harness.
 *
 * GEMMs go through cuBLAS with fp32 accumulation. fp16 and bf16 inputs are rounded one of two
 * ways, whichever measured faster on an H200 (kernels/README.md):
 *   a single GEMM (linear layers, a weight gradient): both inputs are rounded into a 16-bit copy
 *     first, one pass each, and cuBLAS multiplies the copies: 1.3-1.8x faster on GPT-sized GEMMs
 *     than the other way;
 *   a batched GEMM (attention's products, a convolution's images): cuBLAS reads the fp32 inputs
 *     and rounds them on the tensor cores (CUBLAS_COMPUTE_32F_FAST_16F / _16BF): attention's
 *     operands are large next to its work (K = the head size), and copying them cost 1.4-1.7x.
 * DLSIM_CUDA_LOWP=convert or =fast forces one way for every GEMM. Convolution is im2col + cuBLAS over a chunk of images at a
 * time (one strided-batched GEMM per chunk; a 1x1 stride-1 convolution reads its input
 * directly); the weight gradient is one GEMM per chunk over every image's pixels. Reductions
 * (batch and layer norm statistics, bias gradients, softmax rows) are block or warp reductions in
 * a fixed order, so every kernel but the atomic scatters (embedding and MoE backward) gives the
 * same bits on every run. tests/kernels/test_kernels_cuda.c compares each with its CPU twin.
 *
 * This file is built into the loadable module libdlsim-cuda.so, never into the driver: the CUDA
 * runtime and cuBLAS take a third of a second to load, which every `dlsim run` would pay.
 * kernels/cuda_loader.c opens the module on first use and looks up the three entry points at the
 * end of this file (dlsim_cuda_backend, dlsim_cuda_info, dlsim_cuda_device).
 *
 * DLSIM_CUDA_WS_KB (default 524288, 512 MiB) bounds the convolution workspace, and so the images
 * per chunk. Both variables exist to test and to measure the alternatives. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

static cublasHandle_t handle;
static int n_sm = 132; /* multiprocessors of the device (set when the backend starts) */

/* At least one block: an empty launch is an error that the next sync() would report (an MoE
 * expert without tokens, say); every kernel checks its index against its size. */
#define GRID(n) (unsigned)((n) > 0 ? ((n) + 255) / 256 : 1), 256

/* Device buffers that grow on demand and are reused: everything runs on the default stream, so a
 * buffer is free again for the next kernel queued after the one that used it. */
typedef struct {
  void *p;
  size_t bytes;
} dbuf;
static dbuf lowp_buf, conv_buf, red_buf, loss_buf;

/* A CUDA failure ends the program with one line: a kernel that did not run must not pass for one
 * that did (the line starts with the program's name, as dlsim-real's messages do). */
static void cu_fail(const char *what, cudaError_t e) {
  fprintf(stderr, "%s: CUDA: %s: %s\n", program_invocation_short_name, what, cudaGetErrorString(e));
  exit(1);
}

static void cu_down(void *d, const void *s, size_t b) {
  cudaError_t e = cudaMemcpy(d, s, b, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) cu_fail("download", e);
}

static void *dbuf_get(dbuf *b, size_t bytes) {
  if (bytes > b->bytes) {
    cudaFree(b->p);
    b->p = NULL;
    b->bytes = 0;
    cudaError_t e = cudaMalloc(&b->p, bytes);
    if (e != cudaSuccess) cu_fail("no device memory for a kernel's scratch buffer", e);
    b->bytes = bytes;
  }
  return b->p;
}

static size_t env_size(const char *name, size_t dflt) {
  const char *v = getenv(name);
  long x = v && *v ? atol(v) : 0;
  return x > 0 ? (size_t)x : dflt;
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
  static int force = -1; /* -1 unread, 0 by shape, 1 always convert, 2 never */
  if (force < 0) {
    const char *v = getenv("DLSIM_CUDA_LOWP");
    force = v && strcmp(v, "convert") == 0 ? 1 : v && strcmp(v, "fast") == 0 ? 2 : 0;
  }
  const int convert = force == 1 || (force == 0 && batch == 1);
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int lda = ta ? M : K, ldb = tb ? K : N;
  const void *a = A, *b = B;
  cudaDataType_t ty = CUDA_R_32F;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  if (math == KN_MATH_TF32) ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  if ((math == KN_MATH_FP16 || math == KN_MATH_BF16) && !convert)
    ct = math == KN_MATH_FP16 ? CUBLAS_COMPUTE_32F_FAST_16F : CUBLAS_COMPUTE_32F_FAST_16BF;
  if ((math == KN_MATH_FP16 || math == KN_MATH_BF16) && convert) {
    long na = (batch - 1) * sA + (long)M * K, nb = (batch - 1) * sB + (long)K * N;
    char *s = (char *)dbuf_get(&lowp_buf, 2 * (size_t)(na + nb));
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
  cublasStatus_t st = cublasGemmStridedBatchedEx(handle, ob, oa, N, M, K, &alpha, b, ty, ldb, sB,
                                                 a, ty, lda, sA, &beta, C, CUDA_R_32F, N, sC,
                                                 batch, ct, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) { /* a GEMM that did not run must not pass for one */
    fprintf(stderr, "%s: cuBLAS: cublasGemmStridedBatchedEx (%d x %d x %d, batch %d, %s): status "
            "%d\n", program_invocation_short_name, M, N, K, batch, kn_math_name(math), (int)st);
    exit(1);
  }
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

/* ---- reductions shared by several kernels ---- */
/* Sum over a warp (every lane gets it). */
template <typename T> __device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
 * `sh` holds 32 values of T. */
template <typename T> __device__ T block_sum(T v, T *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads(); /* sh may still be read by an earlier call */
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : (T)0;
  return warp_sum(v);
}
__device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}

/* Column sums of a (M, C) row-major matrix d in two steps, in a fixed order: partial sums over
 * chunks of rows (grid.x over 32-column tiles, grid.y chunks), then one pass over the chunks.
 * With `in` (and mean, rstd per row), s1[c] = Σ_r d·(in−mean[r])·rstd[r] as well (layer norm's
 * gamma gradient; RMSNorm's with mean NULL, taken as 0); s2[c] = Σ_r d. */
__global__ void colsum_partial_k(float *part1, float *part2, const float *d, const float *in,
                                 const float *mean, const float *rstd, long M, int C,
                                 long rows_per) {
  __shared__ float sh1[8][33], sh2[8][33];
  int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y;
  long r0 = blockIdx.y * rows_per, r1 = min(M, r0 + rows_per);
  float a1 = 0.0f, a2 = 0.0f;
  if (c < C)
    for (long r = r0 + ty; r < r1; r += 8) {
      float dy = d[r * C + c];
      a2 += dy;
      if (in) a1 += dy * ((in[r * C + c] - (mean ? mean[r] : 0.0f)) * rstd[r]);
    }
  sh1[ty][threadIdx.x] = a1;
  sh2[ty][threadIdx.x] = a2;
  __syncthreads();
  if (ty == 0 && c < C) {
    for (int k = 1; k < 8; k++) a1 += sh1[k][threadIdx.x], a2 += sh2[k][threadIdx.x];
    part1[(long)blockIdx.y * C + c] = a1;
    part2[(long)blockIdx.y * C + c] = a2;
  }
}
__global__ void colsum_final_k(float *s1, float *s2, const float *part1, const float *part2,
                               int C, int chunks) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float a1 = 0.0f, a2 = 0.0f;
  for (int k = 0; k < chunks; k++) a1 += part1[(long)k * C + c], a2 += part2[(long)k * C + c];
  if (s1) s1[c] += a1;
  if (s2) s2[c] += a2;
}
/* s1 (may be NULL) and s2 accumulate the column sums described above. */
static void colsums(float *s1, float *s2, const float *d, const float *in, const float *mean,
                    const float *rstd, long M, int C) {
  if (M <= 0 || C <= 0) return;
  long tiles = (C + 31) / 32;
  long chunks = (2L * 4 * n_sm + tiles - 1) / tiles; /* about 8 blocks per multiprocessor */
  if (chunks > (M + 63) / 64) chunks = (M + 63) / 64; /* at least 64 rows a chunk */
  if (chunks < 1) chunks = 1;
  long rows_per = (M + chunks - 1) / chunks;
  chunks = (M + rows_per - 1) / rows_per;
  float *part = (float *)dbuf_get(&red_buf, sizeof(float) * 2 * (size_t)chunks * C);
  colsum_partial_k<<<dim3((unsigned)tiles, (unsigned)chunks), dim3(32, 8)>>>(
      part, part + chunks * C, d, in, mean, rstd, M, C, rows_per);
  colsum_final_k<<<GRID(C)>>>(s1, s2, part, part + chunks * C, C, (int)chunks);
}

/* ---- linear ---- */
__global__ void rows_set(float *out, const float *b, long M, int OC) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < M * OC) out[i] = b[i % OC];
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
  if (db) colsums(NULL, db, dout, NULL, NULL, NULL, M, OC);
}

/* ---- convolution: im2col + cuBLAS over chunks of images ---- */
/* Column element (image n, row r = (c, ki, kj), pixel p) of images n0.. of group channel c0 is
 * written at col[n·sn + r·sr + p]: sn = Kc·P, sr = P gives one (Kc, P) matrix per image;
 * sn = P, sr = nb·P gives one (Kc, nb·P) matrix for the chunk. */
__global__ void im2col_k(float *col, const float *in, int n0, int nb, int c0, kn_conv s, int Ho,
                         int Wo, long sn, long sr) {
  long P = (long)Ho * Wo, Kc = (long)(s.C_in / s.groups) * s.kh * s.kw;
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= nb * Kc * P) return;
  long p = i % P, r = i / P % Kc;
  int n = (int)(i / (P * Kc));
  int c = (int)(r / (s.kh * s.kw)), ki = (int)(r / s.kw % s.kh), kj = (int)(r % s.kw);
  int iy = (int)(p / Wo) * s.stride - s.pad + ki, ix = (int)(p % Wo) * s.stride - s.pad + kj;
  const float *img = in + (long)(n0 + n) * s.C_in * s.H * s.W;
  col[n * sn + r * sr + p] = (iy >= 0 && iy < s.H && ix >= 0 && ix < s.W)
                                 ? img[((long)(c0 + c) * s.H + iy) * s.W + ix] : 0.0f;
}
/* Adjoint of im2col (layout sn = Kc·P, sr = P), one thread per input pixel (a gather, so the
 * order of the sum is fixed), added into din. */
__global__ void col2im_k(float *din, const float *col, int n0, int nb, int c0, kn_conv s, int Ho,
                         int Wo) {
  long Cg = s.C_in / s.groups, HW = (long)s.H * s.W, P = (long)Ho * Wo;
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= nb * Cg * HW) return;
  int n = (int)(i / (Cg * HW)), c = (int)(i / HW % Cg), y = (int)(i / s.W % s.H),
      x = (int)(i % s.W);
  const float *cn = col + (long)n * Cg * s.kh * s.kw * P;
  float acc = 0.0f;
  for (int ki = 0; ki < s.kh; ki++) {
    int ty = y + s.pad - ki;
    if (ty < 0 || ty % s.stride) continue;
    int oy = ty / s.stride;
    if (oy >= Ho) continue;
    for (int kj = 0; kj < s.kw; kj++) {
      int tx = x + s.pad - kj;
      if (tx < 0 || tx % s.stride) continue;
      int ox = tx / s.stride;
      if (ox >= Wo) continue;
      acc += cn[(((long)c * s.kh + ki) * s.kw + kj) * P + (long)oy * Wo + ox];
    }
  }
  din[((long)(n0 + n) * s.C_in + c0 + c) * HW + y * s.W + x] += acc;
}
/* dst (Og, nb, P) = the group's channels of dout (images n0.., (C_out, P) each) */
__global__ void dy_gather_k(float *dst, const float *dout, int n0, int nb, int g0, int Og,
                            int C_out, long P) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)Og * nb * P) return;
  long p = i % P;
  int n = (int)(i / P % nb), o = (int)(i / (P * nb));
  dst[i] = dout[((long)(n0 + n) * C_out + g0 + o) * P + p];
}
__global__ void add_bias_k(float *out, const float *b, int C, long P, long total) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < total) out[i] += b[i / P % C];
}
/* db[c] += Σ over images and pixels of d (N, C, P): one block per channel, fixed order */
__global__ void chan_sum_add_k(float *db, const float *d, int N, int C, long P) {
  __shared__ double sh[32];
  int c = blockIdx.x;
  double a = 0.0;
  for (long j = threadIdx.x; j < (long)N * P; j += blockDim.x)
    a += d[((j / P) * C + c) * P + j % P];
  a = block_sum(a, sh);
  if (threadIdx.x == 0) db[c] += (float)a;
}

/* Images per chunk: the chunk's workspace (floats_per_image each) within DLSIM_CUDA_WS_KB. */
static int conv_chunk(int N, size_t floats_per_image) {
  size_t limit = env_size("DLSIM_CUDA_WS_KB", 512 << 10) << 10;
  size_t nb = limit / (sizeof(float) * (floats_per_image ? floats_per_image : 1));
  if (nb < 1) nb = 1;
  return nb < (size_t)N ? (int)nb : N;
}
static int conv_direct(const kn_conv *s) {
  return s->kh == 1 && s->kw == 1 && s->stride == 1 && s->pad == 0;
}

extern "C" void kn_conv2d_fwd_cuda(float *out, float *ws, const float *in, const float *w,
                                   const float *b, const kn_conv *s, kn_math math) {
  (void)ws; /* the chunked workspace is the module's own */
  const int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s);
  const long P = (long)Ho * Wo, HW = (long)s->H * s->W;
  const int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  if (conv_direct(s)) { /* out_n = W · in_n, every image in one batched GEMM per group */
    for (int g = 0; g < s->groups; g++)
      kn_gemm_batched_cuda(0, 0, Og, (int)P, Kc, 1.0f, w + (long)g * Og * Kc, 0,
                           in + (long)g * Cg * HW, (long)s->C_in * HW, 0.0f,
                           out + (long)g * Og * P, (long)s->C_out * P, s->N, math);
  } else {
    const int nb = conv_chunk(s->N, (size_t)Kc * P);
    float *col = (float *)dbuf_get(&conv_buf, sizeof(float) * (size_t)nb * Kc * P);
    for (int n0 = 0; n0 < s->N; n0 += nb) {
      int k = s->N - n0 < nb ? s->N - n0 : nb;
      for (int g = 0; g < s->groups; g++) {
        im2col_k<<<GRID((long)k * Kc * P)>>>(col, in, n0, k, g * Cg, *s, Ho, Wo, (long)Kc * P, P);
        kn_gemm_batched_cuda(0, 0, Og, (int)P, Kc, 1.0f, w + (long)g * Og * Kc, 0, col,
                             (long)Kc * P, 0.0f, out + ((long)n0 * s->C_out + g * Og) * P,
                             (long)s->C_out * P, k, math);
      }
    }
  }
  if (b) {
    long total = (long)s->N * s->C_out * P;
    add_bias_k<<<GRID(total)>>>(out, b, s->C_out, P, total);
  }
}

extern "C" void kn_conv2d_bwd_cuda(float *din, float *dw, float *db, float *ws, const float *dout,
                                   const float *in, const float *w, const kn_conv *s,
                                   kn_math math) {
  (void)ws;
  const int Ho = kn_conv_out_h(s), Wo = kn_conv_out_w(s);
  const long P = (long)Ho * Wo, HW = (long)s->H * s->W;
  const int Cg = s->C_in / s->groups, Og = s->C_out / s->groups, Kc = Cg * s->kh * s->kw;
  const int direct = conv_direct(s);
  /* per image: the columns (Kc·P; reused for their gradient) and the group's output gradient */
  const int nb = conv_chunk(s->N, (size_t)(Kc + Og) * P);
  float *col = (float *)dbuf_get(&conv_buf, sizeof(float) * (size_t)nb * (Kc + Og) * P);
  float *dyt = col + (size_t)nb * Kc * P;
  for (int n0 = 0; n0 < s->N; n0 += nb) {
    int k = s->N - n0 < nb ? s->N - n0 : nb;
    for (int g = 0; g < s->groups; g++) {
      /* dW_g += [dy_n0 … dy_n0+k-1] (Og, k·P) · [col_n0 …]ᵀ (k·P, Kc): one GEMM */
      im2col_k<<<GRID((long)k * Kc * P)>>>(col, in, n0, k, g * Cg, *s, Ho, Wo, P, (long)k * P);
      dy_gather_k<<<GRID((long)Og * k * P)>>>(dyt, dout, n0, k, g * Og, Og, s->C_out, P);
      kn_gemm_cuda(0, 1, Og, Kc, (int)(k * P), 1.0f, dyt, col, 1.0f, dw + (long)g * Og * Kc,
                   math);
      if (!din) continue;
      const float *wg = w + (long)g * Og * Kc, *dyg = dout + ((long)n0 * s->C_out + g * Og) * P;
      if (direct) { /* din_n += W_gᵀ · dy_n, straight into din */
        kn_gemm_batched_cuda(1, 0, Kc, (int)P, Og, 1.0f, wg, 0, dyg, (long)s->C_out * P, 1.0f,
                             din + ((long)n0 * s->C_in + g * Cg) * HW, (long)s->C_in * HW, k,
                             math);
      } else { /* column gradients W_gᵀ · dy_n per image, then col2im */
        kn_gemm_batched_cuda(1, 0, Kc, (int)P, Og, 1.0f, wg, 0, dyg, (long)s->C_out * P, 0.0f,
                             col, (long)Kc * P, k, math);
        col2im_k<<<GRID((long)k * Cg * HW)>>>(din, col, n0, k, g * Cg, *s, Ho, Wo);
      }
    }
  }
  if (db) chan_sum_add_k<<<s->C_out, 256>>>(db, dout, s->N, s->C_out, P);
}

/* ---- normalisations ---- */
/* Batch norm statistics: block (c, k) sums its share of channel c over (N, HW) in double, then
 * one thread per channel adds the shares in order. */
__global__ void bn_partial_k(double *part, const float *x, const float *y, const float *mean,
                             const float *rstd, int N, int C, long HW, int chunks) {
  __shared__ double sh[32];
  int c = blockIdx.x, k = blockIdx.y;
  long total = (long)N * HW, per = (total + chunks - 1) / chunks;
  long j0 = k * per, j1 = min(total, j0 + per);
  double a = 0.0, b = 0.0;
  for (long j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    long i = ((j / HW) * C + c) * HW + j % HW;
    if (y) { /* backward: Σ dy and Σ dy·x̂ */
      double dy = y[i];
      a += dy;
      b += dy * ((x[i] - mean[c]) * rstd[c]);
    } else { /* forward: Σ x and Σ x² */
      double v = x[i];
      a += v;
      b += v * v;
    }
  }
  a = block_sum(a, sh);
  b = block_sum(b, sh);
  if (threadIdx.x == 0) {
    part[2 * ((long)k * C + c)] = a;
    part[2 * ((long)k * C + c) + 1] = b;
  }
}
static int bn_chunks(int C, long total) {
  long k = (4L * n_sm + C - 1) / C; /* about four blocks per multiprocessor */
  long most = (total + 4095) / 4096;  /* at least 4096 elements a block */
  if (k > most) k = most;
  return k < 1 ? 1 : (int)k;
}
__global__ void bn_stats_k(float *mean, float *rstd, const double *part, int C, int chunks,
                           double cnt) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0, s2 = 0.0;
  for (int k = 0; k < chunks; k++) s += part[2 * ((long)k * C + c)], s2 += part[2 * ((long)k * C + c) + 1];
  double mu = s / cnt, var = s2 / cnt - mu * mu;
  mean[c] = (float)mu;
  rstd[c] = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + 1e-5));
}
__global__ void bn_apply_k(float *out, const float *in, const float *mean, const float *rstd,
                           const float *gm, const float *bt, int C, long HW, long total) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  int c = (int)(i / HW % C);
  out[i] = ((in[i] - mean[c]) * rstd[c]) * gm[c] + bt[c];
}
__global__ void bn_grads_k(float *sums, float *dg, float *db, const double *part, int C,
                           int chunks) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sdy = 0.0, sdyx = 0.0;
  for (int k = 0; k < chunks; k++)
    sdy += part[2 * ((long)k * C + c)], sdyx += part[2 * ((long)k * C + c) + 1];
  dg[c] += (float)sdyx;
  db[c] += (float)sdy;
  sums[2 * c] = (float)sdy;
  sums[2 * c + 1] = (float)sdyx;
}
__global__ void bn_dx_k(float *din, const float *dout, const float *in, const float *mean,
                        const float *rstd, const float *gm, const float *sums, int C, long HW,
                        long total, float inv_cnt) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  int c = (int)(i / HW % C);
  float xh = (in[i] - mean[c]) * rstd[c];
  din[i] += gm[c] * rstd[c] * (dout[i] - sums[2 * c] * inv_cnt - xh * sums[2 * c + 1] * inv_cnt);
}
extern "C" void kn_batchnorm_fwd_cuda(float *out, float *mean, float *rstd, const float *in,
                                      const float *gamma, const float *beta, int N, int C,
                                      int HW) {
  long total = (long)N * C * HW;
  int k = bn_chunks(C, (long)N * HW);
  double *part = (double *)dbuf_get(&red_buf, sizeof(double) * 2 * (size_t)k * C);
  if (total <= 0) return;
  bn_partial_k<<<dim3(C, k), 256>>>(part, in, NULL, NULL, NULL, N, C, HW, k);
  bn_stats_k<<<GRID(C)>>>(mean, rstd, part, C, k, (double)N * HW);
  bn_apply_k<<<GRID(total)>>>(out, in, mean, rstd, gamma, beta, C, HW, total);
}
extern "C" void kn_batchnorm_bwd_cuda(float *din, float *dgamma, float *dbeta, const float *dout,
                                      const float *in, const float *mean, const float *rstd,
                                      const float *gamma, int N, int C, int HW) {
  long total = (long)N * C * HW;
  int k = bn_chunks(C, (long)N * HW);
  double *part = (double *)dbuf_get(&red_buf, sizeof(double) * (2 * (size_t)k * C + C));
  if (total <= 0) return;
  float *sums = (float *)(part + 2 * (size_t)k * C);
  bn_partial_k<<<dim3(C, k), 256>>>(part, in, dout, mean, rstd, N, C, HW, k);
  bn_grads_k<<<GRID(C)>>>(sums, dgamma, dbeta, part, C, k);
  if (din)
    bn_dx_k<<<GRID(total)>>>(din, dout, in, mean, rstd, gamma, sums, C, HW, total,
                             (float)(1.0 / ((double)N * HW)));
}

/* Layer norm: one warp per row (8 rows a block). */
__global__ void ln_fwd_k(float *out, float *mean, float *rstd, const float *in, const float *gm,
                         const float *bt, int M, int C) {
  int r = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= M) return;
  const float *x = in + (long)r * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += x[c];
  float mu = warp_sum(s) / C, s2 = 0.0f;
  for (int c = lane; c < C; c += 32) s2 += (x[c] - mu) * (x[c] - mu);
  float rs = rsqrtf(warp_sum(s2) / C + 1e-5f);
  if (lane == 0) mean[r] = mu, rstd[r] = rs;
  for (int c = lane; c < C; c += 32) out[(long)r * C + c] = ((x[c] - mu) * rs) * gm[c] + bt[c];
}
__global__ void ln_bwd_dx_k(float *din, const float *dout, const float *in, const float *gm,
                            const float *mean, const float *rstd, int M, int C) {
  int r = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= M) return;
  const float *x = in + (long)r * C, *dy = dout + (long)r * C;
  const float mu = mean[r], rs = rstd[r];
  float sd = 0.0f, sdx = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = dy[c] * gm[c];
    sd += d;
    sdx += d * ((x[c] - mu) * rs);
  }
  sd = warp_sum(sd) / C;
  sdx = warp_sum(sdx) / C;
  for (int c = lane; c < C; c += 32)
    din[(long)r * C + c] += rs * (dy[c] * gm[c] - sd - (x[c] - mu) * rs * sdx);
}
extern "C" void kn_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *in,
                                      const float *gamma, const float *beta, int M, int C) {
  if (M > 0) ln_fwd_k<<<(M + 7) / 8, 256>>>(out, mean, rstd, in, gamma, beta, M, C);
}
extern "C" void kn_layernorm_bwd_cuda(float *din, float *dgamma, float *dbeta, const float *dout,
                                      const float *in, const float *gamma, const float *mean,
                                      const float *rstd, int M, int C) {
  if (M <= 0) return;
  if (din) ln_bwd_dx_k<<<(M + 7) / 8, 256>>>(din, dout, in, gamma, mean, rstd, M, C);
  colsums(dgamma, dbeta, dout, in, mean, rstd, M, C);
}

/* RMSNorm: one warp per row (8 rows a block). */
__global__ void rms_fwd_k(float *out, float *rstd, const float *in, const float *gm, int M, int C,
                          float eps) {
  int r = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= M) return;
  const float *x = in + (long)r * C;
  float s2 = 0.0f;
  for (int c = lane; c < C; c += 32) s2 += x[c] * x[c];
  float rs = rsqrtf(warp_sum(s2) / C + eps);
  if (lane == 0) rstd[r] = rs;
  for (int c = lane; c < C; c += 32) out[(long)r * C + c] = (x[c] * rs) * gm[c];
}
__global__ void rms_bwd_dx_k(float *din, const float *dout, const float *in, const float *gm,
                             const float *rstd, int M, int C) {
  int r = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (r >= M) return;
  const float *x = in + (long)r * C, *dy = dout + (long)r * C;
  const float rs = rstd[r];
  float sdx = 0.0f;
  for (int c = lane; c < C; c += 32) sdx += dy[c] * gm[c] * (x[c] * rs);
  sdx = warp_sum(sdx) / C;
  for (int c = lane; c < C; c += 32) din[(long)r * C + c] += rs * (dy[c] * gm[c] - x[c] * rs * sdx);
}
/* ---- ring attention blocks (kn_ring): one thread per (sample, head, query position) ---- */
__device__ static int ring_pos_d(int t, int half, int c0, int c1) {
  return t < half ? c0 * half + t : c1 * half + t - half;
}
/* The score of query row q against local key tk of the chunk, −inf where the mask hides it. */
__device__ static float ring_score_d(const float *q, const float *kv, kn_ring s, int n, int g,
                                     int pq, int tk, float scale) {
  int hs = s.C / s.NH, G = s.KVH > 0 ? s.KVH : s.NH, KW = 2 * G * hs;
  if (ring_pos_d(tk, s.T / 2, s.k0, s.k1) > pq) return -INFINITY;
  const float *k = kv + ((long)n * s.T + tk) * KW + g * hs;
  float d = 0.0f;
  for (int e = 0; e < hs; e++) d += q[e] * k[e];
  return d * scale;
}
/* The query row of thread i: sample n, head h of group g, local position tq (row n·T + tq) at
 * sequence position pq; FALSE past the last. */
struct ring_row {
  int n, h, g, tq, pq, hs, G, KW, qo;
  long row;
  float scale;
};
__device__ static bool ring_row_of(long i, kn_ring s, ring_row *r) {
  if (i >= (long)s.N * s.NH * s.T) return false;
  r->tq = (int)(i % s.T), r->h = (int)(i / s.T % s.NH), r->n = (int)(i / ((long)s.T * s.NH));
  r->hs = s.C / s.NH, r->G = s.KVH > 0 ? s.KVH : s.NH;
  r->g = s.KVH > 0 ? r->h / (s.NH / s.KVH) : r->h, r->KW = 2 * r->G * r->hs;
  r->pq = ring_pos_d(r->tq, s.T / 2, s.q0, s.q1);
  r->scale = 1.0f / sqrtf((float)r->hs);
  r->row = (long)r->n * s.T + r->tq;
  r->qo = kn_qkv_offset(0, r->h, s.C, s.NH, s.KVH); /* its Q within the QKV row */
  return true;
}
__global__ void ring_fwd_k(float *out, float *lse, const float *qkv, const float *kv, kn_ring s) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  ring_row r;
  if (!ring_row_of(i, s, &r)) return;
  const int n = r.n, g = r.g, pq = r.pq, hs = r.hs, G = r.G, KW = r.KW;
  const float scale = r.scale;
  const float *q = qkv + r.row * kn_qkv_width(s.C, s.NH, s.KVH) + r.qo;
  float *o = out + r.row * s.C + r.h * hs;
  if (s.first) {
    for (int e = 0; e < hs; e++) o[e] = 0.0f;
    lse[i] = -INFINITY;
  }
  float mx = -INFINITY;
  for (int tk = 0; tk < s.T; tk++) mx = fmaxf(mx, ring_score_d(q, kv, s, n, g, pq, tk, scale));
  if (mx == -INFINITY) return;
  float sum = 0.0f;
  for (int tk = 0; tk < s.T; tk++) sum += expf(ring_score_d(q, kv, s, n, g, pq, tk, scale) - mx);
  float lb = mx + logf(sum), lo = lse[i];
  float nl = lo == -INFINITY ? lb : fmaxf(lo, lb) + log1pf(expf(-fabsf(lo - lb)));
  float keep = lo == -INFINITY ? 0.0f : expf(lo - nl), w = expf(lb - nl) / sum;
  for (int e = 0; e < hs; e++) o[e] *= keep;
  for (int tk = 0; tk < s.T; tk++) {
    float sc = ring_score_d(q, kv, s, n, g, pq, tk, scale);
    if (sc == -INFINITY) continue;
    float p = expf(sc - mx) * w;
    const float *v = kv + ((long)n * s.T + tk) * KW + (G + g) * hs;
    for (int e = 0; e < hs; e++) o[e] += p * v[e];
  }
  lse[i] = nl;
}
__global__ void ring_bwd_k(float *dqkv, float *dkv, const float *dout, const float *out,
                           const float *lse, const float *qkv, const float *kv, kn_ring s) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  ring_row r;
  if (!ring_row_of(i, s, &r)) return;
  const int n = r.n, g = r.g, pq = r.pq, hs = r.hs, G = r.G, KW = r.KW;
  const float scale = r.scale;
  const long row = r.row * kn_qkv_width(s.C, s.NH, s.KVH) + r.qo;
  const float *q = qkv + row, *o = out + r.row * s.C + r.h * hs;
  const float *dy = dout + r.row * s.C + r.h * hs;
  float *dq = dqkv + row;
  float D = 0.0f;
  for (int e = 0; e < hs; e++) D += dy[e] * o[e];
  for (int tk = 0; tk < s.T; tk++) {
    float sc = ring_score_d(q, kv, s, n, g, pq, tk, scale);
    if (sc == -INFINITY) continue;
    float p = expf(sc - lse[i]);
    const float *k = kv + ((long)n * s.T + tk) * KW + g * hs, *v = k + G * hs;
    float *dk = dkv + ((long)n * s.T + tk) * KW + g * hs, *dv = dk + G * hs;
    float dp = 0.0f;
    for (int e = 0; e < hs; e++) dp += dy[e] * v[e];
    float ds = p * (dp - D) * scale;
    for (int e = 0; e < hs; e++) { /* the group's query heads and positions share K and V */
      dq[e] += ds * k[e];
      atomicAdd(dk + e, ds * q[e]);
      atomicAdd(dv + e, p * dy[e]);
    }
  }
}
extern "C" void kn_attention_ring_fwd_cuda(float *out, float *lse, const float *qkv,
                                           const float *kv, const kn_ring *s) {
  long n = (long)s->N * s->NH * s->T;
  ring_fwd_k<<<GRID(n)>>>(out, lse, qkv, kv, *s);
}
extern "C" void kn_attention_ring_bwd_cuda(float *dqkv, float *dkv, const float *dout,
                                           const float *out, const float *lse, const float *qkv,
                                           const float *kv, const kn_ring *s) {
  long n = (long)s->N * s->NH * s->T;
  ring_bwd_k<<<GRID(n)>>>(dqkv, dkv, dout, out, lse, qkv, kv, *s);
}
extern "C" void kn_rmsnorm_fwd_cuda(float *out, float *rstd, const float *in, const float *gamma,
                                    int M, int C, float eps) {
  if (M > 0) rms_fwd_k<<<(M + 7) / 8, 256>>>(out, rstd, in, gamma, M, C, eps);
}
extern "C" void kn_rmsnorm_bwd_cuda(float *din, float *dgamma, const float *dout, const float *in,
                                    const float *gamma, const float *rstd, int M, int C) {
  if (M <= 0) return;
  if (din) rms_bwd_dx_k<<<(M + 7) / 8, 256>>>(din, dout, in, gamma, rstd, M, C);
  colsums(dgamma, NULL, dout, in, NULL, rstd, M, C);
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
__global__ void swiglu_fwd_k(float *o, const float *x, long n) {
  long j = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (j < n) o[j] = x[2 * j] / (1.0f + expf(-x[2 * j])) * x[2 * j + 1];
}
__global__ void swiglu_bwd_k(float *dx, const float *d, const float *x, long n) {
  long j = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (j >= n) return;
  float a = x[2 * j], b = x[2 * j + 1], sg = 1.0f / (1.0f + expf(-a));
  dx[2 * j] += d[j] * b * sg * (1.0f + a * (1.0f - sg));
  dx[2 * j + 1] += d[j] * a * sg;
}
extern "C" void kn_swiglu_fwd_cuda(float *out, const float *in, long n) {
  swiglu_fwd_k<<<GRID(n)>>>(out, in, n);
}
extern "C" void kn_swiglu_bwd_cuda(float *din, const float *dout, const float *in, long n) {
  swiglu_bwd_k<<<GRID(n)>>>(din, dout, in, n);
}
extern "C" void kn_add_fwd_cuda(float *out, const float *a, const float *b, long n) {
  add_fwd_k<<<GRID(n)>>>(out, a, b, n);
}
extern "C" void kn_add_bwd_cuda(float *da, float *db, const float *dout, long n) {
  add_bwd_k<<<GRID(n)>>>(da, db, dout, n);
}

__global__ void scale_k(float *x, long n, float a) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
__global__ void axpy_k(float *y, const float *x, long n, float a) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
extern "C" void kn_scale_cuda(float *x, long n, float a) {
  scale_k<<<GRID(n)>>>(x, n, a);
}
extern "C" void kn_axpy_cuda(float *y, const float *x, long n, float a) {
  axpy_k<<<GRID(n)>>>(y, x, n, a);
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
/* The outputs whose window holds input row y: o with o·stride − pad ≤ y < o·stride − pad + k. */
__device__ void win_range(int y, int k, int stride, int pad, int n_out, int *lo, int *hi) {
  int a = y + pad - k + 1, b = y + pad;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  *hi = b < 0 ? -1 : min(n_out - 1, b / stride);
}
/* gather: each input pixel sums the outputs whose argmax it is (deterministic) */
__global__ void maxpool_bwd_k(float *din, const float *dout, const int *arg, kn_pool s, int Ho,
                              int Wo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)s.N * s.C * s.H * s.W) return;
  int pix = (int)(i % ((long)s.H * s.W)), y = pix / s.W, x = pix % s.W;
  long nc = i / ((long)s.H * s.W);
  int y0, y1, x0, x1;
  win_range(y, s.kh, s.stride, s.pad, Ho, &y0, &y1);
  win_range(x, s.kw, s.stride, s.pad, Wo, &x0, &x1);
  float acc = 0.0f;
  for (int oy = y0; oy <= y1; oy++)
    for (int ox = x0; ox <= x1; ox++) {
      long o = nc * Ho * Wo + (long)oy * Wo + ox;
      if (arg[o] == pix) acc += dout[o];
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
  int y0, y1, x0, x1;
  win_range(y, s.kh, s.stride, s.pad, Ho, &y0, &y1);
  win_range(x, s.kw, s.stride, s.pad, Wo, &x0, &x1);
  float acc = 0.0f;
  for (int oy = y0; oy <= y1; oy++)
    for (int ox = x0; ox <= x1; ox++) acc += dout[nc * Ho * Wo + (long)oy * Wo + ox];
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
/* dir 0: (N,T,W) -> q,k,v (N,NH,T,hs), a key/value head repeated for each query head of its
 * group; dir 1: y (N,NH,T,hs) -> out (N,T,C), set; dir 3: dout (N,T,C) -> (N,NH,T,hs); dir 2:
 * dq,dk,dv -> dqkv added (packed layout only: the grouped one sums a group's heads, gqa_add_k) */
__global__ void heads_k(float *a, float *b, float *c, float *x, int N, int T, int C, int NH,
                        int KVH, int dir) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * C) return;
  int hs = C / NH, d = (int)(i % hs), h = (int)(i / hs % NH), t = (int)(i / C % T);
  long n = i / ((long)T * C);
  long hm = ((n * NH + h) * T + t) * hs + d;
  long row = (n * T + t), W = kn_qkv_width(C, NH, KVH);
  if (dir == 0) {
    a[hm] = x[row * W + kn_qkv_offset(0, h, C, NH, KVH) + d];
    b[hm] = x[row * W + kn_qkv_offset(1, h, C, NH, KVH) + d];
    c[hm] = x[row * W + kn_qkv_offset(2, h, C, NH, KVH) + d];
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
/* Grouped layout: dqkv (N,T,W) += dq of its query head, or Σ over the group's query heads of
 * dk (dv) for K_g (V_g); one thread per element, in a fixed order. */
__global__ void gqa_add_k(float *dqkv, const float *dq, const float *dk, const float *dv, int N,
                          int T, int C, int NH, int KVH) {
  const int hs = C / NH, r = NH / KVH, W = kn_qkv_width(C, NH, KVH);
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * W) return;
  int c = (int)(i % W), t = (int)(i / W % T), slot = kn_qkv_slot(c, hs, NH, KVH),
      g = c / hs / (r + 2), d = c % hs;
  long n = i / ((long)T * W);
#define HM(h) ((((long)n * NH + (h)) * T + t) * hs + d)
  if (slot < r) {
    dqkv[i] += dq[HM(g * r + slot)];
  } else {
    const float *src = slot == r ? dk : dv;
    float acc = 0.0f;
    for (int j = 0; j < r; j++) acc += src[HM(g * r + j)];
    dqkv[i] += acc;
  }
#undef HM
}
/* Causal softmax of rows of T scores (row r is query t = r mod T): one warp per row. */
__global__ void causal_softmax_k(float *att, long rows, int T) {
  long r = blockIdx.x * 8L + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float *row = att + r * T;
  int t = (int)(r % T);
  float mx = -INFINITY, sum = 0.0f;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, row[j]);
  mx = warp_max(mx);
  for (int j = lane; j <= t; j += 32) sum += (row[j] = expf(row[j] - mx));
  float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j <= t; j += 32) row[j] *= inv;
  for (int j = t + 1 + lane; j < T; j += 32) row[j] = 0.0f;
}
/* d = p ⊙ (d − Σ p·d) per row of T: one warp per row. */
__global__ void softmax_bwd_rows_k(float *d, const float *p, long rows, int T) {
  long r = blockIdx.x * 8L + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float dot = 0.0f;
  for (int j = lane; j < T; j += 32) dot += p[r * T + j] * d[r * T + j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[r * T + j] = p[r * T + j] * (d[r * T + j] - dot);
}
#define ROWS8(rows) (unsigned)((rows) > 0 ? ((rows) + 7) / 8 : 1), 256
/* att (B,T,T) = causal softmax(q·kᵀ/√hs) */
static void probabilities(float *att, const float *q, const float *k, int B, int T, int hs,
                          kn_math math) {
  kn_gemm_batched_cuda(0, 1, T, T, hs, 1.0f / sqrtf((float)hs), q, (long)T * hs, k, (long)T * hs,
                       0.0f, att, (long)T * T, B, math);
  causal_softmax_k<<<ROWS8((long)B * T)>>>(att, (long)B * T, T);
}
extern "C" void kn_attention_fwd_cuda(float *out, float *att, float *ws, const float *qkv, int N,
                                      int T, int C, int NH, int KVH, kn_math math) {
  int hs = C / NH, B = N * NH;
  long X = (long)N * T * C;
  float *q = ws, *k = ws + X, *v = ws + 2 * X;
  if (!att) att = ws + 3 * X; /* flash-style: the probabilities are not kept */
  heads_k<<<GRID(X)>>>(q, k, v, (float *)qkv, N, T, C, NH, KVH, 0);
  probabilities(att, q, k, B, T, hs, math);
  kn_gemm_batched_cuda(0, 0, T, hs, T, 1.0f, att, (long)T * T, v, (long)T * hs, 0.0f, q,
                       (long)T * hs, B, math);
  heads_k<<<GRID(X)>>>(q, NULL, NULL, out, N, T, C, NH, KVH, 1);
}
extern "C" void kn_attention_bwd_cuda(float *dqkv, float *ws, const float *dout, const float *qkv,
                                      const float *att, int N, int T, int C, int NH, int KVH,
                                      kn_math math) {
  int hs = C / NH, B = N * NH;
  long X = (long)N * T * C, sh = (long)T * hs, sa = (long)T * T;
  float *q = ws, *k = ws + X, *v = ws + 2 * X, *dq = ws + 3 * X, *dk = ws + 4 * X,
        *dv = ws + 5 * X, *dy = ws + 6 * X, *datt = ws + 7 * X;
  float sc = 1.0f / sqrtf((float)hs);
  heads_k<<<GRID(X)>>>(q, k, v, (float *)qkv, N, T, C, NH, KVH, 0);
  heads_k<<<GRID(X)>>>(dy, NULL, NULL, (float *)dout, N, T, C, NH, KVH, 3);
  if (!att) { /* flash-style: the probabilities again, from q and k */
    float *p = datt + (long)B * sa;
    probabilities(p, q, k, B, T, hs, math);
    att = p;
  }
  kn_gemm_batched_cuda(0, 1, T, T, hs, 1.0f, dy, sh, v, sh, 0.0f, datt, sa, B, math);
  kn_gemm_batched_cuda(1, 0, T, hs, T, 1.0f, att, sa, dy, sh, 0.0f, dv, sh, B, math);
  softmax_bwd_rows_k<<<ROWS8((long)B * T)>>>(datt, att, (long)B * T, T);
  kn_gemm_batched_cuda(0, 0, T, hs, T, sc, datt, sa, k, sh, 0.0f, dq, sh, B, math);
  kn_gemm_batched_cuda(1, 0, T, hs, T, sc, datt, sa, q, sh, 0.0f, dk, sh, B, math);
  if (KVH > 0) {
    long n = (long)N * T * kn_qkv_width(C, NH, KVH);
    gqa_add_k<<<GRID(n)>>>(dqkv, dq, dk, dv, N, T, C, NH, KVH);
  } else {
    heads_k<<<GRID(X)>>>(dq, dk, dv, dqkv, N, T, C, NH, 0, 2);
  }
}

/* ---- rotary position embedding, rotate-half form (the CPU twin's rope_turn) ---- */
/* out (N,T,W) = (acc ? out : 0) + x turned by dir·angle: one thread per element. */
__global__ void rope_k(float *out, const float *x, int N, int T, int hs, int NH, int KVH,
                       float theta, int pos0, int dir, int acc) {
  const int C = NH * hs, W = kn_qkv_width(C, NH, KVH), r = NH / KVH, half = hs / 2;
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)N * T * W) return;
  int c = (int)(i % W), t = (int)(i / W % T), slot = kn_qkv_slot(c, hs, NH, KVH), d = c % hs;
  float v;
  if (slot == r + 1) {
    v = x[i];
  } else {
    int j = d < half ? d : d - half;
    double a = (double)(pos0 + t) * pow((double)theta, -2.0 * j / hs);
    float cs = (float)cos(a), sn = (float)(dir * sin(a));
    long base = i - d;
    float x0 = x[base + j], x1 = x[base + j + half];
    v = d < half ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
  }
  out[i] = (acc ? out[i] : 0.0f) + v;
}
extern "C" void kn_rope_fwd_cuda(float *out, const float *in, int N, int T, int hs, int NH,
                                 int KVH, float theta, int pos0) {
  long n = (long)N * T * kn_qkv_width(NH * hs, NH, KVH);
  rope_k<<<GRID(n)>>>(out, in, N, T, hs, NH, KVH, theta, pos0, 1, 0);
}
extern "C" void kn_rope_bwd_cuda(float *din, const float *dout, int N, int T, int hs, int NH,
                                 int KVH, float theta, int pos0) {
  long n = (long)N * T * kn_qkv_width(NH * hs, NH, KVH);
  rope_k<<<GRID(n)>>>(din, dout, N, T, hs, NH, KVH, theta, pos0, -1, 1);
}

/* ---- softmax cross-entropy ---- */
/* One block per row of V logits: probabilities and the row's loss. */
__global__ void sce_fwd_k(float *probs, float *loss, const float *z, const int *tg, int M, int V) {
  __shared__ float shf[32];
  __shared__ double shd[32];
  int r = blockIdx.x;
  const float *x = z + (long)r * V;
  float *p = probs + (long)r * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, shf);
  double sum = 0.0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += (p[j] = expf(x[j] - mx));
  sum = block_sum(sum, shd);
  float inv = (float)(1.0 / sum);
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) loss[r] = (float)(-(x[tg[r]] - mx - log(sum)));
}
__global__ void sce_bwd_k(float *d, const float *p, const int *tg, int M, int V) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * V) return;
  int r = (int)(i / V), j = (int)(i % V);
  d[i] += (p[i] - (j == tg[r] ? 1.0f : 0.0f)) / (float)M;
}
/* The mean of the M per-row losses in `loss` (device), summed on the host in row order. */
static float mean_loss(const float *loss, int M) {
  float *h = (float *)malloc(sizeof(float) * M);
  cu_down(h, loss, sizeof(float) * M);
  double s = 0;
  for (int i = 0; i < M; i++) s += h[i];
  free(h);
  return (float)(s / M);
}
extern "C" float kn_softmax_ce_fwd_cuda(float *probs, const float *logits, const int *targets,
                                        int M, int V) {
  if (M <= 0) return NAN;
  float *loss = (float *)dbuf_get(&loss_buf, sizeof(float) * M);
  sce_fwd_k<<<M, 256>>>(probs, loss, logits, targets, M, V);
  return mean_loss(loss, M);
}
extern "C" void kn_softmax_ce_bwd_cuda(float *dlogits, const float *probs, const int *targets,
                                       int M, int V) {
  sce_bwd_k<<<GRID((long)M * V)>>>(dlogits, probs, targets, M, V);
}

/* ---- Megatron's vocabulary slices: embedding rows and the parallel cross-entropy ---- */
__global__ void embed_slice_fwd_k(float *out, const int *tok, const float *w, int M, int C, int lo,
                                  int n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * C) return;
  long id = (long)tok[i / C] - lo;
  out[i] = id >= 0 && id < n ? w[id * C + i % C] : 0.0f;
}
__global__ void embed_slice_bwd_k(float *dw, const float *dout, const int *tok, int M, int C,
                                  int lo, int n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * C) return;
  long id = (long)tok[i / C] - lo;
  if (id >= 0 && id < n) atomicAdd(&dw[id * C + i % C], dout[i]);
}
/* one warp per row (8 rows a block) */
__global__ void row_max_k(float *mx, const float *z, int M, int V) {
  long r = blockIdx.x * 8L + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= M) return;
  float v = -INFINITY;
  for (int j = lane; j < V; j += 32) v = fmaxf(v, z[r * V + j]);
  v = warp_max(v);
  if (lane == 0) mx[r] = v;
}
__global__ void sce_slice_fwd_k(float *sum, float *zt, const float *z, const float *mx,
                                const int *tg, int M, int V, int lo) {
  long r = blockIdx.x * 8L + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (r >= M) return;
  double acc = 0.0;
  for (int j = lane; j < V; j += 32) acc += expf(z[r * V + j] - mx[r]);
  acc = warp_sum(acc);
  if (lane == 0) {
    long t = (long)tg[r] - lo;
    sum[r] = (float)acc;
    zt[r] = t >= 0 && t < V ? z[r * V + t] : 0.0f;
  }
}
__global__ void sce_slice_bwd_k(float *din, const float *z, const float *mx, const float *sum,
                                const int *tg, int M, int V, int lo) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= (long)M * V) return;
  long r = i / V, j = i % V;
  float p = (float)(expf(z[i] - mx[r]) / (double)sum[r]);
  din[i] += (p - (j == (long)tg[r] - lo ? 1.0f : 0.0f)) / (float)M;
}
__global__ void sce_slice_loss_k(float *loss, const float *mx, const float *sum, const float *zt,
                                 int M) {
  long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (r < M) loss[r] = (float)(-(zt[r] - mx[r] - log((double)sum[r])));
}
extern "C" void kn_embedding_slice_fwd_cuda(float *out, const int *tokens, const float *w, int M,
                                            int C, int lo, int n) {
  embed_slice_fwd_k<<<GRID((long)M * C)>>>(out, tokens, w, M, C, lo, n);
}
extern "C" void kn_embedding_slice_bwd_cuda(float *dw, const float *dout, const int *tokens, int M,
                                            int C, int lo, int n) {
  embed_slice_bwd_k<<<GRID((long)M * C)>>>(dw, dout, tokens, M, C, lo, n);
}
extern "C" void kn_row_max_cuda(float *mx, const float *z, int M, int V) {
  row_max_k<<<ROWS8(M)>>>(mx, z, M, V);
}
extern "C" void kn_softmax_ce_slice_fwd_cuda(float *sum, float *zt, const float *z,
                                             const float *mx, const int *targets, int M, int V,
                                             int lo) {
  sce_slice_fwd_k<<<ROWS8(M)>>>(sum, zt, z, mx, targets, M, V, lo);
}
extern "C" float kn_softmax_ce_slice_bwd_cuda(float *din, const float *z, const float *mx,
                                              const float *sum, const float *zt,
                                              const int *targets, int M, int V, int lo) {
  if (M <= 0) return NAN;
  sce_slice_bwd_k<<<GRID((long)M * V)>>>(din, z, mx, sum, targets, M, V, lo);
  float *loss = (float *)dbuf_get(&loss_buf, sizeof(float) * M);
  sce_slice_loss_k<<<GRID(M)>>>(loss, mx, sum, zt, M);
  return mean_loss(loss, M);
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
/* Capacity assignment in priority order (every token's first choice in token order, then every
 * second choice, ...): expert e's assignments are exactly its (k, m) pairs in that order, so one
 * block per expert numbers them with block-wide prefix sums and keeps the first cap. */
__global__ void moe_assign_k(int *slot, int *count, int *token, const int *expert, int M, int E,
                             int K, int cap) {
  __shared__ int warp_tot[32];
  __shared__ int base_sh;
  int e = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (threadIdx.x == 0) base_sh = 0;
  __syncthreads();
  for (int k = 0; k < K; k++)
    for (int m0 = 0; m0 < M; m0 += blockDim.x) {
      int m = m0 + threadIdx.x;
      int f = m < M && expert[m * K + k] == e;
      int incl = f; /* inclusive prefix sum of f over the block */
      for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      if (lane == 31) warp_tot[w] = incl;
      __syncthreads();
      if (w == 0) {
        int t = lane < nw ? warp_tot[lane] : 0, ti = t;
        for (int o = 1; o < 32; o <<= 1) {
          int v = __shfl_up_sync(0xffffffffu, ti, o);
          if (lane >= o) ti += v;
        }
        if (lane < nw) warp_tot[lane] = ti - t; /* exclusive */
      }
      __syncthreads();
      int base = base_sh;
      if (f) {
        int r = base + warp_tot[w] + incl - 1;
        if (r < cap) {
          slot[m * K + k] = r;
          token[(long)e * cap + r] = m;
        } else {
          slot[m * K + k] = -1;
        }
      }
      __syncthreads();
      if (threadIdx.x == blockDim.x - 1) base_sh = base + warp_tot[w] + incl;
      __syncthreads();
    }
  if (threadIdx.x == 0) count[e] = base_sh < cap ? base_sh : cap;
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
  moe_assign_k<<<E, 1024>>>(sv->slot, sv->count, sv->token, sv->expert, M, E, K, cap);
  moe_gather_k<<<GRID((long)E * cap * C)>>>(sv->xe, in, sv->token, sv->count, E, cap, C);
  int *cnt = (int *)malloc(sizeof(int) * E);
  cu_down(cnt, sv->count, sizeof(int) * E);
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
  cu_down(cnt, sv->count, sizeof(int) * E);
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
  softmax_bwd_rows_k<<<ROWS8(M)>>>(dp, sv->probs, M, E);
  kn_linear_bwd_cuda(din, g->dwr, g->dbr, dp, in, w->wr, M, C, E, math);
}

/* ---- backend table, device information, clock ---- */
static void *cu_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError(); /* an allocation that failed is the caller's to report */
    return NULL;
  }
  cudaMemset(p, 0, bytes ? bytes : 1);
  return p;
}
static void cu_release(void *p) { cudaFree(p); }
static void cu_up(void *d, const void *s, size_t b) {
  cudaError_t e = cudaMemcpy(d, s, b, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) cu_fail("upload", e);
}
static void cu_sync(void) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) cu_fail("a kernel failed", e);
}
static int cu_device; /* the device of this process (dlsim_cuda_backend) */
static void cu_bind(void) { cudaSetDevice(cu_device); }
/* ordered with the kernels: the default stream */
static void cu_zero(void *p, size_t b) {
  if (b) cudaMemsetAsync(p, 0, b);
}
static void cu_copy(void *d, const void *s, size_t b) {
  if (b && d != s) cudaMemcpyAsync(d, s, b, cudaMemcpyDeviceToDevice);
}

/* The timing harness's inputs, made on the device: a SplitMix64 hash of (seed, i) per element,
 * so that a buffer of gigabytes is filled in milliseconds instead of generated on the host and
 * copied. */
__device__ unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
__global__ void fill_floats_k(float *p, size_t n, float value, unsigned long long seed) {
  const int rnd = value != value; /* NaN: random */
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = rnd ? (float)((mix64(seed * 0x9E3779B97F4A7C15ULL + i + 1) >> 40) *
                         (1.0 / 8388608.0)) - 1.0f
               : value;
}
__global__ void fill_ints_k(int *p, size_t n, long mod, unsigned long long seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = mod > 0 ? (int)(mix64(seed * 0x9E3779B97F4A7C15ULL + i + 1) % (unsigned long long)mod)
                   : 0;
}
static void cu_fill_floats(float *p, size_t n, float value, uint64_t seed) {
  if (n) fill_floats_k<<<4 * n_sm, 256>>>(p, n, value, seed);
}
static void cu_fill_ints(int *p, size_t n, long mod, uint64_t seed) {
  if (n) fill_ints_k<<<4 * n_sm, 256>>>(p, n, mod, seed);
}

static const kn_backend cuda_backend = {
    "cuda", cu_alloc, cu_release, cu_up, cu_down, cu_zero, cu_copy, cu_sync, cu_bind,
    cu_fill_floats, cu_fill_ints,
#define KN_CUDA_ENTRY(name, ret, params, args) kn_##name##_cuda,
    KN_FUNCS(KN_CUDA_ENTRY)
#undef KN_CUDA_ENTRY
};

/* The device of this process: local rank modulo the devices, when an MPI launcher says which
 * local rank this is (Open MPI, MPICH, Slurm), so the ranks of a node spread over its GPUs; else
 * the first. */
static int pick_device(int n) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v) % n;
  }
  return 0;
}

extern "C" const kn_backend *dlsim_cuda_backend(const char **why) {
  static int state = 0; /* 0 unknown, 1 ready, -1 none */
  static const char *reason = "no CUDA device";
  if (state == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      state = -1;
    } else if (cu_device = pick_device(n), cudaSetDevice(cu_device) != cudaSuccess) {
      state = -1;
      reason = "the CUDA device cannot be used (busy, or in exclusive mode)";
    } else if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      state = -1;
      reason = "cuBLAS could not start on the CUDA device";
    } else {
      int sm = 0;
      if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, cu_device) == cudaSuccess &&
          sm > 0)
        n_sm = sm;
      state = 1;
    }
  }
  if (state < 0) {
    if (why) *why = reason;
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
