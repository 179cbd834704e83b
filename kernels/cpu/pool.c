/* pool.c — CPU twins of max pooling and average pooling (windowed and global). */
#include <float.h>

#include "kernels.h"

int kn_pool_out_h(const kn_pool *s) { return (s->H + 2 * s->pad - s->kh) / s->stride + 1; }
int kn_pool_out_w(const kn_pool *s) { return (s->W + 2 * s->pad - s->kw) / s->stride + 1; }

void kn_maxpool_fwd_cpu(float *out, int *argmax, const float *in, const kn_pool *s) {
  const int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  for (long nc = 0; nc < (long)s->N * s->C; nc++) {
    const float *x = in + nc * s->H * s->W;
    for (int y = 0; y < Ho; y++)
      for (int xo = 0; xo < Wo; xo++) {
        float best = -FLT_MAX;
        int arg = -1;
        for (int i = 0; i < s->kh; i++) {
          int iy = y * s->stride - s->pad + i;
          if (iy < 0 || iy >= s->H) continue;
          for (int j = 0; j < s->kw; j++) {
            int ix = xo * s->stride - s->pad + j;
            if (ix < 0 || ix >= s->W) continue;
            if (arg < 0 || x[iy * s->W + ix] > best) {
              best = x[iy * s->W + ix];
              arg = iy * s->W + ix;
            }
          }
        }
        size_t o = (size_t)nc * Ho * Wo + (size_t)y * Wo + xo;
        out[o] = arg < 0 ? 0.0f : best;
        argmax[o] = arg;
      }
  }
}

void kn_maxpool_bwd_cpu(float *din, const float *dout, const int *argmax, const kn_pool *s) {
  const long P = (long)kn_pool_out_h(s) * kn_pool_out_w(s);
  for (long nc = 0; nc < (long)s->N * s->C; nc++)
    for (long o = 0; o < P; o++) {
      int a = argmax[nc * P + o];
      if (a >= 0) din[nc * s->H * s->W + a] += dout[nc * P + o];
    }
}

void kn_avgpool_fwd_cpu(float *out, const float *in, const kn_pool *s) {
  const int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  const float inv = 1.0f / (float)(s->kh * s->kw);
  for (long nc = 0; nc < (long)s->N * s->C; nc++) {
    const float *x = in + nc * s->H * s->W;
    for (int y = 0; y < Ho; y++)
      for (int xo = 0; xo < Wo; xo++) {
        float acc = 0.0f;
        for (int i = 0; i < s->kh; i++) {
          int iy = y * s->stride - s->pad + i;
          if (iy < 0 || iy >= s->H) continue;
          for (int j = 0; j < s->kw; j++) {
            int ix = xo * s->stride - s->pad + j;
            if (ix >= 0 && ix < s->W) acc += x[iy * s->W + ix];
          }
        }
        out[(size_t)nc * Ho * Wo + (size_t)y * Wo + xo] = acc * inv;
      }
  }
}

void kn_avgpool_bwd_cpu(float *din, const float *dout, const kn_pool *s) {
  const int Ho = kn_pool_out_h(s), Wo = kn_pool_out_w(s);
  const float inv = 1.0f / (float)(s->kh * s->kw);
  for (long nc = 0; nc < (long)s->N * s->C; nc++) {
    float *dx = din + nc * s->H * s->W;
    for (int y = 0; y < Ho; y++)
      for (int xo = 0; xo < Wo; xo++) {
        float g = dout[(size_t)nc * Ho * Wo + (size_t)y * Wo + xo] * inv;
        for (int i = 0; i < s->kh; i++) {
          int iy = y * s->stride - s->pad + i;
          if (iy < 0 || iy >= s->H) continue;
          for (int j = 0; j < s->kw; j++) {
            int ix = xo * s->stride - s->pad + j;
            if (ix >= 0 && ix < s->W) dx[iy * s->W + ix] += g;
          }
        }
      }
  }
}
