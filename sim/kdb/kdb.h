/* kdb.h — the kernel database: measured kernel times (kernels/db/<device>.json, written by
 * `dlsim kbench`) and the lookup every executor uses for a kernel op's duration.
 *
 * A kernel is known by a descriptor (kdb_kernel: its name, the workload layer it belongs to,
 * samples, split, FLOP and bytes); ktime.h makes one from a planner op. An entry is one kernel at
 * one shape: its key (kdb_key), kname ("conv2d.fwd"), precision, FLOP and bytes, and the
 * measured time (median, mean, stddev, repeats). Lookup order:
 *   1. MEASURED, or DERIVED when the entry was scaled from another device's measurement
 *      (kdb_derive): an entry with the op's exact key;
 *   2. INTERPOLATED, from the same shape: the op's key but for its batch (" n=") was measured
 *      at other batch sizes: between two, the achieved rate (samples/s) interpolated linearly
 *      in log(samples); outside them, the nearest one's time scaled by the roofline's ratio
 *      between the two sizes (a larger batch never slower per sample than the largest
 *      measured, a smaller one keeping the launch);
 *   3. INTERPOLATED, from other shapes: entries of the same kname and precision exist: the two
 *      nearest in size (FLOP for GEMM-like kernels, bytes for bandwidth-bound ones) on a log
 *      scale give achieved rates r = size/time; the op's rate is interpolated linearly in
 *      log(size) between them and clamped to the nearer one outside the measured range;
 *      time = size / rate;
 *   4. ESTIMATED: the roofline of the device's spec sheet (gpu_roofline_s); for a GEMM-like
 *      kernel, the database's measured efficiency by size in place of 60 % of peak when it has
 *      a curve for the precision (kdb_gemm_efficiency).
 *
 * File format: {"format": "dlsim-kdb-1", "provenance": {...}, "entries": [{"key", "kname",
 * "precision", "gemm_like", "flops", "bytes", "median_s", "mean_s", "stddev_s", "repeats",
 * "shape", "derived"}, ...]}; "derived" (default false) marks an entry scaled from another
 * device's measurement. A database derived as a whole (kdb_derive) also has provenance.derived =
 * true, and every entry of such a file counts as derived.
 *
 * The device a database's times are for (kdb_device) is the spec-sheet key of gpuspec.h
 * ("h100-sxm", "a100-40gb", ...; "cpu" for the CPU twins): provenance.spec_key, else "cpu" for
 * provenance.backend "cpu", else provenance.device. A run looks its database up by this key and
 * refuses one measured for another device unless asked (ktime_open_db).
 */
#ifndef KDB_H
#define KDB_H

#include <glib.h>

#include "core/gpuspec.h"
#include "model/workload.h"

#define KDB_ORIGINS(X) X(KDB_MEASURED, "measured") X(KDB_DERIVED, "derived") \
  X(KDB_INTERPOLATED, "interpolated") X(KDB_ESTIMATED, "estimated") X(KDB_RECORDED, "recorded")
typedef enum {
#define KDB_ORIGIN_ENUM(e, s) e,
  KDB_ORIGINS(KDB_ORIGIN_ENUM)
#undef KDB_ORIGIN_ENUM
  KDB_N_ORIGINS
} kdb_origin;

const char *kdb_origin_name(kdb_origin o); /* "measured"…; static */

typedef struct kdb kdb;

/* A kernel as the database knows it. */
typedef struct {
  const char *kname;      /* "<layer kind>.<fwd|bwd>" or "<sgd|adam>.step" (borrowed) */
  const wl_layer *layer;  /* the workload layer whose kernel it is; NULL for optimizer steps
                             (borrowed) */
  int64_t samples;        /* samples (or micro-batch) processed */
  int split;              /* the layer's output channels/features are split this many ways */
  int64_t params;         /* optimizer step: parameters updated */
  gboolean gemm_like;     /* compute-bound class: interpolated in FLOP/s, else in bytes/s */
  double flops;           /* FLOP of one call */
  double bytes;           /* bytes moved to and from device memory by one call */
  int seq;                /* context parallelism: the kernel runs 1/seq of the layer's tokens
                             (beyond `split`); for attention, a ring step: 1/seq of the queries
                             against 1/seq of the keys and values. 0 or 1: none */
} kdb_kernel;

/* One measurement. Strings are owned by the database once added. */
typedef struct {
  char *key;            /* kdb_key() of the op */
  char *kname;          /* "<kind>.fwd|bwd|step" */
  gpu_precision prec;    /* compute precision */
  gboolean gemm_like;   /* compute-bound class: interpolated in FLOP/s, else in bytes/s */
  double flops;         /* FLOP of one call */
  double bytes;         /* bytes moved by one call */
  double median_s;      /* median of the repeats, s */
  double mean_s;        /* mean, s */
  double stddev_s;      /* standard deviation, s */
  int repeats;          /* timed repeats */
  char *shape;          /* JSON object text with the shape parameters (may be NULL) */
  gboolean derived;     /* scaled from another device's measurement, not measured here */
} kdb_entry;

/* Loads NAME under <datadir>/kernels/db/NAME.json or a file path
 * (dl_resolve("--kernels", "kernels/db", name, ".json")). NULL with a one-line DL_ERR_INPUT error
 * naming the file and JSON path on failure. Free with kdb_free. */
kdb *kdb_load(const char *name_or_path, GError **err);
/* The same, naming `option` (e.g. "--from") in its messages instead of --kernels. */
kdb *kdb_load_option(const char *option, const char *name_or_path, GError **err);
/* A database file DIR/db/NAME.json may have validation cases beside it, DIR/validation/NAME.json
 * ({"format": "dlsim-validation-1", "kernels": "NAME", "cases": [{"case", "real_s",
 * "predicted_s"}, ...], ...}: real training iterations and dlsim's prediction of each with this
 * database, tests/validation/predict_gpu.py --cases); kdb_load reads them with it, and refuses
 * a malformed one (DL_ERR_INPUT naming the file and JSON path). kdb_validation gives their
 * count (0: none; a database loaded from text, built or derived has none), the real and
 * predicted seconds (borrowed) and NAME. */
int kdb_validation(const kdb *db, const double **real_s, const double **predicted_s,
                   const char **name);
/* The name of validation case i ("gpt-1.7b batch 4 bf16"; "" when it has none; borrowed). */
const char *kdb_validation_case(const kdb *db, int i);

/* The same for the `len` bytes of `text` (NUL-terminated at text[len]) read from `path`. */
kdb *kdb_load_text(const char *path, const char *text, gsize len, GError **err);

/* An empty database named `name` (the device), for kbench to fill. */
kdb *kdb_new(const char *name);

void kdb_free(kdb *db);                 /* NULL ignored */
const char *kdb_name(const kdb *db);    /* borrowed */
int kdb_n_entries(const kdb *db);
const kdb_entry *kdb_entry_at(const kdb *db, int i); /* borrowed; 0 <= i < kdb_n_entries */
gboolean kdb_is_derived(const kdb *db);
/* The spec-sheet key of the device the times are for (see above); borrowed. */
const char *kdb_device(const kdb *db);
/* The file it was loaded from, or NULL for one built in memory (borrowed). */
const char *kdb_path(const kdb *db);
/* The provenance object as compact JSON text (newly allocated, g_free). */
char *kdb_provenance_json(const kdb *db);

/* Adds (or replaces, same key) a copy of `e`. */
void kdb_add(kdb *db, const kdb_entry *e);

/* Sets provenance fields (replacing one of the same name). */
void kdb_set_prov_str(kdb *db, const char *field, const char *value);
void kdb_set_prov_num(kdb *db, const char *field, double value);
void kdb_set_prov_bool(kdb *db, const char *field, gboolean value);
/* A provenance string field, or NULL (borrowed). */
const char *kdb_prov_str(const kdb *db, const char *field);

/* The database as JSON text (newly allocated, g_free); entries sorted by key. */
char *kdb_to_json(const kdb *db);

/* The key of kernel `k`: kname, the layer's shape parameters, samples, split and the precision,
 * e.g. "conv2d.fwd in=3x32x32 out=16x32x32 k=3x3 s=1 p=1 g=1 bias=0 dx=0 n=64 split=1 fp32".
 * Optimizer steps (no layer) are keyed by parameter count: "sgd.step params=669706 fp32".
 * Newly allocated (g_free). */
char *kdb_key(const kdb_kernel *k, gpu_precision prec);

/* For each layer of `m`, the index of the first layer whose kernels have the same keys
 * (kdb_key, whatever the kernel's name, samples, split and precision): a lookup may take the
 * twin for the layer and get the same answer, and a model of identical blocks asks the memo for
 * one block's kernels. Owned by the caller (m->n_layers entries). */
int *kdb_layer_twins(const wl_model *m);

/* The entry whose key is `key`, or NULL (borrowed). */
const kdb_entry *kdb_find(const kdb *db, const char *key);
/* Duration in seconds of kernel `k` at precision `prec`, following the lookup order above. `db`
 * may be NULL (roofline only); `gpu` is the spec sheet for the roofline (NULL with db given: a
 * kernel the database cannot answer costs the roofline of the local CPU sheet). `origin` (may
 * be NULL) says how the time was obtained. */
double kdb_kernel_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k, gpu_precision prec,
                    kdb_origin *origin);
/* The same, and in *cv (may be NULL) the relative spread of the kernel's repeats: the standard
 * deviation over the median of the entry that answered (stddev_s / median_s), between two
 * entries weighted as their rates are, 0 for a roofline estimate. */
double kdb_kernel_spread_s(const kdb *db, const gpu_spec *gpu, const kdb_kernel *k,
                           gpu_precision prec, kdb_origin *origin, double *cv);

/* The framework's host side, when the database carries it ("host", measured with the kernels:
 * tests/validation/torch_micro.py): the host time to launch one kernel op, by kernel ("conv2d.fwd")
 * and precision class (fp32 for fp32/tf32, bf16 for the 16-bit types, which autocast launches),
 * `other_s` for a kernel it does not name; an optimizer step costs fixed_s + per_tensor_s x
 * `tensors` (its parameter tensors). 0 without a table. */
gboolean kdb_has_host(const kdb *db);
double kdb_host_s(const kdb *db, const char *kname, gpu_precision prec, double tensors);
/* Whether kdb_host_s of kernel `kname` depends on its tensors (the optimizer's steps). */
gboolean kdb_host_per_tensor(const char *kname);
/* The GPU's L2 as measured with the database ("l2", tests/validation/torch_micro.py): its size,
 * and the rates at which a kernel reads a buffer evicted from it (cold, as kernels are timed:
 * after a flush) and one just written into it (warm). FALSE without. */
gboolean kdb_l2(const kdb *db, double *bytes, double *cold_Bps, double *warm_Bps);

/* The efficiency (fraction of the spec sheet's peak) a GEMM of `flops` FLOP reaches at `prec`
 * on this database's GPU, from its "gemm_efficiency" curve (measured: torch_micro.py, section
 * gemm): linear in log(FLOP) between measured points, the end points' outside them; -1 without a
 * curve for `prec`. A GEMM-like kernel with no time in the database is then estimated as
 * max(FLOP / (peak x efficiency), the bandwidth roofline + launch) instead of 60 % of peak. */
double kdb_gemm_efficiency(const kdb *db, gpu_precision prec, double flops);

/* host.<field> as a string ("framework", "source"), or NULL. Borrowed. */
const char *kdb_host_str(const kdb *db, const char *field);

/* The factor that turns entry `e`'s time on device `from` into its time on `to`. A GEMM-like
 * kernel keeps its efficiency: R_to / R_from, the ratio of the entry's roofline times (the
 * compute ratio for compute-bound shapes, about 1 for launch-bound ones). Another kernel's time
 * t is its roofline time R_from plus a rest (latency, occupancy, its distance from the memory
 * roofline) that runs on the multiprocessors: t_to = R_to + (t - R_from) x from->sm_ghz /
 * to->sm_ghz; a time at or under R_from scales by R_to / R_from alone. Between an H200 and an H100 (same multiprocessors and clock,
 * 4.8 against 3.35 TB/s) this keeps kernels that do not reach the memory roofline (batch norm,
 * pooling, small tensors) at their own time instead of scaling all of it by the bandwidth
 * ratio (tests/validation/README.md has the measured comparison). */
double kdb_derive_ratio(const kdb_entry *e, const gpu_spec *from, const gpu_spec *to);

/* A database for device `to` derived from `src`, measured on device `from`: every entry's time
 * scaled by kdb_derive_ratio. Every entry is marked derived. Provenance: derived = true,
 * derived_from, device = spec_key = to->name. Newly allocated. */
kdb *kdb_derive(const kdb *src, const gpu_spec *from, const gpu_spec *to);

#endif
