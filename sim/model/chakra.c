/* chakra.c — reading and writing Chakra execution-trace files (chakra.h), with the protobuf-c code
 * protoc-c generates from et_def.proto. */
#include "model/chakra.h"

#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "model/et_def.pb-c.h"

typedef ChakraProtoMsg__AttributeProto pb_attr;
typedef ChakraProtoMsg__Node pb_node;
typedef ChakraProtoMsg__GlobalMetadata pb_meta;

#define ET_MAX_RECORD (64u << 20) /* no node or metadata of a sane trace is larger */

/* ---- protobuf -> plain ------------------------------------------------------------------------ */

static void attr_from_pb(et_attr *a, const pb_attr *p) {
  memset(a, 0, sizeof *a);
  a->name = g_strdup(p->name ? p->name : "");
  a->kind = ET_A_INT;
  switch (p->value_case) {
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_VAL: a->i = p->int32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL: a->i = p->int64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT32_VAL: a->i = p->uint32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL:
    a->i = p->uint64_val > INT64_MAX ? INT64_MAX : (int64_t)p->uint64_val;
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SINT32_VAL: a->i = p->sint32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SINT64_VAL: a->i = p->sint64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FIXED32_VAL: a->i = p->fixed32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FIXED64_VAL:
    a->i = p->fixed64_val > INT64_MAX ? INT64_MAX : (int64_t)p->fixed64_val;
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SFIXED32_VAL: a->i = p->sfixed32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SFIXED64_VAL: a->i = p->sfixed64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL:
    a->kind = ET_A_BOOL;
    a->i = p->bool_val != 0;
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_VAL:
    a->kind = ET_A_DOUBLE;
    a->d = p->double_val;
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FLOAT_VAL:
    a->kind = ET_A_DOUBLE;
    a->d = p->float_val;
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL:
    a->kind = ET_A_STRING;
    a->s = g_strdup(p->string_val ? p->string_val : "");
    break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_LIST:
    a->kind = ET_A_DOUBLES;
    if (p->double_list) {
      a->n_list = (int)MIN(p->double_list->n_values, (size_t)G_MAXINT);
      a->list = g_memdup2(p->double_list->values, sizeof(double) * (size_t)a->n_list);
    }
    break;
  default: a->kind = ET_A_OTHER; break;
  }
}

static void attr_clear(et_attr *a) {
  g_free(a->name);
  g_free(a->s);
  g_free(a->list);
}

/* Counts fit an int: a record is at most ET_MAX_RECORD bytes, one byte or more per entry. */
static void node_from_pb(et_node *n, const pb_node *p) {
  memset(n, 0, sizeof *n);
  n->id = p->id;
  n->name = g_strdup(p->name ? p->name : "");
  n->type = (et_type)p->type;
  n->duration_us = p->duration_micros;
  n->n_ctrl = (int)p->n_ctrl_deps;
  n->n_data = (int)p->n_data_deps;
  n->ctrl_deps = g_memdup2(p->ctrl_deps, sizeof(uint64_t) * p->n_ctrl_deps);
  n->data_deps = g_memdup2(p->data_deps, sizeof(uint64_t) * p->n_data_deps);
  if (p->type == CHAKRA_PROTO_MSG__NODE_TYPE__METADATA_NODE && p->inputs && p->inputs->values &&
      *p->inputs->values)
    n->inputs_values = g_strdup(p->inputs->values);
  n->n_attrs = (int)p->n_attr;
  n->attrs = g_new0(et_attr, p->n_attr ? p->n_attr : 1);
  for (size_t i = 0; i < p->n_attr; i++) attr_from_pb(&n->attrs[i], p->attr[i]);
}

void et_node_clear(et_node *n) {
  g_free(n->name);
  g_free(n->ctrl_deps);
  g_free(n->data_deps);
  g_free(n->inputs_values);
  for (int i = 0; i < n->n_attrs; i++) attr_clear(&n->attrs[i]);
  g_free(n->attrs);
}

void et_free(et_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n_nodes; i++) et_node_clear(&f->nodes[i]);
  g_free(f->nodes);
  for (int i = 0; i < f->n_meta; i++) attr_clear(&f->meta[i]);
  g_free(f->meta);
  g_free(f->version);
  g_free(f->path);
  g_free(f);
}

/* A base-128 varint of at most 32 bits at `p` (below `end`); FALSE if there is none. */
static gboolean varint32(const guint8 **p, const guint8 *end, guint32 *out) {
  guint32 v = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (*p >= end) return FALSE;
    guint8 b = *(*p)++;
    if (shift == 28 && (b & 0x70)) return FALSE; /* more than 32 bits */
    v |= (guint32)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return TRUE;
    }
  }
  return FALSE;
}

et_file *et_read(const char *path, GError **err) {
  gsize len = 0;
  char *data = dl_read_file(path, &len, err);
  if (!data) return NULL;
  et_file *f = et_read_bytes(path, data, len, err);
  g_free(data);
  return f;
}

et_file *et_read_bytes(const char *path, const char *data, gsize len, GError **err) {
  et_file *f = g_new0(et_file, 1);
  f->path = g_strdup(path);
  GArray *nodes = g_array_new(FALSE, TRUE, sizeof(et_node));
  const guint8 *p = (const guint8 *)data, *end = p + len;
  gboolean ok = TRUE;
  for (int rec = 0; ok && p < end; rec++) {
    guint32 n = 0;
    if (!varint32(&p, end, &n) || n > ET_MAX_RECORD || n > (gsize)(end - p)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: record %d: its length runs past the end of "
                  "the file (not a Chakra execution trace?)", path, rec);
      ok = FALSE;
      break;
    }
    if (rec == 0) {
      pb_meta *m = chakra_proto_msg__global_metadata__unpack(NULL, n, p);
      if (!m) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: record 0: not a Chakra GlobalMetadata",
                    path);
        ok = FALSE;
        break;
      }
      f->version = g_strdup(m->version ? m->version : "");
      /* the schema dlsim reads is Chakra's 0.0.x (0.0.4 today); a version of another series
       * numbers its fields otherwise, and an empty one is an older converter's */
      if (*f->version && !g_str_has_prefix(f->version, "0.0.")) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: GlobalMetadata version '%s': dlsim reads "
                    "Chakra's 0.0.x execution traces", path, f->version);
        chakra_proto_msg__global_metadata__free_unpacked(m, NULL);
        ok = FALSE;
        break;
      }
      f->n_meta = (int)MIN(m->n_attr, (size_t)G_MAXINT / 2);
      f->meta = g_new0(et_attr, f->n_meta ? f->n_meta : 1);
      for (int i = 0; i < f->n_meta; i++) attr_from_pb(&f->meta[i], m->attr[i]);
      chakra_proto_msg__global_metadata__free_unpacked(m, NULL);
    } else {
      pb_node *pn = chakra_proto_msg__node__unpack(NULL, n, p);
      et_node node;
      if (!pn) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: record %d: not a Chakra Node", path, rec);
        ok = FALSE;
        break;
      }
      node_from_pb(&node, pn);
      chakra_proto_msg__node__free_unpacked(pn, NULL);
      g_array_append_val(nodes, node);
    }
    p += n;
  }
  if (ok && !f->version) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: empty: a Chakra trace starts with its "
                "GlobalMetadata", path);
    ok = FALSE;
  }
  f->n_nodes = (int)nodes->len;
  f->nodes = (et_node *)(void *)g_array_free(nodes, FALSE);
  /* ids are unique; data dependencies name nodes of the file; control dependencies that do not
   * are dropped: Chakra's PyTorch converter records each operator's caller as one, then removes
   * the nodes no data dependency reaches, callers included */
  GHashTable *ids = g_hash_table_new(g_int64_hash, g_int64_equal);
  for (int i = 0; ok && i < f->n_nodes; i++) {
    et_node *x = &f->nodes[i];
    if (!g_hash_table_add(ids, &x->id)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: node %" G_GUINT64_FORMAT " '%s': its id is "
                  "used twice", path, x->id, x->name);
      ok = FALSE;
    }
  }
  for (int i = 0; ok && i < f->n_nodes; i++) {
    et_node *x = &f->nodes[i];
    for (int k = 0; ok && k < x->n_data; k++)
      if (!g_hash_table_contains(ids, &x->data_deps[k])) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: node %" G_GUINT64_FORMAT " '%s': data "
                    "dependency on node %" G_GUINT64_FORMAT ", which the file does not hold",
                    path, x->id, x->name, x->data_deps[k]);
        ok = FALSE;
      }
    int kept = 0;
    for (int k = 0; k < x->n_ctrl; k++)
      if (g_hash_table_contains(ids, &x->ctrl_deps[k])) x->ctrl_deps[kept++] = x->ctrl_deps[k];
    x->n_ctrl = kept;
  }
  g_hash_table_destroy(ids);
  if (!ok) {
    et_free(f);
    return NULL;
  }
  return f;
}

static const et_attr *find_attr(const et_attr *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(a[i].name, name) == 0) return &a[i];
  return NULL;
}

const et_attr *et_node_attr(const et_node *n, const char *name) {
  return find_attr(n->attrs, n->n_attrs, name);
}

const et_attr *et_meta_attr(const et_file *f, const char *name) {
  return find_attr(f->meta, f->n_meta, name);
}

double et_meta_num(const et_file *f, const char *name, double dflt) {
  const et_attr *a = et_meta_attr(f, name);
  if (!a) return dflt;
  if (a->kind == ET_A_INT) return (double)a->i;
  if (a->kind == ET_A_DOUBLE && isfinite(a->d)) return a->d;
  return dflt;
}

const char *et_coll_type_name(int t) {
  static const char *const names[] = {"ALL_REDUCE", "REDUCE",       "ALL_GATHER", "GATHER",
                                      "SCATTER",    "BROADCAST",    "ALL_TO_ALL", "REDUCE_SCATTER",
                                      "REDUCE_SCATTER_BLOCK", "BARRIER"};
  return t >= 0 && t < (int)G_N_ELEMENTS(names) ? names[t] : "?";
}

/* ---- writing --------------------------------------------------------------------------------- */

et_file *et_new(const char *path) {
  et_file *f = g_new0(et_file, 1);
  f->path = g_strdup(path);
  f->version = g_strdup(ET_VERSION);
  return f;
}

et_node *et_add_node(et_file *f, uint64_t id, const char *name, et_type type) {
  f->nodes = g_renew(et_node, f->nodes, f->n_nodes + 1);
  et_node *n = &f->nodes[f->n_nodes++];
  memset(n, 0, sizeof *n);
  n->id = id;
  n->name = g_strdup(name);
  n->type = type;
  return n;
}

void et_add_dep(et_node *n, gboolean data, uint64_t on) {
  uint64_t **v = data ? &n->data_deps : &n->ctrl_deps;
  int *c = data ? &n->n_data : &n->n_ctrl;
  *v = g_renew(uint64_t, *v, *c + 1);
  (*v)[(*c)++] = on;
}

static et_attr *new_attr(et_file *f, et_node *n, const char *name, et_akind kind) {
  et_attr **a = n ? &n->attrs : &f->meta;
  int *c = n ? &n->n_attrs : &f->n_meta;
  *a = g_renew(et_attr, *a, *c + 1);
  et_attr *x = &(*a)[(*c)++];
  memset(x, 0, sizeof *x);
  x->name = g_strdup(name);
  x->kind = kind;
  return x;
}

void et_attr_int(et_file *f, et_node *n, const char *name, int64_t v) {
  new_attr(f, n, name, ET_A_INT)->i = v;
}
void et_attr_uint64(et_file *f, et_node *n, const char *name, uint64_t v) {
  new_attr(f, n, name, ET_A_UINT64)->i = v > INT64_MAX ? INT64_MAX : (int64_t)v;
}
void et_attr_int32(et_file *f, et_node *n, const char *name, int32_t v) {
  new_attr(f, n, name, ET_A_INT32)->i = v;
}
void et_attr_double(et_file *f, et_node *n, const char *name, double v) {
  new_attr(f, n, name, ET_A_DOUBLE)->d = v;
}
void et_attr_bool(et_file *f, et_node *n, const char *name, gboolean v) {
  new_attr(f, n, name, ET_A_BOOL)->i = v != 0;
}
void et_attr_string(et_file *f, et_node *n, const char *name, const char *v) {
  new_attr(f, n, name, ET_A_STRING)->s = g_strdup(v);
}
void et_attr_doubles(et_file *f, et_node *n, const char *name, const double *v, int count) {
  et_attr *a = new_attr(f, n, name, ET_A_DOUBLES);
  a->list = g_memdup2(v, sizeof(double) * (size_t)count);
  a->n_list = count;
}

/* The protobuf form of `a` (members owned by `a`; the list wrapper is `dl`, filled here). */
static void attr_to_pb(const et_attr *a, pb_attr *p, ChakraProtoMsg__DoubleList *dl) {
  chakra_proto_msg__attribute_proto__init(p);
  p->name = a->name;
  switch (a->kind) {
  case ET_A_INT:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL;
    p->int64_val = a->i;
    break;
  case ET_A_UINT64:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL;
    p->uint64_val = a->i < 0 ? 0 : (uint64_t)a->i;
    break;
  case ET_A_INT32:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_VAL;
    p->int32_val = (int32_t)CLAMP(a->i, G_MININT32, G_MAXINT32);
    break;
  case ET_A_DOUBLE:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_VAL;
    p->double_val = a->d;
    break;
  case ET_A_BOOL:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL;
    p->bool_val = a->i != 0;
    break;
  case ET_A_STRING:
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL;
    p->string_val = a->s;
    break;
  case ET_A_DOUBLES:
    chakra_proto_msg__double_list__init(dl);
    dl->n_values = (size_t)a->n_list;
    dl->values = a->list;
    p->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_LIST;
    p->double_list = dl;
    break;
  case ET_A_OTHER: break;
  }
}

static void put_record(GByteArray *out, const guint8 *msg, size_t n) {
  guint8 v[5];
  int k = 0;
  size_t x = n;
  do {
    v[k] = (guint8)(x & 0x7f);
    x >>= 7;
    if (x) v[k] |= 0x80;
    k++;
  } while (x && k < 5);
  g_byte_array_append(out, v, (guint)k);
  g_byte_array_append(out, msg, (guint)n);
}

/* Packs `n` attributes `a` into `msgs` (and their list wrappers into `lists`); returns the
 * array of pointers protobuf-c wants. */
static pb_attr **pack_attrs(const et_attr *a, int n, pb_attr *msgs,
                            ChakraProtoMsg__DoubleList *lists) {
  pb_attr **ptrs = g_new(pb_attr *, n ? n : 1);
  for (int i = 0; i < n; i++) {
    attr_to_pb(&a[i], &msgs[i], &lists[i]);
    ptrs[i] = &msgs[i];
  }
  return ptrs;
}

gboolean et_write(const et_file *f, GError **err) {
  GByteArray *out = g_byte_array_new();
  pb_meta m;
  chakra_proto_msg__global_metadata__init(&m);
  m.version = f->version;
  pb_attr *ma = g_new(pb_attr, f->n_meta ? f->n_meta : 1);
  ChakraProtoMsg__DoubleList *ml = g_new(ChakraProtoMsg__DoubleList, f->n_meta ? f->n_meta : 1);
  m.n_attr = (size_t)f->n_meta;
  m.attr = pack_attrs(f->meta, f->n_meta, ma, ml);
  size_t sz = chakra_proto_msg__global_metadata__get_packed_size(&m);
  guint8 *buf = g_malloc(sz ? sz : 1);
  chakra_proto_msg__global_metadata__pack(&m, buf);
  put_record(out, buf, sz);
  g_free(buf);
  g_free(m.attr);
  g_free(ma);
  g_free(ml);
  for (int i = 0; i < f->n_nodes; i++) {
    const et_node *x = &f->nodes[i];
    pb_node pn;
    chakra_proto_msg__node__init(&pn);
    pn.id = x->id;
    pn.name = x->name;
    pn.type = (ChakraProtoMsg__NodeType)x->type;
    pn.n_ctrl_deps = (size_t)x->n_ctrl;
    pn.ctrl_deps = x->ctrl_deps;
    pn.n_data_deps = (size_t)x->n_data;
    pn.data_deps = x->data_deps;
    pn.duration_micros = x->duration_us;
    pb_attr *na = g_new(pb_attr, x->n_attrs ? x->n_attrs : 1);
    ChakraProtoMsg__DoubleList *nl = g_new(ChakraProtoMsg__DoubleList, x->n_attrs ? x->n_attrs : 1);
    pn.n_attr = (size_t)x->n_attrs;
    pn.attr = pack_attrs(x->attrs, x->n_attrs, na, nl);
    sz = chakra_proto_msg__node__get_packed_size(&pn);
    buf = g_malloc(sz ? sz : 1);
    chakra_proto_msg__node__pack(&pn, buf);
    put_record(out, buf, sz);
    g_free(buf);
    g_free(pn.attr);
    g_free(na);
    g_free(nl);
  }
  gboolean ok = dl_write_file_atomic(f->path, (const char *)out->data, out->len, err);
  g_byte_array_free(out, TRUE);
  return ok;
}
