/* exec.c — the executor table, and launching the rank-side executors (see exec.h). */
#include "exec/exec.h"

#include <cjson/cJSON.h>
#include <string.h>
#include <unistd.h>

#include "core/child.h"
#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "exec/launch.h"

/* ---- request and result documents ------------------------------------------------------------ */

/* The request: the configuration, and where the executor writes its trace and weights (in the
 * run's temporary directory; the driver installs them where the user asked once the run
 * succeeded). */
static gboolean request_write(const char *path, const run_ctx *x, const cfg_run *c,
                              const char *trace, const char *weights, int fold, int rails,
                              GError **err) {
  GError *e = NULL;
  const gboolean private = x->platform && plat_node_links_private(x->platform, &e);
  if (e) {
    g_propagate_error(err, e);
    return FALSE;
  }
  cJSON *root = cJSON_CreateObject();
  cJSON_AddItemToObject(root, "config", cfg_to_json(c));
  cJSON *gpu = cJSON_AddObjectToObject(root, "gpu");
  cJSON_AddStringToObject(gpu, "model", x->gpu->name);
  cJSON_AddNumberToObject(gpu, "mem_bytes", x->gpu_mem_bytes);
  char *nccl = nccl_env_to_string(&x->nccl);
  cJSON_AddStringToObject(root, "nccl", nccl);
  g_free(nccl);
  cJSON_AddBoolToObject(root, "node_links_private", private);
  cJSON_AddNumberToObject(root, "fold_channels", fold);
  cJSON_AddNumberToObject(root, "fold_rails", rails);
  cJSON_AddNumberToObject(root, "kernel_sample", x->sample);
  if (trace) cJSON_AddStringToObject(root, "trace", trace);
  else cJSON_AddNullToObject(root, "trace");
  if (weights) cJSON_AddStringToObject(root, "dump_weights", weights);
  else cJSON_AddNullToObject(root, "dump_weights");
  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  gboolean ok = dl_write_file_atomic(path, txt, strlen(txt), err);
  cJSON_free(txt);
  return ok;
}

/* Copies the file `from`, an output the executor wrote, to `to` (dl_write_file_atomic). Not
 * dl_read_file: that one is for inputs and caps their size, and a trace of a large run is
 * larger. DL_ERR_IO on failure. */
static gboolean install(const char *from, const char *to, GError **err) {
  gsize len = 0;
  char *data = NULL;
  GError *e = NULL;
  if (!g_file_get_contents(from, &data, &len, &e)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot read the executor's output: %s", to,
                e->message);
    g_error_free(e);
    return FALSE;
  }
  gboolean ok = dl_write_file_atomic(to, data, len, err);
  g_free(data);
  return ok;
}

/* An optional path: a string, or null. */
static gboolean opt_path(const cJSON *root, const char *key, const char *path, char **out,
                         GError **err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (cJSON_IsNull(v)) return TRUE;
  if (!cJSON_IsString(v)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: expected a path or null", path, key);
    return FALSE;
  }
  *out = g_strdup(v->valuestring);
  return TRUE;
}

gboolean exec_request_read(const char *path, cfg_run *c, exec_request *req, GError **err) {
  memset(req, 0, sizeof *req);
  char *txt = dl_read_file(path, NULL, err);
  if (!txt) return FALSE;
  cJSON *root = cJSON_Parse(txt);
  g_free(txt);
  gboolean ok = root && cfg_from_json(c, cJSON_GetObjectItemCaseSensitive(root, "config"), path,
                                      err) &&
                opt_path(root, "trace", path, &req->trace, err) &&
                opt_path(root, "dump_weights", path, &req->dump_weights, err);
  const cJSON *gpu = root ? cJSON_GetObjectItemCaseSensitive(root, "gpu") : NULL;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(gpu, "model"),
              *mem = cJSON_GetObjectItemCaseSensitive(gpu, "mem_bytes");
  if (ok && (!cJSON_IsString(model) || !cJSON_IsNumber(mem))) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: gpu: expected {\"model\": name, "
                "\"mem_bytes\": n}", path);
    ok = FALSE;
  }
  const cJSON *nccl = root ? cJSON_GetObjectItemCaseSensitive(root, "nccl") : NULL;
  if (ok && !cJSON_IsString(nccl)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: nccl: expected a string", path);
    ok = FALSE;
  }
  const cJSON *priv = root ? cJSON_GetObjectItemCaseSensitive(root, "node_links_private") : NULL;
  if (ok && !cJSON_IsBool(priv)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: node_links_private: expected true or false",
                path);
    ok = FALSE;
  }
  const cJSON *fold = root ? cJSON_GetObjectItemCaseSensitive(root, "fold_channels") : NULL;
  if (ok && (!cJSON_IsNumber(fold) || fold->valuedouble < 1 ||
             fold->valuedouble > COLL_MAX_RINGS || fold->valuedouble != (int)fold->valuedouble)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: fold_channels: expected an integer 1..%d",
                path, COLL_MAX_RINGS);
    ok = FALSE;
  }
  const cJSON *rails = root ? cJSON_GetObjectItemCaseSensitive(root, "fold_rails") : NULL;
  if (ok && (!cJSON_IsNumber(rails) || rails->valuedouble < 1 || rails->valuedouble > 1024 ||
             rails->valuedouble != (int)rails->valuedouble)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: fold_rails: expected an integer 1..1024", path);
    ok = FALSE;
  }
  const cJSON *smp = root ? cJSON_GetObjectItemCaseSensitive(root, "kernel_sample") : NULL;
  if (ok && (!cJSON_IsNumber(smp) || smp->valuedouble < 0 || smp->valuedouble > CFG_MAX_SAMPLES ||
             smp->valuedouble != (int)smp->valuedouble)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: kernel_sample: expected an integer 0..%d", path,
                CFG_MAX_SAMPLES);
    ok = FALSE;
  }
  if (ok) {
    req->kernel_sample = (int)smp->valuedouble;
    req->fold_rails = (int)rails->valuedouble;
    req->fold_channels = (int)fold->valuedouble;
    req->node_links_private = cJSON_IsTrue(priv);
    req->nccl = g_strdup(nccl->valuestring);
    req->gpu_model = g_strdup(model->valuestring);
    req->gpu_mem_bytes = mem->valuedouble;
  }
  if (!root) g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: not a JSON document", path);
  cJSON_Delete(root);
  return ok;
}

void exec_request_release(exec_request *req) {
  g_free(req->trace);
  g_free(req->dump_weights);
  g_free(req->gpu_model);
  g_free(req->nccl);
  memset(req, 0, sizeof *req);
}

char *exec_result_write(const res_result *r, const run_ctx *x, const char *result_path,
                        const char *trace_path, const GString *trace) {
  GError *e = NULL;
  char *err = NULL;
  char *json = res_to_json(r, &x->cfg, x->model);
  if (!dl_write_file_atomic(result_path, json, strlen(json), &e) ||
      (trace && trace_path && !dl_write_file_atomic(trace_path, trace->str, trace->len, &e))) {
    err = g_strdup(e->message);
    g_error_free(e);
  }
  g_free(json);
  return err;
}

/* ---- launching a rank-side executor ---------------------------------------------------------- */

/* Starts an executor with `prog_argv` (NULL-terminated), on platform file `platform` (NULL: the
 * run's); FALSE with `err` set when it could not run or failed. */
typedef gboolean (*start_fn)(const run_ctx *x, const cfg_run *c, const char *platform,
                             const char *const *prog_argv, GError **err);

/* Channel folding (plat_fold_xml, coll_topo.fold): the channels a simulation of `c` may fold, 1
 * for none. Every collective of the run must be a ring or tree all-reduce over every rank, in
 * whole nodes of at least two, with one channel per GPU of a node: a data-parallel run with
 * nothing else (no tensor, pipeline, expert, grid or domain split, no trace; ZeRO and FSDP's
 * reduce-scatters and gathers over all of dp are rings too, but not --fsdp hybrid's groups of
 * part of it), with NCCL's choice or --coll ring or tree. */
static int sim_fold_channels(const run_ctx *x, const cfg_run *c) {
  if (c->mode != CFG_MODE_SIM || c->no_folding || x->trace || !x->platform) return 1;
  if (c->dp != c->gpus || c->tp > 1 || c->pp > 1 || c->ep > 1 || c->cp > 1 || c->grid_pr > 0 ||
      c->grid_auto || c->domain_conv || c->fsdp == CFG_FSDP_HYBRID)
    return 1;
  if (c->coll && strcmp(c->coll, "ring") != 0 && strcmp(c->coll, "tree") != 0) return 1;
  const int G = plat_gpus_per_node(x->platform);
  if (G < 2 || c->gpus % G || coll_ring_channels(c->gpus, G) != G) return 1;
  for (int i = 0; i < c->gpus; i++) /* ranks on hosts node-major, whole nodes */
    if (plat_host_at(x->platform, i)->node != plat_host_at(x->platform, i - i % G)->node ||
        plat_host_at(x->platform, i)->gpu != i % G)
      return 1;
  return G;
}

/* Rail folding (the SMPI executor's rail_folds, which checks the groups themselves): the rails a
 * simulation of `c` may fold, 1 for none. Data-parallel groups over one GPU per node, tensor
 * parallelism filling the node, on a rail-optimised cluster whose rails share no link. */
static int sim_fold_rails(const run_ctx *x, const cfg_run *c) {
  if (c->mode != CFG_MODE_SIM || c->no_folding || x->trace || !x->platform || c->dp < 2 ||
      x->slow || x->sample > 0 ||
      c->cp > 1 || c->tp != plat_gpus_per_node(x->platform) || !plat_rails_apart(x->platform))
    return 1;
  return c->tp;
}

/* Runs `c` through the executor `start` launches as `run REQUEST RESULT`, then reads its result
 * into `r`, with the wall time of the whole launch. */
static gboolean launch_run(const run_ctx *x, const cfg_run *c, start_fn start, res_result *r,
                           GError **err) {
  char *dir = dl_tmpdir_new("run", err);
  if (!dir) return FALSE;
  char *request = g_build_filename(dir, "request.json", NULL);
  char *result = g_build_filename(dir, "result.json", NULL);
  char *trace = c->trace ? g_build_filename(dir, "trace.json", NULL) : NULL;
  char *weights = c->dump_weights ? g_build_filename(dir, "weights.bin", NULL) : NULL;
  const char *argv[] = {"run", request, result, NULL};
  gint64 t0 = g_get_monotonic_time();
  /* a folded simulation runs on the folded copy of the platform */
  int fold = sim_fold_channels(x, c);
  char *folded = NULL, *platform = NULL;
  gboolean ok = TRUE;
  if (fold > 1) {
    folded = plat_fold_xml(x->platform, err);
    ok = folded || !(err && *err);
    if (folded) {
      platform = g_build_filename(dir, "platform.xml", NULL);
      ok = dl_write_file_atomic(platform, folded, strlen(folded), err);
    } else {
      fold = 1;
    }
  }
  ok = ok && request_write(request, x, c, trace, weights, fold, sim_fold_rails(x, c), err) &&
       start(x, c, platform, argv, err);
  char *txt = NULL;
  if (ok && !(txt = dl_read_file(result, NULL, NULL))) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL,
                "the executor ended before its ranks finished (for SMPI: SimGrid found them "
                "waiting for each other): a planner bug, please report this command");
    ok = FALSE;
  }
  if (ok && !res_from_json(r, txt, "executor result", err)) {
    if (err && *err) (*err)->code = DL_ERR_INTERNAL;
    ok = FALSE;
  }
  if (ok) r->wall_s = (g_get_monotonic_time() - t0) / 1e6;
  /* what the user asked for appears only once the run succeeded */
  ok = ok && (!trace || install(trace, c->trace, err)) &&
       (!weights || install(weights, c->dump_weights, err));
  g_free(txt);
  dl_tmpdir_remove(dir);
  g_free(folded);
  g_free(platform);
  g_free(request);
  g_free(result);
  g_free(trace);
  g_free(weights);
  return ok;
}

/* ---- progress of a simulation ---------------------------------------------------------------- */

static double expected_sim_s;

void exec_expect_simulated_s(double simulated_s) { expected_sim_s = simulated_s; }

static char progress_label[64];

void exec_progress_label(const char *label) {
  g_strlcpy(progress_label, label ? label : "", sizeof progress_label);
}

typedef struct {
  gint64 start_us;
  gboolean tty, drawn; /* standard error is a terminal; a line is on it */
  int step, minute;    /* when it is not: the last tenth reported, and the minute of the last
                          line (one at least every minute, however slow the tenths) */
} sim_progress;

static void progress_line(const char *text, void *data) {
  sim_progress *p = data;
  const double t = g_ascii_strtod(text, NULL), el = (g_get_monotonic_time() - p->start_us) / 1e6;
  if (el < (p->tty ? 2 : 60)) return; /* short runs stay quiet */
  const int pct = expected_sim_s > 0 ? (int)MIN(99, 100 * t / expected_sim_s) : -1;
  if (!p->tty) {
    const int step = pct / 10, minute = (int)(el / 60);
    if ((pct < 0 || step <= p->step) && minute <= p->minute) return;
    p->step = MAX(p->step, step);
    p->minute = minute;
  }
  char took[32], of[48] = "";
  dl_format_duration(took, sizeof took, el);
  if (pct >= 0) g_snprintf(of, sizeof of, " of ~%.4g", expected_sim_s);
  fprintf(stderr, "%sdlsim: simulating%s%s: %.4g%s simulated s", p->tty ? "\r\033[K" : "",
          *progress_label ? " " : "", progress_label, t, of);
  if (pct >= 0) fprintf(stderr, " (%d%%)", pct);
  fprintf(stderr, ", %s%s", took, p->tty ? "" : "\n");
  fflush(stderr);
  p->drawn = p->tty;
}

static gboolean start_smpi(const run_ctx *x, const cfg_run *c, const char *platform,
                           const char *const *argv, GError **err) {
  const char **hosts = g_new(const char *, c->gpus);
  for (int i = 0; i < c->gpus; i++) hosts[i] = plat_host_at(x->platform, i)->id;
  /* --coll smpi:NAME pins SMPI's algorithm NAME for every operation that has a selector */
  GPtrArray *extra = g_ptr_array_new_with_free_func(g_free);
  for (int op = 0; c->coll && op < COLL_OP_COUNT; op++) {
    char *item = coll_smpi_cfg((coll_op)op, c->coll);
    if (item) g_ptr_array_add(extra, item);
  }
  launch_network_cfg(x->platform, c->simgrid_cfg, extra);
  g_ptr_array_add(extra, NULL);
  sim_progress pg = {g_get_monotonic_time(), isatty(2) && !*progress_label, FALSE, -1, 0};
  const dl_child_watch watch = {EXEC_PROGRESS, progress_line, &pg};
  gboolean ok = launch_smpi(platform ? platform : plat_file(x->platform), c->gpus, hosts, argv,
                            (const char *const *)extra->pdata, NULL, &watch, err);
  if (pg.drawn) fprintf(stderr, "\r\033[K");
  g_ptr_array_free(extra, TRUE);
  g_free(hosts);
  return ok;
}

static gboolean start_real(const run_ctx *x, const cfg_run *c, const char *platform,
                           const char *const *argv, GError **err) {
  (void)x, (void)platform;
  return launch_mpirun(c->gpus, argv, NULL, err);
}

/* ---- the executors --------------------------------------------------------------------------- */

static gboolean exec_analytic_check(const run_ctx *x, const cfg_run *c, GError **err) {
  if (c->trace) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--trace: the closed form has no timeline; traces come from --mode sim");
    return FALSE;
  }
  /* the network settings the closed form applies (platform.c reads them for plat_flows and
   * plat_msg_times); others need SimGrid itself */
  static const char *const applied[] = {"network/TCP-gamma", "network/crosstraffic",
                                        "network/weight-S", "smpi/bw-factor", "smpi/lat-factor",
                                        NULL};
  for (int i = 0; c->simgrid_cfg && c->simgrid_cfg[i]; i++) {
    const char *item = c->simgrid_cfg[i], *colon = strchr(item, ':');
    gboolean ok = FALSE;
    for (int k = 0; applied[k] && !ok; k++)
      ok = colon && (size_t)(colon - item) == strlen(applied[k]) &&
           strncmp(item, applied[k], strlen(applied[k])) == 0;
    if (!ok) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--simgrid-cfg %s: the closed form applies only "
                  "network/TCP-gamma, network/crosstraffic, network/weight-S, smpi/bw-factor and "
                  "smpi/lat-factor; use --mode sim", item);
      return FALSE;
    }
  }
  return analytic_check(x, c, err);
}

static gboolean exec_analytic_run(const run_ctx *x, const cfg_run *c, res_result *r, GError **err) {
  return analytic_run(x, c, r, err);
}

static gboolean exec_sim_check(const run_ctx *x, const cfg_run *c, GError **err) {
  return analytic_check(x, c, err);
}

static gboolean exec_sim_run(const run_ctx *x, const cfg_run *c, res_result *r, GError **err) {
  return launch_run(x, c, start_smpi, r, err);
}

/* What the real executor cannot run yet, layer by layer. */
static gboolean exec_real_check_layer(const wl_model *m, const wl_layer *l, int i, GError **err) {
  const char *why = NULL;
  if (l->kind == WL_LINEAR && l->tied_to >= 0 && l->bias) why = "tied linears with a bias";
  else if (l->kind == WL_LINEAR && l->tied_to >= 0 && m->layers[l->tied_to].kind != WL_EMBEDDING)
    why = "linears tied to a linear";
  else if (l->kind == WL_EMBEDDING && l->inputs[0] != -1) why = "embeddings that read a layer";
  else if (l->kind == WL_SOFTMAX_CE && i != m->n_layers - 1) why = "losses before the last layer";
  else if (i == m->n_layers - 1 && l->kind != WL_SOFTMAX_CE) why = "models without a final loss";
  else if (m->vocab > 0 && l->kind != WL_EMBEDDING &&
           (l->inputs[0] == -1 || (l->n_inputs > 1 && l->inputs[1] == -1)))
    why = "token ids read by a layer other than an embedding";
  if (!why) return TRUE;
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s: layer '%s' (%s): %s are not run "
              "for real yet", m->path, l->name, wl_layer_kind_name(l->kind), why);
  return FALSE;
}

/* What --device cuda cannot run: Gholami's grid and tensor splits, domain and expert parallelism
 * rearrange their tensors on the host between kernels (exec/real/), which the GPU's memory does
 * not allow; ring attention's kernels have no --precision but fp32. (A machine without the CUDA module or a GPU is refused by the ranks, which load
 * it.) */
static gboolean exec_real_check_cuda(const cfg_run *c, GError **err) {
  const char *what = c->grid_pr > 0                                 ? "--grid"
                     : c->ep > 1                                    ? "--ep"
                     : c->tp > 1 && c->tp_style != CFG_TP_MEGATRON ? "--tp-style gholami"
                                                                    : NULL;
  if (!what && c->cp > 1 && c->cp_style == CFG_CP_RING && c->precision != GPU_FP32) {
    /* the block kernels of ring attention compute in fp32 whatever --precision says */
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--device cuda: --cp %d: ring attention's block "
                "kernels compute in fp32; use --precision fp32, or --cp-style ulysses", c->cp);
    return FALSE;
  }
  if (!what) return TRUE;
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--device cuda: %s: grid, domain, expert and "
              "Gholami-style tensor parallelism run for real only on --device cpu; on the GPU use "
              "data, pipeline and Megatron tensor parallelism", what);
  return FALSE;
}

/* The real executor refuses --grid auto, --precision fp16/bf16 on the CPU (whose kernels
 * compute in fp32), --autocast, --recompute full with domain splits or experts,
 * --sequence-parallel with ZeRO or FSDP, ZeRO or FSDP with weights tied across pipeline stages,
 * and layers without a real implementation; splits it cannot make are refused by
 * real_shard_plan (real_shard.h) when the ranks start. */
static gboolean exec_real_check(const run_ctx *x, const cfg_run *c, GError **err) {
  const char *whatif = cfg_whatif_option(c, TRUE);
  if (whatif) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: --mode real runs the GPUs and links it has and "
                "measures its own times; use --mode sim or --mode analytic", whatif);
    return FALSE;
  }
  if (c->simgrid_cfg) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--simgrid-cfg %s: --mode real runs no SimGrid; "
                "use --mode sim", c->simgrid_cfg[0]);
    return FALSE;
  }
  if (x->trace) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --workload %s: a trace holds times and "
                "sizes, not the model's tensors; run it with --mode sim or --mode analytic",
                c->workload);
    return FALSE;
  }
  if (c->grid_auto) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --grid auto searches grids without "
                "running them; name one grid, e.g. --grid 2x2");
    return FALSE;
  }
  if (c->autocast) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --autocast: the real build keeps "
                "one fp32 copy of the weights and rounds inside its kernels; leave it out");
    return FALSE;
  }
  if (c->device == CFG_DEVICE_CPU && (c->precision == GPU_FP16 || c->precision == GPU_BF16)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--mode real: --precision %s: the CPU kernels compute in fp32; use --precision "
                "fp32, or --device cuda", gpu_precision_name(c->precision));
    return FALSE;
  }
  gboolean moe = FALSE;
  for (int i = 0; i < x->model->n_layers; i++) moe |= x->model->layers[i].kind == WL_MOE;
  if (c->recompute && (c->domain_conv || moe)) { /* forward collectives would run in backward */
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --recompute full with %s is not run "
                "for real yet; leave out --recompute", c->domain_conv ? "--domain conv"
                : "a mixture of experts");
    return FALSE;
  }
  if (c->sequence_parallel && (c->zero || c->fsdp != CFG_FSDP_NONE)) {
    char opt[32];
    cfg_sharding_option(c, opt, sizeof opt);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --sequence-parallel with %s is not run "
                "for real yet; leave out one of them", opt);
    return FALSE;
  }
  if ((c->zero || c->fsdp != CFG_FSDP_NONE) && c->pp > 1)
    for (int i = 0; i < x->model->n_layers; i++)
      if (x->model->layers[i].tied_to >= 0) {
        char opt[32];
        cfg_sharding_option(c, opt, sizeof opt);
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: %s with --pp %d: layer '%s' shares "
                    "the weights of '%s' across stages, and the real build sums such pairs only "
                    "for whole gradients; leave out %s or --pp", opt, c->pp,
                    x->model->layers[i].name, x->model->layers[x->model->layers[i].tied_to].name,
                    opt);
        return FALSE;
      }
  if (c->grad_reduce != GPU_FP32) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --grad-reduce-dtype %s: the real build "
                "reduces gradients in fp32; leave it out", gpu_precision_name(c->grad_reduce));
    return FALSE;
  }
  if (c->cuda_graphs) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--mode real: --cuda-graphs: the real build launches "
                "every kernel itself; leave it out");
    return FALSE;
  }
  for (int i = 0; i < x->model->n_layers; i++)
    if (!exec_real_check_layer(x->model, &x->model->layers[i], i, err)) return FALSE;
  return c->device != CFG_DEVICE_CUDA || exec_real_check_cuda(c, err);
}

static gboolean exec_real_run(const run_ctx *x, const cfg_run *c, res_result *r, GError **err) {
  return launch_run(x, c, start_real, r, err);
}

static const exec_ops executors[] = {
    {CFG_MODE_SIM, "sim", exec_sim_check, exec_sim_run},
    {CFG_MODE_REAL, "real", exec_real_check, exec_real_run},
    {CFG_MODE_ANALYTIC, "analytic", exec_analytic_check, exec_analytic_run},
};

const exec_ops *exec_for(cfg_mode mode) {
  for (size_t i = 0; i < G_N_ELEMENTS(executors); i++)
    if (executors[i].mode == mode) return &executors[i];
  return NULL;
}
