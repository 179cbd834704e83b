/* child.c — children and temporary directories that never outlive dlsim (child.h).
 *
 * The registry of children and directories is read by the signal handler, so it is made of
 * fixed arrays, changed only while the handled signals are blocked, and the handler uses only
 * async-signal-safe calls (kill, waitpid, nanosleep, openat, getdents64, unlinkat).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/child.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core/dl_common.h"

#define MAX_CHILDREN 4096
#define MAX_DIRS 64
#define DIR_LEN 1024

static pid_t children[MAX_CHILDREN]; /* process group leaders; 0 = free */
static char dirs[MAX_DIRS][DIR_LEN]; /* "" = free */
static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void block(sigset_t *old) {
  sigset_t s;
  sigemptyset(&s);
  for (size_t i = 0; i < G_N_ELEMENTS(handled); i++) sigaddset(&s, handled[i]);
  sigprocmask(SIG_BLOCK, &s, old);
}

static void unblock(const sigset_t *old) { sigprocmask(SIG_SETMASK, old, NULL); }

/* ---- removing a directory tree, async-signal-safe -------------------------------------------- */

struct dent64 {
  unsigned long long d_ino;
  long long d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Removes `name` under directory fd `at` and everything below it (to a depth of 8). */
static void rm_tree_at(int at, const char *name, int depth) {
  if (unlinkat(at, name, 0) == 0 || (errno != EISDIR && errno != EPERM)) return;
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && depth < 8) {
    char buf[4096] __attribute__((aligned(8)));
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
      for (long off = 0; off < n;) {
        struct dent64 *d = (struct dent64 *)(void *)(buf + off);
        off += d->d_reclen;
        if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
        rm_tree_at(fd, d->d_name, depth + 1);
      }
    }
  }
  if (fd >= 0) close(fd);
  unlinkat(at, name, AT_REMOVEDIR);
}

/* ---- the signal handler ---------------------------------------------------------------------- */

static gboolean group_alive(pid_t pg) {
  waitpid(pg, NULL, WNOHANG); /* a leader that exited is reaped, its group may live on */
  return kill(-pg, 0) == 0;
}

static void on_signal(int sig) {
  int saved = errno;
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] > 0) kill(-children[i], SIGTERM);
  /* a child cleans up after itself on SIGTERM (smpirun, mpirun, dlsim): give it 8 s */
  const struct timespec step = {0, 50 * 1000 * 1000};
  for (int t = 0; t < 160; t++) {
    gboolean any = FALSE;
    for (int i = 0; i < MAX_CHILDREN; i++)
      if (children[i] > 0 && group_alive(children[i])) any = TRUE;
    if (!any) break;
    nanosleep(&step, NULL);
  }
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] > 0 && group_alive(children[i])) kill(-children[i], SIGKILL);
  for (int i = 0; i < MAX_DIRS; i++)
    if (dirs[i][0]) rm_tree_at(AT_FDCWD, dirs[i], 0);
  /* die of the same signal, as the caller expects */
  signal(sig, SIG_DFL);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  sigprocmask(SIG_UNBLOCK, &s, NULL);
  raise(sig);
  errno = saved;
}

void dl_child_init(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < G_N_ELEMENTS(handled); i++) sigaddset(&sa.sa_mask, handled[i]);
  for (size_t i = 0; i < G_N_ELEMENTS(handled); i++) {
    struct sigaction old;
    /* a signal ignored by whoever started dlsim (nohup) stays ignored */
    if (sigaction(handled[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(handled[i], &sa, NULL);
  }
}

/* ---- children -------------------------------------------------------------------------------- */

static void forget(pid_t pid) {
  sigset_t old;
  block(&old);
  for (int i = 0; i < MAX_CHILDREN; i++)
    if (children[i] == pid) children[i] = 0;
  unblock(&old);
}

void dl_child_reaped(pid_t pid) { forget(pid); }

/* Forks argv with fds 0, 1 and 2 from `in_fd`, `out_fd` and `err_fd` (-1: inherited; closed in
 * the parent by the caller); registers it before the handled signals can arrive. */
static pid_t start(const char *const *argv, int in_fd, int out_fd, int err_fd, GError **err) {
  sigset_t old;
  block(&old);
  int slot = -1;
  for (int i = 0; i < MAX_CHILDREN && slot < 0; i++)
    if (children[i] == 0) slot = i;
  if (slot < 0) {
    unblock(&old);
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: too many children running", argv[0]);
    return -1;
  }
  const pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    /* the child: only async-signal-safe calls until exec */
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
#endif
    for (size_t i = 0; i < G_N_ELEMENTS(handled); i++) signal(handled[i], SIG_DFL);
    unblock(&old);
    if (in_fd >= 0) dup2(in_fd, 0);
    if (out_fd >= 0) dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  if (pid > 0) {
    setpgid(pid, pid); /* also here: no race with a signal sent to the group at once */
    children[slot] = pid;
  }
  int e = errno;
  unblock(&old);
  if (pid < 0)
    g_set_error(err, DL_ERROR, DL_ERR_IO, "cannot start %s: %s", argv[0], g_strerror(e));
  return pid;
}

pid_t dl_child_start(const char *const *argv, const char *stderr_path, GError **err) {
  int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int fd = open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t pid = -1;
  if (nul < 0 || fd < 0)
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: %s", fd < 0 ? stderr_path : "/dev/null",
                g_strerror(errno));
  else
    pid = start(argv, -1, nul, fd, err);
  if (nul >= 0) close(nul);
  if (fd >= 0) close(fd);
  return pid;
}

/* Moves the complete lines of `pending` to `e`, handing watched ones to `w` instead. */
static void sort_lines(GString *pending, GString *e, const dl_child_watch *w, gboolean all) {
  gsize start = 0;
  for (;;) {
    const char *nl = memchr(pending->str + start, '\n', pending->len - start);
    if (!nl && !(all && start < pending->len)) break;
    const gsize end = nl ? (gsize)(nl - pending->str) + 1 : pending->len;
    const char *line = pending->str + start;
    const size_t pl = strlen(w->prefix);
    if (end - start >= pl && strncmp(line, w->prefix, pl) == 0) {
      char *text = g_strndup(line + pl, end - start - pl - (nl ? 1 : 0));
      w->on_line(text, w->data);
      g_free(text);
    } else {
      g_string_append_len(e, line, (gssize)(end - start));
    }
    start = end;
  }
  g_string_erase(pending, 0, (gssize)start);
}

gboolean dl_child_run(const char *const *argv, char **out, char **errtext, int *wait_status,
                      GError **err) {
  return dl_child_run_watched(argv, out, errtext, wait_status, NULL, err);
}

gboolean dl_child_run_watched(const char *const *argv, char **out, char **errtext,
                              int *wait_status, const dl_child_watch *watch, GError **err) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1};
  if ((out && pipe2(po, O_CLOEXEC) != 0) || pipe2(pe, O_CLOEXEC) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "pipe: %s", g_strerror(errno));
    for (int i = 0; i < 2; i++)
      if (po[i] >= 0) close(po[i]);
    return FALSE;
  }
  int nul = out ? -1 : open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_t pid = start(argv, -1, out ? po[1] : nul, pe[1], err);
  if (nul >= 0) close(nul);
  if (po[1] >= 0) close(po[1]);
  close(pe[1]);
  GString *o = g_string_new(NULL), *e = g_string_new(NULL), *pending = g_string_new(NULL);
  struct pollfd fds[2] = {{pe[0], POLLIN, 0}, {po[0], POLLIN, 0}};
  int open_fds = out ? 2 : 1;
  while (pid > 0 && open_fds > 0) {
    if (poll(fds, out ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < (out ? 2 : 1); i++) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[65536];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0 && i == 0 && watch) {
        g_string_append_len(pending, buf, n);
        sort_lines(pending, e, watch, FALSE);
      } else if (n > 0) {
        g_string_append_len(i == 0 ? e : o, buf, n);
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1; /* poll ignores negative fds */
        open_fds--;
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (fds[i].fd >= 0) close(fds[i].fd);
  if (watch) sort_lines(pending, e, watch, TRUE);
  g_string_free(pending, TRUE);
  int ws = 0;
  while (pid > 0 && waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (pid > 0) forget(pid);
  *wait_status = ws;
  if (out) *out = g_string_free(o, pid < 0);
  else g_string_free(o, TRUE);
  *errtext = g_string_free(e, pid < 0);
  return pid > 0;
}

/* ---- a child spoken to ---------------------------------------------------------------------- */

gboolean dl_child_talk_open(const char *const *argv, dl_child_talk *t, GError **err) {
  memset(t, 0, sizeof *t);
  t->pid = -1;
  int pi[2] = {-1, -1}, po[2] = {-1, -1};
  int ef = memfd_create("dlsim-child-stderr", MFD_CLOEXEC);
  if (ef < 0 || pipe2(pi, O_CLOEXEC) != 0 || pipe2(po, O_CLOEXEC) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "cannot start %s: %s", argv[0], g_strerror(errno));
    for (int i = 0; i < 2; i++) {
      if (pi[i] >= 0) close(pi[i]);
      if (po[i] >= 0) close(po[i]);
    }
    if (ef >= 0) close(ef);
    return FALSE;
  }
  t->pid = start(argv, pi[0], po[1], ef, err);
  close(pi[0]);
  close(po[1]);
  if (t->pid < 0) {
    close(pi[1]);
    close(po[0]);
    close(ef);
    return FALSE;
  }
  t->err_fd = ef;
  t->in = fdopen(pi[1], "w");
  t->out = fdopen(po[0], "r");
  /* a child that dies leaves writes to its input failing, not dlsim killed by SIGPIPE */
  signal(SIGPIPE, SIG_IGN);
  return TRUE;
}

void dl_child_talk_close(dl_child_talk *t, char **errtext, int *wait_status) {
  if (t->in) fclose(t->in);
  if (t->out) fclose(t->out);
  int ws = 0;
  while (t->pid > 0 && waitpid(t->pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (t->pid > 0) forget(t->pid);
  if (wait_status) *wait_status = ws;
  if (errtext) {
    GString *e = g_string_new(NULL);
    char buf[65536];
    ssize_t n;
    if (t->err_fd >= 0 && lseek(t->err_fd, 0, SEEK_SET) == 0)
      while ((n = read(t->err_fd, buf, sizeof buf)) > 0) g_string_append_len(e, buf, n);
    *errtext = g_string_free(e, FALSE);
  }
  if (t->err_fd >= 0) close(t->err_fd);
  memset(t, 0, sizeof *t);
  t->pid = -1;
}

/* ---- SimGrid's reasons ----------------------------------------------------------------------- */

char *dl_simgrid_reason(const char *text) {
  char **lines = g_strsplit(text ? text : "", "\n", -1);
  char *why = NULL;
  for (char **l = lines; *l && !why; l++) {
    const char *p = strstr(*l, "Parse error at ");
    if (p) {
      why = g_strdup(p);
      break;
    }
    if (strstr(*l, "Deadlock detected")) why = g_strdup("Deadlock detected");
    else if ((p = strstr(*l, "/ERROR] ")) || (p = strstr(*l, "/CRITICAL] ")))
      why = g_strdup(strchr(p, ']') + 2);
  }
  g_strfreev(lines);
  if (why && strcmp(why, "Exiting now.") == 0) g_clear_pointer(&why, g_free);
  return why;
}

void dl_simgrid_failure(const char *platform, const char *const *extra_cfg,
                        const char *child_err, int wait_status, GError **err) {
  char *why = dl_simgrid_reason(child_err);
  if (why && g_str_has_prefix(why, "Parse error at ")) {
    /* "Parse error at FILE:LINE: WHAT" */
    const char *loc = why + strlen("Parse error at "), *colon = strchr(loc, ':');
    const char *rest = colon ? strstr(colon + 1, ": ") : NULL;
    if (rest)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%.*s: SimGrid cannot read the platform: %s",
                  (int)(rest - loc), loc, rest + 2);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: SimGrid cannot read the platform: %s",
                  platform, loc);
  } else if (why && strstr(why, "Bad config key: ")) {
    const char *key = strstr(why, "Bad config key: ") + strlen("Bad config key: ");
    const char *given = NULL; /* a setting passed on the command line (--simgrid-cfg) */
    for (int j = 0; extra_cfg && extra_cfg[j] && !given; j++)
      if (g_str_has_prefix(extra_cfg[j], key) && extra_cfg[j][strlen(key)] == ':')
        given = extra_cfg[j];
    if (given)
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--simgrid-cfg %s: SimGrid has no setting '%s'",
                  given, key);
    else
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: <config>: SimGrid has no setting '%s'",
                  platform, key);
  } else if (why && strcmp(why, "Deadlock detected") == 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL,
                "SimGrid found the simulated ranks waiting for each other (a deadlock): a planner "
                "bug, please report this command");
  } else {
    char *last = why ? NULL : dl_last_line(child_err);
    char *status = WIFSIGNALED(wait_status)
                       ? g_strdup_printf("killed by signal %d", WTERMSIG(wait_status))
                       : g_strdup_printf("exit status %d", WEXITSTATUS(wait_status));
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "SimGrid stopped the simulation (%s): %s%s",
                status, why ? why : last,
                g_getenv("DLSIM_DEBUG") ? "" : " (DLSIM_DEBUG=1 shows SimGrid's whole output)");
    g_free(status);
    g_free(last);
  }
  g_free(why);
}

/* ---- temporary directories ------------------------------------------------------------------- */

/* Removes the directories dlsim-<pid>-* of dlsim processes that no longer exist. */
static void remove_stale(const char *tmp) {
  GDir *d = g_dir_open(tmp, 0, NULL);
  if (!d) return;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    if (!g_str_has_prefix(name, "dlsim-") || !g_ascii_isdigit(name[6])) continue;
    char *end = NULL;
    gint64 pid = g_ascii_strtoll(name + 6, &end, 10);
    if (*end != '-' || pid <= 0 || pid > G_MAXINT || pid == getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
    char *path = g_build_filename(tmp, name, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK))
      rm_tree_at(AT_FDCWD, path, 0);
    g_free(path);
  }
  g_dir_close(d);
}

char *dl_tmpdir_new(const char *what, GError **err) {
  const char *tmp = g_get_tmp_dir();
  remove_stale(tmp);
  char *tmpl = g_strdup_printf("%s/dlsim-%ld-%s-XXXXXX", tmp, (long)getpid(), what);
  if (strlen(tmpl) >= DIR_LEN || !g_mkdtemp(tmpl)) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "cannot create a temporary directory %s: %s", tmpl,
                g_strerror(errno));
    g_free(tmpl);
    return NULL;
  }
  sigset_t old;
  block(&old);
  for (int i = 0; i < MAX_DIRS; i++)
    if (!dirs[i][0]) {
      g_strlcpy(dirs[i], tmpl, DIR_LEN);
      break;
    }
  unblock(&old);
  return tmpl;
}

void dl_tmpdir_remove(char *dir) {
  if (!dir) return;
  sigset_t old;
  block(&old);
  for (int i = 0; i < MAX_DIRS; i++)
    if (strcmp(dirs[i], dir) == 0) dirs[i][0] = '\0';
  unblock(&old);
  rm_tree_at(AT_FDCWD, dir, 0);
  g_free(dir);
}
