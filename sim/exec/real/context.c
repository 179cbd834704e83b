/* context.c — attention under context parallelism, run for real (--cp; the planner's
 * plan/context.c and build.c's cp_attention). Every other layer works on the rank's share of each
 * sequence as it is (real_shard_runs); attention needs the other ranks' tokens:
 *   ring     rank i holds the two mirrored chunks i and 2·cp − 1 − i of the sequence. Step j of
 *            the forward is the block of its queries against the K/V chunk of rank i − j (its own
 *            at step 0), merged into the running output and log-sum-exp (kn_ring); the chunk then
 *            goes on to rank i + 1. Backward runs the blocks again from the whole forward's output
 *            and log-sum-exp: the Q gradient stays, the chunk's K/V gradient travels one message
 *            behind its K/V, each rank adding its share, and the sum comes home to the chunk's
 *            rank after the last step (message j: K and V of the chunk held, to j = cp − 2, and
 *            the gradients of the chunk held before, from j = 1; message cp: home);
 *   ulysses  the all-to-all before attention turns the rank's positions with every head into every
 *            position with the heads of its group (member j of cp gets the key/value groups
 *            [j·KVH/cp, (j+1)·KVH/cp) and their query heads); attention runs whole on them, and the
 *            all-to-all after it turns its output back. Backward: the output gradient goes out the
 *            same way, the QKV gradient comes back and joins the input's.
 * Which step, message or all-to-all of a layer an op is comes from its place in the plan: its
 * index among the ops of the same kind, layer, micro-batch and pass (the forward, its
 * recomputation in backward, the backward).
 */
#include "exec/real/context.h"

#include <string.h>

#include "core/dl_common.h"
#include "plan/plan.h"

#define CP_PASSES 3 /* forward, recomputed forward, backward */

struct real_cp {
  int cp, cp_i;
  gboolean ring;
  int64_t S, P, n;       /* samples, sequence positions, the rank's positions (P / cp) */
  int C, NH, KVH, W;     /* the layer's width, heads, key/value heads, QKV row (this tp rank) */
  int nmb;
  /* ulysses */
  int Cc, Wc;            /* per cp member: output and QKV channels */
  float **q;             /* [m] the gathered QKV (S, P, Wc) */
  float **o;             /* [m] the attention output (S, P, Cc) */
  float **dO;            /* [m] the gathered output gradient (S, P, Cc) */
  float **dq;            /* [m] the QKV gradient (S, P, Wc) */
  float *sbuf, *rbuf;    /* all-to-all blocks, member-major (S, n, Wc) each */
  double *n_qkv, *n_out; /* bytes per member of each all-to-all */
  /* ring */
  int KW;                /* K/V chunk floats per position (kn_ring_kv_width) */
  int64_t kvf;           /* floats of one K/V chunk (S, n, KW) */
  float *own;            /* the rank's K/V, packed for a kernel (compute thread) */
  float **lse;           /* [m] log-sum-exp (S, NH, n) */
  float **acc;           /* [m·cp] the K/V gradient share of backward step j */
  float **msg[CP_PASSES][2]; /* [pass][send, recv][m·nmsg] message j of a micro-batch */
  int nmsg[CP_PASSES][2];    /* buffers per micro-batch: the forward sends one (its own chunk;
                                then what arrived), the backward packs each */
};

/* The pass of an op: 0 the forward, 1 its recomputation, 2 the backward; ring messages say it in
 * their tag (plan.h). */
static int op_pass(const plan_op *op) {
  if (op->kind == PLAN_SEND || op->kind == PLAN_RECV) return op->tag - PLAN_CP_TAG_BASE;
  return op->phase == PLAN_PH_FWD ? 0 : op->recompute ? 1 : 2;
}

int *real_cp_steps(const plan_rank *plan) {
  int *step = g_new(int, plan->n_ops + 1);
  GHashTable *seen = g_hash_table_new(g_int64_hash, g_int64_equal);
  gint64 *keys = g_new(gint64, plan->n_ops + 1);
  for (int i = 0; i < plan->n_ops; i++) {
    const plan_op *op = &plan->ops[i];
    step[i] = -1;
    if (op->layer < 0 || op->microbatch < 0) continue;
    if ((op->kind == PLAN_SEND || op->kind == PLAN_RECV) && op->purpose != PLAN_WHY_CP_KV)
      continue; /* a pipeline's messages: their tags are not passes */
    /* (kind, pass, layer, micro-batch): the ops whose order tells their step */
    keys[i] = (gint64)(((guint64)op->kind * CP_PASSES + (guint64)op_pass(op)) << 48 |
                       (guint64)op->layer << 24 | (guint64)op->microbatch);
    const gpointer at = g_hash_table_lookup(seen, &keys[i]);
    step[i] = at ? GPOINTER_TO_INT(at) : 0;
    g_hash_table_insert(seen, &keys[i], GINT_TO_POINTER(step[i] + 1));
  }
  g_hash_table_destroy(seen);
  g_free(keys);
  return step;
}

/* Floats of ring message j: K and V of the chunk held to j = cp − 2, the gradients of the one
 * before from j = 1 (the forward's carry K and V only). */
static int64_t msg_floats(const real_cp *s, int pass, int j) {
  if (pass < 2) return s->kvf;
  return (j <= s->cp - 2 ? s->kvf : 0) + (j >= 1 ? s->kvf : 0);
}

real_cp *real_cp_new(real_model_rank *r, const real_model_layer *y) {
  const real_shard_layer *sh = y->s;
  real_cp *s = g_new0(real_cp, 1);
  s->cp = sh->cp, s->cp_i = sh->cp_i, s->ring = sh->cp_ring;
  s->S = y->S, s->P = sh->P, s->n = sh->npos, s->nmb = r->nmb;
  s->C = real_model_attn_width(y), s->NH = real_model_attn_heads(y);
  s->KVH = real_model_attn_kv(y);
  s->W = kn_qkv_width(s->C, s->NH, s->KVH);
  if (s->ring) {
    s->KW = kn_ring_kv_width(s->C, s->NH, s->KVH);
    s->kvf = s->S * s->n * s->KW;
    s->own = real_model_dev(r, sizeof(float) * ((size_t)s->kvf + 1));
    s->lse = real_model_per_mb(r, r->nmb, (size_t)(s->S * s->NH * s->n) + 1);
    s->acc = real_model_per_mb(r, r->nmb * s->cp, (size_t)s->kvf + 1);
    const gboolean again = r->c->recompute || plan_selective_attention(r->c, y->l);
    for (int p = 0; p < CP_PASSES; p++) {
      if (p == 1 && !again) continue; /* no recomputed forward */
      for (int d = 0; d < 2; d++) {
        s->nmsg[p][d] = p == 2 ? s->cp + 1 : d == 0 ? 1 : s->cp - 1;
        const size_t f = (size_t)(p == 2 ? 2 : 1) * (size_t)s->kvf;
        s->msg[p][d] = real_model_per_mb(r, r->nmb * s->nmsg[p][d],
                                         f + REAL_MODEL_P2P_TRAILER_FLOATS);
      }
    }
    return s;
  }
  s->Cc = s->C / s->cp, s->Wc = s->W / s->cp;
  const size_t qf = (size_t)(s->S * s->P * s->Wc), of = (size_t)(s->S * s->P * s->Cc);
  s->q = real_model_per_mb(r, r->nmb, qf + 1);
  s->o = real_model_per_mb(r, r->nmb, of + 1);
  s->dO = real_model_per_mb(r, r->nmb, of + 1);
  s->dq = real_model_per_mb(r, r->nmb, qf + 1);
  s->sbuf = real_model_dev(r, sizeof(float) * (qf + 1));
  s->rbuf = real_model_dev(r, sizeof(float) * (qf + 1));
  s->n_qkv = g_new(double, s->cp);
  s->n_out = g_new(double, s->cp);
  for (int j = 0; j < s->cp; j++) {
    s->n_qkv[j] = sizeof(float) * (double)(s->S * s->n * s->Wc);
    s->n_out[j] = sizeof(float) * (double)(s->S * s->n * s->Cc);
  }
  return s;
}

void real_cp_free(const real_model_rank *r, real_cp *s) {
  if (!s) return;
  real_model_per_mb_free(r, (void **)s->q, s->nmb);
  real_model_per_mb_free(r, (void **)s->o, s->nmb);
  real_model_per_mb_free(r, (void **)s->dO, s->nmb);
  real_model_per_mb_free(r, (void **)s->dq, s->nmb);
  real_model_dev_free(r, s->sbuf);
  real_model_dev_free(r, s->rbuf);
  g_free(s->n_qkv);
  g_free(s->n_out);
  real_model_dev_free(r, s->own);
  real_model_per_mb_free(r, (void **)s->lse, s->nmb);
  real_model_per_mb_free(r, (void **)s->acc, s->nmb * s->cp);
  for (int p = 0; p < CP_PASSES; p++)
    for (int d = 0; d < 2; d++)
      real_model_per_mb_free(r, (void **)s->msg[p][d], s->nmb * s->nmsg[p][d]);
  g_free(s);
}

/* ---- ring ---------------------------------------------------------------------------------- */

/* The K and V channels of the rank's QKV rows (S, n, W) <-> kn_ring's chunk rows (S, n, KW):
 * packed into kv, or (to_qkv) kv added to them. */
static void kv_channels(const real_model_rank *r, const real_cp *s, float *kv, float *qkv,
                        gboolean to_qkv) {
  const int hs = s->C / s->NH, G = s->KVH > 0 ? s->KVH : s->NH, rep = s->NH / G;
  for (int64_t t = 0; t < s->S * s->n; t++)
    for (int g = 0; g < G; g++) /* group g's K and V: those of its first query head */
      for (int which = 1; which <= 2; which++) {
        float *a = qkv + t * s->W + kn_qkv_offset(which, g * rep, s->C, s->NH, s->KVH);
        float *b = kv + t * s->KW + ((which - 1) * G + g) * hs;
        if (to_qkv) r->k->axpy(a, b, hs, 1.0f);
        else r->k->copy(b, a, sizeof(float) * (size_t)hs);
      }
}

static void pack_kv(const real_model_rank *r, const real_cp *s, float *kv, const float *qkv) {
  kv_channels(r, s, kv, (float *)qkv, FALSE);
}

/* kn_ring's shape of step j: the rank's queries against the chunk of rank cp_i − j. */
static kn_ring ring_shape(const real_cp *s, int j) {
  const int src = ((s->cp_i - j) % s->cp + s->cp) % s->cp;
  kn_ring k = {(int)s->S, (int)s->n, s->C, s->NH, s->KVH, s->cp_i, 2 * s->cp - 1 - s->cp_i,
               src, 2 * s->cp - 1 - src, j == 0};
  return k;
}

/* The K/V chunk of step j of micro-batch mb's pass: the rank's own (packed here) at step 0, else
 * what message j − 1 brought (its K and V come first). */
static const float *step_kv(real_model_rank *r, real_cp *s, int pass, int mb, int j,
                            const float *qkv) {
  if (j == 0) {
    pack_kv(r, s, s->own, qkv);
    return s->own;
  }
  return s->msg[pass][1][mb * s->nmsg[pass][1] + j - 1];
}

static void ring_forward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j) {
  real_cp *s = y->cp;
  const int mb = op->microbatch;
  const float *qkv = real_model_layer_in(r, y, 0, mb);
  const kn_ring k = ring_shape(s, j);
  r->k->attention_ring_fwd(y->out[mb], s->lse[mb], qkv,
                           step_kv(r, s, op_pass(op), mb, j, qkv), &k);
}

static void ring_backward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                          float *din) {
  real_cp *s = y->cp;
  const int mb = op->microbatch;
  const float *qkv = real_model_layer_in(r, y, 0, mb);
  const kn_ring k = ring_shape(s, j);
  float *acc = s->acc[mb * s->cp + j];
  r->k->zero(acc, sizeof(float) * (size_t)s->kvf);
  r->k->attention_ring_bwd(din, acc, real_model_din_ptr(r, y->index, mb), y->out[mb],
                           s->lse[mb], qkv, step_kv(r, s, 2, mb, j, qkv), &k);
}

float *real_cp_p2p_buf(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                       int64_t *n) {
  real_cp *s = y->cp;
  const int pass = op_pass(op), mb = op->microbatch;
  const int at = mb * s->nmsg[pass][1] + j; /* receive j's buffer */
  *n = msg_floats(s, pass, j);
  if (op->kind == PLAN_RECV) return s->msg[pass][1][at];
  if (pass < 2) { /* the forward's: the own chunk, then each as it arrived */
    if (j > 0) return s->msg[pass][1][at - 1];
    float *out = s->msg[pass][0][mb];
    pack_kv(r, s, out, real_model_layer_in(r, y, 0, mb));
    return out;
  }
  float *out = s->msg[pass][0][mb * s->nmsg[pass][0] + j];
  /* backward: K and V of the chunk held, then the gradients of the one before with this rank's
   * share (step j − 1's) added to what came with them */
  int64_t o = 0;
  if (j <= s->cp - 2) {
    if (j == 0) pack_kv(r, s, out, real_model_layer_in(r, y, 0, mb));
    else r->k->copy(out, s->msg[2][1][at - 1], sizeof(float) * (size_t)s->kvf);
    o = s->kvf;
  }
  if (j >= 1) {
    r->k->copy(out + o, s->acc[mb * s->cp + j - 1], sizeof(float) * (size_t)s->kvf);
    if (j >= 2) { /* message j − 1 carried the upstream gradients, after its K and V if any */
      const float *up = s->msg[2][1][at - 1] + (j - 1 <= s->cp - 2 ? s->kvf : 0);
      r->k->axpy(out + o, up, (long)s->kvf, 1.0f);
    }
  }
  return out;
}

void real_cp_p2p_done(real_model_rank *r, real_model_layer *y, const plan_op *op, int j) {
  real_cp *s = y->cp;
  if (op->kind != PLAN_RECV || op_pass(op) != 2 || j != s->cp) return;
  /* home: the gradients of the rank's own K and V, every rank's share, join the input's */
  float *g = s->msg[2][1][op->microbatch * s->nmsg[2][1] + j];
  kv_channels(r, s, g, real_model_din_ptr(r, y->l->inputs[0], op->microbatch), TRUE);
}

/* ---- kernels ------------------------------------------------------------------------------- */

gboolean real_cp_keeps_output(const real_model_layer *y, int j) { return y->cp->ring && j > 0; }

void real_cp_forward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j) {
  real_cp *s = y->cp;
  const int mb = op->microbatch;
  if (s->ring) {
    ring_forward(r, y, op, j);
    return;
  }
  r->k->attention_fwd(s->o[mb], y->l->flash ? NULL : y->saved[mb], r->ws, s->q[mb], (int)s->S,
                      (int)s->P, s->Cc, s->NH / s->cp, s->KVH / s->cp, r->math);
}

void real_cp_backward(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                      float *din) {
  real_cp *s = y->cp;
  const int mb = op->microbatch;
  if (s->ring) {
    ring_backward(r, y, op, j, din);
    return;
  }
  r->k->zero(s->dq[mb], sizeof(float) * (size_t)(s->S * s->P * s->Wc));
  r->k->attention_bwd(s->dq[mb], r->ws, s->dO[mb], s->q[mb], y->l->flash ? NULL : y->saved[mb],
                      (int)s->S, (int)s->P, s->Cc, s->NH / s->cp, s->KVH / s->cp, r->math);
}

/* ---- ulysses' all-to-alls ------------------------------------------------------------------ */

/* The channels of QKV row that member j's heads hold: `*nr` ranges of `*wr` floats at off[]. */
static void qkv_ranges(const real_cp *s, int j, int *nr, int *wr, int off[3]) {
  if (s->KVH > 0) { /* grouped: the groups are contiguous */
    *nr = 1, *wr = s->Wc, off[0] = j * s->Wc;
    return;
  }
  *nr = 3, *wr = s->Cc; /* packed Q|K|V */
  for (int q = 0; q < 3; q++) off[q] = q * s->C + j * s->Cc;
}

/* Member j's positions [j·n, (j + 1)·n) of the whole sequence (S, P, w) <-> member-major
 * blocks (j, s, t). */
static void seq_blocks(const real_model_rank *r, const real_cp *s, float *seq, float *blocks,
                       int w, gboolean to_seq) {
  real_model_seq_blocks(r, to_seq ? seq : blocks, to_seq ? blocks : seq, s->S, s->cp, s->n * w,
                        to_seq);
}

/* The rank's rows (S, n, row) <-> member-major blocks (j, s, t) of member j's channels: the QKV
 * ranges (qkv) or the output's [j·Cc, (j + 1)·Cc); to the rows: added. */
static void head_blocks(const real_model_rank *r, const real_cp *s, float *rows, float *blocks,
                        gboolean qkv, gboolean to_rows) {
  const int row = qkv ? s->W : s->C, bw = qkv ? s->Wc : s->Cc;
  for (int j = 0; j < s->cp; j++) {
    int nr = 1, wr = s->Cc, off[3] = {j * s->Cc, 0, 0};
    if (qkv) qkv_ranges(s, j, &nr, &wr, off);
    for (int64_t t = 0; t < s->S * s->n; t++)
      for (int q = 0; q < nr; q++) {
        float *a = rows + t * row + off[q], *b = blocks + (j * s->S * s->n + t) * bw + q * wr;
        if (to_rows) r->k->axpy(a, b, wr, 1.0f);
        else r->k->copy(b, a, sizeof(float) * (size_t)wr);
      }
  }
}

gboolean real_cp_xfer_begin(real_model_rank *r, real_model_layer *y, const plan_op *op, int j,
                            real_model_xfer *x) {
  real_cp *s = y->cp;
  if (!s || s->ring || op->purpose != PLAN_WHY_CP_ALLTOALL) return FALSE;
  const int mb = op->microbatch;
  const gboolean fwd = op_pass(op) < 2;
  x->how = REAL_MODEL_X_ALLTOALLV;
  x->send = s->sbuf;
  x->recv = s->rbuf;
  if (fwd && j == 0) { /* the rank's QKV rows, by head group */
    head_blocks(r, s, (float *)real_model_layer_in(r, y, 0, mb), s->sbuf, TRUE, FALSE);
    x->send_n = x->recv_n = s->n_qkv;
  } else if (fwd) { /* the output, by position */
    seq_blocks(r, s, s->o[mb], s->sbuf, s->Cc, FALSE);
    x->send_n = x->recv_n = s->n_out;
  } else if (j == 0) { /* the output gradient's rows, by head group */
    head_blocks(r, s, real_model_din_ptr(r, y->index, mb), s->sbuf, FALSE, FALSE);
    x->send_n = x->recv_n = s->n_out;
  } else { /* the QKV gradient, by position */
    seq_blocks(r, s, s->dq[mb], s->sbuf, s->Wc, FALSE);
    x->send_n = x->recv_n = s->n_qkv;
  }
  x->n = (size_t)s->cp;
  return TRUE;
}

void real_cp_xfer_end(real_model_rank *r, real_model_layer *y, const plan_op *op, int j) {
  real_cp *s = y->cp;
  const int mb = op->microbatch;
  const gboolean fwd = op_pass(op) < 2;
  if (fwd && j == 0) {
    seq_blocks(r, s, s->q[mb], s->rbuf, s->Wc, TRUE);
  } else if (fwd) { /* the output rows: written whole, member by member */
    float *out = y->out[mb];
    for (int m = 0; m < s->cp; m++)
      for (int64_t t = 0; t < s->S * s->n; t++)
        r->k->copy(out + t * s->C + m * s->Cc, s->rbuf + (m * s->S * s->n + t) * s->Cc,
                   sizeof(float) * (size_t)s->Cc);
  } else if (j == 0) {
    seq_blocks(r, s, s->dO[mb], s->rbuf, s->Cc, TRUE);
  } else { /* the QKV gradient joins the input's */
    head_blocks(r, s, real_model_din_ptr(r, y->l->inputs[0], mb), s->rbuf, TRUE, TRUE);
  }
}
