/* launch.h — running the SMPI executor (dlsim-smpi) under smpirun from the host driver.
 *
 * The executor is found at $DLSIM_SMPI_EXEC, else <build dir>/dlsim-smpi. smpirun is the one
 * CMake found (DLSIM_SMPIRUN). Every SMPI collective algorithm is pinned (SMPI's selectors cost
 * minutes of wall time at scale) and the simulator's own CPU time is never injected; the network
 * settings come from the platform file's <config> section, or from `extra_cfg`.
 */
#ifndef DL_LAUNCH_H
#define DL_LAUNCH_H

#include <glib.h>

#include "core/child.h"
#include "platform/platform.h"

/* The --cfg items of a simulation on platform `pl` beyond dlsim's defaults: dlsim's network
 * settings where the file's <config> is silent (plat_smpi_cfg_defaults), then the user's
 * --simgrid-cfg items (NULL-terminated, may be NULL) over them, appended to `out` as newly
 * allocated strings. */
void launch_network_cfg(const plat *pl, char **simgrid_cfg, GPtrArray *out);

/* Path of the executor: $DLSIM_SMPI_EXEC or DLSIM_BINARY_DIR/dlsim-smpi. Newly allocated. */
char *launch_smpi_exec(void);

/* Runs `smpirun -no-privatize -np NP -platform PLATFORM -hostfile <temp file listing hosts>
 * [-wrapper <preload of libdlsim-cputime.so>] <executor> prog_argv...
 * --cfg=<defaults and extra_cfg ("key:value" strings)> --log=root.thres:warning` and waits for it.
 * `hosts`: np host ids, rank i on hosts[i] (borrowed; the file lists hosts[0..np-1]).
 * `prog_argv`, `extra_cfg`: NULL-terminated (extra_cfg may be NULL). The executor's standard
 * output is appended to `out_stdout` (may be NULL: discarded); its standard error is passed to
 * ours when the run fails, but for the lines `watch` takes (may be NULL).
 * Returns FALSE with DL_ERR_IO when smpirun cannot start or exits non-zero (the message has the
 * exit status and the last line of its standard error). */
gboolean launch_smpi(const char *platform_xml_path, int np, const char *const *hosts,
                     const char *const *prog_argv, const char *const *extra_cfg,
                     GString *out_stdout, const dl_child_watch *watch, GError **err);

/* Path of the real executor: $DLSIM_REAL_EXEC or DLSIM_BINARY_DIR/dlsim-real. Newly allocated. */
char *launch_real_exec(void);

/* Runs `mpirun --oversubscribe [--allow-run-as-root as root] --mca mpi_yield_when_idle 1 -np NP
 * <dlsim-real> prog_argv...` on this machine and waits for it (ranks may outnumber cores, so
 * they yield while they wait). The program's standard output is appended to `out_stdout` (may be
 * NULL: discarded); its standard error is passed on when it fails. FALSE with DL_ERR_IO when
 * mpirun cannot start or exits non-zero (the message has its last stderr line). */
gboolean launch_mpirun(int np, const char *const *prog_argv, GString *out_stdout, GError **err);

#endif
