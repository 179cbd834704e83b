/* cmd_sweep.c — `dlsim sweep SPEC.json`: expands the spec (sweep.h), runs each configuration as
 * a child `dlsim run` (at most --jobs at once), and appends one row per finished run to
 * PREFIX.csv and PREFIX.jsonl; a rerun runs only the keys the files do not hold yet.
 * `dlsim sweep --merge --out PREFIX A.csv B.csv ...` merges the files of several shards. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "core/child.h"
#include "core/dl_common.h"
#include "study/sweep.h"

typedef struct {
  pid_t pid;            /* child process, 0 = free slot */
  const sweep_config *cfg; /* the configuration it runs (borrowed from the expansion) */
  char *out_path;       /* its result JSON */
  char *err_path;       /* its stderr */
} slot;

typedef struct {
  int total;       /* configurations in this shard */
  int done;        /* rows present (from earlier runs and this one) */
  int ran;         /* runs finished in this process */
  gint64 start_us; /* monotonic time of the first run */
  gboolean tty;    /* stderr is a terminal: redraw in place */
  int decile;      /* last tenth reported when not a terminal */
} progress;

/* `[12/48]  25%  3.1 runs/s  ETA 12 s`: redrawn in place on a terminal, else one line per tenth
 * of the sweep and one at the end. */
static void progress_show(progress *p, gboolean final) {
  int pct = p->total ? 100 * p->done / p->total : 100;
  if (!p->tty) {
    int d = p->total ? 10 * p->done / p->total : 10;
    if (final ? p->ran == 0 || d == p->decile : d <= p->decile) return;
    p->decile = d;
  }
  double el = (double)(g_get_monotonic_time() - p->start_us) / 1e6;
  double rate = el > 0 ? p->ran / el : 0;
  char eta[32] = "-";
  if (rate > 0) dl_format_duration(eta, sizeof eta, (p->total - p->done) / rate);
  fprintf(stderr, "%s[%d/%d] %3d%%  %.1f runs/s  ETA %s%s", p->tty ? "\r\033[K" : "", p->done,
          p->total, pct, rate, eta, p->tty && !final ? "" : "\n");
  fflush(stderr);
}

/* Clears the progress line before other output on a terminal. */
static void progress_clear(const progress *p) {
  if (p->tty) fprintf(stderr, "\r\033[K");
}

/* Starts `exe run ARGS --reproducible --out OUT` with stdout discarded and stderr to a file; it
 * dies with the sweep (child.h). */
static pid_t spawn_run(const char *exe, const sweep_config *c, slot *s, GError **err) {
  GPtrArray *a = g_ptr_array_new();
  g_ptr_array_add(a, (char *)exe);
  g_ptr_array_add(a, "run");
  for (char **p = c->args; *p; p++) g_ptr_array_add(a, *p);
  g_ptr_array_add(a, "--reproducible");
  g_ptr_array_add(a, "--out");
  g_ptr_array_add(a, s->out_path);
  g_ptr_array_add(a, NULL);
  pid_t pid = dl_child_start((const char *const *)a->pdata, s->err_path, err);
  g_ptr_array_free(a, TRUE);
  return pid;
}

/* The last non-empty line of a run's stderr, without the "dlsim: " prefix. */
static char *last_line(const char *path) {
  char *text = NULL;
  g_file_get_contents(path, &text, NULL, NULL);
  char *last = dl_last_line(text);
  g_free(text);
  if (g_str_has_prefix(last, "dlsim: ")) memmove(last, last + 7, strlen(last + 7) + 1);
  return last;
}

typedef struct {
  int ok, invalid, failed; /* runs of this process by outcome */
} tally;

/* Records the outcome of a finished child. FALSE only when the files cannot be written. */
static gboolean finish(slot *s, int wstatus, sweep_store *st, progress *pg, tally *t,
                       GError **err) {
  const sweep_config *c = s->cfg;
  char *reason = NULL, *csv = NULL, *jl = NULL;
  const char *status = NULL;
  cJSON *res = NULL;
  gboolean ok = TRUE;
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
    char *txt = dl_read_file(s->out_path, NULL, NULL);
    res = txt ? cJSON_Parse(txt) : NULL;
    g_free(txt);
    if (res) status = "ok";
    else reason = g_strdup_printf("no readable result at %s", s->out_path);
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 2) {
    status = "invalid";
    reason = last_line(s->err_path);
  } else {
    char *l = last_line(s->err_path);
    reason = WIFSIGNALED(wstatus)
                 ? g_strdup_printf("killed by signal %d: %s", WTERMSIG(wstatus), l)
                 : g_strdup_printf("exit status %d: %s", WEXITSTATUS(wstatus), l);
    g_free(l);
  }
  if (status) {
    csv = sweep_csv_row(c, status, reason, res);
    jl = sweep_jsonl_row(c, status, reason, res);
    ok = sweep_store_append(st, c->key, status, csv, jl, err);
    if (ok) {
      pg->done++;
      if (res) t->ok++;
      else {
        t->invalid++;
        progress_clear(pg);
        printf("invalid: %s: %s\n", c->key, reason);
        fflush(stdout);
      }
    }
  } else {
    t->failed++;
    progress_clear(pg);
    fprintf(stderr, "dlsim: sweep: %s: failed (%s); it stays to do in a rerun\n", c->key, reason);
  }
  pg->ran++;
  unlink(s->out_path);
  unlink(s->err_path);
  cJSON_Delete(res);
  g_free(reason);
  g_free(csv);
  g_free(jl);
  return ok;
}

static char *self_exe(const char *argv0) {
  char *exe = g_file_read_link("/proc/self/exe", NULL);
  if (exe) return exe;
  if (strchr(argv0, '/')) return g_canonicalize_filename(argv0, NULL);
  exe = g_find_program_in_path("dlsim");
  return exe ? exe : g_strdup("dlsim");
}

/* PREFIX.csv / PREFIX.jsonl from --out (a trailing .csv is the same prefix). */
static void out_paths(const char *out, char **csv, char **jsonl) {
  char *prefix = g_str_has_suffix(out, ".csv") ? g_strndup(out, strlen(out) - 4) : g_strdup(out);
  *csv = g_strconcat(prefix, ".csv", NULL);
  *jsonl = g_strconcat(prefix, ".jsonl", NULL);
  g_free(prefix);
}

/* PREFIX.lock of PREFIX.csv (newly allocated). */
static char *lock_path_of(const char *csv) {
  return g_strdup_printf("%.*s.lock", (int)strlen(csv) - 4, csv);
}

/* PREFIX.lock, held while this sweep writes PREFIX.csv and .jsonl: a second sweep into the same
 * rows is refused rather than left to interleave them. The file stays (removing it would let
 * a third sweep lock a new one while the second still holds the old). -1 and an error if held. */
static int lock_prefix(const char *csv, GError **err) {
  char *path = lock_path_of(csv);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out: %s: %s", path, g_strerror(errno));
  } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, e == EWOULDBLOCK
                ? "--out: another dlsim sweep writes these rows (it holds %s); wait for it or "
                  "give another --out" : "--out: %s: cannot lock: %s", path, g_strerror(e));
    close(fd);
    fd = -1;
  }
  g_free(path);
  return fd;
}

/* The rows kept from an earlier sweep into this prefix are all of this spec's configurations:
 * rows of another spec's are refused, not mixed in (a spec may grow: its old rows are its own). */
static gboolean same_spec(const sweep_store *st, GHashTable *mine, const char *csv, GError **err) {
  GHashTableIter it;
  gpointer key;
  int foreign = 0;
  const char *first = NULL;
  g_hash_table_iter_init(&it, st->done);
  while (g_hash_table_iter_next(&it, &key, NULL))
    if (!g_hash_table_contains(mine, key)) {
      if (!first || strcmp(key, first) < 0) first = key;
      foreign++;
    }
  if (foreign)
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out: %s holds %d row(s) of configurations this "
                "spec does not make (such as \"%s\"): rows of another sweep; give another --out",
                csv, foreign, first);
  return foreign == 0;
}

static int run_sweep(const char *spec_path, const char *out, int jobs, const char *shard,
                     gboolean list, int throttle_ms, GError **e) {
  int status = 1;
  char *text = NULL, *csv = NULL, *jsonl = NULL, *exe = NULL, *tmpdir = NULL;
  GPtrArray *cfgs = NULL;
  GPtrArray *todo = g_ptr_array_new();
  slot *slots = NULL;
  sweep_store st = {.csv_fd = -1, .jsonl_fd = -1};
  GHashTable *keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  int lock = -1;
  int si = 0, sn = 1;
  tally t = {0, 0, 0};

  if (shard && !sweep_shard_parse(shard, &si, &sn, e)) goto out;
  if (!(text = dl_read_file(spec_path, NULL, e))) goto out;
  if (!(cfgs = sweep_expand(text, spec_path, e))) goto out;
  for (guint i = 0; i < cfgs->len; i++) /* every shard's: a prefix may hold the others' rows */
    g_hash_table_add(keys, g_strdup(((sweep_config *)g_ptr_array_index(cfgs, i))->key));
  sweep_shard(cfgs, si, sn);
  if (list) {
    for (guint i = 0; i < cfgs->len; i++)
      printf("%s\n", ((sweep_config *)g_ptr_array_index(cfgs, i))->key);
    status = 0;
    goto out;
  }
  if (!out) {
    /* default prefix: the spec's base name, in the current directory */
    char *base = g_path_get_basename(spec_path);
    if (g_str_has_suffix(base, ".json")) base[strlen(base) - 5] = 0;
    out_paths(base, &csv, &jsonl);
    g_free(base);
  } else {
    if (!dl_out_prefix_ok(out, "PREFIX.csv and .jsonl", e)) goto out;
    out_paths(out, &csv, &jsonl);
  }
  /* where the rows go is checked before anything runs: never onto the spec itself */
  char *lock_path = lock_path_of(csv);
  const char *out_names[] = {"--out", "--out", "--out"}, *outs[] = {csv, jsonl, lock_path};
  const char *in_names[] = {"spec"}, *ins[] = {spec_path};
  const gboolean apart = dl_check_outputs(out_names, outs, 3, in_names, ins, 1, e);
  g_free(lock_path);
  if (!apart) goto out;
  if (!dl_check_writable("--out", csv, e) || !dl_check_writable("--out", jsonl, e)) goto out;
  if ((lock = lock_prefix(csv, e)) < 0) goto out;
  if (!sweep_store_open(&st, csv, jsonl, e)) goto out;
  if (!same_spec(&st, keys, csv, e)) goto out;
  if (st.dropped > 0)
    fprintf(stderr, "dlsim: sweep: dropped %d incomplete or unmatched line(s) from %s/%s\n",
            st.dropped, csv, jsonl);
  progress pg = {.total = (int)cfgs->len, .tty = isatty(2), .decile = -1};
  for (guint i = 0; i < cfgs->len; i++) {
    sweep_config *c = g_ptr_array_index(cfgs, i);
    if (g_hash_table_contains(st.done, c->key)) pg.done++;
    else g_ptr_array_add(todo, c);
  }
  int before = pg.done;
  pg.decile = pg.total ? 10 * pg.done / pg.total : 10;
  exe = self_exe("dlsim");
  if (todo->len > 0 && !(tmpdir = dl_tmpdir_new("sweep", e))) goto out;
  if (jobs > (int)todo->len) jobs = todo->len > 0 ? (int)todo->len : 1;
  slots = g_new0(slot, jobs);
  pg.start_us = g_get_monotonic_time();
  guint next = 0;
  int running = 0;
  gboolean broken = FALSE;
  while ((next < todo->len && !broken) || running > 0) {
    while (!broken && running < jobs && next < todo->len) {
      slot *s = NULL;
      for (int k = 0; k < jobs; k++)
        if (!slots[k].pid) s = &slots[k];
      if (throttle_ms > 0) g_usleep((gulong)throttle_ms * 1000);
      s->cfg = g_ptr_array_index(todo, next);
      s->out_path = g_strdup_printf("%s/run-%u.json", tmpdir, next);
      s->err_path = g_strdup_printf("%s/run-%u.err", tmpdir, next);
      next++;
      s->pid = spawn_run(exe, s->cfg, s, e);
      if (s->pid < 0) {
        s->pid = 0;
        broken = TRUE;
        break;
      }
      running++;
    }
    if (running == 0) break;
    int ws = 0;
    pid_t pid = waitpid(-1, &ws, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      g_set_error(e, DL_ERROR, DL_ERR_IO, "sweep: waitpid: %s", g_strerror(errno));
      goto out;
    }
    dl_child_reaped(pid);
    for (int k = 0; k < jobs; k++) {
      slot *s = &slots[k];
      if (s->pid != pid) continue;
      if (!broken && !finish(s, ws, &st, &pg, &t, e)) broken = TRUE;
      s->pid = 0;
      g_free(s->out_path);
      g_free(s->err_path);
      s->out_path = s->err_path = NULL;
      running--;
      if (!broken) progress_show(&pg, FALSE);
    }
  }
  if (broken) goto out;
  progress_show(&pg, TRUE);
  char sh[48] = "";
  if (sn > 1) g_snprintf(sh, sizeof sh, " (shard %d/%d)", si, sn);
  printf("sweep: %d configurations%s: %d ok, %d invalid, %d failed, %d already done; rows in %s "
         "and %s\n",
         pg.total, sh, t.ok, t.invalid, t.failed, before, csv, jsonl);
  status = t.failed ? 1 : 0;
out:
  if (slots) g_free(slots);
  dl_tmpdir_remove(tmpdir);
  sweep_store_close(&st);
  if (lock >= 0) close(lock); /* the lock goes with it */
  g_hash_table_destroy(keys);
  g_ptr_array_unref(todo);
  if (cfgs) g_ptr_array_unref(cfgs);
  g_free(exe);
  g_free(csv);
  g_free(jsonl);
  g_free(text);
  return status;
}

int cmd_sweep(int argc, char **argv) {
  char *out = NULL, *shard = NULL;
  int jobs = (int)g_get_num_processors(), throttle_ms = 0;
  gboolean list = FALSE, merge = FALSE;
  GOptionEntry entries[] = {
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out,
       "write PREFIX.csv and PREFIX.jsonl (default: the spec's name without .json)", "PREFIX"},
      {"jobs", 'j', 0, G_OPTION_ARG_INT, &jobs, "runs at once (default: the number of cores)", "N"},
      {"shard", 0, 0, G_OPTION_ARG_STRING, &shard,
       "run only configurations whose index mod n is i (for job arrays)", "i/n"},
      {"list", 0, 0, G_OPTION_ARG_NONE, &list, "print the keys of the configurations, run nothing",
       NULL},
      {"throttle-ms", 0, 0, G_OPTION_ARG_INT, &throttle_ms,
       "wait this long before starting each run (to share a busy machine)", "MS"},
      {"merge", 0, 0, G_OPTION_ARG_NONE, &merge,
       "merge the CSV files given (and the JSONL beside each) into --out, one row per key", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionContext *ctx = g_option_context_new("SPEC.json | --merge --out PREFIX A.csv B.csv ...");
  g_option_context_set_summary(
      ctx,
      "Runs every configuration of a spec (dlsim run options as axes) and appends one row per\n"
      "run to PREFIX.csv and PREFIX.jsonl. Rerunning skips the rows already there.\n"
      "Spec: {\"fixed\": {\"workload\": \"resnet18-cifar100\", \"mode\": \"analytic\"},\n"
      "       \"axes\": {\"gpus\": [2, 4, 8], \"strategy\": [{\"label\": \"dp\"}, "
      "{\"label\": \"grid\", \"grid\": \"2x2\"}]}}\n"
      "(see analysis/README.md)");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *e = NULL;
  int status = 2;
  gboolean help = FALSE;
  if (!cli_parse(ctx, "sweep", &argc, &argv, &help, &e)) goto out;
  if (help) {
    status = 0;
    goto out;
  }
  if (jobs < 1 || throttle_ms < 0) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "%s: expected a positive number",
                jobs < 1 ? "--jobs" : "--throttle-ms");
    goto out;
  }
  if (merge) {
    if (!out || argc < 2) {
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                  "sweep --merge: expected --out PREFIX and one or more sweep CSV files");
      goto out;
    }
    char *csv, *jsonl;
    out_paths(out, &csv, &jsonl);
    int rows = sweep_merge(csv, jsonl, argv + 1, &e);
    if (rows >= 0) {
      printf("sweep: merged %d rows into %s and %s\n", rows, csv, jsonl);
      status = 0;
    }
    g_free(csv);
    g_free(jsonl);
    goto out;
  }
  if (argc != 2) {
    if (argc < 2)
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT,
                  "sweep: expected a spec file (see dlsim sweep --help)");
    else
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "sweep: unexpected argument '%s'", argv[2]);
    goto out;
  }
  status = run_sweep(argv[1], out, jobs, shard, list, throttle_ms, &e);
out:
  if (e) {
    cli_error(e->message);
    status = e->code == DL_ERR_INPUT ? 2 : 1;
    g_error_free(e);
  }
  g_option_context_free(ctx);
  g_free(out);
  g_free(shard);
  return status;
}
