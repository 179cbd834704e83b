/* cmd_run.c — `dlsim run`: parse options, load the workload and platform, run one executor,
 * print the summary and write the result JSON. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "exec/analytic/analytic.h"
#include "cli/cmds.h"
#include "cli/options.h"
#include "core/config.h"
#include "exec/context.h"
#include "core/dl_common.h"
#include "exec/exec.h"
#include "out/result.h"
#include "study/gridsearch.h"
#include "study/interval.h"
#include "study/projection.h"

static gboolean not_fitting(const res_result *r, const wl_model *m, GError **err) {
  g_set_error(err, DL_ERROR, DL_ERR_INPUT,
              "%s does not fit in GPU memory: %.2f GB needed per GPU (params %.2f, grads %.2f, "
              "optimizer %.2f, activations %.2f, gathered %.2f) > %.2f GB on %s; use more GPUs, "
              "a smaller --batch, --recompute, --zero or --fsdp, or model parallelism (or "
              "--ignore-memory)",
              m->name, r->peak_mem_bytes / 1e9, r->mem.params / 1e9, r->mem.grads / 1e9,
              r->mem.optimizer / 1e9, r->mem.activations / 1e9, r->mem.gathered / 1e9,
              r->gpu_mem_bytes / 1e9, r->gpu_model);
  return FALSE;
}

/* The options of the whole-run projection, as text until checked. */
typedef struct {
  char *tokens, *epochs, *failures, *ckpt, *interval, *bw_node, *bw_total, *host_copy, *relaunch,
      *idle, *board, *mem_share, *nic, *port, *host, *pue, *gpu_price, *kwh_price;
  int warmup, samples, radix;
} proj_text;

#define PROJ_NOT_GIVEN INT_MIN

static void proj_text_release(proj_text *t) {
  char **s[] = {&t->tokens, &t->epochs,   &t->failures, &t->ckpt,      &t->interval,
                &t->bw_node, &t->bw_total, &t->host_copy, &t->relaunch, &t->idle,
                &t->board,  &t->mem_share, &t->nic,     &t->port,      &t->host,
                &t->pue,    &t->gpu_price, &t->kwh_price};
  for (size_t i = 0; i < G_N_ELEMENTS(s); i++) g_free(*s[i]);
}

/* Checks the projection's options into `o` (proj_opts_init'ed). */
static gboolean proj_options(const proj_text *t, guint64 seed, proj_opts *o, GError **err) {
  const struct {
    const char *name, *text, *expected;
    double lo, hi, *dst;
  } num[] = {
      {"--tokens", t->tokens, "a token count > 0 (15e12)", 1, 1e18, &o->tokens},
      {"--epochs", t->epochs, "epochs > 0", 1e-9, 1e9, &o->epochs},
      {"--ckpt-interval", t->interval, "seconds > 0, or auto", 1e-6, 1e12, &o->ckpt_interval_s},
      {"--ckpt-bw-node", t->bw_node, "bytes/s > 0", 1, 1e15, &o->ckpt_bw_node_bps},
      {"--ckpt-bw-total", t->bw_total, "bytes/s > 0", 1, 1e18, &o->ckpt_bw_total_bps},
      {"--host-copy-bw", t->host_copy, "bytes/s > 0", 1, 1e15, &o->host_copy_bps},
      {"--relaunch-s", t->relaunch, "seconds >= 0", 0, 1e9, &o->relaunch_s},
      {"--gpu-idle-w", t->idle, "watts >= 0", 0, 1e5, &o->gpu_idle_w},
      {"--gpu-board-w", t->board, "watts > 0", 1e-3, 1e5, &o->gpu_board_w},
      {"--mem-power-share", t->mem_share, "a share in [0, 1]", 0, 1, &o->mem_power_share},
      {"--nic-w", t->nic, "watts >= 0", 0, 1e5, &o->nic_w},
      {"--switch-port-w", t->port, "watts >= 0", 0, 1e5, &o->switch_port_w},
      {"--host-w", t->host, "watts >= 0", 0, 1e6, &o->host_w},
      {"--pue", t->pue, "a PUE in [1, 10]", 1, 10, &o->pue},
      {"--gpu-hour-price", t->gpu_price, "a price >= 0", 0, 1e9, &o->gpu_hour_price},
      {"--kwh-price", t->kwh_price, "a price >= 0", 0, 1e9, &o->kwh_price},
  };
  int given = (t->failures != NULL) + (t->ckpt != NULL); /* whole-run options beyond the budget */
  for (size_t i = 0; i < G_N_ELEMENTS(num); i++) {
    if (!num[i].text) continue;
    given += num[i].dst != &o->tokens && num[i].dst != &o->epochs;
    if (num[i].dst == &o->ckpt_interval_s && strcmp(num[i].text, "auto") == 0) continue;
    if (!cli_number(num[i].name, num[i].text, num[i].lo, num[i].hi, num[i].expected,
                    num[i].dst, err))
      return FALSE;
  }
  if (o->tokens > 0 && o->epochs > 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--tokens and --epochs: give one budget, not both");
    return FALSE;
  }
  const struct {
    const char *name;
    int v, lo, hi;
    int *dst;
  } ints[] = {{"--warmup-iters", t->warmup, 0, 1000000, &o->warmup_iters},
              {"--mc-samples", t->samples, 1, 1000000, &o->samples},
              {"--switch-radix", t->radix, 2, 100000, &o->switch_radix}};
  for (size_t i = 0; i < G_N_ELEMENTS(ints); i++) {
    if (ints[i].v == PROJ_NOT_GIVEN) continue;
    given++;
    if (ints[i].v < ints[i].lo || ints[i].v > ints[i].hi) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s %d: expected %d..%d", ints[i].name, ints[i].v,
                  ints[i].lo, ints[i].hi);
      return FALSE;
    }
    *ints[i].dst = ints[i].v;
  }
  if (t->ckpt && strcmp(t->ckpt, "sync") != 0 && strcmp(t->ckpt, "async") != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ckpt %s: expected sync or async", t->ckpt);
    return FALSE;
  }
  o->ckpt_async = t->ckpt && strcmp(t->ckpt, "async") == 0;
  if (t->failures && !proj_parse_failures(o, t->failures, err)) return FALSE;
  o->seed = seed;
  if (given && !(o->tokens > 0 || o->epochs > 0)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "the whole-run options (--failures, --ckpt..., power and prices) need a budget: "
                "--tokens T or --epochs E");
    return FALSE;
  }
  return TRUE;
}

/* --samples N: the run again N times, draw k of every kernel's time each (run_ctx.sample), in
 * the run's mode; the iteration times into r->samples_s. A line on stderr every tenth. */
static gboolean run_samples(run_ctx *x, const cfg_run *c, const exec_ops *ex, res_result *r,
                            GError **err) {
  double *t = g_new(double, c->samples);
  gboolean ok = TRUE;
  /* the timeline and weights the user asked for are the run's, not a draw's */
  cfg_run d = *c;
  d.trace = NULL, d.dump_weights = NULL;
  for (int k = 1; k <= c->samples && ok; k++) {
    res_result m;
    res_init(&m);
    x->sample = k;
    ok = c->mode == CFG_MODE_ANALYTIC ? analytic_run(x, &d, &m, err) : ex->run(x, &d, &m, err);
    t[k - 1] = m.iteration_time_s;
    res_release(&m);
    if (ok && (k * 10 / c->samples != (k - 1) * 10 / c->samples || k == c->samples))
      fprintf(stderr, "dlsim: kernel-time draw %d of %d\n", k, c->samples);
  }
  x->sample = 0;
  if (ok) res_set_samples(r, t, c->samples);
  g_free(t);
  return ok;
}

int cmd_run(int argc, char **argv) {
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  GError *e = NULL;
  res_result r;
  res_init(&r);
  gboolean ok = FALSE;

  proj_text pt = {.warmup = PROJ_NOT_GIVEN, .samples = PROJ_NOT_GIVEN, .radix = PROJ_NOT_GIVEN};
  proj_opts po;
  proj_opts_init(&po);
  proj_result pr;
  memset(&pr, 0, sizeof pr);
  const GOptionEntry proj_entries[] = {
      {"tokens", 0, 0, G_OPTION_ARG_STRING, &pt.tokens,
       "project the whole run over T tokens (a token model): wall time with failures and "
       "checkpoints, goodput, energy, cost", "T"},
      {"epochs", 0, 0, G_OPTION_ARG_STRING, &pt.epochs,
       "project the whole run over E passes of the dataset", "E"},
      {"failures", 0, 0, G_OPTION_ARG_STRING, &pt.failures,
       "failure rates: default (Llama 3 405B's fleet, per unit), none, or KEY=HOURS,... with KEY "
       "gpu, host-memory, nic, switch, node, software (MTBF per unit) or job; scale=F multiplies "
       "every rate", "SPEC"},
      {"ckpt", 0, 0, G_OPTION_ARG_STRING, &pt.ckpt,
       "checkpoints: sync (training waits for the write; default) or async (it waits for the "
       "copy to host memory)", "sync|async"},
      {"ckpt-interval", 0, 0, G_OPTION_ARG_STRING, &pt.interval,
       "work between checkpoints, s (default auto: Daly's optimum, or the asynchronous one)",
       "S|auto"},
      {"ckpt-bw-node", 0, 0, G_OPTION_ARG_STRING, &pt.bw_node,
       "checkpoint storage bandwidth per node, bytes/s (write and read)", "BPS"},
      {"ckpt-bw-total", 0, 0, G_OPTION_ARG_STRING, &pt.bw_total,
       "the file system's total checkpoint bandwidth, bytes/s", "BPS"},
      {"host-copy-bw", 0, 0, G_OPTION_ARG_STRING, &pt.host_copy,
       "async checkpoints: device-to-host copy per GPU, bytes/s", "BPS"},
      {"relaunch-s", 0, 0, G_OPTION_ARG_STRING, &pt.relaunch,
       "a restart's relaunch before loading the checkpoint, s", "S"},
      {"warmup-iters", 0, 0, G_OPTION_ARG_INT, &pt.warmup,
       "iterations a restart takes to reach full speed", "N"},
      {"mc-samples", 0, 0, G_OPTION_ARG_INT, &pt.samples,
       "Monte Carlo timelines of the run (default 1000; seeded by --seed)", "N"},
      {"gpu-idle-w", 0, 0, G_OPTION_ARG_STRING, &pt.idle,
       "a GPU's idle power, W (default: its spec sheet's)", "W"},
      {"gpu-board-w", 0, 0, G_OPTION_ARG_STRING, &pt.board,
       "a GPU's board power at full load, W (default: its spec sheet's)", "W"},
      {"mem-power-share", 0, 0, G_OPTION_ARG_STRING, &pt.mem_share,
       "share of a GPU's dynamic power a kernel saturating memory bandwidth draws", "F"},
      {"nic-w", 0, 0, G_OPTION_ARG_STRING, &pt.nic, "power per NIC, W", "W"},
      {"switch-port-w", 0, 0, G_OPTION_ARG_STRING, &pt.port, "power per switch port, W", "W"},
      {"switch-radix", 0, 0, G_OPTION_ARG_INT, &pt.radix,
       "ports per switch: how many tiers the fabric needs", "K"},
      {"host-w", 0, 0, G_OPTION_ARG_STRING, &pt.host,
       "power per node besides GPUs and NICs, W (default: what the reference system's rating "
       "leaves beside them, at the share a measured DGX H100 draws)", "W"},
      {"pue", 0, 0, G_OPTION_ARG_STRING, &pt.pue, "the data centre's power usage effectiveness",
       "F"},
      {"gpu-hour-price", 0, 0, G_OPTION_ARG_STRING, &pt.gpu_price,
       "cost per GPU-hour of wall time", "PRICE"},
      {"kwh-price", 0, 0, G_OPTION_ARG_STRING, &pt.kwh_price, "cost per kWh", "PRICE"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};

  gboolean help = FALSE;
  if (!cfg_parse_args(&parsed, "run", proj_entries, NULL, &argc, &argv, &help, &e)) goto out;
  if (help) {
    ok = TRUE;
    goto out;
  }
  if (!proj_options(&pt, (guint64)parsed.seed, &po, &e)) goto out;
  if (!dl_check_writable("--out", parsed.out, &e) ||
      !dl_check_writable("--trace", parsed.trace, &e) ||
      !dl_check_writable("--dump-weights", parsed.dump_weights, &e))
    goto out;
  if (parsed.dump_weights && parsed.mode != CFG_MODE_REAL) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                "--dump-weights: only --mode real has weights to write");
    goto out;
  }
  if (!run_ctx_open(&x, &parsed, &e)) goto out;
  if (x.note) fprintf(stderr, "dlsim: note: %s\n", x.note);
  cfg_run *c = &x.cfg;
  {
    const char *out_names[] = {"--out", "--trace", "--dump-weights"};
    const char *outs[] = {c->out, c->trace, c->dump_weights};
    const char *in_names[] = {"--workload", "--platform", "--kernels", "--routing"};
    const char *ins[] = {x.trace ? NULL : x.model->path, x.platform ? plat_path(x.platform) : NULL,
                         x.db ? kdb_path(x.db) : NULL,
                         c->routing && g_str_has_prefix(c->routing, "file:") ? c->routing + 5
                                                                            : NULL};
    if (!dl_check_outputs(out_names, outs, 3, in_names, ins, 4, &e)) goto out;
  }
  const exec_ops *ex = exec_for(c->mode);
  if (!ex->check(&x, c, &e) || !proj_check(&po, x.model, x.gpu, &e)) goto out;
  /* The closed form runs first in every mode: it checks the configuration against the planner
   * and the platform, gives the memory figures, and for --grid auto picks the grid. */
  if (!(c->grid_auto ? gridsearch_analytic(&x, c, &r, &e) : analytic_run(&x, c, &r, &e))) goto out;
  if (!r.fits_in_memory && !c->ignore_memory) {
    not_fitting(&r, x.model, &e);
    goto out;
  }
  /* --grid auto in simulation: the closed form ranks every grid, the best few are simulated */
  if (c->mode == CFG_MODE_SIM && c->grid_auto && !gridsearch_simulate(&x, c, &r, &e)) goto out;
  if (c->mode != CFG_MODE_ANALYTIC && po.tokens + po.epochs > 0) {
    /* what the projection refuses, refused before the executor runs (one timeline suffices) */
    proj_opts quick = po;
    quick.samples = 1;
    if (!proj_run(&quick, &r, c, x.model, x.gpu, plat_gpus_per_node(x.platform),
                  plat_nics_per_node(x.platform), &pr, &e))
      goto out;
  }
  if (c->mode != CFG_MODE_ANALYTIC) {
    exec_expect_simulated_s(c->grid_auto ? 0 : r.iteration_time_s * c->iters);
    /* the executor's measurements replace the closed form's; memory stays the planner's */
    res_result m;
    res_init(&m);
    ok = ex->run(&x, c, &m, &e);
    if (ok) res_take_measured(&r, &m);
    res_release(&m);
    if (!ok) goto out;
    ok = FALSE;
  }
  if (c->samples > 0 && !run_samples(&x, c, ex, &r, &e)) goto out;
  interval_set(&r, x.db);
  if (!proj_run(&po, &r, c, x.model, x.gpu, plat_gpus_per_node(x.platform),
                plat_nics_per_node(x.platform), &pr, &e))
    goto out;
  if (x.degraded)
    res_set_degraded(&r, (const char *const *)x.degraded->pdata,
                     (const double *)x.degraded_f->data, (int)x.degraded_f->len);
  res_print(&r, c, x.model, stdout);
  proj_print(&pr, stdout);
  if (c->out) {
    char *json = res_to_json_with(&r, c, x.model, "projection", pr.on ? proj_to_json(&pr) : NULL);
    gboolean w = dl_write_file_atomic(c->out, json, strlen(json), &e);
    g_free(json);
    if (!w) goto out;
  }
  ok = TRUE;

out:;
  int status = 0;
  if (!ok) {
    cli_error(e ? e->message : "run failed");
    status = (!e || e->code == DL_ERR_INPUT) ? 2 : 1;
    if (e) g_error_free(e);
  }
  res_release(&r);
  proj_text_release(&pt);
  run_ctx_release(&x);
  cfg_release(&parsed);
  return status;
}
