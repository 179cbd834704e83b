/* export.c — op lists to Chakra execution traces (see export.h). */
#include "exec/export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/child.h"
#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "model/chakra.h"

/* The communicators the collectives use, numbered from 1 in order of first use (pg_name "0" is
 * PyTorch's default group to ASTRA-sim). */
typedef struct {
  GHashTable *id;   /* members as text "r0,r1,..." -> index + 1 */
  GPtrArray *lists; /* index -> GArray of int, the members */
  GArray *nodes;    /* index -> nodes the group spans */
} comm_table;

/* The index of the communicator of `members`, added if new; -1 with `err` set on failure. */
static int comm_id(comm_table *t, const plat *pl, const int *members, int n, GError **err) {
  GString *s = g_string_new(NULL);
  for (int i = 0; i < n; i++) g_string_append_printf(s, i ? ",%d" : "%d", members[i]);
  int id = GPOINTER_TO_INT(g_hash_table_lookup(t->id, s->str)) - 1;
  coll_group g;
  if (id < 0 && analytic_group_init(&g, pl, members, n, err)) {
    id = (int)t->lists->len;
    g_hash_table_insert(t->id, g_strdup(s->str), GINT_TO_POINTER(id + 1));
    GArray *m = g_array_sized_new(FALSE, FALSE, sizeof(int), (guint)n);
    g_array_append_vals(m, members, (guint)n);
    g_ptr_array_add(t->lists, m);
    g_array_append_val(t->nodes, g.nodes);
  }
  g_string_free(s, TRUE);
  return id;
}

static void put_meta(et_file *f, const run_ctx *x, const plan_rank *p, int rank) {
  const cfg_run *c = &x->cfg;
  cJSON *cj = cfg_to_json(c);
  char *text = cJSON_PrintUnformatted(cj);
  et_attr_string(f, NULL, "dlsim_config", text);
  cJSON_free(text);
  cJSON_Delete(cj);
  et_attr_int(f, NULL, "dlsim_dp", c->dp);
  if (c->cp > 1) et_attr_int(f, NULL, "dlsim_cp", c->cp);
  et_attr_int(f, NULL, "dlsim_tp", c->tp);
  et_attr_int(f, NULL, "dlsim_pp", c->pp);
  et_attr_int(f, NULL, "dlsim_ep", c->ep);
  et_attr_int(f, NULL, "dlsim_microbatches", c->microbatches);
  et_attr_int(f, NULL, "dlsim_batch", c->batch);
  et_attr_string(f, NULL, "dlsim_precision", gpu_precision_name(c->precision));
  et_attr_int(f, NULL, "dlsim_rank", rank);
  /* the model's figures, for the result of a run of the trace */
  et_attr_string(f, NULL, "dlsim_model", x->model->name);
  et_attr_int(f, NULL, "dlsim_model_params", x->model->params);
  et_attr_double(f, NULL, "dlsim_fwd_flops_per_sample", x->model->fwd_flops);
  et_attr_double(f, NULL, "dlsim_bwd_flops_per_sample", x->model->bwd_flops);
  et_attr_string(f, NULL, "dlsim_dataset", x->model->dataset ? x->model->dataset : "");
  et_attr_int(f, NULL, "dlsim_dataset_samples", x->model->dataset_samples);
  et_attr_int(f, NULL, "dlsim_stage", p->stage);
  et_attr_int(f, NULL, "dlsim_max_stash", p->max_stash);
  for (int i = 0; i < p->n_ops && p->step_event >= 0; i++) /* what the next gathers follow */
    if (p->ops[i].record_event == p->step_event) et_attr_int(f, NULL, "dlsim_step_node", i);
  et_attr_double(f, NULL, "dlsim_memory_params_bytes", p->mem.params);
  et_attr_double(f, NULL, "dlsim_memory_grads_bytes", p->mem.grads);
  et_attr_double(f, NULL, "dlsim_memory_optimizer_bytes", p->mem.optimizer);
  et_attr_double(f, NULL, "dlsim_memory_activations_bytes", p->mem.activations);
  et_attr_double(f, NULL, "dlsim_memory_gathered_bytes", p->mem.gathered);
}

/* The node of kernel op `op`. */
static void put_kernel(et_file *f, et_node *n, const run_ctx *x, const plan_op *op, int rank) {
  kdb_origin o;
  const double d = ktime_kernel_s(&x->kt, op, &o) * run_ctx_slow(x, rank);
  n->duration_us = (uint64_t)llround(d * 1e6);
  et_attr_bool(f, n, "is_cpu_op", FALSE);
  et_attr_int(f, n, "num_ops", (int64_t)llround(MIN(op->flops, 9e18)));
  et_attr_uint64(f, n, "tensor_size", (uint64_t)llround(MIN(op->mem_bytes, 9e18)));
  et_attr_double(f, n, "dlsim_duration_s", d);
  et_attr_string(f, n, "dlsim_kernel", op->kname);
  char *key = NULL;
  if (!op->kdb_key) {
    kdb_kernel k = ktime_describe(x->model, op);
    key = kdb_key(&k, x->cfg.precision);
  }
  et_attr_string(f, n, "dlsim_kernel_key", op->kdb_key ? op->kdb_key : key);
  g_free(key);
  et_attr_int(f, n, "dlsim_samples", op->samples);
  if (op->layer >= 0 && op->layer < x->model->n_layers)
    et_attr_string(f, n, "dlsim_layer", x->model->layers[op->layer].name);
}

/* The node of collective op `op` of plan `p` on `rank`. */
static gboolean put_coll(et_file *f, et_node *n, const run_ctx *x, const plan_rank *p,
                         const plan_op *op, int rank, comm_table *ct, int *members,
                         GError **err) {
  const int m = plan_op_members(p, &x->cfg, op, rank, members);
  const int id = comm_id(ct, x->platform, members, m, err);
  if (id < 0) return FALSE;
  et_attr_int(f, n, "comm_type", plan_trace_comm_type(op->coll));
  et_attr_int(f, n, "comm_size", (int64_t)llround(MIN(op->bytes, 9e18)));
  char pg[16];
  g_snprintf(pg, sizeof pg, "%d", id + 1);
  et_attr_string(f, n, "pg_name", pg);
  et_attr_string(f, n, "dlsim_algorithm",
                 op->peer_send_bytes ? "pairwise"
                                     : coll_resolve(op->coll, x->cfg.coll, op->bytes, m,
                                                    g_array_index(ct->nodes, int, id), &x->nccl));
  et_attr_string(f, n, "dlsim_group", plan_group_name(op->group));
  if (op->peer_send_bytes) {
    et_attr_doubles(f, n, "dlsim_send_bytes", op->peer_send_bytes, m);
    et_attr_doubles(f, n, "dlsim_recv_bytes", op->peer_recv_bytes, m);
  }
  return TRUE;
}

/* The trace of rank `rank`: a new file, or NULL. */
static et_file *rank_trace(const run_ctx *x, const char *path, int rank, comm_table *ct,
                           int *members, GError **err) {
  plan_rank *p = run_ctx_plan(x, &x->cfg, x->layer_t, rank, err);
  if (!p) return NULL;
  et_file *f = et_new(path);
  put_meta(f, x, p, rank);
  int *recorder = g_new(int, p->n_events + 1); /* event -> op recording it */
  for (int e = 0; e <= p->n_events; e++) recorder[e] = -1;
  for (int i = 0; i < p->n_ops; i++)
    if (p->ops[i].record_event >= 0) recorder[p->ops[i].record_event] = i;
  int last[PLAN_N_STREAMS] = {-1, -1};
  gboolean ok = TRUE;
  for (int i = 0; ok && i < p->n_ops; i++) {
    const plan_op *op = &p->ops[i];
    static const et_type types[] = {ET_COMP, ET_COLL, ET_SEND, ET_RECV};
    char *name;
    if (op->kind == PLAN_KERNEL)
      name = g_strdup_printf("%s %s mb%d", op->kname,
                             op->layer >= 0 && op->layer < x->model->n_layers
                                 ? x->model->layers[op->layer].name : "-",
                             op->microbatch);
    else if (op->kind == PLAN_COLL)
      name = g_strdup_printf("%s %s %s mb%d", coll_op_name(op->coll), plan_group_name(op->group),
                             plan_purpose_name(op->purpose), op->microbatch);
    else
      name = g_strdup_printf("%s %d tag%d", op->kind == PLAN_SEND ? "send to" : "recv from",
                             plan_op_peer(p, op), op->tag);
    et_node *n = et_add_node(f, (uint64_t)i, name, types[op->kind]);
    g_free(name);
    /* order in data_deps, Chakra's convention (ctrl_deps would name a parent) */
    if (last[op->stream] >= 0) et_add_dep(n, TRUE, (uint64_t)last[op->stream]);
    last[op->stream] = i;
    if (op->wait_event >= 0 && op->wait_event < p->n_events && recorder[op->wait_event] >= 0)
      et_add_dep(n, TRUE, (uint64_t)recorder[op->wait_event]);
    if (op->kind == PLAN_KERNEL) {
      put_kernel(f, n, x, op, rank);
    } else if (op->kind == PLAN_COLL) {
      ok = put_coll(f, n, x, p, op, rank, ct, members, err);
    } else {
      const int peer = plan_op_peer(p, op);
      et_attr_int32(f, n, "comm_src", op->kind == PLAN_SEND ? rank : peer);
      et_attr_int32(f, n, "comm_dst", op->kind == PLAN_SEND ? peer : rank);
      et_attr_int32(f, n, "comm_tag", op->tag);
      et_attr_int(f, n, "comm_size", (int64_t)llround(MIN(op->bytes, 9e18)));
    }
    if (op->kind != PLAN_KERNEL) et_attr_double(f, n, "dlsim_bytes", op->bytes);
    et_attr_string(f, n, "dlsim_stream", op->stream == PLAN_STREAM_COMM ? "comm" : "compute");
    et_attr_string(f, n, "dlsim_phase", plan_phase_name(op->phase));
    et_attr_int(f, n, "dlsim_microbatch", op->microbatch);
    et_attr_string(f, n, "dlsim_purpose", plan_purpose_name(op->purpose));
  }
  g_free(recorder);
  plan_rank_free(p);
  if (!ok) {
    et_free(f);
    return NULL;
  }
  return f;
}

static char *comm_groups_json(const comm_table *ct) {
  cJSON *root = cJSON_CreateObject();
  for (guint i = 0; i < ct->lists->len; i++) {
    char id[16];
    g_snprintf(id, sizeof id, "%u", i + 1);
    const GArray *m = g_ptr_array_index(ct->lists, i);
    cJSON_AddItemToObject(root, id, cJSON_CreateIntArray((const int *)(void *)m->data, (int)m->len));
  }
  char *t = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(t, "\n", NULL);
  cJSON_free(t);
  return out;
}

/* Moves every file of directory `from` into `to`, then removes `from`. */
static gboolean move_into(const char *from, const char *to, GError **err) {
  GDir *d = g_dir_open(from, 0, NULL);
  gboolean ok = d != NULL;
  for (const char *name; ok && (name = g_dir_read_name(d));) {
    char *a = g_build_filename(from, name, NULL), *b = g_build_filename(to, name, NULL);
    if (g_rename(a, b) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot move it into place: %s", b,
                  g_strerror(errno));
      ok = FALSE;
    }
    g_free(a);
    g_free(b);
  }
  if (d) g_dir_close(d);
  return ok;
}

gboolean exec_export_dir_free(const char *dir, const char *prefix, GError **err) {
  GDir *d = g_dir_open(dir, 0, NULL);
  if (!d) return TRUE; /* not there yet: made by the export */
  gboolean ours = FALSE, groups = FALSE, ok = TRUE;
  for (const char *name; ok && (name = g_dir_read_name(d));) {
    if (strcmp(name, "comm_groups.json") == 0) {
      groups = TRUE;
      continue;
    }
    int rank;
    char *of = plan_trace_name_prefix(name, &rank);
    if (!of) continue; /* not a rank trace: a run reading the directory skips it too */
    const gboolean mine = strcmp(of, prefix) == 0;
    g_free(of);
    if (mine) ours = TRUE;
    else {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out %s: holds the traces of another run (%s); "
                  "export into a directory of its own", dir, name);
      ok = FALSE;
    }
  }
  g_dir_close(d);
  if (ok && groups && !ours) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--out %s: holds a comm_groups.json of no %s.*.et "
                "traces; export into a directory of its own", dir, prefix);
    ok = FALSE;
  }
  return ok;
}

gboolean exec_export_chakra(const run_ctx *x, const char *dir, const char *prefix,
                            gboolean progress, GError **err) {
  const int P = x->cfg.gpus;
  /* a directory this export makes goes again if the export fails */
  const gboolean made = !g_file_test(dir, G_FILE_TEST_IS_DIR);
  if (made && g_mkdir_with_parents(dir, 0777) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "--out %s: cannot make the directory: %s", dir,
                g_strerror(errno));
    return FALSE;
  }
  comm_table ct = {g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
                   g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref),
                   g_array_new(FALSE, FALSE, sizeof(int))};
  int *members = g_new(int, P);
  /* the files are made in a directory beside their place and moved in once all are written:
   * a failure leaves `dir` as it was */
  char *tmp = g_build_filename(dir, ".dlsim-export-XXXXXX", NULL);
  gboolean ok = g_mkdtemp(tmp) != NULL;
  if (!ok)
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write into it: %s", dir, g_strerror(errno));
  for (int r = 0; ok && r < P; r++) {
    char *name = plan_trace_file_name(prefix, r);
    char *path = g_build_filename(tmp, name, NULL);
    et_file *f = rank_trace(x, path, r, &ct, members, err);
    ok = f && et_write(f, err);
    et_free(f);
    g_free(path);
    g_free(name);
    if (progress && P >= 10 && (r + 1) % (P / 10) == 0)
      fprintf(stderr, "dlsim: export: %d of %d ranks\n", r + 1, P);
  }
  if (ok) {
    char *json = comm_groups_json(&ct);
    char *path = g_build_filename(tmp, "comm_groups.json", NULL);
    ok = dl_write_file_atomic(path, json, strlen(json), err);
    g_free(path);
    g_free(json);
  }
  ok = ok && move_into(tmp, dir, err);
  /* an earlier export of more ranks under the same prefix would read as part of this one */
  for (int r = P; ok; r++) {
    char *name = plan_trace_file_name(prefix, r);
    char *path = g_build_filename(dir, name, NULL);
    const gboolean there = g_file_test(path, G_FILE_TEST_EXISTS);
    if (there) g_unlink(path);
    g_free(path);
    g_free(name);
    if (!there) break;
  }
  if (g_file_test(tmp, G_FILE_TEST_IS_DIR)) dl_tmpdir_remove(g_strdup(tmp));
  if (!ok && made) g_rmdir(dir); /* empty again: the files went with tmp */
  g_free(tmp);
  g_free(members);
  g_hash_table_destroy(ct.id);
  g_ptr_array_free(ct.lists, TRUE);
  g_array_free(ct.nodes, TRUE);
  return ok;
}
