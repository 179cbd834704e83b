/* domain.c — domain parallelism in the real executor (--domain conv, PLAN_SPLIT_DOMAIN): rank tp_i
 * of the Pr ranks of a tp group holds rows [lo, hi) of every image (plan_domain_slab) before the
 * first linear. Convolution and pooling read their neighbours' halo rows forward and the
 * neighbours' output-gradient rows backward (Gholami et al. 2018's ΔY halo); batch norm sums its
 * statistics over the group; the first layer after the domain part all-gathers the slabs into
 * whole images (layer.h). */
#include "exec/real/layer.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"

#define BN_EPS 1e-5 /* kernels/cpu/norm.c's ε */

/* ---- buffers ------------------------------------------------------------------------------- */

void real_model_domain_alloc(real_model_rank *r, real_model_layer *y, int tp_i) {
  const wl_layer *l = y->l;
  const int P = y->s->parts;
  const int64_t S = y->S;
  plan_domain_slab((int)l->in.h, P, tp_i, &y->ilo, &y->ihi);
  if (l->kind == WL_BATCHNORM) y->bnst = g_new0(float, 2 * (size_t)l->in.c);
  if (l->kind != WL_CONV2D && l->kind != WL_MAXPOOL && l->kind != WL_AVGPOOL) return;
  const int st = MAX(l->stride, 1);
  const int64_t Wp = l->in.w + 2 * l->pad;
  y->fr0 = (int)y->s->c0 * st - l->pad;
  y->fh = ((int)y->s->cn - 1) * st + l->kh;
  y->win = real_model_per_mb(r, r->nmb, (size_t)(S * l->in.c * y->fh * Wp));
  y->hrow_f[0] = l->in.c * l->in.w;
  y->hrow_f[1] = l->out.c * l->out.w * (l->kind == WL_MAXPOOL ? 2 : 1);
  for (int dir = 0; dir < 2 && plan_domain_windowed(l); dir++) {
    const int rows = dir ? (int)l->out.h : (int)l->in.h;
    int own_lo, own_hi, nlo, nhi;
    plan_domain_slab(rows, P, tp_i, &own_lo, &own_hi);
    plan_domain_needs(l, P, tp_i, dir, &nlo, &nhi);
    int (*h)[2] = y->hrows[dir];
    h[0][0] = tp_i > 0 ? MAX(0, own_lo - nlo) : 0;
    h[0][1] = tp_i < P - 1 ? MAX(0, nhi - own_hi) : 0;
    if (tp_i > 0) { /* what the rank above needs from below its slab */
      plan_domain_needs(l, P, tp_i - 1, dir, &nlo, &nhi);
      h[1][0] = MAX(0, nhi - own_lo);
    }
    if (tp_i < P - 1) {
      plan_domain_needs(l, P, tp_i + 1, dir, &nlo, &nhi);
      h[1][1] = MAX(0, own_hi - nlo);
    }
    for (int a = 0; a < 4; a++)
      if (h[a / 2][a % 2])
        y->halo[dir][a / 2][a % 2] =
            real_model_per_mb(r, r->nmb, (size_t)(S * y->hrow_f[dir] * h[a / 2][a % 2]) +
                                             REAL_MODEL_P2P_TRAILER_FLOATS);
  }
  y->dext = g_new0(float, (size_t)(S * l->out.c * l->out.h * l->out.w) + 1);
  y->dinx = g_new0(float, (size_t)(S * l->in.c * (l->in.h + 2 * l->pad + l->kh) * Wp) + 1);
  if (l->kind == WL_CONV2D) y->dwx = g_new0(float, (size_t)l->params + 1);
}

gboolean real_model_domain_layer(const real_model_layer *y) {
  const wl_layer_kind k = y->l->kind;
  return y->s->kind == PLAN_SPLIT_DOMAIN &&
         (k == WL_CONV2D || k == WL_MAXPOOL || k == WL_AVGPOOL || k == WL_BATCHNORM);
}

/* ---- forward ------------------------------------------------------------------------------- */

/* Row g (global) of channel c of sample s of a domain layer's input: from the model input, the
 * source's slab or a halo received in direction `dir` 0 (forward). */
static const float *domain_in_row(real_model_rank *r, const real_model_layer *y, int mb, int64_t s,
                                  int64_t c, int g) {
  const wl_layer *l = y->l;
  const int64_t C = l->in.c, W = l->in.w;
  if (l->inputs[0] == -1) return r->x[mb] + ((s * C + c) * l->in.h + g) * W;
  if (g >= y->ilo && g < y->ihi)
    return real_model_in_ptr(r, l->inputs[0], mb) +
           ((s * C + c) * (y->ihi - y->ilo) + g - y->ilo) * W;
  const int up = g < y->ilo, n = y->hrows[0][0][up ? 0 : 1];
  const int row = up ? g - (y->ilo - n) : g - y->ihi;
  return y->halo[0][0][up ? 0 : 1][mb] + ((s * C + c) * n + row) * W;
}

/* The padded window input of a windowed domain layer: rows [fr0, fr0 + fh) and W + 2·pad columns,
 * zero outside the image (−FLT_MAX for max pooling, which never picks it). */
static void domain_window(real_model_rank *r, real_model_layer *y, int mb) {
  const wl_layer *l = y->l;
  const int64_t C = l->in.c, W = l->in.w, Wp = W + 2 * l->pad;
  const float fill = l->kind == WL_MAXPOOL ? -FLT_MAX : 0.0f;
  float *win = y->win[mb];
  for (int64_t s = 0; s < y->S; s++)
    for (int64_t c = 0; c < C; c++)
      for (int pr = 0; pr < y->fh; pr++) {
        float *dst = win + ((s * C + c) * y->fh + pr) * Wp;
        const int g = y->fr0 + pr;
        for (int64_t x = 0; x < Wp; x++) dst[x] = fill;
        if (g >= 0 && g < l->in.h)
          memcpy(dst + l->pad, domain_in_row(r, y, mb, s, c, g), sizeof(float) * (size_t)W);
      }
}

/* Batch norm forward on the slab: local Σx, Σx² per channel (after mean and rstd in saved);
 * real_model_domain_bn_done normalises with the group's. */
static void bn_forward_sums(real_model_rank *r, real_model_layer *y, int mb) {
  const wl_layer *l = y->l;
  const int64_t S = y->S, HW = y->s->cn * l->out.w;
  float *sum = y->saved[mb] + 2 * l->in.c;
  for (int64_t c = 0; c < l->in.c; c++) {
    double s1 = 0, s2 = 0;
    for (int64_t n = 0; n < S; n++) {
      const float *x = real_model_in_ptr(r, l->inputs[0], mb) + (n * l->in.c + c) * HW;
      for (int64_t p = 0; p < HW; p++) s1 += x[p], s2 += (double)x[p] * x[p];
    }
    sum[c] = (float)s1;
    sum[l->in.c + c] = (float)s2;
  }
}

void real_model_domain_forward(real_model_rank *r, real_model_layer *y, int mb) {
  const wl_layer *l = y->l;
  const kn_backend *k = r->k;
  const int64_t S = y->S, Wp = l->in.w + 2 * l->pad;
  float *out = y->out[mb];
  if (l->kind == WL_BATCHNORM) {
    bn_forward_sums(r, y, mb);
    return;
  }
  domain_window(r, y, mb);
  if (l->kind == WL_CONV2D) {
    kn_conv s = {(int)S, (int)l->in.c, y->fh, (int)Wp, (int)l->out.c, l->kh, l->kw, l->stride, 0,
                 l->groups};
    k->conv2d_fwd(out, r->ws, y->win[mb], y->w, real_model_bias_of(y, y->w), &s, KN_MATH_FP32);
    return;
  }
  kn_pool s = {(int)S, (int)l->in.c, y->fh, (int)Wp, l->kh, l->kw, l->stride, 0};
  if (l->kind == WL_AVGPOOL) {
    k->avgpool_fwd(out, y->win[mb], &s);
    return;
  }
  int *am = y->argmax[mb];
  k->maxpool_fwd(out, am, y->win[mb], &s);
  for (int64_t e = 0; e < S * y->s->out_per; e++) { /* padded plane -> the image's (H, W) */
    if (am[e] < 0) continue;
    const int64_t gy = y->fr0 + am[e] / Wp, gx = am[e] % Wp - l->pad;
    am[e] = gy >= 0 && gy < l->in.h && gx >= 0 && gx < l->in.w ? (int)(gy * l->in.w + gx) : -1;
  }
}

/* ---- backward ------------------------------------------------------------------------------ */

void real_model_domain_take_rows(const real_model_layer *y, float *slab, const float *full, int ilo,
                                 int ihi) {
  const int64_t C = y->l->in.c, H = y->l->in.h, W = y->l->in.w, n = ihi - ilo;
  for (int64_t s = 0; s < y->S; s++)
    for (int64_t c = 0; c < C; c++) {
      const float *f = full + ((s * C + c) * H + ilo) * W;
      float *d = slab + (s * C + c) * n * W;
      for (int64_t e = 0; e < n * W; e++) d[e] += f[e];
    }
}

/* Batch norm backward on the slab: local sums into the parameter gradients and into bnst
 * (Σdy, Σdy·x̂ per channel); real_model_domain_bn_done computes ΔX once bnst is summed over the
 * group. */
static void bn_backward_sums(real_model_rank *r, real_model_layer *y, int mb) {
  const wl_layer *l = y->l;
  const int64_t S = y->S, C = l->in.c, HW = y->s->cn * l->out.w;
  const float *in = real_model_layer_in(r, y, 0, mb), *dout = real_model_din_ptr(r, y->index, mb);
  const float *mean = y->saved[mb], *rstd = mean + C;
  for (int64_t c = 0; c < C; c++) {
    double sdy = 0, sdyx = 0;
    for (int64_t s = 0; s < S; s++) {
      const float *x = in + (s * C + c) * HW, *dy = dout + (s * C + c) * HW;
      for (int64_t p = 0; p < HW; p++) {
        sdy += dy[p];
        sdyx += dy[p] * ((x[p] - mean[c]) * rstd[c]);
      }
    }
    y->g[c] += (float)sdyx;
    y->g[C + c] += (float)sdy;
    y->bnst[c] = (float)sdy;
    y->bnst[C + c] = (float)sdyx;
  }
}

/* The output-gradient rows [blo, bhi) of a windowed layer (its own and the neighbours' halo
 * rows) into y->dext; max pooling instead scatters each row's gradient to its argmax (its own,
 * or the one the halo carries) within the rank's input rows of din. */
static void dy_rows(real_model_rank *r, real_model_layer *y, int mb, float *din, int blo, int bhi) {
  const wl_layer *l = y->l;
  const int64_t S = y->S, Co = l->out.c, Wo = l->out.w, Ci = l->in.c, W = l->in.w;
  const int64_t c0 = y->s->c0, cn = y->s->cn;
  const float *dout = real_model_din_ptr(r, y->index, mb);
  const int nb = bhi - blo, up = y->hrows[1][0][0], dn = y->hrows[1][0][1];
  const gboolean mx = l->kind == WL_MAXPOOL;
  const int64_t rowf = Co * Wo; /* one row of every channel of one sample, in a halo buffer */
  for (int64_t s = 0; s < S; s++) /* ΔY rows [blo, bhi) (and for max pooling their argmax) */
    for (int64_t c = 0; c < Co; c++)
      for (int g = blo; g < bhi; g++) {
        float *d = y->dext + ((s * Co + c) * nb + g - blo) * Wo;
        const float *from;
        const int *am = NULL;
        const float *amf = NULL;
        if (g >= c0 && g < c0 + cn) {
          from = dout + ((s * Co + c) * cn + g - c0) * Wo;
          if (mx) am = y->argmax[mb] + ((s * Co + c) * cn + g - c0) * Wo;
        } else {
          const int u = g < c0, n = u ? up : dn;
          const float *h = y->halo[1][0][u ? 0 : 1][mb];
          from = h + ((s * Co + c) * n + (u ? g - (c0 - n) : g - (c0 + cn))) * Wo;
          if (mx) amf = from + S * rowf * n;
        }
        if (!mx) {
          memcpy(d, from, sizeof(float) * (size_t)Wo);
          continue;
        }
        for (int64_t x = 0; x < Wo; x++) { /* max pooling: scatter to the rank's input rows */
          const int a = am ? am[x] : (int)amf[x];
          if (a < 0 || a / W < y->ilo || a / W >= y->ihi) continue;
          din[((s * Ci + c) * (y->ihi - y->ilo) + a / W - y->ilo) * W + a % W] += from[x];
        }
      }
}

/* The input gradient of the output-gradient rows [blo, bhi) in y->dext: the convolution's
 * transpose or the average pooling's backward on their padded input rows, of which the rank's
 * rows are added to din. */
static void dx_rows(real_model_rank *r, real_model_layer *y, float *din, int blo, int bhi) {
  const wl_layer *l = y->l;
  const kn_backend *k = r->k;
  const int64_t S = y->S, Co = l->out.c, Ci = l->in.c, W = l->in.w, Wp = W + 2 * l->pad;
  const int st = MAX(l->stride, 1), nb = bhi - blo;
  const int br0 = blo * st - l->pad, bh = (nb - 1) * st + l->kh;
  memset(y->dinx, 0, sizeof(float) * (size_t)(S * Ci * bh * Wp));
  if (l->kind == WL_CONV2D) { /* ΔX = Wᵀ·ΔY; the pass's weight gradient is discarded (the input
                                 it reads is the zeroed ΔX itself) */
    kn_conv s = {(int)S, (int)Ci, bh, (int)Wp, (int)Co, l->kh, l->kw, l->stride, 0, l->groups};
    k->conv2d_bwd(y->dinx, y->dwx, NULL, r->ws, y->dext, y->dinx, y->w, &s, KN_MATH_FP32);
  } else {
    kn_pool s = {(int)S, (int)Ci, bh, (int)Wp, l->kh, l->kw, l->stride, 0};
    k->avgpool_bwd(y->dinx, y->dext, &s);
  }
  const int lo = MAX(y->ilo, br0), hi = MIN(y->ihi, br0 + bh);
  for (int64_t s = 0; s < S; s++)
    for (int64_t c = 0; c < Ci; c++)
      for (int g = lo; g < hi; g++) {
        const float *f = y->dinx + ((s * Ci + c) * bh + g - br0) * Wp + l->pad;
        float *d = din + ((s * Ci + c) * (y->ihi - y->ilo) + g - y->ilo) * W;
        for (int64_t x = 0; x < W; x++) d[x] += f[x];
      }
}

/* Backward of a windowed domain layer. The weight gradient comes from the rank's output rows;
 * the input gradient of its input rows from the output-gradient rows [blo, bhi) whose windows
 * reach them (its own and the neighbours' halo rows, Gholami et al. 2018's ΔY halo): the
 * convolution's transpose and the pooling backward run on them and the rank's rows are kept.
 * Batch norm: local sums (bn_backward_sums). */
void real_model_domain_backward(real_model_rank *r, real_model_layer *y, int mb, float *din) {
  const wl_layer *l = y->l;
  if (l->kind == WL_BATCHNORM) {
    bn_backward_sums(r, y, mb);
    return;
  }
  const int64_t S = y->S, Wp = l->in.w + 2 * l->pad, c0 = y->s->c0, cn = y->s->cn;
  if (l->kind == WL_CONV2D) {
    kn_conv s = {(int)S, (int)l->in.c, y->fh, (int)Wp, (int)l->out.c, l->kh, l->kw, l->stride,
                 0, l->groups};
    r->k->conv2d_bwd(NULL, y->g, real_model_bias_of(y, y->g), r->ws,
                     real_model_din_ptr(r, y->index, mb), y->win[mb], y->w, &s, KN_MATH_FP32);
  }
  if (!din) return;
  int blo = (int)c0, bhi = (int)(c0 + cn);
  if (plan_domain_windowed(l)) plan_domain_needs(l, y->s->parts, r->tp_i, 1, &blo, &bhi);
  if (bhi - blo <= 0) return;
  dy_rows(r, y, mb, din, blo, bhi);
  if (l->kind != WL_MAXPOOL) dx_rows(r, y, din, blo, bhi);
}

/* ---- after the tp group's collectives ------------------------------------------------------ */

void real_model_domain_bn_done(real_model_rank *r, real_model_layer *y, gboolean fwd, int mb) {
  /* Ioffe & Szegedy 2015 with the group's sums */
  const wl_layer *l = y->l;
  const int64_t C = l->in.c, HW = y->s->cn * l->out.w, S = y->S;
  const double cnt = (double)S * l->out.h * l->out.w;
  const float *in = real_model_layer_in(r, y, 0, mb);
  float *mean = y->saved[mb], *rstd = mean + C;
  if (fwd) {
    const float *sum = mean + 2 * C;
    for (int64_t c = 0; c < C; c++) {
      const double mu = sum[c] / cnt, var = MAX(0.0, sum[C + c] / cnt - mu * mu);
      const double rs = 1.0 / sqrt(var + BN_EPS);
      mean[c] = (float)mu;
      rstd[c] = (float)rs;
      for (int64_t s = 0; s < S; s++) {
        const float *x = in + (s * C + c) * HW;
        float *o = y->out[mb] + (s * C + c) * HW;
        for (int64_t p = 0; p < HW; p++) o[p] = (float)((x[p] - mu) * rs) * y->w[c] + y->w[C + c];
      }
    }
  } else if (l->inputs[0] != -1) {
    const float *dout = real_model_din_ptr(r, y->index, mb);
    float *din = real_model_din_ptr(r, l->inputs[0], mb);
    for (int64_t c = 0; c < C; c++) {
      const double sdy = y->bnst[c], sdyx = y->bnst[C + c];
      for (int64_t s = 0; s < S; s++) {
        const float *x = in + (s * C + c) * HW, *dy = dout + (s * C + c) * HW;
        float *dx = din + (s * C + c) * HW;
        for (int64_t p = 0; p < HW; p++) {
          const double xh = (x[p] - mean[c]) * rstd[c];
          dx[p] += (float)(y->w[c] * rstd[c] * (dy[p] - sdy / cnt - xh * sdyx / cnt));
        }
      }
    }
  }
}

int64_t real_model_domain_pack_slabs(real_model_rank *r, real_model_layer *y, int mb) {
  const real_shard_layer *ss = &r->rs[y->l->inputs[0]];
  const int64_t C = y->l->in.c, W = y->l->in.w;
  const float *from = real_model_in_ptr(r, y->l->inputs[0], mb);
  for (int64_t e = 0; e < y->S * C; e++)
    memcpy(y->part + e * ss->cmax * W, from + e * ss->cn * W,
           sizeof(float) * (size_t)(ss->cn * W));
  return y->S * C * ss->cmax * W;
}

void real_model_domain_unpack_slabs(real_model_rank *r, real_model_layer *y, int mb) {
  const real_shard_layer *ss = &r->rs[y->l->inputs[0]];
  const int64_t C = y->l->in.c, H = y->l->in.h, W = y->l->in.w, cmax = ss->cmax;
  for (int t = 0; t < ss->parts; t++) {
    int lo, hi;
    plan_domain_slab((int)H, ss->parts, t, &lo, &hi);
    const float *blk = y->gath + (size_t)t * y->S * C * cmax * W;
    for (int64_t e = 0; e < y->S * C; e++)
      memcpy(y->redist[mb] + (e * H + lo) * W, blk + e * cmax * W,
             sizeof(float) * (size_t)((hi - lo) * W));
  }
}

/* ---- halo messages ------------------------------------------------------------------------- */

float *real_model_halo_buf(real_model_rank *r, const plan_op *op, int peer, int64_t *n) {
  real_model_layer *y = REAL_MODEL_LAY(r, op->layer);
  const wl_layer *l = y->l;
  const int dir = op->phase == PLAN_PH_BWD, send = op->kind == PLAN_SEND, k = peer > r->rank;
  const int rows = y->hrows[dir][send][k], mb = op->microbatch;
  float *buf = y->halo[dir][send][k][mb];
  const int64_t S = y->S, rowf = y->hrow_f[dir];
  *n = S * rowf * rows;
  if (!send) return buf;
  if (dir == 0) { /* input rows next to the boundary: the top ones up, the bottom ones down */
    const int g0 = k ? y->ihi - rows : y->ilo;
    for (int64_t s = 0; s < S; s++)
      for (int64_t c = 0; c < l->in.c; c++)
        for (int g = g0; g < g0 + rows; g++)
          memcpy(buf + ((s * l->in.c + c) * rows + g - g0) * l->in.w,
                 domain_in_row(r, y, mb, s, c, g), sizeof(float) * (size_t)l->in.w);
    return buf;
  }
  /* output-gradient rows (and for max pooling their argmax after them) */
  const int64_t Co = l->out.c, Wo = l->out.w, cn = y->s->cn, r0 = k ? cn - rows : 0;
  const float *dout = real_model_din_ptr(r, y->index, mb);
  const int64_t half = S * Co * Wo * rows;
  for (int64_t s = 0; s < S; s++)
    for (int64_t c = 0; c < Co; c++)
      for (int64_t g = 0; g < rows; g++) {
        const int64_t src = ((s * Co + c) * cn + r0 + g) * Wo;
        const int64_t dst = ((s * Co + c) * rows + g) * Wo;
        memcpy(buf + dst, dout + src, sizeof(float) * (size_t)Wo);
        if (l->kind == WL_MAXPOOL)
          for (int64_t x = 0; x < Wo; x++) buf[half + dst + x] = (float)y->argmax[mb][src + x];
      }
  return buf;
}
