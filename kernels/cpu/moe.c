/* moe.c — CPU twin of the mixture-of-experts layer (Shazeer et al. 2017; Switch, Fedus et al.
 * 2021; GShard, Lepikhin et al. 2020): router linear + softmax, top-k, capacity with dropping,
 * permute into per-expert buffers, two linears with GELU per expert, unpermute with gating. */
#include <math.h>
#include <string.h>

#include "kernels.h"

int kn_moe_capacity(const kn_moe_shape *s) {
  /* capacity = ceil(factor·top_k·M/E), kept within [1, M] */
  int cap = (int)ceil(s->capacity_factor * s->top_k * s->M / s->E - 1e-9);
  if (cap < 1) cap = 1;
  if (cap > s->M) cap = s->M;
  return cap;
}

size_t kn_moe_saved_floats(const kn_moe_shape *s) {
  size_t rows = (size_t)s->E * kn_moe_capacity(s);
  return (size_t)s->M * s->E + rows * (2 * (size_t)s->C + 2 * (size_t)s->F);
}

size_t kn_moe_saved_ints(const kn_moe_shape *s) {
  return 2 * (size_t)s->M * s->top_k + s->E + (size_t)s->E * kn_moe_capacity(s);
}

size_t kn_moe_ws_floats(const kn_moe_shape *s) {
  size_t rows = (size_t)s->E * kn_moe_capacity(s);
  return rows * (2 * (size_t)s->C + 2 * (size_t)s->F) + (size_t)s->M * s->E;
}

void kn_moe_saved_bind(kn_moe_saved *sv, float *f, int *i, const kn_moe_shape *s) {
  size_t rows = (size_t)s->E * kn_moe_capacity(s);
  sv->probs = f;
  sv->xe = sv->probs + (size_t)s->M * s->E;
  sv->h = sv->xe + rows * s->C;
  sv->a = sv->h + rows * s->F;
  sv->ye = sv->a + rows * s->F;
  sv->expert = i;
  sv->slot = sv->expert + (size_t)s->M * s->top_k;
  sv->count = sv->slot + (size_t)s->M * s->top_k;
  sv->token = sv->count + s->E;
}

void kn_moe_fwd_cpu(float *out, const kn_moe_saved *sv, const float *in, const kn_moe_weights *w,
                    const kn_moe_shape *s, kn_math math) {
  const int M = s->M, C = s->C, E = s->E, K = s->top_k, F = s->F, cap = kn_moe_capacity(s);
  /* router: probabilities (M,E) */
  kn_linear_fwd_cpu(sv->probs, in, w->wr, w->br, M, C, E, math);
  for (int m = 0; m < M; m++) {
    float *p = sv->probs + (size_t)m * E, mx = p[0], sum = 0.0f;
    for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    /* top-k by repeated selection; ties go to the lower expert index */
    for (int k = 0; k < K; k++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int j = 0; j < k; j++) taken |= sv->expert[m * K + j] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      sv->expert[m * K + k] = best;
    }
  }
  /* capacity: first choices of all tokens first, then second choices (GShard priority) */
  memset(sv->count, 0, sizeof(int) * E);
  for (int k = 0; k < K; k++)
    for (int m = 0; m < M; m++) {
      int e = sv->expert[m * K + k];
      if (sv->count[e] < cap) {
        int r = sv->count[e]++;
        sv->slot[m * K + k] = r;
        sv->token[(size_t)e * cap + r] = m;
        memcpy(sv->xe + ((size_t)e * cap + r) * C, in + (size_t)m * C, sizeof(float) * C);
      } else {
        sv->slot[m * K + k] = -1;
      }
    }
  for (int e = 0; e < E; e++) {
    int n = sv->count[e];
    if (!n) continue;
    size_t r0 = (size_t)e * cap;
    kn_linear_fwd_cpu(sv->h + r0 * F, sv->xe + r0 * C, w->w1 + (size_t)e * F * C,
                      w->b1 + (size_t)e * F, n, C, F, math);
    kn_gelu_fwd_cpu(sv->a + r0 * F, sv->h + r0 * F, (long)n * F);
    kn_linear_fwd_cpu(sv->ye + r0 * C, sv->a + r0 * F, w->w2 + (size_t)e * C * F,
                      w->b2 + (size_t)e * C, n, F, C, math);
  }
  /* unpermute: out[m] = Σ_k gate·ye */
  memset(out, 0, sizeof(float) * (size_t)M * C);
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      int e = sv->expert[m * K + k], r = sv->slot[m * K + k];
      if (r < 0) continue;
      float g = sv->probs[(size_t)m * E + e];
      const float *y = sv->ye + ((size_t)e * cap + r) * C;
      for (int c = 0; c < C; c++) out[(size_t)m * C + c] += g * y[c];
    }
}

void kn_moe_bwd_cpu(float *din, const kn_moe_grads *g, float *ws, const float *dout,
                    const float *in, const kn_moe_saved *sv, const kn_moe_weights *w,
                    const kn_moe_shape *s, kn_math math) {
  const int M = s->M, C = s->C, E = s->E, K = s->top_k, F = s->F, cap = kn_moe_capacity(s);
  const size_t rows = (size_t)E * cap;
  float *dye = ws, *da = dye + rows * C, *dh = da + rows * F, *dxe = dh + rows * F,
        *dp = dxe + rows * C;
  memset(ws, 0, sizeof(float) * kn_moe_ws_floats(s));
  /* gating: dye = gate·dout; dgate = dout·ye */
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      int e = sv->expert[m * K + k], r = sv->slot[m * K + k];
      if (r < 0) continue;
      float gt = sv->probs[(size_t)m * E + e], dot = 0.0f;
      const float *dy = dout + (size_t)m * C, *y = sv->ye + ((size_t)e * cap + r) * C;
      float *d = dye + ((size_t)e * cap + r) * C;
      for (int c = 0; c < C; c++) {
        d[c] = gt * dy[c];
        dot += dy[c] * y[c];
      }
      dp[(size_t)m * E + e] += dot;
    }
  for (int e = 0; e < E; e++) {
    int n = sv->count[e];
    if (!n) continue;
    size_t r0 = (size_t)e * cap;
    kn_linear_bwd_cpu(da + r0 * F, g->dw2 + (size_t)e * C * F, g->db2 + (size_t)e * C,
                      dye + r0 * C, sv->a + r0 * F, w->w2 + (size_t)e * C * F, n, F, C, math);
    kn_gelu_bwd_cpu(dh + r0 * F, da + r0 * F, sv->h + r0 * F, (long)n * F);
    kn_linear_bwd_cpu(dxe + r0 * C, g->dw1 + (size_t)e * F * C, g->db1 + (size_t)e * F,
                      dh + r0 * F, sv->xe + r0 * C, w->w1 + (size_t)e * F * C, n, C, F, math);
    for (int r = 0; r < n; r++) {
      int m = sv->token[r0 + r];
      for (int c = 0; c < C; c++) din[(size_t)m * C + c] += dxe[(r0 + r) * C + c];
    }
  }
  /* router softmax backward: dlogit = p·(dp − Σ p·dp) */
  for (int m = 0; m < M; m++) {
    const float *p = sv->probs + (size_t)m * E;
    float *d = dp + (size_t)m * E, dot = 0.0f;
    for (int e = 0; e < E; e++) dot += p[e] * d[e];
    for (int e = 0; e < E; e++) d[e] = p[e] * (d[e] - dot);
  }
  kn_linear_bwd_cpu(din, g->dwr, g->dbr, dp, in, w->wr, M, C, E, math);
}
