/* kdb.c — loading, writing, deriving and querying kernel databases (kdb.h). */
#include "kdb/kdb.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"

#define KDB_FORMAT "dlsim-kdb-1"

struct kdb {
  char *name;             /* device name (file stem or provenance.device) */
  GArray *entries;        /* kdb_entry, owned strings */
  GHashTable *by_key;     /* key (its own copy) -> index+1 into entries */
  GHashTable *by_class;   /* "kname prec" -> GArray of int indices (owned key and array) */
  GHashTable *by_shape;   /* the key without its " n=<samples>" -> GArray of int indices: one
                             kernel shape at several batch sizes (owned key and array) */
  cJSON *prov;            /* provenance object (owned) */
  char *path;             /* the file it was loaded from, NULL if none (owned) */
  cJSON *host;            /* the framework's host times ("host"), NULL if none (owned) */
  GHashTable *host_ops;   /* "kname class" -> double * seconds (owned) */
  double host_other_s;    /* a kernel the table does not name */
  double opt_fixed_s[2], opt_tensor_s[2]; /* optimizer steps: sgd, adam */
  cJSON *l2;              /* the GPU's L2 as measured ("l2"), NULL if none (owned) */
  cJSON *gemm_eff;        /* "gemm_efficiency", NULL if none (owned) */
  GArray *eff[GPU_N_PRECISIONS]; /* (log FLOP, efficiency) pairs by rising FLOP, or NULL */
  double l2_bytes, l2_cold_Bps, l2_warm_Bps;
  /* kdb_kernel_s's answers by kernel (memo_key -> memo_val, owned), dropped when an entry is
   * added: a search asks for the same kernels across thousands of layouts */
  GHashTable *memo;
  struct memo_slot *recent; /* the memo's last answers, direct-mapped in front of it (owned) */
  /* the validation cases (kdb_validation): real and predicted seconds, NULL when none (owned) */
  GArray *val_real, *val_pred;
  GPtrArray *val_case; /* their names */
  char *val_name;
};

/* A kdb_kernel and its precision and GPU as plain bytes (zeroed padding), for the memo. */
typedef struct {
  char kname[48];
  const void *layer, *gpu;
  int64_t samples, params;
  double flops, bytes;
  int split, gemm_like, prec, seq;
} memo_key;

typedef struct {
  double t;
  kdb_origin origin;
  double cv; /* relative spread of the repeats (stddev / median) */
} memo_val;

G_STATIC_ASSERT(sizeof(memo_key) % sizeof(guint64) == 0);

/* A slot of the memo's front: one key and its answer, found by a cheap hash of a few of the
 * key's fields; a layout asks again and again for the kernels of each micro-batch, whose slots
 * stay in the caches where the memo's table, grown over many layouts, does not. */
#define MEMO_RECENT 4096 /* slots, a power of two */
typedef struct memo_slot {
  memo_key key;
  memo_val val;
  gboolean used;
} memo_slot;

/* The slot of a kernel in the memo's front, from its fields rather than its memo_key, which is
 * built only when the memo is missed: most asks find their slot. */
static guint recent_index(const kdb_kernel *k, size_t n) {
  guint64 w = 0, f, h = (guint64)(uintptr_t)k->layer * 0x9E3779B97F4A7C15ULL;
  memcpy(&w, k->kname, MIN(n, sizeof w));
  h ^= w * 0xBF58476D1CE4E5B9ULL;
  memcpy(&f, &k->flops, sizeof f);
  h ^= (f + (guint64)k->samples + ((guint64)k->split << 32) + ((guint64)k->seq << 48)) *
       0x94D049BB133111EBULL;
  /* a product carries a difference only upwards: folded down and mixed again, the top bits of
   * the name's word and the FLOP's exponent (a layer's forward and backward) reach the index */
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  return (guint)(h >> 40) & (MEMO_RECENT - 1);
}

static gboolean same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Whether slot `s` holds kernel `k` (name n bytes long) of precision `prec` on `gpu`: the same
 * fields, compared as the memo compares keys (byte for byte). */
static gboolean slot_holds(const memo_slot *s, const kdb_kernel *k, size_t n, const void *gpu,
                           gpu_precision prec) {
  const memo_key *q = &s->key;
  return s->used && q->layer == (const void *)k->layer && q->gpu == gpu &&
         q->samples == k->samples && q->params == k->params && same_bits(q->flops, k->flops) &&
         same_bits(q->bytes, k->bytes) && q->split == k->split && q->gemm_like == k->gemm_like &&
         q->prec == (int)prec && q->seq == k->seq && memcmp(q->kname, k->kname, n + 1) == 0;
}

static guint memo_hash(gconstpointer p) {
  guint64 h = 0x9E3779B97F4A7C15ULL, w;
  for (size_t i = 0; i + sizeof w <= sizeof(memo_key); i += sizeof w) {
    memcpy(&w, (const char *)p + i, sizeof w); /* word by word: the key's padding is zeroed */
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  return (guint)(h ^ (h >> 32));
}

static gboolean memo_equal(gconstpointer a, gconstpointer b) {
  return memcmp(a, b, sizeof(memo_key)) == 0;
}

static const char *const origin_names[] = {
#define KDB_ORIGIN_NAME(e, s) s,
    KDB_ORIGINS(KDB_ORIGIN_NAME)
#undef KDB_ORIGIN_NAME
};

const char *kdb_origin_name(kdb_origin o) {
  return (unsigned)o < KDB_N_ORIGINS ? origin_names[o] : "?";
}

static void class_free(gpointer p) { g_array_free((GArray *)p, TRUE); }

kdb *kdb_new(const char *name) {
  kdb *db = g_new0(kdb, 1);
  db->name = g_strdup(name ? name : "unnamed");
  db->entries = g_array_new(FALSE, TRUE, sizeof(kdb_entry));
  db->by_key = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  db->by_class = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, class_free);
  db->by_shape = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, class_free);
  db->prov = cJSON_CreateObject();
  return db;
}

static void entry_clear(kdb_entry *e) {
  g_free(e->key);
  g_free(e->kname);
  g_free(e->shape);
}

void kdb_free(kdb *db) {
  if (!db) return;
  if (db->val_real) g_array_free(db->val_real, TRUE);
  if (db->val_pred) g_array_free(db->val_pred, TRUE);
  if (db->val_case) g_ptr_array_free(db->val_case, TRUE);
  g_free(db->val_name);
  for (guint i = 0; i < db->entries->len; i++)
    entry_clear(&g_array_index(db->entries, kdb_entry, i));
  g_array_free(db->entries, TRUE);
  g_hash_table_destroy(db->by_key);
  g_hash_table_destroy(db->by_class);
  g_hash_table_destroy(db->by_shape);
  cJSON_Delete(db->prov);
  cJSON_Delete(db->host);
  cJSON_Delete(db->l2);
  cJSON_Delete(db->gemm_eff);
  for (int i = 0; i < GPU_N_PRECISIONS; i++)
    if (db->eff[i]) g_array_free(db->eff[i], TRUE);
  if (db->host_ops) g_hash_table_destroy(db->host_ops);
  if (db->memo) g_hash_table_destroy(db->memo);
  g_free(db->recent);
  g_free(db->name);
  g_free(db->path);
  g_free(db);
}

const char *kdb_name(const kdb *db) { return db->name; }
int kdb_n_entries(const kdb *db) { return (int)db->entries->len; }
const kdb_entry *kdb_entry_at(const kdb *db, int i) {
  return &g_array_index(db->entries, kdb_entry, i);
}

gboolean kdb_is_derived(const kdb *db) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(db->prov, "derived"));
}

const char *kdb_device(const kdb *db) {
  const char *key = kdb_prov_str(db, "spec_key");
  if (key && *key) return key;
  const char *backend = kdb_prov_str(db, "backend");
  if (backend && strcmp(backend, "cpu") == 0) return "cpu";
  const char *dev = kdb_prov_str(db, "device");
  return dev && *dev ? dev : db->name;
}

const char *kdb_path(const kdb *db) { return db->path; }

char *kdb_provenance_json(const kdb *db) {
  char *t = cJSON_PrintUnformatted(db->prov);
  char *out = g_strdup(t);
  cJSON_free(t);
  return out;
}

static char *class_key(const char *kname, gpu_precision p) {
  return g_strdup_printf("%s %s", kname, gpu_precision_name(p));
}

/* `key` without its " n=<samples>" token (newly allocated), and the samples in *n; NULL when the
 * key has none (optimizer steps). */
static char *shape_key(const char *key, int64_t *n) {
  const char *p = strstr(key, " n=");
  if (!p) return NULL;
  char *end = NULL;
  gint64 v = g_ascii_strtoll(p + 3, &end, 10);
  if (end == p + 3 || v <= 0) return NULL;
  *n = v;
  return g_strdup_printf("%.*s%s", (int)(p - key), key, end);
}

static void index_add(GHashTable *h, char *owned_key, int idx) {
  GArray *a = g_hash_table_lookup(h, owned_key);
  if (!a) {
    a = g_array_new(FALSE, FALSE, sizeof(int));
    g_hash_table_insert(h, owned_key, a);
  } else {
    g_free(owned_key);
  }
  g_array_append_val(a, idx);
}

void kdb_add(kdb *db, const kdb_entry *e) {
  if (db->memo) g_hash_table_remove_all(db->memo);
  if (db->recent) memset(db->recent, 0, sizeof(memo_slot) * MEMO_RECENT);
  gpointer idx1 = g_hash_table_lookup(db->by_key, e->key);
  kdb_entry copy = *e;
  copy.key = g_strdup(e->key);
  copy.kname = g_strdup(e->kname);
  copy.shape = g_strdup(e->shape);
  if (idx1) { /* replace in place: same key, same class, same index */
    kdb_entry *old = &g_array_index(db->entries, kdb_entry, GPOINTER_TO_INT(idx1) - 1);
    entry_clear(old);
    *old = copy;
    return;
  }
  g_array_append_val(db->entries, copy);
  int idx = (int)db->entries->len - 1;
  g_hash_table_insert(db->by_key, g_strdup(copy.key), GINT_TO_POINTER(idx + 1));
  index_add(db->by_class, class_key(copy.kname, copy.prec), idx);
  int64_t n;
  char *sk = shape_key(copy.key, &n);
  if (sk) index_add(db->by_shape, sk, idx);
}

void kdb_set_prov_str(kdb *db, const char *field, const char *value) {
  cJSON_DeleteItemFromObjectCaseSensitive(db->prov, field);
  cJSON_AddStringToObject(db->prov, field, value ? value : "");
}

void kdb_set_prov_num(kdb *db, const char *field, double value) {
  cJSON_DeleteItemFromObjectCaseSensitive(db->prov, field);
  cJSON_AddNumberToObject(db->prov, field, value);
}

void kdb_set_prov_bool(kdb *db, const char *field, gboolean value) {
  cJSON_DeleteItemFromObjectCaseSensitive(db->prov, field);
  cJSON_AddBoolToObject(db->prov, field, value);
}

const char *kdb_prov_str(const kdb *db, const char *field) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(db->prov, field);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int entry_cmp(gconstpointer a, gconstpointer b) {
  return strcmp((*(const kdb_entry *const *)a)->key, (*(const kdb_entry *const *)b)->key);
}

char *kdb_to_json(const kdb *db) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", KDB_FORMAT);
  cJSON_AddItemToObject(root, "provenance", cJSON_Duplicate(db->prov, TRUE));
  if (db->host) cJSON_AddItemToObject(root, "host", cJSON_Duplicate(db->host, TRUE));
  if (db->l2) cJSON_AddItemToObject(root, "l2", cJSON_Duplicate(db->l2, TRUE));
  if (db->gemm_eff)
    cJSON_AddItemToObject(root, "gemm_efficiency", cJSON_Duplicate(db->gemm_eff, TRUE));
  cJSON *arr = cJSON_AddArrayToObject(root, "entries");
  GPtrArray *sorted = g_ptr_array_new();
  for (guint i = 0; i < db->entries->len; i++)
    g_ptr_array_add(sorted, &g_array_index(db->entries, kdb_entry, i));
  g_ptr_array_sort(sorted, entry_cmp);
  for (guint i = 0; i < sorted->len; i++) {
    const kdb_entry *e = g_ptr_array_index(sorted, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", e->key);
    cJSON_AddStringToObject(o, "kname", e->kname);
    cJSON_AddStringToObject(o, "precision", gpu_precision_name(e->prec));
    cJSON_AddBoolToObject(o, "gemm_like", e->gemm_like);
    cJSON_AddNumberToObject(o, "flops", e->flops);
    cJSON_AddNumberToObject(o, "bytes", e->bytes);
    cJSON_AddNumberToObject(o, "median_s", e->median_s);
    cJSON_AddNumberToObject(o, "mean_s", e->mean_s);
    cJSON_AddNumberToObject(o, "stddev_s", e->stddev_s);
    cJSON_AddNumberToObject(o, "repeats", e->repeats);
    cJSON *shape = e->shape ? cJSON_Parse(e->shape) : NULL;
    if (shape) cJSON_AddItemToObject(o, "shape", shape);
    if (e->derived) cJSON_AddBoolToObject(o, "derived", TRUE);
    cJSON_AddItemToArray(arr, o);
  }
  g_ptr_array_free(sorted, TRUE);
  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  char *out = g_strconcat(txt, "\n", NULL);
  cJSON_free(txt);
  return out;
}

/* ---- loading ----------------------------------------------------------------------------- */

/* Bounds of what an entry may say: no kernel call runs for hours or moves exabytes; beyond them
 * a file is wrong, and sums of such times would overflow. */
#define KDB_MAX_S 1e4
#define KDB_MAX_FLOPS 1e24
#define KDB_MAX_BYTES 1e18
#define KDB_MAX_REPEATS 1e9
/* No kernel call is timed under a nanosecond, and one that does any work does at least one FLOP
 * and moves at least a byte: below those a time scaled by an entry's rate (interpolation, the
 * roofline ratio of a shape) would be beyond any clock. */
#define KDB_MIN_S 1e-9

/* entries[i].field as a number in [lo, hi] (lo excluded when `open_lo`); `optional` fields may
 * be missing (*v untouched). */
static gboolean get_num(const cJSON *o, const char *field, double *v, const char *path, int i,
                        double lo, gboolean open_lo, double hi, gboolean optional, GError **err) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, field);
  if (!x && optional) return TRUE;
  double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
  if (!(open_lo ? d > lo : d >= lo) || !(d <= hi)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: entries[%d].%s: expected a number in %s%g, %g]",
                path, i, field, open_lo ? "(" : "[", lo, hi);
    return FALSE;
  }
  *v = d;
  return TRUE;
}

/* entries[i].field as 0 or a count in [1, hi] (FLOP, bytes). */
static gboolean get_count(const cJSON *o, const char *field, double *v, const char *path, int i,
                          double hi, GError **err) {
  if (!get_num(o, field, v, path, i, 0, FALSE, hi, FALSE, err)) return FALSE;
  if (*v == 0 || *v >= 1) return TRUE;
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: entries[%d].%s: expected 0 or a number in [1, "
              "%g], got %g", path, i, field, hi, *v);
  return FALSE;
}

static const char *get_str(const cJSON *o, const char *field, const char *path, int i,
                           GError **err) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, field);
  if (!cJSON_IsString(x) || !*x->valuestring) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: entries[%d].%s: expected a string", path, i,
                field);
    return NULL;
  }
  return x->valuestring;
}

/* The file name of `path` without its directory and ".json": a database's default name. */
static char *file_stem(const char *path) {
  char *stem = g_path_get_basename(path);
  if (g_str_has_suffix(stem, ".json")) stem[strlen(stem) - 5] = '\0';
  return stem;
}

/* A host time: a number of seconds in [0, 1] (no framework takes a second to launch a kernel). */
static gboolean host_num(const cJSON *o, const char *field, double *v, const char *path,
                         const char *where, GError **err) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, field);
  double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
  if (!(d >= 0 && d <= 1)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host.%s%s: expected a number of seconds in "
                "[0, 1]", path, where, field);
    return FALSE;
  }
  *v = d;
  return TRUE;
}

/* "host": {"ops_s": {"<kname> <fp32|bf16>": s, ...}, "other_s": s,
 *          "optimizer": {"sgd": {"fixed_s": s, "per_tensor_s": s}, "adam": {...}}, ...} */
static gboolean host_load(kdb *db, const cJSON *host, const char *path, GError **err) {
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(host, "ops_s");
  const cJSON *opt = cJSON_GetObjectItemCaseSensitive(host, "optimizer");
  if (!cJSON_IsObject(host) || !cJSON_IsObject(ops) || !cJSON_IsObject(opt)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host: expected an object with \"ops_s\" and "
                "\"optimizer\" (objects)", path);
    return FALSE;
  }
  if (!host_num(host, "other_s", &db->host_other_s, path, "", err)) return FALSE;
  db->host_ops = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  const cJSON *o;
  cJSON_ArrayForEach(o, ops) {
    double *v = g_new(double, 1);
    g_hash_table_replace(db->host_ops, g_strdup(o->string), v);
    if (!host_num(ops, o->string, v, path, "ops_s.", err)) return FALSE;
  }
  static const char *const names[2] = {"sgd", "adam"};
  for (int k = 0; k < 2; k++) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(opt, names[k]);
    char *where = g_strdup_printf("optimizer.%s.", names[k]);
    gboolean ok = cJSON_IsObject(x) &&
                  host_num(x, "fixed_s", &db->opt_fixed_s[k], path, where, err) &&
                  host_num(x, "per_tensor_s", &db->opt_tensor_s[k], path, where, err);
    if (!cJSON_IsObject(x))
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host.optimizer.%s: expected an object",
                  path, names[k]);
    g_free(where);
    if (!ok) return FALSE;
  }
  db->host = cJSON_Duplicate(host, TRUE);
  return TRUE;
}

/* "l2": {"bytes": B, "cold_read_Bps": r, "warm_read_Bps": w, ...}: w > r > 0, B > 0. */
static gboolean l2_load(kdb *db, const cJSON *l2, const char *path, GError **err) {
  static const char *const f[3] = {"bytes", "cold_read_Bps", "warm_read_Bps"};
  double v[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    const cJSON *x = cJSON_IsObject(l2) ? cJSON_GetObjectItemCaseSensitive(l2, f[k]) : NULL;
    v[k] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    if (!(v[k] > 0 && v[k] < 1e18) || (k == 2 && !(v[2] > v[1]))) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: l2.%s: expected a positive number%s", path,
                  f[k], k == 2 ? " above l2.cold_read_Bps" : "");
      return FALSE;
    }
  }
  db->l2_bytes = v[0];
  db->l2_cold_Bps = v[1];
  db->l2_warm_Bps = v[2];
  db->l2 = cJSON_Duplicate(l2, TRUE);
  return TRUE;
}

gboolean kdb_l2(const kdb *db, double *bytes, double *cold_Bps, double *warm_Bps) {
  if (!db || !db->l2) return FALSE;
  *bytes = db->l2_bytes;
  *cold_Bps = db->l2_cold_Bps;
  *warm_Bps = db->l2_warm_Bps;
  return TRUE;
}

typedef struct {
  double log_flops, eff;
} eff_point;

/* "gemm_efficiency": {"<precision>": [[FLOP, efficiency], ...] by rising FLOP, ...}: the
 * fraction of the spec sheet's peak a GEMM of that many FLOP reached, measured on this
 * database's GPU. FLOP > 0, efficiency in (0, 1]. */
static gboolean eff_load(kdb *db, const cJSON *ge, const char *path, GError **err) {
  if (!cJSON_IsObject(ge)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: gemm_efficiency: expected an object", path);
    return FALSE;
  }
  const cJSON *arr;
  cJSON_ArrayForEach(arr, ge) {
    gpu_precision p;
    if (!gpu_precision_parse(arr->string, &p)) continue; /* "source" and other notes */
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: gemm_efficiency.%s: expected an array of "
                  "[FLOP, efficiency] pairs", path, arr->string);
      return FALSE;
    }
    GArray *a = g_array_new(FALSE, FALSE, sizeof(eff_point));
    if (db->eff[p]) g_array_free(db->eff[p], TRUE);
    db->eff[p] = a;
    int i = 0;
    const cJSON *pt;
    cJSON_ArrayForEach(pt, arr) {
      const cJSON *f = cJSON_GetArrayItem(pt, 0), *e = cJSON_GetArrayItem(pt, 1);
      double fl = cJSON_IsNumber(f) ? f->valuedouble : NAN;
      double ef = cJSON_IsNumber(e) ? e->valuedouble : NAN;
      eff_point q = {log(fl), ef};
      if (!cJSON_IsArray(pt) || cJSON_GetArraySize(pt) != 2 || !(fl > 0 && fl < 1e24) ||
          !(ef > 0 && ef <= 1) ||
          (a->len && !(q.log_flops > g_array_index(a, eff_point, a->len - 1).log_flops))) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: gemm_efficiency.%s[%d]: expected [FLOP, "
                    "efficiency] with FLOP rising and efficiency in (0, 1]", path, arr->string,
                    i);
        return FALSE;
      }
      g_array_append_val(a, q);
      i++;
    }
  }
  db->gemm_eff = cJSON_Duplicate(ge, TRUE);
  return TRUE;
}

double kdb_gemm_efficiency(const kdb *db, gpu_precision prec, double flops) {
  const GArray *a = db && (unsigned)prec < GPU_N_PRECISIONS ? db->eff[prec] : NULL;
  if (!a || !a->len || !(flops > 0)) return -1;
  const double x = log(flops);
  const eff_point *v = (const eff_point *)a->data;
  if (x <= v[0].log_flops) return v[0].eff;
  if (x >= v[a->len - 1].log_flops) return v[a->len - 1].eff;
  guint i = 1;
  while (v[i].log_flops < x) i++;
  const double f = (x - v[i - 1].log_flops) / (v[i].log_flops - v[i - 1].log_flops);
  return v[i - 1].eff + f * (v[i].eff - v[i - 1].eff);
}

gboolean kdb_has_host(const kdb *db) { return db && db->host; }

gboolean kdb_host_per_tensor(const char *kname) {
  return g_str_has_prefix(kname, "sgd.") || g_str_has_prefix(kname, "adam.");
}

double kdb_host_s(const kdb *db, const char *kname, gpu_precision prec, double tensors) {
  if (!db || !db->host) return 0;
  if (kdb_host_per_tensor(kname)) {
    int k = kname[0] == 'a';
    return db->opt_fixed_s[k] + db->opt_tensor_s[k] * tensors;
  }
  char key[64]; /* "<kernel> <bf16|fp32>", without printf: asked once per kernel op */
  g_strlcpy(key, kname, sizeof key);
  g_strlcat(key, prec == GPU_FP16 || prec == GPU_BF16 ? " bf16" : " fp32", sizeof key);
  const double *v = g_hash_table_lookup(db->host_ops, key);
  return v ? *v : db->host_other_s;
}

const char *kdb_host_str(const kdb *db, const char *field) {
  const cJSON *v = db && db->host ? cJSON_GetObjectItemCaseSensitive(db->host, field) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

kdb *kdb_load(const char *name_or_path, GError **err) {
  return kdb_load_option("--kernels", name_or_path, err);
}

/* validation cases beside a database: at most this many (an interval takes each draw times each) */
#define KDB_MAX_CASES 1000

/* The validation cases beside database file `path` (DIR/db/NAME.json: DIR/validation/NAME.json),
 * if that file exists, into db. FALSE with DL_ERR_INPUT naming the file and JSON path when it is
 * malformed. */
static gboolean load_validation(kdb *db, const char *path, GError **err) {
  char *dir = g_path_get_dirname(path), *up = g_path_get_dirname(dir);
  char *base = g_path_get_basename(path);
  char *vpath = g_build_filename(up, "validation", base, NULL);
  char *stem = g_strndup(base, strlen(base) - (g_str_has_suffix(base, ".json") ? 5 : 0));
  cJSON *root = NULL;
  gboolean ok = dl_json_read_optional(vpath, &root, err);
  if (root) {
    const cJSON *f = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    const cJSON *k = root ? cJSON_GetObjectItemCaseSensitive(root, "kernels") : NULL;
    const cJSON *cases = root ? cJSON_GetObjectItemCaseSensitive(root, "cases") : NULL;
    if (ok && (!cJSON_IsString(f) || strcmp(f->valuestring, "dlsim-validation-1") != 0)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: format: expected \"dlsim-validation-1\"",
                  vpath);
      ok = FALSE;
    } else if (ok && (!cJSON_IsString(k) || strcmp(k->valuestring, stem) != 0)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: kernels: expected \"%s\", the database "
                  "beside it", vpath, stem);
      ok = FALSE;
    } else if (ok && (!cJSON_IsArray(cases) || cJSON_GetArraySize(cases) < 2 ||
                      cJSON_GetArraySize(cases) > KDB_MAX_CASES)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cases: expected a list of 2 to %d", vpath,
                  KDB_MAX_CASES);
      ok = FALSE;
    }
    if (ok) {
      db->val_real = g_array_new(FALSE, FALSE, sizeof(double));
      db->val_pred = g_array_new(FALSE, FALSE, sizeof(double));
      db->val_case = g_ptr_array_new_with_free_func(g_free);
      db->val_name = g_strdup(stem);
    }
    for (int i = 0; ok && i < cJSON_GetArraySize(cases); i++) {
      const cJSON *c = cJSON_GetArrayItem(cases, i);
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "case");
      g_ptr_array_add(db->val_case, g_strdup(cJSON_IsString(nm) ? nm->valuestring : ""));
      static const char *const keys[] = {"real_s", "predicted_s"};
      for (int j = 0; j < 2 && ok; j++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, keys[j]);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= KDB_MIN_S) ||
            !(v->valuedouble < KDB_MAX_S)) {
          g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cases[%d].%s: expected seconds in [1e-9, "
                      "1e4)", vpath, i, keys[j]);
          ok = FALSE;
        } else {
          g_array_append_val(j ? db->val_pred : db->val_real, v->valuedouble);
        }
      }
    }
    cJSON_Delete(root);
  }
  g_free(stem);
  g_free(vpath);
  g_free(base);
  g_free(up);
  g_free(dir);
  return ok;
}

kdb *kdb_load_option(const char *option, const char *name_or_path, GError **err) {
  char *path = dl_resolve(option, "kernels/db", name_or_path, ".json", err);
  if (!path) return NULL;
  gsize len = 0;
  char *txt = dl_read_file(path, &len, err);
  kdb *db = txt ? kdb_load_text(path, txt, len, err) : NULL;
  if (db && !load_validation(db, path, err)) g_clear_pointer(&db, kdb_free);
  g_free(txt);
  g_free(path);
  return db;
}

int kdb_validation(const kdb *db, const double **real_s, const double **predicted_s,
                   const char **name) {
  if (!db || !db->val_real) return 0;
  *real_s = (const double *)db->val_real->data;
  *predicted_s = (const double *)db->val_pred->data;
  if (name) *name = db->val_name;
  return (int)db->val_real->len;
}

const char *kdb_validation_case(const kdb *db, int i) {
  return db && db->val_case && i >= 0 && i < (int)db->val_case->len ? db->val_case->pdata[i]
                                                                      : "";
}

kdb *kdb_load_text(const char *path, const char *txt, gsize len, GError **err) {
  kdb *db = NULL, *res = NULL;
  cJSON *root = dl_json_parse(path, txt, len, err);
  if (!root) goto out;
  if (!cJSON_IsObject(root)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected a JSON object", path);
    goto out;
  }
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, KDB_FORMAT) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: format: expected \"%s\"", path, KDB_FORMAT);
    goto out;
  }
  const cJSON *prov = cJSON_GetObjectItemCaseSensitive(root, "provenance");
  const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
  if (!cJSON_IsObject(prov) || !cJSON_IsArray(entries)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected \"provenance\" (object) and "
                "\"entries\" (array)", path);
    goto out;
  }
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(prov, "device");
  char *stem = file_stem(path);
  db = kdb_new(cJSON_IsString(dev) ? dev->valuestring : stem);
  g_free(stem);
  cJSON_Delete(db->prov);
  db->prov = cJSON_Duplicate(prov, TRUE);
  db->path = g_strdup(path);
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(root, "host");
  if (host && !host_load(db, host, path, err)) goto out;
  const cJSON *l2 = cJSON_GetObjectItemCaseSensitive(root, "l2");
  if (l2 && !l2_load(db, l2, path, err)) goto out;
  const cJSON *ge = cJSON_GetObjectItemCaseSensitive(root, "gemm_efficiency");
  if (ge && !eff_load(db, ge, path, err)) goto out;
  const gboolean all_derived = kdb_is_derived(db);
  int i = 0;
  const cJSON *o;
  cJSON_ArrayForEach(o, entries) {
    kdb_entry e;
    memset(&e, 0, sizeof e);
    const char *key = get_str(o, "key", path, i, err);
    const char *kname = key ? get_str(o, "kname", path, i, err) : NULL;
    const char *prec = kname ? get_str(o, "precision", path, i, err) : NULL;
    if (!prec) goto out;
    if (!gpu_precision_parse(prec, &e.prec)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: entries[%d].precision: expected fp32, tf32, "
                  "fp16 or bf16, got \"%s\"", path, i, prec);
      goto out;
    }
    double rep = 0;
    if (!get_count(o, "flops", &e.flops, path, i, KDB_MAX_FLOPS, err) ||
        !get_count(o, "bytes", &e.bytes, path, i, KDB_MAX_BYTES, err) ||
        !get_num(o, "median_s", &e.median_s, path, i, KDB_MIN_S, FALSE, KDB_MAX_S, FALSE, err) ||
        !get_num(o, "repeats", &rep, path, i, 0, FALSE, KDB_MAX_REPEATS, FALSE, err))
      goto out;
    e.mean_s = e.median_s;
    if (!get_num(o, "mean_s", &e.mean_s, path, i, KDB_MIN_S, FALSE, KDB_MAX_S, TRUE, err) ||
        !get_num(o, "stddev_s", &e.stddev_s, path, i, 0, FALSE, KDB_MAX_S, TRUE, err))
      goto out;
    if (g_hash_table_contains(db->by_key, key)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: entries[%d].key: \"%s\" appears twice", path,
                  i, key);
      goto out;
    }
    e.gemm_like = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "gemm_like"));
    e.derived = all_derived || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "derived"));
    e.repeats = (int)rep;
    e.key = (char *)key;
    e.kname = (char *)kname;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    e.shape = shape ? cJSON_PrintUnformatted(shape) : NULL;
    kdb_add(db, &e); /* copies the strings */
    if (e.shape) cJSON_free(e.shape);
    i++;
  }
  res = db;
  db = NULL;
out:
  kdb_free(db);
  cJSON_Delete(root);
  return res;
}

/* ---- keys and lookup --------------------------------------------------------------------- */

char *kdb_key(const kdb_kernel *k, gpu_precision prec) {
  const char *p = gpu_precision_name(prec);
  if (!k->layer)
    return g_strdup_printf("%s params=%" G_GINT64_FORMAT " %s", k->kname, k->params, p);
  const wl_layer *l = k->layer;
  GString *s = g_string_new(k->kname);
  g_string_append_printf(s, " in=%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                         " out=%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
                         l->in.c, l->in.h, l->in.w, l->out.c, l->out.h, l->out.w);
  switch (l->kind) {
  case WL_CONV2D:
    g_string_append_printf(s, " k=%dx%d s=%d p=%d g=%d bias=%d", l->kh, l->kw, l->stride, l->pad,
                           l->groups, l->bias ? 1 : 0);
    break;
  case WL_MAXPOOL:
  case WL_AVGPOOL:
    g_string_append_printf(s, " k=%dx%d s=%d p=%d", l->kh, l->kw, l->stride, l->pad);
    break;
  case WL_LINEAR: g_string_append_printf(s, " bias=%d", l->bias ? 1 : 0); break;
  case WL_LRN: g_string_append_printf(s, " size=%d", l->kh); break;
  case WL_ATTENTION:
  case WL_ROPE:
    g_string_append_printf(s, " heads=%d", l->heads);
    if (l->kv_heads > 0) g_string_append_printf(s, " kv=%d", l->kv_heads);
    if (l->flash) g_string_append(s, " flash=1");
    break;
  case WL_EMBEDDING: g_string_append_printf(s, " vocab=%" G_GINT64_FORMAT, l->vocab); break;
  case WL_MOE:
    g_string_append_printf(s, " E=%d k=%d ffn=%" G_GINT64_FORMAT " cf=%g bias=%d", l->experts,
                           l->top_k, l->ffn, l->capacity_factor, l->bias ? 1 : 0);
    if (l->gated) g_string_append(s, " swiglu=1");
    if (l->shared) g_string_append_printf(s, " shared=%d", l->shared);
    break;
  default: break;
  }
  /* whether backward computes the input gradient (not for the first layer) */
  if (l->weighted) g_string_append_printf(s, " dx=%d", l->inputs[0] >= 0 ? 1 : 0);
  /* a share of the tokens is another shape than a share of the channels of equal work (and a
   * ring step another kernel than the attention of a share of the heads) */
  if (k->seq > 1) g_string_append_printf(s, " seq=%d", k->seq);
  g_string_append_printf(s, " n=%" G_GINT64_FORMAT " split=%d %s", k->samples, k->split, p);
  return g_string_free(s, FALSE);
}

int *kdb_layer_twins(const wl_model *m) {
  int *twin = g_new(int, m->n_layers);
  GHashTable *first = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (int i = 0; i < m->n_layers; i++) {
    /* the key with no name and the same samples, split and precision: what the layer adds */
    const kdb_kernel k = {"", &m->layers[i], 1, 1, 0, FALSE, 0, 0, 0};
    char *part = kdb_key(&k, GPU_FP32);
    char *key = g_strdup_printf("%d%s", (int)m->layers[i].kind, part); /* and of one kind */
    g_free(part);
    gpointer at;
    if (g_hash_table_lookup_extended(first, key, NULL, &at)) {
      twin[i] = GPOINTER_TO_INT(at);
      g_free(key);
    } else {
      twin[i] = i;
      g_hash_table_insert(first, key, GINT_TO_POINTER(i));
    }
  }
  g_hash_table_destroy(first);
  return twin;
}

/* The rate measure of an entry or kernel: FLOP for compute-bound kernels, bytes otherwise (and
 * whenever the FLOP count is zero). */
static double size_of(gboolean gemm_like, double flops, double bytes) {
  return gemm_like && flops > 0 ? flops : bytes;
}

const kdb_entry *kdb_find(const kdb *db, const char *key) {
  gpointer idx1 = db ? g_hash_table_lookup(db->by_key, key) : NULL;
  return idx1 ? kdb_entry_at(db, GPOINTER_TO_INT(idx1) - 1) : NULL;
}

/* The same kernel shape measured at other batch sizes: between two, the achieved rate
 * (samples/s) interpolated linearly in log(samples); outside them, the nearest one's time
 * scaled by the roofline's (its FLOP and bytes at the two sizes, plus the launch), so a larger
 * batch is never slower per sample than the largest measured, and a smaller one keeps the
 * launch. -1 when the shape was measured at no batch size. */
/* An entry's relative spread: the standard deviation of its repeats over their median. */
static double entry_cv(const kdb_entry *e) {
  return e->median_s > 0 && e->stddev_s > 0 && isfinite(e->stddev_s) ? e->stddev_s / e->median_s
                                                                      : 0;
}

static double same_shape_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k,
                           gpu_precision prec, const char *key, double *cv) {
  int64_t n = 0;
  char *sk = shape_key(key, &n);
  GArray *grp = sk ? g_hash_table_lookup(db->by_shape, sk) : NULL;
  g_free(sk);
  if (!grp || n <= 0) return -1;
  const kdb_entry *lo = NULL, *hi = NULL;
  int64_t nlo = 0, nhi = 0;
  for (guint i = 0; i < grp->len; i++) {
    const kdb_entry *e = kdb_entry_at(db, g_array_index(grp, int, i));
    int64_t m = 0;
    char *k2 = shape_key(e->key, &m);
    g_free(k2);
    if (m <= 0 || e->median_s <= 0) continue;
    if (m <= n && (!lo || m > nlo)) lo = e, nlo = m;
    if (m >= n && (!hi || m < nhi)) hi = e, nhi = m;
  }
  if (lo && hi && nhi > nlo) {
    double rlo = (double)nlo / lo->median_s, rhi = (double)nhi / hi->median_s;
    double f = (log((double)n) - log((double)nlo)) / (log((double)nhi) - log((double)nlo));
    *cv = entry_cv(lo) + f * (entry_cv(hi) - entry_cv(lo));
    return (double)n / (rlo + f * (rhi - rlo));
  }
  const kdb_entry *e = lo ? lo : hi;
  if (!e) return -1;
  *cv = entry_cv(e);
  if (!gpu) gpu = gpu_find("cpu");
  return e->median_s * gpu_roofline_s(gpu, prec, k->gemm_like, k->flops, k->bytes) /
         gpu_roofline_s(gpu, prec, k->gemm_like, e->flops, e->bytes);
}

static double lookup_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k, gpu_precision prec,
                       kdb_origin *origin, double *cv);

double kdb_kernel_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k, gpu_precision prec,
                    kdb_origin *origin) {
  return kdb_kernel_spread_s(db, gpu, k, prec, origin, NULL);
}

double kdb_kernel_spread_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k,
                           gpu_precision prec, kdb_origin *origin, double *cv) {
  memo_key key;
  const size_t n = strlen(k->kname);
  double cv_ = 0;
  if (!cv) cv = &cv_;
  if (!db || n >= sizeof key.kname) return lookup_s(db, gpu, k, prec, origin, cv);
  /* the memo is a cache: the database's answers do not change. No lock: dlsim's one thread, or
   * SimGrid's actors, which run one at a time (cfg_simgrid_items_ok refuses parallel ones) */
  kdb *w = (kdb *)db;
  if (!w->memo) w->memo = g_hash_table_new_full(memo_hash, memo_equal, g_free, g_free);
  if (!w->recent) w->recent = g_new0(memo_slot, MEMO_RECENT);
  memo_slot *slot = &w->recent[recent_index(k, n)];
  memo_val got;
  if (slot_holds(slot, k, n, gpu, prec)) {
    got = slot->val;
  } else {
    memset(&key, 0, sizeof key);
    memcpy(key.kname, k->kname, n);
    key.layer = k->layer, key.gpu = gpu, key.samples = k->samples, key.params = k->params;
    key.flops = k->flops, key.bytes = k->bytes, key.split = k->split;
    key.gemm_like = k->gemm_like, key.seq = k->seq, key.prec = prec;
    const memo_val *v = g_hash_table_lookup(w->memo, &key);
    if (v) {
      got = *v;
    } else {
      got.t = lookup_s(db, gpu, k, prec, &got.origin, &got.cv);
      g_hash_table_replace(w->memo, g_memdup2(&key, sizeof key), g_memdup2(&got, sizeof got));
    }
    *slot = (memo_slot){key, got, TRUE};
  }
  if (origin) *origin = got.origin;
  *cv = got.cv;
  return got.t;
}

static double lookup_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k, gpu_precision prec,
                       kdb_origin *origin, double *cv) {
  kdb_origin o = KDB_ESTIMATED;
  double t = -1;
  *cv = 0;
  if (db) {
    char *key = kdb_key(k, prec);
    const kdb_entry *e = kdb_find(db, key);
    if (e) {
      o = e->derived ? KDB_DERIVED : KDB_MEASURED;
      t = e->median_s;
      *cv = entry_cv(e);
    } else if ((t = same_shape_s(db, gpu, k, prec, key, cv)) >= 0) {
      o = KDB_INTERPOLATED;
    }
    g_free(key);
    char *ck = class_key(k->kname, prec);
    GArray *cls = t < 0 ? g_hash_table_lookup(db->by_class, ck) : NULL;
    g_free(ck);
    double x = size_of(k->gemm_like, k->flops, k->bytes);
    if (cls && cls->len > 0 && x > 0) {
      /* nearest measured sizes below and above on a log scale */
      const kdb_entry *lo = NULL, *hi = NULL;
      double slo = 0, shi = 0;
      for (guint i = 0; i < cls->len; i++) {
        const kdb_entry *e = kdb_entry_at(db, g_array_index(cls, int, i));
        double s = size_of(k->gemm_like, e->flops, e->bytes);
        if (s <= 0) continue;
        if (s <= x && (!lo || s > slo)) lo = e, slo = s;
        if (s >= x && (!hi || s < shi)) hi = e, shi = s;
      }
      if (lo || hi) {
        double rate;
        if (lo && hi && shi > slo) {
          double rlo = slo / lo->median_s, rhi = shi / hi->median_s;
          double f = (log(x) - log(slo)) / (log(shi) - log(slo));
          rate = rlo + f * (rhi - rlo);
          *cv = entry_cv(lo) + f * (entry_cv(hi) - entry_cv(lo));
        } else {
          const kdb_entry *e = lo ? lo : hi; /* clamp outside the measured range */
          rate = (lo ? slo : shi) / e->median_s;
          *cv = entry_cv(e);
        }
        o = KDB_INTERPOLATED;
        t = x / rate;
      }
    }
  }
  if (t < 0) {
    if (!gpu) gpu = gpu_find("cpu");
    t = gpu_roofline_s(gpu, prec, k->gemm_like, k->flops, k->bytes);
    const double eff = k->gemm_like ? kdb_gemm_efficiency(db, prec, k->flops) : -1;
    if (eff > 0) { /* the GPU's own efficiency for a GEMM of this size, not the fixed 60 % */
      const double tc = k->flops / (gpu->peak_flops[prec] * eff);
      const double tm = k->bytes / (gpu->mem_bw_bps * GPU_EFF_MEMORY) + GPU_LAUNCH_S;
      t = tc > tm ? tc : tm;
    }
  }
  if (origin) *origin = o;
  return t;
}

double kdb_derive_ratio(const kdb_entry *e, const gpu_spec *from, const gpu_spec *to) {
  double rf = gpu_roofline_s(from, e->prec, e->gemm_like, e->flops, e->bytes);
  double rt = gpu_roofline_s(to, e->prec, e->gemm_like, e->flops, e->bytes);
  double t = e->median_s;
  /* a GEMM-like kernel keeps its distance from the roofline (its efficiency carries over);
   * another kernel's rest runs on the multiprocessors as a whole */
  const double s = from->sm_ghz / to->sm_ghz;
  if (e->gemm_like || !(t > rf) || !(s > 0) || !isfinite(s)) return rt / rf;
  return (rt + (t - rf) * s) / t;
}

kdb *kdb_derive(const kdb *src, const gpu_spec *from, const gpu_spec *to) {
  kdb *db = kdb_new(to->name);
  cJSON_Delete(db->prov);
  db->prov = cJSON_Duplicate(src->prov, TRUE);
  kdb_set_prov_str(db, "device", to->name);
  kdb_set_prov_str(db, "spec_key", to->name);
  kdb_set_prov_str(db, "device_full_name", to->full_name);
  kdb_set_prov_bool(db, "derived", TRUE);
  /* the file it came from (h200-pytorch), else the device (h200) */
  char *stem = src->path ? file_stem(src->path) : g_strdup(src->name);
  kdb_set_prov_str(db, "derived_from", stem);
  g_free(stem);
  kdb_set_prov_str(db, "derived_from_spec", from->name);
  kdb_set_prov_str(db, "derived_method",
                   "each measured time split into the entry's roofline time on the measured "
                   "device and the rest; the roofline part becomes the target's roofline time, "
                   "the rest scales with the ratio of multiprocessors x clock (a time under the "
                   "roofline scales by the roofline ratio alone); spec sheets in "
                   "sim/core/gpuspec.c");
  for (int i = 0; i < kdb_n_entries(src); i++) {
    kdb_entry e = *kdb_entry_at(src, i);
    double r = kdb_derive_ratio(&e, from, to);
    e.median_s *= r;
    e.mean_s *= r;
    e.stddev_s *= r;
    e.derived = TRUE;
    kdb_add(db, &e);
  }
  return db;
}
