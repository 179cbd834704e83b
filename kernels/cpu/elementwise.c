/* elementwise.c — CPU twins of the per-element kernels: ReLU, GELU, SwiGLU, residual add,
 * dropout, and the optimizer steps (SGD with momentum, AdamW). */
#include <math.h>

#include "kernels.h"

void kn_relu_fwd_cpu(float *out, const float *in, long n) {
  for (long i = 0; i < n; i++) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void kn_relu_bwd_cpu(float *din, const float *dout, const float *out, long n) {
  for (long i = 0; i < n; i++) din[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void kn_gelu_fwd_cpu(float *out, const float *in, long n) {
  for (long i = 0; i < n; i++) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

void kn_gelu_bwd_cpu(float *din, const float *dout, const float *in, long n) {
  for (long i = 0; i < n; i++) {
    float x = in[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float sech2 = 1.0f - t * t;
    float d = 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] += d * dout[i];
  }
}

/* SwiGLU (Shazeer 2020): out_j = silu(a)·b with a = in[2j] (gate), b = in[2j+1] (up). */
void kn_swiglu_fwd_cpu(float *out, const float *in, long n) {
  for (long j = 0; j < n; j++) {
    const float a = in[2 * j], b = in[2 * j + 1];
    out[j] = a / (1.0f + expf(-a)) * b;
  }
}

/* silu′(a) = σ(a)·(1 + a·(1 − σ(a))). */
void kn_swiglu_bwd_cpu(float *din, const float *dout, const float *in, long n) {
  for (long j = 0; j < n; j++) {
    const float a = in[2 * j], b = in[2 * j + 1], sg = 1.0f / (1.0f + expf(-a));
    din[2 * j] += dout[j] * b * sg * (1.0f + a * (1.0f - sg));
    din[2 * j + 1] += dout[j] * a * sg;
  }
}

void kn_add_fwd_cpu(float *out, const float *a, const float *b, long n) {
  for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void kn_add_bwd_cpu(float *da, float *db, const float *dout, long n) {
  for (long i = 0; i < n; i++) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

void kn_scale_cpu(float *x, long n, float a) {
  for (long i = 0; i < n; i++) x[i] *= a;
}

void kn_axpy_cpu(float *y, const float *x, long n, float a) {
  for (long i = 0; i < n; i++) y[i] += a * x[i];
}

int kn_dropout_keep(uint64_t seed, uint64_t i, float p) {
  /* SplitMix64 finaliser (Steele, Lea & Flood 2014) of a Weyl sequence point */
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  double u = (double)(z >> 11) * (1.0 / 9007199254740992.0); /* [0,1), 53 bits */
  return u >= (double)p;
}

void kn_dropout_fwd_cpu(float *out, const float *in, long n, float p, uint64_t seed) {
  float scale = 1.0f / (1.0f - p);
  for (long i = 0; i < n; i++) out[i] = kn_dropout_keep(seed, (uint64_t)i, p) ? in[i] * scale : 0.0f;
}

void kn_dropout_bwd_cpu(float *din, const float *dout, long n, float p, uint64_t seed) {
  float scale = 1.0f / (1.0f - p);
  for (long i = 0; i < n; i++)
    if (kn_dropout_keep(seed, (uint64_t)i, p)) din[i] += dout[i] * scale;
}

void kn_sgd_momentum_step_cpu(float *w, float *mom, const float *g, long n, float lr, float mu,
                              float wd) {
  for (long i = 0; i < n; i++) {
    float gi = g[i] + wd * w[i];
    mom[i] = mu * mom[i] + gi;
    w[i] -= lr * mom[i];
  }
}

void kn_adam_step_cpu(float *w, float *m, float *v, const float *g, long n, float lr, float beta1,
                      float beta2, float eps, float wd, int t) {
  float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
  for (long i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float mh = m[i] / c1, vh = v[i] / c2;
    w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * w[i]);
  }
}
