/* chakra.h — MLCommons Chakra execution traces (ET): one file per rank of a protobuf graph of
 * compute and communication nodes with dependencies (schema: et_def.proto, beside this file).
 *
 * This module reads and writes the files and nothing else: the rest of dlsim sees them as the
 * plain structures below, never as protobuf messages. On disk a file is a sequence of records,
 * each a base-128 varint length then that many bytes of protobuf: first a GlobalMetadata, then
 * Nodes to the end of the file (Chakra's protolib framing; no magic, no count, no gzip).
 *
 * Reading is strict about what dlsim needs and tolerant about the rest: a malformed record, a
 * length past the end of the file, two nodes with one id, or a data dependency on an id the file
 * does not hold is refused with a one-line DL_ERR_INPUT naming the file and the record; unknown
 * fields, unknown attributes and control dependencies on ids the file lacks (Chakra's PyTorch
 * converter leaves those) are kept or ignored.
 */
#ifndef DL_CHAKRA_H
#define DL_CHAKRA_H

#include <glib.h>
#include <stdint.h>

#define ET_VERSION "0.0.4" /* what dlsim writes in GlobalMetadata.version */

/* NodeType, numbered as in the schema. */
typedef enum {
  ET_INVALID = 0,
  ET_METADATA = 1,
  ET_MEM_LOAD = 2,
  ET_MEM_STORE = 3,
  ET_COMP = 4,
  ET_SEND = 5,
  ET_RECV = 6,
  ET_COLL = 7,
} et_type;

/* CollectiveCommType, numbered as in the schema. */
typedef enum {
  ET_ALL_REDUCE = 0,
  ET_REDUCE = 1,
  ET_ALL_GATHER = 2,
  ET_GATHER = 3,
  ET_SCATTER = 4,
  ET_BROADCAST = 5,
  ET_ALL_TO_ALL = 6,
  ET_REDUCE_SCATTER = 7,
  ET_REDUCE_SCATTER_BLOCK = 8,
  ET_BARRIER = 9,
} et_coll_type;

/* ET_A_UINT64 and ET_A_INT32 only say which member a written integer takes; a file read back
 * gives ET_A_INT for every integer member. */
typedef enum {
  ET_A_INT,
  ET_A_DOUBLE,
  ET_A_BOOL,
  ET_A_STRING,
  ET_A_DOUBLES,
  ET_A_OTHER,
  ET_A_UINT64,
  ET_A_INT32
} et_akind;

/* An attribute: any integer member of the oneof is read into i (int32, int64, uint*, sint*,
 * fixed*), float and double into d, bool into i; double lists into list. */
typedef struct {
  char *name;
  et_akind kind;
  int64_t i;
  double d;
  char *s;
  double *list;
  int n_list;
} et_attr;

typedef struct {
  uint64_t id;
  char *name;
  et_type type;
  uint64_t *ctrl_deps, *data_deps;
  int n_ctrl, n_data;
  uint64_t duration_us;
  char *inputs_values; /* a METADATA node's IOInfo inputs.values (PyTorch's process groups), or
                          NULL; other nodes' inputs are not kept */
  et_attr *attrs;
  int n_attrs;
} et_node;

typedef struct {
  char *path;     /* the file, for messages */
  char *version;  /* GlobalMetadata.version ("" when none) */
  et_attr *meta;  /* GlobalMetadata.attr */
  int n_meta;
  et_node *nodes; /* in file order */
  int n_nodes;
} et_file;

/* Reads one trace file. NULL with a one-line DL_ERR_INPUT error on failure. */
et_file *et_read(const char *path, GError **err);
/* The same for the `len` bytes at `data` read from `path` (named in messages). */
et_file *et_read_bytes(const char *path, const char *data, gsize len, GError **err);
void et_free(et_file *f);
/* Frees what node `n` holds (not `n`). */
void et_node_clear(et_node *n);

/* The attribute `name` of node `n` (or of the metadata, et_meta_attr), NULL if absent. */
const et_attr *et_node_attr(const et_node *n, const char *name);
const et_attr *et_meta_attr(const et_file *f, const char *name);
/* A numeric metadata attribute (integer or double), `dflt` when absent or not finite. */
double et_meta_num(const et_file *f, const char *name, double dflt);
/* The schema's name of a CollectiveCommType ("ALL_REDUCE"), "?" when out of range. Static. */
const char *et_coll_type_name(int t);

/* ---- writing --------------------------------------------------------------------------------- */

/* A file being written: add metadata attributes and nodes, then et_write. */
et_file *et_new(const char *path);
et_node *et_add_node(et_file *f, uint64_t id, const char *name, et_type type);
void et_add_dep(et_node *n, gboolean data, uint64_t on);
/* Attributes (of a node, or of the metadata with n == NULL), each in the protobuf member its
 * function names: int64_val, uint64_val, int32_val, double_val, bool_val, string_val,
 * double_list. Chakra's own writers use int64 for comm_type, comm_size and num_ops, uint64 for
 * tensor_size, int32 for comm_src, comm_dst and comm_tag. */
void et_attr_int(et_file *f, et_node *n, const char *name, int64_t v);
void et_attr_uint64(et_file *f, et_node *n, const char *name, uint64_t v);
void et_attr_int32(et_file *f, et_node *n, const char *name, int32_t v);
void et_attr_double(et_file *f, et_node *n, const char *name, double v);
void et_attr_bool(et_file *f, et_node *n, const char *name, gboolean v);
void et_attr_string(et_file *f, et_node *n, const char *name, const char *v);
void et_attr_doubles(et_file *f, et_node *n, const char *name, const double *v, int count);
/* Writes `f` to f->path atomically. DL_ERR_IO on failure. */
gboolean et_write(const et_file *f, GError **err);

#endif
