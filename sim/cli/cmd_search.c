/* cmd_search.c — `dlsim search`: the fastest layout of a model on a cluster (study/search.h):
 * every layout in closed form, the best few simulated; a ranked table on stdout, and with
 * --out PREFIX the layouts as PREFIX.json and PREFIX.csv and their time against memory as
 * PREFIX.svg. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <glib/gstdio.h>

#include <cjson/cJSON.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "exec/context.h"
#include "study/search.h"

#define DEFAULT_TOP 10

/* What --out PREFIX writes: PREFIX and each of these. */
#define N_OUTPUTS 3
static const char *const out_ext[N_OUTPUTS] = {".json", ".csv", ".svg"};

/* The layout options: the search chooses them. */
static gboolean refuse_layout(const cfg_run *c, GError **err) {
  const struct {
    gboolean given;
    const char *opt;
  } layout[] = {
      {c->dp != 0, "--dp"},
      {c->tp != 0, "--tp"},
      {c->pp != 0, "--pp"},
      {c->ep != 0, "--ep"},
      {c->cp != 1, "--cp"},
      {c->sequence_parallel, "--sequence-parallel"},
      {c->microbatches != 0, "--microbatches"},
      {c->virtual_stages != 0, "--virtual-stages"},
      {c->schedule != CFG_SCHED_GPIPE, "--schedule"},
      {c->zero != 0, "--zero"},
      {c->fsdp != CFG_FSDP_NONE, "--fsdp"},
      {c->fsdp_shard != 0, "--fsdp-shard-size"},
      {c->recompute || c->recompute_selective, "--recompute"},
      {c->bucket_bytes != 25.0 * 1024 * 1024, "--bucket-mb"},
      {c->grid_pr > 0 || c->grid_auto, "--grid"},
      {c->domain_conv, "--domain"},
      {c->mode != CFG_MODE_SIM, "--mode"},
      {c->trace != NULL, "--trace"},
      {c->dump_weights != NULL, "--dump-weights"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(layout); i++)
    if (layout[i].given) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "search: %s: the search chooses the layout and "
                  "runs it in closed form and simulation; leave %s out", layout[i].opt,
                  layout[i].opt);
      return FALSE;
    }
  /* what-ifs of one run: the search ranks layouts on the cluster as built, at median times */
  const char *whatif = cfg_whatif_option(c, FALSE); /* stragglers: every worker has them */
  if (whatif) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "search: %s: the search ranks layouts on the "
                "cluster as built at the kernels' median times; run the layout it chooses with "
                "%s", whatif, whatif);
    return FALSE;
  }
  return TRUE;
}

/* The user's run options without the search's own: the base of every layout's command. */
static char *base_args(int argc, char **argv) {
  static const char *const own[] = {"--top", "--verify", "--out", "-o", "--min-cp-tokens",
                                    "--pareto-within", "--jobs", "-j", "--objective",
                                    "--gpu-hour-price", "--kwh-price"};
  static const char *const flags[] = {"--allow-cross-node-tp", "--exhaustive"};
  GString *s = g_string_new("");
  for (int i = 1; i < argc; i++) {
    gboolean skip = FALSE;
    for (size_t k = 0; k < G_N_ELEMENTS(own) && !skip; k++) {
      const size_t n = strlen(own[k]);
      if (strcmp(argv[i], own[k]) == 0) skip = TRUE, i++; /* and its value */
      else if (strncmp(argv[i], own[k], n) == 0 && (argv[i][n] == '=' || n == 2))
        skip = TRUE; /* --opt=value, or -jN */
    }
    for (size_t k = 0; k < G_N_ELEMENTS(flags) && !skip; k++) skip = strcmp(argv[i], flags[k]) == 0;
    if (skip) continue;
    /* quoted only where a shell would split or expand it */
    const gboolean plain = *argv[i] && strspn(argv[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"
                                                      "RSTUVWXYZ0123456789_./:=,+-@%") ==
                                           strlen(argv[i]);
    char *q = plain ? g_strdup(argv[i]) : g_shell_quote(argv[i]);
    g_string_append_printf(s, " %s", q);
    g_free(q);
  }
  return g_string_free(s, FALSE);
}

static char *command_of(const char *base, const search_layout *l) {
  char *a = search_layout_args(&l->cfg);
  char *cmd = g_strdup_printf("dlsim run --mode analytic%s %s", base, a);
  g_free(a);
  return cmd;
}

/* Where the best layout's kernel times come from (its run's kernel_db.time_share): a ranking
 * resting on times interpolated between other shapes, or on the roofline, says so. The layouts
 * the workers and the journal carry hold no shares: the best is timed once more here. */
static void print_kernel_origins(const run_ctx *x, const search_layout *best) {
  res_result r;
  res_init(&r);
  GError *e = NULL;
  if (analytic_run(x, &best->cfg, &r, &e)) {
    printf("  the best's kernel time: %s", r.kdb.name ? r.kdb.name : "roofline");
    for (int k = 0; k < KDB_N_ORIGINS; k++)
      if (r.kdb.share[k] > 0)
        printf(", %.1f %% %s", 100 * r.kdb.share[k], kdb_origin_name((kdb_origin)k));
    printf("\n");
  } else {
    printf("  the best's kernel time: not known (%s)\n", e->message);
  }
  g_clear_error(&e);
  res_release(&r);
}

static void print_table(const search_result *r, const search_opts *o, const run_ctx *x,
                        const char *base) {
  const cfg_run *c = &x->cfg;
  long dropped = 0;
  for (int d = 0; d < SEARCH_N_DROPS; d++) dropped += r->dropped[d];
  printf("dlsim search: %s on %s, %d GPUs, batch %ld, %s\n", x->model->name, c->platform, c->gpus,
         c->batch, gpu_precision_name(c->precision));
  printf("  %ld layouts: %ld timed in closed form, ", r->enumerated, r->evaluated);
  if (r->pruned) printf("%ld passed over (bound), ", r->pruned);
  printf("%ld dropped (", dropped);
  for (int d = 0, sep = 0; d < SEARCH_N_DROPS; d++)
    if (r->dropped[d]) printf("%s%ld for %s", sep++ ? ", " : "", r->dropped[d], search_drop_name(d));
  printf(") in %.1f s\n", r->wall_s);
  const gboolean tokens = x->model->vocab > 0;
  if (o->objective != SEARCH_BY_TIME)
    printf("  ranked by %s per iteration (the same batch for every layout)\n",
           search_objective_name(o->objective));
  printf("  %4s  %-62s %10s %10s %11s %6s %8s %8s %7s %9s\n", "rank", "layout", "iter_s", "sim_s",
         tokens ? "tok/s/GPU" : "smp/s/GPU", "MFU", "mem_GB", "exp_comm", "bubble",
         o->objective == SEARCH_BY_COST ? "cost/iter" : "kJ/iter");
  const guint n = MIN(r->layouts->len, (guint)o->top);
  for (guint i = 0; i < n; i++) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, i);
    char *a = search_layout_args(&l->cfg);
    char sim[32] = "-";
    if (!isnan(l->sim_s)) g_snprintf(sim, sizeof sim, "%.4g", l->sim_s);
    char moved[48] = "";
    if (l->sim_rank && l->sim_rank != l->analytic_rank)
      g_snprintf(moved, sizeof moved, "  (closed form: #%d)", l->analytic_rank);
    const double T = l->analytic_s;
    const double v = o->objective == SEARCH_BY_COST ? search_objective_value(o, l, TRUE)
                                                    : (isnan(l->sim_energy_j) ? l->energy_j
                                                                              : l->sim_energy_j) / 1e3;
    printf("  %4u  %-62s %10.4g %10s %11.4g %5.1f%% %8.2f %7.1f%% %6.1f%% %9.4g%s\n", i + 1, a, T,
           sim, l->tokens_per_s_per_gpu, 100 * l->mfu, l->peak_bytes / 1e9,
           T > 0 ? 100 * l->exposed_comm_s / T : 0, T > 0 ? 100 * l->bubble_s / T : 0, v, moved);
    g_free(a);
  }
  if (r->reordered)
    printf("  the simulation reorders the verified layouts: each one's closed-form rank is in "
           "parentheses\n");
  char *best = command_of(base, &g_array_index(r->layouts, search_layout, 0));
  printf("  the best: %s\n", best);
  g_free(best);
  print_kernel_origins(x, &g_array_index(r->layouts, search_layout, 0));
}

static char *result_json(const search_result *r, const search_opts *so, const run_ctx *x,
                         const char *base) {
  const cfg_run *c = &x->cfg;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "dlsim_version", DL_VERSION);
  cJSON_AddStringToObject(root, "workload", x->model->name);
  cJSON_AddStringToObject(root, "platform", c->platform);
  cJSON_AddNumberToObject(root, "gpus", c->gpus);
  cJSON_AddNumberToObject(root, "batch", (double)c->batch);
  cJSON_AddStringToObject(root, "precision", gpu_precision_name(c->precision));
  cJSON_AddNumberToObject(root, "enumerated", (double)r->enumerated);
  cJSON_AddNumberToObject(root, "evaluated", (double)r->evaluated);
  cJSON_AddNumberToObject(root, "pruned", (double)r->pruned);
  cJSON *dr = cJSON_AddObjectToObject(root, "dropped");
  for (int d = 0; d < SEARCH_N_DROPS; d++)
    cJSON_AddNumberToObject(dr, search_drop_name(d), (double)r->dropped[d]);
  cJSON_AddBoolToObject(root, "reordered", r->reordered);
  cJSON_AddStringToObject(root, "objective", search_objective_name(so->objective));
  cJSON *ls = cJSON_AddArrayToObject(root, "layouts");
  for (guint i = 0; i < r->layouts->len; i++) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", i + 1);
    cJSON_AddItemToObject(o, "config", cfg_to_json(&l->cfg));
    char *cmd = command_of(base, l);
    cJSON_AddStringToObject(o, "command", cmd);
    g_free(cmd);
    cJSON_AddNumberToObject(o, "analytic_iteration_s", l->analytic_s);
    if (isnan(l->sim_s)) cJSON_AddNullToObject(o, "sim_iteration_s");
    else cJSON_AddNumberToObject(o, "sim_iteration_s", l->sim_s);
    cJSON_AddNumberToObject(o, "analytic_rank", l->analytic_rank);
    cJSON_AddNumberToObject(o, "memory_peak_bytes", l->peak_bytes);
    cJSON_AddNumberToObject(o, "exposed_comm_s", l->exposed_comm_s);
    cJSON_AddNumberToObject(o, "bubble_s", l->bubble_s);
    cJSON_AddNumberToObject(o, "mfu", l->mfu);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_gpu", l->tokens_per_s_per_gpu);
    cJSON_AddNumberToObject(o, "analytic_energy_per_iteration_j", l->energy_j);
    if (isnan(l->sim_energy_j)) cJSON_AddNullToObject(o, "sim_energy_per_iteration_j");
    else cJSON_AddNumberToObject(o, "sim_energy_per_iteration_j", l->sim_energy_j);
    if (so->objective == SEARCH_BY_COST)
      cJSON_AddNumberToObject(o, "cost_per_iteration", search_objective_value(so, l, TRUE));
    cJSON_AddItemToArray(ls, o);
  }
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(s, "\n", NULL);
  cJSON_free(s);
  return out;
}

static char *result_csv(const search_result *r) {
  GString *s = g_string_new("rank,layout,analytic_iteration_s,sim_iteration_s,analytic_rank,"
                            "memory_peak_bytes,exposed_comm_s,bubble_s,mfu,"
                            "tokens_per_s_per_gpu,energy_per_iteration_j\n");
  for (guint i = 0; i < r->layouts->len; i++) {
    const search_layout *l = &g_array_index(r->layouts, search_layout, i);
    char *a = search_layout_args(&l->cfg);
    g_string_append_printf(s, "%u,", i + 1);
    dl_csv_field(s, a);
    g_free(a);
    char sim[32] = "";
    if (!isnan(l->sim_s)) g_snprintf(sim, sizeof sim, "%.17g", l->sim_s);
    g_string_append_printf(s, ",%.17g,%s,%d,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g\n", l->analytic_s,
                           sim, l->analytic_rank, l->peak_bytes, l->exposed_comm_s, l->bubble_s,
                           l->mfu, l->tokens_per_s_per_gpu,
                           isnan(l->sim_energy_j) ? l->energy_j : l->sim_energy_j);
  }
  return g_string_free(s, FALSE);
}

/* Writes PREFIX.json, .csv and .svg, each whole or not at all. */
static gboolean write_outputs(char *const files[N_OUTPUTS], const search_result *r,
                              const search_opts *o, const run_ctx *x, const char *base,
                              GError **err) {
  char *texts[N_OUTPUTS] = {result_json(r, o, x, base), result_csv(r), NULL};
  char *title = g_strdup_printf("%s on %d GPUs of %s", x->model->name, x->cfg.gpus,
                                x->cfg.platform);
  GString *svg = search_svg(r, title);
  texts[2] = g_string_free(svg, FALSE);
  g_free(title);
  gboolean ok = TRUE;
  for (int i = 0; i < N_OUTPUTS && ok; i++)
    ok = dl_write_file_atomic(files[i], texts[i], strlen(texts[i]), err);
  for (int i = 0; i < N_OUTPUTS; i++) g_free(texts[i]);
  return ok;
}

int cmd_search(int argc, char **argv) {
  cfg_run parsed;
  cfg_init(&parsed);
  run_ctx x;
  memset(&x, 0, sizeof x);
  GError *e = NULL;
  search_result r;
  memset(&r, 0, sizeof r);
  gboolean ok = FALSE, help = FALSE;
  char *base = base_args(argc, argv);
  int top = DEFAULT_TOP, verify = 0;
  gint64 min_cp = SEARCH_MIN_CP_TOKENS;
  gboolean cross = FALSE, exhaustive = FALSE;
  double within = SEARCH_PARETO_WITHIN;
  char *prefix = NULL, *files[N_OUTPUTS] = {NULL, NULL, NULL}, *journal = NULL;
  int jobs = (int)g_get_num_processors();
  char *objective = NULL, *gpu_price = NULL, *kwh_price = NULL;
  const GOptionEntry own[] = {
      {"objective", 0, 0, G_OPTION_ARG_STRING, &objective,
       "rank by time (default: the iteration), energy (an iteration's joules: the same batch for "
       "every layout, so per token; power as `dlsim run --tokens` models it) or cost "
       "(--gpu-hour-price and --kwh-price)", "time|energy|cost"},
      {"gpu-hour-price", 0, 0, G_OPTION_ARG_STRING, &gpu_price,
       "with --objective cost: price of a GPU-hour", "PRICE"},
      {"kwh-price", 0, 0, G_OPTION_ARG_STRING, &kwh_price,
       "with --objective cost: price of a kWh", "PRICE"},
      {"top", 0, 0, G_OPTION_ARG_INT, &top, "layouts in the table (default 10)", "K"},
      {"verify", 0, 0, G_OPTION_ARG_INT, &verify,
       "simulate the K best layouts of the closed form and rank them by the simulated time "
       "(default 0; at most --top)", "K"},
      {"allow-cross-node-tp", 0, 0, G_OPTION_ARG_NONE, &cross,
       "let the tensor-parallel group leave a node (default: tp at most the GPUs of a node)", NULL},
      {"min-cp-tokens", 0, 0, G_OPTION_ARG_INT64, &min_cp,
       "search context parallelism while each rank keeps at least this many tokens of every "
       "sequence (default 1024)", "T"},
      {"exhaustive", 0, 0, G_OPTION_ARG_NONE, &exhaustive,
       "time every layout in closed form (default: with --objective time, pass over a layout "
       "whose lower bound shows it neither among the --top best nor on the Pareto front of time "
       "and memory)", NULL},
      {"pareto-within", 0, 0, G_OPTION_ARG_DOUBLE, &within,
       "the Pareto front of time and memory is kept among the layouts up to F times the fastest "
       "one's time (default 1.25; 0: all of them)", "F"},
      {"jobs", 'j', 0, G_OPTION_ARG_INT, &jobs,
       "processes evaluating layouts at once (default: this machine's cores)", "N"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &prefix,
       "write PREFIX.json, PREFIX.csv (every layout that fits, ranked) and PREFIX.svg (time "
       "against memory, the Pareto front and the best layout marked)", "PREFIX"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  if (!cfg_parse_args(&parsed, "search", own,
                      "Finds the fastest parallel layout of a model on --gpus GPUs of a platform: "
                      "every layout in closed form, what fits ranked, the best --verify "
                      "simulated.", &argc, &argv, &help, &e))
    goto out;
  if (help) {
    ok = TRUE;
    goto out;
  }
  if (top < 1 || top > 100000) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--top %d: expected 1..100000", top);
    goto out;
  }
  if (verify < 0 || verify > top) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--verify %d: expected 0..--top (%d)", verify, top);
    goto out;
  }
  if (jobs < 1 || jobs > 1024) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--jobs %d: expected 1..1024", jobs);
    goto out;
  }
  if (!(within == 0 || (within >= 1 && within <= 1e6))) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--pareto-within %g: expected 0 or 1..1e6", within);
    goto out;
  }
  if (min_cp < 1) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--min-cp-tokens %" G_GINT64_FORMAT ": expected 1 or "
                "more", min_cp);
    goto out;
  }
  if (prefix && !dl_out_prefix_ok(prefix, "PREFIX.json, .csv and .svg", &e)) goto out;
  search_opts o = {top, verify, cross, min_cp, jobs, SEARCH_BY_TIME, -1, -1,
                   exhaustive, within, NULL};
  if (objective) {
    int k = -1;
    for (int i = 0; i <= SEARCH_BY_COST; i++)
      if (strcmp(objective, search_objective_name((search_objective)i)) == 0) k = i;
    if (k < 0) {
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--objective %s: expected time, energy or cost",
                  objective);
      goto out;
    }
    o.objective = (search_objective)k;
  }
  if ((gpu_price && !cli_number("--gpu-hour-price", gpu_price, 0, 1e9, "a price >= 0",
                                &o.gpu_hour_price, &e)) ||
      (kwh_price && !cli_number("--kwh-price", kwh_price, 0, 1e9, "a price >= 0", &o.kwh_price,
                                &e)))
    goto out;
  if ((o.objective == SEARCH_BY_COST) != (gpu_price || kwh_price)) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, o.objective == SEARCH_BY_COST
                    ? "--objective cost: give --gpu-hour-price, --kwh-price or both"
                    : "--gpu-hour-price and --kwh-price go with --objective cost");
    goto out;
  }
  if (!refuse_layout(&parsed, &e)) goto out;
  for (int i = 0; i < N_OUTPUTS && prefix; i++) {
    files[i] = g_strconcat(prefix, out_ext[i], NULL);
    if (!dl_check_writable("--out", files[i], &e)) goto out;
  }
  /* with --out, the layouts evaluated so far, so that an interrupted search resumes */
  if (prefix) {
    journal = g_strconcat(prefix, ".journal", NULL);
    if (!dl_check_writable("--out", journal, &e)) goto out;
    o.journal = journal;
  }
  parsed.mode = CFG_MODE_ANALYTIC;
  /* the context is opened with a layout that resolves for any batch (one replica, one
   * micro-batch); the layouts replace it */
  parsed.dp = 1, parsed.tp = 1, parsed.pp = parsed.gpus, parsed.microbatches = 1;
  if (!run_ctx_open(&x, &parsed, &e)) goto out;
  if (x.trace) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "search: --workload %s: a trace fixes its layout; "
                "search a model", x.cfg.workload);
    goto out;
  }
  if (x.note) fprintf(stderr, "dlsim: note: %s\n", x.note);
  if ((o.objective == SEARCH_BY_ENERGY || (o.objective == SEARCH_BY_COST && kwh_price)) &&
      x.gpu->board_w <= 0) {
    g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "--objective %s: %s has no power figures",
                search_objective_name(o.objective), x.gpu->name);
    goto out;
  }
  if (prefix) {
    const char *in_names[] = {"--workload", "--platform", "--kernels"};
    const char *ins[] = {x.model->path, x.platform ? plat_path(x.platform) : NULL,
                         x.db ? kdb_path(x.db) : NULL};
    const char *out_names[N_OUTPUTS + 1] = {"--out", "--out", "--out", "--out"};
    const char *outs[N_OUTPUTS + 1] = {files[0], files[1], files[2], journal};
    if (!dl_check_outputs(out_names, outs, N_OUTPUTS + 1, in_names, ins, 3, &e)) goto out;
  }
  if (!search_run(&x, &o, &r, &e)) goto out;
  print_table(&r, &o, &x, base);
  if (prefix && !write_outputs(files, &r, &o, &x, base, &e)) goto out;
  if (journal) g_unlink(journal); /* the outputs hold it all now */
  ok = TRUE;

out:;
  int status = 0;
  if (!ok) {
    cli_error(e ? e->message : "search failed");
    status = (!e || e->code == DL_ERR_INPUT) ? 2 : 1;
    if (e) g_error_free(e);
  }
  search_result_release(&r);
  run_ctx_release(&x);
  cfg_release(&parsed);
  g_free(base);
  g_free(prefix);
  g_free(objective);
  g_free(gpu_price);
  g_free(kwh_price);
  for (int i = 0; i < N_OUTPUTS; i++) g_free(files[i]);
  g_free(journal);
  return status;
}
