/* simrun.c — launching the SMPI executor and reading its exchange file (see simrun.h,
 * exchange.h). */
#include "simrun.h"

#include "launch.h"

typedef struct {
  const plat *pl;
  int np;
} smpi_target;

static gboolean start_smpi(const char *const *prog_argv, void *data, GError **err) {
  const smpi_target *t = data;
  const char **hosts = g_new(const char *, t->np);
  for (int i = 0; i < t->np; i++) hosts[i] = plat_host_at(t->pl, i)->id;
  gboolean ok = launch_smpi(plat_path(t->pl), t->np, hosts, prog_argv, NULL, NULL, err);
  g_free(hosts);
  return ok;
}

gboolean sr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err) {
  (void)m;
  smpi_target t = {pl, c->gpus};
  return launch_executor(c, start_smpi, &t, r, err);
}
