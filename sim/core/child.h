/* child.h — the programs dlsim starts (smpirun, mpirun, a sweep's `dlsim run`s) and the
 * temporary directories it writes, so that neither outlives dlsim.
 *
 * Every child runs in a process group of its own and gets SIGTERM when dlsim dies, however it
 * dies (Linux PR_SET_PDEATHSIG). dl_child_init() installs handlers for SIGINT, SIGTERM, SIGHUP and
 * SIGQUIT: on one of them every child's group gets SIGTERM (SIGKILL after 8 s), every temporary
 * directory of dl_tmpdir_new is removed, and dlsim then dies of the same signal. A temporary
 * directory is named dlsim-<pid>-<what>-XXXXXX under $TMPDIR; those of a dlsim that was killed
 * outright (SIGKILL) are removed by the next dl_tmpdir_new.
 */
#ifndef DL_CHILD_H
#define DL_CHILD_H

#include <glib.h>
#include <stdio.h>
#include <sys/types.h>

/* Installs the signal handlers; call once, early in main. */
void dl_child_init(void);

/* Runs argv (argv[0] looked up in PATH when it has no '/') and waits for it. Its standard output
 * goes to *out (NULL: to /dev/null), its standard error to *errtext (newly allocated, never
 * NULL on success). *wait_status is waitpid's. FALSE with DL_ERR_IO only when it cannot start. */
gboolean dl_child_run(const char *const *argv, char **out, char **errtext, int *wait_status,
                      GError **err);

/* A child's progress: each line of its standard error that starts with `prefix` goes to
 * on_line(text after the prefix, data) as it arrives, and not into *errtext. */
typedef struct {
  const char *prefix;
  void (*on_line)(const char *text, void *data);
  void *data;
} dl_child_watch;

/* dl_child_run with `watch` (NULL: none) reading the child's progress lines. */
gboolean dl_child_run_watched(const char *const *argv, char **out, char **errtext,
                              int *wait_status, const dl_child_watch *watch, GError **err);

/* Starts argv without waiting, its standard output to /dev/null and its standard error to the file
 * `stderr_path` (created or truncated). Returns its pid, or -1 with DL_ERR_IO. Reap it with
 * waitpid, then call dl_child_reaped(pid). */
pid_t dl_child_start(const char *const *argv, const char *stderr_path, GError **err);
void dl_child_reaped(pid_t pid);

/* A child spoken to: lines written to `in` (flush them) reach its standard input, its standard
 * output is read from `out`, its standard error is kept for dl_child_talk_close. */
typedef struct {
  pid_t pid;
  FILE *in, *out;
  int err_fd;
} dl_child_talk;
/* Starts argv so (dlsim ignores SIGPIPE from then on: a dead child is a failed write). FALSE with
 * DL_ERR_IO when it cannot start. */
gboolean dl_child_talk_open(const char *const *argv, dl_child_talk *t, GError **err);
/* Closes its input and output, waits for it; *errtext (NULL: not wanted) gets its standard error
 * (newly allocated), *wait_status waitpid's status. */
void dl_child_talk_close(dl_child_talk *t, char **errtext, int *wait_status);

/* The line of SimGrid's output `text` that says why it stopped, without its "[time] file:line:
 * [category/LEVEL] " prefix (newly allocated), or NULL. */
char *dl_simgrid_reason(const char *text);

/* SimGrid's output `child_err` of a failed program (smpirun, dlsim-sgplat) as one line in *err:
 * a platform SimGrid cannot read ("FILE:LINE: SimGrid cannot read the platform: ...") or a setting
 * it does not know (naming --simgrid-cfg when `extra_cfg` holds it, else `platform`'s <config>)
 * is DL_ERR_INPUT; a deadlock and anything else DL_ERR_INTERNAL. */
void dl_simgrid_failure(const char *platform, const char *const *extra_cfg,
                        const char *child_err, int wait_status, GError **err);

/* A new directory $TMPDIR/dlsim-<pid>-<what>-XXXXXX (removed if dlsim is interrupted). NULL with
 * DL_ERR_IO. Remove it with dl_tmpdir_remove. */
char *dl_tmpdir_new(const char *what, GError **err);
/* Removes `dir` and everything in it, forgets it and frees the string. NULL ignored. */
void dl_tmpdir_remove(char *dir);

#endif
