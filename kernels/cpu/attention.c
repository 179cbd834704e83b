/* attention.c — CPU twins of the sequence kernels: token/position embedding, the causal
 * multi-head and grouped-query attention core (its two batched GEMMs plus a masked softmax, as
 * in Vaswani et al. 2017, Eq. 1; flash-style when the probabilities are not kept: backward
 * computes them again), and softmax cross-entropy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

void kn_embedding_fwd_cpu(float *out, const int *tokens, const float *wte, const float *wpe,
                          int N, int T, int C) {
  for (int n = 0; n < N; n++)
    for (int t = 0; t < T; t++) {
      int id = tokens ? tokens[n * T + t] : t;
      float *o = out + ((size_t)n * T + t) * C;
      const float *e = wte + (size_t)id * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + (wpe ? wpe[(size_t)t * C + c] : 0.0f);
    }
}

void kn_embedding_bwd_cpu(float *dwte, float *dwpe, const float *dout, const int *tokens, int N,
                          int T, int C) {
  for (int n = 0; n < N; n++)
    for (int t = 0; t < T; t++) {
      int id = tokens ? tokens[n * T + t] : t;
      const float *d = dout + ((size_t)n * T + t) * C;
      for (int c = 0; c < C; c++) {
        dwte[(size_t)id * C + c] += d[c];
        if (dwpe) dwpe[(size_t)t * C + c] += d[c];
      }
    }
}

size_t kn_attention_ws_floats(int N, int T, int C, int NH, int bwd, int flash) {
  const size_t X = (size_t)N * T * C, P = (size_t)N * NH * T * T;
  return bwd ? 7 * X + P + (flash ? P : 0) : 3 * X + (flash ? P : 0);
}

/* q, k, v (N,NH,T,hs) from qkv (N,T,W): a key/value head is repeated for each query head of its
 * group. */
static void split_heads(float *q, float *k, float *v, const float *qkv, int N, int T, int C,
                        int NH, int KVH) {
  const int hs = C / NH, W = kn_qkv_width(C, NH, KVH);
  for (int n = 0; n < N; n++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *src = qkv + ((size_t)n * T + t) * W;
        size_t dst = (((size_t)n * NH + h) * T + t) * hs;
        memcpy(q + dst, src + kn_qkv_offset(0, h, C, NH, KVH), sizeof(float) * hs);
        memcpy(k + dst, src + kn_qkv_offset(1, h, C, NH, KVH), sizeof(float) * hs);
        memcpy(v + dst, src + kn_qkv_offset(2, h, C, NH, KVH), sizeof(float) * hs);
      }
}

/* att (B,T,T) = causal softmax(q·kᵀ/√hs) of the head-major q, k. */
static void probabilities(float *att, const float *q, const float *k, int B, int T, int hs,
                          kn_math math) {
  const float scale = 1.0f / sqrtf((float)hs);
  kn_gemm_batched_cpu(0, 1, T, T, hs, scale, q, (long)T * hs, k, (long)T * hs, 0.0f, att,
                      (long)T * T, B, math);
  for (long r = 0; r < (long)B * T; r++) {
    float *row = att + r * T;
    int t = (int)(r % T);
    float mx = row[0];
    for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    for (int j = 0; j <= t; j++) row[j] /= sum;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f; /* causal mask */
  }
}

void kn_attention_fwd_cpu(float *out, float *att, float *ws, const float *qkv, int N, int T,
                          int C, int NH, int KVH, kn_math math) {
  const int hs = C / NH;
  const size_t X = (size_t)N * T * C;
  float *q = ws, *k = ws + X, *v = ws + 2 * X;
  if (!att) att = ws + 3 * X; /* flash-style: the probabilities are not kept */
  split_heads(q, k, v, qkv, N, T, C, NH, KVH);
  probabilities(att, q, k, N * NH, T, hs, math);
  /* y (T,hs) = att·v, into q's space (head-major), then back to (N,T,C) */
  kn_gemm_batched_cpu(0, 0, T, hs, T, 1.0f, att, (long)T * T, v, (long)T * hs, 0.0f, q,
                      (long)T * hs, N * NH, math);
  for (int n = 0; n < N; n++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        memcpy(out + ((size_t)n * T + t) * C + h * hs, q + (((size_t)n * NH + h) * T + t) * hs,
               sizeof(float) * hs);
}

void kn_attention_bwd_cpu(float *dqkv, float *ws, const float *dout, const float *qkv,
                          const float *att, int N, int T, int C, int NH, int KVH, kn_math math) {
  const int hs = C / NH, W = kn_qkv_width(C, NH, KVH);
  const size_t X = (size_t)N * T * C;
  const long sh = (long)T * hs, sa = (long)T * T;
  const int B = N * NH;
  float *q = ws, *k = ws + X, *v = ws + 2 * X, *dq = ws + 3 * X, *dk = ws + 4 * X,
        *dv = ws + 5 * X, *dy = ws + 6 * X, *datt = ws + 7 * X;
  split_heads(q, k, v, qkv, N, T, C, NH, KVH);
  if (!att) { /* flash-style: the probabilities again, from q and k */
    float *p = datt + (size_t)B * sa;
    probabilities(p, q, k, B, T, hs, math);
    att = p;
  }
  for (int n = 0; n < N; n++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++)
        memcpy(dy + (((size_t)n * NH + h) * T + t) * hs, dout + ((size_t)n * T + t) * C + h * hs,
               sizeof(float) * hs);
  const float scale = 1.0f / sqrtf((float)hs);
  kn_gemm_batched_cpu(0, 1, T, T, hs, 1.0f, dy, sh, v, sh, 0.0f, datt, sa, B, math); /* dy·vᵀ */
  kn_gemm_batched_cpu(1, 0, T, hs, T, 1.0f, att, sa, dy, sh, 0.0f, dv, sh, B, math); /* attᵀ·dy */
  for (long r = 0; r < (long)B * T; r++) { /* softmax backward, row by row */
    const float *p = att + r * T;
    float *d = datt + r * T;
    float dot = 0.0f;
    for (int j = 0; j < T; j++) dot += p[j] * d[j];
    for (int j = 0; j < T; j++) d[j] = p[j] * (d[j] - dot);
  }
  kn_gemm_batched_cpu(0, 0, T, hs, T, scale, datt, sa, k, sh, 0.0f, dq, sh, B, math);
  kn_gemm_batched_cpu(1, 0, T, hs, T, scale, datt, sa, q, sh, 0.0f, dk, sh, B, math);
  for (int n = 0; n < N; n++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        float *row = dqkv + ((size_t)n * T + t) * W;
        float *gq = row + kn_qkv_offset(0, h, C, NH, KVH),
              *gk = row + kn_qkv_offset(1, h, C, NH, KVH),
              *gv = row + kn_qkv_offset(2, h, C, NH, KVH);
        size_t src = (((size_t)n * NH + h) * T + t) * hs;
        for (int d = 0; d < hs; d++) { /* a group's query heads all add to its K and V */
          gq[d] += dq[src + d];
          gk[d] += dk[src + d];
          gv[d] += dv[src + d];
        }
      }
}

float kn_softmax_ce_fwd_cpu(float *probs, const float *logits, const int *targets, int M, int V) {
  double loss = 0.0;
  for (int i = 0; i < M; i++) {
    const float *z = logits + (size_t)i * V;
    float *p = probs + (size_t)i * V;
    float mx = z[0];
    for (int j = 1; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < V; j++) {
      p[j] = expf(z[j] - mx);
      sum += p[j];
    }
    for (int j = 0; j < V; j++) p[j] = (float)(p[j] / sum);
    loss += -(z[targets[i]] - mx - log(sum));
  }
  return (float)(loss / M);
}

void kn_softmax_ce_bwd_cpu(float *dlogits, const float *probs, const int *targets, int M, int V) {
  const float inv = 1.0f / (float)M;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < V; j++)
      dlogits[(size_t)i * V + j] +=
          (probs[(size_t)i * V + j] - (j == targets[i] ? 1.0f : 0.0f)) * inv;
}

/* ---- rotary position embedding (Su et al. 2021), rotate-half form ---------------------------- */

/* Turns the Q and K heads of every row by +1 (forward) or -1 (backward: the transpose) times
 * their angles and copies V; out += the result when acc, else out = it. */
static void rope_turn(float *out, const float *in, int N, int T, int hs, int NH, int KVH,
                      float theta, int pos0, int dir, int acc) {
  const int W = kn_qkv_width(NH * hs, NH, KVH), half = hs / 2, v_slot = NH / KVH + 1;
  float *cs = malloc(sizeof(float) * (size_t)half), *sn = malloc(sizeof(float) * (size_t)half);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < half; i++) { /* the angles of position pos0 + t */
      const double a = (double)(pos0 + t) * pow((double)theta, -2.0 * i / hs);
      cs[i] = (float)cos(a);
      sn[i] = (float)(dir * sin(a));
    }
    for (int n = 0; n < N; n++)
      for (int c0 = 0; c0 < W; c0 += hs) { /* one head */
        const float *x = in + ((size_t)n * T + t) * W + c0;
        float *y = out + ((size_t)n * T + t) * W + c0;
        const int v = kn_qkv_slot(c0, hs, NH, KVH) == v_slot;
        for (int i = 0; i < half; i++) {
          const float x0 = x[i], x1 = x[i + half];
          const float y0 = v ? x0 : x0 * cs[i] - x1 * sn[i];
          const float y1 = v ? x1 : x0 * sn[i] + x1 * cs[i];
          y[i] = (acc ? y[i] : 0.0f) + y0;
          y[i + half] = (acc ? y[i + half] : 0.0f) + y1;
        }
      }
  }
  free(cs);
  free(sn);
}

void kn_rope_fwd_cpu(float *out, const float *in, int N, int T, int hs, int NH, int KVH,
                     float theta, int pos0) {
  rope_turn(out, in, N, T, hs, NH, KVH, theta, pos0, 1, 0);
}

void kn_rope_bwd_cpu(float *din, const float *dout, int N, int T, int hs, int NH, int KVH,
                     float theta, int pos0) {
  rope_turn(din, dout, N, T, hs, NH, KVH, theta, pos0, -1, 1);
}

/* ---- Megatron's vocabulary-parallel embedding and cross-entropy (slices of the vocabulary) ---- */

void kn_embedding_slice_fwd_cpu(float *out, const int *tokens, const float *w, int M, int C,
                                int lo, int n) {
  memset(out, 0, sizeof(float) * (size_t)M * C);
  for (long t = 0; t < M; t++) {
    const long id = (long)tokens[t] - lo;
    if (id >= 0 && id < n) memcpy(out + t * C, w + id * C, sizeof(float) * (size_t)C);
  }
}

void kn_embedding_slice_bwd_cpu(float *dw, const float *dout, const int *tokens, int M, int C,
                                int lo, int n) {
  for (long t = 0; t < M; t++) {
    const long id = (long)tokens[t] - lo;
    if (id < 0 || id >= n) continue;
    for (long j = 0; j < C; j++) dw[id * C + j] += dout[t * C + j];
  }
}

void kn_row_max_cpu(float *mx, const float *z, int M, int V) {
  for (long r = 0; r < M; r++) {
    const float *x = z + r * V;
    float v = x[0];
    for (long j = 1; j < V; j++) v = x[j] > v ? x[j] : v;
    mx[r] = v;
  }
}

void kn_softmax_ce_slice_fwd_cpu(float *sum, float *zt, const float *z, const float *mx,
                                 const int *targets, int M, int V, int lo) {
  for (long r = 0; r < M; r++) {
    double acc = 0;
    for (long j = 0; j < V; j++) acc += expf(z[r * V + j] - mx[r]);
    sum[r] = (float)acc;
    const long t = (long)targets[r] - lo;
    zt[r] = t >= 0 && t < V ? z[r * V + t] : 0.0f;
  }
}

float kn_softmax_ce_slice_bwd_cpu(float *din, const float *z, const float *mx, const float *sum,
                                  const float *zt, const int *targets, int M, int V, int lo) {
  const float inv = 1.0f / (float)M;
  double loss = 0;
  for (long r = 0; r < M; r++) {
    const long t = (long)targets[r] - lo;
    for (long j = 0; j < V; j++) {
      float p = (float)(expf(z[r * V + j] - mx[r]) / (double)sum[r]);
      din[r * V + j] += (p - (j == t ? 1.0f : 0.0f)) * inv;
    }
    loss += -(zt[r] - mx[r] - log((double)sum[r]));
  }
  return (float)(loss / (double)M);
}

/* ---- ring attention blocks (kn_ring) ------------------------------------------------------- */

/* The sequence position of local position t whose halves are chunks c0 and c1. */
static int ring_pos(int t, int half, int c0, int c1) {
  return t < half ? c0 * half + t : c1 * half + t - half;
}

/* Scores of one query row against the chunk's keys that it sees: sc[tk] (−inf where masked);
 * returns their maximum (−inf when none). */
static float ring_scores(float *sc, const float *q, const float *kv, const kn_ring *s, int n,
                         int h, int tq) {
  const int hs = s->C / s->NH, half = s->T / 2, G = s->KVH > 0 ? s->KVH : s->NH;
  const int g = s->KVH > 0 ? h / (s->NH / s->KVH) : h, KW = 2 * G * hs;
  const int pq = ring_pos(tq, half, s->q0, s->q1);
  const float scale = 1.0f / sqrtf((float)hs);
  float mx = -INFINITY;
  for (int tk = 0; tk < s->T; tk++) {
    sc[tk] = -INFINITY;
    if (ring_pos(tk, half, s->k0, s->k1) > pq) continue;
    const float *k = kv + ((size_t)n * s->T + tk) * KW + g * hs;
    float d = 0.0f;
    for (int e = 0; e < hs; e++) d += q[e] * k[e];
    sc[tk] = d * scale;
    mx = sc[tk] > mx ? sc[tk] : mx;
  }
  return mx;
}

void kn_attention_ring_fwd_cpu(float *out, float *lse, const float *qkv, const float *kv,
                               const kn_ring *s) {
  const int hs = s->C / s->NH, W = kn_qkv_width(s->C, s->NH, s->KVH);
  const int G = s->KVH > 0 ? s->KVH : s->NH, KW = 2 * G * hs;
  float *sc = malloc(sizeof(float) * (size_t)s->T);
  for (int n = 0; n < s->N; n++)
    for (int h = 0; h < s->NH; h++) {
      const int g = s->KVH > 0 ? h / (s->NH / s->KVH) : h;
      for (int tq = 0; tq < s->T; tq++) {
        const float *q = qkv + ((size_t)n * s->T + tq) * W + kn_qkv_offset(0, h, s->C, s->NH,
                                                                             s->KVH);
        float *o = out + ((size_t)n * s->T + tq) * s->C + h * hs;
        float *l = lse + ((size_t)n * s->NH + h) * s->T + tq;
        const float mx = ring_scores(sc, q, kv, s, n, h, tq);
        if (s->first) {
          memset(o, 0, sizeof(float) * (size_t)hs);
          *l = -INFINITY;
        }
        if (mx == -INFINITY) continue;
        float sum = 0.0f;
        for (int tk = 0; tk < s->T; tk++) sum += expf(sc[tk] - mx);
        const float lb = mx + logf(sum), lo = *l;
        const float nl = lo == -INFINITY ? lb : fmaxf(lo, lb) + log1pf(expf(-fabsf(lo - lb)));
        const float keep = lo == -INFINITY ? 0.0f : expf(lo - nl), w = expf(lb - nl) / sum;
        for (int e = 0; e < hs; e++) o[e] *= keep;
        for (int tk = 0; tk < s->T; tk++) {
          if (sc[tk] == -INFINITY) continue;
          const float p = expf(sc[tk] - mx) * w;
          const float *v = kv + ((size_t)n * s->T + tk) * KW + (G + g) * hs;
          for (int e = 0; e < hs; e++) o[e] += p * v[e];
        }
        *l = nl;
      }
    }
  free(sc);
}

void kn_attention_ring_bwd_cpu(float *dqkv, float *dkv, const float *dout, const float *out,
                               const float *lse, const float *qkv, const float *kv,
                               const kn_ring *s) {
  const int hs = s->C / s->NH, W = kn_qkv_width(s->C, s->NH, s->KVH);
  const int G = s->KVH > 0 ? s->KVH : s->NH, KW = 2 * G * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  float *sc = malloc(sizeof(float) * (size_t)s->T);
  for (int n = 0; n < s->N; n++)
    for (int h = 0; h < s->NH; h++) {
      const int g = s->KVH > 0 ? h / (s->NH / s->KVH) : h;
      for (int tq = 0; tq < s->T; tq++) {
        const size_t row = (size_t)n * s->T + tq;
        const float *q = qkv + row * W + kn_qkv_offset(0, h, s->C, s->NH, s->KVH);
        float *dq = dqkv + row * W + kn_qkv_offset(0, h, s->C, s->NH, s->KVH);
        const float *o = out + row * s->C + h * hs, *dy = dout + row * s->C + h * hs;
        const float l = lse[((size_t)n * s->NH + h) * s->T + tq];
        if (ring_scores(sc, q, kv, s, n, h, tq) == -INFINITY) continue;
        float D = 0.0f; /* Σ dout·out: the softmax's backward term */
        for (int e = 0; e < hs; e++) D += dy[e] * o[e];
        for (int tk = 0; tk < s->T; tk++) {
          if (sc[tk] == -INFINITY) continue;
          const float p = expf(sc[tk] - l);
          const float *k = kv + ((size_t)n * s->T + tk) * KW + g * hs, *v = k + G * hs;
          float *dk = dkv + ((size_t)n * s->T + tk) * KW + g * hs, *dv = dk + G * hs;
          float dp = 0.0f;
          for (int e = 0; e < hs; e++) dp += dy[e] * v[e];
          const float ds = p * (dp - D) * scale;
          for (int e = 0; e < hs; e++) {
            dq[e] += ds * k[e];
            dk[e] += ds * q[e];
            dv[e] += p * dy[e];
          }
        }
      }
    }
  free(sc);
}
