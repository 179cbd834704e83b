/* workload.h — neural-network models as layer graphs: loading workloads/NAME.json, and the
 * per-layer quantities every strategy, planner and closed-form model needs (parameters, FLOPs,
 * activation sizes).
 *
 * A model is a list of layers in topological order: each layer reads the output of one earlier
 * layer (two for `add`), or the model input (index -1). Shapes are per sample, written as
 * (c, h, w): c channels or features over h×w positions (an image's H×W pixels, or a sequence of
 * h = seq_len tokens with w = 1). Token ids are the input shape (1, seq_len, 1).
 *
 * Channel layouts of the Llama-style layers (Megatron-Core's, so that a tensor-parallel rank
 * holds one contiguous slice of every tensor):
 *   attention with kv_heads (grouped-query, Ainslie et al. 2023) and rope read QKV grouped by
 *   key/value head: for g = 0..kv_heads-1 the heads/kv_heads query heads of group g, then K_g,
 *   then V_g, each head_dim = out.c/heads wide, so in.c = (heads + 2·kv_heads)·head_dim;
 *   attention without kv_heads reads the packed Q|K|V (3·out.c).
 *   swiglu (Shazeer 2020) reads gate and up interleaved, channel 2j the gate and 2j+1 the up
 *   projection of output j: out_j = silu(x_2j)·x_2j+1, out.c = in.c/2.
 *   rope (Su et al. 2021) rotates the Q and K heads of a grouped QKV, pairs (i, i + head_dim/2)
 *   of a head at position t by t·theta^(−2i/head_dim) (the rotate-half form of Llama's
 *   reference code), and copies V.
 *
 * FLOP conventions (per sample, FLOP; a multiply-add counts 2). The loader derives them once:
 *   conv2d     fwd 2·(C_in/groups)·kh·kw·C_out·H_out·W_out (+ C_out·H_out·W_out with bias)
 *   linear     fwd 2·in·out·positions (+ out·positions with bias); positions = h·w of the input
 *   weighted layers (conv2d, linear, moe): bwd = dX + dW, each the size of the forward GEMM, plus
 *              the bias gradient (out elements) — about 2× fwd; a layer whose input is the model
 *              input computes no dX, so its bwd is dW only (about 1× fwd).
 *   embedding  fwd 0 (a gather); bwd = out elements (scatter-add into the table).
 *   attention  the core only (no weights; its QKV and output projections are separate linear
 *              layers with tp column/row). With s = positions, h = out channels (model width):
 *              fwd = QKᵀ 2·s²·h + softmax 5·heads·s² + AV 2·s²·h;
 *              bwd = 2 GEMMs for each of QKᵀ and AV (8·s²·h) + softmax 5·heads·s²;
 *              flash-style (fused, Dao et al. 2022): bwd also recomputes QKᵀ, 10·s²·h +
 *              5·heads·s². Grouped-query attention (kv_heads < heads) reads fewer K/V channels
 *              but computes the same scores: the same counts. Dropout on the probabilities adds
 *              heads·s² each way (flash-style: inside the kernel, not counted).
 *   moe        per token (Switch/GShard feed-forward of E experts, top_k routed, two linears of
 *              width ffn with biases): fwd = router 2·h·E + top_k·(4·h·ffn); bwd = 2× fwd.
 *              SwiGLU experts (gated): 6·h·ffn + 5·ffn each; shared experts add their work for
 *              every token: fwd = 2·h·E + (top_k + shared)·expert.
 *              The capacity factor sizes the dispatch buffers (planner), not these FLOPs.
 *   per-element counts on the output (fwd / bwd): relu 1/1, gelu 8/8 (tanh form), batchnorm 5/5,
 *              layernorm 5/5, dropout 1/1, add 1/1, flatten 0/0, softmax_ce 5/2 (max, exp, sum,
 *              divide, log / p − onehot), rmsnorm 4/7 (x², Σ, ·rstd, ·γ / g·γ, Σ g·γ·x̂,
 *              x̂·c, −, ·rstd, dγ), swiglu 5/11 per output (σ, ·a, ·b / σ, silu, silu′,
 *              two products each for da and db), rope 3/3 per rotated element (two
 *              products and a sum per coordinate of a pair; V is copied), lrn (2·size+3)/(2·size+3) with size = local window
 *              (default 5), maxpool kh·kw per output / 1 per input, avgpool kh·kw per output /
 *              1 per input.
 * Parameters: conv C_out·(C_in/groups)·kh·kw (+ C_out); linear in·out (+ out), 0 when tied;
 * batchnorm and layernorm 2·c (γ, β); rmsnorm c (γ); embedding vocab·dim;
 * moe E·(2·h·ffn + ffn + h) + h·E (+ E with a router bias); SwiGLU experts 3·h·ffn each;
 * shared experts as many more.
 * Saved elements (kept from forward for backward, per sample): conv2d, linear, gelu, batchnorm,
 * layernorm, rmsnorm, swiglu, embedding: the input; relu, dropout, maxpool, softmax_ce: the output
 * (mask, argmax or probabilities); lrn: input + output; attention: its QKV input + heads·s²
 * probabilities, or flash-style its QKV input, its output and heads·s log-sum-exps; rope:
 * nothing (its angles are recomputed); dropout: its mask (mask_bytes, one byte an element);
 * attention with dropout (not flash-style): also the dropped probabilities (heads·s²) and their
 * mask (heads·s² bytes), as Korthikanti et al. 2022 count them (5·as²b bytes in 16 bits);
 * moe: positions·(h + E + top_k·(h + 2·ffn)) (input, router probabilities, each routed copy and
 * its hidden activations before and after the nonlinearity); add, avgpool, flatten: nothing.
 *
 * Errors: wl_load returns NULL and sets a one-line DL_ERR_INPUT GError naming the file and the
 * JSON path first: `workloads/x.json: layers[3].kernel: expected 1..15, got 0`.
 */
#ifndef DL_WORKLOAD_H
#define DL_WORKLOAD_H

#include <glib.h>
#include <stdint.h>
#include <stdio.h>

#define WL_LAYER_KINDS(X)                                                                       \
  X(WL_CONV2D, "conv2d") X(WL_LINEAR, "linear") X(WL_BATCHNORM, "batchnorm") X(WL_RELU, "relu") \
  X(WL_GELU, "gelu") X(WL_MAXPOOL, "maxpool") X(WL_AVGPOOL, "avgpool") X(WL_ADD, "add")         \
  X(WL_EMBEDDING, "embedding") X(WL_LAYERNORM, "layernorm") X(WL_ATTENTION, "attention")        \
  X(WL_SOFTMAX_CE, "softmax_ce") X(WL_MOE, "moe") X(WL_LRN, "lrn") X(WL_FLATTEN, "flatten")     \
  X(WL_DROPOUT, "dropout") X(WL_RMSNORM, "rmsnorm") X(WL_SWIGLU, "swiglu") X(WL_ROPE, "rope")

typedef enum {
#define WL_KIND_ENUM(id, str) id,
  WL_LAYER_KINDS(WL_KIND_ENUM)
#undef WL_KIND_ENUM
  WL_N_LAYER_KINDS
} wl_layer_kind;

/* Printable name of a layer kind, as in the JSON "type" ("conv2d"); "?" when out of range.
 * Static string. */
const char *wl_layer_kind_name(wl_layer_kind k);
/* The kernel-database key of a layer kind's pass, "<kind>.<pass>" ("attention.fwd"), into kn
 * (n bytes; cut short if it does not fit). Without printf: the planner names every kernel op. */
void wl_kernel_name(char *kn, size_t n, wl_layer_kind k, const char *pass);

/* Kind for a JSON "type" name; returns FALSE when the name is unknown. */
gboolean wl_layer_kind_from_name(const char *name, wl_layer_kind *k);

typedef enum { WL_TP_NONE, WL_TP_COLUMN, WL_TP_ROW } wl_tp_role; /* Megatron pairing of linears */
typedef enum { WL_OPT_SGD, WL_OPT_ADAM } wl_optimizer;           /* SGD = SGD with momentum */

/* Printable names: "none"/"column"/"row" and "sgd"/"adam". Static strings. */
const char *wl_tp_role_name(wl_tp_role r);
const char *wl_optimizer_name(wl_optimizer o);

typedef struct {
  int64_t c, h, w; /* per sample: c channels/features; h*w positions (image pixels H×W, or
                      sequence tokens h=seq, w=1) */
} wl_shape;

typedef struct {
  char *name;          /* unique within the model (owned) */
  wl_layer_kind kind;  /* what the layer computes */
  int n_inputs;        /* 1, or 2 for add */
  int inputs[2];       /* indices of producing layers, -1 = the model input */
  wl_shape in, out;    /* per-sample shape of (first) input and of output */
  int kh, kw;          /* conv/pool window; lrn: kh = kw = local size */
  int stride, pad;     /* conv/pool stride and zero padding (pixels) */
  int groups;          /* conv groups (1 = dense) */
  gboolean bias;       /* conv/linear have a bias; moe: the router has a bias */
  int heads;           /* attention and rope: query heads */
  int kv_heads;        /* attention and rope: key/value heads of grouped-query attention, 0 for
                          multi-head attention in the packed q|k|v layout (wl_kv_heads) */
  gboolean flash;      /* attention: fused, flash-style (probabilities recomputed, not stored) */
  double dropout_p;    /* attention: dropout on the probabilities (0: none) */
  double rope_theta;   /* rope: the base of the rotary frequencies */
  int64_t vocab;       /* embedding rows (and out features of a tied output linear) */
  int experts, top_k;  /* moe: experts E and experts per token */
  int64_t ffn;         /* moe: expert hidden width */
  gboolean gated;      /* moe: SwiGLU experts (gate, up and down, no biases; Mixtral,
                          DeepSeekMoE) instead of two linears with biases around a GELU */
  int shared;          /* moe: shared experts every token goes through (DeepSeekMoE), 0 none */
  double capacity_factor; /* moe: expert capacity = factor·top_k·tokens/E */
  wl_tp_role tp_role;  /* linear: column/row parallel partner in Megatron tp */
  int tied_to;         /* index of layer whose weights are shared, -1 none */
  int block;           /* residual block id (pipeline stages never split one), -1 none; index
                          into wl_model.block_names; layers of one block are contiguous */
  /* derived by the loader */
  int64_t params;       /* weights+biases owned by the layer (0 when tied) */
  double fwd_flops;     /* per sample, FLOP (multiply-add = 2) */
  double bwd_flops;     /* per sample, FLOP: dX (+ dW for weighted layers) */
  int64_t out_elems;    /* per sample = out.c*out.h*out.w  (Gholami's d_i) */
  int64_t saved_elems;  /* per sample: elements kept from forward for backward */
  int64_t mask_bytes;   /* per sample: dropout masks kept for backward, one byte an element
                           (PyTorch's bool masks), whatever the precision */
  gboolean weighted;    /* has trainable weights (conv, linear, bn, ln, embedding, moe) */
} wl_layer;

typedef struct {
  char *name;            /* the JSON "name" (owned) */
  char *description;     /* what it is and its source (paper, torchvision) (owned) */
  char *path;            /* the file it was loaded from (owned) */
  wl_layer *layers;      /* n_layers layers in topological order (owned) */
  int n_layers;          /* number of layers */
  wl_shape input;        /* per sample; token ids (1, seq_len, 1) for sequences */
  char *dataset;         /* dataset name (owned) */
  int64_t dataset_samples; /* samples per epoch (images, or sequences of seq_len tokens) */
  int64_t default_batch; /* global mini-batch used when none is given */
  wl_optimizer optimizer; /* decides optimizer state: SGD momentum 1 word, Adam 2 words per param */
  int64_t seq_len, vocab; /* transformers, 0 otherwise */
  int64_t params;        /* total parameters (tied weights counted once) */
  double fwd_flops, bwd_flops; /* totals per sample, FLOP */
  int64_t act_elems;     /* Σ out_elems per sample */
  int64_t saved_elems;   /* Σ saved_elems per sample */
  char **block_names;    /* n_blocks JSON block ids, in order of first appearance (owned) */
  int n_blocks;          /* number of distinct blocks */
} wl_model;

/* Loads a workload: NAME under <datadir>/workloads/NAME.json, or a file path (resolved with
 * dl_resolve("--workload", "workloads", name, ".json")). Validates the whole file and derives
 * shapes, parameters, FLOPs and activation sizes. Returns a new model (free with wl_free), or
 * NULL with a one-line DL_ERR_INPUT error that names the file and the JSON path (for malformed
 * JSON: the file, the line and the column). */
wl_model *wl_load(const char *name_or_path, GError **err);
/* The same for the `len` bytes of `text` (NUL-terminated at text[len]) read from `path` (named in
 * messages). */
wl_model *wl_load_text(const char *path, const char *text, gsize len, GError **err);

/* wl_load with the token model's sequence length set to `seq_len` (0: the file's): the input,
 * a learned position table of the old length and the dataset's sequences follow it. A model
 * without a sequence is refused (DL_ERR_INPUT naming --seq-len). */
wl_model *wl_load_seq(const char *name_or_path, int64_t seq_len, GError **err);

/* Frees a model from wl_load; NULL is ignored. */
void wl_free(wl_model *m);

/* TRUE when some linear layer is marked as a Megatron column/row partner (a transformer). */
gboolean wl_has_tp_roles(const wl_model *m);

/* TRUE for the compute-bound kinds (conv2d, linear, attention, moe): their kernels are timed by
 * FLOP, the others by bytes. */
gboolean wl_kind_gemm_like(wl_layer_kind k);

/* Key/value heads of an attention or rope layer: kv_heads, or heads in the packed layout. */
static inline int wl_kv_heads(const wl_layer *l) {
  return l->kv_heads > 0 ? l->kv_heads : l->heads;
}

/* An MoE layer's parameters: one expert holds two linears h→ffn→h with biases
 * (2·h·ffn + ffn + h), or SwiGLU's three without (3·h·ffn), the router h·E weights (+ E with a
 * bias); params = (E + shared)·expert + router. wl_moe_shared_params: the shared experts'. */
int64_t wl_moe_expert_params(const wl_layer *l);
int64_t wl_moe_router_params(const wl_layer *l);
int64_t wl_moe_shared_params(const wl_layer *l);
/* FLOPs of one expert for one token, forward (multiply-add = 2). */
double wl_moe_expert_flops(const wl_layer *l);

/* "CxHxW", newly allocated (g_free). */
char *wl_shape_str(wl_shape s);

/* Index of the layer named `name`, or -1. */
int wl_find_layer(const wl_model *m, const char *name);

/* The model as JSON: header fields, totals and, per layer, its kind, inputs (layer names or
 * "input"), shapes, hyper-parameters and derived figures. Deterministic (same model, same text;
 * the file path is left out). Newly allocated, free with g_free. */
char *wl_to_json(const wl_model *m);

/* Human-readable table to `out`: layer, kind, out shape, params, GFLOP fwd/bwd, activation
 * elements per sample, then totals (params with thousands separators). */
void wl_print(const wl_model *m, FILE *out);

#endif
