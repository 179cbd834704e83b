/* launch.c — smpirun invocation (see launch.h). */
#include "exec/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/child.h"
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
    "smpi/send-is-detached-thresh:0",
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
    /* a platform file's <config> may not turn tracing on: only --simgrid-cfg, which replaces
     * this, asks the simulation to write a trace */
    "tracing:no",
    NULL,
};

void launch_network_cfg(const plat *pl, char **simgrid_cfg, GPtrArray *out) {
  plat_smpi_cfg_defaults(pl, out);
  for (int i = 0; simgrid_cfg && simgrid_cfg[i]; i++)
    g_ptr_array_add(out, g_strdup(simgrid_cfg[i]));
}

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

/* A path smpirun's unquoted -wrapper keeps whole: no word splitting, no pathname expansion. */
static gboolean one_word(const char *s) {
  return !strpbrk(s, " \t\n\v\f\r*?[");
}

/* libdlsim-sgzone.so (platform/sgzone.cpp), which loads a cluster written by `dlsim platform` with
 * SimGrid's own routes found faster (and any other file through SimGrid's loader), or NULL where
 * it is not built, DLSIM_SIMGRID_ROUTING=dijkstra asks for SimGrid's zone, or the platform's path
 * would not survive the wrapper's word splitting. */
static char *sgzone_lib(const char *platform_xml_path) {
  const char *want = g_getenv("DLSIM_SIMGRID_ROUTING");
  if (want && strcmp(want, "dijkstra") == 0) return NULL;
  char *lib = g_build_filename(DLSIM_BINARY_DIR, "libdlsim-sgzone.so", NULL);
  if (g_file_test(lib, G_FILE_TEST_IS_REGULAR) && one_word(platform_xml_path)) return lib;
  g_free(lib);
  return NULL;
}

/* glibc serves at most 65,536 blocks by mmap at once (M_MMAP_MAX) and takes any more from the
 * brk heap. A simulation runs two SimGrid actors a rank, each on an 8 MB stack malloc'd: past
 * 32,768 ranks the stacks went to the heap, where 65,536 ranks held 13.6 GiB against 5.6 GiB
 * with every stack mapped (RssAnon, ResNet-18 data parallel). Setting it also fixes glibc's mmap
 * threshold at 128 KiB (mallopt(3)): every block of that size or more is mapped on its own, and
 * freeing one no longer moves the threshold up (which, by the figures, had put the stacks of a
 * 16,384-GPU run on the heap once, platform/sgzone.cpp). */
#define MMAP_MAX_TUNABLE "glibc.malloc.mmap_max=16777216"

/* smpirun's -wrapper: `env` with LD_PRELOAD naming libdlsim-cputime.so (preload/cputime.c) for
 * smpimain, with DLSIM_PLATFORM_XML naming the platform for libdlsim-sgzone.so when `sgzone`, and
 * with GLIBC_TUNABLES raising M_MMAP_MAX (above) unless the caller's GLIBC_TUNABLES sets it. The
 * preload is left out when the library is not built, and either variable when its value would
 * not survive smpirun's word splitting. */
static char *smpi_wrapper(const char *platform_xml_path, gboolean sgzone) {
  char *lib = g_build_filename(DLSIM_BINARY_DIR, "libdlsim-cputime.so", NULL);
  const char *old = g_getenv("LD_PRELOAD");
  char *preload = old && *old ? g_strdup_printf("%s:%s", lib, old) : g_strdup(lib);
  GString *w = g_string_new("env");
  if (g_file_test(lib, G_FILE_TEST_IS_REGULAR) && one_word(preload))
    g_string_append_printf(w, " LD_PRELOAD=%s", preload);
  const char *tun = g_getenv("GLIBC_TUNABLES");
  char *tunables = tun && *tun ? g_strdup_printf("%s:" MMAP_MAX_TUNABLE, tun)
                               : g_strdup(MMAP_MAX_TUNABLE);
  if (!(tun && strstr(tun, "glibc.malloc.mmap_max")) && one_word(tunables))
    g_string_append_printf(w, " GLIBC_TUNABLES=%s", tunables);
  g_free(tunables);
  if (sgzone) g_string_append_printf(w, " DLSIM_PLATFORM_XML=%s", platform_xml_path);
  g_free(preload);
  g_free(lib);
  return g_string_free(w, strcmp(w->str, "env") == 0);
}

/* Whether np ranks' actors would need more memory mappings than the kernel lets a process
 * have (vm.max_map_count, 65,530 by default): each rank runs two actors (its MPI process and
 * its GPU), and SimGrid's guard page below each actor's stack splits it into two mappings, four
 * a rank, beside about 200 of the process's own (measured: 4,305 at 1,024 ranks, 209 without
 * guard pages); 4,096 are left for those and for shared-malloc blocks. */
static gboolean guards_exceed_maps(int np) {
  char *txt = NULL;
  long most = 65530;
  if (g_file_get_contents("/proc/sys/vm/max_map_count", &txt, NULL, NULL)) {
    const long v = strtol(txt, NULL, 10);
    if (v > 0) most = v;
  }
  g_free(txt);
  return 4L * np + 4096 > most;
}

/* smpirun: $DLSIM_SMPIRUN, else the one CMake found. */
static const char *smpirun_path(void) {
  const char *env = g_getenv("DLSIM_SMPIRUN");
  return env && *env ? env : DLSIM_SMPIRUN;
}

gboolean launch_smpi(const char *platform_xml_path, int np, const char *const *hosts,
                     const char *const *prog_argv, const char *const *extra_cfg,
                     GString *out_stdout, const dl_child_watch *watch, GError **err) {
  gboolean ok = FALSE;
  char *dir = NULL, *hostfile = NULL, *exec = launch_smpi_exec(), *np_s = g_strdup_printf("%d", np);
  char *child_out = NULL, *child_err = NULL;
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  GString *hl = g_string_new(NULL);
  int wait_status = 0;

  for (int i = 0; i < np; i++) g_string_append_printf(hl, "%s\n", hosts[i]);
  if (!(dir = dl_tmpdir_new("smpi", err))) goto out;
  hostfile = g_build_filename(dir, "hosts", NULL);
  if (!dl_write_file_atomic(hostfile, hl->str, hl->len, err)) goto out;

  char *sgzone = sgzone_lib(platform_xml_path);
  const char *head[] = {smpirun_path(), "-no-privatize", "-np", np_s, "-platform",
                        sgzone ? sgzone : platform_xml_path, "-hostfile", hostfile, exec};
  for (size_t i = 0; i < G_N_ELEMENTS(head) - 1; i++) g_ptr_array_add(argv, g_strdup(head[i]));
  char *wrapper = smpi_wrapper(platform_xml_path, sgzone != NULL);
  g_free(sgzone);
  if (wrapper) {
    g_ptr_array_add(argv, g_strdup("-wrapper"));
    g_ptr_array_add(argv, wrapper);
  }
  g_ptr_array_add(argv, g_strdup(exec));
  for (int i = 0; prog_argv && prog_argv[i]; i++) g_ptr_array_add(argv, g_strdup(prog_argv[i]));
  for (int i = 0; default_cfg[i]; i++) {
    gboolean replaced = FALSE;
    for (int j = 0; extra_cfg && extra_cfg[j]; j++)
      replaced |= same_key(default_cfg[i], extra_cfg[j]);
    if (!replaced) g_ptr_array_add(argv, g_strdup_printf("--cfg=%s", default_cfg[i]));
  }
  for (int j = 0; extra_cfg && extra_cfg[j]; j++)
    g_ptr_array_add(argv, g_strdup_printf("--cfg=%s", extra_cfg[j]));
  /* without guard pages the stacks' mappings merge: SimGrid would otherwise stop the run with
   * "Failed to protect stack" (a stack overflow then goes undetected rather than trapped) */
  gboolean guard_set = FALSE;
  for (int j = 0; extra_cfg && extra_cfg[j]; j++)
    guard_set |= same_key("contexts/guard-size:0", extra_cfg[j]);
  if (!guard_set && guards_exceed_maps(np))
    g_ptr_array_add(argv, g_strdup("--cfg=contexts/guard-size:0"));
  g_ptr_array_add(argv, g_strdup("--log=root.thres:warning"));
  g_ptr_array_add(argv, NULL);

  if (!dl_child_run_watched((const char *const *)argv->pdata, &child_out, &child_err,
                            &wait_status, watch, err))
    goto out;
  if (out_stdout) g_string_append(out_stdout, child_out);
  if (g_getenv("DLSIM_DEBUG")) fputs(child_err, stderr);
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    dl_simgrid_failure(platform_xml_path, extra_cfg, child_err, wait_status, err);
    goto out;
  }
  ok = TRUE;
out:
  dl_tmpdir_remove(dir);
  g_free(hostfile);
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

/* Why mpirun failed, as one line: a rank's own message ("dlsim-real: ..."), else Open MPI's,
 * which explains itself in a box between lines of dashes (its first line of text), else the
 * last line that is not a rule. */
static char *mpirun_reason(const char *text) {
  char **lines = g_strsplit(text ? text : "", "\n", -1);
  char *why = NULL, *last = NULL;
  gboolean in_box = FALSE;
  for (char **l = lines; *l; l++)
    if (g_str_has_prefix(*l, "dlsim-real: ")) {
      why = g_strdup(*l);
      g_strfreev(lines);
      return why;
    }
  for (char **l = lines; *l; l++) {
    char *t = g_strstrip(g_strdup(*l));
    const gboolean rule = *t && strspn(t, "-") == strlen(t);
    if (rule) in_box = !in_box;
    else if (*t && in_box && !why) why = g_strdup(t);
    else if (*t) g_free(last), last = g_strdup(t);
    g_free(t);
  }
  g_strfreev(lines);
  if (why) {
    g_free(last);
    return why;
  }
  return last ? last : g_strdup("(no message)");
}

gboolean launch_mpirun(int np, const char *const *prog_argv, GString *out_stdout, GError **err) {
  char *exec = launch_real_exec(), *nps = g_strdup_printf("%d", np);
  char *child_out = NULL, *child_err = NULL;
  const char *env = g_getenv("DLSIM_MPIRUN");
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (char *)(env && *env ? env : DLSIM_MPIRUN));
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
  gboolean ok = FALSE;
  if (!dl_child_run((const char *const *)argv->pdata, out_stdout ? &child_out : NULL, &child_err,
                    &wait_status, err)) {
  } else if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    char *line = mpirun_reason(child_err);
    char *status = WIFSIGNALED(wait_status)
                       ? g_strdup_printf("killed by signal %d", WTERMSIG(wait_status))
                       : g_strdup_printf("exit status %d", WEXITSTATUS(wait_status));
    /* status 2: the ranks refused their input and said why on one line (real/run.c) */
    const char *tag = "dlsim-real: ";
    const char *said = g_str_has_prefix(line, tag) ? line + strlen(tag) : NULL;
    int rank = 0, at = 0;
    if (said && sscanf(said, "rank %d: %n", &rank, &at) == 1 && at > 0) said += at;
    if (said && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 2)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s", said);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "%s %s (%s): %s",
                  (const char *)g_ptr_array_index(argv, 0), exec, status, line);
    if (g_getenv("DLSIM_DEBUG")) fputs(child_err, stderr);
    g_free(status);
    g_free(line);
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
