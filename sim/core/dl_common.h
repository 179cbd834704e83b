/* dl_common.h — what every dlsim module shares: the error domain, the data directory, and
 * name-or-path resolution for workloads, platforms and kernel databases.
 *
 * Errors: library code reports failures through a GError in the DL_ERROR domain and never exits.
 * DL_ERR_INPUT means the user gave something wrong (the CLI exits with status 2 and prints the
 * message on one line); the message names the file, JSON path or option first and says what was
 * expected. DL_ERR_IO is a failure of the system (a file cannot be written); DL_ERR_INTERNAL a bug.
 */
#ifndef DL_COMMON_H
#define DL_COMMON_H

#include <glib.h>
#include <stdint.h>

#define DL_VERSION "0.1.0"

#define DL_ERROR (dl_error_quark())
GQuark dl_error_quark(void);

typedef enum {
  DL_ERR_INPUT = 1, /* bad user input: exit status 2 */
  DL_ERR_IO,        /* the system failed us (write, spawn): exit status 1 */
  DL_ERR_INTERNAL,  /* a bug: exit status 1 */
} dl_error_code;

/* Root of the shipped data (workloads/, platforms/, kernels/db/): $DLSIM_DATA_DIR if set, else the
 * source tree the binary was built from. Borrowed string, valid for the whole run. */
const char *dl_datadir(void);

/* Resolves NAME to a file: if NAME names an existing file (or contains a '/'), it is used as is;
 * otherwise it is looked up as <datadir>/<subdir>/<NAME><ext>. Returns a newly allocated path
 * (caller frees with g_free) or NULL with DL_ERR_INPUT naming `what` (e.g. "--workload") and the
 * names available under <datadir>/<subdir>. */
char *dl_resolve(const char *what, const char *subdir, const char *name, const char *ext,
                 GError **err);

/* Reads a whole file into a newly allocated NUL-terminated string (g_free). DL_ERR_INPUT if it
 * is not a regular file (a FIFO, a device: never waited on), cannot be read (a user-named file),
 * with the path and the system's reason, or is larger than DL_MAX_INPUT_BYTES. */
#define DL_MAX_INPUT_BYTES (256 << 20)
char *dl_read_file(const char *path, gsize *len, GError **err);

/* Writes `data` to `path` as `cp` would, but atomically where it can: through symbolic links to
 * their target; a regular file (or none) is replaced by a temporary file beside it renamed into
 * place, so a failure never leaves a half-written file; a device or pipe is written through. A
 * directory is refused. DL_ERR_IO on failure. */
gboolean dl_write_file_atomic(const char *path, const char *data, gsize len, GError **err);

/* Whether dl_write_file_atomic could write `path`, checked before a run starts: DL_ERR_INPUT
 * "WHAT PATH: ..." when it is a directory, its directory does not exist, or it cannot be
 * written. NULL path: TRUE. */
gboolean dl_check_writable(const char *what, const char *path, GError **err);

/* This machine's physical memory, bytes (0 where the system does not say). */
double dl_phys_mem_bytes(void);

/* Outputs that must not land on an input or on each other: `out_names[i]` (an option such as
 * "--out") writes `outs[i]` (NULL: not given), and `in_names[j]` reads `ins[j]` (NULL: none).
 * Paths are compared as the files they would reach (symbolic links followed, the directory of a
 * file not yet there resolved). DL_ERR_INPUT "--out names the --workload file (PATH)" or
 * "--out and --trace name the same file (PATH)" at the first clash; TRUE when there is none. */
gboolean dl_check_outputs(const char *const *out_names, const char *const *outs, int n_outs,
                          const char *const *in_names, const char *const *ins, int n_ins,
                          GError **err);

/* Whether `prefix` (an --out PREFIX to which extensions are added: `writes` says which) names
 * files rather than a directory: empty, ending in '/', '.' or '..' it would write hidden files
 * such as DIR/.json. FALSE with DL_ERR_INPUT naming --out otherwise. */
gboolean dl_out_prefix_ok(const char *prefix, const char *writes, GError **err);

/* Last non-empty line of `text` (a child's standard error, say), newly allocated (g_free), or
 * "(no message)". */
char *dl_last_line(const char *text);

/* `msg` as one line for a terminal: line breaks and tabs become "\n", "\r", "\t", other control
 * bytes '?'. Newly allocated (g_free). */
char *dl_one_line(const char *msg);

/* Parses `len` bytes of `text` (NUL-terminated at text[len]) as one JSON document. NULL with a
 * one-line DL_ERR_INPUT error "PATH:LINE:COL: malformed JSON near '...'" when it is not JSON,
 * has bytes after the document or a NUL inside, and "PATH: JSONPATH: number out of range" for
 * a number that does not fit a double (1e999): every number a loader sees is finite. Free the
 * result with cJSON_Delete. (The caller includes <cjson/cJSON.h>.) */
struct cJSON;
struct cJSON *dl_json_parse(const char *path, const char *text, gsize len, GError **err);

/* The JSON document in file `path` when the file exists (dl_read_file, then dl_json_parse):
 * TRUE with *root NULL when there is no such file, FALSE with the reader's or parser's error. */
gboolean dl_json_read_optional(const char *path, struct cJSON **root, GError **err);

/* Parses a size with an optional unit suffix: B, KB, MB, GB, TB (10^3) or KiB, MiB, GiB (2^10).
 * Returns FALSE (no error set) when the text is not a size: negative, not finite, or hexadecimal
 * (a size is written in decimal). */
gboolean dl_parse_bytes(const char *text, double *bytes);

/* `s` seconds for a progress line: "42 s", "3 min 05 s", "1 h 02 min". */
void dl_format_duration(char *buf, size_t n, double s);

/* Appends `text` (NULL: nothing) to `s` as one CSV field: RFC 4180 quoting where it holds a
 * comma, a quote or a line break, and line breaks as spaces. */
void dl_csv_field(GString *s, const char *text);

#endif
