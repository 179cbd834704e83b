/* fuzz.h — what the fuzz targets share: a NUL-terminated copy of the input, and the check that a
 * refused input says why in a DL_ERR_INPUT error (a crash, an internal error or no message at
 * all is a finding). */
#ifndef DL_FUZZ_H
#define DL_FUZZ_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "core/dl_common.h"
#include "model/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *t = g_malloc(size + 1);
  memcpy(t, data, size);
  t[size] = '\0';
  return t;
}

/* A loader said no: it must be an input error with a message. */
static inline void fuzz_refused(GError *e) {
  if (!e || e->domain != DL_ERROR || e->code != DL_ERR_INPUT || !e->message[0]) abort();
  g_error_free(e);
}

/* The workload every kernel-database and option input is tried against (loaded once). */
static inline const wl_model *fuzz_model(const char *name) {
  static GHashTable *models;
  if (!models) models = g_hash_table_new(g_str_hash, g_str_equal);
  wl_model *m = g_hash_table_lookup(models, name);
  if (!m) {
    m = wl_load(name, NULL);
    if (!m) abort(); /* DLSIM_DATA_DIR must point at the repository */
    g_hash_table_insert(models, (gpointer)name, m);
  }
  return m;
}

#endif
