/* context.c — opening a run (see context.h). */
#include "exec/context.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"

/* The GPU model of every host: its gpu_model property, or --gpu for hosts without one. One model
 * per run: hosts that differ are refused, as is --gpu against a host that names another. */
static gboolean platform_gpu(run_ctx *x, GError **err) {
  const char *path = plat_path(x->platform), *given = x->cfg.gpu, *model = NULL;
  const plat_host *first = NULL;
  for (int i = 0; i < plat_n_hosts(x->platform); i++) {
    const plat_host *h = plat_host_at(x->platform, i);
    const char *m = *h->gpu_model ? h->gpu_model : given;
    if (!m) {
      char *known = gpu_known_names();
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "%s: host %s has no gpu_model property: add <prop id=\"gpu_model\" "
                  "value=\"MODEL\"/> to its <host>, or pass --gpu MODEL (known: %s)",
                  path, h->id, known);
      g_free(known);
      return FALSE;
    }
    if (given && *h->gpu_model && strcmp(h->gpu_model, given) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "--gpu %s: %s: host %s says gpu_model \"%s\" (--gpu is for hosts without one)",
                  given, path, h->id, h->gpu_model);
      return FALSE;
    }
    if (model && strcmp(m, model) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "%s: hosts %s and %s have gpu_model %s and %s: dlsim simulates one GPU model "
                  "per run", path, first->id, h->id, model, m);
      return FALSE;
    }
    if (!model) model = m, first = h;
  }
  x->gpu = model ? gpu_find(model) : NULL;
  if (!x->gpu) {
    char *known = gpu_known_names();
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host property gpu_model '%s' has no spec sheet "
                "(known: %s)", path, model ? model : "", known);
    g_free(known);
    return FALSE;
  }
  x->gpu_mem_bytes = first->gpu_mem_bytes > 0 ? first->gpu_mem_bytes : x->gpu->mem_bytes;
  return TRUE;
}

/* A named cluster design (a preset) asked for more GPUs than it has grows to them, with the
 * same nodes and network ("thetagpu" becomes "thetagpu:N"); a platform file stays what it is. */
static void grow_preset(run_ctx *x) {
  cfg_run *c = &x->cfg;
  plat_gen_params gp;
  if (strchr(c->platform, '/') || strchr(c->platform, ':') ||
      !plat_gen_preset(c->platform, &gp, NULL))
    return;
  const int per = gp.gpus_per_node, has = gp.nodes * gp.gpus_per_node;
  if (c->gpus <= has) return;
  char *scaled = g_strdup_printf("%s:%d", c->platform, (c->gpus + per - 1) / per);
  x->note = g_strdup_printf("%s has %d GPUs; simulating %d on %s (same nodes and network, more "
                            "of them)", c->platform, has, c->gpus, scaled);
  g_free(c->platform);
  c->platform = scaled;
}

/* x->kernels: the database's name, file, device and provenance, or the roofline's spec sheet,
 * and a note when the times are not measurements of this GPU. */
static void describe_kernels(run_ctx *x) {
  res_kdb *k = &x->kernels;
  if (!x->db) {
    k->name = g_strdup_printf("roofline:%s", x->gpu->name);
    k->file = g_strdup("");
    k->device = g_strdup(x->gpu->name);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "spec", x->gpu->source);
    cJSON_AddNumberToObject(p, "eff_compute", GPU_EFF_COMPUTE);
    cJSON_AddNumberToObject(p, "eff_memory", GPU_EFF_MEMORY);
    cJSON_AddNumberToObject(p, "launch_s", GPU_LAUNCH_S);
    char *t = cJSON_PrintUnformatted(p);
    k->provenance = g_strdup(t);
    cJSON_free(t);
    cJSON_Delete(p);
    return;
  }
  const char *path = kdb_path(x->db) ? kdb_path(x->db) : "", *dir = dl_datadir();
  gsize n = strlen(dir);
  gboolean inside = strncmp(path, dir, n) == 0 && path[n] == '/';
  k->name = g_strdup(kdb_name(x->db));
  k->file = g_strdup(inside ? path + n + 1 : path);
  k->device = g_strdup(kdb_device(x->db));
  k->provenance = kdb_provenance_json(x->db);
  GString *note = g_string_new(NULL);
  if (g_ascii_strcasecmp(k->device, x->gpu->name) != 0)
    g_string_append_printf(note, "times for %s, used for %s (--kernels-any-device)",
                           k->device, x->gpu->name);
  if (kdb_is_derived(x->db)) {
    const char *from = kdb_prov_str(x->db, "derived_from");
    const char *backend = kdb_prov_str(x->db, "backend");
    g_string_append_printf(note, "%stimes derived from %s%s by spec-sheet ratios, not measured on "
                           "%s", note->len ? "; " : "", from ? from : "another device's",
                           backend && !strcmp(backend, "pytorch") ? " (PyTorch's kernels)" : "",
                           k->device);
  }
  k->note = note->len ? g_string_free(note, FALSE) : (g_string_free(note, TRUE), NULL);
}

/* The kernel times, once the configuration and the GPU are settled. */
static gboolean open_kernels(run_ctx *x, GError **err) {
  if (!ktime_open_db(x->cfg.kernels, x->gpu->name, x->cfg.kernels_any_device, &x->db, err))
    return FALSE;
  double l2b, l2c, l2w;
  x->twin = kdb_layer_twins(x->model);
  x->kt = (ktime_source){x->gpu, x->cfg.precision, x->model, x->db,
                         x->cfg.host_launch && !x->cfg.cuda_graphs && kdb_has_host(x->db),
                         x->cfg.l2_reuse && kdb_l2(x->db, &l2b, &l2c, &l2w), x->twin,
                         ktime_layer_memo_new()};
  x->layer_t = ktime_layer_times(&x->kt, &x->cfg);
  describe_kernels(x);
  gboolean ok;
  x->slow = cfg_slow_factors(&x->cfg, &ok, err);
  return ok;
}

/* --degrade: the links its items name or draw, each once (a link named twice takes the product
 * of its factors), into x->degraded; the platform becomes the copy with those links scaled. */
static gboolean degrade_platform(run_ctx *x, GError **err) {
  const cfg_run *c = &x->cfg;
  if (!c->degrade || c->mode == CFG_MODE_REAL) return TRUE; /* the real executor refuses it */
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  GArray *factors = g_array_new(FALSE, FALSE, sizeof(double));
  GHashTable *at = g_hash_table_new(g_str_hash, g_str_equal); /* name -> index + 1 */
  gboolean ok = TRUE;
  char *link;
  gboolean nics;
  double fraction = 0, f;
  for (int i = 0; ok && cfg_degrade_item(c, i, &link, &nics, &fraction, &f); i++) {
    GPtrArray *pick = g_ptr_array_new_with_free_func(g_free);
    if (!nics) {
      g_ptr_array_add(pick, link);
    } else {
      GPtrArray *all = plat_nic_links(x->platform);
      if (!all || !all->len) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--degrade nics:%g:%g: %s is not a cluster "
                    "written by dlsim platform with NICs, whose NIC links are known; name its "
                    "links instead (LINK:F)", fraction, f, plat_path(x->platform));
        ok = FALSE;
      } else {
        /* the first round(FRACTION x NICs), at least one, of a shuffle by --seed and the item */
        const int n = (int)all->len, k = MAX(1, (int)lround(fraction * n));
        int *order = g_new(int, n);
        cfg_shuffle(c->seed, G_GUINT64_CONSTANT(0x6e6963) ^ ((guint64)i << 32), order, n);
        for (int j = 0; j < k; j++) g_ptr_array_add(pick, g_strdup(all->pdata[order[j]]));
        g_free(order);
      }
      if (all) g_ptr_array_free(all, TRUE);
    }
    for (guint j = 0; ok && j < pick->len; j++) {
      const int idx = GPOINTER_TO_INT(g_hash_table_lookup(at, pick->pdata[j]));
      if (idx) {
        g_array_index(factors, double, idx - 1) *= f;
        continue;
      }
      g_ptr_array_add(names, g_strdup(pick->pdata[j]));
      g_array_append_val(factors, f);
      g_hash_table_insert(at, names->pdata[names->len - 1], GINT_TO_POINTER(names->len));
    }
    g_ptr_array_free(pick, TRUE);
  }
  g_hash_table_destroy(at);
  /* a link named or drawn more than once takes the product of its factors, held to the range
   * one factor has */
  for (guint j = 0; ok && j < factors->len; j++) {
    const double fj = g_array_index(factors, double, j);
    if (!(fj >= CFG_DEGRADE_MIN && fj <= CFG_DEGRADE_MAX)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--degrade %s: link %s's factors multiply to %g, "
                  "outside %g to %g", c->degrade, (const char *)names->pdata[j], fj,
                  CFG_DEGRADE_MIN, CFG_DEGRADE_MAX);
      ok = FALSE;
    }
  }
  plat *cp = NULL;
  if (ok) {
    g_ptr_array_add(names, NULL);
    cp = plat_degrade(x->platform, (const char *const *)x->cfg.simgrid_cfg,
                      (const char *const *)names->pdata, (const double *)factors->data,
                      (int)factors->len, err);
    g_ptr_array_remove_index(names, names->len - 1);
  }
  if (cp) {
    plat_free(x->platform);
    x->platform = cp;
    x->degraded = names;
    x->degraded_f = factors;
    return TRUE;
  }
  g_ptr_array_free(names, TRUE);
  g_array_free(factors, TRUE);
  return FALSE;
}

/* Everything after the configuration is settled. */
static gboolean open_rest(run_ctx *x, GError **err) {
  grow_preset(x);
  if (!(x->platform = plat_load_cfg(x->cfg.platform, (const char *const *)x->cfg.simgrid_cfg,
                                    err)))
    return FALSE;
  if (!platform_gpu(x, err) || !plat_barrier_routes(x->platform, x->cfg.gpus, err)) return FALSE;
  if (x->cfg.fsdp == CFG_FSDP_HYBRID && !x->cfg.fsdp_shard) {
    /* HYBRID_SHARD's default: shard among the data-parallel ranks of one node */
    const int G = plat_gpus_per_node(x->platform), tp = x->cfg.tp;
    int s = G % tp == 0 ? MAX(1, G / tp) : 1, d = x->cfg.dp;
    while (d) { /* gcd(s, dp): the shard groups tile the data-parallel ranks */
      int t = s % d;
      s = d;
      d = t;
    }
    x->cfg.fsdp_shard = s;
  }
  /* NCCL tunes for the NICs as built: a degraded link does not change its choices */
  run_ctx_nccl_env(x->platform, x->gpu, x->cfg.nccl_proto, &x->nccl);
  return degrade_platform(x, err) && open_kernels(x, err);
}

void run_ctx_nccl_env(const plat *pl, const gpu_spec *gpu, int proto, nccl_env *out) {
  *out = (nccl_env){nccl_arch_of_cc(gpu ? gpu->compute_capability : 0), 1, 0, 0, 0, proto, 0};
  const int n = plat_n_hosts(pl);
  const plat_host *h0 = n ? plat_host_at(pl, 0) : NULL;
  out->cpu_amd = h0 && g_ascii_strcasecmp(h0->cpu_vendor, "amd") == 0;
  int intra = -1, inter = -1;
  for (int i = 1; h0 && i < n && (intra < 0 || inter < 0); i++) {
    const int same = plat_host_at(pl, i)->node == h0->node;
    if (same && intra < 0) intra = i;
    if (!same && inter < 0) inter = i;
  }
  plat_route_info r;
  if (intra > 0 && plat_route(pl, 0, intra, &r, NULL)) out->intra_bps = r.bottleneck_bps;
  if (inter > 0 && plat_route(pl, 0, inter, &r, NULL)) out->nic_bps = r.bottleneck_bps;
  out->nics = plat_nics_per_node(pl);
  /* NVLink: a node's GPUs reach each other faster than the network (a star's do not) */
  out->nvlink = out->intra_bps > out->nic_bps;
}

/* Two uniforms, u1 in (0, 1] and u2 in [0, 1), from a hash of the keys (SplitMix64's
 * finaliser over each in turn): the same keys, the same numbers on every machine. */
static void draw_uniforms(unsigned seed, guint64 salt, int sample, int rank, int op, int iter,
                          double *u1, double *u2) {
  guint64 h = (guint64)seed * 0x9e3779b97f4a7c15ULL ^ salt;
  const guint64 keys[] = {(guint64)sample, (guint64)rank, (guint64)op, (guint64)iter, 0};
  guint64 z = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
    if (i + 1 == G_N_ELEMENTS(keys)) z = h; /* the last round gives the second number */
    h ^= keys[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h = cfg_splitmix64(&h);
  }
  *u1 = ((double)(z >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
  *u2 = (double)(h >> 11) / 9007199254740992.0;         /* [0, 1) */
}

double run_ctx_draw(unsigned seed, int sample, int rank, int op, int iter, double cv) {
  if (sample <= 0 || !(cv > 0)) return 1;
  double u1, u2;
  draw_uniforms(seed, 0, sample, rank, op, iter, &u1, &u2);
  const double n = sqrt(-2.0 * log(u1)) * cos(2.0 * G_PI * u2);
  return exp(sqrt(log1p(cv * cv)) * n);
}

double run_ctx_comm_delay(const run_ctx *x, int rank, int op, int iter) {
  if (x->sample <= 0 || !(x->cfg.net_jitter_s > 0)) return 0;
  double u1, u2;
  draw_uniforms(x->cfg.seed, G_GUINT64_CONSTANT(0x6e6574), x->sample, rank, op, iter, &u1, &u2);
  return -x->cfg.net_jitter_s * log(u1);
}

double run_ctx_kernel_s(const run_ctx *x, const plan_op *op, int op_index, int rank, int iter,
                        kdb_origin *origin) {
  double t = ktime_kernel_s(&x->kt, op, origin) * run_ctx_slow(x, rank);
  if (x->sample > 0)
    t *= run_ctx_draw(x->cfg.seed, x->sample, rank, op_index, iter, ktime_kernel_cv(&x->kt, op));
  return t;
}

/* ---- a Chakra trace as the workload ------------------------------------------------------------ */

#define CHAKRA_PREFIX "chakra:"

/* The model of a trace: no layers (the trace's ops are the work); its name, parameters, FLOP per
 * sample and dataset as dlsim wrote them, else FLOP from the compute nodes' num_ops over the
 * batch (all counted as forward). */
static wl_model *trace_model(const run_ctx *x, long batch) {
  const et_file *f = plan_trace_file(x->trace, 0);
  wl_model *m = g_new0(wl_model, 1);
  const et_attr *name = et_meta_attr(f, "dlsim_model"), *ds = et_meta_attr(f, "dlsim_dataset");
  m->name = g_strdup(x->cfg.workload);
  m->description = g_strdup_printf("Chakra execution trace%s%s",
                                   name && name->kind == ET_A_STRING ? " of " : "",
                                   name && name->kind == ET_A_STRING ? name->s : "");
  m->path = g_strdup(x->cfg.workload + strlen(CHAKRA_PREFIX));
  m->dataset = g_strdup(ds && ds->kind == ET_A_STRING ? ds->s : "");
  m->dataset_samples = (int64_t)CLAMP(et_meta_num(f, "dlsim_dataset_samples", 0), 0, 1e15);
  m->params = (int64_t)CLAMP(et_meta_num(f, "dlsim_model_params", 0), 0, 1e15);
  m->default_batch = batch;
  m->fwd_flops = et_meta_num(f, "dlsim_fwd_flops_per_sample", -1);
  m->bwd_flops = et_meta_num(f, "dlsim_bwd_flops_per_sample", -1);
  if (!(m->fwd_flops >= 0 && m->bwd_flops >= 0 && m->fwd_flops < 1e30 && m->bwd_flops < 1e30)) {
    double flops = 0;
    for (int r = 0; r < plan_trace_ranks(x->trace); r++) {
      const et_file *g = plan_trace_file(x->trace, r);
      for (int i = 0; i < g->n_nodes; i++) {
        const et_attr *a = et_node_attr(&g->nodes[i], "num_ops");
        if (g->nodes[i].type == ET_COMP && a && a->kind == ET_A_INT && a->i > 0) flops += a->i;
      }
    }
    m->fwd_flops = batch > 0 ? flops / batch : 0;
    m->bwd_flops = 0;
  }
  return m;
}

/* The layout a trace fixes: the ranks, and the degrees, micro-batches, batch and precision dlsim
 * wrote into its metadata (a trace from elsewhere: data parallel over its ranks, batch = ranks). */
static gboolean trace_config(run_ctx *x, GError **err) {
  cfg_run *c = &x->cfg;
  const int P = plan_trace_ranks(x->trace);
  const et_file *f = plan_trace_file(x->trace, 0);
  const char *dir = c->workload + strlen(CHAKRA_PREFIX);
  if (c->gpus && c->gpus != P) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--gpus %d: %s holds the traces of %d ranks",
                c->gpus, dir, P);
    return FALSE;
  }
  if (c->dp || c->tp || c->pp || c->ep || c->cp > 1 || c->microbatches || c->grid_pr ||
      c->grid_auto || c->zero || c->fsdp != CFG_FSDP_NONE || c->seq_len) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload %s: the trace fixes each rank's work; "
                "leave out --dp, --tp, --pp, --ep, --cp, --seq-len, --grid, --microbatches, "
                "--zero and --fsdp", c->workload);
    return FALSE;
  }
  c->gpus = P;
  static const char *const deg[] = {"dlsim_dp", "dlsim_tp", "dlsim_pp", "dlsim_ep",
                                    "dlsim_microbatches", "dlsim_cp"};
  int *dst[] = {&c->dp, &c->tp, &c->pp, &c->ep, &c->microbatches, &c->cp};
  for (size_t i = 0; i < G_N_ELEMENTS(deg); i++) {
    const double v = et_meta_num(f, deg[i], i == 0 ? P : 1);
    *dst[i] = v >= 1 && v <= P ? (int)v : 0; /* cfg_resolve refuses what does not fit */
  }
  const double b = et_meta_num(f, "dlsim_batch", 0);
  if (b >= 1 && b <= CFG_MAX_BATCH) {
    if (c->batch && c->batch != (long)b) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--batch %ld: %s was written for batch %ld",
                  c->batch, dir, (long)b);
      return FALSE;
    }
    c->batch = (long)b;
  }
  const et_attr *prec = et_meta_attr(f, "dlsim_precision");
  if (prec && prec->kind == ET_A_STRING && !gpu_precision_parse(prec->s, &c->precision)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: dlsim_precision '%s': not a precision", f->path,
                prec->s);
    return FALSE;
  }
  return TRUE;
}

/* The workload: a model, or for chakra:DIR the traces and a model of no layers. */
static gboolean open_workload(run_ctx *x, gboolean resolve, GError **err) {
  const char *w = x->cfg.workload;
  if (!g_str_has_prefix(w, CHAKRA_PREFIX))
    return (x->model = wl_load_seq(w, x->cfg.seq_len, err)) != NULL;
  if (!(x->trace = plan_trace_open(w + strlen(CHAKRA_PREFIX), resolve, err))) return FALSE;
  if (resolve && !trace_config(x, err)) return FALSE;
  x->model = trace_model(x, x->cfg.batch > 0 ? x->cfg.batch : plan_trace_ranks(x->trace));
  return TRUE;
}

plan_rank *run_ctx_plan(const run_ctx *x, const cfg_run *c, const double *layer_t, int rank,
                        GError **err) {
  if (x->trace) return plan_trace_rank(x->trace, rank, err);
  return plan_build(x->model, c, layer_t, rank, err);
}

int run_ctx_representative(const run_ctx *x, const cfg_run *c, int rank) {
  return x->trace ? rank : plan_representative(x->model, c, rank);
}

static void take(run_ctx *x, cfg_run *c) {
  memset(x, 0, sizeof *x);
  x->cfg = *c;
  cfg_init(c);
}

gboolean run_ctx_open(run_ctx *x, cfg_run *c, GError **err) {
  take(x, c);
  if (!open_workload(x, TRUE, err)) return FALSE;
  if (!cfg_resolve(&x->cfg, (long)x->model->default_batch, err)) return FALSE;
  cfg_resolve_style(&x->cfg, wl_has_tp_roles(x->model));
  return open_rest(x, err);
}

gboolean run_ctx_open_resolved(run_ctx *x, cfg_run *c, const char *gpu_model,
                               double gpu_mem_bytes, const char *nccl, GError **err) {
  take(x, c);
  x->nccl = (nccl_env){-1, 0, 0, 0, 0, NCCL_PROTO_OFF, 0};
  if (nccl && !nccl_env_parse(nccl, &x->nccl)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "request: nccl: malformed '%s'", nccl);
    return FALSE;
  }
  if (!open_workload(x, FALSE, err)) return FALSE;
  if (!(x->gpu = gpu_model ? gpu_find(gpu_model) : NULL)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "request: gpu model '%s' has no spec sheet",
                gpu_model ? gpu_model : "");
    return FALSE;
  }
  x->gpu_mem_bytes = gpu_mem_bytes > 0 ? gpu_mem_bytes : x->gpu->mem_bytes;
  return open_kernels(x, err);
}

void run_ctx_release(run_ctx *x) {
  g_free(x->layer_t);
  if (x->kt.layer_memo) g_hash_table_destroy(x->kt.layer_memo);
  g_free(x->twin);
  g_free(x->slow);
  if (x->degraded) g_ptr_array_free(x->degraded, TRUE);
  if (x->degraded_f) g_array_free(x->degraded_f, TRUE);
  kdb_free(x->db);
  plat_free(x->platform);
  wl_free(x->model);
  plan_trace_free(x->trace);
  res_kdb_release(&x->kernels);
  g_free(x->note);
  cfg_release(&x->cfg);
  memset(x, 0, sizeof *x);
}
