/* export.c — op lists to Chakra execution traces (see export.h). */
#include "exec/export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl_common.h"
#include "exec/analytic/analytic.h"
#include "model/chakra.h"

/* The communicators the collectives use, numbered from 1 in order of first use (pg_name "0" is
 * PyTorch's default group to ASTRA-sim): "r0,r1,..." -> id - 1. */
typedef struct {
  GHashTable *id;   /* member list text -> id + 1 */
  GPtrArray *lists; /* id -> member list text (borrowed from id's keys) */
  GArray *nodes;    /* id -> nodes the group spans */
} comm_table;

static int comm_id(comm_table *t, const plat *pl, const int *members, int n, GError **err) {
  GString *s = g_string_new(NULL);
  for (int i = 0; i < n; i++) g_string_append_printf(s, i ? ",%d" : "%d", members[i]);
  int id = GPOINTER_TO_INT(g_hash_table_lookup(t->id, s->str)) - 1;
  if (id >= 0) {
    g_string_free(s, TRUE);
    return id;
  }
  coll_group g;
  if (!analytic_group_init(&g, pl, members, n, err)) {
    g_string_free(s, TRUE);
    return -1;
  }
  id = (int)t->lists->len;
  char *key = g_string_free(s, FALSE);
  g_hash_table_insert(t->id, key, GINT_TO_POINTER(id + 1));
  g_ptr_array_add(t->lists, key);
  g_array_append_val(t->nodes, g.nodes);
  return id;
}

static et_coll_type et_type_of(coll_op op) {
  switch (op) {
  case COLL_ALLREDUCE: return ET_ALL_REDUCE;
  case COLL_ALLGATHER: return ET_ALL_GATHER;
  case COLL_REDUCESCATTER: return ET_REDUCE_SCATTER;
  case COLL_BROADCAST: return ET_BROADCAST;
  case COLL_ALLTOALL: return ET_ALL_TO_ALL;
  case COLL_SENDRECV:
  case COLL_OP_COUNT: break;
  }
  return ET_ALL_REDUCE;
}

static void put_meta(et_file *f, const run_ctx *x, const plan_rank *p, int rank) {
  const cfg_run *c = &x->cfg;
  cJSON *cj = cfg_to_json(c);
  char *text = cJSON_PrintUnformatted(cj);
  et_attr_string(f, NULL, "dlsim_config", text);
  cJSON_free(text);
  cJSON_Delete(cj);
  et_attr_int(f, NULL, "dlsim_dp", c->dp);
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
  et_attr_double(f, NULL, "dlsim_memory_params_bytes", p->mem.params);
  et_attr_double(f, NULL, "dlsim_memory_grads_bytes", p->mem.grads);
  et_attr_double(f, NULL, "dlsim_memory_optimizer_bytes", p->mem.optimizer);
  et_attr_double(f, NULL, "dlsim_memory_activations_bytes", p->mem.activations);
}

/* The node of kernel op `op`. */
static void put_kernel(et_file *f, et_node *n, const run_ctx *x, const plan_op *op) {
  kdb_origin o;
  const double d = ktime_kernel_s(&x->kt, op, &o);
  n->duration_us = (uint64_t)llround(d * 1e6);
  et_attr_bool(f, n, "is_cpu_op", FALSE);
  et_attr_int(f, n, "num_ops", (int64_t)llround(MIN(op->flops, 9e18)));
  et_attr_int(f, n, "tensor_size", (int64_t)llround(MIN(op->mem_bytes, 9e18)));
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
  et_attr_int(f, n, "comm_type", et_type_of(op->coll));
  et_attr_int(f, n, "comm_size", (int64_t)llround(MIN(op->bytes, 9e18)));
  char pg[16];
  g_snprintf(pg, sizeof pg, "%d", id + 1);
  et_attr_string(f, n, "pg_name", pg);
  et_attr_string(f, n, "dlsim_algorithm",
                 op->peer_send_bytes ? "pairwise"
                                     : coll_resolve(op->coll, x->cfg.coll, op->bytes, m,
                                                    g_array_index(ct->nodes, int, id)));
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
                             op->peer, op->tag);
    et_node *n = et_add_node(f, (uint64_t)i, name, types[op->kind]);
    g_free(name);
    if (last[op->stream] >= 0) et_add_dep(n, FALSE, (uint64_t)last[op->stream]);
    last[op->stream] = i;
    if (op->wait_event >= 0 && op->wait_event < p->n_events && recorder[op->wait_event] >= 0)
      et_add_dep(n, TRUE, (uint64_t)recorder[op->wait_event]);
    if (op->kind == PLAN_KERNEL) {
      put_kernel(f, n, x, op);
    } else if (op->kind == PLAN_COLL) {
      ok = put_coll(f, n, x, p, op, rank, ct, members, err);
    } else {
      et_attr_int(f, n, "comm_src", op->kind == PLAN_SEND ? rank : op->peer);
      et_attr_int(f, n, "comm_dst", op->kind == PLAN_SEND ? op->peer : rank);
      et_attr_int(f, n, "comm_tag", op->tag);
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
    cJSON *a = cJSON_AddArrayToObject(root, id);
    char **v = g_strsplit(g_ptr_array_index(ct->lists, i), ",", -1);
    for (char **s = v; *s; s++) cJSON_AddItemToArray(a, cJSON_CreateNumber(atoi(*s)));
    g_strfreev(v);
  }
  char *t = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(t, "\n", NULL);
  cJSON_free(t);
  return out;
}

gboolean exec_export_chakra(const run_ctx *x, const char *dir, const char *prefix,
                            gboolean progress, GError **err) {
  const int P = x->cfg.gpus;
  if (!*prefix || strchr(prefix, '/')) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--prefix '%s': expected a file name prefix",
                prefix);
    return FALSE;
  }
  if (g_mkdir_with_parents(dir, 0777) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "--out %s: cannot create the directory: %s", dir,
                g_strerror(errno));
    return FALSE;
  }
  comm_table ct = {g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
                   g_ptr_array_new(), g_array_new(FALSE, FALSE, sizeof(int))};
  int *members = g_new(int, P);
  et_file **files = g_new0(et_file *, P);
  gboolean ok = TRUE;
  /* every trace is made before any is written: a failure leaves the directory as it was */
  for (int r = 0; ok && r < P; r++) {
    char *name = plan_trace_file_name(prefix, r);
    char *path = g_build_filename(dir, name, NULL);
    ok = (files[r] = rank_trace(x, path, r, &ct, members, err)) != NULL;
    g_free(path);
    g_free(name);
    if (progress && P >= 10 && (r + 1) % (P / 10) == 0)
      fprintf(stderr, "dlsim: export: %d of %d ranks\n", r + 1, P);
  }
  for (int r = 0; ok && r < P; r++) ok = et_write(files[r], err);
  if (ok) {
    char *json = comm_groups_json(&ct);
    char *path = g_build_filename(dir, "comm_groups.json", NULL);
    ok = dl_write_file_atomic(path, json, strlen(json), err);
    g_free(path);
    g_free(json);
  }
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
  for (int r = 0; r < P; r++) et_free(files[r]);
  g_free(files);
  g_free(members);
  g_hash_table_destroy(ct.id);
  g_ptr_array_free(ct.lists, TRUE);
  g_array_free(ct.nodes, TRUE);
  return ok;
}
