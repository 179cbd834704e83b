/* moe.c — a mixture-of-experts layer, whole or expert-parallel (see moe.h). */
#include "exec/real/moe.h"

#include <math.h>
#include <string.h>

#include "kernels.h"

struct real_moe {
  const wl_layer *l;   /* borrowed */
  const kn_backend *k; /* the kernels (borrowed from the rank) */
  kn_math math;        /* their GEMM arithmetic */
  gboolean failed;     /* an allocation in the backend's memory failed */
  int E, K, C, F;      /* experts, top_k, width, expert hidden width */
  int ep, me;          /* EP group size and this rank's index in it */
  int e0, En;          /* this rank's experts [e0, e0 + En) */
  int64_t M;           /* tokens per micro-batch on this rank */
  int cap;             /* expert capacity over the EP group's tokens */
  int nmb;             /* micro-batches */
  kn_moe_shape shape;  /* whole layer: the kernel's shape */
  float **fsave;       /* whole: [m] kn_moe_saved floats */
  int **isave;         /* whole: [m] kn_moe_saved ints */
  /* expert parallel, [m] each */
  float **probs;       /* (M, E) router probabilities */
  int **expert;        /* (M, K) chosen experts, best first */
  int **slot;          /* (M, K) row in the expert's buffer, -1 when dropped */
  int **cnt;           /* (ep, E, K) assignments per member, expert and choice */
  int **count;         /* (En) rows kept per local expert */
  float **xe, **h, **a, **ye; /* (En, cap, C|F|F|C) expert inputs, hidden, GELU, outputs */
  float **yr;          /* (M, K, C) expert outputs returned for each assignment */
  gboolean *counted;   /* the counts of micro-batch mb are exchanged */
  int *mycnt;          /* (E, K) this rank's counts, sent in the exchange */
  /* backward scratch (one micro-batch at a time) */
  float *dye, *dxe;    /* (En, cap, C) */
  float *da, *dh;      /* (En, cap, F) */
  float *dxr;          /* (M, K, C) input gradients returned for each assignment */
  float *dgate;        /* (M, K) */
  float *sbuf, *rbuf;  /* all-to-all staging, M·K·C and ep·En·cap·C floats */
  double *sn, *rn;     /* bytes to and from each member */
};

/* nmb zeroed buffers of `bytes` (and a float of slack) in the backend's memory; x->failed set
 * when one allocation fails. The expert-parallel state is read on the host, which runs only on
 * a host backend (layer.h). */
static void **mat(real_moe *x, int nmb, size_t bytes) {
  void **v = g_new0(void *, nmb);
  for (int i = 0; i < nmb; i++)
    if (!(v[i] = x->k->alloc(bytes + sizeof(float)))) x->failed = TRUE; /* zeroed */
  return v;
}

static void mat_free(const real_moe *x, void **v) {
  if (!v) return;
  for (int i = 0; i < x->nmb; i++)
    if (v[i]) x->k->release(v[i]);
  g_free(v);
}

real_moe *real_moe_new(const wl_layer *l, const real_shard_layer *s, const cfg_run *c, int64_t M,
                       int nmb, const kn_backend *k, kn_math math) {
  real_moe *x = g_new0(real_moe, 1);
  x->l = l;
  x->k = k;
  x->math = math;
  x->E = l->experts, x->K = l->top_k, x->C = (int)l->in.c, x->F = (int)l->ffn;
  x->M = M;
  x->nmb = nmb;
  x->ep = s->kind == PLAN_SPLIT_EXPERTS ? s->parts : 1;
  x->e0 = s->kind == PLAN_SPLIT_EXPERTS ? (int)s->c0 : 0;
  x->En = s->kind == PLAN_SPLIT_EXPERTS ? (int)s->cn : x->E;
  x->me = x->e0 / (x->E / x->ep);
  double cf = c->capacity_factor >= 0 ? c->capacity_factor : l->capacity_factor;
  if (cf <= 0) cf = x->E; /* unlimited: capacity = every token */
  x->shape = (kn_moe_shape){(int)(M * x->ep), x->C, x->E, x->K, x->F, cf};
  x->cap = kn_moe_capacity(&x->shape);
  if (x->ep == 1) {
    x->fsave = (float **)mat(x, nmb, sizeof(float) * kn_moe_saved_floats(&x->shape));
    x->isave = (int **)mat(x, nmb, sizeof(int) * kn_moe_saved_ints(&x->shape));
    return x;
  }
  const size_t MK = (size_t)M * x->K, rows = (size_t)x->En * x->cap;
  x->probs = (float **)mat(x, nmb, sizeof(float) * M * x->E);
  x->expert = (int **)mat(x, nmb, sizeof(int) * MK);
  x->slot = (int **)mat(x, nmb, sizeof(int) * MK);
  x->cnt = (int **)mat(x, nmb, sizeof(int) * x->ep * x->E * x->K);
  x->count = (int **)mat(x, nmb, sizeof(int) * x->En);
  x->xe = (float **)mat(x, nmb, sizeof(float) * rows * x->C);
  x->h = (float **)mat(x, nmb, sizeof(float) * rows * x->F);
  x->a = (float **)mat(x, nmb, sizeof(float) * rows * x->F);
  x->ye = (float **)mat(x, nmb, sizeof(float) * rows * x->C);
  x->yr = (float **)mat(x, nmb, sizeof(float) * MK * x->C);
  x->counted = g_new0(gboolean, nmb);
  x->mycnt = g_new0(int, (size_t)x->E * x->K);
  x->dye = g_new0(float, rows * x->C + 1);
  x->dxe = g_new0(float, rows * x->C + 1);
  x->da = g_new0(float, rows * x->F + 1);
  x->dh = g_new0(float, rows * x->F + 1);
  x->dxr = g_new0(float, MK * x->C + 1);
  x->dgate = g_new0(float, MK + 1);
  x->sbuf = g_new0(float, MAX(MK, (size_t)x->ep * rows) * x->C + 1);
  x->rbuf = g_new0(float, MAX(MK, (size_t)x->ep * rows) * x->C + 1);
  x->sn = g_new0(double, x->ep);
  x->rn = g_new0(double, x->ep);
  return x;
}

void real_moe_free(real_moe *x) {
  if (!x) return;
  mat_free(x, (void **)x->fsave);
  mat_free(x, (void **)x->isave);
  void **per[] = {(void **)x->probs, (void **)x->expert, (void **)x->slot, (void **)x->cnt,
                  (void **)x->count, (void **)x->xe, (void **)x->h, (void **)x->a,
                  (void **)x->ye, (void **)x->yr};
  for (size_t i = 0; i < G_N_ELEMENTS(per); i++) mat_free(x, per[i]);
  g_free(x->counted);
  g_free(x->mycnt);
  g_free(x->dye);
  g_free(x->dxe);
  g_free(x->da);
  g_free(x->dh);
  g_free(x->dxr);
  g_free(x->dgate);
  g_free(x->sbuf);
  g_free(x->rbuf);
  g_free(x->sn);
  g_free(x->rn);
  g_free(x);
}

gboolean real_moe_failed(const real_moe *x) { return x->failed; }

size_t real_moe_ws_floats(const real_moe *x) {
  return x->ep == 1 ? kn_moe_ws_floats(&x->shape) : 1;
}

/* Pointers into the local parameter block (real_moe.h). */
typedef struct {
  const float *wr, *br, *w1, *b1, *w2, *b2;
} moe_w;

static moe_w weights(const real_moe *x, const float *w) {
  moe_w p;
  const size_t C = x->C, F = x->F, E = x->E, En = x->En;
  p.wr = w;
  p.br = x->l->bias ? w + E * C : NULL;
  p.w1 = w + E * C + (x->l->bias ? E : 0);
  p.b1 = p.w1 + En * F * C;
  p.w2 = p.b1 + En * F;
  p.b2 = p.w2 + En * C * F;
  return p;
}

static kn_moe_saved whole_saved(real_moe *x, int mb) {
  kn_moe_saved sv;
  kn_moe_shape s = x->shape;
  kn_moe_saved_bind(&sv, x->fsave[mb], x->isave[mb], &s);
  return sv;
}

/* ---- capacity over the EP group ---------------------------------------------------------- */

/* Position in the group's priority order of the first assignment of member `src` to expert e
 * as choice k: all choices k' < k of every member, then choice k of the members before src. */
static int base(const real_moe *x, const int *cnt, int src, int e, int k) {
  int b = 0;
  for (int kk = 0; kk < k; kk++)
    for (int s = 0; s < x->ep; s++) b += cnt[(s * x->E + e) * x->K + kk];
  for (int s = 0; s < src; s++) b += cnt[(s * x->E + e) * x->K + k];
  return b;
}

/* Assignments of member src to expert e as choice k that are kept. */
static int kept(const real_moe *x, const int *cnt, int src, int e, int k) {
  int b = base(x, cnt, src, e, k), n = cnt[(src * x->E + e) * x->K + k];
  return MAX(0, MIN(n, x->cap - b));
}

/* After the count exchange: slots of this rank's assignments, rows per local expert. */
static void decide(real_moe *x, int mb) {
  const int *cnt = x->cnt[mb];
  for (int e = 0; e < x->E; e++)
    for (int k = 0; k < x->K; k++) {
      int at = base(x, cnt, x->me, e, k);
      for (int64_t m = 0; m < x->M; m++) {
        if (x->expert[mb][m * x->K + k] != e) continue;
        x->slot[mb][m * x->K + k] = at < x->cap ? at : -1;
        at++;
      }
    }
  for (int j = 0; j < x->En; j++) {
    int tot = 0;
    for (int s = 0; s < x->ep; s++)
      for (int k = 0; k < x->K; k++) tot += cnt[(s * x->E + x->e0 + j) * x->K + k];
    x->count[mb][j] = MIN(tot, x->cap);
  }
}

/* ---- packing: the token side and the expert side enumerate rows in the same order -------- */

/* Token side: for each member j, its experts, each choice, the kept tokens in token order.
 * The row of assignment (m, k) is rows + (m·ks + k·kk)·C (per assignment: ks = K, kk = 1; per
 * token: ks = 1, kk = 0); pack copies rows -> buf, else buf -> rows. */
static void token_side(real_moe *x, int mb, float *rows, int ks, int kk, float *buf, double *bytes,
                       gboolean pack) {
  const int per = x->E / x->ep;
  size_t at = 0;
  for (int j = 0; j < x->ep; j++) {
    size_t start = at;
    for (int e = j * per; e < (j + 1) * per; e++)
      for (int k = 0; k < x->K; k++)
        for (int64_t m = 0; m < x->M; m++) {
          const size_t a = (size_t)m * x->K + k;
          if (x->expert[mb][a] != e || x->slot[mb][a] < 0) continue;
          float *row = rows + ((size_t)m * ks + (size_t)k * kk) * x->C;
          if (buf && pack) memcpy(buf + at, row, sizeof(float) * x->C);
          else if (buf) memcpy(row, buf + at, sizeof(float) * x->C);
          at += x->C;
        }
    bytes[j] = (double)(at - start) * sizeof(float);
  }
}

/* Expert side: for each member s, the local experts, each choice, s's kept rows in slot order.
 * `rows` (En, cap, C). */
static void expert_side(real_moe *x, int mb, float *rows, float *buf, double *bytes,
                        gboolean pack) {
  const int *cnt = x->cnt[mb];
  size_t at = 0;
  for (int s = 0; s < x->ep; s++) {
    size_t start = at;
    for (int j = 0; j < x->En; j++)
      for (int k = 0; k < x->K; k++) {
        const int e = x->e0 + j, b = base(x, cnt, s, e, k), n = kept(x, cnt, s, e, k);
        float *r = rows + ((size_t)j * x->cap + b) * x->C;
        if (buf && pack) memcpy(buf + at, r, sizeof(float) * n * x->C);
        else if (buf) memcpy(r, buf + at, sizeof(float) * n * x->C);
        at += (size_t)n * x->C;
      }
    bytes[s] = (double)(at - start) * sizeof(float);
  }
}

/* ---- kernels ------------------------------------------------------------------------------ */

void real_moe_forward(real_moe *x, gboolean experts, float *out, const float *in, const float *w,
                  int mb) {
  const moe_w p = weights(x, w);
  if (x->ep == 1) {
    if (experts) return;
    kn_moe_saved sv = whole_saved(x, mb);
    kn_moe_weights kw = {p.wr, p.br, p.w1, p.b1, p.w2, p.b2};
    kn_moe_shape s = x->shape;
    x->k->moe_fwd(out, &sv, in, &kw, &s, x->math);
    return;
  }
  const int E = x->E, K = x->K, C = x->C, F = x->F;
  if (!experts) { /* router: probabilities, top-k (as kn_moe_fwd), this rank's counts */
    float *pr = x->probs[mb];
    int *ex = x->expert[mb];
    x->k->linear_fwd(pr, in, p.wr, p.br, (int)x->M, C, E, x->math);
    for (int64_t m = 0; m < x->M; m++) {
      float *q = pr + m * E, mx = q[0], sum = 0.0f;
      for (int e = 1; e < E; e++) mx = q[e] > mx ? q[e] : mx;
      for (int e = 0; e < E; e++) sum += (q[e] = expf(q[e] - mx));
      for (int e = 0; e < E; e++) q[e] /= sum;
      for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
          int taken = 0;
          for (int j = 0; j < k; j++) taken |= ex[m * K + j] == e;
          if (!taken && (best < 0 || q[e] > q[best])) best = e;
        }
        ex[m * K + k] = best;
      }
    }
    int *mine = x->cnt[mb] + (size_t)x->me * E * K;
    memset(mine, 0, sizeof(int) * E * K);
    for (int64_t m = 0; m < x->M; m++)
      for (int k = 0; k < K; k++) mine[ex[m * K + k] * K + k]++;
    x->counted[mb] = FALSE;
    return;
  }
  for (int j = 0; j < x->En; j++) { /* the rank's experts on their kept rows */
    const int n = x->count[mb][j];
    if (!n) continue;
    const size_t r0 = (size_t)j * x->cap;
    x->k->linear_fwd(x->h[mb] + r0 * F, x->xe[mb] + r0 * C, p.w1 + (size_t)j * F * C,
                     p.b1 + (size_t)j * F, n, C, F, x->math);
    x->k->gelu_fwd(x->a[mb] + r0 * F, x->h[mb] + r0 * F, (long)n * F);
    x->k->linear_fwd(x->ye[mb] + r0 * C, x->a[mb] + r0 * F, p.w2 + (size_t)j * C * F,
                     p.b2 + (size_t)j * C, n, F, C, x->math);
  }
}

void real_moe_backward(real_moe *x, gboolean experts, float *din, float *g, float *ws,
                   const float *dout, const float *in, const float *w, int mb) {
  const moe_w p = weights(x, w);
  const moe_w d = weights(x, g);
  const int E = x->E, K = x->K, C = x->C, F = x->F;
  if (x->ep == 1) {
    if (!experts) return;
    kn_moe_saved sv = whole_saved(x, mb);
    kn_moe_weights kw = {p.wr, p.br, p.w1, p.b1, p.w2, p.b2};
    kn_moe_grads kg = {(float *)d.wr, (float *)d.br, (float *)d.w1, (float *)d.b1,
                       (float *)d.w2, (float *)d.b2};
    kn_moe_shape s = x->shape;
    x->k->moe_bwd(din, &kg, ws, dout, in, &sv, &kw, &s, x->math);
    return;
  }
  if (experts) { /* as kn_moe_bwd, on the rank's experts */
    const size_t rows = (size_t)x->En * x->cap;
    memset(x->da, 0, sizeof(float) * rows * F);
    memset(x->dh, 0, sizeof(float) * rows * F);
    memset(x->dxe, 0, sizeof(float) * rows * C);
    for (int j = 0; j < x->En; j++) {
      const int n = x->count[mb][j];
      if (!n) continue;
      const size_t r0 = (size_t)j * x->cap;
      x->k->linear_bwd(x->da + r0 * F, (float *)d.w2 + (size_t)j * C * F,
                       (float *)d.b2 + (size_t)j * C, x->dye + r0 * C, x->a[mb] + r0 * F,
                       p.w2 + (size_t)j * C * F, n, F, C, x->math);
      x->k->gelu_bwd(x->dh + r0 * F, x->da + r0 * F, x->h[mb] + r0 * F, (long)n * F);
      x->k->linear_bwd(x->dxe + r0 * C, (float *)d.w1 + (size_t)j * F * C,
                       (float *)d.b1 + (size_t)j * F, x->dh + r0 * F, x->xe[mb] + r0 * C,
                       p.w1 + (size_t)j * F * C, n, C, F, x->math);
    }
    return;
  }
  /* router: the returned input gradients in expert order (as kn_moe_bwd's scatter), then the
   * softmax and the router linear */
  float *dpr = g_new0(float, (size_t)x->M * E);
  for (int64_t m = 0; m < x->M; m++) {
    for (int e = 0; e < E; e++)
      for (int k = 0; k < K; k++) {
        const size_t a = (size_t)m * K + k;
        if (x->expert[mb][a] != e) continue;
        dpr[m * E + e] += x->dgate[a];
        if (x->slot[mb][a] < 0) continue;
        for (int c = 0; c < C; c++) din[m * C + c] += x->dxr[a * C + c];
      }
    const float *q = x->probs[mb] + m * E;
    float *dq = dpr + m * E, dot = 0.0f;
    for (int e = 0; e < E; e++) dot += q[e] * dq[e];
    for (int e = 0; e < E; e++) dq[e] = q[e] * (dq[e] - dot);
  }
  x->k->linear_bwd(din, (float *)d.wr, (float *)d.br, dpr, in, p.wr, (int)x->M, C, E,
                   x->math);
  g_free(dpr);
}

/* ---- the all-to-alls ------------------------------------------------------------------------ */

gboolean real_moe_xfer(real_moe *x, gboolean fwd, gboolean dispatch, int mb, const float *in,
                   const float *dout, real_model_xfer *t) {
  if (x->ep == 1) return FALSE;
  const int K = x->K, C = x->C, E = x->E;
  if (fwd && dispatch && !x->counted[mb]) { /* the group's counts first */
    x->counted[mb] = TRUE;
    memcpy(x->mycnt, x->cnt[mb] + (size_t)x->me * E * K, sizeof(int) * E * K);
    t->how = REAL_MODEL_X_COUNTS;
    t->isend = x->mycnt;
    t->irecv = x->cnt[mb];
    t->n = (size_t)E * K;
    return TRUE;
  }
  t->how = REAL_MODEL_X_ALLTOALLV;
  t->send = x->sbuf;
  t->recv = x->rbuf;
  t->send_n = x->sn;
  t->recv_n = x->rn;
  if (fwd && dispatch) { /* the kept tokens' inputs to their experts */
    decide(x, mb);
    token_side(x, mb, (float *)in, 1, 0, x->sbuf, x->sn, TRUE);
    expert_side(x, mb, x->xe[mb], NULL, x->rn, FALSE); /* sizes only */
  } else if (fwd) { /* the experts' outputs back */
    expert_side(x, mb, x->ye[mb], x->sbuf, x->sn, TRUE);
    token_side(x, mb, x->yr[mb], K, 1, NULL, x->rn, FALSE);
  } else if (!dispatch) { /* combine's gradient: dgate = dout·y, and gate·dout to the experts */
    for (int64_t m = 0; m < x->M; m++)
      for (int k = 0; k < K; k++) {
        const size_t a = (size_t)m * K + k;
        x->dgate[a] = 0.0f;
        if (x->slot[mb][a] < 0) continue;
        const float gt = x->probs[mb][m * E + x->expert[mb][a]];
        const float *dy = dout + m * C, *y = x->yr[mb] + a * C;
        float dot = 0.0f, *d = x->dxr + a * C;
        for (int c = 0; c < C; c++) {
          d[c] = gt * dy[c];
          dot += dy[c] * y[c];
        }
        x->dgate[a] = dot;
      }
    token_side(x, mb, x->dxr, K, 1, x->sbuf, x->sn, TRUE);
    expert_side(x, mb, x->dye, NULL, x->rn, FALSE);
  } else { /* dispatch's gradient: the experts' input gradients back to the tokens */
    expert_side(x, mb, x->dxe, x->sbuf, x->sn, TRUE);
    token_side(x, mb, x->dxr, K, 1, NULL, x->rn, FALSE);
  }
  return TRUE;
}

void real_moe_xfer_done(real_moe *x, gboolean fwd, gboolean dispatch, int mb, float *out) {
  if (x->ep == 1) return;
  const int K = x->K, C = x->C, E = x->E;
  if (fwd && dispatch) {
    expert_side(x, mb, x->xe[mb], x->rbuf, x->rn, FALSE);
  } else if (fwd) { /* out = Σ_k gate·y, as kn_moe_fwd */
    token_side(x, mb, x->yr[mb], K, 1, x->rbuf, x->rn, FALSE);
    memset(out, 0, sizeof(float) * (size_t)x->M * C);
    for (int64_t m = 0; m < x->M; m++)
      for (int k = 0; k < K; k++) {
        const size_t a = (size_t)m * K + k;
        if (x->slot[mb][a] < 0) continue;
        const float gt = x->probs[mb][m * E + x->expert[mb][a]], *y = x->yr[mb] + a * C;
        for (int c = 0; c < C; c++) out[m * C + c] += gt * y[c];
      }
  } else if (!dispatch) {
    memset(x->dye, 0, sizeof(float) * (size_t)x->En * x->cap * C);
    expert_side(x, mb, x->dye, x->rbuf, x->rn, FALSE);
  } else {
    token_side(x, mb, x->dxr, K, 1, x->rbuf, x->rn, FALSE);
  }
}
