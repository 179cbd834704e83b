/* kernels.h — the layer-level kernels of every workload, forward and backward, on float buffers.
 *
 * Two implementations share every signature: the CPU twins (`kn_*_cpu`, kernels/cpu/, host
 * pointers) are the executable specification; the CUDA versions (`kn_*_cuda`, kernels/cuda/,
 * device pointers, asynchronous on the default stream) are compared with them by the tests.
 * A backend table (kn_backend) holds one implementation's functions, so callers (the timing
 * harness, the real executor) pick an implementation at run time without #ifdef.
 *
 * Layouts: images NCHW (N, C, H, W); sequences (N, T, C), C fastest; a linear layer reads rows of
 * `in` features, so on a sequence M = N·T rows. Every matrix is row-major.
 * Argument order (llm.c): outputs, inputs, weights, sizes. Backward functions ACCUMULATE (+=) into
 * every gradient they write — input gradients and weight gradients alike — so the caller zeroes
 * gradient buffers once per step and a tensor read by two layers gets the sum of both.
 * Buffers marked "saved" are written by forward and read by backward.
 *
 * Determinism: the CPU twins use a fixed summation order and single-threaded BLAS
 * (kn_cpu_init() calls openblas_set_num_threads(1)): the same inputs give the same bits on every
 * run. The CUDA versions use atomics in a few backward scatters (embedding, MoE) and are
 * deterministic only up to float rounding there.
 *
 * Numbers: eps 1e-5 for batch norm and layer norm; GELU is the tanh form (Hendrycks & Gimpel
 * 2016, Eq. for GELU ≈ 0.5x(1+tanh(√(2/π)(x+0.044715x³)))); LRN is Caffe's across-channel form
 * (Krizhevsky et al. 2012, §3.3) with the window centred on the channel; dropout is inverted
 * (kept values scaled by 1/(1-p)) with a counter-based mask: element i of a call with seed s is
 * kept iff kn_dropout_keep(s, i, p), so forward and backward agree without a stored mask.
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GEMM arithmetic: inputs rounded to this format, products accumulated in fp32. The CPU twins
 * compute in fp32 whatever is asked (documented difference; the timing harness records it). */
#define KN_MATHS(X) X(KN_MATH_FP32, "fp32") X(KN_MATH_TF32, "tf32") X(KN_MATH_FP16, "fp16") \
  X(KN_MATH_BF16, "bf16")
typedef enum {
#define KN_MATH_ENUM(e, s) e,
  KN_MATHS(KN_MATH_ENUM)
#undef KN_MATH_ENUM
  KN_N_MATHS
} kn_math;

const char *kn_math_name(kn_math m); /* "fp32"…; static string */
/* The arithmetic named `name` ("fp32", "tf32", "fp16", "bf16": --precision's names) into *out;
 * FALSE (and *out untouched) for another name. */
int kn_math_parse(const char *name, kn_math *out);

/* Convolution shape. Output H_out = (H + 2·pad - kh)/stride + 1 (floor), same for W. */
typedef struct {
  int N;            /* images */
  int C_in, H, W;   /* input channels and size */
  int C_out;        /* output channels */
  int kh, kw;       /* window */
  int stride, pad;  /* stride and zero padding, pixels (same in both directions) */
  int groups;       /* C_in and C_out are multiples of groups; 1 = dense */
} kn_conv;

int kn_conv_out_h(const kn_conv *s);
int kn_conv_out_w(const kn_conv *s);
/* Floats of im2col workspace the conv functions need: (C_in/groups)·kh·kw·H_out·W_out. */
size_t kn_conv_ws_floats(const kn_conv *s);

/* Pooling shape (max and average). Global pooling: kh = H, kw = W, stride 1, pad 0. Average
 * pooling divides by kh·kw (padding counted, as PyTorch's count_include_pad default). */
typedef struct {
  int N, C, H, W;   /* input */
  int kh, kw;       /* window */
  int stride, pad;  /* stride, zero padding (pixels) */
} kn_pool;

int kn_pool_out_h(const kn_pool *s);
int kn_pool_out_w(const kn_pool *s);

/* Mixture of experts (Switch/GShard feed-forward): M tokens of C features, E experts of hidden
 * width F, each token routed to its top_k experts by a softmax router. Expert capacity
 * cap = ceil(capacity_factor·top_k·M/E) tokens; assignments are taken in priority order (every
 * token's first choice in token order, then every token's second choice, …) and an assignment
 * to a full expert is dropped (that token gets nothing from that expert). A kept assignment adds
 * gate·expert(x) to the token's output, gate = the router probability (not renormalised). */
typedef struct {
  int M, C;                /* tokens, model width */
  int E, top_k;            /* experts, experts per token */
  int F;                   /* expert hidden width */
  double capacity_factor;  /* > 0 */
} kn_moe_shape;

int kn_moe_capacity(const kn_moe_shape *s); /* cap, tokens per expert */

/* MoE weights (one block of E experts). */
typedef struct {
  const float *wr;  /* (E, C) router */
  const float *br;  /* (E) router bias, or NULL */
  const float *w1;  /* (E, F, C) */
  const float *b1;  /* (E, F) */
  const float *w2;  /* (E, C, F) */
  const float *b2;  /* (E, C) */
} kn_moe_weights;

/* MoE weight gradients (accumulated). */
typedef struct {
  float *dwr;       /* (E, C) */
  float *dbr;       /* (E) or NULL when there is no router bias */
  float *dw1;       /* (E, F, C) */
  float *db1;       /* (E, F) */
  float *dw2;       /* (E, C, F) */
  float *db2;       /* (E, C) */
} kn_moe_grads;

/* What MoE forward saves for backward; the caller allocates every array (host memory for the
 * CPU twin, device memory for CUDA) with the sizes below, cap = kn_moe_capacity(). */
typedef struct {
  float *probs;     /* (M, E) router probabilities */
  int *expert;      /* (M, top_k) chosen experts, best first */
  int *slot;        /* (M, top_k) row in the expert's buffer, -1 when dropped */
  int *count;       /* (E) tokens kept per expert (≤ cap) */
  int *token;       /* (E, cap) token of each buffer row */
  float *xe;        /* (E, cap, C) permuted inputs */
  float *h;         /* (E, cap, F) expert hidden pre-activation */
  float *a;         /* (E, cap, F) GELU(h) */
  float *ye;        /* (E, cap, C) expert outputs before gating */
} kn_moe_saved;

/* Floats (float arrays) and ints (int arrays) of kn_moe_saved, and of the backward workspace. */
size_t kn_moe_saved_floats(const kn_moe_shape *s);
size_t kn_moe_saved_ints(const kn_moe_shape *s);
size_t kn_moe_ws_floats(const kn_moe_shape *s);
/* Points the fields of `sv` into one float block and one int block of the sizes above. */
void kn_moe_saved_bind(kn_moe_saved *sv, float *fbuf, int *ibuf, const kn_moe_shape *s);

/* One block of ring attention (Liu et al. 2023) on T local positions in two halves of T/2:
 * local position t is position (t < T/2 ? q0 : q1)·T/2 + t mod T/2 of the sequence for the
 * queries, (t < T/2 ? k0 : k1)·T/2 + t mod T/2 for the keys (Megatron-Core's two mirrored chunks
 * per rank); a query sees the keys at its position and before. `first`: the block starts the
 * running output and log-sum-exp instead of merging into them. */
typedef struct {
  int N, T, C, NH, KVH; /* samples, local positions, width NH·hs, heads, key/value heads (0: MHA) */
  int q0, q1, k0, k1;   /* the chunks of the queries' and the keys' halves */
  int first;
} kn_ring;

/* The K/V chunk rows of ring attention: the K of the G groups (G = KVH, or NH without grouping),
 * then their V, hs each. */
static inline int kn_ring_kv_width(int C, int NH, int KVH) {
  return 2 * (KVH > 0 ? KVH : NH) * (C / NH);
}

/* Attention workspaces in floats: forward needs 3·N·T·C (q, k, v head-major); backward
 * 7·N·T·C + N·NH·T·T; flash-style (flash = 1: the probabilities not kept) N·NH·T·T more
 * each. */
size_t kn_attention_ws_floats(int N, int T, int C, int NH, int bwd, int flash);

/* The fused QKV of attention with C = NH·hs output channels: KVH = 0 packs Q|K|V (3·C); KVH > 0
 * groups them by key/value head (grouped-query attention, Megatron-Core's layout): for each
 * group g the NH/KVH query heads of g, then K_g, then V_g, hs each. kn_qkv_width is a row's
 * channels; kn_qkv_offset the first channel of query head h's Q (which 0), K (1) or V (2). */
#ifdef __CUDACC__
#define KN_HOST_DEVICE __host__ __device__
#else
#define KN_HOST_DEVICE
#endif
static inline KN_HOST_DEVICE int kn_qkv_width(int C, int NH, int KVH) {
  return KVH > 0 ? (NH + 2 * KVH) * (C / NH) : 3 * C;
}
/* In the grouped layout, the head of its group that channel `c` of a row belongs to: 0 to
 * NH/KVH − 1 a query head, NH/KVH the group's K, NH/KVH + 1 its V. */
static inline KN_HOST_DEVICE int kn_qkv_slot(int c, int hs, int NH, int KVH) {
  return c / hs % (NH / KVH + 2);
}
static inline KN_HOST_DEVICE int kn_qkv_offset(int which, int h, int C, int NH, int KVH) {
  const int hs = C / NH;
  if (KVH <= 0) return which * C + h * hs;
  const int r = NH / KVH, g = h / r;
  return g * (r + 2) * hs + (which == 0 ? (h % r) : r + which - 1) * hs;
}

/* Dropout mask: TRUE (1) when element i survives. Counter-based (SplitMix64 finaliser of
 * seed·φ + i, Steele et al. 2014), identical on CPU and GPU. */
int kn_dropout_keep(uint64_t seed, uint64_t i, float p);

/* ---- the functions; each exists as kn_<name>_cpu and kn_<name>_cuda --------------------- */
/* X(name, return type, parameter list, argument list). Shapes in the comments; sizes last. */
#define KN_FUNCS(X)                                                                              \
  /* C (M,N) = alpha·op(A)·op(B) + beta·C; op(A) (M,K), op(B) (K,N); ta/tb: 1 = transposed */    \
  X(gemm, void, (int ta, int tb, int M, int N, int K, float alpha, const float *A,               \
                 const float *B, float beta, float *C, kn_math math),                            \
    (ta, tb, M, N, K, alpha, A, B, beta, C, math))                                               \
  /* batch GEMMs; operand i starts at A + i·sA (floats), same for B and C */                     \
  X(gemm_batched, void, (int ta, int tb, int M, int N, int K, float alpha, const float *A,       \
                         long sA, const float *B, long sB, float beta, float *C, long sC,        \
                         int batch, kn_math math),                                               \
    (ta, tb, M, N, K, alpha, A, sA, B, sB, beta, C, sC, batch, math))                            \
  /* out (N,C_out,Ho,Wo); ws kn_conv_ws_floats(); in (N,C_in,H,W); w (C_out,C_in/g,kh,kw);       \
   * b (C_out) or NULL */                                                                        \
  X(conv2d_fwd, void, (float *out, float *ws, const float *in, const float *w, const float *b,   \
                       const kn_conv *s, kn_math math),                                          \
    (out, ws, in, w, b, s, math))                                                                \
  /* din (N,C_in,H,W) or NULL (first layer); dw like w; db (C_out) or NULL; dout like out */     \
  X(conv2d_bwd, void, (float *din, float *dw, float *db, float *ws, const float *dout,           \
                       const float *in, const float *w, const kn_conv *s, kn_math math),         \
    (din, dw, db, ws, dout, in, w, s, math))                                                     \
  /* out (M,OC); in (M,IC); w (OC,IC); b (OC) or NULL */                                         \
  X(linear_fwd, void, (float *out, const float *in, const float *w, const float *b, int M,       \
                       int IC, int OC, kn_math math),                                            \
    (out, in, w, b, M, IC, OC, math))                                                            \
  /* din (M,IC) or NULL; dw (OC,IC); db (OC) or NULL; dout (M,OC) */                             \
  X(linear_bwd, void, (float *din, float *dw, float *db, const float *dout, const float *in,     \
                       const float *w, int M, int IC, int OC, kn_math math),                     \
    (din, dw, db, dout, in, w, M, IC, OC, math))                                                 \
  /* training mode: batch statistics over (N, HW). out, in (N,C,HW); mean, rstd (C) saved;       \
   * gamma, beta (C). Running statistics are the caller's: mean and rstd are returned. */        \
  X(batchnorm_fwd, void, (float *out, float *mean, float *rstd, const float *in,                 \
                          const float *gamma, const float *beta, int N, int C, int HW),          \
    (out, mean, rstd, in, gamma, beta, N, C, HW))                                                \
  X(batchnorm_bwd, void, (float *din, float *dgamma, float *dbeta, const float *dout,            \
                          const float *in, const float *mean, const float *rstd,                 \
                          const float *gamma, int N, int C, int HW),                             \
    (din, dgamma, dbeta, dout, in, mean, rstd, gamma, N, C, HW))                                 \
  /* out, in (n) */                                                                              \
  X(relu_fwd, void, (float *out, const float *in, long n),                                       \
    (out, in, n))                                                                                \
  /* din, dout, out (n): the saved forward output */                                             \
  X(relu_bwd, void, (float *din, const float *dout, const float *out, long n),                   \
    (din, dout, out, n))                                                                         \
  X(gelu_fwd, void, (float *out, const float *in, long n),                                       \
    (out, in, n))                                                                                \
  /* din, dout, in (n): the saved forward input */                                               \
  X(gelu_bwd, void, (float *din, const float *dout, const float *in, long n),                    \
    (din, dout, in, n))                                                                          \
  /* out (N,C,Ho,Wo); argmax (N,C,Ho,Wo) saved: flat index into in's (H,W) plane, -1 if the      \
   * window is all padding; in (N,C,H,W) */                                                      \
  X(maxpool_fwd, void, (float *out, int *argmax, const float *in, const kn_pool *s),             \
    (out, argmax, in, s))                                                                        \
  X(maxpool_bwd, void, (float *din, const float *dout, const int *argmax, const kn_pool *s),     \
    (din, dout, argmax, s))                                                                      \
  X(avgpool_fwd, void, (float *out, const float *in, const kn_pool *s),                          \
    (out, in, s))                                                                                \
  X(avgpool_bwd, void, (float *din, const float *dout, const kn_pool *s),                        \
    (din, dout, s))                                                                              \
  /* out = a + b, all (n) */                                                                     \
  X(add_fwd, void, (float *out, const float *a, const float *b, long n),                         \
    (out, a, b, n))                                                                              \
  /* da, db (n) accumulate dout (n) */                                                           \
  X(add_bwd, void, (float *da, float *db, const float *dout, long n),                            \
    (da, db, dout, n))                                                                           \
  /* x (n) *= a */                                                                               \
  X(scale, void, (float *x, long n, float a),                                                    \
    (x, n, a))                                                                                   \
  /* y (n) += a·x (n) */                                                                         \
  X(axpy, void, (float *y, const float *x, long n, float a),                                     \
    (y, x, n, a))                                                                                \
  /* out (N,T,C) = wte[id] (+ wpe[t]); id = tokens[n·T+t], or t when tokens is NULL (a learned   \
   * position table used alone); tokens (N,T) in [0,V); wte (V,C); wpe (T,C) or NULL */          \
  X(embedding_fwd, void, (float *out, const int *tokens, const float *wte, const float *wpe,     \
                          int N, int T, int C),                                                  \
    (out, tokens, wte, wpe, N, T, C))                                                            \
  /* dwte (V,C), dwpe (T,C) or NULL: scatter-add of dout (N,T,C) */                              \
  X(embedding_bwd, void, (float *dwte, float *dwpe, const float *dout, const int *tokens,        \
                          int N, int T, int C),                                                  \
    (dwte, dwpe, dout, tokens, N, T, C))                                                         \
  /* out, in (M,C); mean, rstd (M) saved; gamma, beta (C) */                                     \
  X(layernorm_fwd, void, (float *out, float *mean, float *rstd, const float *in,                 \
                          const float *gamma, const float *beta, int M, int C),                  \
    (out, mean, rstd, in, gamma, beta, M, C))                                                    \
  X(layernorm_bwd, void, (float *din, float *dgamma, float *dbeta, const float *dout,            \
                          const float *in, const float *gamma, const float *mean,                \
                          const float *rstd, int M, int C),                                      \
    (din, dgamma, dbeta, dout, in, gamma, mean, rstd, M, C))                                     \
  /* causal attention core, NH query heads over KVH key/value heads (0: multi-head, packed):     \
   * out (N,T,C); att (N,NH,T,T) saved probabilities, or NULL (flash-style); ws                 \
   * kn_attention_ws_floats(.., 0, att == NULL); qkv (N,T,kn_qkv_width) */                      \
  X(attention_fwd, void, (float *out, float *att, float *ws, const float *qkv, int N, int T,     \
                          int C, int NH, int KVH, kn_math math),                                 \
    (out, att, ws, qkv, N, T, C, NH, KVH, math))                                                 \
  /* dqkv (N,T,kn_qkv_width) added to; ws kn_attention_ws_floats(.., 1, att == NULL); dout       \
   * (N,T,C); att the saved probabilities, or NULL to compute them again */                      \
  X(attention_bwd, void, (float *dqkv, float *ws, const float *dout, const float *qkv,           \
                          const float *att, int N, int T, int C, int NH, int KVH, kn_math math), \
    (dqkv, ws, dout, qkv, att, N, T, C, NH, KVH, math))                                          \
  /* ring attention block (kn_ring): the queries of qkv (N,T,kn_qkv_width) against the chunk kv  \
   * (N,T,kn_ring_kv_width); its output and log-sum-exp merged into the running out (N,T,C) and  \
   * lse (N,NH,T) (rows that see no key of the chunk unchanged; with first, out 0, lse −inf) */  \
  X(attention_ring_fwd, void, (float *out, float *lse, const float *qkv, const float *kv,        \
                               const kn_ring *s),                                                \
    (out, lse, qkv, kv, s))                                                                      \
  /* its backward, from the whole attention's out and lse and dout (N,T,C): the Q gradient       \
   * added to dqkv's Q channels (N,T,kn_qkv_width), the chunk's K and V gradients to dkv */      \
  X(attention_ring_bwd, void, (float *dqkv, float *dkv, const float *dout, const float *out,     \
                               const float *lse, const float *qkv, const float *kv,              \
                               const kn_ring *s),                                                \
    (dqkv, dkv, dout, out, lse, qkv, kv, s))                                                     \
  /* RMSNorm (Zhang & Sennrich 2019): out = x·rstd·gamma, rstd = 1/√(mean x² + eps) per row.     \
   * out, in (M,C); rstd (M) saved; gamma (C) */                                                 \
  X(rmsnorm_fwd, void, (float *out, float *rstd, const float *in, const float *gamma, int M,     \
                        int C, float eps),                                                       \
    (out, rstd, in, gamma, M, C, eps))                                                           \
  /* din (M,C) added to, or NULL; dgamma (C) added to */                                         \
  X(rmsnorm_bwd, void, (float *din, float *dgamma, const float *dout, const float *in,           \
                        const float *gamma, const float *rstd, int M, int C),                    \
    (din, dgamma, dout, in, gamma, rstd, M, C))                                                  \
  /* SwiGLU: out (n) = silu(in[2j])·in[2j+1]; in (2n), gate and up interleaved */                \
  X(swiglu_fwd, void, (float *out, const float *in, long n), (out, in, n))                       \
  /* din (2n) added to; dout (n); in (2n) the saved input */                                     \
  X(swiglu_bwd, void, (float *din, const float *dout, const float *in, long n),                  \
    (din, dout, in, n))                                                                          \
  /* rotary embedding of the Q and K heads of a grouped QKV (N,T,kn_qkv_width(NH·hs, NH, KVH)):  \
   * pairs (i, i + hs/2) of a head at position pos0 + t turned by (pos0 + t)·theta^(−2i/hs); V   \
   * copied. out, in alike */                                                                    \
  X(rope_fwd, void, (float *out, const float *in, int N, int T, int hs, int NH, int KVH,         \
                     float theta, int pos0),                                                     \
    (out, in, N, T, hs, NH, KVH, theta, pos0))                                                   \
  /* din added to: dout turned back */                                                           \
  X(rope_bwd, void, (float *din, const float *dout, int N, int T, int hs, int NH, int KVH,       \
                     float theta, int pos0),                                                     \
    (din, dout, N, T, hs, NH, KVH, theta, pos0))                                                 \
  /* returns the mean loss over the M rows; probs (M,V) saved; logits (M,V); targets (M) */      \
  X(softmax_ce_fwd, float, (float *probs, const float *logits, const int *targets, int M,        \
                            int V),                                                              \
    (probs, logits, targets, M, V))                                                              \
  /* dlogits (M,V) += (probs - onehot)/M */                                                      \
  X(softmax_ce_bwd, void, (float *dlogits, const float *probs, const int *targets, int M,        \
                           int V),                                                               \
    (dlogits, probs, targets, M, V))                                                             \
  /* Megatron's vocabulary-parallel embedding and cross-entropy on this rank's slice [lo, lo + n) \
   * of the vocabulary (the group's all-reduces join the slices). out (M,C) = w[tokens[m] - lo]  \
   * where the token is in the slice, else 0; w (n,C) */                                         \
  X(embedding_slice_fwd, void, (float *out, const int *tokens, const float *w, int M, int C,     \
                                int lo, int n),                                                  \
    (out, tokens, w, M, C, lo, n))                                                               \
  /* dw (n,C) += the rows of dout (M,C) whose token is in the slice */                           \
  X(embedding_slice_bwd, void, (float *dw, const float *dout, const int *tokens, int M, int C,   \
                                int lo, int n),                                                  \
    (dw, dout, tokens, M, C, lo, n))                                                             \
  /* mx (M) = the largest value of each row of z (M,V) */                                        \
  X(row_max, void, (float *mx, const float *z, int M, int V), (mx, z, M, V))                     \
  /* logits z (M,V) of words [lo, lo + V); mx (M) the group's row maxima: sum (M) = Σ_j exp(z −  \
   * mx), zt (M) = z at the target's column (0 where the target is another rank's word) */       \
  X(softmax_ce_slice_fwd, void, (float *sum, float *zt, const float *z, const float *mx,         \
                                 const int *targets, int M, int V, int lo),                      \
    (sum, zt, z, mx, targets, M, V, lo))                                                         \
  /* with the group's mx, sum and zt: din (M,V) += (exp(z − mx)/sum − onehot)/M; returns the     \
   * mean over the M rows of −(zt − mx − log sum) */                                             \
  X(softmax_ce_slice_bwd, float, (float *din, const float *z, const float *mx, const float *sum, \
                                  const float *zt, const int *targets, int M, int V, int lo),    \
    (din, z, mx, sum, zt, targets, M, V, lo))                                                    \
  /* Caffe across-channel LRN: scale = k + alpha/size·Σ_window x²; out = x·scale^-beta.          \
   * out, in (N,C,HW); scale (N,C,HW) saved */                                                   \
  X(lrn_fwd, void, (float *out, float *scale, const float *in, int N, int C, int HW, int size,   \
                    float alpha, float beta, float k),                                           \
    (out, scale, in, N, C, HW, size, alpha, beta, k))                                            \
  X(lrn_bwd, void, (float *din, const float *dout, const float *in, const float *out,            \
                    const float *scale, int N, int C, int HW, int size, float alpha,             \
                    float beta, float k),                                                        \
    (din, dout, in, out, scale, N, C, HW, size, alpha, beta, k))                                 \
  /* out, in (n); drop probability p in [0,1) */                                                 \
  X(dropout_fwd, void, (float *out, const float *in, long n, float p, uint64_t seed),            \
    (out, in, n, p, seed))                                                                       \
  X(dropout_bwd, void, (float *din, const float *dout, long n, float p, uint64_t seed),          \
    (din, dout, n, p, seed))                                                                     \
  /* out, in (M,C); saved per kn_moe_saved */                                                    \
  X(moe_fwd, void, (float *out, const kn_moe_saved *sv, const float *in,                         \
                    const kn_moe_weights *w, const kn_moe_shape *s, kn_math math),               \
    (out, sv, in, w, s, math))                                                                   \
  /* din (M,C); ws kn_moe_ws_floats() */                                                         \
  X(moe_bwd, void, (float *din, const kn_moe_grads *g, float *ws, const float *dout,             \
                    const float *in, const kn_moe_saved *sv, const kn_moe_weights *w,            \
                    const kn_moe_shape *s, kn_math math),                                        \
    (din, g, ws, dout, in, sv, w, s, math))                                                      \
  /* PyTorch SGD: g' = g + wd·w; mom = mu·mom + g'; w -= lr·mom. w, mom, g (n) */                \
  X(sgd_momentum_step, void, (float *w, float *mom, const float *g, long n, float lr, float mu,  \
                              float wd),                                                         \
    (w, mom, g, n, lr, mu, wd))                                                                  \
  /* AdamW (Loshchilov & Hutter 2019, Alg. 2) with bias correction at step t ≥ 1. w, m, v, g (n) */ \
  X(adam_step, void, (float *w, float *m, float *v, const float *g, long n, float lr,            \
                     float beta1, float beta2, float eps, float wd, int t),                      \
    (w, m, v, g, n, lr, beta1, beta2, eps, wd, t))                                               \

#define KN_DECL_CPU(name, ret, params, args) ret kn_##name##_cpu params;
#define KN_DECL_CUDA(name, ret, params, args) ret kn_##name##_cuda params;
KN_FUNCS(KN_DECL_CPU)
KN_FUNCS(KN_DECL_CUDA)
#undef KN_DECL_CPU
#undef KN_DECL_CUDA

/* One implementation: its functions plus memory management for its buffers. */
typedef struct {
  const char *name;                          /* "cpu" or "cuda" */
  void *(*alloc)(size_t bytes);              /* zeroed memory of this device; NULL on failure */
  void (*release)(void *p);                  /* frees alloc's memory; NULL ignored */
  void (*upload)(void *dst, const void *src, size_t bytes);   /* host -> device */
  void (*download)(void *dst, const void *src, size_t bytes); /* device -> host */
  /* On this device, queued behind the kernels before them (a download, sync or fill_* waits for
   * them): zeroes `bytes`; copies `bytes` from `src` to `dst` (both this device's memory). */
  void (*zero)(void *p, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes);
  void (*sync)(void);                        /* waits for queued work; ends the program with
                                                one line when a kernel failed */
  void (*bind)(void);                        /* makes the calling thread use this backend's
                                                device (CUDA's current device is per thread) */
  /* Fills n floats with `value`, or with pseudo-random values in [-1, 1) from `seed` when it is
   * NaN (fill_ints: n ints in [0, mod), 0 when mod <= 0), on the device, for the timing harness;
   * NULL where the harness fills on the host (the CPU, which keeps its own sequence). The random
   * values are not the CPU's. */
  void (*fill_floats)(float *p, size_t n, float value, uint64_t seed);
  void (*fill_ints)(int *p, size_t n, long mod, uint64_t seed);
#define KN_FIELD(name, ret, params, args) ret(*name) params;
  KN_FUNCS(KN_FIELD)
#undef KN_FIELD
} kn_backend;

/* Single-threaded, deterministic CPU twins. Call kn_cpu_init() once before use (sets OpenBLAS to
 * one thread); harmless to call again. */
extern const kn_backend kn_cpu;
void kn_cpu_init(void);

/* The CPU twins behind a device boundary (kernels/cpu/guard.c): its memory is unreadable from
 * the host except through the backend's own functions, so code written for a device backend is
 * checked on a machine without one (a forgotten host access crashes). Same results as kn_cpu;
 * one call at a time; for tests. */
extern const kn_backend kn_cpu_guarded;

/* The CUDA backend when the module libdlsim-cuda.so is found (kernels/cuda_loader.c) and a
 * device is present (initialises the device and cuBLAS on first call), else NULL. `why` (may be
 * NULL) gets a static reason when NULL is returned: "built without CUDA", "no CUDA device", or
 * why the module could not be loaded. */
const kn_backend *kn_cuda(const char **why);

/* What the timing harness records about the CUDA device (provenance). */
typedef struct {
  char name[128];        /* cudaDeviceProp.name */
  int sm_count;          /* multiprocessors */
  int clock_mhz;         /* SM clock */
  int mem_clock_mhz;     /* memory clock */
  int l2_bytes;          /* L2 cache size */
  double mem_bytes;      /* cudaDeviceProp.totalGlobalMem */
  int driver_version;    /* cudaDriverGetVersion, e.g. 13000 */
  int runtime_version;   /* cudaRuntimeGetVersion */
} kn_cuda_info;

/* Fills `info` for the current device; -1 when there is no CUDA build or device. */
int kn_cuda_info_get(kn_cuda_info *info);

#ifdef __cplusplus
}
#endif
#endif
