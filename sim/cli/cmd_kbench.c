/* cmd_kbench.c — `dlsim kbench`: measure kernel times on this machine's device into a kernel
 * database (kdb.h). The kernels measured are the exact list rank 0 runs for a configuration
 * (--workload plus the run options, through plan_build), optionally a grid of batch sizes per
 * layer shape for interpolation (--grid-shapes), or a small fixed set (--quick). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/dl_version.h" /* generated in the build tree (version.cmake) */
#include "cli/options.h"
#include "core/config.h"
#include "core/dl_common.h"
#include "harness.h"
#include "kdb/kdb.h"
#include "kernels.h"
#include "kdb/ktime.h"
#include "plan/plan.h"
#include "plan/shard.h"
#include "model/workload.h"

typedef struct {
  gboolean quick, grid_shapes;
  gboolean list;   /* --list: print the kernels that would be measured, measure nothing */
  gboolean resume; /* --resume: keep the entries already in the output file, measure the rest */
  char *device;    /* "cpu" or "cuda" */
  int repeats;     /* max timed repeats, 0 = default */
  char *note;      /* free text added to provenance */
  char *derive_for;/* --derive-for: spec sheet of the device to derive a database for */
  char *from;      /* --from: the measured database it is derived from */
  char *from_spec; /* --from-spec: spec sheet of the measured device (default: from provenance) */
  char *spec;      /* --spec: spec sheet of the device measured (default: from its name) */
} kb_opts;

typedef struct {
  plan_op op;          /* the kernel op (its name is the descriptor's) */
  kdb_kernel k;      /* what the database knows it by (borrows op.kname and the model) */
  char *key;         /* kdb_key, owned */
  plan_shard shard;  /* how rank 0 holds the layer (a zeroed FULL shard for optimizer steps) */
} kb_job;

#define KB_SUMMARY                                                                           \
  "Measures kernel times on this machine into a kernel database with provenance. A GPU's\n"     \
  "database is named by its spec-sheet key (kernels/db/h100-sxm.json, ...), the name runs on a\n" \
  "platform of that GPU look up; the CPU twins' by the CPU (kernels/db/cpu-<model>.json). The\n"  \
  "kernels measured are the exact list rank 0 runs for --workload and the run options below\n"  \
  "(--gpus, --batch, --dp, --tp, --grid, --precision, ...), or --quick. The database is\n"      \
  "written as it goes (every 10 s); --resume adds to the one in the output file.\n\n"           \
  "  dlsim kbench --derive-for GPU --from DB [--from-spec SPEC] --out FILE\n"                   \
  "derives a database for a device nobody measured (a spec sheet: a100-40gb, a100-80gb,\n"      \
  "h100-sxm, h200, b200, gb200, cpu) from a measured one: every entry's time is scaled by\n"   \
  "the two devices' roofline ratio for that entry; entries and provenance say derived, and\n"   \
  "runs count them as derived, not measured. --out is required: a derived database is used\n"   \
  "by default only where you put it."

/* Parses kbench's options and the run options in one pass. */
static gboolean parse_opts(kb_opts *o, cfg_run *c, int *argc, char ***argv, gboolean *help,
                           GError **err) {
  char *device = NULL;
  int repeats = -1;
  const GOptionEntry entries[] = {
      {"quick", 0, 0, G_OPTION_ARG_NONE, &o->quick,
       "a small set: mlp-small, cnn-small and the first ResNet-18-CIFAR layers at small batches",
       NULL},
      {"grid-shapes", 0, 0, G_OPTION_ARG_NONE, &o->grid_shapes,
       "also measure every layer shape at batch 1, 4, 16 and 64 (for interpolation)", NULL},
      {"device", 0, 0, G_OPTION_ARG_STRING, &device,
       "cpu (default; one BLAS thread) or cuda (a CUDA build with a device)", "cpu|cuda"},
      {"spec", 0, 0, G_OPTION_ARG_STRING, &o->spec,
       "the spec sheet of the GPU measured (default: from the name the driver reports; needed for "
       "boards without a sheet of their own, such as PCIe and NVL)", "KEY"},
      {"repeats", 0, 0, G_OPTION_ARG_INT, &repeats,
       "at most N timed repeats per kernel (default 100; stops earlier when the median is stable "
       "to 2%)", "N"},
      {"note", 0, 0, G_OPTION_ARG_STRING, &o->note, "free text recorded in the provenance",
       "TEXT"},
      {"list", 0, 0, G_OPTION_ARG_NONE, &o->list,
       "print the keys of the kernels that would be measured, and measure nothing", NULL},
      {"resume", 0, 0, G_OPTION_ARG_NONE, &o->resume,
       "add to the database already in the output file: its entries are kept and not measured "
       "again (several configurations into one database; an interrupted run goes on)", NULL},
      {"derive-for", 0, 0, G_OPTION_ARG_STRING, &o->derive_for,
       "derive a database for this spec sheet instead of measuring", "GPU"},
      {"from", 0, 0, G_OPTION_ARG_STRING, &o->from, "with --derive-for: the measured database",
       "DB"},
      {"from-spec", 0, 0, G_OPTION_ARG_STRING, &o->from_spec,
       "with --derive-for: the measured device's spec sheet (default: the one the database says)",
       "SPEC"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  gboolean ok = cfg_parse_args(c, "kbench", entries, KB_SUMMARY, argc, argv, help, err);
  /* what-ifs of a run: the kernels measured are the layout's, whatever they would be */
  const char *whatif = ok ? cfg_whatif_option(c, TRUE) : NULL;
  if (whatif) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: %s belongs to a run, not to the kernels it "
                "measures; leave it out", whatif);
    ok = FALSE;
  }
  if (ok && device) {
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --device: expected cpu or cuda, got "
                  "'%s'", device);
      ok = FALSE;
    } else {
      g_free(o->device);
      o->device = g_strdup(device);
    }
  }
  if (ok && repeats != -1) {
    if (repeats < 3 || repeats > 100000) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --repeats: expected 3..100000, got %d",
                  repeats);
      ok = FALSE;
    }
    o->repeats = repeats;
  }
  g_free(device);
  return ok;
}

/* Adds rank 0's kernel ops of `m` under configuration `c` (resolved) to `jobs`, once per key. */
static gboolean add_plan(GPtrArray *jobs, GHashTable *seen, const wl_model *m, cfg_run *c,
                         int max_layer, GError **err) {
  plan_rank *p = plan_build(m, c, NULL, 0, err);
  if (!p) return FALSE;
  plan_shard *sh = g_new0(plan_shard, m->n_layers);
  if (!plan_shard_plan(m, c, 0, 0, sh, err)) {
    g_free(sh);
    plan_rank_free(p);
    return FALSE;
  }
  for (int i = 0; i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    if (op->kind != PLAN_KERNEL) continue;
    if (max_layer >= 0 && (op->layer < 0 || op->layer > max_layer)) continue;
    /* SwiGLU and shared experts have no kernel of dlsim's own yet: runs take them from the
     * roofline, or from a database measured with the framework's */
    if (op->layer >= 0 && m->layers[op->layer].kind == WL_MOE &&
        (m->layers[op->layer].gated || m->layers[op->layer].shared))
      continue;
    kdb_kernel k = ktime_describe(m, op);
    char *key = kdb_key(&k, c->precision);
    if (g_hash_table_contains(seen, key)) {
      g_free(key);
      continue;
    }
    g_hash_table_add(seen, key);
    kb_job *j = g_new0(kb_job, 1);
    j->op = *op;
    j->k = k;
    j->k.kname = j->op.kname;
    j->key = g_strdup(key);
    if (op->layer >= 0) j->shard = sh[op->layer];
    g_ptr_array_add(jobs, j);
  }
  g_free(sh);
  plan_rank_free(p);
  return TRUE;
}

/* A single-GPU data-parallel configuration of `m` at `batch` samples. */
static gboolean add_batch(GPtrArray *jobs, GHashTable *seen, const wl_model *m, long batch,
                          gpu_precision prec, int max_layer, GError **err) {
  cfg_run c;
  cfg_init(&c);
  c.gpus = 1;
  c.batch = batch;
  c.precision = prec;
  gboolean ok = cfg_resolve(&c, batch, err);
  if (ok) cfg_resolve_style(&c, wl_has_tp_roles(m));
  ok = ok && add_plan(jobs, seen, m, &c, max_layer, err);
  cfg_release(&c);
  return ok;
}

/* The kernel rank 0 runs for `d`, held as `sh` says: the slice of the layer's tensors it computes
 * (Megatron's column, row, head and vocabulary splits, a rank's experts, a domain slab), or, for
 * the layers the model divides without slicing them (Gholami's grid), 1/split of the channels. */
static void layer_of(kh_layer *k, const kdb_kernel *d, const plan_shard *sh) {
  memset(k, 0, sizeof *k);
  if (!d->layer) {
    k->kind = g_str_has_prefix(d->kname, "adam") ? "adam" : "sgd";
    k->params = (long)d->params;
    return;
  }
  const wl_layer *l = d->layer;
  int split = d->split > 0 ? d->split : 1;
  k->kind = wl_layer_kind_name(l->kind);
  k->bwd = g_str_has_suffix(d->kname, ".bwd");
  k->n = d->samples;
  k->in_c = l->in.c, k->in_h = l->in.h, k->in_w = l->in.w;
  k->out_c = l->out.c, k->out_h = l->out.h, k->out_w = l->out.w;
  k->kh = l->kh, k->kw = l->kw, k->stride = l->stride, k->pad = l->pad, k->groups = l->groups;
  k->bias = l->bias;
  k->heads = l->heads;
  k->kv_heads = l->kv_heads;
  k->flash = l->flash;
  k->needs_dx = l->inputs[0] >= 0;
  k->vocab = l->vocab;
  k->experts = l->experts, k->top_k = l->top_k, k->ffn = l->ffn;
  k->capacity_factor = l->capacity_factor;
  const long cn = sh ? (long)sh->cn : 0;
  switch (sh && sh->parts > 1 ? sh->kind : PLAN_SPLIT_FULL) {
  case PLAN_SPLIT_COL: k->out_c = cn; break;
  case PLAN_SPLIT_QKV: k->out_c = 3 * cn; break;
  case PLAN_SPLIT_ROW: k->in_c = cn; break;
  case PLAN_SPLIT_LOCAL: /* attention heads, or the features between a column and a row linear */
    k->out_c = cn;
    /* attention reads its heads' share of the QKV; swiglu its pairs; rope keeps its width */
    if (l->kind != WL_LINEAR) k->in_c = l->in.c * cn / l->out.c;
    if ((l->kind == WL_ATTENTION || l->kind == WL_ROPE) && l->heads > 0) {
      k->heads = (int)(l->heads * cn / l->out.c);
      k->kv_heads = (int)(l->kv_heads * cn / l->out.c);
    }
    break;
  case PLAN_SPLIT_VOCAB: k->vocab = cn; break;
  case PLAN_SPLIT_CE: k->in_c = k->out_c = cn; break;
  case PLAN_SPLIT_EXPERTS: k->experts = (int)cn; break;
  case PLAN_SPLIT_DOMAIN:
    k->in_h = (l->in.h * cn + l->out.h - 1) / l->out.h;
    k->out_h = cn;
    break;
  default:
    if (l->kind == WL_CONV2D || l->kind == WL_LINEAR) {
      k->out_c = (k->out_c + split - 1) / split; /* output channels split over Pr */
    } else if (split > 1) {
      k->in_c = (k->in_c + split - 1) / split;
      k->out_c = (k->out_c + split - 1) / split;
    }
  }
  /* Ulysses: the attention of whole sequences for 1/cp of the heads (of the tensor-parallel
   * rank's heads; without tp, `split` divided the channels above) */
  const int cp = sh ? sh->cp_parts : 1;
  if (l->kind == WL_ATTENTION && cp > 1 && d->seq <= 1) {
    k->heads /= cp, k->kv_heads /= cp;
    if (sh->parts > 1) k->in_c /= cp, k->out_c /= cp;
  }
  /* context parallelism: 1/seq of the tokens (a ring step: of the queries and of the keys) */
  if (d->seq > 1) {
    k->in_h = (k->in_h + d->seq - 1) / d->seq;
    k->out_h = (k->out_h + d->seq - 1) / d->seq;
  }
}

/* The shape an entry was measured at: every field of kh_layer, so that another implementation
 * of the same kernel (kernels/torch_compare.py) can be timed at exactly this shape. */
static char *shape_json(const kh_layer *k) {
  if (!strcmp(k->kind, "sgd") || !strcmp(k->kind, "adam"))
    return g_strdup_printf("{\"kind\":\"%s\",\"params\":%ld}", k->kind, k->params);
  /* grouped-query and flash-style attention add their fields; older entries stay as they were */
  char extra[64] = "";
  if (k->kv_heads > 0 || k->flash)
    g_snprintf(extra, sizeof extra, ",\"kv_heads\":%d,\"flash\":%d", k->kv_heads, k->flash);
  return g_strdup_printf(
      "{\"kind\":\"%s\",\"bwd\":%d,\"n\":%ld,\"in\":[%ld,%ld,%ld],\"out\":[%ld,%ld,%ld],"
      "\"kh\":%d,\"kw\":%d,\"stride\":%d,\"pad\":%d,\"groups\":%d,\"bias\":%d,\"heads\":%d,"
      "\"needs_dx\":%d,\"vocab\":%ld,\"experts\":%d,\"top_k\":%d,\"ffn\":%ld,"
      "\"capacity_factor\":%g%s}",
      k->kind, k->bwd, k->n, k->in_c, k->in_h, k->in_w, k->out_c, k->out_h, k->out_w, k->kh,
      k->kw, k->stride, k->pad, k->groups, k->bias, k->heads, k->needs_dx, k->vocab, k->experts,
      k->top_k, k->ffn, k->capacity_factor, extra);
}

static char *slug(const char *s) {
  GString *g = g_string_new(NULL);
  for (const char *p = s; *p; p++) {
    char ch = g_ascii_tolower(*p);
    if (g_ascii_isalnum(ch)) g_string_append_c(g, ch);
    else if (g->len && g->str[g->len - 1] != '-') g_string_append_c(g, '-');
  }
  while (g->len && g->str[g->len - 1] == '-') g_string_truncate(g, g->len - 1);
  return g_string_free(g, FALSE);
}

/* The name of the database measured here, decided before anything is measured: a GPU's spec-sheet
 * key (from the name the driver reports, or --spec), the key runs look their database up by;
 * "cpu-<model>" for the CPU twins. NULL with DL_ERR_INPUT when a GPU matches no sheet. */
static char *device_key(const kb_opts *o, GError **err) {
  if (strcmp(o->device, "cuda") != 0) {
    if (o->spec && g_ascii_strcasecmp(o->spec, "cpu") != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --spec %s: the CPU twins are measured "
                  "as cpu; --spec names a GPU's sheet with --device cuda", o->spec);
      return NULL;
    }
    char *s = slug(gpu_local_cpu()->full_name);
    char *device = g_strdup_printf("cpu-%s", s);
    g_free(s);
    return device;
  }
  kn_cuda_info ci;
  memset(&ci, 0, sizeof ci);
  if (kn_cuda_info_get(&ci) != 0) g_strlcpy(ci.name, "unknown CUDA device", sizeof ci.name);
  const gpu_spec *s = o->spec ? gpu_find(o->spec) : gpu_for_device_name(ci.name, ci.mem_bytes);
  if (!s || strcmp(s->name, "cpu") == 0) {
    char *known = gpu_known_names();
    if (o->spec)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --spec %s: no GPU spec sheet of that "
                  "name (%s)", o->spec, known);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --device cuda: no spec sheet matches "
                  "'%s'; name the closest with --spec (%s)", ci.name, known);
    g_free(known);
    return NULL;
  }
  return g_strdup(s->name);
}

static void fill_provenance(kdb *db, const char *device, const kb_opts *o, const kh_opts *ho) {
  GDateTime *now = g_date_time_new_now_utc();
  char *date = g_date_time_format(now, "%Y-%m-%dT%H:%M:%SZ");
  kdb_set_prov_str(db, "date", date);
  g_free(date);
  g_date_time_unref(now);
  kdb_set_prov_str(db, "device", device);
  kdb_set_prov_str(db, "backend", o->device);
  kdb_set_prov_str(db, "spec_key", strcmp(o->device, "cuda") == 0 ? device : "cpu");
  kdb_set_prov_str(db, "harness_version", KH_VERSION);
  kdb_set_prov_str(db, "dlsim_version", DL_VERSION);
  kdb_set_prov_str(db, "commit", DL_COMMIT);
  kdb_set_prov_num(db, "max_repeats", ho->max_repeats);
  kdb_set_prov_str(db, "timing",
                   strcmp(o->device, "cuda") == 0
                       ? "CUDA events; L2 flushed (memset of 2x L2) before each repeat"
                       : "CLOCK_MONOTONIC; last-level cache flushed before each repeat");
  if (strcmp(o->device, "cuda") == 0) {
    kn_cuda_info ci;
    if (kn_cuda_info_get(&ci) == 0) {
      kdb_set_prov_str(db, "device_full_name", ci.name);
      kdb_set_prov_str(db, "spec_from", o->spec ? "--spec" : "the device name");
      kdb_set_prov_num(db, "mem_bytes", ci.mem_bytes);
      kdb_set_prov_num(db, "sm_count", ci.sm_count);
      kdb_set_prov_num(db, "clock_mhz", ci.clock_mhz);
      kdb_set_prov_num(db, "mem_clock_mhz", ci.mem_clock_mhz);
      kdb_set_prov_num(db, "driver_version", ci.driver_version);
      kdb_set_prov_num(db, "cuda_runtime_version", ci.runtime_version);
    }
  } else {
    const gpu_spec *cpu = gpu_local_cpu();
    kdb_set_prov_str(db, "device_full_name", cpu->full_name);
    kdb_set_prov_str(db, "cpu_model", cpu->full_name);
    kdb_set_prov_num(db, "cpu_cores_online", g_get_num_processors());
    kdb_set_prov_num(db, "threads", 1);
    kdb_set_prov_str(db, "blas", "OpenBLAS, cblas_sgemm, 1 thread (deterministic twins)");
    kdb_set_prov_str(db, "spec", cpu->source);
  }
  if (o->note) kdb_set_prov_str(db, "note", o->note);
  kdb_set_prov_bool(db, "derived", FALSE);
}

/* --derive-for: a database for another device by spec ratios (kdb_derive). */
static int derive(const kb_opts *o, const cfg_run *c, GError **err) {
  kdb *src = NULL, *db = NULL;
  char *out = NULL, *json = NULL, *known = gpu_known_names();
  int status = 2;
  const gpu_spec *to = o->derive_for ? gpu_find(o->derive_for) : NULL;
  if (!o->derive_for || !o->from) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --derive-for GPU and --from DB go together");
    goto out;
  }
  if (!to) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --derive-for %s: no spec sheet of that "
                "name (%s)", o->derive_for, known);
    goto out;
  }
  if (c->out && !dl_check_writable("--out", c->out, err)) goto out;
  if (!c->out) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --derive-for %s: name the file to write "
                "with --out FILE (a derived database is used by default only where you put it)",
                o->derive_for);
    goto out;
  }
  if (!(src = kdb_load_option("--from", o->from, err))) goto out;
  const gpu_spec *from = gpu_find(o->from_spec ? o->from_spec : kdb_device(src));
  if (!from) {
    if (o->from_spec)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --from-spec %s: no spec sheet of that "
                  "name (%s)", o->from_spec, known);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "kbench: --from %s: measured on '%s', which has no "
                  "spec sheet; say which it is with --from-spec (%s)", o->from, kdb_device(src),
                  known);
    goto out;
  }
  db = kdb_derive(src, from, to);
  out = g_strdup(c->out);
  json = kdb_to_json(db);
  if (!dl_write_file_atomic(out, json, strlen(json), err)) {
    status = 1;
    goto out;
  }
  printf("kbench: %d kernel times for %s derived from %s (%s) -> %s\n", kdb_n_entries(db),
         to->name, kdb_name(src), from->name, out);
  status = 0;
out:
  g_free(json);
  g_free(out);
  kdb_free(db);
  kdb_free(src);
  g_free(known);
  return status;
}

int cmd_kbench(int argc, char **argv) {
  GError *e = NULL;
  kb_opts o = {FALSE, FALSE, FALSE, FALSE, g_strdup("cpu"), 0, NULL, NULL, NULL, NULL, NULL};
  cfg_run c;
  cfg_init(&c);
  gboolean workload_given = FALSE;
  GPtrArray *models = g_ptr_array_new_with_free_func((GDestroyNotify)wl_free);
  GPtrArray *jobs = g_ptr_array_new();
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  kdb *db = NULL;
  char *out = NULL, *json = NULL, *device = NULL;
  int status = 2;
  char *failed = NULL; /* the first kernel kbench could not measure, and why */

  for (int i = 1; i < argc; i++)
    if (g_str_has_prefix(argv[i], "--workload")) workload_given = TRUE;
  gboolean help = FALSE;
  if (!parse_opts(&o, &c, &argc, &argv, &help, &e)) goto out;
  if (help) {
    status = 0;
    goto out;
  }
  if (o.derive_for || o.from) {
    status = derive(&o, &c, &e);
    goto out;
  }
  if (!dl_check_writable("--out", c.out, &e)) goto out;
  if (!workload_given && !o.quick) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "kbench: expected --workload W (with run options) "
                "or --quick");
    goto out;
  }
  /* ---- the kernel list ---- */
  if (workload_given) {
    wl_model *m = wl_load_seq(c.workload, c.seq_len, &e);
    if (!m) goto out;
    g_ptr_array_add(models, m);
    if (!cfg_resolve(&c, (long)m->default_batch, &e)) goto out;
    cfg_resolve_style(&c, wl_has_tp_roles(m));
    if (!add_plan(jobs, seen, m, &c, -1, &e)) goto out;
    if (o.grid_shapes) {
      static const long grid[] = {1, 4, 16, 64};
      for (size_t i = 0; i < G_N_ELEMENTS(grid); i++)
        if (!add_batch(jobs, seen, m, grid[i], c.precision, -1, &e)) goto out;
    }
  }
  if (o.quick) {
    static const struct { const char *name; long batch; int max_layer; } quick[] = {
        {"mlp-small", 16, -1}, {"mlp-small", 64, -1}, {"cnn-small", 8, -1},
        {"cnn-small", 32, -1}, {"resnet18-cifar100", 2, 9}, {"resnet18-cifar100", 4, 9}};
    const wl_model *last = NULL;
    for (size_t i = 0; i < G_N_ELEMENTS(quick); i++) {
      if (!last || strcmp(last->name, quick[i].name) != 0) {
        wl_model *m = wl_load(quick[i].name, &e);
        if (!m) goto out;
        g_ptr_array_add(models, m);
        last = m;
      }
      if (!add_batch(jobs, seen, last, quick[i].batch, c.precision, quick[i].max_layer, &e))
        goto out;
    }
  }

  if (o.list) {
    for (guint i = 0; i < jobs->len; i++)
      printf("%s\n", ((kb_job *)g_ptr_array_index(jobs, i))->key);
    fprintf(stderr, "kbench: %u kernels\n", jobs->len);
    status = 0;
    goto out;
  }

  /* ---- the device (after --list, which needs none) ---- */
  const kn_backend *be = &kn_cpu;
  const kh_device *dev = &kh_cpu_device;
  kn_cpu_init();
  if (strcmp(o.device, "cuda") == 0) {
    const char *why = NULL;
    be = kn_cuda(&why);
    dev = kh_cuda_device();
    if (!be || !dev) {
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "kbench: --device cuda: %s; use --device cpu",
                  why ? why : "not available");
      goto out;
    }
  }
  if (!(device = device_key(&o, &e))) goto out;
  kn_math math = KN_MATH_FP32; /* --precision's names are the arithmetic's */
  kn_math_parse(gpu_precision_name(c.precision), &math);

  /* ---- measure, writing the database as it goes ---- */
  out = c.out ? g_strdup(c.out)
              : g_strdup_printf("%s/kernels/db/%s.json", dl_datadir(), device);
  GString *what = g_string_new(NULL);
  if (workload_given)
    g_string_append_printf(what, "workload %s batch %ld gpus %d dp %d tp %d pp %d %s%s",
                           c.workload, c.batch, c.gpus, c.dp, c.tp, c.pp,
                           gpu_precision_name(c.precision), o.grid_shapes ? " + grid shapes" : "");
  if (o.quick) g_string_append_printf(what, "%squick set", what->len ? "; " : "");
  int kept = 0;
  if (o.resume && g_file_test(out, G_FILE_TEST_EXISTS)) {
    if (!(db = kdb_load(out, &e))) goto out;
    const char *backend = kdb_prov_str(db, "backend");
    if (kdb_is_derived(db) || strcmp(kdb_name(db), device) != 0 ||
        !backend || strcmp(backend, o.device) != 0) {
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "kbench: --resume: %s holds times for %s%s "
                  "(backend %s), not for this device (%s, backend %s)", out, kdb_name(db),
                  kdb_is_derived(db) ? ", derived" : "", backend ? backend : "unknown", device,
                  o.device);
      g_string_free(what, TRUE);
      goto out;
    }
    kept = kdb_n_entries(db);
    /* the configurations already listed (a configuration run again is not listed twice) */
    const char *before = kdb_prov_str(db, "measured_set");
    if (before && *before) {
      char **sets = g_strsplit(before, "; ", -1);
      gboolean listed = g_strv_contains((const char *const *)sets, what->str);
      g_strfreev(sets);
      if (listed) g_string_assign(what, before);
      else g_string_prepend(g_string_prepend(what, "; "), before);
    }
  } else {
    db = kdb_new(device);
  }
  kdb_set_prov_str(db, "measured_set", what->str);
  g_string_free(what, TRUE);
  kh_opts ho;
  kh_opts_default(&ho);
  if (o.repeats) {
    ho.max_repeats = o.repeats;
    ho.min_repeats = MIN(ho.min_repeats, o.repeats);
  }
  fill_provenance(db, device, &o, &ho);
  gint64 t_start = g_get_monotonic_time(), t_saved = t_start;
  int measured = 0, n_failed = 0;
  for (guint i = 0; i < jobs->len; i++) {
    kb_job *j = g_ptr_array_index(jobs, i);
    if (kdb_find(db, j->key)) continue; /* kept from the file (--resume) */
    kh_layer kl;
    layer_of(&kl, &j->k, j->op.layer >= 0 ? &j->shard : NULL);
    char *why = NULL;
    kh_bench *b = kh_bench_new(be, &kl, math, &why);
    kh_stats st;
    int timed = b ? kh_time(b, dev, &ho, &st) : -1;
    if (b) kh_bench_free(b);
    if (timed != 0) { /* said, and on to the next: what was measured is written all the same */
      char *what = g_strdup_printf("%s: %s", j->key,
                                   b ? "out of memory for the timings" : why ? why : "setup failed");
      fprintf(stderr, "\nkbench: not measured: %s\n", what);
      if (!failed) failed = what;
      else g_free(what);
      n_failed++;
      free(why);
      continue;
    }
    /* kdb_add copies the name */
    kdb_entry en = {j->key, (char *)j->op.kname, c.precision, j->k.gemm_like,
                    j->k.flops, j->k.bytes, st.median_s, st.mean_s,
                    st.stddev_s, st.repeats, shape_json(&kl), FALSE};
    kdb_add(db, &en);
    g_free(en.shape);
    measured++;
    gint64 now = g_get_monotonic_time();
    fprintf(stderr, "\rkbench [%u/%u] %6.1f s  %-12s n=%-5" G_GINT64_FORMAT " %9.3f ms  %7.2f "
            "GFLOP/s%s", i + 1, jobs->len, (now - t_start) / 1e6, j->op.kname, j->k.samples,
            st.median_s * 1e3, j->k.flops / st.median_s / 1e9, "        ");
    fflush(stderr);
    if (now - t_saved > 10 * G_USEC_PER_SEC) { /* written as it goes */
      kdb_set_prov_num(db, "wall_s", (now - t_start) / 1e6);
      g_free(json);
      json = kdb_to_json(db);
      if (!dl_write_file_atomic(out, json, strlen(json), &e)) {
        status = 1;
        goto out;
      }
      t_saved = now;
    }
  }
  fprintf(stderr, "\n");
  kdb_set_prov_num(db, "wall_s", (g_get_monotonic_time() - t_start) / 1e6);
  g_free(json);
  json = kdb_to_json(db);
  if (!dl_write_file_atomic(out, json, strlen(json), &e)) {
    status = 1;
    goto out;
  }
  if (kept)
    printf("kbench: %d kernels measured on %s in %.1f s, %d kept from before -> %s\n", measured,
           device, (g_get_monotonic_time() - t_start) / 1e6, kept, out);
  else
    printf("kbench: %d kernels measured on %s in %.1f s -> %s\n", measured, device,
           (g_get_monotonic_time() - t_start) / 1e6, out);
  status = 0;
  if (failed) {
    g_set_error(&e, DL_ERROR, DL_ERR_INTERNAL,
                "kbench: %d kernel(s) not measured (the others are in %s); the first: %s",
                n_failed, out, failed);
    status = 1;
  }
out:
  g_free(failed);
  if (e) {
    cli_error(e->message);
    if (status == 2 && e->code != DL_ERR_INPUT) status = 1;
    g_error_free(e);
  }
  for (guint i = 0; i < jobs->len; i++) {
    kb_job *j = g_ptr_array_index(jobs, i);
    g_free(j->key);
    g_free(j);
  }
  g_ptr_array_free(jobs, TRUE);
  g_hash_table_destroy(seen);
  g_ptr_array_free(models, TRUE);
  kdb_free(db);
  g_free(out);
  g_free(json);
  g_free(device);
  g_free(o.device);
  g_free(o.note);
  g_free(o.derive_for);
  g_free(o.from);
  g_free(o.from_spec);
  g_free(o.spec);
  cfg_release(&c);
  return status;
}
