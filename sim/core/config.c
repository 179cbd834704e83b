/* config.c — defaults, enum names and validation of a run's configuration. */
#include "core/config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/dl_common.h"

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
ENUM_NAMES(CFG_SCHEDULES, cfg_schedule_name, cfg_schedule)
ENUM_NAMES(CFG_TP_STYLES, cfg_tp_style_name, cfg_tp_style)

static gboolean parse_name(const char *const *names, size_t n, const char *text, int *out) {
  for (size_t i = 0; i < n; i++)
    if (text && strcmp(text, names[i]) == 0) {
      *out = (int)i;
      return TRUE;
    }
  return FALSE;
}

gboolean cfg_mode_parse(const char *text, cfg_mode *out) {
  int v;
  if (!parse_name(cfg_mode_name_names, G_N_ELEMENTS(cfg_mode_name_names), text, &v)) return FALSE;
  *out = (cfg_mode)v;
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
  c->precision = GS_FP32;
  c->mode = CFG_MODE_SIM;
  c->iters = 3;
  c->bucket_bytes = 25.0 * 1024 * 1024; /* PyTorch DDP bucket_cap_mb = 25 (MiB) */
  c->seed = 1;
  c->capacity_factor = -1;
}

void cfg_release(cfg_run *c) {
  g_free(c->platform);
  g_free(c->workload);
  g_free(c->coll);
  g_free(c->kernels);
  g_free(c->out);
  g_free(c->trace);
  g_free(c->dump_weights);
  g_free(c->pp_balance);
  g_free(c->routing);
  g_free(c->routing_weights);
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
  if (c->gpus < 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus: expected a positive number of GPUs, got %d",
                c->gpus);
    return FALSE;
  }
  if (c->dp < 0 || c->tp < 0 || c->pp < 0 || c->ep < 0 || c->microbatches < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--dp/--tp/--pp/--ep/--microbatches: expected positive integers");
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
  if (c->grid_auto) {
    if (c->tp || c->dp || c->pp > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--grid auto: searches Pr x Pc = --gpus itself; leave out --dp/--tp/--pp");
      return FALSE;
    }
  }
  if (!c->dp) {
    if (c->gpus % (tp * pp)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--gpus %d: not divisible by tp x pp = %d x %d; choose degrees whose product "
                  "divides the GPU count",
                  c->gpus, tp, pp);
      return FALSE;
    }
    c->dp = c->gpus / (tp * pp);
  }
  c->tp = tp;
  c->pp = pp;
  if ((long)c->dp * c->tp * c->pp != c->gpus) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--dp %d --tp %d --pp %d: the degrees multiply to %ld, not --gpus %d", c->dp, c->tp,
                c->pp, (long)c->dp * c->tp * c->pp, c->gpus);
    return FALSE;
  }
  if (!c->ep) c->ep = 1;
  if ((c->dp * c->tp) % c->ep) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ep %d: must divide dp x tp = %d", c->ep,
                c->dp * c->tp);
    return FALSE;
  }
  if (!c->microbatches) c->microbatches = c->pp > 1 ? c->pp : 1;
  if (c->n_pp_balance && c->n_pp_balance != c->pp) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--pp-balance: %d stage sizes for --pp %d",
                c->n_pp_balance, c->pp);
    return FALSE;
  }
  if (c->batch == 0) c->batch = default_batch;
  if (c->batch < 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--batch: expected a positive number of samples, got %ld",
                c->batch);
    return FALSE;
  }
  long shards = (long)(c->grid_auto ? 1 : c->dp) * c->microbatches;
  if (c->batch % shards) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--batch %ld: not divisible by dp x microbatches = %d x %d; use a multiple of %ld",
                c->batch, c->grid_auto ? 1 : c->dp, c->microbatches, shards);
    return FALSE;
  }
  if (c->iters < 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--iters: expected at least 1, got %d", c->iters);
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
  cJSON_AddStringToObject(cf, "precision", gs_precision_name(c->precision));
  cJSON_AddBoolToObject(cf, "recompute", c->recompute);
  cJSON_AddStringToObject(cf, "coll", c->coll ? c->coll : "default");
  cJSON_AddStringToObject(cf, "kernels", c->kernels ? c->kernels : "default");
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
  cJSON_AddStringToObject(cf, "mode", cfg_mode_name(c->mode));
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
static gboolean parse_sched(const char *t, int *v) {
  return cfg_schedule_parse(t, (cfg_schedule *)v);
}
static gboolean parse_style(const char *t, int *v) {
  return cfg_tp_style_parse(t, (cfg_tp_style *)v);
}
static gboolean parse_prec(const char *t, int *v) {
  return gs_precision_parse(t, (gs_precision *)v);
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
  echo_enum(&r, "precision", parse_prec, &e);
  c->precision = (gs_precision)e;
  if ((v = echo_item(&r, "recompute", is_bool, "true or false"))) c->recompute = cJSON_IsTrue(v);
  if ((s = echo_str(&r, "coll"))) {
    g_free(c->coll);
    c->coll = strcmp(s, "default") ? g_strdup(s) : NULL;
  }
  if ((s = echo_str(&r, "kernels"))) {
    g_free(c->kernels);
    c->kernels = strcmp(s, "default") ? g_strdup(s) : NULL;
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
  if ((v = echo_item(&r, "capacity_factor", is_num, "a number"))) c->capacity_factor = v->valuedouble;
  c->seed = (unsigned)echo_int(&r, "seed", 0, G_MAXUINT32);
  if ((v = echo_item(&r, "ignore_memory", is_bool, "true or false"))) c->ignore_memory = cJSON_IsTrue(v);
  echo_enum(&r, "mode", parse_mode, &e);
  c->mode = (cfg_mode)e;
  if ((v = echo_item(&r, "reproducible", is_bool, "true or false"))) c->reproducible = cJSON_IsTrue(v);
  return r.ok;
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
    if (!data) return FALSE;
    cJSON *j = cJSON_Parse(data);
    g_free(data);
    int n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : 0;
    gboolean ok = n > 0;
    double total = 0;
    c->routing_weights = g_new0(double, n > 0 ? n : 1);
    for (int i = 0; i < n && ok; i++) {
      cJSON *v = cJSON_GetArrayItem(j, i);
      ok = cJSON_IsNumber(v) && v->valuedouble >= 0;
      if (ok) c->routing_weights[i] = v->valuedouble, total += v->valuedouble;
    }
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

/* ---- command-line options ------------------------------------------------------------------ */

typedef struct {
  char *mode, *precision, *schedule, *tp_style, *grid, *grid_layers, *domain, *platform, *workload,
      *coll, *kernels, *out, *trace, *pp_balance, *dump_weights, *routing;
  gint64 seed;
  double bucket_mb;
  int gpus;
  gint64 batch;
} raw_opts;

static void raw_release(raw_opts *r) {
  g_free(r->mode);
  g_free(r->precision);
  g_free(r->schedule);
  g_free(r->tp_style);
  g_free(r->grid);
  g_free(r->grid_layers);
  g_free(r->domain);
  g_free(r->platform);
  g_free(r->workload);
  g_free(r->coll);
  g_free(r->kernels);
  g_free(r->out);
  g_free(r->trace);
  g_free(r->pp_balance);
  g_free(r->routing);
  g_free(r->dump_weights);
}

gboolean cfg_parse_args(cfg_run *c, int *argc, char ***argv, GError **err) {
  raw_opts r;
  memset(&r, 0, sizeof r);
  r.gpus = -1;
  r.seed = -1;
  GOptionEntry entries[] = {
      {"platform", 0, 0, G_OPTION_ARG_STRING, &r.platform,
       "platform name under platforms/ (thetagpu) or a SimGrid XML file", "NAME|FILE"},
      {"workload", 0, 0, G_OPTION_ARG_STRING, &r.workload,
       "workload name under workloads/ (resnet18-cifar100) or a JSON file", "NAME|FILE"},
      {"gpus", 0, 0, G_OPTION_ARG_INT, &r.gpus, "number of GPUs = MPI ranks (default 8)", "P"},
      {"batch", 0, 0, G_OPTION_ARG_INT64, &r.batch,
       "global mini-batch in samples (default: the workload's)", "B"},
      {"dp", 0, 0, G_OPTION_ARG_INT, &c->dp, "data-parallel degree (default: what is left)", "N"},
      {"tp", 0, 0, G_OPTION_ARG_INT, &c->tp, "tensor/model-parallel degree (Gholami's Pr)", "N"},
      {"pp", 0, 0, G_OPTION_ARG_INT, &c->pp, "pipeline-parallel degree", "N"},
      {"ep", 0, 0, G_OPTION_ARG_INT, &c->ep, "expert-parallel degree (divides dp x tp)", "N"},
      {"grid", 0, 0, G_OPTION_ARG_STRING, &r.grid,
       "Gholami's integrated grid: Pr (model) x Pc (batch), or auto to search all", "PrxPc|auto"},
      {"grid-layers", 0, 0, G_OPTION_ARG_STRING, &r.grid_layers,
       "with --grid: all (default), or fc (conv layers batch-parallel over all P)", "all|fc"},
      {"domain", 0, 0, G_OPTION_ARG_STRING, &r.domain,
       "with --grid: conv = Pr splits the image in convolution layers", "conv|none"},
      {"tp-style", 0, 0, G_OPTION_ARG_STRING, &r.tp_style,
       "how layers split across tp/Pr (default auto: megatron for transformers, gholami "
       "otherwise)", "gholami|megatron|auto"},
      {"schedule", 0, 0, G_OPTION_ARG_STRING, &r.schedule, "pipeline schedule (default gpipe)",
       "gpipe|1f1b"},
      {"microbatches", 0, 0, G_OPTION_ARG_INT, &c->microbatches, "pipeline micro-batches", "M"},
      {"pp-balance", 0, 0, G_OPTION_ARG_STRING, &r.pp_balance,
       "layers per pipeline stage (default: balanced by predicted time)", "N,N,..."},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &r.precision,
       "compute precision (default fp32; fp16/bf16 = mixed precision)", "fp32|tf32|fp16|bf16"},
      {"recompute", 0, 0, G_OPTION_ARG_NONE, &c->recompute,
       "full activation recomputation in backward", NULL},
      {"coll", 0, 0, G_OPTION_ARG_STRING, &r.coll,
       "collective algorithm: ring, tree, hier, rhd (default: NCCL-like choice per call)", "NAME"},
      {"kernels", 0, 0, G_OPTION_ARG_STRING, &r.kernels,
       "kernel database (default: roofline from the platform GPU's spec sheet)", "NAME|FILE"},
      {"mode", 0, 0, G_OPTION_ARG_STRING, &r.mode, "sim (default), real or analytic",
       "sim|real|analytic"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &c->iters,
       "iterations to run (default 3; steady state excludes the first)", "K"},
      {"bucket-mb", 0, 0, G_OPTION_ARG_DOUBLE, &r.bucket_mb,
       "data-parallel gradient bucket size in MiB (default 25, as PyTorch DDP)", "MB"},
      {"out", 0, 0, G_OPTION_ARG_FILENAME, &r.out, "write the result JSON here", "FILE"},
      {"trace", 0, 0, G_OPTION_ARG_FILENAME, &r.trace, "write a Chrome trace-event timeline",
       "FILE"},
      {"dump-weights", 0, 0, G_OPTION_ARG_FILENAME, &r.dump_weights,
       "with --mode real: write every parameter after the last step (serial layout)", "FILE"},
      {"routing", 0, 0, G_OPTION_ARG_STRING, &r.routing,
       "MoE routing: uniform (default), zipf:S (expert popularity ~ 1/rank^S), or file:F (a JSON "
       "list of E expert weights)", "uniform|zipf:S|file:F"},
      {"capacity-factor", 0, 0, G_OPTION_ARG_DOUBLE, &c->capacity_factor,
       "MoE expert capacity factor (default: the workload's; 0 = unlimited, nothing dropped)", "F"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &r.seed,
       "seed of the routing (which experts are hot) and of the real flavour's data (default 1)",
       "N"},
      {"ignore-memory", 0, 0, G_OPTION_ARG_NONE, &c->ignore_memory,
       "go on when the model does not fit in GPU memory (fits_in_memory: false)", NULL},
      {"reproducible", 0, 0, G_OPTION_ARG_NONE, &c->reproducible,
       "write host-dependent figures (simulation.wall_s) as 0, for byte-identical results", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionContext *ctx = g_option_context_new("- predict one training configuration");
  g_option_context_set_summary(
      ctx, "Runs one configuration in simulation (SMPI), for real, or in closed form, and prints\n"
           "a summary; --out writes the result JSON (see INTERFACE.md).");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *e = NULL;
  gboolean ok = FALSE;
  if (!g_option_context_parse(ctx, argc, argv, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "run: %s", e->message);
    g_error_free(e);
    goto out;
  }
  if (*argc > 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "run: unexpected argument '%s' (see dlsim run --help)",
                (*argv)[1]);
    goto out;
  }
  set_str(&c->platform, r.platform);
  if (!r.platform && r.gpus > 192) {
    /* the default platform is ThetaGPU (24 nodes of 8 GPUs); past it, the same nodes and network
     * with as many nodes as the GPUs need */
    g_free(c->platform);
    c->platform = g_strdup_printf("thetagpu:%d", (r.gpus + 7) / 8);
  }
  set_str(&c->workload, r.workload);
  set_str(&c->coll, r.coll);
  set_str(&c->kernels, r.kernels);
  set_str(&c->out, r.out);
  set_str(&c->trace, r.trace);
  set_str(&c->dump_weights, r.dump_weights);
  if (r.gpus != -1) c->gpus = r.gpus;
  if (r.batch < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--batch: expected a positive number of samples, got %" G_GINT64_FORMAT, r.batch);
    goto out;
  }
  c->batch = (long)r.batch;
  if (r.bucket_mb != 0) c->bucket_bytes = r.bucket_mb * 1024 * 1024;
  if (r.mode && !cfg_mode_parse(r.mode, &c->mode)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode: expected sim, real or analytic, got '%s'",
                r.mode);
    goto out;
  }
  if (r.precision && !gs_precision_parse(r.precision, &c->precision)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--precision: expected fp32, tf32, fp16 or bf16, got '%s'", r.precision);
    goto out;
  }
  if (r.schedule && !cfg_schedule_parse(r.schedule, &c->schedule)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--schedule: expected gpipe or 1f1b, got '%s'",
                r.schedule);
    goto out;
  }
  if (r.tp_style && !cfg_tp_style_parse(r.tp_style, &c->tp_style)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--tp-style: expected gholami, megatron or auto, got '%s'",
                r.tp_style);
    goto out;
  }
  if (r.grid && !cfg_grid_parse(c, r.grid, err)) goto out;
  if (r.seed != -1) {
    if (r.seed < 0 || r.seed > G_MAXUINT32) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--seed: expected 0..%u, got %" G_GINT64_FORMAT,
                  G_MAXUINT32, r.seed);
      goto out;
    }
    c->seed = (unsigned)r.seed;
  }
  if (r.routing && !cfg_routing_parse(c, r.routing, err)) goto out;
  if (c->capacity_factor < 0 && c->capacity_factor != -1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--capacity-factor: expected a factor >= 0 (0 = unlimited), got %g",
                c->capacity_factor);
    goto out;
  }
  if (r.pp_balance) {
    char **parts = g_strsplit(r.pp_balance, ",", -1);
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
                  r.pp_balance);
      goto out;
    }
  }
  if (r.grid_layers) {
    if (strcmp(r.grid_layers, "fc") == 0) c->grid_fc_only = TRUE;
    else if (strcmp(r.grid_layers, "all") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grid-layers: expected all or fc, got '%s'",
                  r.grid_layers);
      goto out;
    }
  }
  if (r.domain) {
    if (strcmp(r.domain, "conv") == 0) c->domain_conv = TRUE;
    else if (strcmp(r.domain, "none") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--domain: expected conv or none, got '%s'",
                  r.domain);
      goto out;
    }
  }
  if ((c->grid_fc_only || c->domain_conv) && !r.grid && c->tp <= 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--grid-layers/--domain: only apply with --grid");
    goto out;
  }
  ok = TRUE;
out:
  raw_release(&r);
  g_option_context_free(ctx);
  return ok;
}

char **cfg_to_args(const cfg_run *c) {
  GPtrArray *a = g_ptr_array_new();
#define ARG(k, ...) (g_ptr_array_add(a, g_strdup(k)), g_ptr_array_add(a, g_strdup_printf(__VA_ARGS__)))
  ARG("--platform", "%s", c->platform);
  ARG("--workload", "%s", c->workload);
  ARG("--gpus", "%d", c->gpus);
  ARG("--batch", "%ld", c->batch);
  ARG("--dp", "%d", c->dp);
  ARG("--tp", "%d", c->tp);
  ARG("--pp", "%d", c->pp);
  ARG("--ep", "%d", c->ep);
  if (c->grid_pr > 0) ARG("--grid", "%dx%d", c->grid_pr, c->grid_pc);
  if (c->grid_fc_only) ARG("--grid-layers", "fc");
  if (c->domain_conv) ARG("--domain", "conv");
  ARG("--tp-style", "%s", cfg_tp_style_name(c->tp_style));
  ARG("--schedule", "%s", cfg_schedule_name(c->schedule));
  ARG("--microbatches", "%d", c->microbatches);
  if (c->n_pp_balance) {
    GString *s = g_string_new(NULL);
    for (int i = 0; i < c->n_pp_balance; i++) g_string_append_printf(s, "%s%d", i ? "," : "", c->pp_balance[i]);
    ARG("--pp-balance", "%s", s->str);
    g_string_free(s, TRUE);
  }
  ARG("--precision", "%s", gs_precision_name(c->precision));
  if (c->coll) ARG("--coll", "%s", c->coll);
  if (c->kernels) ARG("--kernels", "%s", c->kernels);
  ARG("--mode", "%s", cfg_mode_name(c->mode));
  ARG("--iters", "%d", c->iters);
  /* bucket size in MiB, printed exactly (%.17g round-trips a double) */
  ARG("--bucket-mb", "%.17g", c->bucket_bytes / (1024.0 * 1024.0));
  if (c->dump_weights) ARG("--dump-weights", "%s", c->dump_weights);
#undef ARG
  if (c->recompute) g_ptr_array_add(a, g_strdup("--recompute"));
  if (c->ignore_memory) g_ptr_array_add(a, g_strdup("--ignore-memory"));
  if (c->routing) {
    g_ptr_array_add(a, g_strdup("--routing"));
    g_ptr_array_add(a, g_strdup(c->routing));
  }
  if (c->capacity_factor >= 0) {
    g_ptr_array_add(a, g_strdup("--capacity-factor"));
    g_ptr_array_add(a, g_strdup_printf("%.17g", c->capacity_factor));
  }
  g_ptr_array_add(a, g_strdup("--seed"));
  g_ptr_array_add(a, g_strdup_printf("%u", c->seed));
  if (c->reproducible) g_ptr_array_add(a, g_strdup("--reproducible"));
  g_ptr_array_add(a, NULL);
  return (char **)g_ptr_array_free(a, FALSE);
}
