/* norm.c — CPU twins of the normalisations: batch norm (training mode), layer norm and Caffe's
 * across-channel local response normalisation. Statistics are summed in double in a fixed
 * order. */
#include <math.h>

#include "kernels.h"

#define KN_EPS 1e-5

void kn_batchnorm_fwd_cpu(float *out, float *mean, float *rstd, const float *in,
                          const float *gamma, const float *beta, int N, int C, int HW) {
  const double cnt = (double)N * HW;
  for (int c = 0; c < C; c++) {
    double s = 0, s2 = 0;
    for (int n = 0; n < N; n++) {
      const float *x = in + ((size_t)n * C + c) * HW;
      for (int p = 0; p < HW; p++) s += x[p];
    }
    double mu = s / cnt;
    for (int n = 0; n < N; n++) {
      const float *x = in + ((size_t)n * C + c) * HW;
      for (int p = 0; p < HW; p++) s2 += (x[p] - mu) * (x[p] - mu);
    }
    double rs = 1.0 / sqrt(s2 / cnt + KN_EPS); /* biased variance, as in training */
    mean[c] = (float)mu;
    rstd[c] = (float)rs;
    for (int n = 0; n < N; n++) {
      const float *x = in + ((size_t)n * C + c) * HW;
      float *y = out + ((size_t)n * C + c) * HW;
      for (int p = 0; p < HW; p++) y[p] = (float)((x[p] - mu) * rs) * gamma[c] + beta[c];
    }
  }
}

/* Ioffe & Szegedy 2015, §3: dx = γ·rstd/m · (m·dy − Σdy − x̂·Σ(dy·x̂)). */
void kn_batchnorm_bwd_cpu(float *din, float *dgamma, float *dbeta, const float *dout,
                          const float *in, const float *mean, const float *rstd,
                          const float *gamma, int N, int C, int HW) {
  const double cnt = (double)N * HW;
  for (int c = 0; c < C; c++) {
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < N; n++) {
      const float *x = in + ((size_t)n * C + c) * HW, *dy = dout + ((size_t)n * C + c) * HW;
      for (int p = 0; p < HW; p++) {
        sdy += dy[p];
        sdyx += dy[p] * ((x[p] - mean[c]) * rstd[c]);
      }
    }
    dgamma[c] += (float)sdyx;
    dbeta[c] += (float)sdy;
    if (!din) continue;
    for (int n = 0; n < N; n++) {
      const float *x = in + ((size_t)n * C + c) * HW, *dy = dout + ((size_t)n * C + c) * HW;
      float *dx = din + ((size_t)n * C + c) * HW;
      for (int p = 0; p < HW; p++) {
        double xh = (x[p] - mean[c]) * rstd[c];
        dx[p] += (float)(gamma[c] * rstd[c] * (dy[p] - sdy / cnt - xh * sdyx / cnt));
      }
    }
  }
}

void kn_layernorm_fwd_cpu(float *out, float *mean, float *rstd, const float *in,
                          const float *gamma, const float *beta, int M, int C) {
  for (int i = 0; i < M; i++) {
    const float *x = in + (size_t)i * C;
    float *y = out + (size_t)i * C;
    double s = 0, s2 = 0;
    for (int c = 0; c < C; c++) s += x[c];
    double mu = s / C;
    for (int c = 0; c < C; c++) s2 += (x[c] - mu) * (x[c] - mu);
    double rs = 1.0 / sqrt(s2 / C + KN_EPS);
    mean[i] = (float)mu;
    rstd[i] = (float)rs;
    for (int c = 0; c < C; c++) y[c] = (float)((x[c] - mu) * rs) * gamma[c] + beta[c];
  }
}

void kn_layernorm_bwd_cpu(float *din, float *dgamma, float *dbeta, const float *dout,
                          const float *in, const float *gamma, const float *mean,
                          const float *rstd, int M, int C) {
  for (int i = 0; i < M; i++) {
    const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
    double sd = 0, sdx = 0;
    for (int c = 0; c < C; c++) {
      double xh = (x[c] - mean[i]) * rstd[i];
      double dxh = dy[c] * gamma[c];
      sd += dxh;
      sdx += dxh * xh;
      dgamma[c] += (float)(dy[c] * xh);
      dbeta[c] += dy[c];
    }
    if (!din) continue;
    float *dx = din + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      double xh = (x[c] - mean[i]) * rstd[i];
      dx[c] += (float)(rstd[i] * (dy[c] * gamma[c] - sd / C - xh * sdx / C));
    }
  }
}

/* Window of channel c: [c - size/2, c + (size-1)/2] ∩ [0, C) (Caffe LRNLayer, ACROSS_CHANNELS). */
void kn_lrn_fwd_cpu(float *out, float *scale, const float *in, int N, int C, int HW, int size,
                    float alpha, float beta, float k) {
  const int lo = size / 2, hi = (size - 1) / 2;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int p = 0; p < HW; p++) {
        float s = 0.0f;
        for (int j = c - lo; j <= c + hi; j++)
          if (j >= 0 && j < C) {
            float v = in[((size_t)n * C + j) * HW + p];
            s += v * v;
          }
        size_t i = ((size_t)n * C + c) * HW + p;
        scale[i] = k + alpha / size * s;
        out[i] = in[i] * powf(scale[i], -beta);
      }
}

/* dx_c = dy_c·scale_c^-β − (2αβ/size)·x_c·Σ_{j: c ∈ window(j)} dy_j·y_j/scale_j (Caffe). */
void kn_lrn_bwd_cpu(float *din, const float *dout, const float *in, const float *out,
                    const float *scale, int N, int C, int HW, int size, float alpha, float beta,
                    float k) {
  (void)k;
  const int lo = size / 2, hi = (size - 1) / 2;
  const float f = 2.0f * alpha * beta / size;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int p = 0; p < HW; p++) {
        size_t i = ((size_t)n * C + c) * HW + p;
        float acc = 0.0f;
        /* j's window holds c when j - lo <= c <= j + hi */
        for (int j = c - hi; j <= c + lo; j++)
          if (j >= 0 && j < C) {
            size_t q = ((size_t)n * C + j) * HW + p;
            acc += dout[q] * out[q] / scale[q];
          }
        din[i] += dout[i] * powf(scale[i], -beta) - f * in[i] * acc;
      }
}

void kn_rmsnorm_fwd_cpu(float *out, float *rstd, const float *in, const float *gamma, int M,
                        int C, float eps) {
  for (int i = 0; i < M; i++) {
    const float *x = in + (size_t)i * C;
    float *y = out + (size_t)i * C;
    double s2 = 0;
    for (int c = 0; c < C; c++) s2 += (double)x[c] * x[c];
    const double rs = 1.0 / sqrt(s2 / C + eps);
    rstd[i] = (float)rs;
    for (int c = 0; c < C; c++) y[c] = (float)(x[c] * rs) * gamma[c];
  }
}

/* dx = rstd·(dy·γ − x̂·mean(dy·γ·x̂)), x̂ = x·rstd; dγ = Σ dy·x̂. */
void kn_rmsnorm_bwd_cpu(float *din, float *dgamma, const float *dout, const float *in,
                        const float *gamma, const float *rstd, int M, int C) {
  for (int i = 0; i < M; i++) {
    const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
    double sdx = 0;
    for (int c = 0; c < C; c++) {
      const double xh = x[c] * (double)rstd[i];
      sdx += dy[c] * (double)gamma[c] * xh;
      dgamma[c] += (float)(dy[c] * xh);
    }
    if (!din) continue;
    float *dx = din + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      const double xh = x[c] * (double)rstd[i];
      dx[c] += (float)(rstd[i] * (dy[c] * (double)gamma[c] - xh * sdx / C));
    }
  }
}
