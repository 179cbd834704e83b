/* cmd_run.c — `dlsim run`: parse options, load the workload and platform, run one executor,
 * print the summary and write the result JSON. */
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

int cmd_run(int argc, char **argv) {
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  GError *e = NULL;
  res_result r;
  res_init(&r);
  gboolean ok = FALSE;

  gboolean help = FALSE;
  if (!cfg_parse_args(&parsed, "run", NULL, NULL, &argc, &argv, &help, &e)) goto out;
  if (help) {
    ok = TRUE;
    goto out;
  }
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
  if (!ex->check(&x, c, &e)) goto out;
  /* The closed form runs first in every mode: it checks the configuration against the planner
   * and the platform, gives the memory figures, and for --grid auto picks the grid. */
  if (!(c->grid_auto ? gridsearch_analytic(&x, c, &r, &e) : analytic_run(&x, c, &r, &e))) goto out;
  if (!r.fits_in_memory && !c->ignore_memory) {
    not_fitting(&r, x.model, &e);
    goto out;
  }
  /* --grid auto in simulation: the closed form ranks every grid, the best few are simulated */
  if (c->mode == CFG_MODE_SIM && c->grid_auto && !gridsearch_simulate(&x, c, &r, &e)) goto out;
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
  res_print(&r, c, x.model, stdout);
  if (c->out) {
    char *json = res_to_json(&r, c, x.model);
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
  run_ctx_release(&x);
  cfg_release(&parsed);
  return status;
}
