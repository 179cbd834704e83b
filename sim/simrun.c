/* simrun.c — launching the SMPI executor and reading its exchange file (see simrun.h,
 * exchange.h). */
#include "simrun.h"

#include <glib/gstdio.h>

#include "dl_common.h"
#include "exchange.h"
#include "launch.h"

gboolean sr_run(const wl_model *m, const cfg_run *c, const plat *pl, res_result *r, GError **err) {
  (void)m;
  gboolean ok = FALSE;
  char *dir = g_dir_make_tmp("dlsim-XXXXXX", NULL);
  if (!dir) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "cannot create a temporary directory");
    return FALSE;
  }
  char *result = g_build_filename(dir, "result.json", NULL);
  char **opts = cfg_to_args(c);
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, "run");
  g_ptr_array_add(argv, result);
  g_ptr_array_add(argv, c->trace ? c->trace : "-");
  for (char **o = opts; *o; o++) g_ptr_array_add(argv, *o);
  g_ptr_array_add(argv, NULL);
  const char **hosts = g_new(const char *, c->gpus);
  for (int i = 0; i < c->gpus; i++) hosts[i] = plat_host_at(pl, i)->id;
  gint64 t0 = g_get_monotonic_time();
  gboolean ran = launch_smpi(plat_path(pl), c->gpus, hosts, (const char *const *)argv->pdata,
                             NULL, NULL, err);
  if (ran && !g_file_test(result, G_FILE_TEST_EXISTS)) {
    /* smpirun exits 0 when SimGrid finds a deadlock: the ranks never reached the end */
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL,
                "the simulation ended before its ranks finished (SimGrid found them waiting for "
                "each other): a planner bug, please report this command");
    ran = FALSE;
  }
  if (ran && xc_read(result, c, r, err)) {
    r->wall_s = (g_get_monotonic_time() - t0) / 1e6;
    r->ranks = c->gpus;
    ok = TRUE;
  }
  g_free(hosts);
  g_ptr_array_free(argv, TRUE);
  g_strfreev(opts);
  g_unlink(result);
  g_rmdir(dir);
  g_free(result);
  g_free(dir);
  return ok;
}
