/* config.c — defaults, enum names and validation of a run's configuration. */
#include "core/config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/dl_common.h"

static const char *const proto_names[NCCL_N_PROTOS] = {"LL", "LL128", "Simple"};

const char *nccl_proto_name(int proto) {
  if (proto >= 0 && proto < NCCL_N_PROTOS) return proto_names[proto];
  return proto == NCCL_PROTO_AUTO ? "auto" : "off";
}

gboolean nccl_proto_parse(const char *text, int *out) {
  if (!text) return FALSE;
  for (int p = 0; p < NCCL_N_PROTOS; p++)
    if (g_ascii_strcasecmp(text, proto_names[p]) == 0) return *out = p, TRUE;
  if (g_ascii_strcasecmp(text, "auto") == 0) return *out = NCCL_PROTO_AUTO, TRUE;
  if (g_ascii_strcasecmp(text, "off") == 0) return *out = NCCL_PROTO_OFF, TRUE;
  return FALSE;
}

gboolean cfg_nccl_proto_option(const char *text, int *out, GError **err) {
  if (nccl_proto_parse(text, out)) return TRUE;
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "--nccl-proto: expected auto, LL, LL128, Simple or off, got '%s'", text);
  return FALSE;
}

static void set_str(char **dst, char *src) {
  if (!src) return;
  g_free(*dst);
  *dst = g_strdup(src);
}

#define ENUM_NAMES(LIST, fn, type)                                           \
  static const char *const fn##_names[] = {LIST(ENUM_NAME_ENTRY)};           \
  const char *fn(type v) { return fn##_names[v]; }
#define ENUM_NAME_ENTRY(e, s) s,
ENUM_NAMES(CFG_MODES, cfg_mode_name, cfg_mode)
ENUM_NAMES(CFG_DEVICES, cfg_device_name, cfg_device)
ENUM_NAMES(CFG_SCHEDULES, cfg_schedule_name, cfg_schedule)
ENUM_NAMES(CFG_TP_STYLES, cfg_tp_style_name, cfg_tp_style)
ENUM_NAMES(CFG_FSDPS, cfg_fsdp_name, cfg_fsdp)
ENUM_NAMES(CFG_CP_STYLES, cfg_cp_style_name, cfg_cp_style)

static gboolean parse_name(const char *const *names, size_t n, const char *text, int *out) {
  for (size_t i = 0; i < n; i++)
    if (text && strcmp(text, names[i]) == 0) {
      *out = (int)i;
      return TRUE;
    }
  return FALSE;
}

const char *cfg_sharding_option(const cfg_run *c, char *buf, size_t n) {
  if (c->zero) g_snprintf(buf, n, "--zero %d", c->zero);
  else g_snprintf(buf, n, "--fsdp %s", cfg_fsdp_name(c->fsdp));
  return buf;
}

const char *cfg_recompute_name(const cfg_run *c) {
  return c->recompute ? "full" : c->recompute_selective ? "selective" : "none";
}

gboolean cfg_recompute_parse(const char *text, gboolean *full, gboolean *selective) {
  if (!text || (strcmp(text, "none") && strcmp(text, "selective") && strcmp(text, "full")))
    return FALSE;
  *full = strcmp(text, "full") == 0;
  *selective = strcmp(text, "selective") == 0;
  return TRUE;
}

gboolean cfg_cp_style_parse(const char *text, cfg_cp_style *out) {
  int v;
  if (!parse_name(cfg_cp_style_name_names, G_N_ELEMENTS(cfg_cp_style_name_names), text, &v))
    return FALSE;
  *out = (cfg_cp_style)v;
  return TRUE;
}

gboolean cfg_fsdp_parse(const char *text, cfg_fsdp *out) {
  int v;
  if (!parse_name(cfg_fsdp_name_names, G_N_ELEMENTS(cfg_fsdp_name_names), text, &v)) return FALSE;
  *out = (cfg_fsdp)v;
  return TRUE;
}

gboolean cfg_mode_parse(const char *text, cfg_mode *out) {
  int v;
  if (!parse_name(cfg_mode_name_names, G_N_ELEMENTS(cfg_mode_name_names), text, &v)) return FALSE;
  *out = (cfg_mode)v;
  return TRUE;
}
gboolean cfg_device_parse(const char *text, cfg_device *out) {
  int v;
  if (!parse_name(cfg_device_name_names, G_N_ELEMENTS(cfg_device_name_names), text, &v))
    return FALSE;
  *out = (cfg_device)v;
  return TRUE;
}
gboolean cfg_schedule_parse(const char *text, cfg_schedule *out) {
  int v;
  if (!parse_name(cfg_schedule_name_names, G_N_ELEMENTS(cfg_schedule_name_names), text, &v))
    return FALSE;
  *out = (cfg_schedule)v;
  return TRUE;
}
gboolean cfg_tp_style_parse(const char *text, cfg_tp_style *out) {
  int v;
  if (!parse_name(cfg_tp_style_name_names, G_N_ELEMENTS(cfg_tp_style_name_names), text, &v))
    return FALSE;
  *out = (cfg_tp_style)v;
  return TRUE;
}

void cfg_init(cfg_run *c) {
  memset(c, 0, sizeof *c);
  c->platform = g_strdup("thetagpu");
  c->workload = g_strdup("resnet18-cifar100");
  c->gpus = 8;
  c->tp_style = CFG_TP_AUTO;
  c->schedule = CFG_SCHED_GPIPE;
  c->precision = GPU_FP32;
  c->grad_reduce = CFG_GRAD_REDUCE_DEFAULT;
  c->pp_scatter_gather = -1;
  c->host_launch = TRUE;
  c->l2_reuse = TRUE;
  c->cp = 1;
  c->mode = CFG_MODE_SIM;
  c->iters = 3;
  c->bucket_bytes = 25.0 * 1024 * 1024; /* PyTorch DDP bucket_cap_mb = 25 (MiB) */
  c->seed = 1;
  c->capacity_factor = -1;
  c->nccl_proto = NCCL_PROTO_AUTO;
}

void cfg_release(cfg_run *c) {
  g_free(c->platform);
  g_free(c->workload);
  g_free(c->coll);
  g_free(c->kernels);
  g_free(c->gpu);
  g_free(c->out);
  g_free(c->trace);
  g_free(c->dump_weights);
  g_free(c->pp_balance);
  g_free(c->routing);
  g_free(c->routing_weights);
  g_strfreev(c->simgrid_cfg);
  g_free(c->slow_gpus);
  g_free(c->degrade);
  memset(c, 0, sizeof *c);
}

gboolean cfg_grid_parse(cfg_run *c, const char *text, GError **err) {
  if (strcmp(text, "auto") == 0) {
    c->grid_auto = TRUE;
    return TRUE;
  }
  char *end = NULL;
  long pr = strtol(text, &end, 10);
  if (end == text || (*end != 'x' && *end != 'X')) goto bad;
  const char *p2 = end + 1;
  long pc = strtol(p2, &end, 10);
  if (end == p2 || *end || pr < 1 || pc < 1 || pr > 1 << 20 || pc > 1 << 20) goto bad;
  c->grid_pr = (int)pr;
  c->grid_pc = (int)pc;
  return TRUE;
bad:
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "--grid: expected PrxPc with positive integers (e.g. 4x2) or 'auto', got '%s'", text);
  return FALSE;
}

void cfg_resolve_style(cfg_run *c, gboolean has_tp_roles) {
  if (c->tp_style == CFG_TP_AUTO)
    c->tp_style = has_tp_roles && c->grid_pr == 0 ? CFG_TP_MEGATRON : CFG_TP_GHOLAMI;
}

char *cfg_grid_string(const cfg_run *c) {
  if (c->grid_pr > 0) return g_strdup_printf("%dx%d", c->grid_pr, c->grid_pc);
  return g_strdup(c->grid_auto ? "auto" : "none");
}

gboolean cfg_resolve(cfg_run *c, long default_batch, GError **err) {
  if (c->gpus < 1 || c->gpus > CFG_MAX_GPUS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus: expected 1..%d GPUs, got %d", CFG_MAX_GPUS,
                c->gpus);
    return FALSE;
  }
  /* each degree divides the GPUs (dp x tp x pp = P): none can exceed them, and their products
   * stay within 64 bits */
  static const char *const names[] = {"--dp", "--tp", "--pp", "--ep"};
  const int deg[] = {c->dp, c->tp, c->pp, c->ep};
  for (int i = 0; i < 4; i++)
    if (deg[i] < 0 || deg[i] > c->gpus) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %d: expected 1..%d (a degree divides --gpus %d)",
                  names[i], deg[i], c->gpus, c->gpus);
      return FALSE;
    }
  if (c->microbatches < 0 || c->microbatches > CFG_MAX_STEPS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--microbatches: expected 1..%d, got %d",
                CFG_MAX_STEPS, c->microbatches);
    return FALSE;
  }
  if (c->grid_pr > c->gpus || c->grid_pc > c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grid %dx%d: Pr x Pc must equal --gpus %d",
                c->grid_pr, c->grid_pc, c->gpus);
    return FALSE;
  }
  if (c->grid_pr > 0) {
    if ((c->tp && c->tp != c->grid_pr) || (c->dp && c->dp != c->grid_pc)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--grid %dx%d: conflicts with --tp %d --dp %d (the grid is Pr=tp x Pc=dp)",
                  c->grid_pr, c->grid_pc, c->tp, c->dp);
      return FALSE;
    }
    c->tp = c->grid_pr;
    c->dp = c->grid_pc;
  }
  int tp = c->tp ? c->tp : 1, pp = c->pp ? c->pp : 1;
  if (c->cp > 1 && (c->grid_pr > 0 || c->grid_auto)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--cp %d: context parallelism splits a transformer's "
                "sequence; it does not go with Gholami's grid (--grid)", c->cp);
    return FALSE;
  }
  if (c->grid_auto) {
    if (c->tp || c->dp || c->pp > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--grid auto: searches Pr x Pc = --gpus itself; leave out --dp/--tp/--pp");
      return FALSE;
    }
  }
  /* context parallelism is named only where it is used, so messages without it read as before */
  char cp_x[32] = "", cp_opt[32] = "";
  if (c->cp > 1) {
    g_snprintf(cp_x, sizeof cp_x, " x %d", c->cp);
    g_snprintf(cp_opt, sizeof cp_opt, " --cp %d", c->cp);
  }
  if (!c->dp) {
    if (c->gpus % ((int64_t)tp * pp * c->cp)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--gpus %d: not divisible by tp%s x pp = %d%s x %d; choose degrees whose "
                  "product divides the GPU count",
                  c->gpus, c->cp > 1 ? " x cp" : "", tp, cp_x, pp);
      return FALSE;
    }
    c->dp = (int)(c->gpus / ((int64_t)tp * pp * c->cp));
  }
  c->tp = tp;
  c->pp = pp;
  if ((long)c->dp * c->cp * c->tp * c->pp != c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--dp %d%s --tp %d --pp %d: the degrees multiply to %ld, not --gpus %d", c->dp,
                cp_opt, c->tp, c->pp, (long)c->dp * c->cp * c->tp * c->pp, c->gpus);
    return FALSE;
  }
  if (!c->ep) c->ep = 1;
  if (((int64_t)c->dp * c->tp) % c->ep) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: must divide dp x tp = %" G_GINT64_FORMAT,
                c->ep, (int64_t)c->dp * c->tp);
    return FALSE;
  }
  if (c->zero < 0 || c->zero > 3) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--zero %d: expected a ZeRO stage 0..3", c->zero);
    return FALSE;
  }
  if (c->zero && c->fsdp != CFG_FSDP_NONE) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--zero %d --fsdp %s: both shard the model states; "
                "choose one (--zero 3 is --fsdp full)", c->zero, cfg_fsdp_name(c->fsdp));
    return FALSE;
  }
  if (c->autocast && c->precision != GPU_BF16 && c->precision != GPU_FP16) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--autocast: casts to 16 bits; it needs --precision "
                "bf16 or fp16, got %s", gpu_precision_name(c->precision));
    return FALSE;
  }
  if (c->autocast && (c->zero || c->fsdp != CFG_FSDP_NONE)) {
    char opt[32];
    cfg_sharding_option(c, opt, sizeof opt);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--autocast %s: sharded parameters are gathered in "
                "16 bits (FSDP's MixedPrecision, DeepSpeed's fp16/bf16), not cast in every "
                "forward; leave out --autocast", opt);
    return FALSE;
  }
  if (c->sequence_parallel && (c->tp < 2 || c->tp_style == CFG_TP_GHOLAMI)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--sequence-parallel: splits the sequence over "
                "Megatron's tensor-parallel group; it needs --tp 2 or more with --tp-style "
                "megatron");
    return FALSE;
  }
  if (c->fsdp_shard && c->fsdp != CFG_FSDP_HYBRID) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--fsdp-shard-size: only with --fsdp hybrid");
    return FALSE;
  }
  if (c->fsdp_shard < 0 || (c->fsdp_shard && c->dp % c->fsdp_shard)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--fsdp-shard-size %d: must divide dp = %d",
                c->fsdp_shard, c->dp);
    return FALSE;
  }
  if (c->pp_scatter_gather < 0) c->pp_scatter_gather = c->mode != CFG_MODE_REAL;
  if (c->grad_reduce == CFG_GRAD_REDUCE_DEFAULT)
    c->grad_reduce = c->precision == GPU_FP16 && c->mode != CFG_MODE_REAL ? GPU_FP16 : GPU_FP32;
  if (c->grad_reduce != GPU_FP32 && c->grad_reduce != GPU_BF16 && c->grad_reduce != GPU_FP16) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grad-reduce-dtype: expected fp32, bf16 or fp16");
    return FALSE;
  }
  if (!c->microbatches) c->microbatches = c->pp > 1 ? c->pp : 1;
  if (c->virtual_stages < 0 || c->virtual_stages > CFG_MAX_STEPS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--virtual-stages: expected 1..%d, got %d",
                CFG_MAX_STEPS, c->virtual_stages);
    return FALSE;
  }
  if (c->schedule == CFG_SCHED_INTERLEAVED) {
    if (c->pp < 2 || c->virtual_stages < 2) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--schedule interleaved: needs --pp 2 or more and "
                  "--virtual-stages V >= 2 (model chunks per pipeline rank), got --pp %d "
                  "--virtual-stages %d", c->pp, c->virtual_stages ? c->virtual_stages : 1);
      return FALSE;
    }
    if (c->microbatches % c->pp) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--schedule interleaved: --microbatches %d must be "
                  "a multiple of --pp %d (as Megatron requires)", c->microbatches, c->pp);
      return FALSE;
    }
    /* message tags (micro-batch, chunk, direction) stay below the collectives' (coll.h) */
    if ((int64_t)c->microbatches * c->virtual_stages > 100000) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--microbatches %d --virtual-stages %d: at most "
                  "100000 micro-batch chunks per iteration", c->microbatches, c->virtual_stages);
      return FALSE;
    }
  } else if (c->virtual_stages > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--virtual-stages %d: only with --schedule "
                "interleaved", c->virtual_stages);
    return FALSE;
  }
  if (!c->virtual_stages) c->virtual_stages = 1;
  if (c->n_pp_balance && c->n_pp_balance != c->pp * c->virtual_stages) {
    if (c->virtual_stages > 1)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: %d sizes for --pp %d x "
                  "--virtual-stages %d virtual stages", c->n_pp_balance, c->pp, c->virtual_stages);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: %d stage sizes for --pp %d",
                  c->n_pp_balance, c->pp);
    return FALSE;
  }
  if (c->batch == 0) c->batch = default_batch;
  if (c->batch < 1 || c->batch > CFG_MAX_BATCH) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--batch: expected 1..%" G_GINT64_FORMAT
                " samples, got %ld", (gint64)CFG_MAX_BATCH, c->batch);
    return FALSE;
  }
  long shards = (long)(c->grid_auto ? 1 : c->dp) * c->microbatches;
  if (c->batch % shards) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--batch %ld: not divisible by dp x microbatches = %d x %d; use a multiple of %ld",
                c->batch, c->grid_auto ? 1 : c->dp, c->microbatches, shards);
    return FALSE;
  }
  if (c->iters < 1 || c->iters > CFG_MAX_STEPS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--iters: expected 1..%d, got %d", CFG_MAX_STEPS,
                c->iters);
    return FALSE;
  }
  if (c->bucket_bytes <= 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--bucket-mb: expected a positive size");
    return FALSE;
  }
  return TRUE;
}

cJSON *cfg_to_json(const cfg_run *c) {
  cJSON *cf = cJSON_CreateObject();
  char *grid = cfg_grid_string(c);
  cJSON_AddStringToObject(cf, "platform", c->platform);
  cJSON_AddStringToObject(cf, "workload", c->workload);
  cJSON_AddNumberToObject(cf, "gpus", c->gpus);
  cJSON_AddNumberToObject(cf, "batch", (double)c->batch);
  cJSON_AddNumberToObject(cf, "dp", c->dp);
  cJSON_AddNumberToObject(cf, "tp", c->tp);
  cJSON_AddNumberToObject(cf, "pp", c->pp);
  cJSON_AddNumberToObject(cf, "ep", c->ep);
  cJSON_AddStringToObject(cf, "grid", grid);
  cJSON_AddBoolToObject(cf, "grid_auto", c->grid_auto);
  cJSON_AddStringToObject(cf, "grid_layers", c->grid_fc_only ? "fc" : "all");
  cJSON_AddStringToObject(cf, "domain", c->domain_conv ? "conv" : "none");
  cJSON_AddStringToObject(cf, "tp_style", cfg_tp_style_name(c->tp_style));
  cJSON_AddStringToObject(cf, "schedule", cfg_schedule_name(c->schedule));
  cJSON_AddNumberToObject(cf, "microbatches", c->microbatches);
  cJSON_AddNumberToObject(cf, "virtual_stages", c->virtual_stages);
  cJSON_AddBoolToObject(cf, "pp_scatter_gather", c->pp_scatter_gather > 0);
  cJSON_AddStringToObject(cf, "precision", gpu_precision_name(c->precision));
  cJSON_AddStringToObject(cf, "grad_reduce_dtype",
                          c->grad_reduce >= 0 ? gpu_precision_name((gpu_precision)c->grad_reduce)
                                              : "default");
  cJSON_AddBoolToObject(cf, "recompute", c->recompute);
  cJSON_AddStringToObject(cf, "recompute_granularity", cfg_recompute_name(c));
  cJSON_AddBoolToObject(cf, "sequence_parallel", c->sequence_parallel);
  cJSON_AddNumberToObject(cf, "cp", c->cp);
  cJSON_AddStringToObject(cf, "cp_style", cfg_cp_style_name(c->cp_style));
  cJSON_AddNumberToObject(cf, "seq_len", (double)c->seq_len);
  cJSON_AddBoolToObject(cf, "host_launch", c->host_launch);
  cJSON_AddBoolToObject(cf, "cuda_graphs", c->cuda_graphs);
  cJSON_AddBoolToObject(cf, "l2_reuse", c->l2_reuse);
  cJSON_AddBoolToObject(cf, "autocast", c->autocast);
  cJSON_AddNumberToObject(cf, "zero", c->zero);
  cJSON_AddStringToObject(cf, "fsdp", cfg_fsdp_name(c->fsdp));
  cJSON_AddNumberToObject(cf, "fsdp_shard_size", c->fsdp_shard);
  cJSON_AddStringToObject(cf, "coll", c->coll ? c->coll : "default");
  cJSON_AddStringToObject(cf, "nccl_proto", nccl_proto_name(c->nccl_proto));
  cJSON_AddStringToObject(cf, "kernels", c->kernels ? c->kernels : "default");
  cJSON_AddBoolToObject(cf, "kernels_any_device", c->kernels_any_device);
  cJSON_AddStringToObject(cf, "gpu", c->gpu ? c->gpu : "platform");
  cJSON_AddNumberToObject(cf, "bucket_bytes", c->bucket_bytes);
  cJSON_AddNumberToObject(cf, "iters", c->iters);
  cJSON *pb = cJSON_AddArrayToObject(cf, "pp_balance");
  for (int i = 0; i < c->n_pp_balance; i++)
    cJSON_AddItemToArray(pb, cJSON_CreateNumber(c->pp_balance[i]));
  cJSON_AddStringToObject(cf, "routing", c->routing ? c->routing : "uniform");
  cJSON *rw = cJSON_AddArrayToObject(cf, "routing_weights");
  for (int i = 0; i < c->n_routing_weights; i++)
    cJSON_AddItemToArray(rw, cJSON_CreateNumber(c->routing_weights[i]));
  cJSON_AddNumberToObject(cf, "capacity_factor", c->capacity_factor);
  cJSON_AddNumberToObject(cf, "seed", c->seed);
  cJSON_AddBoolToObject(cf, "ignore_memory", c->ignore_memory);
  cJSON_AddBoolToObject(cf, "message_level", c->message_level);
  cJSON_AddBoolToObject(cf, "no_folding", c->no_folding);
  cJSON_AddStringToObject(cf, "slow_gpus", c->slow_gpus ? c->slow_gpus : "none");
  cJSON_AddStringToObject(cf, "degrade", c->degrade ? c->degrade : "none");
  cJSON_AddNumberToObject(cf, "samples", c->samples);
  cJSON_AddNumberToObject(cf, "net_jitter_s", c->net_jitter_s);
  cJSON *sg = cJSON_AddArrayToObject(cf, "simgrid_cfg");
  for (int i = 0; c->simgrid_cfg && c->simgrid_cfg[i]; i++)
    cJSON_AddItemToArray(sg, cJSON_CreateString(c->simgrid_cfg[i]));
  cJSON_AddStringToObject(cf, "mode", cfg_mode_name(c->mode));
  cJSON_AddStringToObject(cf, "device", cfg_device_name(c->device));
  cJSON_AddBoolToObject(cf, "reproducible", c->reproducible);
  g_free(grid);
  return cf;
}

/* Reading the echo back: each getter names the key on failure. */
typedef struct {
  const cJSON *o;
  const char *what;
  GError **err;
  gboolean ok;
} echo_reader;

static const cJSON *echo_item(echo_reader *r, const char *key, gboolean (*is)(const cJSON *),
                              const char *expected) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->o, key);
  if (r->ok && !is(v)) {
    g_set_error(r->err, DL_ERROR, DL_ERR_INPUT, "%s: config.%s: expected %s", r->what, key,
                expected);
    r->ok = FALSE;
  }
  return r->ok ? v : NULL;
}

static gboolean is_int(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == (double)(int64_t)v->valuedouble &&
         fabs(v->valuedouble) < 9e15;
}
static gboolean is_str(const cJSON *v) { return cJSON_IsString(v); }
static gboolean is_bool(const cJSON *v) { return cJSON_IsBool(v); }

/* A boolean key newer than the echoes that may lack it: FALSE when absent (the behaviour before
 * it existed), else its value, checked like any other. */
static gboolean echo_new_bool(echo_reader *r, const char *key) {
  if (!cJSON_GetObjectItemCaseSensitive(r->o, key)) return FALSE;
  const cJSON *v = echo_item(r, key, is_bool, "true or false");
  return v && cJSON_IsTrue(v);
}
static gboolean is_num(const cJSON *v) { return cJSON_IsNumber(v) && isfinite(v->valuedouble); }
static gboolean is_array(const cJSON *v) { return cJSON_IsArray(v); }

static int64_t echo_int(echo_reader *r, const char *key, int64_t lo, int64_t hi) {
  const cJSON *v = echo_item(r, key, is_int, "an integer");
  if (!v) return 0;
  if (v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
    g_set_error(r->err, DL_ERROR, DL_ERR_INPUT, "%s: config.%s: expected %" G_GINT64_FORMAT
                "..%" G_GINT64_FORMAT ", got %g", r->what, key, lo, hi, v->valuedouble);
    r->ok = FALSE;
    return 0;
  }
  return (int64_t)v->valuedouble;
}

static const char *echo_str(echo_reader *r, const char *key) {
  const cJSON *v = echo_item(r, key, is_str, "a string");
  return v ? v->valuestring : NULL;
}

static void echo_enum(echo_reader *r, const char *key, gboolean (*parse)(const char *, int *),
                      int *out) {
  const char *t = echo_str(r, key);
  if (t && !parse(t, out)) {
    g_set_error(r->err, DL_ERROR, DL_ERR_INPUT, "%s: config.%s: unknown value '%s'", r->what,
                key, t);
    r->ok = FALSE;
  }
}

static gboolean parse_mode(const char *t, int *v) { return cfg_mode_parse(t, (cfg_mode *)v); }
static gboolean parse_device(const char *t, int *v) {
  return cfg_device_parse(t, (cfg_device *)v);
}
static gboolean parse_sched(const char *t, int *v) {
  return cfg_schedule_parse(t, (cfg_schedule *)v);
}
static gboolean parse_style(const char *t, int *v) {
  return cfg_tp_style_parse(t, (cfg_tp_style *)v);
}
static gboolean parse_prec(const char *t, int *v) {
  return gpu_precision_parse(t, (gpu_precision *)v);
}
static gboolean parse_fsdp(const char *t, int *v) { return cfg_fsdp_parse(t, (cfg_fsdp *)v); }
static gboolean parse_cp_style(const char *t, int *v) {
  return cfg_cp_style_parse(t, (cfg_cp_style *)v);
}
static gboolean parse_granularity(const char *t, int *v) { /* 2 full, 1 selective, 0 none */
  gboolean full, selective;
  if (!cfg_recompute_parse(t, &full, &selective)) return FALSE;
  *v = full ? 2 : selective;
  return TRUE;
}
static gboolean parse_layers(const char *t, int *v) {
  *v = strcmp(t, "fc") == 0;
  return *v || strcmp(t, "all") == 0;
}
static gboolean parse_domain(const char *t, int *v) {
  *v = strcmp(t, "conv") == 0;
  return *v || strcmp(t, "none") == 0;
}

gboolean cfg_from_json(cfg_run *c, const cJSON *o, const char *what, GError **err) {
  echo_reader r = {o, what, err, TRUE};
  if (!cJSON_IsObject(o)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config: expected an object", what);
    return FALSE;
  }
  const int big = 1 << 30;
  const char *s;
  if ((s = echo_str(&r, "platform"))) set_str(&c->platform, (char *)s);
  if ((s = echo_str(&r, "workload"))) set_str(&c->workload, (char *)s);
  c->gpus = (int)echo_int(&r, "gpus", 1, big);
  c->batch = (long)echo_int(&r, "batch", 1, G_MAXINT64 / 4);
  c->dp = (int)echo_int(&r, "dp", 1, big);
  c->tp = (int)echo_int(&r, "tp", 1, big);
  c->pp = (int)echo_int(&r, "pp", 1, big);
  c->ep = (int)echo_int(&r, "ep", 1, big);
  if ((s = echo_str(&r, "grid"))) {
    c->grid_pr = c->grid_pc = 0;
    if (strcmp(s, "none") != 0 && strcmp(s, "auto") != 0 && !cfg_grid_parse(c, s, err))
      r.ok = FALSE;
  }
  const cJSON *v = echo_item(&r, "grid_auto", is_bool, "true or false");
  if (v) c->grid_auto = cJSON_IsTrue(v);
  int e = 0;
  echo_enum(&r, "grid_layers", parse_layers, &e);
  c->grid_fc_only = e;
  echo_enum(&r, "domain", parse_domain, &e);
  c->domain_conv = e;
  echo_enum(&r, "tp_style", parse_style, &e);
  c->tp_style = (cfg_tp_style)e;
  echo_enum(&r, "schedule", parse_sched, &e);
  c->schedule = (cfg_schedule)e;
  c->microbatches = (int)echo_int(&r, "microbatches", 1, big);
  /* newer than the rest: a result or trace written before them has none (one chunk, whole
   * tensors between stages) */
  c->pp_scatter_gather = 0;
  if (cJSON_GetObjectItemCaseSensitive(o, "pp_scatter_gather") &&
      (v = echo_item(&r, "pp_scatter_gather", is_bool, "true or false")))
    c->pp_scatter_gather = cJSON_IsTrue(v);
  /* newer still: without them, no host times (results written before the model had none) */
  c->autocast = echo_new_bool(&r, "autocast");
  c->l2_reuse = echo_new_bool(&r, "l2_reuse");
  c->host_launch = echo_new_bool(&r, "host_launch");
  c->cuda_graphs = echo_new_bool(&r, "cuda_graphs");
  c->virtual_stages = cJSON_GetObjectItemCaseSensitive(o, "virtual_stages")
                          ? (int)echo_int(&r, "virtual_stages", 1, big) : 1;
  echo_enum(&r, "precision", parse_prec, &e);
  c->precision = (gpu_precision)e;
  /* newer than the rest: before it, gradients were reduced in the compute precision */
  c->grad_reduce = c->precision == GPU_TF32 ? GPU_FP32 : c->precision;
  if (cJSON_GetObjectItemCaseSensitive(o, "grad_reduce_dtype")) {
    echo_enum(&r, "grad_reduce_dtype", parse_prec, &e);
    c->grad_reduce = e;
  }
  if ((v = echo_item(&r, "recompute", is_bool, "true or false"))) c->recompute = cJSON_IsTrue(v);
  /* newer than the rest: absent, recomputation was full or none as "recompute" says */
  if (cJSON_GetObjectItemCaseSensitive(o, "recompute_granularity")) {
    echo_enum(&r, "recompute_granularity", parse_granularity, &e);
    c->recompute = e == 2;
    c->recompute_selective = e == 1;
  }
  c->sequence_parallel = echo_new_bool(&r, "sequence_parallel");
  /* newer than the rest: absent, no context parallelism and the workload's sequence */
  c->cp = cJSON_GetObjectItemCaseSensitive(o, "cp") ? (int)echo_int(&r, "cp", 1, CFG_MAX_GPUS) : 1;
  if (cJSON_GetObjectItemCaseSensitive(o, "cp_style")) {
    echo_enum(&r, "cp_style", parse_cp_style, &e);
    c->cp_style = (cfg_cp_style)e;
  }
  c->seq_len = cJSON_GetObjectItemCaseSensitive(o, "seq_len")
                   ? echo_int(&r, "seq_len", 0, 1 << 24)
                   : 0;
  /* newer than the rest: a result or trace written before them has none (no sharding) */
  if (cJSON_GetObjectItemCaseSensitive(o, "zero")) c->zero = (int)echo_int(&r, "zero", 0, 3);
  if (cJSON_GetObjectItemCaseSensitive(o, "fsdp")) {
    echo_enum(&r, "fsdp", parse_fsdp, &e);
    c->fsdp = (cfg_fsdp)e;
  }
  if (cJSON_GetObjectItemCaseSensitive(o, "fsdp_shard_size"))
    c->fsdp_shard = (int)echo_int(&r, "fsdp_shard_size", 0, big);
  if ((s = echo_str(&r, "coll"))) {
    g_free(c->coll);
    c->coll = strcmp(s, "default") ? g_strdup(s) : NULL;
  }
  echo_enum(&r, "nccl_proto", nccl_proto_parse, &c->nccl_proto);
  if ((s = echo_str(&r, "kernels"))) {
    g_free(c->kernels);
    c->kernels = strcmp(s, "default") ? g_strdup(s) : NULL;
  }
  /* newer than the rest: a result or trace written before it has none (the platform's) */
  if (cJSON_GetObjectItemCaseSensitive(o, "gpu") && (s = echo_str(&r, "gpu"))) {
    g_free(c->gpu);
    c->gpu = strcmp(s, "platform") ? g_strdup(s) : NULL;
  }
  if ((v = echo_item(&r, "bucket_bytes", is_num, "a number"))) c->bucket_bytes = v->valuedouble;
  c->iters = (int)echo_int(&r, "iters", 1, big);
  if ((v = echo_item(&r, "pp_balance", is_array, "a list"))) {
    g_free(c->pp_balance);
    c->n_pp_balance = cJSON_GetArraySize(v);
    c->pp_balance = g_new0(int, c->n_pp_balance + 1);
    for (int i = 0; i < c->n_pp_balance && r.ok; i++) {
      const cJSON *x = cJSON_GetArrayItem(v, i);
      if (!is_int(x) || x->valuedouble < 1 || x->valuedouble > big) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.pp_balance[%d]: expected a positive "
                    "layer count", what, i);
        r.ok = FALSE;
      } else {
        c->pp_balance[i] = (int)x->valuedouble;
      }
    }
    if (!c->n_pp_balance) g_clear_pointer(&c->pp_balance, g_free);
  }
  if (cJSON_HasObjectItem(o, "slow_gpus") && (s = echo_str(&r, "slow_gpus"))) { /* newer */
    g_free(c->slow_gpus);
    c->slow_gpus = strcmp(s, "none") ? g_strdup(s) : NULL;
  }
  if (cJSON_HasObjectItem(o, "samples")) /* newer */
    c->samples = (int)echo_int(&r, "samples", 0, CFG_MAX_SAMPLES);
  if (cJSON_HasObjectItem(o, "net_jitter_s") &&
      (v = echo_item(&r, "net_jitter_s", is_num, "a number of seconds"))) {
    c->net_jitter_s = v->valuedouble;
    if (!(c->net_jitter_s >= 0 && c->net_jitter_s <= 1)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.net_jitter_s: expected 0..1 s",
                  what);
      r.ok = FALSE;
    }
  }
  if (r.ok && cJSON_HasObjectItem(o, "degrade") && (s = echo_str(&r, "degrade")) && /* newer */
      !cfg_degrade_parse(c, s, NULL)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.degrade: expected LINK:F,..., "
                "nics:FRACTION:F or none, got '%s'", what, s);
    r.ok = FALSE;
  }
  if ((s = echo_str(&r, "routing"))) {
    g_free(c->routing);
    c->routing = strcmp(s, "uniform") ? g_strdup(s) : NULL;
    c->routing_zipf_s = g_str_has_prefix(s, "zipf:") ? g_ascii_strtod(s + 5, NULL) : 0;
  }
  if ((v = echo_item(&r, "routing_weights", is_array, "a list"))) {
    g_free(c->routing_weights);
    c->n_routing_weights = cJSON_GetArraySize(v);
    c->routing_weights = g_new0(double, c->n_routing_weights + 1);
    for (int i = 0; i < c->n_routing_weights && r.ok; i++) {
      const cJSON *x = cJSON_GetArrayItem(v, i);
      if (!is_num(x) || x->valuedouble < 0) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.routing_weights[%d]: expected a "
                    "non-negative number", what, i);
        r.ok = FALSE;
      } else {
        c->routing_weights[i] = x->valuedouble;
      }
    }
    if (!c->n_routing_weights) g_clear_pointer(&c->routing_weights, g_free);
  }
  if ((v = echo_item(&r, "capacity_factor", is_num, "a number")))
    c->capacity_factor = v->valuedouble;
  c->seed = (unsigned)echo_int(&r, "seed", 0, G_MAXUINT32);
  if ((v = echo_item(&r, "kernels_any_device", is_bool, "true or false")))
    c->kernels_any_device = cJSON_IsTrue(v);
  if ((v = echo_item(&r, "ignore_memory", is_bool, "true or false")))
    c->ignore_memory = cJSON_IsTrue(v);
  if ((v = echo_item(&r, "message_level", is_bool, "true or false")))
    c->message_level = cJSON_IsTrue(v);
  if ((v = echo_item(&r, "no_folding", is_bool, "true or false")))
    c->no_folding = cJSON_IsTrue(v);
  if ((v = echo_item(&r, "simgrid_cfg", is_array, "a list"))) {
    g_strfreev(c->simgrid_cfg);
    const int n = cJSON_GetArraySize(v);
    c->simgrid_cfg = n ? g_new0(char *, n + 1) : NULL;
    for (int i = 0; i < n && r.ok; i++) {
      const cJSON *x = cJSON_GetArrayItem(v, i);
      char *why = NULL;
      const char *one[] = {cJSON_IsString(x) ? x->valuestring : "", NULL};
      if (!cfg_simgrid_items_ok((char **)one, &why)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: config.simgrid_cfg[%d]: %s", what, i, why);
        g_free(why);
        r.ok = FALSE;
      } else {
        c->simgrid_cfg[i] = g_strdup(x->valuestring);
      }
    }
  }
  echo_enum(&r, "mode", parse_mode, &e);
  c->mode = (cfg_mode)e;
  /* newer than the rest: a result written before it has none (the CPU) */
  if (cJSON_GetObjectItemCaseSensitive(o, "device")) {
    e = CFG_DEVICE_CPU;
    echo_enum(&r, "device", parse_device, &e);
    c->device = (cfg_device)e;
  }
  if ((v = echo_item(&r, "reproducible", is_bool, "true or false")))
    c->reproducible = cJSON_IsTrue(v);
  return r.ok;
}

gboolean cfg_simgrid_items_ok(char **items, char **why) {
  for (int i = 0; items && items[i]; i++) {
    const char *s = items[i], *colon = strchr(s, ':');
    gboolean ok = colon && colon > s && colon[1];
    /* no line breaks anywhere (each item is one argument), no blanks in the key */
    for (const char *p = s; ok && *p; p++)
      ok = *p != '\n' && *p != '\r' && (p > colon || !g_ascii_isspace(*p));
    if (!ok) {
      *why = g_strdup_printf("--simgrid-cfg '%s': expected KEY:VALUE, a SimGrid setting such as "
                             "network/model:CM02 or smpi/bw-factor:65472:0.94", s);
      return FALSE;
    }
    /* the simulated ranks and GPU streams share the run's state (op lists, kernel times) and
     * must run one at a time */
    if (g_str_has_prefix(s, "contexts/nthreads:") && strcmp(colon + 1, "1") != 0) {
      *why = g_strdup_printf("--simgrid-cfg '%s': dlsim's simulated ranks share the run's state "
                             "and run one at a time (contexts/nthreads:1, the default)", s);
      return FALSE;
    }
    /* two tracing options SimGrid would stop on, said before the run rather than after */
    const gboolean on = g_ascii_strcasecmp(colon + 1, "yes") == 0 ||
                        g_ascii_strcasecmp(colon + 1, "on") == 0 ||
                        g_ascii_strcasecmp(colon + 1, "true") == 0 || strcmp(colon + 1, "1") == 0;
    if (on && g_str_has_prefix(s, "tracing/smpi/computing:")) {
      *why = g_strdup_printf("--simgrid-cfg '%s': SMPI traces computation per MPI rank, and dlsim "
                             "runs each GPU's kernels on a compute-stream actor beside its rank "
                             "(SimGrid stops: container not found); tracing/smpi without it "
                             "traces the MPI calls, and --trace writes the kernels", s);
      return FALSE;
    }
    if (on && g_str_has_prefix(s, "tracing/smpi/group:")) {
      *why = g_strdup_printf("--simgrid-cfg '%s': SimGrid 3.32 stops in its group tracing "
                             "(\"dynar is not that long\"); tracing/smpi without it works", s);
      return FALSE;
    }
  }
  return TRUE;
}

/* One item of --slow-gpus: *random TRUE for random:FRACTION:F (*a the fraction), else R:F (*a
 * the rank); FALSE when malformed. */
static gboolean slow_item(const char *item, gboolean *random, double *a, double *f) {
  gchar **p = g_strsplit(item, ":", -1);
  const guint n = g_strv_length(p);
  *random = n == 3 && strcmp(p[0], "random") == 0;
  gboolean ok = n == 2 || *random;
  char *end = NULL;
  if (ok) {
    const char *x = p[*random ? 1 : 0], *y = p[*random ? 2 : 1];
    *a = g_ascii_strtod(x, &end);
    ok = end != x && !*end && isfinite(*a) && !strpbrk(x, "xX");
    if (ok && !*random) /* a rank: decimal digits */
      for (const char *d = x; *d && ok; d++) ok = g_ascii_isdigit(*d);
    *f = ok ? g_ascii_strtod(y, &end) : 0;
    ok = ok && end != y && !*end && isfinite(*f) && !strpbrk(y, "xX") && *f >= CFG_SLOW_MIN &&
         *f <= CFG_SLOW_MAX && (*random ? *a > 0 && *a <= 1 : *a >= 0 && *a < CFG_MAX_GPUS);
  }
  g_strfreev(p);
  return ok;
}

gboolean cfg_slow_parse(cfg_run *c, const char *text, GError **err) {
  if (strcmp(text, "none") == 0) { /* as the configuration echo spells no stragglers */
    g_clear_pointer(&c->slow_gpus, g_free);
    return TRUE;
  }
  gchar **items = g_strsplit(text, ",", -1);
  gboolean ok = items[0] != NULL;
  for (int i = 0; items[i] && ok; i++) {
    gboolean random;
    double a, f;
    ok = slow_item(items[i], &random, &a, &f);
  }
  g_strfreev(items);
  if (!ok) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--slow-gpus %s: expected R:F,... (rank R's kernels F times as long) or "
                "random:FRACTION:F, with %g <= F <= %g and 0 < FRACTION <= 1", text, CFG_SLOW_MIN,
                CFG_SLOW_MAX);
    return FALSE;
  }
  g_free(c->slow_gpus);
  c->slow_gpus = g_strdup(text);
  return TRUE;
}

double *cfg_slow_factors(const cfg_run *c, gboolean *ok, GError **err) {
  *ok = TRUE;
  if (!c->slow_gpus) return NULL;
  const int P = c->gpus;
  double *f = g_new(double, P);
  for (int r = 0; r < P; r++) f[r] = 1;
  gchar **items = g_strsplit(c->slow_gpus, ",", -1);
  int *order = g_new(int, P);
  for (int i = 0; items[i] && *ok; i++) {
    gboolean random;
    double a, x;
    if (!slow_item(items[i], &random, &a, &x)) continue; /* checked by cfg_slow_parse */
    if (!random) {
      if ((int)a >= P) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--slow-gpus %s: rank %d is not below --gpus %d",
                    c->slow_gpus, (int)a, P);
        *ok = FALSE;
      } else {
        f[(int)a] *= x;
      }
      continue;
    }
    /* the first round(a·P) ranks of a shuffle seeded by --seed and the item's place */
    cfg_shuffle(c->seed, (guint64)i, order, P);
    const int k = (int)lround(a * P);
    for (int r = 0; r < k; r++) f[order[r]] *= x;
  }
  g_free(order);
  g_strfreev(items);
  /* a rank named or drawn more than once takes the product of its factors, held to the range
   * one factor has */
  for (int r = 0; r < P && *ok; r++)
    if (!(f[r] >= CFG_SLOW_MIN && f[r] <= CFG_SLOW_MAX)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--slow-gpus %s: rank %d's factors multiply to "
                  "%g, outside %g to %g", c->slow_gpus, r, f[r], CFG_SLOW_MIN, CFG_SLOW_MAX);
      *ok = FALSE;
    }
  if (!*ok) g_clear_pointer(&f, g_free);
  return f;
}

void cfg_shuffle(unsigned seed, guint64 salt, int *order, int n) {
  guint64 st = ((guint64)seed << 20) ^ salt;
  for (int r = 0; r < n; r++) order[r] = r;
  for (int r = n - 1; r > 0; r--) {
    const guint64 z = cfg_splitmix64(&st);
    const int j = (int)(z % (guint64)(r + 1)), t = order[r];
    order[r] = order[j], order[j] = t;
  }
}

/* One item of --degrade (see cfg_degrade_item); FALSE when malformed. */
static gboolean degrade_item(const char *item, char **link, gboolean *nics, double *fraction,
                             double *f) {
  const char *colon = strrchr(item, ':');
  *link = NULL;
  *nics = g_str_has_prefix(item, "nics:");
  if (!colon || colon == item) return FALSE;
  char *end = NULL;
  *f = g_ascii_strtod(colon + 1, &end);
  if (end == colon + 1 || *end || !isfinite(*f) || strpbrk(colon + 1, "xX") ||
      *f < CFG_DEGRADE_MIN || *f > CFG_DEGRADE_MAX)
    return FALSE;
  if (*nics) {
    const char *x = item + 5;
    if (colon != strchr(x, ':')) return FALSE; /* nics:FRACTION:F, nothing more */
    *fraction = g_ascii_strtod(x, &end);
    return end == colon && isfinite(*fraction) && !strpbrk(x, "xX") && *fraction > 0 &&
           *fraction <= 1;
  }
  *link = g_strndup(item, (gsize)(colon - item));
  return TRUE;
}

gboolean cfg_degrade_parse(cfg_run *c, const char *text, GError **err) {
  if (strcmp(text, "none") == 0) {
    g_clear_pointer(&c->degrade, g_free);
    return TRUE;
  }
  gchar **items = g_strsplit(text, ",", -1);
  gboolean ok = items[0] != NULL;
  for (int i = 0; items[i] && ok; i++) {
    char *link;
    gboolean nics;
    double a, f;
    ok = degrade_item(items[i], &link, &nics, &a, &f);
    g_free(link);
  }
  g_strfreev(items);
  if (!ok) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--degrade %s: expected LINK:F,... (the platform's link LINK at F times its "
                "bandwidth) or nics:FRACTION:F, with %g <= F <= %g and 0 < FRACTION <= 1",
                text, CFG_DEGRADE_MIN, CFG_DEGRADE_MAX);
    return FALSE;
  }
  g_free(c->degrade);
  c->degrade = g_strdup(text);
  return TRUE;
}

gboolean cfg_degrade_item(const cfg_run *c, int i, char **link, gboolean *nics, double *fraction,
                          double *f) {
  if (!c->degrade) return FALSE;
  gchar **items = g_strsplit(c->degrade, ",", -1);
  const gboolean ok = i < (int)g_strv_length(items) && degrade_item(items[i], link, nics,
                                                                   fraction, f);
  g_strfreev(items);
  return ok;
}

const char *cfg_whatif_option(const cfg_run *c, gboolean stragglers) {
  return c->degrade               ? "--degrade"
         : stragglers && c->slow_gpus ? "--slow-gpus"
         : c->samples             ? "--samples"
         : c->net_jitter_s > 0    ? "--net-jitter"
                                  : NULL;
}

gboolean cfg_routing_parse(cfg_run *c, const char *text, GError **err) {
  g_free(c->routing);
  c->routing = g_strdup(text);
  c->routing_zipf_s = 0;
  g_clear_pointer(&c->routing_weights, g_free);
  c->n_routing_weights = 0;
  if (strcmp(text, "uniform") == 0) return TRUE;
  if (g_str_has_prefix(text, "zipf:")) {
    char *end = NULL;
    double s = g_ascii_strtod(text + 5, &end);
    if (end != text + 5 && *end == '\0' && s > 0 && s <= 10) {
      c->routing_zipf_s = s;
      return TRUE;
    }
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--routing %s: expected zipf:S with 0 < S <= 10",
                text);
    return FALSE;
  }
  if (g_str_has_prefix(text, "file:")) {
    const char *path = text + 5;
    gsize len;
    char *data = dl_read_file(path, &len, err);
    if (!data) {
      g_prefix_error(err, "--routing: ");
      return FALSE;
    }
    cJSON *j = dl_json_parse(path, data, len, err);
    g_free(data);
    if (!j) return FALSE;
    int n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : 0;
    gboolean ok = n > 0;
    double total = 0;
    c->routing_weights = g_new0(double, n > 0 ? n : 1);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
      ok = ok && cJSON_IsNumber(v) && v->valuedouble >= 0;
      if (!ok) break;
      c->routing_weights[i++] = v->valuedouble;
      total += v->valuedouble;
    }
    ok = ok && isfinite(total);
    cJSON_Delete(j);
    if (!ok || total <= 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--routing %s: %s: expected a JSON list of non-negative expert weights, not all "
                  "zero", text, path);
      return FALSE;
    }
    c->n_routing_weights = n;
    return TRUE;
  }
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "--routing: expected uniform, zipf:S or file:F, got '%s'", text);
  return FALSE;
}
