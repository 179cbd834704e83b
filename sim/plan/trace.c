/* trace.c — op lists from Chakra execution traces (see trace.h). */
#include "plan/trace.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl_common.h"

struct plan_trace {
  char *dir;
  int P;
  et_file **files; /* per rank */
  plan_comms comms;
  GHashTable *comm_id; /* pg_name -> communicator index + 1 */
  int world;           /* the communicator of every rank */
};

int plan_trace_ranks(const plan_trace *t) { return t->P; }
const et_file *plan_trace_file(const plan_trace *t, int rank) { return t->files[rank]; }
const plan_comms *plan_trace_comms(const plan_trace *t) { return &t->comms; }

char *plan_trace_file_name(const char *prefix, int rank) {
  return g_strdup_printf("%s.%d.et", prefix, rank);
}

void plan_trace_free(plan_trace *t) {
  if (!t) return;
  for (int r = 0; t->files && r < t->P; r++) et_free(t->files[r]);
  g_free(t->files);
  for (int i = 0; i < t->comms.n; i++) g_free(t->comms.members[i]);
  g_free(t->comms.members);
  g_free(t->comms.size);
  if (t->comm_id) g_hash_table_destroy(t->comm_id);
  g_free(t->dir);
  g_free(t);
}

char *plan_trace_name_prefix(const char *name, int *rank) {
  if (!g_str_has_suffix(name, ".et")) return NULL;
  char *stem = g_strndup(name, strlen(name) - 3);
  char *dot = strrchr(stem, '.');
  char *end = NULL;
  if (!dot || dot == stem || !g_ascii_isdigit(dot[1])) goto no;
  errno = 0;
  long r = strtol(dot + 1, &end, 10);
  if (*end || errno || r < 0 || r >= CFG_MAX_GPUS) goto no;
  *dot = 0;
  *rank = (int)r;
  return stem;
no:
  g_free(stem);
  return NULL;
}

/* The files of `dir`: one prefix, ranks 0..P-1. */
static gboolean find_files(plan_trace *t, char **prefix, GError **err) {
  GDir *d = g_dir_open(t->dir, 0, NULL);
  if (!d) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: not a readable directory",
                t->dir);
    return FALSE;
  }
  GHashTable *ranks = g_hash_table_new(g_direct_hash, g_direct_equal);
  gboolean ok = TRUE;
  int max = -1;
  for (const char *name; ok && (name = g_dir_read_name(d));) {
    int r;
    char *p = plan_trace_name_prefix(name, &r);
    if (!p) continue;
    if (!*prefix) *prefix = g_strdup(p);
    if (strcmp(p, *prefix) != 0) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: traces of two runs (%s.*.et "
                  "and %s.*.et); keep one per directory", t->dir, *prefix, p);
      ok = FALSE;
    }
    g_hash_table_add(ranks, GINT_TO_POINTER(r + 1));
    max = MAX(max, r);
    g_free(p);
  }
  g_dir_close(d);
  if (ok && max < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: no trace files "
                "(<prefix>.<rank>.et)", t->dir);
    ok = FALSE;
  }
  for (int r = 0; ok && r <= max; r++)
    if (!g_hash_table_contains(ranks, GINT_TO_POINTER(r + 1))) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: %s.%d.et is missing (the "
                  "files go up to rank %d)", t->dir, *prefix, r, max);
      ok = FALSE;
    }
  g_hash_table_destroy(ranks);
  t->P = max + 1;
  return ok;
}

static int cmp_int(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The ranks of a JSON list: whole numbers 0..P-1, each once; sorted into a new array (*m of
 * them; none for an empty list). NULL and a newly allocated reason otherwise. */
static int *rank_list(const cJSON *list, int P, int *m, char **why) {
  *m = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1;
  if (*m < 0) {
    *why = g_strdup("expected a list of ranks");
    return NULL;
  }
  int *r = g_new(int, *m ? *m : 1), i = 0;
  for (const cJSON *x = list->child; x; x = x->next, i++) {
    if (!cJSON_IsNumber(x) || x->valuedouble != (double)(int)x->valuedouble ||
        x->valuedouble < 0 || x->valuedouble >= P) {
      *why = g_strdup_printf("[%d]: expected a rank 0..%d", i, P - 1);
      g_free(r);
      return NULL;
    }
    r[i] = (int)x->valuedouble;
  }
  qsort(r, (size_t)*m, sizeof(int), cmp_int);
  for (i = 1; i < *m; i++)
    if (r[i] == r[i - 1]) {
      *why = g_strdup_printf("rank %d is listed twice", r[i]);
      g_free(r);
      return NULL;
    }
  return r;
}

/* Adds communicator `id` of the m sorted `members` (taken over; m = 0: every rank). */
static void add_comm(plan_trace *t, const char *id, int *members, int m) {
  const int k = t->comms.n++;
  t->comms.members = g_renew(int *, t->comms.members, t->comms.n);
  t->comms.size = g_renew(int, t->comms.size, t->comms.n);
  if (!m) {
    members = g_renew(int, members, t->P);
    for (int i = 0; i < t->P; i++) members[i] = i;
  }
  t->comms.members[k] = members;
  t->comms.size[k] = m ? m : t->P;
  if (id) g_hash_table_insert(t->comm_id, g_strdup(id), GINT_TO_POINTER(k + 1));
}

/* A METADATA node of Chakra's PyTorch converter ("## process_group:init ##") lists the process
 * groups in inputs.values: Python's str() of a one-element list holding a JSON array of
 * {"pg_name", "ranks", ...} ("ranks": [] for every rank). Groups that comm_groups.json names
 * keep the file's members. */
static gboolean metadata_groups(plan_trace *t, const et_file *f, const et_node *n,
                                GError **err) {
  const char *v = n->type == ET_METADATA ? n->inputs_values : NULL;
  const size_t len = v ? strlen(v) : 0;
  if (len < 4 || strncmp(v, "['", 2) != 0 || strcmp(v + len - 2, "']") != 0) return TRUE;
  char *text = g_strndup(v + 2, len - 4), *why = NULL;
  cJSON *a = cJSON_Parse(text);
  if (!cJSON_IsArray(a)) why = g_strdup("expected a JSON list of groups");
  for (const cJSON *g = a && !why ? a->child : NULL; g && !why; g = g->next) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(g, "pg_name");
    if (!cJSON_IsString(name)) {
      why = g_strdup("a group without a pg_name string");
      break;
    }
    int m;
    int *r = rank_list(cJSON_GetObjectItemCaseSensitive(g, "ranks"), t->P, &m, &why);
    if (r && g_hash_table_contains(t->comm_id, name->valuestring)) g_free(r);
    else if (r) add_comm(t, name->valuestring, r, m);
  }
  cJSON_Delete(a);
  g_free(text);
  if (why)
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: node %" G_GUINT64_FORMAT " '%s': the process "
                "groups in inputs.values: %s", f->path, n->id, n->name, why);
  g_free(why);
  return !why;
}

/* comm_groups.json, when there is one, then the METADATA nodes' groups, then every rank. */
static gboolean read_comm_groups(plan_trace *t, GError **err) {
  t->comm_id = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  char *path = g_build_filename(t->dir, "comm_groups.json", NULL);
  cJSON *root = NULL;
  gboolean ok = dl_json_read_optional(path, &root, err);
  if (root) {
    if (!cJSON_IsObject(root)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected an object {\"<id>\": [ranks...]}",
                  path);
      ok = FALSE;
    }
    for (const cJSON *g = ok ? root->child : NULL; ok && g; g = g->next) {
      char *why = NULL;
      int m;
      int *r = rank_list(g, t->P, &m, &why);
      if (r && !m) why = g_strdup("expected a non-empty list of ranks");
      else if (r && g_hash_table_contains(t->comm_id, g->string)) why = g_strdup("listed twice");
      if (why) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s: %s", path, g->string, why);
        g_free(why);
        g_free(r);
        ok = FALSE;
      } else {
        add_comm(t, g->string, r, m);
      }
    }
    cJSON_Delete(root);
  }
  g_free(path);
  for (int r = 0; ok && r < t->P; r++)
    for (int i = 0; ok && i < t->files[r]->n_nodes; i++)
      ok = metadata_groups(t, t->files[r], &t->files[r]->nodes[i], err);
  t->world = t->comms.n; /* the communicator of collectives without pg_name */
  add_comm(t, NULL, NULL, 0);
  return ok;
}

static plan_rank *convert(const plan_trace *t, int rank, int **order_out, GError **err);
static gboolean device_nodes(et_file *f, GError **err);
static gboolean match_ranks(const plan_trace *t, plan_rank **plans, int **order, GError **err);

plan_trace *plan_trace_open(const char *dir, gboolean check, GError **err) {
  plan_trace *t = g_new0(plan_trace, 1);
  t->dir = g_strdup(dir);
  char *prefix = NULL;
  gboolean ok = find_files(t, &prefix, err);
  if (ok) {
    t->files = g_new0(et_file *, t->P);
    for (int r = 0; ok && r < t->P; r++) {
      char *name = plan_trace_file_name(prefix, r);
      char *path = g_build_filename(dir, name, NULL);
      ok = (t->files[r] = et_read(path, err)) != NULL && device_nodes(t->files[r], err);
      g_free(path);
      g_free(name);
    }
  }
  g_free(prefix);
  int nodes = 0, work = 0;
  for (int r = 0; ok && r < t->P; r++) {
    nodes += t->files[r]->n_nodes > 0;
    for (int i = 0; i < t->files[r]->n_nodes; i++)
      work += t->files[r]->nodes[i].type != ET_METADATA;
  }
  if (ok && !nodes) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: the traces hold no nodes",
                dir);
    ok = FALSE;
  } else if (ok && !work) { /* a run of 0 s would say nothing of use */
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--workload chakra:%s: the traces hold only "
                "metadata nodes: no GPU kernel, memory or communication node to simulate", dir);
    ok = FALSE;
  }
  ok = ok && read_comm_groups(t, err);
  if (ok && check) { /* every rank's op list, then all of them together */
    plan_rank **plans = g_new0(plan_rank *, t->P);
    int **order = g_new0(int *, t->P);
    for (int r = 0; ok && r < t->P; r++) ok = (plans[r] = convert(t, r, &order[r], err)) != NULL;
    ok = ok && match_ranks(t, plans, order, err);
    for (int r = 0; r < t->P; r++) {
      plan_rank_free(plans[r]);
      g_free(order[r]);
    }
    g_free(plans);
    g_free(order);
  }
  if (!ok) {
    plan_trace_free(t);
    return NULL;
  }
  return t;
}

/* ---- one rank ---------------------------------------------------------------------------------- */

static int64_t attr_int(const et_node *n, const char *name, int64_t dflt) {
  const et_attr *a = et_node_attr(n, name);
  return a && (a->kind == ET_A_INT || a->kind == ET_A_BOOL) ? a->i : dflt;
}

static double attr_num(const et_node *n, const char *name, double dflt) {
  const et_attr *a = et_node_attr(n, name);
  if (!a) return dflt;
  if (a->kind == ET_A_DOUBLE) return a->d; /* NaN and infinities too: the callers refuse them */
  if (a->kind == ET_A_INT) return (double)a->i;
  return dflt;
}

static const char *attr_str(const et_node *n, const char *name) {
  const et_attr *a = et_node_attr(n, name);
  return a && a->kind == ET_A_STRING ? a->s : NULL;
}

/* ---- Chakra's dependency convention ----------------------------------------------------------
 *
 * data_deps order the nodes; ctrl_deps link a node to its parent (the operator that called or
 * launched it) and order nothing: Chakra's feeder and ASTRA-sim read only data_deps, and Chakra's
 * PyTorch converter writes both kinds, an operator and its kernel sometimes pointing at each
 * other through the two. A file without any data_deps orders by its ctrl_deps (generators that
 * wrote order there), and so do dlsim's own exports before they followed the convention (order
 * on a stream in ctrl_deps, across streams in data_deps): a file whose metadata holds
 * dlsim_config reads both kinds as order, its current exports having no ctrl_deps.
 *
 * Host operators (is_cpu_op true) are not ops: they run on the host and launch the kernels and
 * collectives that are. A dependency on one passes to the device nodes it depends on, through
 * any chain of host operators, of which each stream keeps the last in file order (the ops of a
 * stream run in order: the one before it follows from it). */

static gboolean is_host(const et_node *n) {
  return n->type != ET_METADATA && attr_int(n, "is_cpu_op", 0) != 0;
}

/* The stream a device node runs on, as op_of places it without dlsim_stream. */
static int node_stream(const et_node *n) {
  return n->type == ET_COLL || n->type == ET_SEND || n->type == ET_RECV ? PLAN_STREAM_COMM
                                                                       : PLAN_STREAM_COMPUTE;
}

typedef struct {
  const et_file *f;
  GHashTable *index;    /* id -> node index + 1 */
  gboolean ctrl;        /* ctrl_deps order too */
  int (*last)[PLAN_N_STREAMS]; /* per host node: the last device node per stream it follows, -1 */
  guint8 *state;        /* per host node: 0 not yet, 1 under way, 2 done */
} dep_walk;

/* The nodes node i depends on: its dependencies' indices, by the file's convention. */
static int dep_at(const dep_walk *w, const et_node *x, int d) {
  const uint64_t id = d < x->n_data ? x->data_deps[d] : x->ctrl_deps[d - x->n_data];
  return GPOINTER_TO_INT(g_hash_table_lookup(w->index, &id)) - 1;
}
static int dep_count(const dep_walk *w, const et_node *x) {
  return x->n_data + (w->ctrl ? x->n_ctrl : 0);
}

/* Folds dependency j into `last`: a device node itself, a host node what it follows (done). */
static void fold_dep(const dep_walk *w, int j, int *last) {
  if (!is_host(&w->f->nodes[j])) {
    const int s = node_stream(&w->f->nodes[j]);
    last[s] = MAX(last[s], j);
  } else {
    for (int s = 0; s < PLAN_N_STREAMS; s++) last[s] = MAX(last[s], w->last[j][s]);
  }
}

/* What host node h follows, into w->last[h]: a depth-first walk of the host nodes it depends
 * on, with a stack of its own (a converter's chain of host operators may be as long as the
 * trace). A cycle among host operators adds nothing. */
static void host_last(dep_walk *w, int h) {
  if (w->state[h]) return;
  GArray *stack = g_array_new(FALSE, FALSE, sizeof(int)); /* pairs: node, next dependency */
  const int top[2] = {h, 0};
  g_array_append_vals(stack, top, 2);
  w->state[h] = 1;
  for (int s = 0; s < PLAN_N_STREAMS; s++) w->last[h][s] = -1;
  while (stack->len) {
    int *t = &g_array_index(stack, int, stack->len - 2);
    const et_node *x = &w->f->nodes[t[0]];
    if (t[1] == dep_count(w, x)) {
      w->state[t[0]] = 2;
      g_array_set_size(stack, stack->len - 2);
      continue;
    }
    const int j = dep_at(w, x, t[1]++);
    if (j < 0) continue;
    if (is_host(&w->f->nodes[j]) && !w->state[j]) { /* walk it first, then fold it */
      t[1]--;
      w->state[j] = 1;
      for (int s = 0; s < PLAN_N_STREAMS; s++) w->last[j][s] = -1;
      const int next[2] = {j, 0};
      g_array_append_vals(stack, next, 2);
      continue;
    }
    fold_dep(w, j, w->last[t[0]]);
  }
  g_array_free(stack, TRUE);
}

/* Folds node j (a dependency) into `last`. */
static void follow(dep_walk *w, int j, int *last) {
  if (is_host(&w->f->nodes[j])) host_last(w, j);
  fold_dep(w, j, last);
}

/* Rewrites `f` by the convention: its device nodes only, each with its order in data_deps.
 * FALSE (refused) when no kernel, memory or communication node is left. */
static gboolean device_nodes(et_file *f, GError **err) {
  gboolean any_data = FALSE, any_host = FALSE;
  for (int i = 0; i < f->n_nodes; i++) {
    any_data = any_data || f->nodes[i].n_data > 0;
    any_host = any_host || is_host(&f->nodes[i]);
  }
  dep_walk w = {f, g_hash_table_new(g_int64_hash, g_int64_equal),
                !any_data || et_meta_attr(f, "dlsim_config") != NULL, NULL, NULL};
  for (int i = 0; i < f->n_nodes; i++)
    g_hash_table_insert(w.index, (gpointer)&f->nodes[i].id, GINT_TO_POINTER(i + 1));
  if (any_host) {
    w.last = g_malloc_n((gsize)f->n_nodes, sizeof *w.last);
    w.state = g_new0(guint8, f->n_nodes);
  }
  /* each device node's order: its device dependencies, and what its host ones follow */
  uint64_t **deps = g_new0(uint64_t *, f->n_nodes + 1);
  int *n_deps = g_new0(int, f->n_nodes + 1);
  for (int i = 0; i < f->n_nodes; i++) {
    const et_node *x = &f->nodes[i];
    if (is_host(x)) continue;
    int last[PLAN_N_STREAMS] = {-1, -1};
    deps[i] = g_new(uint64_t, dep_count(&w, x) + PLAN_N_STREAMS);
    for (int d = 0; d < dep_count(&w, x); d++) {
      const int j = dep_at(&w, x, d);
      if (j < 0) continue;
      if (is_host(&f->nodes[j])) follow(&w, j, last);
      else deps[i][n_deps[i]++] = f->nodes[j].id;
    }
    for (int s = 0; s < PLAN_N_STREAMS; s++)
      if (last[s] >= 0 && last[s] != i) deps[i][n_deps[i]++] = f->nodes[last[s]].id;
  }
  int kept = 0, work = 0;
  for (int i = 0; i < f->n_nodes; i++) {
    et_node *x = &f->nodes[i];
    if (is_host(x)) {
      et_node_clear(x);
      continue;
    }
    g_free(x->ctrl_deps);
    g_free(x->data_deps);
    x->ctrl_deps = NULL;
    x->n_ctrl = 0;
    x->data_deps = deps[i];
    x->n_data = n_deps[i];
    work += x->type != ET_METADATA;
    f->nodes[kept++] = *x;
  }
  const int host = f->n_nodes - kept;
  f->n_nodes = kept;
  g_free(deps);
  g_free(n_deps);
  g_free(w.last);
  g_free(w.state);
  g_hash_table_destroy(w.index);
  if (!work && host) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no GPU kernel or communication node, only %d "
                "host operators (is_cpu_op): dlsim simulates what the GPUs run; link the host "
                "trace with its device trace (Chakra's trace_link) before converting it",
                f->path, host);
    return FALSE;
  }
  return TRUE;
}

/* An enum value by its name in `names` (count n), else `dflt`. */
static int by_name(const char *s, const char *(*name_of)(int), int n, int dflt) {
  if (s)
    for (int i = 0; i < n; i++)
      if (strcmp(name_of(i), s) == 0) return i;
  return dflt;
}
static const char *phase_of(int i) { return plan_phase_name((plan_phase)i); }
static const char *purpose_of(int i) { return plan_purpose_name((plan_purpose)i); }
static const char *group_of(int i) { return plan_group_name((plan_group)i); }

/* dlsim's collective for each CollectiveCommType, or -1 (REDUCE, GATHER, SCATTER,
 * REDUCE_SCATTER_BLOCK, BARRIER: no model). */
static const coll_op coll_types[] = {
    [ET_ALL_REDUCE] = COLL_ALLREDUCE,       [ET_REDUCE] = (coll_op)-1,
    [ET_ALL_GATHER] = COLL_ALLGATHER,       [ET_GATHER] = (coll_op)-1,
    [ET_SCATTER] = (coll_op)-1,             [ET_BROADCAST] = COLL_BROADCAST,
    [ET_ALL_TO_ALL] = COLL_ALLTOALL,        [ET_REDUCE_SCATTER] = COLL_REDUCESCATTER,
    [ET_REDUCE_SCATTER_BLOCK] = (coll_op)-1, [ET_BARRIER] = (coll_op)-1,
};

int plan_trace_comm_type(coll_op op) {
  for (int k = 0; k < (int)G_N_ELEMENTS(coll_types); k++)
    if (coll_types[k] == op) return k;
  return -1;
}

typedef struct {
  const plan_trace *t;
  const et_file *f;
  int rank;
  GError **err;
} conv;

static gboolean refuse(conv *v, const et_node *n, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean refuse(conv *v, const et_node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *why = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(v->err, DL_ERROR, DL_ERR_INPUT, "%s: node %" G_GUINT64_FORMAT " '%s': %s",
              v->f->path, n->id, n->name, why);
  g_free(why);
  return FALSE;
}

static gboolean peer_of(conv *v, const et_node *n, const char *attr, int *peer) {
  const int64_t p = attr_int(n, attr, -1);
  if (p < 0 || p >= v->t->P || p == v->rank)
    return refuse(v, n, "%s %" G_GINT64_FORMAT ": expected another rank of 0..%d", attr, p,
                  v->t->P - 1);
  *peer = (int)p;
  return TRUE;
}

static gboolean coll_of(conv *v, const et_node *n, plan_op *op, GPtrArray *pool) {
  const et_attr *ct = et_node_attr(n, "comm_type");
  if (!ct || ct->kind != ET_A_INT) return refuse(v, n, "a collective without comm_type");
  const int k = ct->i >= 0 && ct->i < (int64_t)G_N_ELEMENTS(coll_types) ? (int)ct->i : -1;
  if (k < 0 || (int)coll_types[k] < 0)
    return refuse(v, n, "comm_type %" G_GINT64_FORMAT " (%s): dlsim models ALL_REDUCE, "
                  "ALL_GATHER, REDUCE_SCATTER, BROADCAST and ALL_TO_ALL", ct->i,
                  et_coll_type_name(k));
  op->coll = coll_types[k];
  const et_attr *pg = et_node_attr(n, "pg_name");
  if (pg) {
    char *id = pg->kind == ET_A_STRING ? g_strdup(pg->s) : g_strdup_printf("%" G_GINT64_FORMAT,
                                                                           pg->i);
    int k = GPOINTER_TO_INT(g_hash_table_lookup(v->t->comm_id, id)) - 1;
    if (k < 0 && (!*id || strcmp(id, "0") == 0)) k = v->t->world; /* the default group */
    if (k < 0) {
      gboolean r = refuse(v, n, "pg_name '%s' is not in %s/comm_groups.json nor in a process-group "
                          "METADATA node", id, v->t->dir);
      g_free(id);
      return r;
    }
    g_free(id);
    op->comm = k;
  } else {
    op->comm = v->t->world;
  }
  const int m = v->t->comms.size[op->comm];
  const int *mem = v->t->comms.members[op->comm];
  if (!bsearch(&v->rank, mem, (size_t)m, sizeof(int), cmp_int))
    return refuse(v, n, "rank %d is not a member of its communicator", v->rank);
  const et_attr *sb = et_node_attr(n, "dlsim_send_bytes"), *rb = et_node_attr(n, "dlsim_recv_bytes");
  if (sb || rb) {
    if (op->coll != COLL_ALLTOALL || !sb || !rb || sb->kind != ET_A_DOUBLES ||
        rb->kind != ET_A_DOUBLES || sb->n_list != m || rb->n_list != m)
      return refuse(v, n, "dlsim_send_bytes and dlsim_recv_bytes: expected both, on an "
                    "ALL_TO_ALL, with one entry per member (%d)", m);
    for (int i = 0; i < m; i++)
      if (!(sb->list[i] >= 0 && rb->list[i] >= 0 && sb->list[i] <= 1e18 && rb->list[i] <= 1e18))
        return refuse(v, n, "dlsim_send_bytes, dlsim_recv_bytes: expected bytes >= 0");
    double *s = g_memdup2(sb->list, sizeof(double) * (size_t)m);
    double *r = g_memdup2(rb->list, sizeof(double) * (size_t)m);
    g_ptr_array_add(pool, s);
    g_ptr_array_add(pool, r);
    op->peer_send_bytes = s;
    op->peer_recv_bytes = r;
  }
  op->group = (plan_group)by_name(attr_str(n, "dlsim_group"), group_of, PLAN_N_GROUPS,
                                  PLAN_GRP_TRACE);
  return TRUE;
}

/* The op of node `n`, or FALSE (refused). */
static gboolean op_of(conv *v, const et_node *n, plan_op *op, GPtrArray *pool) {
  plan_op_init(op);
  op->split = 1;
  op->group = PLAN_GRP_TRACE;
  op->phase = (plan_phase)by_name(attr_str(n, "dlsim_phase"), phase_of, PLAN_N_PHASES,
                                  PLAN_PH_FWD);
  op->microbatch = (int)CLAMP(attr_int(n, "dlsim_microbatch", 0), -1, G_MAXINT);
  op->purpose = (plan_purpose)by_name(attr_str(n, "dlsim_purpose"), purpose_of, PLAN_N_PURPOSES,
                                      PLAN_WHY_TRACE);
  const gboolean comm = n->type == ET_COLL || n->type == ET_SEND || n->type == ET_RECV;
  /* dlsim's own exact bytes where it wrote them (comm_size is a whole number) */
  const double bytes = attr_num(n, comm ? "dlsim_bytes" : "tensor_size",
                                comm ? attr_num(n, "comm_size", 0) : 0);
  if (!(bytes >= 0 && bytes <= 1e18))
    return refuse(v, n, "%s: expected bytes in 0..1e18", comm ? "comm_size" : "tensor_size");
  switch (n->type) {
  case ET_COMP:
  case ET_MEM_LOAD:
  case ET_MEM_STORE:
  case ET_METADATA: {
    op->kind = PLAN_KERNEL;
    op->stream = PLAN_STREAM_COMPUTE;
    const char *kn = attr_str(n, "dlsim_kernel");
    gboolean plain = kn && strlen(kn) < PLAN_KNAME_MAX && *kn;
    for (const char *c = kn; plain && *c; c++) plain = g_ascii_isgraph(*c) && *c != '"' && *c != '\\';
    if (kn && !plain)
      return refuse(v, n, "dlsim_kernel: expected a name of 1..%d printable characters without "
                    "spaces, quotes or backslashes", PLAN_KNAME_MAX - 1);
    op->kname = g_intern_string(kn                         ? kn
                                : n->type == ET_COMP       ? "trace.comp"
                                : n->type == ET_METADATA   ? "trace.metadata"
                                                           : "trace.memory");
    const double flops = attr_num(n, "num_ops", 0);
    if (!(flops >= 0 && flops <= 1e30)) return refuse(v, n, "num_ops: expected FLOP in 0..1e30");
    op->flops = n->type == ET_COMP ? flops : 0;
    op->mem_bytes = n->type == ET_METADATA ? 0 : bytes;
    op->gemm_like = op->flops > 0;
    op->samples = attr_int(n, "dlsim_samples", 0);
    const double rec = attr_num(n, "dlsim_duration_s", -1);
    const et_attr *dur = et_node_attr(n, "dlsim_duration_s");
    if (dur && (dur->kind == ET_A_DOUBLE ? !(dur->d >= 0 && dur->d <= 1e6)
                                         : dur->kind != ET_A_INT || dur->i < 0 || dur->i > 1000000))
      return refuse(v, n, "dlsim_duration_s: expected seconds in [0, 1e6]");
    const char *key = attr_str(n, "dlsim_kernel_key");
    if (key) {
      char *k = g_strdup(key);
      g_ptr_array_add(pool, k);
      op->kdb_key = k;
    }
    if (n->type == ET_METADATA)
      op->fixed_s = 0;
    else if (n->type == ET_COMP && rec >= 0 && rec <= 1e6)
      op->fixed_s = rec;
    else if (n->type == ET_COMP && (n->duration_us > 0 || (op->flops == 0 && op->mem_bytes == 0)))
      op->fixed_s = (double)n->duration_us * 1e-6;
    /* else the roofline of its FLOP and bytes (fixed_s -1) */
    break;
  }
  case ET_COLL:
    op->kind = PLAN_COLL;
    op->stream = PLAN_STREAM_COMM;
    op->bytes = bytes;
    if (!coll_of(v, n, op, pool)) return FALSE;
    break;
  case ET_SEND:
  case ET_RECV:
    op->kind = n->type == ET_SEND ? PLAN_SEND : PLAN_RECV;
    op->stream = PLAN_STREAM_COMM;
    op->coll = COLL_SENDRECV;
    op->bytes = bytes;
    op->tag = (int)CLAMP(attr_int(n, "comm_tag", 0), 0, 32767); /* MPI_TAG_UB is at least 32767 */
    if (attr_int(n, "comm_tag", 0) != op->tag)
      return refuse(v, n, "comm_tag %" G_GINT64_FORMAT ": expected 0..32767",
                    attr_int(n, "comm_tag", 0));
    if (!peer_of(v, n, n->type == ET_SEND ? "comm_dst" : "comm_src", &op->peer)) return FALSE;
    break;
  default: return refuse(v, n, "node type %d: dlsim has no model of it", (int)n->type);
  }
  const char *s = attr_str(n, "dlsim_stream");
  if (s && strcmp(s, "compute") && strcmp(s, "comm"))
    return refuse(v, n, "dlsim_stream '%s': expected compute or comm", s);
  if (s) {
    op->stream = strcmp(s, "comm") == 0 ? PLAN_STREAM_COMM : PLAN_STREAM_COMPUTE;
    if ((op->kind == PLAN_KERNEL) != (op->stream == PLAN_STREAM_COMPUTE))
      return refuse(v, n, "dlsim_stream '%s': kernels run on the compute stream, communication "
                    "on the comm stream", s);
  }
  return TRUE;
}

/* A binary min-heap of node indices: Kahn's algorithm takes the ready node first in the file. */
static void heap_push(GArray *h, int x) {
  g_array_append_val(h, x);
  int *a = (int *)(void *)h->data;
  for (guint i = h->len - 1; i > 0 && a[(i - 1) / 2] > a[i]; i = (i - 1) / 2) {
    int t = a[i];
    a[i] = a[(i - 1) / 2], a[(i - 1) / 2] = t;
  }
}

static int heap_pop(GArray *h) {
  int *a = (int *)(void *)h->data, top = a[0];
  a[0] = a[h->len - 1];
  g_array_set_size(h, h->len - 1);
  for (guint i = 0;;) {
    guint l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->len && a[l] < a[m]) m = l;
    if (r < h->len && a[r] < a[m]) m = r;
    if (m == i) break;
    int t = a[i];
    a[i] = a[m], a[m] = t;
    i = m;
  }
  return top;
}

/* order[k]: the index of the k-th node in a topological order (file order among ready ones). */
static gboolean topo_order(conv *v, GHashTable *index, int *order) {
  const et_file *f = v->f;
  const int n = f->n_nodes;
  int *indeg = g_new0(int, n ? n : 1);
  GPtrArray **users = g_new0(GPtrArray *, n ? n : 1);
  for (int i = 0; i < n; i++) {
    const et_node *x = &f->nodes[i];
    for (int d = 0; d < x->n_data; d++) { /* every order in data_deps (device_nodes) */
      const uint64_t id = x->data_deps[d];
      int j = GPOINTER_TO_INT(g_hash_table_lookup(index, &id)) - 1;
      if (!users[j]) users[j] = g_ptr_array_new();
      g_ptr_array_add(users[j], GINT_TO_POINTER(i));
      indeg[i]++;
    }
  }
  GArray *heap = g_array_new(FALSE, FALSE, sizeof(int));
  for (int i = 0; i < n; i++)
    if (!indeg[i]) heap_push(heap, i);
  int k = 0;
  while (heap->len) {
    int i = heap_pop(heap);
    order[k++] = i;
    for (guint u = 0; users[i] && u < users[i]->len; u++) {
      int j = GPOINTER_TO_INT(g_ptr_array_index(users[i], u));
      if (--indeg[j] == 0) heap_push(heap, j);
    }
  }
  gboolean ok = k == n;
  for (int i = 0; !ok && i < n; i++)
    if (indeg[i]) {
      refuse(v, &f->nodes[i], "its dependencies form a cycle");
      break;
    }
  g_array_free(heap, TRUE);
  for (int i = 0; i < n; i++)
    if (users[i]) g_ptr_array_free(users[i], TRUE);
  g_free(users);
  g_free(indeg);
  return ok;
}

/* Rank `rank`'s op list; with `order_out`, also which node each op is (newly allocated). */
static plan_rank *convert(const plan_trace *t, int rank, int **order_out, GError **err) {
  g_return_val_if_fail(rank >= 0 && rank < t->P, NULL);
  conv v = {t, t->files[rank], rank, err};
  const et_file *f = v.f;
  const int n = f->n_nodes;
  plan_rank *p = g_new0(plan_rank, 1);
  p->pool = g_ptr_array_new_with_free_func(g_free);
  p->comms = &t->comms;
  p->stage_first = g_new0(int, 2);
  p->n_chunks = 1;
  p->chunk_stride = 1;
  p->ops = g_new0(plan_op, n ? n : 1);
  p->step_event = -1;
  GHashTable *index = g_hash_table_new(g_int64_hash, g_int64_equal); /* id -> node index + 1 */
  for (int i = 0; i < n; i++)
    g_hash_table_insert(index, (gpointer)&f->nodes[i].id, GINT_TO_POINTER(i + 1));
  int *order = g_new(int, n ? n : 1), *pos = g_new(int, n ? n : 1);
  gboolean ok = topo_order(&v, index, order);
  for (int k = 0; ok && k < n; k++) {
    ok = op_of(&v, &f->nodes[order[k]], &p->ops[k], p->pool);
    pos[order[k]] = k;
  }
  /* a cross-stream dependency: wait for the last op of the other stream the op depends on */
  for (int k = 0; ok && k < n; k++) {
    const et_node *x = &f->nodes[order[k]];
    int last = -1;
    for (int d = 0; d < x->n_data; d++) { /* every order in data_deps (device_nodes) */
      const uint64_t id = x->data_deps[d];
      const int j = pos[GPOINTER_TO_INT(g_hash_table_lookup(index, &id)) - 1];
      if (p->ops[j].stream != p->ops[k].stream && j > last) last = j;
    }
    if (last < 0) continue;
    if (p->ops[last].record_event < 0) p->ops[last].record_event = p->n_events++;
    p->ops[k].wait_event = p->ops[last].record_event;
  }
  p->n_ops = n;
  /* dlsim's own export names the optimizer step the next iteration's gathers follow */
  const double step = et_meta_num(f, "dlsim_step_node", -1);
  if (ok && step >= 0 && step <= 9e15) {
    const uint64_t id = (uint64_t)step;
    const int j = GPOINTER_TO_INT(g_hash_table_lookup(index, &id)) - 1;
    if (j >= 0 && p->ops[pos[j]].stream == PLAN_STREAM_COMPUTE) {
      plan_op *op = &p->ops[pos[j]];
      if (op->record_event < 0) op->record_event = p->n_events++;
      p->step_event = op->record_event;
    }
  }
  p->mem.params = MAX(0.0, et_meta_num(f, "dlsim_memory_params_bytes", 0));
  p->mem.grads = MAX(0.0, et_meta_num(f, "dlsim_memory_grads_bytes", 0));
  p->mem.optimizer = MAX(0.0, et_meta_num(f, "dlsim_memory_optimizer_bytes", 0));
  p->mem.activations = MAX(0.0, et_meta_num(f, "dlsim_memory_activations_bytes", 0));
  p->mem.gathered = MAX(0.0, et_meta_num(f, "dlsim_memory_gathered_bytes", 0));
  p->max_stash = (int)CLAMP(et_meta_num(f, "dlsim_max_stash", 1), 1, G_MAXINT);
  p->stage = (int)CLAMP(et_meta_num(f, "dlsim_stage", 0), 0, G_MAXINT);
  if (ok && order_out) *order_out = order;
  else g_free(order);
  g_free(pos);
  g_hash_table_destroy(index);
  if (!ok) {
    plan_rank_free(p);
    return NULL;
  }
  return p;
}

plan_rank *plan_trace_rank(const plan_trace *t, int rank, GError **err) {
  return convert(t, rank, NULL, err);
}

/* ---- the ranks together: do their messages and collectives match? ------------------------------
 *
 * Every executor matches a message by (source, destination, tag) in the order each side issues
 * them (MPI's rule; sends never block: dlsim posts them as MPI_Isend) and a communicator's
 * collectives in the order its members reach them. `match_ranks` runs the op lists that way
 * without times: each stream of each rank in order, an op once the event it waits for is
 * recorded, a receive once its message was sent, a collective once every member has reached it.
 * Sizes that disagree, collectives of different kinds, a message nobody receives, a receive
 * nobody sends, a collective a member never joins, and op lists that wait for each other are
 * the trace's faults: refused here, so that every mode refuses the same traces with one line. */

typedef struct {
  const plan_trace *t;
  plan_rank **plans;
  int **order;      /* per rank: op index -> node index */
  int **by_stream;  /* per rank, per stream: the op indices in order, then -1 */
  int *next;        /* per rank, per stream: position in by_stream */
  gboolean **event; /* per rank: events recorded */
  int *arrived;     /* per rank: the collective op it waits in, -1 none */
  GHashTable *sent; /* (src, dst, tag) -> GQueue of op refs (rank << 32 | op) */
  int *round;       /* per communicator: collectives it completed */
  int *waiting;     /* per communicator: members that arrived at the current one */
  GError **err;
} matcher;

static const et_node *node_at(const matcher *m, int r, int k) {
  return &m->t->files[r]->nodes[m->order[r][k]];
}

static gboolean mismatch(const matcher *m, int r, int k, const char *fmt, ...) G_GNUC_PRINTF(4, 5);
static gboolean mismatch(const matcher *m, int r, int k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *why = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  const et_node *n = node_at(m, r, k);
  g_set_error(m->err, DL_ERROR, DL_ERR_INPUT, "%s: node %" G_GUINT64_FORMAT " '%s': %s",
              m->t->files[r]->path, n->id, n->name, why);
  g_free(why);
  return FALSE;
}

/* "t.1.et node 4 's'" (newly allocated) */
static char *where(const matcher *m, int r, int k) {
  const et_node *n = node_at(m, r, k);
  return g_strdup_printf("%s node %" G_GUINT64_FORMAT " '%s'", m->t->files[r]->path, n->id,
                         n->name);
}

/* The messages from src to dst with `tag` (tags are below 32768, ranks below CFG_MAX_GPUS). */
static int64_t pair_key(int src, int dst, int tag) {
  return ((int64_t)src * CFG_MAX_GPUS + dst) * 32768 + tag;
}

/* An op of a rank as a queue entry (never NULL: rank 0's op 0 too), and back. Entries order as
 * their (rank, op). */
static gpointer op_ref(int r, int k) { return (gpointer)(intptr_t)((((int64_t)r << 32) | k) + 1); }
static void op_of_ref(gconstpointer ref, int *r, int *k) {
  const int64_t v = (int64_t)(intptr_t)ref - 1;
  *r = (int)(v >> 32);
  *k = (int)(v & 0xffffffff);
}

static int cur(const matcher *m, int r, int s) {
  return m->by_stream[r * PLAN_N_STREAMS + s][m->next[r * PLAN_N_STREAMS + s]];
}

/* The op rank r is held at: its comm stream's, else its compute stream's; -1 when done. */
static int held_at(const matcher *m, int r) {
  const int k = cur(m, r, PLAN_STREAM_COMM);
  return k >= 0 ? k : cur(m, r, PLAN_STREAM_COMPUTE);
}

static void complete(matcher *m, int r, int k) {
  const plan_op *op = &m->plans[r]->ops[k];
  if (op->record_event >= 0) m->event[r][op->record_event] = TRUE;
  m->next[r * PLAN_N_STREAMS + op->stream]++;
}

/* Every member of communicator c is in op waiting[]: same collective, same sizes? Then done. */
static gboolean finish_coll(matcher *m, int c) {
  const int n = m->t->comms.size[c];
  const int *mem = m->t->comms.members[c];
  const int r0 = mem[0], k0 = m->arrived[r0];
  const plan_op *a = &m->plans[r0]->ops[k0];
  for (int i = 1; i < n; i++) {
    const int r = mem[i], k = m->arrived[r];
    const plan_op *b = &m->plans[r]->ops[k];
    if (b->coll != a->coll || (!b->peer_send_bytes && b->bytes != a->bytes)) {
      char *w = where(m, r0, k0);
      gboolean f = mismatch(m, r, k, "collective %d of its communicator is %s of %.0f bytes, "
                            "but %s is %s of %.0f bytes", m->round[c] + 1, coll_op_name(b->coll),
                            b->bytes, w, coll_op_name(a->coll), a->bytes);
      g_free(w);
      return f;
    }
    if (b->peer_send_bytes) /* uneven all-to-all: what i sends to j, j receives from i */
      for (int j = 0; j < n; j++) {
        const plan_op *o = &m->plans[mem[j]]->ops[m->arrived[mem[j]]];
        if (o->peer_recv_bytes && o->peer_recv_bytes[i] != b->peer_send_bytes[j]) {
          char *w = where(m, mem[j], m->arrived[mem[j]]);
          gboolean f = mismatch(m, r, k, "sends %.0f bytes to member %d of its all-to-all, "
                                "but %s receives %.0f from it", b->peer_send_bytes[j], j, w,
                                o->peer_recv_bytes[i]);
          g_free(w);
          return f;
        }
      }
  }
  for (int i = 0; i < n; i++) {
    complete(m, mem[i], m->arrived[mem[i]]);
    m->arrived[mem[i]] = -1;
  }
  m->waiting[c] = 0;
  m->round[c]++;
  return TRUE;
}

/* One step of rank r's stream s: 1 progress, 0 blocked or done, -1 refused. */
static int step(matcher *m, int r, int s) {
  const int k = cur(m, r, s);
  if (k < 0) return 0;
  const plan_op *op = &m->plans[r]->ops[k];
  if (op->wait_event >= 0 && !m->event[r][op->wait_event]) return 0;
  if (op->kind == PLAN_KERNEL) {
    complete(m, r, k);
    return 1;
  }
  if (op->kind == PLAN_SEND) {
    const int64_t key = pair_key(r, op->peer, op->tag);
    GQueue *q = g_hash_table_lookup(m->sent, &key);
    if (!q) g_hash_table_insert(m->sent, g_memdup2(&key, sizeof key), q = g_queue_new());
    g_queue_push_tail(q, op_ref(r, k));
    complete(m, r, k);
    return 1;
  }
  if (op->kind == PLAN_RECV) {
    const int64_t key = pair_key(op->peer, r, op->tag);
    GQueue *q = g_hash_table_lookup(m->sent, &key);
    if (!q || g_queue_is_empty(q)) return 0;
    int sr, sk;
    op_of_ref(g_queue_pop_head(q), &sr, &sk);
    const double sb = m->plans[sr]->ops[sk].bytes;
    if (sb != op->bytes) {
      char *w = where(m, sr, sk);
      mismatch(m, r, k, "receives %.0f bytes, but %s sends %.0f", op->bytes, w, sb);
      g_free(w);
      return -1;
    }
    complete(m, r, k);
    return 1;
  }
  /* a collective */
  if (m->arrived[r] == k) return 0;
  m->arrived[r] = k;
  if (++m->waiting[op->comm] < m->t->comms.size[op->comm]) return 1;
  return finish_coll(m, op->comm) ? 1 : -1;
}

/* Why rank r cannot go on (its comm stream's op, or the op its compute stream waits in). */
static gboolean explain(matcher *m, int r) {
  const int k = held_at(m, r);
  const plan_op *op = &m->plans[r]->ops[k];
  if (op->kind == PLAN_RECV) {
    const int s = op->peer, sk = held_at(m, s);
    if (sk < 0)
      return mismatch(m, r, k, "receives from rank %d (tag %d), which never sends it (%s ends "
                      "first)", s, op->tag, m->t->files[s]->path);
    char *w = where(m, s, sk);
    gboolean f = mismatch(m, r, k, "waits forever: receives from rank %d (tag %d), which waits "
                          "itself at %s", s, op->tag, w);
    g_free(w);
    return f;
  }
  if (op->kind == PLAN_COLL) {
    const int c = op->comm, n = m->t->comms.size[c];
    for (int i = 0; i < n; i++) {
      const int o = m->t->comms.members[c][i];
      if (m->arrived[o] >= 0) continue;
      const int at = held_at(m, o);
      if (at < 0)
        return mismatch(m, r, k, "collective %d of its communicator, which rank %d never joins "
                        "(%s ends first)", m->round[c] + 1, o, m->t->files[o]->path);
      char *w = where(m, o, at);
      gboolean f = mismatch(m, r, k, "waits forever: collective %d of its communicator, which "
                            "rank %d does not reach (it waits at %s)", m->round[c] + 1, o, w);
      g_free(w);
      return f;
    }
  }
  return mismatch(m, r, k, "waits forever for an op of its own that cannot start");
}

static gboolean match_ranks(const plan_trace *t, plan_rank **plans, int **order, GError **err) {
  const int P = t->P;
  matcher m = {t, plans, order, g_new0(int *, P * PLAN_N_STREAMS), g_new0(int, P * PLAN_N_STREAMS),
               g_new0(gboolean *, P), g_new(int, P),
               g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free,
                                     (GDestroyNotify)g_queue_free),
               g_new0(int, t->comms.n ? t->comms.n : 1), g_new0(int, t->comms.n ? t->comms.n : 1),
               err};
  for (int r = 0; r < P; r++) {
    const plan_rank *p = plans[r];
    m.arrived[r] = -1;
    m.event[r] = g_new0(gboolean, p->n_events + 1);
    for (int s = 0; s < PLAN_N_STREAMS; s++) {
      int *l = m.by_stream[r * PLAN_N_STREAMS + s] = g_new(int, p->n_ops + 1), n = 0;
      for (int k = 0; k < p->n_ops; k++)
        if (p->ops[k].stream == s) l[n++] = k;
      l[n] = -1;
    }
  }
  gboolean ok = TRUE;
  for (gboolean moved = TRUE; ok && moved;) {
    moved = FALSE;
    for (int r = 0; ok && r < P; r++)
      for (int s = 0; ok && s < PLAN_N_STREAMS; s++)
        for (int x; ok && (x = step(&m, r, s)) != 0;) {
          ok = x > 0;
          moved = TRUE;
        }
  }
  for (int r = 0; ok && r < P; r++)
    if (held_at(&m, r) >= 0) ok = explain(&m, r);
  if (ok) { /* a message nobody received */
    GHashTableIter it;
    gpointer key, val;
    gpointer first = NULL;
    g_hash_table_iter_init(&it, m.sent);
    while (g_hash_table_iter_next(&it, &key, &val)) {
      GQueue *q = val;
      gpointer ref = g_queue_peek_head(q); /* the lowest rank and op: deterministic */
      if (ref && (!first || (intptr_t)ref < (intptr_t)first)) first = ref;
    }
    if (first) {
      int r, k;
      op_of_ref(first, &r, &k);
      const plan_op *op = &plans[r]->ops[k];
      ok = mismatch(&m, r, k, "sends %.0f bytes to rank %d (tag %d), which never receives them",
                    op->bytes, op->peer, op->tag);
    }
  }
  for (int r = 0; r < P; r++) {
    g_free(m.event[r]);
    for (int s = 0; s < PLAN_N_STREAMS; s++) g_free(m.by_stream[r * PLAN_N_STREAMS + s]);
  }
  g_free(m.by_stream);
  g_free(m.next);
  g_free(m.event);
  g_free(m.arrived);
  g_hash_table_destroy(m.sent);
  g_free(m.round);
  g_free(m.waiting);
  return ok;
}
