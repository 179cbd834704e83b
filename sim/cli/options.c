/* options.c — parsing `dlsim run` options (see options.h). */
#include "cli/options.h"

#include <limits.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmds.h"
#include "core/dl_common.h"
#include "platform/platform.h"

/* What GOption fills, before it is checked and moved into the configuration. Numbers that must
 * be finite are read as text; integers that have no default of their own start at a value no
 * user can give, so that "not given" and "given as 0 or -1" differ. */
typedef struct {
  char *mode, *precision, *schedule, *tp_style, *grid, *grid_layers, *domain, *platform, *workload,
      *coll, *kernels, *gpu, *out, *trace, *pp_balance, *dump_weights, *routing, *bucket_mb, *slow_gpus, *degrade, *net_jitter,
      *capacity_factor, *nccl_proto, *device, *fsdp, *grad_reduce, *recompute_mode, *cp_style;
  gint64 seed, batch, seq_len;
  int gpus;
  gboolean no_pp_scatter_gather;
  gboolean no_host_launch;
  gboolean no_l2_reuse;
  char **simgrid_cfg;
} raw_opts;

#define NOT_GIVEN INT_MIN
#define NOT_GIVEN64 G_MININT64

static void raw_release(raw_opts *r) {
  char **s[] = {&r->mode,       &r->precision,   &r->schedule,   &r->tp_style, &r->grid,
                &r->grid_layers, &r->domain,   &r->platform,   &r->workload, &r->coll,
                &r->kernels,    &r->gpu,         &r->out,        &r->trace,    &r->pp_balance,
                &r->dump_weights, &r->routing, &r->bucket_mb,  &r->capacity_factor, &r->nccl_proto,
                &r->device, &r->fsdp, &r->grad_reduce, &r->recompute_mode, &r->cp_style,
                &r->slow_gpus, &r->degrade, &r->net_jitter};
  for (size_t i = 0; i < G_N_ELEMENTS(s); i++) g_free(*s[i]);
  g_strfreev(r->simgrid_cfg);
}

/* The option table: strings into `r`, degrees and flags straight into `c`. A command's own
 * option (`extra`, may be NULL) of the same long name takes the place of the run option (kbench's
 * --device names the device it measures). */
static GOptionContext *run_context(raw_opts *r, cfg_run *c, const GOptionEntry *extra) {
  GOptionEntry entries[] = {
      {"platform", 0, 0, G_OPTION_ARG_STRING, &r->platform,
       "platform name under platforms/ (thetagpu) or a SimGrid XML file", "NAME|FILE"},
      {"workload", 0, 0, G_OPTION_ARG_STRING, &r->workload,
       "workload name under workloads/ (resnet18-cifar100), a JSON file, or chakra:DIR (per-rank "
       "Chakra execution traces)", "NAME|FILE|chakra:DIR"},
      {"gpus", 0, 0, G_OPTION_ARG_INT, &r->gpus, "number of GPUs = MPI ranks (default 8)", "P"},
      {"batch", 0, 0, G_OPTION_ARG_INT64, &r->batch,
       "global mini-batch in samples (default: the workload's)", "B"},
      {"dp", 0, 0, G_OPTION_ARG_INT, &c->dp, "data-parallel degree (default: what is left)", "N"},
      {"tp", 0, 0, G_OPTION_ARG_INT, &c->tp, "tensor/model-parallel degree (Gholami's Pr)", "N"},
      {"pp", 0, 0, G_OPTION_ARG_INT, &c->pp, "pipeline-parallel degree", "N"},
      {"ep", 0, 0, G_OPTION_ARG_INT, &c->ep, "expert-parallel degree (divides dp x tp)", "N"},
      {"cp", 0, 0, G_OPTION_ARG_INT, &c->cp,
       "context-parallel degree: each sequence split over N ranks (Megatron tp, then cp, then "
       "dp in the rank order)", "N"},
      {"cp-style", 0, 0, G_OPTION_ARG_STRING, &r->cp_style,
       "context parallelism's attention: ring (default: K/V chunks around the ring, two mirrored "
       "chunks per rank) or ulysses (heads re-sharded by all-to-all)", "ring|ulysses"},
      {"seq-len", 0, 0, G_OPTION_ARG_INT64, &r->seq_len,
       "a token model's sequence length instead of the workload's (a learned position table "
       "grows with it)", "S"},
      {"grid", 0, 0, G_OPTION_ARG_STRING, &r->grid,
       "Gholami's integrated grid: Pr (model) x Pc (batch), or auto to search all", "PrxPc|auto"},
      {"grid-layers", 0, 0, G_OPTION_ARG_STRING, &r->grid_layers,
       "with --grid: all (default), or fc (conv layers batch-parallel over all P)", "all|fc"},
      {"domain", 0, 0, G_OPTION_ARG_STRING, &r->domain,
       "with --grid: conv = Pr splits the image in convolution layers", "conv|none"},
      {"tp-style", 0, 0, G_OPTION_ARG_STRING, &r->tp_style,
       "how layers split across tp/Pr (default auto: megatron for transformers, gholami "
       "otherwise)", "gholami|megatron|auto"},
      {"schedule", 0, 0, G_OPTION_ARG_STRING, &r->schedule,
       "pipeline schedule (default gpipe); interleaved: Megatron's interleaved 1F1B with "
       "--virtual-stages model chunks per rank", "gpipe|1f1b|interleaved"},
      {"no-pp-scatter-gather", 0, 0, G_OPTION_ARG_NONE, &r->no_pp_scatter_gather,
       "with Megatron tp and a pipeline: send whole tensors between stages (default: each tp "
       "rank sends 1/tp and the next stage all-gathers, as Megatron)", NULL},
      {"no-host-launch", 0, 0, G_OPTION_ARG_NONE, &r->no_host_launch,
       "leave out the framework's host time per kernel launch (default: where the kernel "
       "database carries it, the GPU cannot start a kernel before the host has launched it)",
       NULL},
      {"cuda-graphs", 0, 0, G_OPTION_ARG_NONE, &c->cuda_graphs,
       "the iteration runs as CUDA graphs: no host time per kernel launch", NULL},
      {"autocast", 0, 0, G_OPTION_ARG_NONE, &c->autocast,
       "with --precision bf16/fp16: PyTorch's automatic mixed precision: each layer's fp32 "
       "weights cast to 16 bits in every forward and their gradients back in backward, as "
       "kernels of their own (default: Megatron's way, a 16-bit model copy the optimizer "
       "writes)", NULL},
      {"no-l2-reuse", 0, 0, G_OPTION_ARG_NONE, &r->no_l2_reuse,
       "time every kernel cold, as measured (default: where the kernel database measured the "
       "GPU's L2, a kernel reads the input its predecessor just wrote from the L2)", NULL},
      {"virtual-stages", 0, 0, G_OPTION_ARG_INT, &c->virtual_stages,
       "with --schedule interleaved: model chunks per pipeline rank (V >= 2)", "V"},
      {"microbatches", 0, 0, G_OPTION_ARG_INT, &c->microbatches, "pipeline micro-batches", "M"},
      {"pp-balance", 0, 0, G_OPTION_ARG_STRING, &r->pp_balance,
       "layers per pipeline stage (default: balanced by predicted time)", "N,N,..."},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &r->precision,
       "compute precision (default fp32; fp16/bf16 = mixed precision)", "fp32|tf32|fp16|bf16"},
      {"recompute", 0, 0, G_OPTION_ARG_NONE, &c->recompute,
       "activation recomputation in backward: full (alone), or --recompute none|selective|full "
       "(selective: the attention core only, Korthikanti et al. 2022)", NULL},
      {"recompute-mode", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &r->recompute_mode,
       "what --recompute MODE is read as", "none|selective|full"},
      {"sequence-parallel", 0, 0, G_OPTION_ARG_NONE, &c->sequence_parallel,
       "with Megatron tp: norms, dropout and residuals on 1/tp of the sequence; all-gather and "
       "reduce-scatter instead of each tp all-reduce", NULL},
      {"grad-reduce-dtype", 0, 0, G_OPTION_ARG_STRING, &r->grad_reduce,
       "the dtype gradients are kept and reduced in (default: fp16 under --precision fp16, as "
       "Megatron and DeepSpeed; fp32 otherwise, as PyTorch DDP under autocast and Megatron's "
       "bf16)", "fp32|bf16|fp16"},
      {"zero", 0, 0, G_OPTION_ARG_INT, &c->zero,
       "ZeRO stage: 1 shards the optimizer state over dp (as Megatron's distributed optimizer), 2 "
       "also the gradients (reduce-scatter per bucket), 3 also the parameters (gathered per block "
       "before its forward and its backward); default 0", "0|1|2|3"},
      {"fsdp", 0, 0, G_OPTION_ARG_STRING, &r->fsdp,
       "PyTorch FSDP: full (FULL_SHARD), grad-op (SHARD_GRAD_OP: no re-gather in backward) or "
       "hybrid (HYBRID_SHARD: shard inside a node, replicate across nodes); one unit per block",
       "full|grad-op|hybrid"},
      {"fsdp-shard-size", 0, 0, G_OPTION_ARG_INT, &c->fsdp_shard,
       "with --fsdp hybrid: data-parallel ranks per shard group (default: those of one node)",
       "N"},
      {"coll", 0, 0, G_OPTION_ARG_STRING, &r->coll,
       "collective algorithm: ring, tree, hier, rhd, or smpi:NAME in simulation (default: an "
       "NCCL-like choice per call)", "NAME"},
      {"kernels", 0, 0, G_OPTION_ARG_STRING, &r->kernels,
       "kernel database (default: kernels/db/<gpu>.json, else the GPU's roofline); roofline: "
       "the spec sheet's roofline even where a database exists", "NAME|FILE|roofline"},
      {"gpu", 0, 0, G_OPTION_ARG_STRING, &r->gpu,
       "GPU model (spec-sheet key, e.g. a100-40gb) of platform hosts that have no gpu_model "
       "property (a SimGrid file written for other work)", "MODEL"},
      {"kernels-any-device", 0, 0, G_OPTION_ARG_NONE, &c->kernels_any_device,
       "use a kernel database measured for another device than the platform's GPU", NULL},
      {"mode", 0, 0, G_OPTION_ARG_STRING, &r->mode, "sim (default), real or analytic",
       "sim|real|analytic"},
      {"device", 0, 0, G_OPTION_ARG_STRING, &r->device,
       "with --mode real: run the kernels on the CPU (default) or on this machine's GPU",
       "cpu|cuda"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &c->iters,
       "iterations to run (default 3; steady state excludes the first)", "K"},
      {"bucket-mb", 0, 0, G_OPTION_ARG_STRING, &r->bucket_mb,
       "data-parallel gradient bucket size in MiB (default 25, as PyTorch DDP)", "MB"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &r->out, "write the result JSON here", "FILE"},
      {"trace", 0, 0, G_OPTION_ARG_FILENAME, &r->trace, "write a Chrome trace-event timeline",
       "FILE"},
      {"dump-weights", 0, 0, G_OPTION_ARG_FILENAME, &r->dump_weights,
       "with --mode real: write every parameter after the last step (serial layout)", "FILE"},
      {"nccl-proto", 0, 0, G_OPTION_ARG_STRING, &r->nccl_proto, CFG_NCCL_PROTO_HELP, "PROTO"},
      {"routing", 0, 0, G_OPTION_ARG_STRING, &r->routing,
       "MoE routing: uniform (default), zipf:S (expert popularity ~ 1/rank^S), or file:F (a JSON "
       "list of E expert weights)", "uniform|zipf:S|file:F"},
      {"capacity-factor", 0, 0, G_OPTION_ARG_STRING, &r->capacity_factor,
       "MoE expert capacity factor (default: the workload's; 0 = unlimited, nothing dropped)", "F"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &r->seed,
       "seed of the routing (which experts are hot) and of the real flavour's data (default 1)",
       "N"},
      {"message-level", 0, 0, G_OPTION_ARG_NONE, &c->message_level,
       "sim: simulate every step of every collective as its own messages (default: a ring phase "
       "as one message each way, a tree pipeline of 16 chunks or more as three; README)", NULL},
      {"slow-gpus", 0, 0, G_OPTION_ARG_STRING, &r->slow_gpus,
       "stragglers: R:F,... (rank R's kernels take F times as long) or random:FRACTION:F (that "
       "share of the ranks, drawn by --seed); sim and analytic", "SPEC"},
      {"samples", 0, 0, G_OPTION_ARG_INT, &c->samples,
       "sim and analytic: also run N draws of every kernel's time from the spread of its measured "
       "repeats (seeded by --seed) and give the iteration time's percentiles", "N"},
      {"net-jitter", 0, 0, G_OPTION_ARG_STRING, &r->net_jitter,
       "with --samples: in each draw, every message and collective call waits first a delay drawn "
       "per rank from an exponential distribution of this mean (e.g. 5us)", "TIME"},
      {"degrade", 0, 0, G_OPTION_ARG_STRING, &r->degrade,
       "degraded links: LINK:F,... (the platform's <link id=LINK> at F times its bandwidth) or "
       "nics:FRACTION:F (that share of the NIC links of a platform written by dlsim platform, "
       "drawn by --seed); sim and analytic", "SPEC"},
      {"simgrid-cfg", 0, 0, G_OPTION_ARG_STRING_ARRAY, &r->simgrid_cfg,
       "a SimGrid setting over the platform file's (repeatable; SimGrid's --cfg=KEY:VALUE): sim "
       "passes it on; analytic applies network/TCP-gamma, network/crosstraffic, "
       "network/weight-S, smpi/bw-factor and smpi/lat-factor and refuses the others; real "
       "refuses it", "KEY:VALUE"},
      {"no-folding", 0, 0, G_OPTION_ARG_NONE, &c->no_folding,
       "evaluate every rank, and in sim every channel of a collective and every data-parallel "
       "group (default: one data-parallel replica, or one pipeline under Megatron tp, stands for "
       "the others in the closed form; the simulation runs channel 0 of a data-parallel "
       "all-reduce for all its channels, and GPU 0's data-parallel groups for every rail; "
       "README)", NULL},
      {"ignore-memory", 0, 0, G_OPTION_ARG_NONE, &c->ignore_memory,
       "go on when the model does not fit in GPU memory (fits_in_memory: false)", NULL},
      {"reproducible", 0, 0, G_OPTION_ARG_NONE, &c->reproducible,
       "write host-dependent figures (simulation.wall_s) as 0, for byte-identical results", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionEntry kept[G_N_ELEMENTS(entries)];
  size_t n = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(entries); i++) {
    gboolean shadowed = FALSE;
    for (const GOptionEntry *e = extra; entries[i].long_name && e && e->long_name; e++)
      shadowed = shadowed || strcmp(e->long_name, entries[i].long_name) == 0;
    if (!shadowed) kept[n++] = entries[i];
  }
  GOptionContext *ctx = g_option_context_new(NULL);
  GOptionGroup *g = g_option_group_new("run", "Run options:", "Run options:", NULL, NULL);
  g_option_group_add_entries(g, kept);
  g_option_context_set_main_group(ctx, g);
  return ctx;
}

static void set_str(char **dst, const char *src) {
  if (!src) return;
  g_free(*dst);
  *dst = g_strdup(src);
}

gboolean cli_number(const char *opt, const char *text, double lo, double hi,
                              const char *expected, double *out, GError **err) {
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || *end || !isfinite(v) || v < lo || v > hi || strpbrk(text, "xX")) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected %s, got '%s'", opt, expected, text);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* The counts: GPUs, batch, seed, degrees; what is out of range stops here, before any product
 * of them is formed. */
static gboolean apply_counts(const raw_opts *r, cfg_run *c, GError **err) {
  if (r->gpus != NOT_GIVEN) {
    if (r->gpus < 1 || r->gpus > CFG_MAX_GPUS) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus: expected 1..%d GPUs, got %d",
                  CFG_MAX_GPUS, r->gpus);
      return FALSE;
    }
    c->gpus = r->gpus;
  }
  if (r->batch != NOT_GIVEN64) {
    if (r->batch < 1 || r->batch > CFG_MAX_BATCH) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--batch: expected 1..%" G_GINT64_FORMAT " samples, got %" G_GINT64_FORMAT,
                  (gint64)CFG_MAX_BATCH, r->batch);
      return FALSE;
    }
    c->batch = (long)r->batch;
  }
  if (r->seed != NOT_GIVEN64) {
    if (r->seed < 0 || r->seed > G_MAXUINT32) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--seed: expected 0..%u, got %" G_GINT64_FORMAT,
                  G_MAXUINT32, r->seed);
      return FALSE;
    }
    c->seed = (unsigned)r->seed;
  }
  return TRUE;
}

/* The names: mode, precision, schedule, tp style, grid, grid layers, domain, routing. */
static gboolean apply_names(const raw_opts *r, cfg_run *c, GError **err) {
  if (r->mode && !cfg_mode_parse(r->mode, &c->mode)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode: expected sim, real or analytic, got '%s'",
                r->mode);
    return FALSE;
  }
  if (r->device && !cfg_device_parse(r->device, &c->device)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--device: expected cpu or cuda, got '%s'",
                r->device);
    return FALSE;
  }
  if (r->device && c->mode != CFG_MODE_REAL) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--device %s: only --mode real runs kernels; a "
                "simulation replays a kernel database (--kernels)", r->device);
    return FALSE;
  }
  if (r->precision && !gpu_precision_parse(r->precision, &c->precision)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--precision: expected fp32, tf32, fp16 or bf16, got '%s'", r->precision);
    return FALSE;
  }
  if (r->schedule && !cfg_schedule_parse(r->schedule, &c->schedule)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--schedule: expected gpipe, 1f1b or interleaved, got '%s'",
                r->schedule);
    return FALSE;
  }
  if (r->tp_style && !cfg_tp_style_parse(r->tp_style, &c->tp_style)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--tp-style: expected gholami, megatron or auto, got '%s'", r->tp_style);
    return FALSE;
  }
  if (r->no_pp_scatter_gather) c->pp_scatter_gather = 0;
  if (r->no_host_launch) c->host_launch = FALSE;
  if (r->no_l2_reuse) c->l2_reuse = FALSE;
  if (r->cp_style && !cfg_cp_style_parse(r->cp_style, &c->cp_style)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--cp-style: expected ring or ulysses, got '%s'",
                r->cp_style);
    return FALSE;
  }
  if (r->seq_len != NOT_GIVEN64) {
    if (r->seq_len < 1 || r->seq_len > (1 << 24)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--seq-len: expected 1..%d tokens, got %" G_GINT64_FORMAT, 1 << 24,
                  (gint64)r->seq_len);
      return FALSE;
    }
    c->seq_len = r->seq_len;
  }
  if (r->recompute_mode &&
      !cfg_recompute_parse(r->recompute_mode, &c->recompute, &c->recompute_selective)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--recompute: expected none, selective or full, got '%s'", r->recompute_mode);
    return FALSE;
  }
  if (r->grad_reduce) {
    gpu_precision g;
    if (!gpu_precision_parse(r->grad_reduce, &g) || g == GPU_TF32) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--grad-reduce-dtype: expected fp32, bf16 or fp16, got '%s'", r->grad_reduce);
      return FALSE;
    }
    c->grad_reduce = g;
  }
  if (r->fsdp && !cfg_fsdp_parse(r->fsdp, &c->fsdp)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--fsdp: expected full, grad-op, hybrid or none, got '%s'", r->fsdp);
    return FALSE;
  }
  if (r->grid && !cfg_grid_parse(c, r->grid, err)) return FALSE;
  if (r->routing && !cfg_routing_parse(c, r->routing, err)) return FALSE;
  if (r->slow_gpus && !cfg_slow_parse(c, r->slow_gpus, err)) return FALSE;
  if (r->degrade && !cfg_degrade_parse(c, r->degrade, err)) return FALSE;
  if (c->samples < 0 || c->samples > CFG_MAX_SAMPLES) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--samples: expected 0..%d, got %d", CFG_MAX_SAMPLES,
                c->samples);
    return FALSE;
  }
  if (r->net_jitter && (!plat_parse_time(r->net_jitter, &c->net_jitter_s) ||
                        !(c->net_jitter_s >= 0 && c->net_jitter_s <= 1))) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--net-jitter: expected a time from 0 to 1 s (e.g. "
                "5us), got '%s'", r->net_jitter);
    return FALSE;
  }
  if (c->net_jitter_s > 0 && !c->samples) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--net-jitter %s: the jitter is drawn in the "
                "--samples draws; add --samples N", r->net_jitter);
    return FALSE;
  }
  if (c->samples && c->grid_auto) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--samples %d: --grid auto compares grids at the "
                "median kernel times; draw the times for one grid (--grid PrxPc)", c->samples);
    return FALSE;
  }
  if (r->nccl_proto && !cfg_nccl_proto_option(r->nccl_proto, &c->nccl_proto, err)) return FALSE;
  if (r->grid_layers) {
    if (strcmp(r->grid_layers, "fc") == 0) c->grid_fc_only = TRUE;
    else if (strcmp(r->grid_layers, "all") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grid-layers: expected all or fc, got '%s'",
                  r->grid_layers);
      return FALSE;
    }
  }
  if (r->domain) {
    if (strcmp(r->domain, "conv") == 0) c->domain_conv = TRUE;
    else if (strcmp(r->domain, "none") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain: expected conv or none, got '%s'",
                  r->domain);
      return FALSE;
    }
  }
  if ((c->grid_fc_only || c->domain_conv) && !r->grid && c->tp <= 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grid-layers/--domain: only apply with --grid");
    return FALSE;
  }
  return TRUE;
}

/* The real numbers (finite, in range) and the stage sizes. */
static gboolean apply_numbers(const raw_opts *r, cfg_run *c, GError **err) {
  double v;
  if (r->bucket_mb) {
    if (!cli_number("--bucket-mb", r->bucket_mb, 1e-6, 1e9, "a size in MiB > 0", &v, err))
      return FALSE;
    c->bucket_bytes = v * 1024 * 1024;
  }
  if (r->capacity_factor) {
    if (!cli_number("--capacity-factor", r->capacity_factor, 0, 1e6,
                       "a factor >= 0 (0 = unlimited)", &v, err))
      return FALSE;
    c->capacity_factor = v;
  }
  if (r->pp_balance) {
    char **parts = g_strsplit(r->pp_balance, ",", -1);
    int n = (int)g_strv_length(parts);
    g_free(c->pp_balance);
    c->pp_balance = g_new0(int, n > 0 ? n : 1);
    c->n_pp_balance = n;
    gboolean good = n > 0;
    for (int i = 0; i < n && good; i++) {
      char *end = NULL;
      long v = strtol(parts[i], &end, 10);
      good = end != parts[i] && *end == '\0' && v >= 1 && v <= 1 << 20;
      c->pp_balance[i] = (int)v;
    }
    g_strfreev(parts);
    if (!good) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--pp-balance: expected positive layer counts separated by commas, got '%s'",
                  r->pp_balance);
      return FALSE;
    }
  }
  return TRUE;
}

/* `--recompute MODE` and `--recompute=MODE` become the hidden `--recompute-mode=MODE` (GOption
 * gives a flag no value), so that `--recompute` alone stays the flag. Rewrites argv in place;
 * the new strings are added to `keep` (freed by the caller). */
static void recompute_words(int *argc, char **argv, GPtrArray *keep) {
  gboolean full, selective;
  int o = 1;
  for (int i = 1; i < *argc; i++, o++) {
    const char *a = argv[i];
    char *mode = NULL;
    if (strcmp(a, "--") == 0) { /* the rest are arguments */
      for (; i < *argc; i++, o++) argv[o] = argv[i];
      break;
    }
    if (g_str_has_prefix(a, "--recompute=")) mode = g_strdup(a + strlen("--recompute="));
    else if (strcmp(a, "--recompute") == 0 && i + 1 < *argc &&
             cfg_recompute_parse(argv[i + 1], &full, &selective))
      mode = g_strdup(argv[++i]);
    if (mode) {
      argv[o] = g_strconcat("--recompute-mode=", mode, NULL);
      g_ptr_array_add(keep, argv[o]);
      g_free(mode);
    } else {
      argv[o] = argv[i];
    }
  }
  if (o <= *argc) argv[o] = NULL;
  *argc = o;
}

/* The numbers of a run's options are decimal: GOption reads integers as C does (0x10 is 16,
 * 010 is 8) and strtod takes hexadecimal floats. FALSE with DL_ERR_INPUT naming the option
 * otherwise; other malformed values are left to the options' own checks. */
static gboolean decimal_numbers(int argc, char **argv, GError **err) {
  static const char *const integer[] = {"gpus", "batch", "dp", "tp", "pp", "ep", "cp",
                                        "microbatches", "iters", "virtual-stages",
                                        "fsdp-shard-size", "zero", "seed", "seq-len", NULL};
  static const char *const real[] = {"bucket-mb", "capacity-factor", NULL};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (!g_str_has_prefix(argv[i], "--")) continue;
    for (int kind = 0; kind < 2; kind++)
      for (const char *const *n = kind ? real : integer; *n; n++) {
        const size_t k = strlen(*n);
        const char *v = NULL;
        if (strncmp(argv[i] + 2, *n, k) == 0 && argv[i][2 + k] == '=') v = argv[i] + 3 + k;
        else if (strcmp(argv[i] + 2, *n) == 0 && i + 1 < argc) v = argv[i + 1];
        if (!v) continue;
        const char *d = v + (*v == '-' || *v == '+');
        gboolean ok = !strchr(v, 'x') && !strchr(v, 'X');
        if (kind == 0 && ok) { /* digits, and no leading zero */
          ok = *d != '\0' && (d[0] != '0' || d[1] == '\0');
          for (const char *c = d; *c && ok; c++) ok = g_ascii_isdigit(*c);
        }
        if (!ok) {
          g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--%s: expected a decimal number, got '%s'",
                      *n, v);
          return FALSE;
        }
      }
  }
  return TRUE;
}

gboolean cfg_parse_args(cfg_run *c, const char *command, const GOptionEntry *extra,
                        const char *summary, int *argc, char ***argv, gboolean *help,
                        GError **err) {
  if (!decimal_numbers(*argc, *argv, err)) return FALSE;
  GPtrArray *keep = g_ptr_array_new_with_free_func(g_free);
  recompute_words(argc, *argv, keep);
  raw_opts r;
  memset(&r, 0, sizeof r);
  r.gpus = NOT_GIVEN;
  r.seed = r.batch = r.seq_len = NOT_GIVEN64;
  /* degrees, micro-batches and iterations go straight into `c`: mark them so that 0 and
   * negative values given by the user are refused rather than taken for "not given" */
  int *given[] = {&c->dp,    &c->tp,         &c->pp,         &c->ep,
                  &c->microbatches, &c->iters, &c->fsdp_shard, &c->virtual_stages, &c->cp};
  const char *given_name[] = {"--dp",           "--tp",    "--pp",
                              "--ep",           "--microbatches", "--iters",
                              "--fsdp-shard-size", "--virtual-stages", "--cp"};
  int before[G_N_ELEMENTS(given)];
  for (size_t i = 0; i < G_N_ELEMENTS(given); i++) before[i] = *given[i], *given[i] = NOT_GIVEN;
  GOptionContext *ctx = run_context(&r, c, extra);
  g_option_context_set_summary(
      ctx, summary ? summary
                   : "Runs one configuration in simulation (SMPI), for real, or in closed form, "
                     "and prints\na summary; --out writes the result JSON (its keys: README.md, "
                     "\"The result\").");
  if (extra) {
    char *title = g_strdup_printf("%s options:", command);
    GOptionGroup *g = g_option_group_new(command, title, title, NULL, NULL);
    g_option_group_add_entries(g, extra);
    g_option_context_add_group(ctx, g);
    g_free(title);
  }
  gboolean ok = FALSE;
  if (!cli_parse(ctx, command, argc, argv, help, err)) goto out;
  if (*help) {
    ok = TRUE;
    goto out;
  }
  if (*argc > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: unexpected argument '%s' (see dlsim %s --help)",
                command, (*argv)[1], command);
    goto out;
  }
  for (size_t i = 0; i < G_N_ELEMENTS(given); i++) {
    if (*given[i] == NOT_GIVEN) {
      *given[i] = before[i];
    } else if (*given[i] < 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected a positive number, got %d",
                  given_name[i], *given[i]);
      goto out;
    }
  }
  if (!apply_counts(&r, c, err)) goto out;
  set_str(&c->platform, r.platform);
  if (!r.platform && c->gpus > 192) {
    /* the default platform is ThetaGPU (24 nodes of 8 GPUs); past it, the same nodes and network
     * with as many nodes as the GPUs need */
    g_free(c->platform);
    c->platform = g_strdup_printf("thetagpu:%d", (c->gpus + 7) / 8);
  }
  set_str(&c->workload, r.workload);
  /* a trace's rank count is the default GPU count (run_ctx_open checks a given one) */
  if (r.gpus == NOT_GIVEN && g_str_has_prefix(c->workload, "chakra:")) c->gpus = 0;
  set_str(&c->coll, r.coll);
  set_str(&c->kernels, r.kernels);
  if (r.gpu && !gpu_find(r.gpu)) {
    char *known = gpu_known_names();
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpu: no spec sheet for '%s' (known: %s)", r.gpu,
                known);
    g_free(known);
    goto out;
  }
  set_str(&c->gpu, r.gpu);
  set_str(&c->out, r.out);
  set_str(&c->trace, r.trace);
  set_str(&c->dump_weights, r.dump_weights);
  if (r.simgrid_cfg) {
    char *why = NULL;
    if (!cfg_simgrid_items_ok(r.simgrid_cfg, &why)) {
      g_set_error_literal(err, DL_ERROR, DL_ERR_INPUT, why);
      g_free(why);
      goto out;
    }
    g_strfreev(c->simgrid_cfg);
    c->simgrid_cfg = g_strdupv(r.simgrid_cfg);
  }
  ok = apply_names(&r, c, err) && apply_numbers(&r, c, err);
out:
  for (size_t i = 0; i < G_N_ELEMENTS(given); i++)
    if (*given[i] == NOT_GIVEN) *given[i] = before[i];
  raw_release(&r);
  g_option_context_free(ctx);
  g_ptr_array_free(keep, TRUE);
  return ok;
}

void cli_error(const char *msg) {
  char *line = dl_one_line(msg);
  fprintf(stderr, "dlsim: %s\n", line);
  g_free(line);
}

gboolean cli_parse(GOptionContext *ctx, const char *command, int *argc, char ***argv,
                   gboolean *help, GError **err) {
  gboolean h = FALSE;
  const GOptionEntry he[] = {{"help", 'h', 0, G_OPTION_ARG_NONE, &h, "show these options", NULL},
                             {NULL, 0, 0, 0, NULL, NULL, NULL}};
  /* GOption's own --help exits the process; this one prints and lets the command return */
  g_option_context_set_help_enabled(ctx, FALSE);
  g_option_context_add_main_entries(ctx, he, NULL);
  GError *e = NULL;
  if (!g_option_context_parse(ctx, argc, argv, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s (see dlsim %s --help)", command, e->message,
                command);
    g_error_free(e);
    return FALSE;
  }
  if (h) {
    char *text = g_option_context_get_help(ctx, FALSE, NULL);
    fputs(text, stdout);
    g_free(text);
  }
  *help = h;
  return TRUE;
}
