/* sweep.h — the pure half of `dlsim sweep`: a spec of axes expanded into `dlsim run`
 * configurations, the rows they produce, and the CSV/JSONL files that hold them.
 *
 * Spec (JSON):
 *   { "fixed": { OPTION: VALUE, ... },
 *     "axes":  { OPTION: [VALUE, ...], NAME: [ { OPTION: VALUE, ..., "label": "..." }, ... ] } }
 * OPTION is a `dlsim run` option without its dashes (`grid_layers` or `grid-layers`), or
 * `batch_per_gpu` (batch = batch_per_gpu × gpus). An axis whose values are objects sets several
 * options at once (a strategy); its "label" (default "k=v,k=v") names the choice in the rows.
 * Each option is set by one source only (fixed or one axis). Expansion is the Cartesian product
 * in the spec's order, the last axis varying fastest.
 *
 * Key: the canonical option list of a configuration ("--workload x --gpus 8 ..."), options in
 * one fixed order; equal keys are one configuration (the first one expanded is kept).
 *
 * Files: one CSV row and one JSONL line per key, each written with one write() of a whole line,
 * so an interrupted sweep leaves at most a partial last line, which sweep_store_open() drops. A key
 * is done when both files hold it; rows of keys that are not done are dropped on open.
 */
#ifndef SWEEP_H
#define SWEEP_H

#include <cjson/cJSON.h>
#include <glib.h>

typedef struct {
  char *key;   /* canonical option list: identifies the configuration across runs */
  char **args; /* `dlsim run` options (NULL-terminated, g_strfreev), without --out */
  char *label; /* labels of the object-valued axes' choices joined by "/", "" if none */
  char **vals; /* per option of the spec table (sweep_n_options()), its text, NULL = not set */
} sweep_config;

/* Expands the spec text (`name` is the file, used in messages) into a newly allocated array of
 * sweep_config* (g_ptr_array_unref frees everything). NULL with DL_ERR_INPUT naming the JSON path
 * (`spec.json: axes.strategy[1].foo: unknown option ...`) on bad input. */
GPtrArray *sweep_expand(const char *text, const char *name, GError **err);

/* Keeps the configurations of shard i of n (index mod n == i), in place. */
void sweep_shard(GPtrArray *configs, int i, int n);

/* Parses "i/n" (0 <= i < n). FALSE with DL_ERR_INPUT naming --shard otherwise. */
gboolean sweep_shard_parse(const char *text, int *i, int *n, GError **err);

/* The CSV header line, with its '\n'. Borrowed. */
const char *sweep_csv_header(void);

/* The CSV row (with '\n') of a configuration: status "ok" with `result` (the run's result JSON),
 * or "invalid" with `reason` and result NULL. Newly allocated (g_free). */
char *sweep_csv_row(const sweep_config *c, const char *status, const char *reason,
                    const cJSON *result);

/* The JSONL line (with '\n'): key, status, reason, label, options, then the result's members.
 * Newly allocated (g_free). */
char *sweep_jsonl_row(const sweep_config *c, const char *status, const char *reason,
                   const cJSON *result);

/* The first field of a CSV line (unquoted), newly allocated; NULL if the line is malformed. */
char *sweep_csv_first_field(const char *line);

typedef struct {
  int csv_fd;          /* CSV file, opened for append */
  int jsonl_fd;        /* JSONL file, opened for append; -1 = none */
  GHashTable *done;    /* key -> status (both owned): rows present in the files */
  int dropped;         /* lines dropped on open: partial, duplicate or in one file only */
} sweep_store;

/* Opens (creating if needed) the CSV and the JSONL (NULL = none) for appending, after reading the
 * rows already there into `done` and dropping partial last lines, duplicate keys and keys held by
 * one file only (the files are rewritten atomically when anything is dropped). DL_ERR_INPUT when
 * an existing CSV has another header; DL_ERR_IO when a file cannot be written. */
gboolean sweep_store_open(sweep_store *s, const char *csv, const char *jsonl, GError **err);

/* Appends one row to each file, each with one write() of the whole line, then fdatasync. */
gboolean sweep_store_append(sweep_store *s, const char *key, const char *status,
                            const char *csv_line, const char *jsonl_line, GError **err);
void sweep_store_close(sweep_store *s);

/* Merges sweep outputs: `inputs` are CSV files (the JSONL beside each, same name ending in
 * .jsonl, is merged too when it exists). One row per key, the first input holding it wins; rows
 * in a CSV whose key is missing from its JSONL are left out when that JSONL exists. Writes
 * out_csv and out_jsonl (NULL = none) atomically. Returns the number of rows, -1 on error. */
int sweep_merge(const char *out_csv, const char *out_jsonl, char **inputs, GError **err);

#endif
