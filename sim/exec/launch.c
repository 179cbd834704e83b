/* launch.c — smpirun invocation (see launch.h). */
#include "exec/launch.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/dl_common.h"

#ifndef DLSIM_BINARY_DIR
#define DLSIM_BINARY_DIR "."
#endif
#ifndef DLSIM_SMPIRUN
#define DLSIM_SMPIRUN "smpirun"
#endif

/* Pinned algorithms: the NCCL-ring analogues where they exist, log-depth ones elsewhere; never a
 * selector (SimGrid 3.32's ompi selector makes a one-integer allreduce take 50 s of wall time at
 * 1024 ranks, measured). alltoall "ring" rather than "pair": pair needs a power-of-two size. */
static const char *const default_cfg[] = {
    "smpi/simulate-computation:no",
    "smpi/wtime:0",
    "smpi/shared-malloc-blocksize:1073741824",
    "smpi/allreduce:lr",
    "smpi/allgather:ring",
    "smpi/allgatherv:ring",
    "smpi/reduce_scatter:ompi_ring",
    "smpi/alltoall:ring",
    "smpi/alltoallv:ring",
    "smpi/bcast:binomial_tree",
    "smpi/reduce:binomial",
    "smpi/gather:ompi_binomial",
    "smpi/scatter:ompi_binomial",
    "smpi/barrier:ompi_recursivedoubling",
    NULL,
};

const char *const *launch_default_cfg(void) { return default_cfg; }

char *launch_smpi_exec(void) {
  const char *env = g_getenv("DLSIM_SMPI_EXEC");
  if (env && *env) return g_strdup(env);
  return g_build_filename(DLSIM_BINARY_DIR, "dlsim-smpi", NULL);
}

/* TRUE when the "key:value" items a and b have the same key. */
static gboolean same_key(const char *a, const char *b) {
  const char *ca = strchr(a, ':'), *cb = strchr(b, ':');
  size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
  return la == lb && strncmp(a, b, la) == 0;
}

gboolean launch_smpi(const char *platform_xml_path, int np, const char *const *hosts,
                     const char *const *prog_argv, const char *const *extra_cfg,
                     GString *out_stdout, GError **err) {
  gboolean ok = FALSE;
  char *hostfile = NULL, *exec = launch_smpi_exec(), *np_s = g_strdup_printf("%d", np);
  char *child_out = NULL, *child_err = NULL;
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  GString *hl = g_string_new(NULL);
  int fd = -1, wait_status = 0;

  for (int i = 0; i < np; i++) g_string_append_printf(hl, "%s\n", hosts[i]);
  fd = g_file_open_tmp("dlsim-hosts-XXXXXX", &hostfile, err);
  if (fd < 0) goto out;
  if (write(fd, hl->str, hl->len) != (ssize_t)hl->len) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write the host file", hostfile);
    goto out;
  }
  close(fd);
  fd = -1;

  const char *head[] = {DLSIM_SMPIRUN, "-no-privatize", "-np", np_s, "-platform",
                        platform_xml_path, "-hostfile", hostfile, exec};
  for (size_t i = 0; i < G_N_ELEMENTS(head); i++) g_ptr_array_add(argv, g_strdup(head[i]));
  for (int i = 0; prog_argv && prog_argv[i]; i++) g_ptr_array_add(argv, g_strdup(prog_argv[i]));
  for (int i = 0; default_cfg[i]; i++) {
    gboolean replaced = FALSE;
    for (int j = 0; extra_cfg && extra_cfg[j]; j++) replaced |= same_key(default_cfg[i], extra_cfg[j]);
    if (!replaced) g_ptr_array_add(argv, g_strdup_printf("--cfg=%s", default_cfg[i]));
  }
  for (int j = 0; extra_cfg && extra_cfg[j]; j++)
    g_ptr_array_add(argv, g_strdup_printf("--cfg=%s", extra_cfg[j]));
  g_ptr_array_add(argv, g_strdup("--log=root.thres:warning"));
  g_ptr_array_add(argv, NULL);

  if (!g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &child_out,
                    &child_err, &wait_status, err)) {
    if (err && *err) (*err)->code = DL_ERR_IO, (*err)->domain = DL_ERROR;
    goto out;
  }
  if (out_stdout) g_string_append(out_stdout, child_out);
  GError *werr = NULL;
  if (!g_spawn_check_wait_status(wait_status, &werr)) {
    char *line = dl_last_line(child_err);
    g_set_error(err, DL_ERROR, DL_ERR_IO, "smpirun %s: %s: %s", exec, werr->message, line);
    fputs(child_err, stderr);
    g_free(line);
    g_error_free(werr);
    goto out;
  }
  ok = TRUE;
out:
  if (fd >= 0) close(fd);
  if (hostfile) {
    g_unlink(hostfile);
    g_free(hostfile);
  }
  g_free(exec);
  g_free(np_s);
  g_free(child_out);
  g_free(child_err);
  g_string_free(hl, TRUE);
  g_ptr_array_free(argv, TRUE);
  return ok;
}

#ifndef DLSIM_MPIRUN
#define DLSIM_MPIRUN "mpirun"
#endif

char *launch_real_exec(void) {
  const char *env = g_getenv("DLSIM_REAL_EXEC");
  return env && *env ? g_strdup(env) : g_build_filename(DLSIM_BINARY_DIR, "dlsim-real", NULL);
}

gboolean launch_mpirun(int np, const char *const *prog_argv, GString *out_stdout, GError **err) {
  char *exec = launch_real_exec(), *nps = g_strdup_printf("%d", np);
  char *child_out = NULL, *child_err = NULL;
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, DLSIM_MPIRUN);
  g_ptr_array_add(argv, "--oversubscribe");
  if (geteuid() == 0) g_ptr_array_add(argv, "--allow-run-as-root");
  /* ranks wait in MPI without spinning a core: there may be more ranks than cores */
  g_ptr_array_add(argv, "--mca");
  g_ptr_array_add(argv, "mpi_yield_when_idle");
  g_ptr_array_add(argv, "1");
  g_ptr_array_add(argv, "-np");
  g_ptr_array_add(argv, nps);
  g_ptr_array_add(argv, exec);
  for (const char *const *a = prog_argv; *a; a++) g_ptr_array_add(argv, (char *)*a);
  g_ptr_array_add(argv, NULL);
  int wait_status = 0;
  GError *werr = NULL;
  gboolean ok = FALSE;
  if (!g_spawn_sync(NULL, (char **)argv->pdata, NULL,
                    out_stdout ? 0 : G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL,
                    out_stdout ? &child_out : NULL, &child_err, &wait_status, &werr)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", DLSIM_MPIRUN, werr->message);
    g_error_free(werr);
  } else if (!g_spawn_check_wait_status(wait_status, &werr)) {
    char *line = dl_last_line(child_err);
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s %s: %s: %s", DLSIM_MPIRUN, exec, werr->message,
                line);
    fputs(child_err, stderr);
    g_free(line);
    g_error_free(werr);
  } else {
    if (out_stdout && child_out) g_string_append(out_stdout, child_out);
    ok = TRUE;
  }
  g_ptr_array_free(argv, TRUE);
  g_free(child_out);
  g_free(child_err);
  g_free(nps);
  g_free(exec);
  return ok;
}
