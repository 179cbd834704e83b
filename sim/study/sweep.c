/* sweep.c — spec expansion, row formatting and the resumable CSV/JSONL store of `dlsim sweep`
 * (contracts in sweep.h). */
#include "study/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"

/* ---- the options a spec may set ----------------------------------------------------------- */

typedef enum { SWEEP_STR, SWEEP_INT, SWEEP_NUM, SWEEP_BOOL } sweep_type;

typedef struct {
  const char *name; /* spec spelling (underscores; dashes are accepted too) */
  const char *flag; /* `dlsim run` option, NULL = expanded into another (batch_per_gpu) */
  sweep_type type;     /* JSON type expected */
} sweep_option;

/* The order of this table is the order of options in keys and argument lists. */
static const sweep_option options[] = {
    {"platform", "--platform", SWEEP_STR},   {"workload", "--workload", SWEEP_STR},
    {"mode", "--mode", SWEEP_STR},           {"gpus", "--gpus", SWEEP_INT},
    {"batch", "--batch", SWEEP_INT},         {"batch_per_gpu", NULL, SWEEP_INT},
    {"dp", "--dp", SWEEP_INT},               {"tp", "--tp", SWEEP_INT},
    {"pp", "--pp", SWEEP_INT},               {"ep", "--ep", SWEEP_INT},
    {"grid", "--grid", SWEEP_STR},           {"grid_layers", "--grid-layers", SWEEP_STR},
    {"domain", "--domain", SWEEP_STR},       {"tp_style", "--tp-style", SWEEP_STR},
    {"schedule", "--schedule", SWEEP_STR},   {"microbatches", "--microbatches", SWEEP_INT},
    {"precision", "--precision", SWEEP_STR}, {"recompute", "--recompute", SWEEP_BOOL},
    {"coll", "--coll", SWEEP_STR},           {"kernels", "--kernels", SWEEP_STR},
    {"iters", "--iters", SWEEP_INT},         {"bucket_mb", "--bucket-mb", SWEEP_NUM},
    {"ignore_memory", "--ignore-memory", SWEEP_BOOL},
    /* added later: at the end, so that the keys of earlier sweeps stay the same */
    {"pp_balance", "--pp-balance", SWEEP_STR}, {"routing", "--routing", SWEEP_STR},
    {"capacity_factor", "--capacity-factor", SWEEP_NUM}, {"seed", "--seed", SWEEP_INT},
    {"kernels_any_device", "--kernels-any-device", SWEEP_BOOL},
    {"message_level", "--message-level", SWEEP_BOOL},
    {"no_folding", "--no-folding", SWEEP_BOOL},
    {"gpu", "--gpu", SWEEP_STR},
    {"zero", "--zero", SWEEP_INT}, {"fsdp", "--fsdp", SWEEP_STR},
    {"fsdp_shard_size", "--fsdp-shard-size", SWEEP_INT},
    {"virtual_stages", "--virtual-stages", SWEEP_INT},
    {"grad_reduce_dtype", "--grad-reduce-dtype", SWEEP_STR},
    {"recompute_granularity", "--recompute-mode", SWEEP_STR},
    {"sequence_parallel", "--sequence-parallel", SWEEP_BOOL},
    {"cp", "--cp", SWEEP_INT}, {"cp_style", "--cp-style", SWEEP_STR},
    {"seq_len", "--seq-len", SWEEP_INT},
    /* the whole run (study/projection.h) */
    {"tokens", "--tokens", SWEEP_NUM}, {"epochs", "--epochs", SWEEP_NUM},
    {"failures", "--failures", SWEEP_STR}, {"ckpt", "--ckpt", SWEEP_STR},
    {"ckpt_interval", "--ckpt-interval", SWEEP_NUM}, {"ckpt_bw_node", "--ckpt-bw-node", SWEEP_NUM},
    {"ckpt_bw_total", "--ckpt-bw-total", SWEEP_NUM}, {"host_copy_bw", "--host-copy-bw", SWEEP_NUM},
    {"relaunch_s", "--relaunch-s", SWEEP_NUM}, {"warmup_iters", "--warmup-iters", SWEEP_INT},
    {"mc_samples", "--mc-samples", SWEEP_INT}, {"pue", "--pue", SWEEP_NUM},
    {"gpu_hour_price", "--gpu-hour-price", SWEEP_NUM}, {"kwh_price", "--kwh-price", SWEEP_NUM},
    {"slow_gpus", "--slow-gpus", SWEEP_STR}, {"degrade", "--degrade", SWEEP_STR},
    {"samples", "--samples", SWEEP_INT}, {"net_jitter", "--net-jitter", SWEEP_STR},
};
#define N_OPTS G_N_ELEMENTS(options)
enum { OPT_GPUS = 3, OPT_BATCH = 4, OPT_BATCH_PER_GPU = 5 };

static int option_find(const char *name) {
  char *n = g_strdelimit(g_strdup(name), "-", '_');
  int found = -1;
  for (guint i = 0; i < N_OPTS; i++)
    if (strcmp(options[i].name, n) == 0) found = (int)i;
  g_free(n);
  return found;
}

static char *known_options(void) {
  GString *s = g_string_new("");
  for (guint i = 0; i < N_OPTS; i++)
    g_string_append_printf(s, "%s%s", i ? ", " : "", options[i].name);
  return g_string_free(s, FALSE);
}

/* The text of a JSON value for option `o`, or NULL with an error naming `path`. */
static char *value_text(const sweep_option *o, const cJSON *v, const char *name, const char *path,
                        GError **err) {
  switch (o->type) {
  case SWEEP_STR:
    if (cJSON_IsString(v) && v->valuestring[0]) return g_strdup(v->valuestring);
    break;
  case SWEEP_INT:
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15)
      return g_strdup_printf("%.0f", v->valuedouble);
    break;
  case SWEEP_NUM:
    if (cJSON_IsNumber(v)) return g_strdup_printf("%.15g", v->valuedouble);
    break;
  case SWEEP_BOOL:
    if (cJSON_IsBool(v)) return g_strdup(cJSON_IsTrue(v) ? "true" : "false");
    break;
  }
  static const char *const expected[] = {"a non-empty string", "an integer", "a number",
                                         "true or false"};
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: expected %s", name, path, expected[o->type]);
  return NULL;
}

/* ---- expansion ------------------------------------------------------------------------------ */

typedef struct {
  int opt[N_OPTS];    /* options set by this choice, by index into options[] */
  char *text[N_OPTS]; /* their values */
  char *path[N_OPTS]; /* their JSON paths, for messages */
  int n;              /* how many */
  char *label;        /* object choices: its label; scalar choices: NULL */
} choice;

typedef struct {
  char *name;        /* "fixed" or "axes.NAME" */
  GPtrArray *values; /* choice* */
} axis;

static void choice_free(gpointer p) {
  choice *c = p;
  for (int i = 0; i < c->n; i++) {
    g_free(c->text[i]);
    g_free(c->path[i]);
  }
  g_free(c->label);
  g_free(c);
}

static void axis_free(gpointer p) {
  axis *a = p;
  g_free(a->name);
  g_ptr_array_unref(a->values);
  g_free(a);
}

static void config_free(gpointer p) {
  sweep_config *c = p;
  g_free(c->key);
  g_strfreev(c->args);
  g_free(c->label);
  for (guint i = 0; i < N_OPTS; i++) g_free(c->vals[i]);
  g_free(c->vals);
  g_free(c);
}

/* Adds option `oname` = `v` to `ch`. */
static gboolean choice_add(choice *ch, const char *oname, const cJSON *v, const char *name,
                           const char *path, GError **err) {
  int o = option_find(oname);
  if (o < 0) {
    char *known = known_options();
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: unknown option (known: %s)", name, path,
                known);
    g_free(known);
    return FALSE;
  }
  for (int i = 0; i < ch->n; i++)
    if (ch->opt[i] == o) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: option given twice", name, path);
      return FALSE;
    }
  char *t = value_text(&options[o], v, name, path, err);
  if (!t) return FALSE;
  ch->opt[ch->n] = o;
  ch->text[ch->n] = t;
  ch->path[ch->n] = g_strdup(path);
  ch->n++;
  return TRUE;
}

/* An object of options (fixed, or one value of an object axis). */
static choice *choice_from_object(const cJSON *obj, const char *name, const char *path,
                                  gboolean labelled, GError **err) {
  choice *ch = g_new0(choice, 1);
  GString *auto_label = g_string_new("");
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    char *p = g_strdup_printf("%s.%s", path, it->string);
    gboolean ok = TRUE;
    if (labelled && strcmp(it->string, "label") == 0) {
      if (!cJSON_IsString(it) || !it->valuestring[0]) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: expected a non-empty string", name, p);
        ok = FALSE;
      } else {
        g_free(ch->label);
        ch->label = g_strdup(it->valuestring);
      }
    } else if ((ok = choice_add(ch, it->string, it, name, p, err))) {
      g_string_append_printf(auto_label, "%s%s=%s", auto_label->len ? "," : "", it->string,
                             ch->text[ch->n - 1]);
    }
    g_free(p);
    if (!ok) {
      choice_free(ch);
      g_string_free(auto_label, TRUE);
      return NULL;
    }
  }
  if (labelled && !ch->label)
    ch->label = auto_label->len ? g_strdup(auto_label->str) : g_strdup("default");
  g_string_free(auto_label, TRUE);
  return ch;
}

static axis *axis_parse(const cJSON *arr, const char *name, GError **err) {
  axis *a = g_new0(axis, 1);
  a->name = g_strdup_printf("axes.%s", arr->string);
  a->values = g_ptr_array_new_with_free_func(choice_free);
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: expected a non-empty array of values", name,
                a->name);
    goto fail;
  }
  int i = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, arr) {
    char *p = g_strdup_printf("%s[%d]", a->name, i++);
    choice *ch;
    if (cJSON_IsObject(v)) {
      ch = choice_from_object(v, name, p, TRUE, err);
    } else {
      ch = g_new0(choice, 1);
      if (!choice_add(ch, arr->string, v, name, p, err)) {
        choice_free(ch);
        ch = NULL;
      }
    }
    g_free(p);
    if (!ch) goto fail;
    g_ptr_array_add(a->values, ch);
  }
  return a;
fail:
  axis_free(a);
  return NULL;
}

/* Builds the configuration of one combination (one choice per axis). */
static sweep_config *combine(GPtrArray *axes, const guint *pick, const char *name, GError **err) {
  char *vals[N_OPTS] = {0};
  const char *src[N_OPTS] = {0};
  GString *label = g_string_new("");
  sweep_config *cfg = NULL;
  for (guint a = 0; a < axes->len; a++) {
    const axis *ax = g_ptr_array_index(axes, a);
    const choice *ch = g_ptr_array_index(ax->values, pick[a]);
    for (int i = 0; i < ch->n; i++) {
      int o = ch->opt[i];
      if (vals[o]) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: '%s' is already set by %s", name,
                    ch->path[i], options[o].name, src[o]);
        goto out;
      }
      vals[o] = g_strdup(ch->text[i]);
      src[o] = ax->name;
    }
    if (ch->label) g_string_append_printf(label, "%s%s", label->len ? "/" : "", ch->label);
  }
  if (vals[OPT_BATCH_PER_GPU]) {
    if (vals[OPT_BATCH]) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: batch_per_gpu and batch (%s) both set",
                  name, src[OPT_BATCH_PER_GPU], src[OPT_BATCH]);
      goto out;
    }
    if (!vals[OPT_GPUS]) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: batch_per_gpu needs gpus to be set", name,
                  src[OPT_BATCH_PER_GPU]);
      goto out;
    }
    /* both are integers below 1e15 (value_text): their product is exact enough in double to
     * bound before it is formed as an integer */
    const gint64 bpg = g_ascii_strtoll(vals[OPT_BATCH_PER_GPU], NULL, 10),
                 gpus = g_ascii_strtoll(vals[OPT_GPUS], NULL, 10);
    if (bpg < 1 || gpus < 1 || (double)bpg * (double)gpus > (double)CFG_MAX_BATCH) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: batch_per_gpu %" G_GINT64_FORMAT
                  " x gpus %" G_GINT64_FORMAT " is not a batch of 1..%" G_GINT64_FORMAT
                  " samples", name, src[OPT_BATCH_PER_GPU], bpg, gpus, (gint64)CFG_MAX_BATCH);
      goto out;
    }
    vals[OPT_BATCH] = g_strdup_printf("%" G_GINT64_FORMAT, bpg * gpus);
  }
  cfg = g_new0(sweep_config, 1);
  GPtrArray *args = g_ptr_array_new();
  GString *key = g_string_new("");
  for (guint o = 0; o < N_OPTS; o++) {
    if (!vals[o] || !options[o].flag) continue;
    if (options[o].type == SWEEP_BOOL) {
      if (strcmp(vals[o], "true") != 0) continue;
      g_ptr_array_add(args, g_strdup(options[o].flag));
      g_string_append_printf(key, "%s%s", key->len ? " " : "", options[o].flag);
    } else {
      g_ptr_array_add(args, g_strdup(options[o].flag));
      g_ptr_array_add(args, g_strdup(vals[o]));
      g_string_append_printf(key, "%s%s %s", key->len ? " " : "", options[o].flag, vals[o]);
    }
  }
  g_ptr_array_add(args, NULL);
  cfg->args = (char **)g_ptr_array_free(args, FALSE);
  cfg->key = g_string_free(key, FALSE);
  cfg->label = g_strdup(label->str);
  cfg->vals = g_new0(char *, N_OPTS);
  memcpy(cfg->vals, vals, sizeof vals);
  memset(vals, 0, sizeof vals);
out:
  for (guint o = 0; o < N_OPTS; o++) g_free(vals[o]);
  g_string_free(label, TRUE);
  return cfg;
}

#define SWEEP_MAX_CONFIGS 1000000

GPtrArray *sweep_expand(const char *text, const char *name, GError **err) {
  GPtrArray *out = NULL;
  GPtrArray *axes = g_ptr_array_new_with_free_func(axis_free);
  GHashTable *seen = g_hash_table_new(g_str_hash, g_str_equal);
  guint *pick = NULL;
  cJSON *root = dl_json_parse(name, text, strlen(text), err);
  if (!root) goto out;
  if (!cJSON_IsObject(root)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected an object with \"fixed\" and \"axes\"",
                name);
    goto out;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, root) {
    if (strcmp(it->string, "fixed") == 0) {
      if (!cJSON_IsObject(it)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: fixed: expected an object of options", name);
        goto out;
      }
      choice *ch = choice_from_object(it, name, "fixed", FALSE, err);
      if (!ch) goto out;
      axis *a = g_new0(axis, 1);
      a->name = g_strdup("fixed");
      a->values = g_ptr_array_new_with_free_func(choice_free);
      g_ptr_array_add(a->values, ch);
      g_ptr_array_insert(axes, 0, a); /* fixed first, whatever its place in the file */
    } else if (strcmp(it->string, "axes") == 0) {
      if (!cJSON_IsObject(it)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: axes: expected an object of arrays", name);
        goto out;
      }
      const cJSON *ax;
      cJSON_ArrayForEach(ax, it) {
        axis *a = axis_parse(ax, name, err);
        if (!a) goto out;
        g_ptr_array_add(axes, a);
      }
    } else if (strcmp(it->string, "comment") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "%s: %s: unknown key (expected \"fixed\", \"axes\" or \"comment\")", name,
                  it->string);
      goto out;
    }
  }
  /* a spec that varies nothing is a mistake more often than a sweep of one ({} would run the
   * defaults) */
  if (axes->len == 0 || (axes->len == 1 && strcmp(((axis *)axes->pdata[0])->name, "fixed") == 0)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: axes: nothing to sweep (give \"axes\" an "
                "option with a list of values; dlsim run runs one configuration)", name);
    goto out;
  }
  double total = 1;
  for (guint a = 0; a < axes->len; a++)
    total *= ((axis *)g_ptr_array_index(axes, a))->values->len;
  if (total > SWEEP_MAX_CONFIGS) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: axes: %.0f combinations, more than %d", name,
                total, SWEEP_MAX_CONFIGS);
    goto out;
  }
  out = g_ptr_array_new_with_free_func(config_free);
  pick = g_new0(guint, axes->len + 1);
  for (;;) {
    sweep_config *c = combine(axes, pick, name, err);
    if (!c) {
      g_ptr_array_unref(out);
      out = NULL;
      goto out;
    }
    if (g_hash_table_contains(seen, c->key)) config_free(c);
    else {
      g_hash_table_add(seen, c->key);
      g_ptr_array_add(out, c);
    }
    /* odometer: the last axis varies fastest */
    int a = (int)axes->len - 1;
    while (a >= 0) {
      const axis *ax = g_ptr_array_index(axes, a);
      if (++pick[a] < ax->values->len) break;
      pick[a--] = 0;
    }
    if (a < 0) break;
  }
out:
  g_free(pick);
  g_hash_table_unref(seen);
  g_ptr_array_unref(axes);
  cJSON_Delete(root);
  return out;
}

void sweep_shard(GPtrArray *configs, int i, int n) {
  gsize len = 0;
  gpointer *all = g_ptr_array_steal(configs, &len);
  for (gsize r = 0; r < len; r++) {
    if ((int)(r % (gsize)n) == i) g_ptr_array_add(configs, all[r]);
    else config_free(all[r]);
  }
  g_free(all);
}

gboolean sweep_shard_parse(const char *text, int *i, int *n, GError **err) {
  char *end = NULL;
  long a = strtol(text, &end, 10);
  if (end != text && *end == '/') {
    char *end2 = NULL;
    long b = strtol(end + 1, &end2, 10);
    if (end2 != end + 1 && *end2 == 0 && b >= 1 && b <= 100000 && a >= 0 && a < b) {
      *i = (int)a;
      *n = (int)b;
      return TRUE;
    }
  }
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "--shard: expected i/n with 0 <= i < n (e.g. 0/4), got '%s'", text);
  return FALSE;
}

/* ---- rows ------------------------------------------------------------------------------------ */

typedef enum { COL_KEY, COL_STATUS, COL_REASON, COL_LABEL, COL_CONFIG, COL_RESULT } col_kind;

typedef struct {
  const char *name; /* CSV column */
  col_kind kind;
  const char *path; /* dotted path in the result JSON */
  const char *opt;  /* COL_CONFIG: the spec option giving the value for invalid rows */
} sweep_column;

static const sweep_column columns[] = {
    {"key", COL_KEY, NULL, NULL},
    {"status", COL_STATUS, NULL, NULL},
    {"reason", COL_REASON, NULL, NULL},
    {"label", COL_LABEL, NULL, NULL},
    {"platform", COL_CONFIG, "config.platform", "platform"},
    {"workload", COL_CONFIG, "config.workload", "workload"},
    {"mode", COL_CONFIG, "mode", "mode"},
    {"gpus", COL_CONFIG, "config.gpus", "gpus"},
    {"batch", COL_CONFIG, "config.batch", "batch"},
    {"dp", COL_CONFIG, "config.dp", "dp"},
    {"tp", COL_CONFIG, "config.tp", "tp"},
    {"pp", COL_CONFIG, "config.pp", "pp"},
    {"ep", COL_CONFIG, "config.ep", "ep"},
    {"grid", COL_CONFIG, "config.grid", "grid"},
    {"grid_layers", COL_CONFIG, "config.grid_layers", "grid_layers"},
    {"domain", COL_CONFIG, "config.domain", "domain"},
    {"tp_style", COL_CONFIG, "config.tp_style", "tp_style"},
    {"schedule", COL_CONFIG, "config.schedule", "schedule"},
    {"microbatches", COL_CONFIG, "config.microbatches", "microbatches"},
    {"precision", COL_CONFIG, "config.precision", "precision"},
    {"recompute", COL_CONFIG, "config.recompute", "recompute"},
    {"coll", COL_CONFIG, "config.coll", "coll"},
    {"iters", COL_CONFIG, "config.iters", "iters"},
    {"iteration_time_s", COL_RESULT, "iteration_time_s", NULL},
    {"throughput_samples_per_s", COL_RESULT, "throughput_samples_per_s", NULL},
    {"epoch_time_s", COL_RESULT, "epoch_time_s", NULL},
    {"compute_s", COL_RESULT, "breakdown_s.compute", NULL},
    {"exposed_comm_s", COL_RESULT, "breakdown_s.exposed_comm", NULL},
    {"overlapped_comm_s", COL_RESULT, "breakdown_s.overlapped_comm", NULL},
    {"bubble_s", COL_RESULT, "breakdown_s.bubble", NULL},
    {"idle_s", COL_RESULT, "breakdown_s.idle", NULL},
    {"comm_s", COL_RESULT, "comm_s", NULL},
    {"gholami_eq_comm_s", COL_RESULT, "gholami_eq_comm_s", NULL},
    {"comm_bytes_per_gpu", COL_RESULT, "comm_bytes_per_gpu", NULL},
    {"mem_peak_bytes", COL_RESULT, "memory_bytes_per_gpu.peak", NULL},
    {"mem_capacity_bytes", COL_RESULT, "memory_bytes_per_gpu.capacity", NULL},
    {"fits_in_memory", COL_RESULT, "fits_in_memory", NULL},
    {"kernels", COL_RESULT, "kernel_db.name", NULL},
#define KDB_COLUMN(e, s) {"kdb_" s, COL_RESULT, "kernel_db." s, NULL},
    KDB_ORIGINS(KDB_COLUMN) /* kernel times by origin: kdb_measured, ... */
#undef KDB_COLUMN
};

const char *sweep_csv_header(void) {
  static char *header;
  if (!header) {
    GString *s = g_string_new("");
    for (guint i = 0; i < G_N_ELEMENTS(columns); i++)
      g_string_append_printf(s, "%s%s", i ? "," : "", columns[i].name);
    g_string_append_c(s, '\n');
    header = g_string_free(s, FALSE);
  }
  return header;
}

static const cJSON *json_at(const cJSON *root, const char *path) {
  char **parts = g_strsplit(path, ".", -1);
  const cJSON *v = root;
  for (char **p = parts; *p && v; p++) v = cJSON_GetObjectItemCaseSensitive(v, *p);
  g_strfreev(parts);
  return v;
}

static void json_field(GString *s, const cJSON *v) {
  if (!v) return;
  if (cJSON_IsNumber(v)) {
    double x = v->valuedouble;
    if (x == floor(x) && fabs(x) < 1e15) g_string_append_printf(s, "%.0f", x);
    else g_string_append_printf(s, "%.10g", x);
  } else if (cJSON_IsBool(v)) {
    g_string_append(s, cJSON_IsTrue(v) ? "true" : "false");
  } else if (cJSON_IsString(v)) {
    dl_csv_field(s, v->valuestring);
  }
}

char *sweep_csv_row(const sweep_config *c, const char *status, const char *reason,
                    const cJSON *result) {
  GString *s = g_string_new("");
  for (guint i = 0; i < G_N_ELEMENTS(columns); i++) {
    const sweep_column *col = &columns[i];
    if (i) g_string_append_c(s, ',');
    switch (col->kind) {
    case COL_KEY: dl_csv_field(s, c->key); break;
    case COL_STATUS: dl_csv_field(s, status); break;
    case COL_REASON: dl_csv_field(s, reason); break;
    case COL_LABEL: dl_csv_field(s, c->label); break;
    case COL_CONFIG:
      if (result) json_field(s, json_at(result, col->path));
      else dl_csv_field(s, c->vals[option_find(col->opt)]);
      break;
    case COL_RESULT:
      if (result) json_field(s, json_at(result, col->path));
      break;
    }
  }
  g_string_append_c(s, '\n');
  return g_string_free(s, FALSE);
}

char *sweep_jsonl_row(const sweep_config *c, const char *status, const char *reason,
                   const cJSON *result) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", c->key);
  cJSON_AddStringToObject(o, "status", status);
  if (reason) cJSON_AddStringToObject(o, "reason", reason);
  else cJSON_AddNullToObject(o, "reason");
  cJSON_AddStringToObject(o, "label", c->label);
  cJSON *opts = cJSON_AddObjectToObject(o, "options");
  for (guint i = 0; i < N_OPTS; i++) {
    const char *v = c->vals[i];
    if (!v) continue;
    switch (options[i].type) {
    case SWEEP_STR: cJSON_AddStringToObject(opts, options[i].name, v); break;
    case SWEEP_INT:
    case SWEEP_NUM: cJSON_AddNumberToObject(opts, options[i].name, g_ascii_strtod(v, NULL)); break;
    case SWEEP_BOOL: cJSON_AddBoolToObject(opts, options[i].name, strcmp(v, "true") == 0); break;
    }
  }
  if (result) {
    const cJSON *it;
    cJSON_ArrayForEach(it, result) {
      if (cJSON_GetObjectItemCaseSensitive(o, it->string)) continue;
      cJSON_AddItemToObject(o, it->string, cJSON_Duplicate(it, TRUE));
    }
  }
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  char *line = g_strconcat(txt, "\n", NULL);
  cJSON_free(txt);
  return line;
}

/* Splits a CSV line into fields (unquoted); NULL when a quoted field is not closed. */
static char **csv_split(const char *line) {
  GPtrArray *f = g_ptr_array_new();
  const char *p = line;
  for (;;) {
    GString *s = g_string_new("");
    if (*p == '"') {
      p++;
      for (;;) {
        if (!*p || *p == '\n') {
          g_string_free(s, TRUE);
          g_ptr_array_add(f, NULL);
          g_strfreev((char **)g_ptr_array_free(f, FALSE));
          return NULL;
        }
        if (*p == '"' && p[1] == '"') {
          g_string_append_c(s, '"');
          p += 2;
        } else if (*p == '"') {
          p++;
          break;
        } else g_string_append_c(s, *p++);
      }
    }
    while (*p && *p != ',' && *p != '\n') g_string_append_c(s, *p++);
    g_ptr_array_add(f, g_string_free(s, FALSE));
    if (*p != ',') break;
    p++;
  }
  g_ptr_array_add(f, NULL);
  return (char **)g_ptr_array_free(f, FALSE);
}

char *sweep_csv_first_field(const char *line) {
  char **f = csv_split(line);
  char *k = f && f[0] ? g_strdup(f[0]) : NULL;
  g_strfreev(f);
  return k;
}

/* ---- files ----------------------------------------------------------------------------------- */

/* The complete lines of a file (without their '\n'); a last line without '\n' is dropped and
 * counted in *partial. A missing file gives no lines. NULL with an error if it cannot be read. */
static char **read_lines(const char *path, int *partial, GError **err) {
  char *text = NULL;
  gsize len = 0;
  GError *e = NULL;
  *partial = 0;
  if (!g_file_get_contents(path, &text, &len, &e)) {
    if (g_error_matches(e, G_FILE_ERROR, G_FILE_ERROR_NOENT)) {
      g_error_free(e);
      return g_new0(char *, 1);
    }
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", path, e->message);
    g_error_free(e);
    return NULL;
  }
  char **lines = g_strsplit(text, "\n", -1);
  guint n = g_strv_length(lines);
  /* the piece after the last '\n' is "" for a complete file, a partial line otherwise */
  if (n > 0) {
    if (lines[n - 1][0]) *partial = 1;
    g_free(lines[n - 1]);
    lines[n - 1] = NULL;
  }
  g_free(text);
  return lines;
}

static char *jsonl_key(const char *line) {
  cJSON *o = cJSON_Parse(line);
  const cJSON *k = o ? cJSON_GetObjectItemCaseSensitive(o, "key") : NULL;
  char *key = cJSON_IsString(k) ? g_strdup(k->valuestring) : NULL;
  cJSON_Delete(o);
  return key;
}

static gboolean check_header(const char *path, char **lines, GError **err) {
  const char *h = sweep_csv_header();
  if (lines[0] && (strncmp(lines[0], h, strlen(h) - 1) != 0 || lines[0][strlen(h) - 1])) {
    g_set_error(
        err, DL_ERROR, DL_ERR_INPUT,
        "%s: not a sweep CSV of this dlsim version (its header differs); give another --out", path);
    return FALSE;
  }
  return TRUE;
}

/* Appends the whole buffer with one write() (retried only for what a signal interrupted). */
static gboolean write_all(int fd, const char *path, const char *buf, size_t len, GError **err) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", path, g_strerror(errno));
      return FALSE;
    }
    buf += w;
    len -= (size_t)w;
  }
  return TRUE;
}

gboolean sweep_store_open(sweep_store *s, const char *csv, const char *jsonl, GError **err) {
  memset(s, 0, sizeof *s);
  s->csv_fd = s->jsonl_fd = -1;
  s->done = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  gboolean ok = FALSE;
  int pc = 0, pj = 0;
  char **cl = NULL, **jl = NULL;
  GHashTable *jkeys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GString *cout = g_string_new(sweep_csv_header()), *jout = g_string_new("");

  if (!(cl = read_lines(csv, &pc, err)) || !check_header(csv, cl, err)) goto out;
  if (jsonl && !(jl = read_lines(jsonl, &pj, err))) goto out;
  if (jl)
    for (char **l = jl; *l; l++) {
      char *k = jsonl_key(*l);
      if (k) g_hash_table_insert(jkeys, k, *l);
    }
  guint nc = g_strv_length(cl), nj = jl ? g_strv_length(jl) : 0;
  guint kept = 0;
  for (guint i = 1; i < nc; i++) {
    char **f = csv_split(cl[i]);
    if (f && f[0] && f[1] && !g_hash_table_contains(s->done, f[0]) &&
        (!jl || g_hash_table_contains(jkeys, f[0]))) {
      g_hash_table_insert(s->done, g_strdup(f[0]), g_strdup(f[1]));
      g_string_append_printf(cout, "%s\n", cl[i]);
      if (jl) g_string_append_printf(jout, "%s\n", (char *)g_hash_table_lookup(jkeys, f[0]));
      kept++;
    }
    g_strfreev(f);
  }
  /* dropped: partial last lines, and rows of either file that the other does not hold */
  s->dropped = pc + pj + (int)(nc > 0 ? nc - 1 - kept : 0) + (int)(jl ? nj - kept : 0);
  if (s->dropped > 0 || nc == 0) {
    if (!dl_write_file_atomic(csv, cout->str, cout->len, err)) goto out;
  }
  if (jl && (s->dropped > 0 || jl[0] == NULL)) {
    if (!dl_write_file_atomic(jsonl, jout->str, jout->len, err)) goto out;
  }
  s->csv_fd = open(csv, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (s->csv_fd < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", csv, g_strerror(errno));
    goto out;
  }
  if (jsonl) {
    s->jsonl_fd = open(jsonl, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (s->jsonl_fd < 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", jsonl, g_strerror(errno));
      goto out;
    }
  }
  ok = TRUE;
out:
  g_string_free(cout, TRUE);
  g_string_free(jout, TRUE);
  g_hash_table_unref(jkeys);
  g_strfreev(cl);
  g_strfreev(jl);
  if (!ok) sweep_store_close(s);
  return ok;
}

gboolean sweep_store_append(sweep_store *s, const char *key, const char *status,
                            const char *csv_line, const char *jsonl_line, GError **err) {
  /* JSONL first: a row counts as done once the CSV holds it, and then the JSONL does too */
  if (s->jsonl_fd >= 0) {
    if (!write_all(s->jsonl_fd, "JSONL", jsonl_line, strlen(jsonl_line), err)) return FALSE;
    fdatasync(s->jsonl_fd);
  }
  if (!write_all(s->csv_fd, "CSV", csv_line, strlen(csv_line), err)) return FALSE;
  fdatasync(s->csv_fd);
  g_hash_table_insert(s->done, g_strdup(key), g_strdup(status));
  return TRUE;
}

void sweep_store_close(sweep_store *s) {
  if (s->csv_fd >= 0) close(s->csv_fd);
  if (s->jsonl_fd >= 0) close(s->jsonl_fd);
  if (s->done) g_hash_table_unref(s->done);
  memset(s, 0, sizeof *s);
  s->csv_fd = s->jsonl_fd = -1;
}

int sweep_merge(const char *out_csv, const char *out_jsonl, char **inputs, GError **err) {
  GString *cout = g_string_new(sweep_csv_header()), *jout = g_string_new("");
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  int rows = -1;
  for (char **in = inputs; *in; in++) {
    int partial = 0;
    char **cl = read_lines(*in, &partial, err);
    if (!cl) goto out;
    if (!cl[0]) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no such sweep CSV (or empty)", *in);
      g_strfreev(cl);
      goto out;
    }
    if (!check_header(*in, cl, err)) {
      g_strfreev(cl);
      goto out;
    }
    char **jl = NULL;
    GHashTable *jkeys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    if (g_str_has_suffix(*in, ".csv")) {
      char *jp = g_strdup_printf("%.*s.jsonl", (int)strlen(*in) - 4, *in);
      if (g_file_test(jp, G_FILE_TEST_EXISTS)) {
        jl = read_lines(jp, &partial, err);
        if (!jl) {
          g_free(jp);
          g_hash_table_unref(jkeys);
          g_strfreev(cl);
          goto out;
        }
        for (char **l = jl; *l; l++) {
          char *k = jsonl_key(*l);
          if (k) g_hash_table_insert(jkeys, k, *l);
        }
      }
      g_free(jp);
    }
    for (char **l = cl + 1; *l; l++) {
      char *k = sweep_csv_first_field(*l);
      if (!k || g_hash_table_contains(seen, k) || (jl && !g_hash_table_contains(jkeys, k))) {
        g_free(k);
        continue;
      }
      g_string_append_printf(cout, "%s\n", *l);
      if (jl) g_string_append_printf(jout, "%s\n", (char *)g_hash_table_lookup(jkeys, k));
      g_hash_table_add(seen, k);
    }
    g_hash_table_unref(jkeys);
    g_strfreev(jl);
    g_strfreev(cl);
  }
  if (!dl_write_file_atomic(out_csv, cout->str, cout->len, err)) goto out;
  if (out_jsonl && !dl_write_file_atomic(out_jsonl, jout->str, jout->len, err)) goto out;
  rows = (int)g_hash_table_size(seen);
out:
  g_hash_table_unref(seen);
  g_string_free(cout, TRUE);
  g_string_free(jout, TRUE);
  return rows;
}
