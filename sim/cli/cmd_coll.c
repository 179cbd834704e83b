/* cmd_coll.c — `dlsim coll`: an nccl-tests-style benchmark of one collective on a platform,
 * simulated by running `dlsim-smpi coll` under smpirun on the platform's first N GPUs. */
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "cli/options.h"
#include "coll/coll.h"
#include "core/child.h"
#include "core/dl_common.h"
#include "coll/nccl.h"
#include "exec/context.h"
#include "exec/launch.h"
#include "platform/platform.h"

/* The algorithms of the table, per operation, for --help. */
static char *algo_help(void) {
  GString *s = g_string_new("Algorithms (--coll pins one; default: for each size what NCCL would "
                             "pick, see coll.h):\n");
  for (int op = 0; op < COLL_OP_COUNT; op++) {
    int n;
    const coll_algo_info *const *l = coll_list((coll_op)op, &n);
    g_string_append_printf(s, "  %s:\n", coll_op_name((coll_op)op));
    for (int i = 0; i < n; i++)
      g_string_append_printf(s, "    %-10s %s\n", l[i]->name, l[i]->description);
  }
  g_string_append(s, "Sizes take units B, KB, MB, GB (10^3) or KiB, MiB, GiB.");
  return g_string_free(s, FALSE);
}

static int fail(const char *msg) {
  cli_error(msg);
  return 2;
}

int cmd_coll(int argc, char **argv) {
  char *platform = NULL, *op_name = NULL, *algo = NULL, *min_s = NULL, *max_s = NULL;
  char *json = NULL, *help = algo_help(), *msg = NULL, *mode = NULL, *proto_s = NULL;
  char *nccl_s = NULL;
  int gpus = 0, iters = 5, status = 2;
  gboolean check = FALSE, message_level = FALSE;
  char **simgrid_cfg = NULL;
  GOptionEntry entries[] = {
      {"platform", 0, 0, G_OPTION_ARG_STRING, &platform, "platform name or SimGrid XML file", "P"},
      {"gpus", 0, 0, G_OPTION_ARG_INT, &gpus, "number of GPUs (MPI ranks): the first N hosts", "N"},
      {"op", 0, 0, G_OPTION_ARG_STRING, &op_name,
       "allreduce|allgather|reducescatter|broadcast|alltoall|sendrecv", "OP"},
      {"coll", 0, 0, G_OPTION_ARG_STRING, &algo, "algorithm (see below), or smpi:<name>", "ALGO"},
      {"min-bytes", 0, 0, G_OPTION_ARG_STRING, &min_s, "smallest size (default 8B)", "SIZE"},
      {"max-bytes", 0, 0, G_OPTION_ARG_STRING, &max_s, "largest size (default 128MB, at most 16GiB)", "SIZE"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &iters, "timed calls per size (default 5)", "K"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &json, "write the rows as JSON to FILE", "FILE"},
      {"json", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_FILENAME, &json, "the same as --out",
       "FILE"},
      {"message-level", 0, 0, G_OPTION_ARG_NONE, &message_level,
       "simulate every step as its own messages (default: a ring phase as one message each way, "
       "a tree pipeline of 16 chunks or more as three)",
       NULL},
      {"check", 0, 0, G_OPTION_ARG_NONE, &check,
       "real data and real sums, every output element checked against its known value", NULL},
      {"mode", 0, 0, G_OPTION_ARG_STRING, &mode,
       "sim (default: SMPI on --platform) or real (this machine's MPI, real data and sums)",
       "sim|real"},
      {"nccl-proto", 0, 0, G_OPTION_ARG_STRING, &proto_s, CFG_NCCL_PROTO_HELP, "PROTO"},
      {"simgrid-cfg", 0, 0, G_OPTION_ARG_STRING_ARRAY, &simgrid_cfg,
       "a SimGrid setting for the simulation, over the platform file's (repeatable; SimGrid's "
       "--cfg=KEY:VALUE)", "KEY:VALUE"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionContext *ctx = g_option_context_new("- nccl-tests-style collective benchmark (simulated)");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_description(ctx, help);
  GError *err = NULL;
  plat *pl = NULL;
  const char **hosts = NULL;
  GPtrArray *extra = g_ptr_array_new_with_free_func(g_free);
  GString *out = g_string_new(NULL);
  char *tmpdir = NULL, *child_json = NULL;
  double min_b = 8, max_b = 128e6;

  gboolean want_help = FALSE;
  if (!cli_parse(ctx, "coll", &argc, &argv, &want_help, &err)) {
    status = fail(err->message);
    goto out;
  }
  if (want_help) {
    status = 0;
    goto out;
  }
  if (argc > 1) {
    msg = g_strdup_printf("coll: unexpected argument '%s'", argv[1]);
    goto bad;
  }
  const gboolean real = mode && strcmp(mode, "real") == 0;
  if (mode && !real && strcmp(mode, "sim") != 0) {
    msg = g_strdup_printf("--mode: expected sim or real, got '%s'", mode);
    goto bad;
  }
  if (!platform && !real) { msg = g_strdup("--platform: required (a name under platforms/ or an XML file)"); goto bad; }
  if (!op_name || coll_op_parse(op_name) < 0) {
    msg = g_strdup_printf("--op: expected allreduce, allgather, reducescatter, broadcast, alltoall or sendrecv, got '%s'",
                          op_name ? op_name : "");
    goto bad;
  }
  coll_op op = (coll_op)coll_op_parse(op_name);
  if ((min_s && !dl_parse_bytes(min_s, &min_b)) || min_b < 1) {
    msg = g_strdup_printf("--min-bytes: expected a size such as 8, 1KB or 4MiB, got '%s'", min_s);
    goto bad;
  }
  if ((max_s && !dl_parse_bytes(max_s, &max_b)) || max_b < min_b || max_b > COLL_MAX_BYTES) {
    msg = g_strdup_printf("--max-bytes: expected a size between --min-bytes and 16GiB, got '%s'",
                          max_s ? max_s : "");
    goto bad;
  }
  if (iters < 1 || iters > CFG_MAX_STEPS) {
    msg = g_strdup_printf("--iters: expected 1..%d, got %d", CFG_MAX_STEPS, iters);
    goto bad;
  }
  int proto = NCCL_PROTO_AUTO;
  if (proto_s && !cfg_nccl_proto_option(proto_s, &proto, &err)) {
    status = fail(err->message);
    goto out;
  }
  if (real && proto_s) { msg = g_strdup("--nccl-proto: only the simulation (--mode sim) models NCCL's protocols"); goto bad; }
  if (!cfg_simgrid_items_ok(simgrid_cfg, &msg)) goto bad;
  if (real && simgrid_cfg) { msg = g_strdup("--simgrid-cfg: only the simulation (--mode sim) runs SimGrid"); goto bad; }
  if (real && gpus < 1) {
    msg = g_strdup_printf("--gpus: expected a positive number of ranks, got %d", gpus);
    goto bad;
  }
  if (!real) {
    pl = plat_load_cfg(platform, (const char *const *)simgrid_cfg, &err);
    if (!pl) {
      status = fail(err->message);
      goto out;
    }
    int n_hosts = plat_n_hosts(pl);
    if (gpus < 1 || gpus > n_hosts) {
      msg = g_strdup_printf("--gpus: expected 1..%d (the GPUs of platform %s), got %d", n_hosts,
                            platform, gpus);
      goto bad;
    }
    if (!plat_barrier_routes(pl, gpus, &err)) {
      status = fail(err->message);
      goto out;
    }
  }
  int rpn = real ? gpus : plat_gpus_per_node(pl); /* real: the ranks share this machine */
  if (rpn > gpus) rpn = gpus;
  int nodes = (gpus + rpn - 1) / rpn;
  const char *name = algo ? algo : coll_default(op, max_b, gpus, nodes);
  if (!coll_info_find(op, name)) {
    int n;
    const coll_algo_info *const *l = coll_list(op, &n);
    GString *names = g_string_new(NULL);
    for (int i = 0; i < n; i++) g_string_append_printf(names, "%s%s", i ? ", " : "", l[i]->name);
    msg = g_strdup_printf("--coll: expected one of %s (smpi as smpi:<name>) for %s, got '%s'",
                          names->str, op_name, name);
    g_string_free(names, TRUE);
    goto bad;
  }
  if (g_str_has_prefix(name, "smpi") && max_b > coll_smpi_max_bytes(op, gpus)) {
    msg = g_strdup_printf("--max-bytes: SMPI's own %s (--coll %s) counts in int: at most %.0f B on "
                          "%d ranks, got '%s'", op_name, name, coll_smpi_max_bytes(op, gpus), gpus,
                          max_s ? max_s : "");
    goto bad;
  }
  /* real data (--check, --mode real): every rank holds its send and receive buffers and a
   * scratch buffer of the size, all on this machine */
  const double held = 3.0 * max_b * gpus, phys = dl_phys_mem_bytes();
  if ((check || real) && phys > 0 && held > phys) {
    msg = g_strdup_printf("--max-bytes: %s holds real data, about %.1f GB on %d ranks, more than "
                          "this machine's %.1f GB", real ? "--mode real" : "--check", held / 1e9,
                          gpus, phys / 1e9);
    goto bad;
  }
  char *smpi_cfg = algo ? coll_smpi_cfg(op, name) : NULL;
  if (smpi_cfg) g_ptr_array_add(extra, smpi_cfg); /* extra owns it */
  if (pl) {
    launch_network_cfg(pl, simgrid_cfg, extra);
    nccl_env env;
    run_ctx_nccl_env(pl, gpu_find(plat_host_at(pl, 0)->gpu_model), proto, &env);
    nccl_s = nccl_env_to_string(&env);
  }
  g_ptr_array_add(extra, NULL);

  hosts = g_new0(const char *, gpus + 1);
  for (int i = 0; i < gpus && !real; i++) hosts[i] = plat_host_at(pl, i)->id;
  char min_a[32], max_a[32], iters_a[16], rpn_a[16];
  g_snprintf(min_a, sizeof min_a, "%.0f", min_b);
  g_snprintf(max_a, sizeof max_a, "%.0f", max_b);
  g_snprintf(iters_a, sizeof iters_a, "%d", iters);
  g_snprintf(rpn_a, sizeof rpn_a, "%d", rpn);
  /* --coll pins one algorithm; else the benchmark chooses for each size, as NCCL does per call */
  const char *pargv[20] = {"coll", "--op", op_name, "--min-bytes", min_a, "--max-bytes", max_a,
                           "--iters", iters_a, "--ranks-per-node", rpn_a};
  int k = 11;
  if (algo) pargv[k++] = "--coll", pargv[k++] = name;
  /* the benchmark writes its rows in a directory of dlsim's; the driver writes --out, so that
   * a file it cannot write is said as run --out says it */
  if (json) {
    if (!dl_check_writable("--out", json, &err) || !(tmpdir = dl_tmpdir_new("coll", &err))) {
      status = fail(err->message);
      goto out;
    }
    child_json = g_build_filename(tmpdir, "coll.json", NULL);
    pargv[k++] = "--json", pargv[k++] = child_json;
  }
  if (check) pargv[k++] = "--check";
  if (message_level) pargv[k++] = "--message-level";
  if (nccl_s) pargv[k++] = "--nccl", pargv[k++] = nccl_s;
  pargv[k] = NULL;
  if (real ? !launch_mpirun(gpus, pargv, out, &err)
           : !launch_smpi(plat_file(pl), gpus, hosts, pargv, (const char *const *)extra->pdata, out,
                          NULL, &err)) {
    cli_error(err->message);
    status = 1;
    goto out;
  }
  if (json) {
    gsize len = 0;
    char *text = dl_read_file(child_json, &len, &err);
    if (!text || !dl_write_file_atomic(json, text, len, &err)) {
      g_free(text);
      cli_error(err->message);
      status = 1;
      goto out;
    }
    g_free(text);
  }
  fputs(out->str, stdout);
  status = 0;
  goto out;
bad:
  status = fail(msg);
out:
  dl_tmpdir_remove(tmpdir);
  g_free(child_json);
  g_free(msg);
  g_clear_error(&err);
  g_option_context_free(ctx);
  g_free(hosts);
  g_strfreev(simgrid_cfg);
  g_ptr_array_free(extra, TRUE);
  g_string_free(out, TRUE);
  if (pl) plat_free(pl);
  g_free(help);
  g_free(platform);
  g_free(op_name);
  g_free(algo);
  g_free(min_s);
  g_free(max_s);
  g_free(json);
  g_free(mode);
  g_free(proto_s);
  g_free(nccl_s);
  return status;
}
