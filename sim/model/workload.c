/* workload.c — loading and validating workloads/NAME.json, deriving per-layer shapes, parameters,
 * FLOPs and activation sizes (conventions in workload.h), and printing a model as a table or as
 * JSON. */
#include "model/workload.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "core/dl_common.h"

static const char *const kind_names[] = {
#define WL_KIND_NAME(id, str) str,
    WL_LAYER_KINDS(WL_KIND_NAME)
#undef WL_KIND_NAME
};

const char *wl_layer_kind_name(wl_layer_kind k) {
  return ((int)k >= 0 && k < WL_N_LAYER_KINDS) ? kind_names[k] : "?";
}

void wl_kernel_name(char *kn, size_t n, wl_layer_kind k, const char *pass) {
  const char *kind = wl_layer_kind_name(k);
  const size_t a = strlen(kind), b = strlen(pass);
  if (a + 1 + b < n) { /* the usual case, in one pass: a planner names a kernel per op */
    memcpy(kn, kind, a);
    kn[a] = '.';
    memcpy(kn + a + 1, pass, b + 1);
    return;
  }
  g_strlcpy(kn, kind, n);
  g_strlcat(kn, ".", n);
  g_strlcat(kn, pass, n);
}

gboolean wl_layer_kind_from_name(const char *name, wl_layer_kind *k) {
  for (int i = 0; i < WL_N_LAYER_KINDS; i++)
    if (strcmp(kind_names[i], name) == 0) {
      *k = (wl_layer_kind)i;
      return TRUE;
    }
  return FALSE;
}

const char *wl_tp_role_name(wl_tp_role r) {
  switch (r) {
  case WL_TP_NONE: return "none";
  case WL_TP_COLUMN: return "column";
  case WL_TP_ROW: return "row";
  }
  return "?";
}

const char *wl_optimizer_name(wl_optimizer o) { return o == WL_OPT_ADAM ? "adam" : "sgd"; }

/* ---- loading context and error reporting ------------------------------------------------- */

typedef struct {
  const char *path;   /* file being loaded, first word of every message */
  GError **err;       /* where the first failure goes */
  wl_model *m;        /* model being filled */
  GHashTable *names;  /* layer name -> index + 1 (borrowed keys) */
  GHashTable *blocks; /* block id -> id + 1 (borrowed keys) */
} loader;

/* Sets the one-line error "<file>: <json path>: <message>" and returns FALSE. */
static gboolean G_GNUC_PRINTF(3, 4) fail(loader *L, const char *jpath, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(L->err, DL_ERROR, DL_ERR_INPUT, "%s: %s: %s", L->path, jpath, msg);
  g_free(msg);
  return FALSE;
}

/* What a JSON value is, for "got ..." in messages (newly allocated). */
static char *describe(const cJSON *v) {
  if (!v) return g_strdup("nothing");
  if (cJSON_IsNumber(v)) return g_strdup_printf("%.17g", v->valuedouble);
  if (cJSON_IsString(v)) return g_strdup_printf("\"%.40s\"", v->valuestring);
  if (cJSON_IsBool(v)) return g_strdup(cJSON_IsTrue(v) ? "true" : "false");
  if (cJSON_IsNull(v)) return g_strdup("null");
  if (cJSON_IsArray(v)) return g_strdup("an array");
  return g_strdup("an object");
}

/* Checks that every key of `obj` is in the NULL-terminated list `allowed`. */
static gboolean check_keys(loader *L, const cJSON *obj, const char *jpath,
                           const char *const *allowed) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    for (const cJSON *b = obj->child; b != it; b = b->next)
      if (strcmp(b->string, it->string) == 0) { /* JSON allows it; which one counts is a guess */
        fail(L, jpath, "key \"%s\" given twice", it->string);
        return FALSE;
      }
    gboolean ok = FALSE;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, it->string) == 0;
    if (!ok) {
      GString *s = g_string_new(NULL);
      for (const char *const *a = allowed; *a; a++)
        g_string_append_printf(s, "%s%s", a == allowed ? "" : ", ", *a);
      fail(L, jpath, "unknown key \"%s\" (allowed here: %s)", it->string, s->str);
      g_string_free(s, TRUE);
      return FALSE;
    }
  }
  return TRUE;
}

/* Reads integer `key` of `obj` into *out, in [lo, hi]. When absent: *out = dflt if !required,
 * else an error. */
static gboolean get_int(loader *L, const cJSON *obj, const char *prefix, const char *key,
                        gboolean required, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  char *jp = g_strdup_printf("%s%s%s", prefix, *prefix ? "." : "", key);
  gboolean ok = TRUE;
  if (!v) {
    if (required)
      ok = fail(L, jp, "missing (expected an integer %" G_GINT64_FORMAT "..%" G_GINT64_FORMAT ")",
                lo, hi);
    else
      *out = dflt;
  } else if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
             v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
    char *got = describe(v);
    ok = fail(L, jp, "expected %s%" G_GINT64_FORMAT "..%" G_GINT64_FORMAT ", got %s",
              cJSON_IsNumber(v) ? "" : "an integer ", lo, hi, got);
    g_free(got);
  } else {
    *out = (int64_t)v->valuedouble;
  }
  g_free(jp);
  return ok;
}

static gboolean get_int32(loader *L, const cJSON *obj, const char *prefix, const char *key,
                          gboolean required, int dflt, int lo, int hi, int *out) {
  int64_t v = 0;
  if (!get_int(L, obj, prefix, key, required, dflt, lo, hi, &v)) return FALSE;
  *out = (int)v;
  return TRUE;
}

/* Reads a number in (lo, hi]. */
static gboolean get_double(loader *L, const cJSON *obj, const char *prefix, const char *key,
                           double dflt, double lo, double hi, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) {
    *out = dflt;
    return TRUE;
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble > lo) || v->valuedouble > hi) {
    char *jp = g_strdup_printf("%s.%s", prefix, key);
    char *got = describe(v);
    fail(L, jp, "expected a number in (%g, %g], got %s", lo, hi, got);
    g_free(got);
    g_free(jp);
    return FALSE;
  }
  *out = v->valuedouble;
  return TRUE;
}

/* Reads string `key` (borrowed into *out; NULL when absent and not required). */
static gboolean get_str(loader *L, const cJSON *obj, const char *prefix, const char *key,
                        gboolean required, const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (!v && !required) return TRUE;
  char *jp = g_strdup_printf("%s%s%s", prefix, *prefix ? "." : "", key);
  gboolean ok = TRUE;
  if (!v) {
    ok = fail(L, jp, "missing (expected a string)");
  } else if (!cJSON_IsString(v) || !*v->valuestring) {
    char *got = describe(v);
    ok = fail(L, jp, "expected a non-empty string, got %s", got);
    g_free(got);
  } else if (!g_utf8_validate(v->valuestring, -1, NULL)) {
    ok = fail(L, jp, "is not UTF-8 text");
  } else {
    for (const char *c = v->valuestring; *c && ok; c++)
      if ((unsigned char)*c < 0x20 || *c == 0x7f) /* names reach terminals and file names */
        ok = fail(L, jp, "holds the control character U+%04X", (unsigned)(unsigned char)*c);
    if (ok) *out = v->valuestring;
  }
  g_free(jp);
  return ok;
}

static gboolean get_bool(loader *L, const cJSON *obj, const char *prefix, const char *key,
                         gboolean dflt, gboolean *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) {
    *out = dflt;
    return TRUE;
  }
  if (!cJSON_IsBool(v)) {
    char *jp = g_strdup_printf("%s.%s", prefix, key);
    char *got = describe(v);
    fail(L, jp, "expected true or false, got %s", got);
    g_free(got);
    g_free(jp);
    return FALSE;
  }
  *out = cJSON_IsTrue(v);
  return TRUE;
}

/* "64x56x56" (newly allocated). */
char *wl_shape_str(wl_shape s) {
  return g_strdup_printf("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, s.c, s.h,
                         s.w);
}

static int64_t shape_elems(wl_shape s) { return s.c * s.h * s.w; }

/* Resolves a layer reference: "input" is the model input (-1); otherwise an earlier layer. */
static gboolean resolve_ref(loader *L, const char *jpath, const char *ref, int *idx) {
  if (strcmp(ref, "input") == 0) {
    *idx = -1;
    return TRUE;
  }
  gpointer p = g_hash_table_lookup(L->names, ref);
  if (!p)
    return fail(L, jpath, "unknown layer \"%s\" (expected \"input\" or the name of an earlier "
                          "layer)", ref);
  *idx = GPOINTER_TO_INT(p) - 1;
  return TRUE;
}

/* ---- per-kind keys ----------------------------------------------------------------------- */

#define COMMON_KEYS "name", "type", "input", "block"
static const char *const keys_conv[] = {COMMON_KEYS, "out_channels", "kernel", "stride",
                                        "padding", "groups", "bias", NULL};
static const char *const keys_linear[] = {COMMON_KEYS, "out_features", "bias", "tp", "tied_to",
                                          NULL};
static const char *const keys_plain[] = {COMMON_KEYS, NULL};
static const char *const keys_dropout[] = {COMMON_KEYS, "p", NULL};
static const char *const keys_maxpool[] = {COMMON_KEYS, "kernel", "stride", "padding", NULL};
static const char *const keys_avgpool[] = {COMMON_KEYS, "kernel", "stride", "padding", "global",
                                           NULL};
static const char *const keys_add[] = {"name", "type", "inputs", "block", NULL};
static const char *const keys_embedding[] = {COMMON_KEYS, "vocab", "out_features", NULL};
static const char *const keys_attention[] = {COMMON_KEYS, "heads", "kv_heads", "flash", "dropout",
                                             NULL};
static const char *const keys_rope[] = {COMMON_KEYS, "heads", "kv_heads", "theta", NULL};
static const char *const keys_moe[] = {COMMON_KEYS, "experts", "top_k", "ffn", "capacity_factor",
                                       "bias", "activation", "shared_experts", NULL};
static const char *const keys_lrn[] = {COMMON_KEYS, "size", NULL};

static const char *const *kind_keys(wl_layer_kind k) {
  switch (k) {
  case WL_CONV2D: return keys_conv;
  case WL_LINEAR: return keys_linear;
  case WL_MAXPOOL: return keys_maxpool;
  case WL_AVGPOOL: return keys_avgpool;
  case WL_ADD: return keys_add;
  case WL_EMBEDDING: return keys_embedding;
  case WL_ATTENTION: return keys_attention;
  case WL_ROPE: return keys_rope;
  case WL_MOE: return keys_moe;
  case WL_LRN: return keys_lrn;
  case WL_DROPOUT: return keys_dropout;
  default: return keys_plain;
  }
}

/* ---- shapes and derived quantities ------------------------------------------------------- */

/* Output side of a window of k with stride s and padding p over n (floor, as PyTorch). */
static int64_t window_out(int64_t n, int k, int s, int p) { return (n + 2 * p - k) / s + 1; }

/* Window layers (conv, pool): checks the window fits, sets out.h, out.w. */
static gboolean window_shape(loader *L, const char *jp, wl_layer *l) {
  if (l->in.h + 2 * l->pad < l->kh || l->in.w + 2 * l->pad < l->kw) {
    char *s = wl_shape_str(l->in);
    fail(L, jp, "kernel %dx%d with padding %d does not fit the input %s", l->kh, l->kw, l->pad, s);
    g_free(s);
    return FALSE;
  }
  l->out.h = window_out(l->in.h, l->kh, l->stride, l->pad);
  l->out.w = window_out(l->in.w, l->kw, l->stride, l->pad);
  return TRUE;
}

gboolean wl_kind_gemm_like(wl_layer_kind k) {
  return k == WL_CONV2D || k == WL_LINEAR || k == WL_ATTENTION || k == WL_MOE;
}

int64_t wl_moe_expert_params(const wl_layer *l) {
  return l->gated ? 3 * l->in.c * l->ffn : 2 * l->in.c * l->ffn + l->ffn + l->in.c;
}

int64_t wl_moe_shared_params(const wl_layer *l) { return l->shared * wl_moe_expert_params(l); }

double wl_moe_expert_flops(const wl_layer *l) {
  const double h = (double)l->in.c, f = (double)l->ffn;
  return l->gated ? 6 * h * f + 5 * f : 4 * h * f + f + h;
}

int64_t wl_moe_router_params(const wl_layer *l) {
  return l->in.c * l->experts + (l->bias ? l->experts : 0);
}

/* ---- one layer --------------------------------------------------------------------------- */

/* A layer being read: where it is in the file and in the model. */
typedef struct {
  loader *L;
  const cJSON *jl;  /* its JSON object */
  wl_layer *l;      /* the layer filled */
  int i;            /* its index */
  char jp[64];      /* its JSON path, "layers[i]" */
} layer_reader;

/* Fails at "<layer path>.<key>". */
static gboolean G_GNUC_PRINTF(3, 4) fail_at(layer_reader *r, const char *key, const char *fmt,
                                             ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  char jk[112];
  g_snprintf(jk, sizeof jk, "%s.%s", r->jp, key);
  fail(r->L, jk, "%s", msg);
  g_free(msg);
  return FALSE;
}

/* Name, type and the keys that type takes. */
static gboolean read_head(layer_reader *r) {
  loader *L = r->L;
  wl_layer *l = r->l;
  if (!cJSON_IsObject(r->jl)) {
    char *got = describe(r->jl);
    fail(L, r->jp, "expected an object, got %s", got);
    g_free(got);
    return FALSE;
  }
  const char *name, *type;
  if (!get_str(L, r->jl, r->jp, "name", TRUE, &name) ||
      !get_str(L, r->jl, r->jp, "type", TRUE, &type))
    return FALSE;
  if (strcmp(name, "input") == 0)
    return fail_at(r, "name", "\"input\" is reserved for the model input");
  if (g_hash_table_contains(L->names, name))
    return fail_at(r, "name", "duplicate layer name \"%s\"", name);
  l->name = g_strdup(name);
  if (!wl_layer_kind_from_name(type, &l->kind)) {
    GString *s = g_string_new(NULL);
    for (int k = 0; k < WL_N_LAYER_KINDS; k++)
      g_string_append_printf(s, "%s%s", k ? ", " : "", kind_names[k]);
    fail_at(r, "type", "unknown layer type \"%s\" (known: %s)", type, s->str);
    g_string_free(s, TRUE);
    return FALSE;
  }
  return check_keys(L, r->jl, r->jp, kind_keys(l->kind));
}

/* The layers it reads (the previous one unless named; two for add) and so its input shape. */
static gboolean read_inputs(layer_reader *r) {
  loader *L = r->L;
  wl_layer *l = r->l;
  char jk[96];
  if (l->kind == WL_ADD) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(r->jl, "inputs");
    g_snprintf(jk, sizeof jk, "%s.inputs", r->jp);
    if (!cJSON_IsArray(in) || cJSON_GetArraySize(in) != 2) {
      char *got = describe(in);
      fail(L, jk, "expected an array of 2 layer names, got %s", got);
      g_free(got);
      return FALSE;
    }
    l->n_inputs = 2;
    for (int k = 0; k < 2; k++) {
      const cJSON *ref = cJSON_GetArrayItem(in, k);
      char jr[112];
      g_snprintf(jr, sizeof jr, "%s[%d]", jk, k);
      if (!cJSON_IsString(ref)) {
        char *got = describe(ref);
        fail(L, jr, "expected a layer name, got %s", got);
        g_free(got);
        return FALSE;
      }
      if (!resolve_ref(L, jr, ref->valuestring, &l->inputs[k])) return FALSE;
    }
  } else {
    const char *ref;
    l->n_inputs = 1;
    l->inputs[0] = r->i - 1;
    if (!get_str(L, r->jl, r->jp, "input", FALSE, &ref)) return FALSE;
    g_snprintf(jk, sizeof jk, "%s.input", r->jp);
    if (ref && !resolve_ref(L, jk, ref, &l->inputs[0])) return FALSE;
  }
  l->in = l->inputs[0] < 0 ? L->m->input : L->m->layers[l->inputs[0]].out;
  l->out = l->in;
  return TRUE;
}

/* The residual block it belongs to, if any: a block's layers are consecutive. */
static gboolean read_block(layer_reader *r) {
  loader *L = r->L;
  wl_model *m = L->m;
  wl_layer *l = r->l;
  const char *block;
  if (!get_str(L, r->jl, r->jp, "block", FALSE, &block)) return FALSE;
  if (!block) return TRUE;
  gpointer p = g_hash_table_lookup(L->blocks, block);
  if (!p) {
    char *own = g_strdup(block);
    g_hash_table_insert(L->blocks, own, GINT_TO_POINTER(m->n_blocks + 1));
    m->block_names = g_renew(char *, m->block_names, m->n_blocks + 1);
    m->block_names[m->n_blocks] = own;
    l->block = m->n_blocks++;
    return TRUE;
  }
  l->block = GPOINTER_TO_INT(p) - 1;
  if (r->i == 0 || m->layers[r->i - 1].block != l->block)
    return fail_at(r, "block", "block \"%s\" is not contiguous (its layers must be consecutive)",
                   block);
  return TRUE;
}

static gboolean read_conv(layer_reader *r) {
  loader *L = r->L;
  wl_layer *l = r->l;
  const cJSON *jl = r->jl;
  const char *jp = r->jp;
  int64_t oc;
  if (!get_int(L, jl, jp, "out_channels", TRUE, 0, 1, 1 << 20, &oc) ||
      !get_int32(L, jl, jp, "kernel", TRUE, 0, 1, 15, &l->kh) ||
      !get_int32(L, jl, jp, "stride", FALSE, 1, 1, 15, &l->stride) ||
      !get_int32(L, jl, jp, "padding", FALSE, 0, 0, 15, &l->pad) ||
      !get_int32(L, jl, jp, "groups", FALSE, 1, 1, 1 << 20, &l->groups) ||
      !get_bool(L, jl, jp, "bias", TRUE, &l->bias))
    return FALSE;
  l->kw = l->kh;
  l->out.c = oc;
  if (l->in.c % l->groups || oc % l->groups)
    return fail_at(r, "groups", "%d groups must divide the input channels (%" G_GINT64_FORMAT
                                ") and out_channels (%" G_GINT64_FORMAT ")",
                   l->groups, l->in.c, oc);
  char jk[96];
  g_snprintf(jk, sizeof jk, "%s.kernel", jp);
  return window_shape(L, jk, l);
}

static gboolean read_pool(layer_reader *r) {
  loader *L = r->L;
  wl_layer *l = r->l;
  const cJSON *jl = r->jl;
  const char *jp = r->jp;
  gboolean global = FALSE;
  if (l->kind == WL_AVGPOOL && !get_bool(L, jl, jp, "global", FALSE, &global)) return FALSE;
  if (global) {
    if (cJSON_HasObjectItem(jl, "kernel") || cJSON_HasObjectItem(jl, "stride") ||
        cJSON_HasObjectItem(jl, "padding"))
      return fail(L, jp, "a global pool takes no kernel, stride or padding");
    l->kh = (int)l->in.h;
    l->kw = (int)l->in.w;
    l->stride = 1;
    l->pad = 0;
  } else {
    if (!get_int32(L, jl, jp, "kernel", TRUE, 0, 1, 15, &l->kh) ||
        !get_int32(L, jl, jp, "stride", FALSE, l->kh, 1, 15, &l->stride) ||
        !get_int32(L, jl, jp, "padding", FALSE, 0, 0, l->kh / 2, &l->pad))
      return FALSE;
    l->kw = l->kh;
  }
  char jk[96];
  g_snprintf(jk, sizeof jk, "%s.kernel", jp);
  return window_shape(L, jk, l);
}

/* A linear tied to `t` (an embedding, or a linear that is not tied itself) maps the same sizes. */
static gboolean check_tied(layer_reader *r, const wl_layer *t, int64_t of) {
  wl_layer *l = r->l;
  if (t->kind == WL_EMBEDDING) {
    if (t->vocab != of || t->out.c != l->in.c)
      return fail_at(r, "tied_to", "embedding \"%s\" is %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                                   " (vocab x dim) but this linear maps %" G_GINT64_FORMAT
                                   " -> %" G_GINT64_FORMAT,
                     t->name, t->vocab, t->out.c, l->in.c, of);
    l->vocab = t->vocab;
    return TRUE;
  }
  if (t->kind == WL_LINEAR && t->tied_to < 0) {
    if (t->in.c != l->in.c || t->out.c != of)
      return fail_at(r, "tied_to", "linear \"%s\" maps %" G_GINT64_FORMAT " -> %" G_GINT64_FORMAT
                                   " but this linear maps %" G_GINT64_FORMAT " -> %"
                                   G_GINT64_FORMAT,
                     t->name, t->in.c, t->out.c, l->in.c, of);
    return TRUE;
  }
  return fail_at(r, "tied_to", "\"%s\" is a %s; weights can be tied to an embedding or an "
                               "untied linear", t->name, wl_layer_kind_name(t->kind));
}

static gboolean read_linear(layer_reader *r) {
  loader *L = r->L;
  wl_layer *l = r->l;
  int64_t of;
  const char *tp, *tied;
  if (!get_int(L, r->jl, r->jp, "out_features", TRUE, 0, 1, INT64_C(1) << 31, &of) ||
      !get_bool(L, r->jl, r->jp, "bias", TRUE, &l->bias) ||
      !get_str(L, r->jl, r->jp, "tp", FALSE, &tp) ||
      !get_str(L, r->jl, r->jp, "tied_to", FALSE, &tied))
    return FALSE;
  l->out.c = of;
  if (tp) {
    if (strcmp(tp, "column") == 0) l->tp_role = WL_TP_COLUMN;
    else if (strcmp(tp, "row") == 0) l->tp_role = WL_TP_ROW;
    else return fail_at(r, "tp", "expected \"column\" or \"row\", got \"%s\"", tp);
  }
  if (!tied) return TRUE;
  char jk[96];
  g_snprintf(jk, sizeof jk, "%s.tied_to", r->jp);
  if (!resolve_ref(L, jk, tied, &l->tied_to)) return FALSE;
  if (l->tied_to < 0) return fail(L, jk, "expected the name of an earlier layer, got \"input\"");
  return check_tied(r, &L->m->layers[l->tied_to], of);
}

static gboolean read_embedding(layer_reader *r) {
  wl_layer *l = r->l;
  int64_t dim;
  if (!get_int(r->L, r->jl, r->jp, "vocab", TRUE, 0, 1, INT64_C(1) << 31, &l->vocab) ||
      !get_int(r->L, r->jl, r->jp, "out_features", TRUE, 0, 1, INT64_C(1) << 24, &dim))
    return FALSE;
  if (l->in.c != 1) {
    char *s = wl_shape_str(l->in);
    fail_at(r, "input", "an embedding reads token ids (1 channel), got shape %s", s);
    g_free(s);
    return FALSE;
  }
  l->out.c = dim;
  return TRUE;
}

/* heads and kv_heads of attention or rope, and the head width from the fused QKV input. */
static gboolean read_heads(layer_reader *r, gboolean kv_required) {
  wl_layer *l = r->l;
  if (!get_int32(r->L, r->jl, r->jp, "heads", TRUE, 0, 1, 1024, &l->heads) ||
      !get_int32(r->L, r->jl, r->jp, "kv_heads", kv_required, 0, 1, l->heads, &l->kv_heads))
    return FALSE;
  if (l->kv_heads > 0) {
    if (l->heads % l->kv_heads)
      return fail_at(r, "kv_heads", "%d key/value heads must divide the %d query heads",
                     l->kv_heads, l->heads);
    const int64_t units = l->heads + 2 * (int64_t)l->kv_heads;
    if (l->in.c % units)
      return fail_at(r, "input", "grouped-query attention reads (heads + 2·kv_heads)·head_dim "
                                 "= %" G_GINT64_FORMAT "·head_dim channels, got %" G_GINT64_FORMAT,
                     units, l->in.c);
    l->out.c = l->in.c / units * l->heads;
    return TRUE;
  }
  if (l->in.c % 3)
    return fail_at(r, "input", "attention reads the fused Q, K, V (3·hidden channels), got %"
                               G_GINT64_FORMAT " channels", l->in.c);
  l->out.c = l->in.c / 3;
  if (l->out.c % l->heads)
    return fail_at(r, "heads", "%d heads must divide the hidden size %" G_GINT64_FORMAT, l->heads,
                   l->out.c);
  return TRUE;
}

static gboolean read_attention(layer_reader *r) {
  if (!read_heads(r, FALSE) || !get_bool(r->L, r->jl, r->jp, "flash", FALSE, &r->l->flash) ||
      !get_double(r->L, r->jl, r->jp, "dropout", 0.0, 0.0, 1.0, &r->l->dropout_p))
    return FALSE;
  if (r->l->dropout_p >= 1.0)
    return fail_at(r, "dropout", "expected a probability in [0, 1), got %g", r->l->dropout_p);
  return TRUE;
}

static gboolean read_rope(layer_reader *r) {
  wl_layer *l = r->l;
  if (!read_heads(r, TRUE) ||
      !get_double(r->L, r->jl, r->jp, "theta", 10000.0, 1.0, 1e12, &l->rope_theta))
    return FALSE;
  if ((l->out.c / l->heads) % 2)
    return fail_at(r, "heads", "rotary embeddings rotate pairs: the head width %" G_GINT64_FORMAT
                   " must be even", l->out.c / l->heads);
  l->out = l->in; /* same channels: Q and K rotated, V copied */
  return TRUE;
}

static gboolean read_swiglu(layer_reader *r) {
  wl_layer *l = r->l;
  if (l->in.c % 2)
    return fail_at(r, "input", "swiglu reads gate and up channels in pairs, got %" G_GINT64_FORMAT
                   " channels", l->in.c);
  l->out.c = l->in.c / 2;
  return TRUE;
}

static gboolean read_moe(layer_reader *r) {
  wl_layer *l = r->l;
  const char *act = "gelu";
  if (!get_int32(r->L, r->jl, r->jp, "experts", TRUE, 0, 1, 4096, &l->experts) ||
      !get_int32(r->L, r->jl, r->jp, "top_k", TRUE, 0, 1, l->experts, &l->top_k) ||
      !get_int(r->L, r->jl, r->jp, "ffn", TRUE, 0, 1, INT64_C(1) << 24, &l->ffn) ||
      !get_double(r->L, r->jl, r->jp, "capacity_factor", 1.0, -INFINITY, INFINITY,
                  &l->capacity_factor) ||
      !get_bool(r->L, r->jl, r->jp, "bias", FALSE, &l->bias) ||
      !get_int32(r->L, r->jl, r->jp, "shared_experts", FALSE, 0, 0, 4096, &l->shared) ||
      !get_str(r->L, r->jl, r->jp, "activation", FALSE, &act))
    return FALSE;
  if (!(l->capacity_factor >= 0 && l->capacity_factor <= 64)) /* 0: no limit (dropless MoE) */
    return fail_at(r, "capacity_factor", "expected 0 (no limit) or a factor up to 64, got %g",
                   l->capacity_factor);
  if (act && strcmp(act, "gelu") && strcmp(act, "swiglu"))
    return fail_at(r, "activation", "expected \"gelu\" or \"swiglu\", got \"%s\"", act);
  l->gated = act && strcmp(act, "swiglu") == 0;
  return TRUE;
}

static gboolean read_lrn(layer_reader *r) {
  wl_layer *l = r->l;
  if (!get_int32(r->L, r->jl, r->jp, "size", FALSE, 5, 1, 15, &l->kh)) return FALSE;
  l->kw = l->kh;
  if (l->kh % 2 == 0) return fail_at(r, "size", "expected an odd window 1..15, got %d", l->kh);
  return TRUE;
}

static gboolean read_dropout(layer_reader *r) {
  double p;
  if (!get_double(r->L, r->jl, r->jp, "p", 0.5, 0.0, 1.0, &p)) return FALSE;
  if (p >= 1.0) return fail_at(r, "p", "expected a probability in (0, 1), got %g", p);
  return TRUE;
}

static gboolean read_add(layer_reader *r) {
  const wl_layer *l = r->l;
  const wl_shape a = l->in;
  const wl_shape b = l->inputs[1] < 0 ? r->L->m->input : r->L->m->layers[l->inputs[1]].out;
  if (a.c == b.c && a.h == b.h && a.w == b.w) return TRUE;
  char *sa = wl_shape_str(a), *sb = wl_shape_str(b);
  fail_at(r, "inputs", "shapes differ: %s vs %s", sa, sb);
  g_free(sa);
  g_free(sb);
  return FALSE;
}

/* What each kind reads beyond the common keys, and its output shape. */
static gboolean read_kind(layer_reader *r) {
  wl_layer *l = r->l;
  switch (l->kind) {
  case WL_CONV2D: return read_conv(r);
  case WL_MAXPOOL:
  case WL_AVGPOOL: return read_pool(r);
  case WL_LINEAR: return read_linear(r);
  case WL_EMBEDDING: return read_embedding(r);
  case WL_ATTENTION: return read_attention(r);
  case WL_ROPE: return read_rope(r);
  case WL_SWIGLU: return read_swiglu(r);
  case WL_MOE: return read_moe(r);
  case WL_LRN: return read_lrn(r);
  case WL_DROPOUT: return read_dropout(r);
  case WL_ADD: return read_add(r);
  case WL_FLATTEN:
    l->out.c = shape_elems(l->in);
    l->out.h = l->out.w = 1;
    return TRUE;
  default: return TRUE;
  }
}

/* Per-sample sizes and per-layer parameters are bounded (2^40), so that every count the model
 * and the planner multiply stays exact in a double and far from int64's end. */
#define WL_MAX_COUNT 1099511627776.0 /* 2^40 */

/* Fills params, FLOPs, out_elems, saved_elems and weighted from the shapes (workload.h); counts
 * are formed in doubles first and refused past WL_MAX_COUNT. */
static gboolean derive(layer_reader *r) {
  wl_layer *l = r->l;
  const double in_e = (double)l->in.c * (double)l->in.h * (double)l->in.w;
  const double out_e = (double)l->out.c * (double)l->out.h * (double)l->out.w;
  if (in_e > WL_MAX_COUNT || out_e > WL_MAX_COUNT) {
    char *si = wl_shape_str(l->in), *so = wl_shape_str(l->out);
    fail(r->L, r->jp, "its input %s or output %s has more than 2^40 elements per sample", si, so);
    g_free(si);
    g_free(so);
    return FALSE;
  }
  const double pos = (double)l->in.h * (double)l->in.w;
  const gboolean no_dx = l->inputs[0] == -1; /* the model input needs no gradient */
  double gemm = 0;                           /* FLOPs of the forward GEMM(s), no bias */
  double params = 0, saved = 0, mask = 0;
  l->weighted = FALSE;
  switch (l->kind) {
  case WL_CONV2D: {
    const double cin_g = (double)(l->in.c / l->groups);
    gemm = 2.0 * cin_g * l->kh * l->kw * (double)l->out.c * (double)(l->out.h * l->out.w);
    params = cin_g * l->kh * l->kw * (double)l->out.c + (l->bias ? (double)l->out.c : 0);
    l->fwd_flops = gemm + (l->bias ? out_e : 0);
    l->bwd_flops = (no_dx ? 1 : 2) * gemm + (l->bias ? out_e : 0);
    saved = in_e;
    l->weighted = TRUE;
    break;
  }
  case WL_LINEAR:
    gemm = 2.0 * (double)l->in.c * (double)l->out.c * pos;
    params = (l->tied_to >= 0 ? 0 : (double)l->in.c * (double)l->out.c) +
             (l->bias ? (double)l->out.c : 0);
    l->fwd_flops = gemm + (l->bias ? out_e : 0);
    l->bwd_flops = (no_dx ? 1 : 2) * gemm + (l->bias ? out_e : 0);
    saved = in_e;
    l->weighted = TRUE;
    break;
  case WL_BATCHNORM:
  case WL_LAYERNORM:
    params = 2.0 * (double)l->in.c;
    l->fwd_flops = l->bwd_flops = 5 * out_e;
    saved = in_e;
    l->weighted = TRUE;
    break;
  case WL_RMSNORM:
    params = (double)l->in.c;
    l->fwd_flops = 4 * out_e;
    l->bwd_flops = 7 * out_e;
    saved = in_e;
    l->weighted = TRUE;
    break;
  case WL_SWIGLU:
    l->fwd_flops = 5 * out_e;
    l->bwd_flops = 11 * out_e;
    saved = in_e;
    break;
  case WL_ROPE: {
    const int kv = wl_kv_heads(l);
    const double head_dim = (double)(l->in.c / (l->heads + 2 * kv));
    const double rotated = (double)(l->heads + kv) * head_dim * pos; /* Q and K, not V */
    l->fwd_flops = l->bwd_flops = 3 * rotated;
    break;
  }
  case WL_EMBEDDING:
    params = (double)l->vocab * (double)l->out.c;
    l->fwd_flops = 0;
    l->bwd_flops = out_e;
    saved = in_e;
    l->weighted = TRUE;
    break;
  case WL_RELU:
    l->fwd_flops = l->bwd_flops = out_e;
    saved = out_e;
    break;
  case WL_DROPOUT:
    l->fwd_flops = l->bwd_flops = out_e;
    mask = out_e; /* a bool per element */
    break;
  case WL_GELU:
    l->fwd_flops = l->bwd_flops = 8 * out_e;
    saved = in_e;
    break;
  case WL_ADD:
    l->fwd_flops = l->bwd_flops = out_e;
    break;
  case WL_FLATTEN:
    l->fwd_flops = l->bwd_flops = 0;
    break;
  case WL_SOFTMAX_CE:
    l->fwd_flops = 5 * out_e;
    l->bwd_flops = 2 * out_e;
    saved = out_e;
    break;
  case WL_LRN:
    l->fwd_flops = l->bwd_flops = (2.0 * l->kh + 3) * out_e;
    saved = in_e + out_e;
    break;
  case WL_MAXPOOL:
    l->fwd_flops = (double)l->kh * l->kw * out_e;
    l->bwd_flops = in_e;
    saved = out_e;
    break;
  case WL_AVGPOOL:
    l->fwd_flops = (double)l->kh * l->kw * out_e;
    l->bwd_flops = in_e;
    break;
  case WL_ATTENTION: {
    const double h = (double)l->out.c;
    /* QKᵀ 2·s²·h, softmax ~5·heads·s², AV 2·s²·h (Megatron-LM, Narayanan et al. 2021, §5.1) */
    l->fwd_flops = 4 * pos * pos * h + 5.0 * l->heads * pos * pos;
    /* flash-style backward recomputes QKᵀ (Dao et al. 2022, FlashAttention, §3.1) */
    l->bwd_flops = (l->flash ? 10 : 8) * pos * pos * h + 5.0 * l->heads * pos * pos;
    saved = l->flash ? in_e + out_e + (double)l->heads * pos : in_e + (double)l->heads * pos * pos;
    if (l->dropout_p > 0 && !l->flash) { /* the dropped probabilities and their mask */
      const double probs = (double)l->heads * pos * pos;
      l->fwd_flops += probs;
      l->bwd_flops += probs;
      saved += probs;
      mask = probs;
    }
    break;
  }
  case WL_MOE: {
    const double h = (double)l->in.c, E = l->experts, f = (double)l->ffn;
    /* Switch Transformer (Fedus et al. 2021) / GShard: per token a router h×E and top_k experts
     * of two linears h→ffn→h; Mixtral (Jiang et al. 2024): SwiGLU experts; DeepSeekMoE (Dai et
     * al. 2024): shared experts for every token beside the routed ones. */
    const double k = l->top_k + l->shared;
    params = (E + l->shared) * (double)wl_moe_expert_params(l) + (double)wl_moe_router_params(l);
    /* a GELU expert counts its GEMMs only, as ever; a SwiGLU expert its SwiGLU too */
    const double expert = l->gated ? wl_moe_expert_flops(l) : 4.0 * h * f;
    l->fwd_flops = pos * (2.0 * h * E + k * expert);
    l->bwd_flops = 2 * l->fwd_flops;
    saved = pos * (h + E + k * (h + (l->gated ? 3 : 2) * f));
    l->weighted = TRUE;
    break;
  }
  case WL_N_LAYER_KINDS: break;
  }
  if (params > WL_MAX_COUNT || saved > WL_MAX_COUNT || mask > WL_MAX_COUNT ||
      !isfinite(l->fwd_flops) || !isfinite(l->bwd_flops))
    return fail(r->L, r->jp, "%.3g parameters and %.3g saved elements per sample: more than "
                "2^40 (a shape too large for this layer)", params, saved);
  l->params = (int64_t)params;
  l->saved_elems = (int64_t)saved;
  l->mask_bytes = (int64_t)mask;
  l->out_elems = (int64_t)out_e;
  return TRUE;
}

static gboolean load_layer(loader *L, const cJSON *jl, int i) {
  layer_reader r = {L, jl, &L->m->layers[i], i, ""};
  g_snprintf(r.jp, sizeof r.jp, "layers[%d]", i);
  wl_layer *l = r.l;
  l->inputs[0] = l->inputs[1] = -1;
  l->tied_to = -1;
  l->block = -1;
  l->groups = 1;
  l->stride = 1;
  if (!read_head(&r) || !read_inputs(&r) || !read_block(&r) || !read_kind(&r)) return FALSE;
  g_hash_table_insert(L->names, l->name, GINT_TO_POINTER(i + 1));
  return derive(&r);
}

/* ---- the whole file ---------------------------------------------------------------------- */

static const char *const keys_top[] = {"name", "description", "dataset", "input",
                                       "default_batch", "optimizer", "layers", NULL};
static const char *const keys_dataset[] = {"name", "samples", NULL};
static const char *const keys_image[] = {"c", "h", "w", NULL};
static const char *const keys_seq[] = {"seq_len", "vocab", NULL};

static gboolean load_model(loader *L, const cJSON *root) {
  wl_model *m = L->m;
  const char *s;
  if (!cJSON_IsObject(root)) return fail(L, "(top level)", "expected an object");
  if (!check_keys(L, root, "(top level)", keys_top)) return FALSE;
  if (!get_str(L, root, "", "name", TRUE, &s)) return FALSE;
  m->name = g_strdup(s);
  if (!get_str(L, root, "", "description", TRUE, &s)) return FALSE;
  m->description = g_strdup(s);

  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "dataset");
  if (!cJSON_IsObject(ds)) {
    char *got = describe(ds);
    fail(L, "dataset", "expected an object {\"name\", \"samples\"}, got %s", got);
    g_free(got);
    return FALSE;
  }
  if (!check_keys(L, ds, "dataset", keys_dataset) || !get_str(L, ds, "dataset", "name", TRUE, &s))
    return FALSE;
  m->dataset = g_strdup(s);
  if (!get_int(L, ds, "dataset", "samples", TRUE, 0, 1, INT64_C(1) << 50, &m->dataset_samples))
    return FALSE;

  const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
  if (!cJSON_IsObject(in)) {
    char *got = describe(in);
    fail(L, "input", "expected an object {c, h, w} or {seq_len, vocab}, got %s", got);
    g_free(got);
    return FALSE;
  }
  if (cJSON_HasObjectItem(in, "seq_len")) {
    if (!check_keys(L, in, "input", keys_seq) ||
        !get_int(L, in, "input", "seq_len", TRUE, 0, 1, 1 << 24, &m->seq_len) ||
        !get_int(L, in, "input", "vocab", TRUE, 0, 1, INT64_C(1) << 31, &m->vocab))
      return FALSE;
    m->input = (wl_shape){1, m->seq_len, 1};
  } else {
    if (!check_keys(L, in, "input", keys_image) ||
        !get_int(L, in, "input", "c", TRUE, 0, 1, 1 << 24, &m->input.c) ||
        !get_int(L, in, "input", "h", TRUE, 0, 1, 1 << 16, &m->input.h) ||
        !get_int(L, in, "input", "w", TRUE, 0, 1, 1 << 16, &m->input.w))
      return FALSE;
  }
  if (!get_int(L, root, "", "default_batch", TRUE, 0, 1, 1 << 24, &m->default_batch) ||
      !get_str(L, root, "", "optimizer", TRUE, &s))
    return FALSE;
  if (strcmp(s, "sgd") == 0) m->optimizer = WL_OPT_SGD;
  else if (strcmp(s, "adam") == 0) m->optimizer = WL_OPT_ADAM;
  else return fail(L, "optimizer", "expected \"sgd\" or \"adam\", got \"%s\"", s);

  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
  if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) == 0) {
    char *got = describe(layers);
    fail(L, "layers", "expected a non-empty array of layers, got %s", got);
    g_free(got);
    return FALSE;
  }
  const int n = cJSON_GetArraySize(layers);
  m->layers = g_new0(wl_layer, n);
  const cJSON *jl;
  int i = 0;
  cJSON_ArrayForEach(jl, layers) {
    m->n_layers = i + 1; /* so wl_free releases what this layer already holds */
    if (!load_layer(L, jl, i)) return FALSE;
    const wl_layer *l = &m->layers[i];
    m->params += l->params;
    m->fwd_flops += l->fwd_flops;
    m->bwd_flops += l->bwd_flops;
    m->act_elems += l->out_elems;
    m->saved_elems += l->saved_elems;
    i++;
  }
  return TRUE;
}

/* --seq-len: the token model's input sequence, a learned position table (an embedding of the
 * model input with as many rows as the old sequence) and the dataset's sequences (the same
 * tokens) follow the new length. FALSE with DL_ERR_INPUT for a model without a sequence. */
static gboolean set_seq_len(const char *path, cJSON *root, int64_t S, GError **err) {
  cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
  cJSON *old = in ? cJSON_GetObjectItemCaseSensitive(in, "seq_len") : NULL;
  if (!cJSON_IsNumber(old) || old->valuedouble < 1) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--seq-len %" G_GINT64_FORMAT ": %s is not a token "
                "model (its input has no seq_len)", S, path);
    return FALSE;
  }
  const double was = old->valuedouble;
  cJSON_SetNumberValue(old, (double)S);
  const cJSON *jl;
  cJSON_ArrayForEach(jl, cJSON_GetObjectItemCaseSensitive(root, "layers")) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(jl, "type"),
                *src = cJSON_GetObjectItemCaseSensitive(jl, "input");
    cJSON *v = cJSON_GetObjectItemCaseSensitive(jl, "vocab");
    if (cJSON_IsString(t) && strcmp(t->valuestring, "embedding") == 0 && cJSON_IsString(src) &&
        strcmp(src->valuestring, "input") == 0 && cJSON_IsNumber(v) && v->valuedouble == was)
      cJSON_SetNumberValue(v, (double)S);
  }
  cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "dataset");
  cJSON *n = ds ? cJSON_GetObjectItemCaseSensitive(ds, "samples") : NULL;
  if (cJSON_IsNumber(n) && n->valuedouble >= 1)
    cJSON_SetNumberValue(n, fmax(1.0, ceil(n->valuedouble * was / (double)S)));
  return TRUE;
}

static wl_model *load_text_seq(const char *path, const char *text, gsize len, int64_t seq_len,
                               GError **err) {
  wl_model *m = g_new0(wl_model, 1);
  m->path = g_strdup(path);
  loader L = {m->path, err, m, g_hash_table_new(g_str_hash, g_str_equal),
              g_hash_table_new(g_str_hash, g_str_equal)};
  gboolean ok = FALSE;
  cJSON *root = NULL;
  if (g_strstr_len(text, (gssize)len, "\\u0000")) /* cJSON would cut the string there */
    fail(&L, "(text)", "a string holds U+0000 (\\u0000)");
  else
    root = dl_json_parse(path, text, len, err);
  if (root) {
    ok = (seq_len <= 0 || set_seq_len(path, root, seq_len, err)) && load_model(&L, root);
    cJSON_Delete(root);
  }
  g_hash_table_destroy(L.names);
  g_hash_table_destroy(L.blocks);
  if (!ok) {
    wl_free(m);
    return NULL;
  }
  return m;
}

wl_model *wl_load_text(const char *path, const char *text, gsize len, GError **err) {
  return load_text_seq(path, text, len, 0, err);
}

wl_model *wl_load(const char *name_or_path, GError **err) {
  return wl_load_seq(name_or_path, 0, err);
}

wl_model *wl_load_seq(const char *name_or_path, int64_t seq_len, GError **err) {
  char *path = dl_resolve("--workload", "workloads", name_or_path, ".json", err);
  if (!path) return NULL;
  gsize len = 0;
  char *text = dl_read_file(path, &len, err);
  wl_model *m = text ? load_text_seq(path, text, len, seq_len, err) : NULL;
  g_free(text);
  g_free(path);
  return m;
}

void wl_free(wl_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_layers; i++) g_free(m->layers[i].name);
  g_free(m->layers);
  for (int i = 0; i < m->n_blocks; i++) g_free(m->block_names[i]);
  g_free(m->block_names);
  g_free(m->name);
  g_free(m->description);
  g_free(m->path);
  g_free(m->dataset);
  g_free(m);
}

int wl_find_layer(const wl_model *m, const char *name) {
  for (int i = 0; i < m->n_layers; i++)
    if (strcmp(m->layers[i].name, name) == 0) return i;
  return -1;
}

gboolean wl_has_tp_roles(const wl_model *m) {
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].tp_role != WL_TP_NONE) return TRUE;
  return FALSE;
}
