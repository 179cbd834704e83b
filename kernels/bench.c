/* bench.c — kernel descriptors for the timing harness: for each layer kind, the buffers one
 * launch needs and the launch itself (harness.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KH_MAX_BUFS 24

typedef enum {
  B_CONV, B_LINEAR, B_BN, B_RELU, B_GELU, B_MAXPOOL, B_AVGPOOL, B_ADD, B_EMBED, B_LN, B_ATTN,
  B_SCE, B_MOE, B_LRN, B_FLATTEN, B_DROPOUT, B_SGD, B_ADAM, B_RMS, B_SWIGLU, B_ROPE
} bench_kind;

static const struct { const char *name; bench_kind k; } kinds[] = {
    {"conv2d", B_CONV}, {"linear", B_LINEAR}, {"batchnorm", B_BN}, {"relu", B_RELU},
    {"gelu", B_GELU}, {"maxpool", B_MAXPOOL}, {"avgpool", B_AVGPOOL}, {"add", B_ADD},
    {"embedding", B_EMBED}, {"layernorm", B_LN}, {"attention", B_ATTN},
    {"softmax_ce", B_SCE}, {"moe", B_MOE}, {"lrn", B_LRN}, {"flatten", B_FLATTEN},
    {"dropout", B_DROPOUT}, {"sgd", B_SGD}, {"adam", B_ADAM}, {"rmsnorm", B_RMS},
    {"swiglu", B_SWIGLU}, {"rope", B_ROPE}};

struct kh_bench {
  const kn_backend *be;  /* implementation timed */
  bench_kind kind;       /* what runs */
  int bwd;               /* backward instead of forward */
  kn_math math;          /* GEMM arithmetic */
  void *buf[KH_MAX_BUFS];/* device buffers, owned */
  int nbuf;
  kn_conv conv;          /* B_CONV */
  kn_pool pool;          /* pooling */
  kn_moe_shape moe;      /* B_MOE */
  kn_moe_saved sv;       /* B_MOE: pointers into buf */
  kn_moe_weights mw;     /* B_MOE */
  kn_moe_grads mg;       /* B_MOE */
  long n1, n2, n3, n4, n5; /* sizes, per kind (see setup) */
  int flash;             /* B_ATTN: probabilities not kept */
  int step;              /* adam step counter */
};

static unsigned long long rng_state;
static float frand(void) { /* deterministic uniform [-1, 1) (64-bit LCG, Knuth MMIX) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* A buffer of `bytes` on the descriptor's backend, released by kh_bench_free; NULL when the
 * table of buffers is full or memory runs out. */
static void *dbuf(kh_bench *b, size_t bytes) {
  if (b->nbuf == KH_MAX_BUFS) return NULL;
  void *d = b->be->alloc(bytes ? bytes : 1);
  if (d) b->buf[b->nbuf++] = d;
  return d;
}
static uint64_t next_seed(void) { return rng_state = rng_state * 6364136223846793005ULL + 1; }

/* A buffer of n floats filled with `fill` (NAN: random in [-1,1)): on the device where the
 * backend can (a GPU: gigabytes in milliseconds), else made here and uploaded (the CPU twins,
 * whose inputs stay the same sequence as ever). */
static float *fbuf(kh_bench *b, size_t n, float fill) {
  float *d = dbuf(b, sizeof(float) * n);
  if (!d) return NULL;
  if (b->be->fill_floats) {
    b->be->fill_floats(d, n, fill, next_seed());
    return d;
  }
  float *host = malloc(sizeof(float) * (n ? n : 1));
  if (!host) return NULL; /* d is released with the descriptor */
  for (size_t i = 0; i < n; i++) host[i] = isnan(fill) ? frand() : fill;
  b->be->upload(d, host, sizeof(float) * n);
  free(host);
  return d;
}

/* A buffer of n ints, uniform in [0, mod) (0 when mod <= 0), made as fbuf makes floats. */
static int *ibuf(kh_bench *b, size_t n, long mod) {
  int *d = dbuf(b, sizeof(int) * n);
  if (!d) return NULL;
  if (b->be->fill_ints) {
    b->be->fill_ints(d, n, mod, next_seed());
    return d;
  }
  int *host = malloc(sizeof(int) * (n ? n : 1));
  if (!host) return NULL;
  for (size_t i = 0; i < n; i++) host[i] = mod > 0 ? (int)((frand() + 1.0f) * 0.5f * mod) % mod : 0;
  b->be->upload(d, host, sizeof(int) * n);
  free(host);
  return d;
}

#define F(i) ((float *)b->buf[i])
#define I(i) ((int *)b->buf[i])
#define NaN_ NAN

void kh_bench_run(kh_bench *b) {
  const kn_backend *be = b->be;
  switch (b->kind) {
  case B_CONV:
    if (!b->bwd) be->conv2d_fwd(F(0), F(1), F(2), F(3), b->n1 ? F(4) : NULL, &b->conv, b->math);
    else be->conv2d_bwd(b->n2 ? F(8) : NULL, F(6), b->n1 ? F(7) : NULL, F(1), F(5), F(2), F(3),
                        &b->conv, b->math);
    break;
  case B_LINEAR: /* n1 = M, n2 = IC, n3 = OC, n4 = bias | needs_dx<<1 */
    if (!b->bwd) be->linear_fwd(F(0), F(1), F(2), (b->n4 & 1) ? F(3) : NULL, (int)b->n1,
                                (int)b->n2, (int)b->n3, b->math);
    else be->linear_bwd((b->n4 & 2) ? F(4) : NULL, F(5), (b->n4 & 1) ? F(6) : NULL, F(0), F(1),
                        F(2), (int)b->n1, (int)b->n2, (int)b->n3, b->math);
    break;
  case B_BN: /* n1 N, n2 C, n3 HW */
    if (!b->bwd) be->batchnorm_fwd(F(0), F(1), F(2), F(3), F(4), F(5), (int)b->n1, (int)b->n2,
                                   (int)b->n3);
    else be->batchnorm_bwd(F(6), F(7), F(8), F(0), F(3), F(1), F(2), F(4), (int)b->n1,
                           (int)b->n2, (int)b->n3);
    break;
  case B_RELU:
    if (!b->bwd) be->relu_fwd(F(0), F(1), b->n1);
    else be->relu_bwd(F(2), F(0), F(0), b->n1);
    break;
  case B_GELU:
    if (!b->bwd) be->gelu_fwd(F(0), F(1), b->n1);
    else be->gelu_bwd(F(2), F(0), F(1), b->n1);
    break;
  case B_DROPOUT:
    if (!b->bwd) be->dropout_fwd(F(0), F(1), b->n1, 0.5f, 1234);
    else be->dropout_bwd(F(1), F(0), b->n1, 0.5f, 1234);
    break;
  case B_ADD:
    if (!b->bwd) be->add_fwd(F(0), F(1), F(2), b->n1);
    else be->add_bwd(F(1), F(2), F(0), b->n1);
    break;
  case B_MAXPOOL:
    if (!b->bwd) be->maxpool_fwd(F(0), I(1), F(2), &b->pool);
    else be->maxpool_bwd(F(3), F(0), I(1), &b->pool);
    break;
  case B_AVGPOOL:
    if (!b->bwd) be->avgpool_fwd(F(0), F(1), &b->pool);
    else be->avgpool_bwd(F(2), F(0), &b->pool);
    break;
  case B_EMBED: /* n1 N, n2 T, n3 C */
    if (!b->bwd) be->embedding_fwd(F(0), I(1), F(2), NULL, (int)b->n1, (int)b->n2, (int)b->n3);
    else be->embedding_bwd(F(3), NULL, F(0), I(1), (int)b->n1, (int)b->n2, (int)b->n3);
    break;
  case B_LN: /* n1 M, n2 C */
    if (!b->bwd) be->layernorm_fwd(F(0), F(1), F(2), F(3), F(4), F(5), (int)b->n1, (int)b->n2);
    else be->layernorm_bwd(F(6), F(7), F(8), F(0), F(3), F(4), F(1), F(2), (int)b->n1,
                           (int)b->n2);
    break;
  case B_ATTN: /* n1 N, n2 T, n3 C, n4 NH, n5 KVH */
    if (!b->bwd) be->attention_fwd(F(0), b->flash ? NULL : F(1), F(2), F(3), (int)b->n1,
                                   (int)b->n2, (int)b->n3, (int)b->n4, (int)b->n5, b->math);
    else be->attention_bwd(F(4), F(2), F(0), F(3), b->flash ? NULL : F(1), (int)b->n1,
                           (int)b->n2, (int)b->n3, (int)b->n4, (int)b->n5, b->math);
    break;
  case B_RMS: /* n1 M, n2 C */
    if (!b->bwd) be->rmsnorm_fwd(F(0), F(1), F(2), F(3), (int)b->n1, (int)b->n2, 1e-5f);
    else be->rmsnorm_bwd(F(4), F(5), F(0), F(2), F(3), F(1), (int)b->n1, (int)b->n2);
    break;
  case B_SWIGLU: /* n1 output elements */
    if (!b->bwd) be->swiglu_fwd(F(0), F(1), b->n1);
    else be->swiglu_bwd(F(2), F(0), F(1), b->n1);
    break;
  case B_ROPE: /* n1 N, n2 T, n3 hs, n4 NH, n5 KVH */
    if (!b->bwd) be->rope_fwd(F(0), F(1), (int)b->n1, (int)b->n2, (int)b->n3, (int)b->n4,
                              (int)b->n5, 10000.0f, 0);
    else be->rope_bwd(F(1), F(0), (int)b->n1, (int)b->n2, (int)b->n3, (int)b->n4, (int)b->n5,
                      10000.0f, 0);
    break;
  case B_SCE: /* n1 M, n2 V */
    if (!b->bwd) be->softmax_ce_fwd(F(0), F(1), I(2), (int)b->n1, (int)b->n2);
    else be->softmax_ce_bwd(F(3), F(0), I(2), (int)b->n1, (int)b->n2);
    break;
  case B_LRN: /* n1 N, n2 C, n3 HW, n4 size */
    if (!b->bwd) be->lrn_fwd(F(0), F(1), F(2), (int)b->n1, (int)b->n2, (int)b->n3, (int)b->n4,
                             1e-4f, 0.75f, 2.0f);
    else be->lrn_bwd(F(3), F(0), F(2), F(0), F(1), (int)b->n1, (int)b->n2, (int)b->n3,
                     (int)b->n4, 1e-4f, 0.75f, 2.0f);
    break;
  case B_MOE:
    if (!b->bwd) be->moe_fwd(F(0), &b->sv, F(1), &b->mw, &b->moe, b->math);
    else be->moe_bwd(F(2), &b->mg, F(3), F(0), F(1), &b->sv, &b->mw, &b->moe, b->math);
    break;
  case B_FLATTEN: /* a view: nothing runs */
    break;
  case B_SGD:
    be->sgd_momentum_step(F(0), F(1), F(2), b->n1, 1e-3f, 0.9f, 0.0f);
    break;
  case B_ADAM:
    be->adam_step(F(0), F(1), F(3), F(2), b->n1, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, ++b->step);
    break;
  }
}

static int setup(kh_bench *b, const kh_layer *l) {
  const long N = l->n, outn = l->out_c * l->out_h * l->out_w * N;
  const long inn = l->in_c * l->in_h * l->in_w * N;
  int ok = 1;
#define NEED(p) ok = ok && (p) != NULL
  switch (b->kind) {
  case B_CONV: {
    kn_conv s = {(int)N, (int)l->in_c, (int)l->in_h, (int)l->in_w, (int)l->out_c, l->kh, l->kw,
                 l->stride, l->pad, l->groups > 0 ? l->groups : 1};
    if (s.C_in % s.groups || s.C_out % s.groups) s.groups = 1;
    b->conv = s;
    b->n1 = l->bias;
    b->n2 = l->needs_dx;
    NEED(fbuf(b, outn, 0));                                         /* 0 out */
    NEED(fbuf(b, kn_conv_ws_floats(&s), 0));                        /* 1 ws */
    NEED(fbuf(b, inn, NaN_));                                       /* 2 in */
    NEED(fbuf(b, (size_t)s.C_out * (s.C_in / s.groups) * s.kh * s.kw, NaN_)); /* 3 w */
    NEED(fbuf(b, s.C_out, NaN_));                                   /* 4 b */
    if (b->bwd) {
      NEED(fbuf(b, outn, NaN_));                                    /* 5 dout */
      NEED(fbuf(b, (size_t)s.C_out * (s.C_in / s.groups) * s.kh * s.kw, 0)); /* 6 dw */
      NEED(fbuf(b, s.C_out, 0));                                    /* 7 db */
      NEED(fbuf(b, inn, 0));                                        /* 8 din */
    }
    break;
  }
  case B_LINEAR:
    b->n1 = N * l->in_h * l->in_w;
    b->n2 = l->in_c;
    b->n3 = l->out_c;
    b->n4 = (l->bias ? 1 : 0) | (l->needs_dx ? 2 : 0);
    NEED(fbuf(b, b->n1 * b->n3, NaN_)); /* 0 out / dout */
    NEED(fbuf(b, b->n1 * b->n2, NaN_)); /* 1 in */
    NEED(fbuf(b, b->n3 * b->n2, NaN_)); /* 2 w */
    NEED(fbuf(b, b->n3, NaN_));         /* 3 b */
    if (b->bwd) {
      NEED(fbuf(b, b->n1 * b->n2, 0));  /* 4 din */
      NEED(fbuf(b, b->n3 * b->n2, 0));  /* 5 dw */
      NEED(fbuf(b, b->n3, 0));          /* 6 db */
    }
    break;
  case B_BN:
    b->n1 = N;
    b->n2 = l->out_c;
    b->n3 = l->out_h * l->out_w;
    NEED(fbuf(b, outn, NaN_));          /* 0 out / dout */
    NEED(fbuf(b, b->n2, 0));            /* 1 mean */
    NEED(fbuf(b, b->n2, 0));            /* 2 rstd */
    NEED(fbuf(b, outn, NaN_));          /* 3 in */
    NEED(fbuf(b, b->n2, 1));            /* 4 gamma */
    NEED(fbuf(b, b->n2, 0));            /* 5 beta */
    if (b->bwd) {
      NEED(fbuf(b, outn, 0));           /* 6 din */
      NEED(fbuf(b, b->n2, 0));          /* 7 dgamma */
      NEED(fbuf(b, b->n2, 0));          /* 8 dbeta */
    }
    break;
  case B_RELU:
  case B_GELU:
  case B_DROPOUT:
  case B_ADD:
  case B_SGD:
  case B_ADAM:
    b->n1 = (b->kind == B_SGD || b->kind == B_ADAM) ? l->params : outn;
    NEED(fbuf(b, b->n1, NaN_));
    NEED(fbuf(b, b->n1, b->kind == B_SGD || b->kind == B_ADAM ? 0 : NaN_));
    NEED(fbuf(b, b->n1, NaN_));
    if (b->kind == B_ADAM) NEED(fbuf(b, b->n1, 0));
    break;
  case B_MAXPOOL:
  case B_AVGPOOL: {
    kn_pool s = {(int)N, (int)l->out_c, (int)l->in_h, (int)l->in_w, l->kh, l->kw,
                 l->stride > 0 ? l->stride : 1, l->pad};
    b->pool = s;
    long on = (long)N * s.C * kn_pool_out_h(&s) * kn_pool_out_w(&s);
    long in = (long)N * s.C * s.H * s.W;
    NEED(fbuf(b, on, NaN_));            /* 0 out / dout */
    if (b->kind == B_MAXPOOL) {
      NEED(ibuf(b, on, 0));             /* 1 argmax */
      NEED(fbuf(b, in, NaN_));          /* 2 in */
      NEED(fbuf(b, in, 0));             /* 3 din */
    } else {
      NEED(fbuf(b, in, NaN_));          /* 1 in */
      NEED(fbuf(b, in, 0));             /* 2 din */
    }
    break;
  }
  case B_EMBED:
    b->n1 = N;
    b->n2 = l->out_h * l->out_w;
    b->n3 = l->out_c;
    NEED(fbuf(b, outn, NaN_));                                      /* 0 out / dout */
    NEED(ibuf(b, b->n1 * b->n2, l->vocab > 0 ? l->vocab : 1));      /* 1 tokens */
    NEED(fbuf(b, (l->vocab > 0 ? l->vocab : 1) * b->n3, NaN_));     /* 2 wte */
    NEED(fbuf(b, (l->vocab > 0 ? l->vocab : 1) * b->n3, 0));        /* 3 dwte */
    break;
  case B_LN:
    b->n1 = N * l->out_h * l->out_w;
    b->n2 = l->out_c;
    NEED(fbuf(b, outn, NaN_));
    NEED(fbuf(b, b->n1, 0));
    NEED(fbuf(b, b->n1, 0));
    NEED(fbuf(b, outn, NaN_));
    NEED(fbuf(b, b->n2, 1));
    NEED(fbuf(b, b->n2, 0));
    if (b->bwd) {
      NEED(fbuf(b, outn, 0));
      NEED(fbuf(b, b->n2, 0));
      NEED(fbuf(b, b->n2, 0));
    }
    break;
  case B_ATTN: {
    b->n1 = N;
    b->n2 = l->out_h * l->out_w;
    b->n3 = l->out_c;
    b->n4 = l->heads > 0 ? l->heads : 1;
    b->n5 = l->kv_heads > 0 && b->n4 % l->kv_heads == 0 ? l->kv_heads : 0;
    if (b->n3 % b->n4) b->n4 = 1, b->n5 = 0;
    b->flash = l->flash;
    const long qkv = N * b->n2 * kn_qkv_width((int)b->n3, (int)b->n4, (int)b->n5);
    NEED(fbuf(b, outn, NaN_));                                                     /* 0 out */
    NEED(fbuf(b, b->flash ? 1 : b->n1 * b->n4 * b->n2 * b->n2, 0));                /* 1 att */
    NEED(fbuf(b, kn_attention_ws_floats((int)b->n1, (int)b->n2, (int)b->n3, (int)b->n4, b->bwd,
                                        b->flash), 0));                            /* 2 ws */
    NEED(fbuf(b, qkv, NaN_));                                                      /* 3 qkv */
    if (b->bwd) NEED(fbuf(b, qkv, 0));                                             /* 4 dqkv */
    break;
  }
  case B_RMS:
    b->n1 = N * l->out_h * l->out_w;
    b->n2 = l->out_c;
    NEED(fbuf(b, outn, NaN_));              /* 0 out / dout */
    NEED(fbuf(b, b->n1, 0));                /* 1 rstd */
    NEED(fbuf(b, outn, NaN_));              /* 2 in */
    NEED(fbuf(b, b->n2, 1));                /* 3 gamma */
    if (b->bwd) {
      NEED(fbuf(b, outn, 0));               /* 4 din */
      NEED(fbuf(b, b->n2, 0));              /* 5 dgamma */
    }
    break;
  case B_SWIGLU:
    b->n1 = outn;
    NEED(fbuf(b, outn, NaN_));              /* 0 out / dout */
    NEED(fbuf(b, 2 * outn, NaN_));          /* 1 in */
    if (b->bwd) NEED(fbuf(b, 2 * outn, 0)); /* 2 din */
    break;
  case B_ROPE: {
    /* in_c = (NH + 2·KVH)·hs; a split keeps whole groups: the heads scale with the channels */
    int nh = l->heads > 0 ? l->heads : 1, kv = l->kv_heads > 0 ? l->kv_heads : nh;
    if (nh % kv) kv = nh;
    const long units = nh + 2L * kv, full = l->in_c;
    b->n1 = N;
    b->n2 = l->out_h * l->out_w;
    b->n3 = full % units == 0 && (full / units) % 2 == 0 ? full / units : 2;
    b->n4 = nh;
    b->n5 = kv;
    const long n = N * b->n2 * units * b->n3;
    NEED(fbuf(b, n, NaN_));                 /* 0 out / dout */
    NEED(fbuf(b, n, b->bwd ? 0 : NaN_));    /* 1 in / din */
    break;
  }
  case B_SCE:
    b->n1 = N * l->out_h * l->out_w;
    b->n2 = l->out_c;
    NEED(fbuf(b, outn, 0));             /* 0 probs */
    NEED(fbuf(b, outn, NaN_));          /* 1 logits */
    NEED(ibuf(b, b->n1, b->n2));        /* 2 targets */
    if (b->bwd) NEED(fbuf(b, outn, 0)); /* 3 dlogits */
    break;
  case B_LRN:
    b->n1 = N;
    b->n2 = l->out_c;
    b->n3 = l->out_h * l->out_w;
    b->n4 = l->kh > 0 ? l->kh : 5;
    NEED(fbuf(b, outn, NaN_));          /* 0 out / dout */
    NEED(fbuf(b, outn, 0));             /* 1 scale */
    NEED(fbuf(b, outn, NaN_));          /* 2 in */
    if (b->bwd) NEED(fbuf(b, outn, 0)); /* 3 din */
    break;
  case B_MOE: {
    kn_moe_shape s = {(int)(N * l->out_h * l->out_w), (int)l->out_c, l->experts, l->top_k,
                      (int)l->ffn, l->capacity_factor > 0 ? l->capacity_factor : 1.0};
    if (s.E < 1) s.E = 1;
    if (s.top_k < 1 || s.top_k > s.E) s.top_k = 1;
    b->moe = s;
    size_t E = s.E, C = s.C, Fh = s.F;
    NEED(fbuf(b, outn, NaN_));                          /* 0 out / dout */
    NEED(fbuf(b, outn, NaN_));                          /* 1 in */
    NEED(fbuf(b, outn, 0));                             /* 2 din */
    NEED(fbuf(b, kn_moe_ws_floats(&s), 0));             /* 3 ws */
    float *sf = fbuf(b, kn_moe_saved_floats(&s), 0);    /* 4 */
    int *si = ibuf(b, kn_moe_saved_ints(&s), 0);        /* 5 */
    NEED(sf);
    NEED(si);
    if (!ok) break;
    kn_moe_saved_bind(&b->sv, sf, si, &s);
    float *w = fbuf(b, E * C + E + 2 * E * Fh * C + E * Fh + E * C, NaN_); /* 6 */
    float *g = fbuf(b, E * C + E + 2 * E * Fh * C + E * Fh + E * C, 0);    /* 7 */
    NEED(w);
    NEED(g);
    if (!ok) break;
    b->mw = (kn_moe_weights){w, l->bias ? w + E * C : NULL, w + E * C + E,
                             w + E * C + E + E * Fh * C, w + E * C + E + E * Fh * C + E * Fh,
                             w + E * C + E + 2 * E * Fh * C + E * Fh};
    b->mg = (kn_moe_grads){g, l->bias ? g + E * C : NULL, g + E * C + E,
                           g + E * C + E + E * Fh * C, g + E * C + E + E * Fh * C + E * Fh,
                           g + E * C + E + 2 * E * Fh * C + E * Fh};
    break;
  }
  case B_FLATTEN:
    break;
  }
#undef NEED
  if (ok && b->bwd && b->kind != B_SGD && b->kind != B_ADAM && b->kind != B_FLATTEN) {
    /* forward once so the saved tensors exist */
    b->bwd = 0;
    if (b->kind == B_ATTN) { /* forward's workspace is the smaller one */
      b->be->attention_fwd(F(0), b->flash ? NULL : F(1), F(2), F(3), (int)b->n1, (int)b->n2,
                           (int)b->n3, (int)b->n4, (int)b->n5, b->math);
    } else if (b->kind != B_CONV && b->kind != B_LINEAR && b->kind != B_ADD &&
               b->kind != B_EMBED && b->kind != B_DROPOUT && b->kind != B_GELU &&
               b->kind != B_SWIGLU && b->kind != B_ROPE) {
      kh_bench_run(b);
    }
    b->bwd = 1;
    b->be->sync();
  }
  return ok;
}

kh_bench *kh_bench_new(const kn_backend *be, const kh_layer *l, kn_math math, char **why) {
  kh_bench *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  int found = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(l->kind, kinds[i].name) == 0) {
      b->kind = kinds[i].k;
      found = 1;
    }
  if (!found) {
    if (why) {
      *why = malloc(96);
      if (*why) snprintf(*why, 96, "unknown kernel kind '%.40s'", l->kind);
    }
    free(b);
    return NULL;
  }
  b->be = be;
  b->bwd = l->bwd;
  b->math = math;
  rng_state = 0x2545F4914F6CDD1DULL;
  if (!setup(b, l)) {
    if (why) {
      *why = malloc(96);
      if (*why) snprintf(*why, 96, "%s: out of %s memory", l->kind, be->name);
    }
    kh_bench_free(b);
    return NULL;
  }
  return b;
}

void kh_bench_free(kh_bench *b) {
  if (!b) return;
  for (int i = 0; i < b->nbuf; i++) b->be->release(b->buf[i]);
  free(b);
}
