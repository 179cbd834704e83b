/* layer.h — what the files of the real executor's model share (private to sim/exec/real): the
 * state of one rank (real_model_rank) and of each of its layers (real_model_layer), the seeded
 * values and shapes, and where a layer's input, output gradient and bias live.
 *
 *   layer.c   builds and frees the state (real_model_new, real_model_free), the lookups declared
 * below model.c   the model: the iteration's data, forward and backward of every layer kind, the
 *             optimizer step (real_model_iter_begin, real_model_kernel)
 *   domain.c  domain parallelism (--domain conv): row slabs, halos, their batch norm
 *   xfer.c    the buffers the communication thread moves (real_model_act_in, ...,
 * real_model_coll_begin)
 *
 * Every kernel runs through the rank's backend table r->k (kernels/kernels.h): the CPU twins or
 * the CUDA kernels. Every tensor a kernel reads or writes is the backend's memory (real_model_dev):
 * with a device backend the host never reads it directly, but through the backend's upload,
 * download, zero, copy and the kernels themselves (Megatron's splits included). The host-side
 * rearrangements of Gholami's grid and row splits, domain and expert parallelism (domain.c, the
 * PLAN_SPLIT_ROWS and redistribution paths of model.c and xfer.c, moe.c with ep > 1) read them
 * directly and run only on a host backend (r->host; real_model_new refuses the rest).
 */
#ifndef DL_REAL_LAYER_H
#define DL_REAL_LAYER_H

#include <glib.h>
#include <stdint.h>

#include "exec/real/model.h"
#include "exec/real/moe.h"
#include "exec/real/shard.h"
#include "kernels.h"

/* What each seeded value is drawn for (the first key of real_model_hash4; see model.h). */
enum {
  REAL_MODEL_SEED_WEIGHTS = 1,
  REAL_MODEL_SEED_INPUT = 2,
  REAL_MODEL_SEED_TOKENS = 3,
  REAL_MODEL_SEED_LABELS = 4,
  REAL_MODEL_SEED_DROPOUT = 5
};

typedef struct real_cp real_cp; /* attention under context parallelism (context.h) */

typedef struct {
  const wl_layer *l;   /* the workload layer (borrowed) */
  int index;           /* its index in the model */
  float *w, *g;        /* parameters and their gradient (n_params floats); borrowed from the
                          target when the layer is tied to a layer of this stage; NULL: none */
  float *m1, *m2;      /* optimizer state: momentum, or Adam's two moments (owned) */
  int64_t n_params;    /* floats in w and g */
  gboolean own;        /* this layer's w/g/m1/m2 are its own storage (the optimizer steps it) */
  float **out;         /* [m] outputs, S·out_elems floats (+ trailer) each */
  float *dout;         /* gradient of the output, S·out_elems floats, reused by micro-batches */
  float **saved;       /* [m] floats kept for backward (norm statistics, probabilities, LRN
                          scale), NULL when the kind keeps none beyond in/out */
  int **argmax;        /* [m] maxpool argmax, S·out_elems ints; NULL otherwise */
  const real_shard_layer *s;   /* the rank's slice of the layer (real_shard.h) */
  int64_t S;           /* samples of one micro-batch (s->S) */
  float **redist;      /* [m] the tp group's all-gather of the input (s->redist), else NULL */
  float *part;         /* PLAN_SPLIT_ROWS: the output block, cmax channels per row (all-gather
                          input) */
  float *gath;         /* PLAN_SPLIT_ROWS: the all-gathered blocks, parts × part */
  float *dslice;       /* PLAN_SPLIT_ROWS: this rank's columns of the output gradient */
  float *dpart;        /* partial input gradient, summed over tp before it joins the input's */
  float *dred;         /* its all-reduced value */
  /* sequence parallelism (real_shard_layer's sp_sum, sp_gather): the whole partial output
   * (sp_sum), the whole output gradient (sp_sum), and the member-major blocks a sequence
   * all-gather or reduce-scatter moves (S·max(in, out elements) floats) */
  float *spfull, *spdy, *spbuf;
  real_moe *moe;         /* mixture of experts state (real_moe.h), NULL otherwise */
  real_cp *cp;           /* attention under --cp (context.h), NULL otherwise */
  /* sharded data parallelism (--zero, --fsdp; real_model_shard_*): the reduced gradient of this
   * rank's shard accumulated over the iteration's reduce-scatters (n_params floats, only
   * [sh_lo, sh_hi) used; NULL when the layer's gradients are all-reduced whole), and the shard:
   * the parameters the step updates, the others NaN from the step until a gather writes them */
  float *gacc;
  int64_t sh_lo, sh_hi;
  /* [m] a gradient per micro-batch (NULL: one, accumulated over them), where the plan reduces the
   * layer's gradients in more than one micro-batch: each is read by its own collective while
   * the next micro-batch's backward writes the next (as FSDP and ZeRO-2 take fresh gradient
   * tensors per backward); g points at the one of the micro-batch in backward */
  float **gmb;
  /* PLAN_SPLIT_DOMAIN (--domain conv): rows of the image */
  int ilo, ihi;        /* the input rows this rank holds (its source's slab) */
  int hrows[2][2][2];  /* halo rows [fwd: input rows / bwd: output-gradient rows][recv/send]
                          [up (tp_i − 1) / down (tp_i + 1)], as plan.c's domain_roles */
  int64_t hrow_f[2];   /* floats of one halo row of one sample: [fwd] C_in·W, [bwd] C_out·W_out
                          (twice that for max pooling: the argmax rides along) */
  float **halo[2][2][2]; /* [m] halo message buffers (+ trailer), indexed as hrows */
  float **win;         /* [m] windowed layers: the input rows the output slab's windows read,
                          explicitly padded: S × C_in × fh × (W + 2·pad) */
  int fr0, fh;         /* first padded row of win (olo·stride − pad) and its rows */
  float *dext;         /* backward: output-gradient rows [blo, bhi) (own and halo) */
  float *dinx;         /* their input gradient on the padded rows */
  float *dwx;          /* convolution: weight gradient of that pass (discarded) */
  float *bnst;         /* batch norm: Σdy and Σdy·x̂ per channel, summed over the tp group */
} real_model_layer;

struct real_model_rank {
  const wl_model *m;   /* borrowed */
  const cfg_run *c;    /* borrowed */
  const kn_backend *k; /* the kernels every op runs (borrowed) */
  gboolean host;       /* k's memory is host memory (the CPU twins): no staging */
  kn_math math;        /* the GEMMs' arithmetic (--precision on a GPU; fp32 on the CPU) */
  void *hbuf;          /* host staging of the iteration's inputs, tokens or labels (owned) */
  size_t hbuf_bytes;
  gboolean sharded;    /* real_model_sharded */
  gboolean recomputing; /* a recomputed forward is running (the loss is not counted again) */
  double dev_bytes;    /* backend memory asked for */
  gboolean dev_failed; /* an allocation failed */
  int l0, l1;          /* the stage's layers [l0, l1) */
  int nmb;             /* micro-batches m */
  int dp_i, tp_i;      /* data-parallel replica (of dp; cp ranks share one) and tp index */
  int rank;            /* this rank (halo neighbours are rank ± 1) */
  real_shard_layer *rs;        /* [n_layers] the rank's slice of every layer (owned) */
  int64_t S_in, sub_in;/* samples of the model input per micro-batch and their first (rs) */
  const real_shard_layer *rs_in; /* the slice of the layer that reads its tokens */
  real_model_layer *L;         /* l1 - l0 layers */
  float **x;           /* [m] model input (features or pixels), NULL when unused here */
  int **tok;           /* [m] token ids, NULL when unused here */
  int **lab;           /* [m] loss targets, NULL when the loss is elsewhere */
  /* the rank's model chunks (one, or V under interleaved 1F1B): chunk v holds the layers
   * [cl0[v], cl1[v]); [l0, l1) spans them all, and L has an entry for every layer of the span
   * (empty, l NULL, for the layers of other ranks' chunks in between) */
  int nch;
  int *cl0, *cl1;
  /* per chunk [nch][m]: the activation from the previous (virtual) stage (+ trailer), NULL for
   * the model's first; the gradient of it sent back (+ trailer); the gradient of the chunk's
   * output from the next stage, NULL for the model's last */
  float ***act_in, ***grad_out, ***grad_in;
  float *ws;           /* conv and attention workspace */
  float *scratch;      /* gradient sink for inputs that need none (the model input) */
  double *loss_sum;    /* [iters] Σ over micro-batches of the mean loss */
  /* context parallelism: the plan's ops and each one's step (real_cp_steps), NULL without;
   * the kernel op running on the compute thread */
  const plan_op *ops;
  int *cp_step;
  const plan_op *op;
};

/* The step of op (real_cp_steps): which of its kind it is in its layer's pass. */
static inline int real_model_cp_step(const struct real_model_rank *r, const plan_op *op) {
  return r->cp_step ? r->cp_step[op - r->ops] : 0;
}

/* Layer i (model index, l0 <= i < l1) of rank r. */
#define REAL_MODEL_LAY(r, i) (&(r)->L[(i) - (r)->l0])
/* The chunk of rank r that holds layer i, -1 when none does. */
static inline int real_model_chunk_of(const struct real_model_rank *r, int i) {
  for (int v = 0; v < r->nch; v++)
    if (i >= r->cl0[v] && i < r->cl1[v]) return v;
  return -1;
}
static inline gboolean real_model_holds(const struct real_model_rank *r, int i) {
  return real_model_chunk_of(r, i) >= 0;
}
/* Whether layer i is the last of its chunk and sends its output to the next stage. */
static inline gboolean real_model_sends(const struct real_model_rank *r, int i) {
  const int v = real_model_chunk_of(r, i);
  return v >= 0 && i == r->cl1[v] - 1 && r->cl1[v] < r->m->n_layers;
}

/* ---- seeded values ------------------------------------------------------------------------- */

static inline uint64_t real_model_mix(uint64_t z) { /* SplitMix64 (Steele, Lea & Flood 2014) */
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* The hash of four keys (the first an REAL_MODEL_SEED_*). */
static inline uint64_t real_model_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return real_model_mix(real_model_mix(real_model_mix(real_model_mix(a) ^ b) ^ c) ^ d);
}

/* A hash as a double uniform in [0, 1). */
static inline double real_model_unit(uint64_t h) {
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- shapes -------------------------------------------------------------------------------- */

static inline int64_t real_model_positions(const wl_shape *s) { return s->h * s->w; }
static inline int64_t real_model_shape_elems(const wl_shape *s) { return s->c * s->h * s->w; }

/* An embedding of the positions (the table is indexed by the position, not the token). */
static inline gboolean real_model_position_table(const wl_model *m, const wl_layer *l) {
  return l->vocab != m->vocab && l->vocab == real_model_positions(&l->in);
}

/* The kernel shape of convolution `l` on S samples. */
static inline kn_conv real_model_conv_shape(const wl_layer *l, int64_t S) {
  kn_conv s = {(int)S, (int)l->in.c, (int)l->in.h, (int)l->in.w, (int)l->out.c, l->kh, l->kw,
               l->stride, l->pad, l->groups};
  return s;
}

/* The heads and the width (floats per position: q, k or v of them) of an attention layer on
 * this rank: a slice of them under Megatron's PLAN_SPLIT_LOCAL. */
static inline int real_model_attn_heads(const real_model_layer *y) {
  return y->s->kind == PLAN_SPLIT_LOCAL ? y->l->heads / y->s->parts : y->l->heads;
}
static inline int real_model_attn_kv(const real_model_layer *y) {
  return y->s->kind == PLAN_SPLIT_LOCAL ? y->l->kv_heads / y->s->parts : y->l->kv_heads;
}
static inline int real_model_attn_width(const real_model_layer *y) {
  return (int)(y->s->kind == PLAN_SPLIT_LOCAL ? y->s->cn : y->l->out.c);
}

/* ---- layer.c: buffers ---------------------------------------------------------------------- */

/* A zeroed buffer of `bytes` in the rank's backend memory (freed by real_model_dev_free); NULL
 * and r->dev_failed set when the backend has no room. */
void *real_model_dev(real_model_rank *r, size_t bytes);
void real_model_dev_free(const real_model_rank *r, void *p);

/* nmb zeroed backend buffers of `floats` floats each (free with real_model_per_mb_free). */
float **real_model_per_mb(real_model_rank *r, int nmb, size_t floats);
void real_model_per_mb_free(const real_model_rank *r, void **v, int nmb);

/* The output of layer `src` for micro-batch mb: the model input's features when src is -1 (NULL
 * when the input is tokens or not read here), the previous stage's activation when src is
 * before the stage. */
const float *real_model_in_ptr(real_model_rank *r, int src, int mb);

/* Input k of layer y: the tp group's all-gather of it for the first layer of an fc-only grid. */
const float *real_model_layer_in(real_model_rank *r, const real_model_layer *y, int k, int mb);

/* Where the gradient of layer `src`'s output accumulates (the scratch sink for the model input). */
float *real_model_din_ptr(real_model_rank *r, int src, int mb);

/* PLAN_SPLIT_ROWS geometry: `rows` blocks of `u` floats per channel (conv: images × H·W; linear:
 * rows × 1), `d` channels in all. */
void real_model_rows_geom(const real_model_layer *y, int64_t *rows, int64_t *u);

/* Layouts of sequences cut in `parts` chunks of `chunk` floats, S samples: whole (sample-major:
 * the positions in order) or member-major (member j's chunks of every sample, as an all-gather
 * delivers and a reduce-scatter or an all-to-all takes them); copies `src` in one into `dst` in
 * the other (xfer.c; sequence parallelism, Ulysses). */
void real_model_seq_blocks(const real_model_rank *r, float *dst, const float *src, int64_t S,
                           int parts, int64_t chunk, gboolean to_whole);

/* The bias of a layer that owns its parameters within `base` (its w or g), NULL when it has
 * none. */
float *real_model_bias_of(const real_model_layer *y, float *base);

/* ---- domain.c: domain parallelism (PLAN_SPLIT_DOMAIN) --------------------------------------- */

/* Allocates layer y's PLAN_SPLIT_DOMAIN buffers on the rank with tp index tp_i: the halo rows of a
 * windowed layer (plan.c's domain_roles), its padded window, and the backward's staging. */
void real_model_domain_alloc(real_model_rank *r, real_model_layer *y, int tp_i);

/* TRUE when domain.c computes layer y: convolution, pooling or batch norm on a row slab (the
 * other kinds of the domain part run their kernels on the slab as it is). */
gboolean real_model_domain_layer(const real_model_layer *y);

/* Forward and backward of such a layer for micro-batch mb; `din` the gradient of its input
 * slab (NULL: the model input, which needs none). Batch norm computes local sums only: the tp
 * group's all-reduce and real_model_domain_bn_done finish it. */
void real_model_domain_forward(real_model_rank *r, real_model_layer *y, int mb);
void real_model_domain_backward(real_model_rank *r, real_model_layer *y, int mb, float *din);

/* Batch norm after its statistics' all-reduce (PLAN_WHY_BN_STATS): forward normalises with the
 * group's mean and variance, backward adds the input gradient ΔX. */
void real_model_domain_bn_done(real_model_rank *r, real_model_layer *y, gboolean fwd, int mb);

/* Adds rows [ilo, ihi) of a whole-image gradient (S × C × H × W) into this rank's slab. */
void real_model_domain_take_rows(const real_model_layer *y, float *slab, const float *full, int ilo,
                                 int ihi);

/* The first layer after the domain part (s->redist_rows): packs the input slab into y->part,
 * cmax rows per channel, and returns the floats each member sends; real_model_domain_unpack_slabs
 * puts the all-gathered slabs (y->gath) together as the whole input (S, C, H, W) in y->redist. */
int64_t real_model_domain_pack_slabs(real_model_rank *r, real_model_layer *y, int mb);
void real_model_domain_unpack_slabs(real_model_rank *r, real_model_layer *y, int mb);

#endif
