/* describe.c — a workload as JSON and as a table (`dlsim workload`). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "model/workload.h"

static cJSON *shape_json(wl_shape s) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s.c));
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s.h));
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s.w));
  return a;
}

static const char *ref_name(const wl_model *m, int idx) {
  return idx < 0 ? "input" : m->layers[idx].name;
}

char *wl_to_json(const wl_model *m) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "name", m->name);
  cJSON_AddStringToObject(root, "description", m->description);
  cJSON *ds = cJSON_AddObjectToObject(root, "dataset");
  cJSON_AddStringToObject(ds, "name", m->dataset);
  cJSON_AddNumberToObject(ds, "samples", (double)m->dataset_samples);
  cJSON_AddItemToObject(root, "input", shape_json(m->input));
  cJSON_AddNumberToObject(root, "seq_len", (double)m->seq_len);
  cJSON_AddNumberToObject(root, "vocab", (double)m->vocab);
  cJSON_AddNumberToObject(root, "default_batch", (double)m->default_batch);
  cJSON_AddStringToObject(root, "optimizer", wl_optimizer_name(m->optimizer));
  cJSON_AddNumberToObject(root, "n_layers", m->n_layers);
  cJSON_AddNumberToObject(root, "params", (double)m->params);
  cJSON_AddNumberToObject(root, "fwd_flops_per_sample", m->fwd_flops);
  cJSON_AddNumberToObject(root, "bwd_flops_per_sample", m->bwd_flops);
  cJSON_AddNumberToObject(root, "act_elems_per_sample", (double)m->act_elems);
  cJSON_AddNumberToObject(root, "saved_elems_per_sample", (double)m->saved_elems);
  cJSON *layers = cJSON_AddArrayToObject(root, "layers");
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", l->name);
    cJSON_AddStringToObject(o, "kind", wl_layer_kind_name(l->kind));
    cJSON *ins = cJSON_AddArrayToObject(o, "inputs");
    for (int k = 0; k < l->n_inputs; k++)
      cJSON_AddItemToArray(ins, cJSON_CreateString(ref_name(m, l->inputs[k])));
    cJSON_AddItemToObject(o, "in", shape_json(l->in));
    cJSON_AddItemToObject(o, "out", shape_json(l->out));
    switch (l->kind) {
    case WL_CONV2D:
    case WL_MAXPOOL:
    case WL_AVGPOOL:
      cJSON_AddNumberToObject(o, "kernel", l->kh);
      cJSON_AddNumberToObject(o, "stride", l->stride);
      cJSON_AddNumberToObject(o, "padding", l->pad);
      if (l->kind == WL_CONV2D) {
        cJSON_AddNumberToObject(o, "groups", l->groups);
        cJSON_AddBoolToObject(o, "bias", l->bias);
      }
      break;
    case WL_LINEAR:
      cJSON_AddBoolToObject(o, "bias", l->bias);
      cJSON_AddStringToObject(o, "tp", wl_tp_role_name(l->tp_role));
      if (l->tied_to >= 0) cJSON_AddStringToObject(o, "tied_to", m->layers[l->tied_to].name);
      break;
    case WL_EMBEDDING: cJSON_AddNumberToObject(o, "vocab", (double)l->vocab); break;
    case WL_ATTENTION:
    case WL_ROPE:
      cJSON_AddNumberToObject(o, "heads", l->heads);
      if (l->kv_heads > 0) cJSON_AddNumberToObject(o, "kv_heads", l->kv_heads);
      if (l->kind == WL_ATTENTION && l->flash) cJSON_AddBoolToObject(o, "flash", TRUE);
      if (l->kind == WL_ATTENTION && l->dropout_p > 0)
        cJSON_AddNumberToObject(o, "dropout", l->dropout_p);
      if (l->kind == WL_ROPE) cJSON_AddNumberToObject(o, "theta", l->rope_theta);
      break;
    case WL_LRN: cJSON_AddNumberToObject(o, "size", l->kh); break;
    case WL_MOE:
      cJSON_AddNumberToObject(o, "experts", l->experts);
      cJSON_AddNumberToObject(o, "top_k", l->top_k);
      cJSON_AddNumberToObject(o, "ffn", (double)l->ffn);
      cJSON_AddNumberToObject(o, "capacity_factor", l->capacity_factor);
      cJSON_AddBoolToObject(o, "bias", l->bias);
      if (l->gated) cJSON_AddStringToObject(o, "activation", "swiglu");
      if (l->shared) cJSON_AddNumberToObject(o, "shared_experts", l->shared);
      break;
    default: break;
    }
    if (l->block >= 0) cJSON_AddStringToObject(o, "block", m->block_names[l->block]);
    cJSON_AddNumberToObject(o, "params", (double)l->params);
    cJSON_AddNumberToObject(o, "fwd_flops", l->fwd_flops);
    cJSON_AddNumberToObject(o, "bwd_flops", l->bwd_flops);
    cJSON_AddNumberToObject(o, "out_elems", (double)l->out_elems);
    cJSON_AddNumberToObject(o, "saved_elems", (double)l->saved_elems);
    if (l->mask_bytes > 0) cJSON_AddNumberToObject(o, "mask_bytes", (double)l->mask_bytes);
    cJSON_AddBoolToObject(o, "weighted", l->weighted);
    cJSON_AddItemToArray(layers, o);
  }
  char *raw = cJSON_Print(root);
  char *out = g_strdup(raw);
  cJSON_free(raw);
  cJSON_Delete(root);
  return out;
}

/* 60965224 -> "60,965,224" (newly allocated). */
static char *thousands(int64_t v) {
  char digits[32];
  g_snprintf(digits, sizeof digits, "%" G_GINT64_FORMAT, v < 0 ? -v : v);
  GString *s = g_string_new(v < 0 ? "-" : "");
  const size_t n = strlen(digits);
  for (size_t k = 0; k < n; k++) {
    if (k && (n - k) % 3 == 0) g_string_append_c(s, ',');
    g_string_append_c(s, digits[k]);
  }
  return g_string_free(s, FALSE);
}

void wl_print(const wl_model *m, FILE *out) {
  fprintf(out, "%s: %s\n", m->name, m->description);
  char *in = wl_shape_str(m->input);
  char *samples = thousands(m->dataset_samples);
  fprintf(out, "input %s, dataset %s (%s samples), default batch %" G_GINT64_FORMAT
               ", optimizer %s\n\n",
          in, m->dataset, samples, m->default_batch, wl_optimizer_name(m->optimizer));
  g_free(in);
  g_free(samples);
  int nw = 5; /* name column: as wide as the longest layer name */
  for (int i = 0; i < m->n_layers; i++) nw = MAX(nw, (int)strlen(m->layers[i].name));
  fprintf(out, "%4s  %-*s %-10s %-16s %14s %12s %12s %12s\n", "#", nw, "layer", "kind",
          "out shape", "params", "fwd GFLOP", "bwd GFLOP", "activation");
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    char *shape = wl_shape_str(l->out);
    char *params = thousands(l->params);
    char *act = thousands(l->out_elems);
    fprintf(out, "%4d  %-*s %-10s %-16s %14s %12.6f %12.6f %12s\n", i, nw, l->name,
            wl_layer_kind_name(l->kind), shape, params, l->fwd_flops / 1e9, l->bwd_flops / 1e9,
            act);
    g_free(shape);
    g_free(params);
    g_free(act);
  }
  char *params = thousands(m->params);
  char *act = thousands(m->act_elems);
  char *saved = thousands(m->saved_elems);
  fprintf(out, "%4s  %-*s %-10s %-16s %14s %12.6f %12.6f %12s\n\n", "", nw, "total", "", "", params,
          m->fwd_flops / 1e9, m->bwd_flops / 1e9, act);
  fprintf(out, "total params: %s\n", params);
  int64_t masks = 0;
  for (int i = 0; i < m->n_layers; i++) masks += m->layers[i].mask_bytes;
  fprintf(out, "per sample: %.6f GFLOP forward, %.6f GFLOP backward, %s activation elements, "
               "%s saved for backward",
          m->fwd_flops / 1e9, m->bwd_flops / 1e9, act, saved);
  if (masks > 0) {
    char *mb = thousands(masks);
    fprintf(out, " and %s bytes of dropout masks", mb);
    g_free(mb);
  }
  fputc('\n', out);
  g_free(params);
  g_free(act);
  g_free(saved);
}
