/* bench.c — the nccl-tests-style collective benchmark both executors run (`dlsim coll`):
 * `dlsim-smpi coll ...` in simulation, `dlsim-real coll ...` on the machine's MPI.
 *
 * A loop over sizes min..max (×2): warm-up, a barrier, `iters` timed calls; the time of a size is
 * the largest per-rank mean (MPI_Wtime: simulated seconds under SMPI, real ones otherwise).
 * Consecutive calls may overlap (a broadcast root starts the next call while the chain drains),
 * as in nccl-tests; --iters 1 times exactly one call. Buffers come from the flavour
 * (coll_buf_alloc): payload-free under SMPI with a no-op reduction unless --check asks for real
 * data; always real data and MPI_SUM for real. --check verifies every output element against
 * its known value.
 */
#include <cjson/cJSON.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll_mpi.h"

static void noop_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)in, (void)inout, (void)len, (void)type;
}

typedef struct {
  char *op_name, *algo, *min_s, *max_s, *json, *nccl;
  int iters, warmup, rpn;
  gboolean check;
  gboolean message_level;
  double expect_us, tolerance;
} coll_opts;


/* The value rank r puts at element i of its send buffer for `op` (exact in float). */
static float send_value(coll_op op, int r, size_t i, size_t block) {
  float v = (float)(i % 65536);
  switch (op) {
  case COLL_ALLTOALL:
    return (float)(r * 1024 + (int)(i / block)) + 0.25f * (float)(i % 4);
  case COLL_BROADCAST:
    return r == 0 ? v + 0.5f : -7.0f;
  default:
    return (float)r + v;
  }
}

/* The value rank r must find at element i of its receive buffer. */
static float expected_value(coll_op op, int r, int P, size_t i, size_t block) {
  float v;
  switch (op) {
  case COLL_ALLREDUCE:
    return (float)P * (float)(i % 65536) + (float)(P * (P - 1) / 2);
  case COLL_REDUCESCATTER:
    v = (float)((r * block + i) % 65536);
    return (float)P * v + (float)(P * (P - 1) / 2);
  case COLL_ALLGATHER: /* block q holds rank q's element j */
    return (float)(i / block) + (float)((i % block) % 65536);
  case COLL_BROADCAST:
    return (float)(i % 65536) + 0.5f;
  case COLL_ALLTOALL: /* block q came from rank q, its block r */
    return (float)((int)(i / block) * 1024 + r) + 0.25f * (float)((r * block + i % block) % 4);
  case COLL_SENDRECV:
    return (float)((r - 1 + P) % P) + (float)(i % 65536);
  default:
    return NAN;
  }
}

/* Fills send, poisons recv, runs once, checks recv. Returns the number of wrong elements. */
static long check_once(const coll_algo *a, coll_op op, float *send, float *recv, size_t bytes,
                       MPI_Comm comm, const coll_topo *topo, int r, int P, int *mpi_rc) {
  size_t n = bytes / COLL_ELEM_BYTES, block = n / (size_t)P;
  size_t send_n = op == COLL_ALLGATHER ? block : n, recv_n = op == COLL_REDUCESCATTER ? block : n;
  for (size_t i = 0; i < send_n; i++)
    send[i] = op == COLL_ALLGATHER ? (float)r + (float)(i % 65536) : send_value(op, r, i, block);
  for (size_t i = 0; i < recv_n; i++) recv[i] = -12345.0f;
  *mpi_rc = a->fn(send, recv, bytes, comm, topo, MPI_SUM);
  long wrong = 0;
  for (size_t i = 0; i < recv_n; i++) {
    float want = expected_value(op, r, P, i, block);
    if (recv[i] != want) {
      if (wrong == 0)
        fprintf(stderr, "dlsim coll: check %s/%s %zu B: rank %d element %zu: expected %g, got %g\n",
                coll_op_name(op), a->name, bytes, r, i, (double)want, (double)recv[i]);
      wrong++;
    }
  }
  return wrong;
}

static cJSON *row_json(size_t bytes, const char *algo, double t_s, double algbw, double busbw) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "size_bytes", (double)bytes);
  cJSON_AddStringToObject(o, "coll", algo);
  cJSON_AddNumberToObject(o, "count", (double)(bytes / COLL_ELEM_BYTES));
  cJSON_AddNumberToObject(o, "time_us", t_s * 1e6);
  cJSON_AddNumberToObject(o, "algbw_GBps", algbw);
  cJSON_AddNumberToObject(o, "busbw_GBps", busbw);
  return o;
}

/* A plain non-negative number of bytes (the host side converts unit suffixes). */
static gboolean parse_count(const char *text, double *out) {
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= 0)) return FALSE;
  *out = v;
  return TRUE;
}

int coll_bench_main(int argc, char **argv) {
  int r, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  coll_opts o = {.iters = 5, .warmup = 1, .rpn = 0, .expect_us = -1, .tolerance = 0.01};
  GOptionEntry entries[] = {
      {"op", 0, 0, G_OPTION_ARG_STRING, &o.op_name, "operation (allreduce...)", "OP"},
      {"coll", 0, 0, G_OPTION_ARG_STRING, &o.algo, "algorithm (default: coll_default)", "ALGO"},
      {"min-bytes", 0, 0, G_OPTION_ARG_STRING, &o.min_s, "smallest size, bytes (default 8)", "BYTES"},
      {"max-bytes", 0, 0, G_OPTION_ARG_STRING, &o.max_s, "largest size, bytes (default 128e6)", "BYTES"},
      {"iters", 0, 0, G_OPTION_ARG_INT, &o.iters, "timed calls per size (default 5)", "K"},
      {"warmup", 0, 0, G_OPTION_ARG_INT, &o.warmup, "untimed calls per size (default 1)", "K"},
      {"ranks-per-node", 0, 0, G_OPTION_ARG_INT, &o.rpn, "consecutive ranks per node", "G"},
      {"json", 0, 0, G_OPTION_ARG_FILENAME, &o.json, "write the rows as JSON", "FILE"},
      {"check", 0, 0, G_OPTION_ARG_NONE, &o.check, "real float data and MPI_SUM; verify", NULL},
      {"nccl", 0, 0, G_OPTION_ARG_STRING, &o.nccl, "NCCL's view of the machine (the driver's)",
       "ENV"},
      {"message-level", 0, 0, G_OPTION_ARG_NONE, &o.message_level,
       "every step and chunk as its own messages (SMPI flavour)", NULL},
      {"expect-us", 0, 0, G_OPTION_ARG_DOUBLE, &o.expect_us, "fail unless time is this", "US"},
      {"tolerance", 0, 0, G_OPTION_ARG_DOUBLE, &o.tolerance, "relative tolerance (0.01)", "F"},
      {NULL, 0, 0, 0, NULL, NULL, NULL}};
  GOptionContext *ctx = g_option_context_new("- collective benchmark (dlsim coll)");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *err = NULL;
  int status = 0;
  double min_b = 8, max_b = 128e6;
  coll_op op = COLL_ALLREDUCE;
  const coll_algo *a = NULL;
  char **args = g_new0(char *, argc + 1);
  for (int i = 0; i < argc; i++) args[i] = argv[i];
  int nargs = argc;
  char **free_args = args; /* GOption may reorder; keep the array to free */
  if (!g_option_context_parse(ctx, &nargs, &args, &err)) {
    if (r == 0) fprintf(stderr, "dlsim coll: %s\n", err->message);
    status = 2;
    goto out;
  }
  if (o.op_name && coll_op_parse(o.op_name) < 0) {
    if (r == 0) fprintf(stderr, "dlsim coll: --op: unknown operation '%s'\n", o.op_name);
    status = 2;
    goto out;
  }
  if (o.op_name) op = (coll_op)coll_op_parse(o.op_name);
  if ((o.min_s && !parse_count(o.min_s, &min_b)) || (o.max_s && !parse_count(o.max_s, &max_b)) ||
      min_b < 1 || max_b < min_b || o.iters < 1 || o.warmup < 0) {
    if (r == 0) fprintf(stderr, "dlsim coll: bad sizes or iteration counts\n");
    status = 2;
    goto out;
  }
  coll_topo topo;
  coll_topo_init(&topo, r, P, o.rpn > 0 ? o.rpn : P);
  nccl_env env;
  if (o.nccl && !nccl_env_parse(o.nccl, &env)) {
    if (r == 0) fprintf(stderr, "dlsim coll: --nccl: malformed '%s'\n", o.nccl);
    status = 2;
    goto out;
  }
  if (o.nccl) topo.nccl = &env;
  /* pinned by --coll, or chosen for each size as NCCL chooses per call (coll_default_env) */
  const char *algo = o.algo ? o.algo : coll_default_env(op, max_b, P, topo.n_nodes, topo.nccl);
  a = coll_find(op, algo);
  if (!a) {
    if (r == 0) fprintf(stderr, "dlsim coll: --coll: no algorithm '%s' for %s\n", algo, coll_op_name(op));
    status = 2;
    goto out;
  }
  const gboolean real_data = coll_buf_real(o.check);
  coll_buf_message_level(o.message_level);
  MPI_Op mop = MPI_SUM;
  if (!real_data) MPI_Op_create(noop_op, 1, &mop);

  size_t cap = coll_round_bytes(op, (size_t)max_b, P);
  if (cap < COLL_ELEM_BYTES) cap = COLL_ELEM_BYTES * (size_t)P;
  void *send = coll_buf_alloc(cap), *recv = coll_buf_alloc(cap);
  double bw_factor = coll_busbw_factor(op, P);
  cJSON *rows = cJSON_CreateArray();
  if (r == 0) {
    printf("# dlsim coll: %s, algorithm %s, %d ranks, %d per node, %d timed + %d warm-up calls\n",
           coll_op_name(op), o.algo ? o.algo : "per size", P, topo.ranks_per_node, o.iters,
           o.warmup);
    nccl_call nc;
    nccl_plan(&nc, topo.nccl, op, a->name, max_b, P, topo.n_nodes);
    if (nc.proto >= 0)
      printf("# NCCL protocol model: %s (platforms/README.md)\n", nccl_proto_name(topo.nccl->proto));
    /* nccl-tests' columns (out-of-place only), which users' scripts parse */
    printf("#%79s\n", "out-of-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "");
  }
  const gboolean reduces = op == COLL_ALLREDUCE || op == COLL_REDUCESCATTER;
  const int root = op == COLL_BROADCAST ? 0 : -1;
  double last_time_s = 0, busbw_sum = 0;
  int n_rows = 0;
  const coll_algo *shown = NULL; /* the per-size algorithm last said */
  long wrong_total = 0;
  for (double sz = min_b; sz <= max_b && status == 0; sz *= 2) {
    size_t bytes = coll_round_bytes(op, (size_t)sz, P);
    if (bytes == 0) continue;
    if (!o.algo) { /* each size its own algorithm, said where it changes */
      const coll_algo *b = coll_find(op, coll_default_env(op, (double)bytes, P, topo.n_nodes,
                                                          topo.nccl));
      if (b && b != shown) {
        if (r == 0) printf("# algorithm %s from %zu B\n", b->name, bytes);
        a = shown = b;
      }
    }
    int rc = MPI_SUCCESS;
    long all = -1; /* wrong elements over the ranks, -1 unchecked */
    if (o.check) {
      long wrong = check_once(a, op, send, recv, bytes, MPI_COMM_WORLD, &topo, r, P, &rc);
      all = 0;
      MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      if (all || rc != MPI_SUCCESS) status = 1;
      wrong_total += all;
      if (r == 0) printf("check %s %s P=%d %zu B: %s (%ld wrong)\n", coll_op_name(op), a->name, P,
                         bytes, all ? "FAIL" : "OK", all);
      if (status) break;
    }
    for (int i = 0; i < o.warmup && rc == MPI_SUCCESS; i++)
      rc = a->fn(send, recv, bytes, MPI_COMM_WORLD, &topo, mop);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o.iters && rc == MPI_SUCCESS; i++)
      rc = a->fn(send, recv, bytes, MPI_COMM_WORLD, &topo, mop);
    double mine = (MPI_Wtime() - t0) / o.iters, t = 0;
    MPI_Reduce(&mine, &t, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
      fprintf(stderr, "dlsim coll: rank %d: %s/%s failed with MPI error %d\n", r,
              coll_op_name(op), a->name, rc);
      status = 1;
      break;
    }
    if (r == 0) {
      double algbw = t > 0 ? (double)bytes / t / 1e9 : 0, busbw = algbw * bw_factor;
      char wrong[24];
      if (all < 0) g_strlcpy(wrong, "N/A", sizeof wrong);
      else g_snprintf(wrong, sizeof wrong, "%ld", all);
      printf(" %11zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s\n", bytes,
             bytes / COLL_ELEM_BYTES, "float", reduces ? "sum" : "none", root, t * 1e6, algbw,
             busbw, wrong);
      busbw_sum += busbw;
      n_rows++;
      cJSON_AddItemToArray(rows, row_json(bytes, a->name, t, algbw, busbw));
    }
    last_time_s = t;
  }
  if (r == 0 && n_rows) {
    if (o.check) printf("# Out of bounds values : %ld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n", busbw_sum / n_rows);
  }
  if (r == 0 && status == 0 && o.expect_us >= 0) {
    double got = last_time_s * 1e6, e = fabs(got - o.expect_us) / o.expect_us;
    int ok = e <= o.tolerance;
    printf("expect: %s %s P=%d: measured %.4f us, expected %.4f us, error %.5f: %s\n",
           coll_op_name(op), a->name, P, got, o.expect_us, e, ok ? "OK" : "FAIL");
    if (!ok) status = 1;
  }
  if (r == 0 && status == 0 && o.json) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "op", coll_op_name(op));
    cJSON_AddStringToObject(doc, "coll", o.algo ? o.algo : "per size");
    cJSON_AddNumberToObject(doc, "ranks", P);
    cJSON_AddNumberToObject(doc, "ranks_per_node", topo.ranks_per_node);
    cJSON_AddNumberToObject(doc, "iters", o.iters);
    cJSON_AddItemToObject(doc, "rows", rows);
    rows = NULL;
    char *text = cJSON_Print(doc);
    GString *s = g_string_new(text);
    g_string_append_c(s, '\n');
    if (!g_file_set_contents(o.json, s->str, (gssize)s->len, &err)) { /* atomic: temp + rename */
      fprintf(stderr, "dlsim coll: %s\n", err->message);
      status = 1;
    }
    g_string_free(s, TRUE);
    cJSON_free(text);
    cJSON_Delete(doc);
  }
  cJSON_Delete(rows);
  coll_buf_free(send);
  coll_buf_free(recv);
  if (!real_data) MPI_Op_free(&mop);
out:
  g_clear_error(&err);
  g_option_context_free(ctx);
  g_free(free_args);
  g_free(o.op_name);
  g_free(o.algo);
  g_free(o.min_s);
  g_free(o.max_s);
  g_free(o.json);
  g_free(o.nccl);
  return status;
}

