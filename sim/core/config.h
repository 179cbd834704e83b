/* config.h — the configuration of one `dlsim run`: what the user asked for, before and after
 * validation against the workload and the platform.
 *
 * Invariants after cfg_resolve() succeeds: gpus = dp·tp·pp; with a grid, tp = Pr and dp = Pc;
 * ep divides dp·tp; batch is a multiple of dp (and of dp·microbatches with a pipeline); every
 * name refers to something that exists. Degrees the user left out are 1, and dp takes what is
 * left of --gpus.
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <glib.h>
#include <stdint.h>

#include "core/gpuspec.h"

#define CFG_MODES(X) \
  X(CFG_MODE_SIM, "sim") X(CFG_MODE_REAL, "real") X(CFG_MODE_ANALYTIC, "analytic")
typedef enum {
#define X(e, s) e,
  CFG_MODES(X)
#undef X
} cfg_mode;

/* Where --mode real runs its kernels: the CPU twins, or the CUDA kernels on this machine's GPU. */
#define CFG_DEVICES(X) X(CFG_DEVICE_CPU, "cpu") X(CFG_DEVICE_CUDA, "cuda")
typedef enum {
#define X(e, s) e,
  CFG_DEVICES(X)
#undef X
} cfg_device;

/* interleaved: Megatron's interleaved 1F1B, V model chunks per pipeline rank (Narayanan et al.
 * 2021, Section 2.2). */
#define CFG_SCHEDULES(X) X(CFG_SCHED_GPIPE, "gpipe") X(CFG_SCHED_1F1B, "1f1b") \
  X(CFG_SCHED_INTERLEAVED, "interleaved")
typedef enum {
#define X(e, s) e,
  CFG_SCHEDULES(X)
#undef X
} cfg_schedule;

/* auto: megatron for models whose linear layers are marked column/row (transformers), gholami
 * otherwise; cfg_resolve_for_model() settles it. */
#define CFG_TP_STYLES(X) X(CFG_TP_GHOLAMI, "gholami") X(CFG_TP_MEGATRON, "megatron") \
  X(CFG_TP_AUTO, "auto")
typedef enum {
#define X(e, s) e,
  CFG_TP_STYLES(X)
#undef X
} cfg_tp_style;

/* Sharded data parallelism (plan/fsdp.c): none; PyTorch FSDP's FULL_SHARD (parameters, gradients
 * and optimizer state sharded over dp, parameters gathered before each unit's forward and again
 * before its backward), SHARD_GRAD_OP (gathered once per micro-batch, kept through backward) and
 * HYBRID_SHARD (FULL_SHARD inside a shard group, gradients all-reduced across its replicas). */
#define CFG_FSDPS(X) X(CFG_FSDP_NONE, "none") X(CFG_FSDP_FULL, "full") \
  X(CFG_FSDP_GRAD_OP, "grad-op") X(CFG_FSDP_HYBRID, "hybrid")
typedef enum {
#define X(e, s) e,
  CFG_FSDPS(X)
#undef X
} cfg_fsdp;

/* Context parallelism's attention (--cp-style): ring attention (K/V chunks passed around the cp
 * ring, overlapped with the attention of the chunk held; Megatron-Core's default) and
 * DeepSpeed-Ulysses (heads re-sharded by all-to-alls before and after attention). */
#define CFG_CP_STYLES(X) X(CFG_CP_RING, "ring") X(CFG_CP_ULYSSES, "ulysses")
typedef enum {
#define X(e, s) e,
  CFG_CP_STYLES(X)
#undef X
} cfg_cp_style;

#define CFG_GRAD_REDUCE_DEFAULT (-1)

/* Limits checked at the door, so that no product of counts overflows: 2^20 GPUs, 2^40 samples
 * per batch, 2^16 micro-batches and iterations. */
#define CFG_MAX_GPUS (1 << 20)
#define CFG_MAX_BATCH (INT64_C(1) << 40)
#define CFG_MAX_STEPS (1 << 16)
/* --samples: at most this many draws of kernel times */
#define CFG_MAX_SAMPLES 10000

/* NCCL's protocols, which --nccl-proto pins (coll/nccl.h models them): LL (8-byte lines, 4 bytes
 * of data and a flag), LL128 (128-byte lines, 120 of data), Simple (large chunks). */
typedef enum { NCCL_LL, NCCL_LL128, NCCL_SIMPLE, NCCL_N_PROTOS } nccl_proto;
#define NCCL_PROTO_AUTO (-1) /* the protocol NCCL's model predicts fastest */
#define NCCL_PROTO_OFF (-2)  /* no NCCL model: alpha-beta on the platform's figures */
/* "LL", "LL128", "Simple"; "off" for NCCL_PROTO_OFF, "auto" for NCCL_PROTO_AUTO. */
const char *nccl_proto_name(int proto);
/* Parses a --nccl-proto value (case-insensitive: auto, LL, LL128, Simple, off); FALSE if none. */
gboolean nccl_proto_parse(const char *text, int *out);
/* The same for the option itself: DL_ERR_INPUT naming --nccl-proto and what it takes. */
gboolean cfg_nccl_proto_option(const char *text, int *out, GError **err);
/* --nccl-proto's help text (run, sweep and coll). */
#define CFG_NCCL_PROTO_HELP                                                                      \
  "NCCL's protocol model for ring and tree collectives: auto (default: per call, the protocol "  \
  "NCCL's tuning model predicts fastest), LL, LL128, Simple, or off (alpha-beta on the "         \
  "platform's figures); platforms/README.md"

typedef struct {
  char *platform;      /* name under platforms/ or an XML file (default "thetagpu") */
  char *workload;      /* name under workloads/ or a JSON file (default "resnet18-cifar100") */
  int gpus;            /* P: MPI ranks, one per GPU (default 8) */
  long batch;          /* B: global mini-batch in samples; 0 = the workload's default */
  int dp, tp, pp, ep;  /* parallel degrees; 0 = not given (resolved to 1, dp takes the rest) */
  int cp;              /* context-parallel degree (--cp): the sequence split over cp ranks; 0 =
                          not given (1). Ranks: gpus = dp·cp·tp·pp, tp innermost, then cp */
  cfg_cp_style cp_style; /* --cp-style */
  int64_t seq_len;     /* --seq-len: the token model's sequence length instead of the
                          workload's; 0 = the workload's */
  int grid_pr, grid_pc;/* Gholami grid Pr×Pc; 0×0 = none */
  gboolean grid_auto;  /* --grid auto: search every factorisation of P */
  gboolean grid_fc_only; /* --grid-layers fc: conv layers batch-parallel over all P */
  gboolean domain_conv;  /* --domain conv */
  cfg_tp_style tp_style;
  cfg_schedule schedule;
  int microbatches;    /* m; 0 = not given (1, or pp for a pipeline) */
  int virtual_stages;  /* V: model chunks per pipeline rank (--virtual-stages, with --schedule
                          interleaved); 0 = not given (1) */
  int *pp_balance;     /* --pp-balance: layers per stage, or per virtual stage (pp·V of them)
                          with interleaving (owned), NULL = balance by time */
  int n_pp_balance;
  gpu_precision precision;
  int grad_reduce;     /* --grad-reduce-dtype: the gpu_precision gradients are reduced and kept in
                          (GPU_FP32, GPU_BF16 or GPU_FP16); CFG_GRAD_REDUCE_DEFAULT until
                          cfg_resolve: fp16 under --precision fp16 (Megatron and DeepSpeed), fp32
                          otherwise (PyTorch DDP under autocast reduces in the parameters' fp32;
                          Megatron's bf16 accumulates and reduces in fp32), and fp32 in --mode
                          real, whose build reduces in fp32 */
  gboolean recompute;  /* --recompute (full): every layer's forward again in backward, from each
                          block's stashed input */
  gboolean recompute_selective; /* --recompute selective (Korthikanti et al. 2022): only the
                          attention core (QKᵀ, softmax, dropout, AV) again, its probabilities
                          not kept */
  gboolean sequence_parallel; /* --sequence-parallel (Megatron, Korthikanti et al. 2022): with
                          Megatron tp, the layers outside the column/row pairs work on 1/tp of
                          the sequence; each tp all-reduce becomes an all-gather and a
                          reduce-scatter */
  int pp_scatter_gather; /* Megatron's scatter/gather of inter-stage tensors under tp: 1 on, 0 off
                            (--no-pp-scatter-gather, and --mode real, whose build sends whole
                            tensors); -1 until cfg_resolve */
  gboolean host_launch; /* the kernel database's framework host times gate the kernels (on by
                           default; --no-host-launch); only a database that carries them has any */
  gboolean cuda_graphs; /* --cuda-graphs: one graph launch per iteration, no host time per kernel */
  gboolean autocast;   /* --autocast: PyTorch's automatic mixed precision: fp32 weights cast to
                          16 bits in every forward, their gradients back in backward, no 16-bit
                          model copy for the optimizer to write (fp16/bf16 only) */
  gboolean l2_reuse;   /* a kernel reads the input its predecessor just wrote from the L2, where
                          the kernel database measured the L2 (on by default; --no-l2-reuse) */
  int zero;            /* --zero: ZeRO stage 0 (none), 1 (optimizer state sharded over dp), 2 (and
                          gradients), 3 (and parameters) */
  cfg_fsdp fsdp;       /* --fsdp: PyTorch FSDP's sharding strategy, CFG_FSDP_NONE without */
  int fsdp_shard;      /* --fsdp-shard-size: the shard group of --fsdp hybrid (data-parallel
                          ranks); 0 = not given (the dp ranks of one node, run_ctx_open) */
  char *coll;          /* collective algorithm family, NULL = what NCCL would choose */
  int nccl_proto;      /* --nccl-proto: NCCL_PROTO_AUTO (the default), a pinned nccl_proto, or
                          NCCL_PROTO_OFF (coll/nccl.h) */
  char *kernels;       /* kernel database name or file, NULL = roofline from the GPU spec */
  char *gpu;           /* --gpu: spec-sheet key for hosts without a gpu_model property, NULL */
  gboolean kernels_any_device; /* use a kernel database measured for another device */
  cfg_mode mode;
  cfg_device device;   /* --device: where --mode real runs its kernels (default cpu) */
  int iters;           /* iterations to run (default 3); steady state excludes the first */
  double bucket_bytes; /* DDP gradient bucket, bytes (default 25 MiB) */
  char *out;           /* result JSON path, NULL = none */
  char *trace;         /* Chrome trace path, NULL = none */
  char *dump_weights;  /* --mode real: write every parameter tensor after the last step here
                          (serial layout, see exec.h), NULL = none */
  char *routing;       /* MoE routing: "uniform", "zipf:S" or "file:F" (NULL = uniform) */
  double routing_zipf_s; /* parsed S of zipf:S (0 = uniform) */
  double *routing_weights; /* parsed weights of file:F (owned), NULL otherwise */
  int n_routing_weights;
  double capacity_factor; /* MoE expert capacity factor: < 0 = the workload's, 0 = unlimited */
  unsigned seed;       /* seeds routing (which experts are hot) and the real flavour's data */
  gboolean ignore_memory; /* simulate even when the model does not fit (fits_in_memory false) */
  gboolean message_level; /* sim: every step of every collective as its own messages */
  gboolean no_folding;    /* closed form: evaluate every rank, even equivalent replicas; sim:
                             simulate every channel of a collective (exec.c sim_fold_channels) */
  char **simgrid_cfg;     /* --simgrid-cfg KEY:VALUE items for SimGrid (sim), NULL-terminated,
                             or NULL */
  char *slow_gpus;        /* --slow-gpus: stragglers, "R:F,..." or "random:FRACTION:F" (NULL:
                             none; cfg_slow_factors) */
  int samples;            /* --samples: draws of kernel times from their measured spread (0:
                             none; at most CFG_MAX_SAMPLES) */
  double net_jitter_s;    /* --net-jitter: mean delay of each message and collective call in
                             --samples draws, s (0: none; run_ctx_comm_delay) */
  char *degrade;          /* --degrade: degraded links, "LINK:F,..." or "nics:FRACTION:F" (NULL:
                             none; cfg_degrade_items) */
  gboolean reproducible;  /* write host-dependent figures (simulation.wall_s) as 0 */
} cfg_run;

/* Fills `c` with the defaults. Strings are owned by `c`: release with cfg_release(). */
void cfg_init(cfg_run *c);
void cfg_release(cfg_run *c);

const char *cfg_mode_name(cfg_mode m);
const char *cfg_device_name(cfg_device d);
gboolean cfg_device_parse(const char *text, cfg_device *out);
const char *cfg_schedule_name(cfg_schedule s);
const char *cfg_tp_style_name(cfg_tp_style s);
const char *cfg_fsdp_name(cfg_fsdp f);
const char *cfg_cp_style_name(cfg_cp_style s);
/* --recompute's granularity: "none", "selective" or "full", from c->recompute and
 * c->recompute_selective; and the flags from such a name (FALSE, flags untouched, for others). */
const char *cfg_recompute_name(const cfg_run *c);
gboolean cfg_recompute_parse(const char *text, gboolean *full, gboolean *selective);
gboolean cfg_cp_style_parse(const char *text, cfg_cp_style *out);
/* The option that asked for sharding, for messages ("--zero 3", "--fsdp hybrid"), into `buf`
 * of `n` bytes, which it returns. */
const char *cfg_sharding_option(const cfg_run *c, char *buf, size_t n);
gboolean cfg_fsdp_parse(const char *text, cfg_fsdp *out);
gboolean cfg_mode_parse(const char *text, cfg_mode *out);
gboolean cfg_schedule_parse(const char *text, cfg_schedule *out);
gboolean cfg_tp_style_parse(const char *text, cfg_tp_style *out);

/* Parses "PrxPc" (e.g. "4x4") or "auto". FALSE with DL_ERR_INPUT naming --grid otherwise. */
gboolean cfg_grid_parse(cfg_run *c, const char *text, GError **err);

/* Checks the degrees against --gpus and the batch against the degrees, fills in the degrees that
 * were left out, and the batch default `default_batch` when --batch was not given. DL_ERR_INPUT
 * naming the option on failure. */
gboolean cfg_resolve(cfg_run *c, long default_batch, GError **err);

/* TRUE when every item of `items` (NULL-terminated, may be NULL) reads KEY:VALUE with a key
 * and a value; else FALSE with *why a newly allocated message naming --simgrid-cfg. */
gboolean cfg_simgrid_items_ok(char **items, char **why);

/* The range of one --slow-gpus factor (a kernel's time) and of one --degrade factor (a link's
 * bandwidth), and of the product of a rank's or a link's factors where it is named or drawn more
 * than once. */
#define CFG_SLOW_MIN 0.01
#define CFG_SLOW_MAX 100.0
#define CFG_DEGRADE_MIN 0.001
#define CFG_DEGRADE_MAX 1000.0

/* Parses --slow-gpus: "none", or comma-separated items, each "R:F" (rank R runs its kernels F times as
 * long, 0.01 <= F <= 100) or "random:FRACTION:F" (round(FRACTION x P) ranks, drawn by --seed,
 * F times as long; 0 < FRACTION <= 1). DL_ERR_INPUT naming --slow-gpus on failure. */
gboolean cfg_slow_parse(cfg_run *c, const char *text, GError **err);

/* The kernel-time factor of each of the c->gpus ranks under c->slow_gpus (a rank named twice
 * takes the product), newly allocated; NULL when there is none. DL_ERR_INPUT naming --slow-gpus
 * (and *ok FALSE) when a rank is not below c->gpus. */
double *cfg_slow_factors(const cfg_run *c, gboolean *ok, GError **err);

/* SplitMix64 (Steele, Lea & Flood 2014): advances *state by the golden gamma and returns its
 * finalised value; the seeded draws of configurations, projections and samples come from it. */
static inline guint64 cfg_splitmix64(guint64 *state) {
  guint64 z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A shuffle of 0..n-1 into order[], drawn from --seed `seed` and `salt` (SplitMix64, then
 * Fisher-Yates): the same arguments give the same order on every machine. */
void cfg_shuffle(unsigned seed, guint64 salt, int *order, int n);

/* Parses --degrade: "none", or comma-separated items, each "LINK:F" (the platform's link LINK at
 * F times its bandwidth) or "nics:FRACTION:F" (round(FRACTION x the NIC links), at least one,
 * drawn by --seed), with 0.001 <= F <= 1000 and 0 < FRACTION <= 1. DL_ERR_INPUT naming --degrade
 * on failure. Which links the names and fractions are is settled against the platform
 * (run_ctx). */
gboolean cfg_degrade_parse(cfg_run *c, const char *text, GError **err);

/* Item i of c->degrade (0 <= i < its count): *nics TRUE for a fraction of the NICs (*fraction
 * set, *link NULL), else *link the link's name (newly allocated); *f the factor. FALSE past the
 * last item. */
gboolean cfg_degrade_item(const cfg_run *c, int i, char **link, gboolean *nics, double *fraction,
                          double *f);

/* The first what-if of one simulated run that `c` asks for, as its option ("--degrade",
 * "--samples", "--net-jitter", and with `stragglers` "--slow-gpus"), or NULL: what a real run,
 * a search at median times, an export of op lists or kbench cannot take. */
const char *cfg_whatif_option(const cfg_run *c, gboolean stragglers);

/* Parses --routing: "uniform", "zipf:S" or "file:F" (a JSON list of expert weights, read now).
 * DL_ERR_INPUT naming --routing on failure. */
gboolean cfg_routing_parse(cfg_run *c, const char *text, GError **err);

/* The resolved configuration as a JSON object (cJSON, the caller owns it): every field that
 * decides a run, in a fixed order — the "config" echo of every result and what the driver hands
 * an executor. Output paths (--out, --trace, --dump-weights) are left out. `kernels` is the
 * user's --kernels, or "default". */
struct cJSON *cfg_to_json(const cfg_run *c);

/* Reads such an object back into `c` (cfg_init'ed), resolved as it was written: no defaults are
 * applied and cfg_resolve is not needed. `what` names the document in messages
 * ("<what>: config.<key>: ..."). DL_ERR_INPUT when a key is missing or of the wrong type. */
gboolean cfg_from_json(cfg_run *c, const struct cJSON *o, const char *what, GError **err);

/* Settles what depends on the model: --tp-style auto becomes megatron when a linear layer of
 * `has_tp_roles` models is marked column/row (a transformer), gholami otherwise. */
void cfg_resolve_style(cfg_run *c, gboolean has_tp_roles);

/* "PrxPc", or "none": newly allocated. */
char *cfg_grid_string(const cfg_run *c);

#endif
