/* compare.h — comparing two result documents (the result document, out/result.h), e.g. a real run and
 * its simulation, and attributing the difference of their iteration times (`dlsim compare`,
 * `dlsim validate`).
 *
 * Attribution. With T the iteration time of the slowest rank, C its compute, M all its
 * communication (hidden or not, `comm_s`; exposed + overlapped when absent) and O the
 * communication hidden under compute (breakdown_s.overlapped_comm), the result schema has
 * T = C + (M − O) + bubble + idle. The difference of B from the reference A, relative to T_A, is
 * therefore split exactly into
 *   compute  = (C_B − C_A) / T_A
 *   comm     = (M_B − M_A) / T_A
 *   overlap  = −(O_B − O_A) / T_A            (more hiding, less time)
 *   skew     = total − compute − comm − overlap
 *            = Δ(bubble + idle) / T_A plus whatever a document's breakdown leaves unexplained:
 *              waiting for other ranks.
 * Per phase and per collective the difference is also given as a share of T_B − T_A.
 */
#ifndef DL_COMPARE_H
#define DL_COMPARE_H

#include <glib.h>
#include <stdio.h>

/* X(enum, JSON key under breakdown_s) */
#define COMPARE_PHASE_LIST(X)                   \
  X(COMPARE_COMPUTE, "compute")                 \
  X(COMPARE_EXPOSED_COMM, "exposed_comm")       \
  X(COMPARE_OVERLAPPED_COMM, "overlapped_comm") \
  X(COMPARE_BUBBLE, "bubble")                   \
  X(COMPARE_IDLE, "idle")

typedef enum {
#define COMPARE_X(e, key) e,
  COMPARE_PHASE_LIST(COMPARE_X)
#undef COMPARE_X
  COMPARE_N_PHASES
} compare_phase;

/* One collective kind of a document: all entries with the same op, group and purpose summed. */
typedef struct {
  char *key;      /* "op/group/purpose", owned */
  int calls;      /* calls per iteration */
  double time_s;  /* their summed time per iteration, s */
} compare_coll;

/* What a comparison needs from one result document. */
typedef struct {
  char *path;               /* the file it came from (owned) */
  char *mode;               /* "sim", "real", "analytic" or "" (owned) */
  char *workload;           /* config.workload (owned) */
  int gpus, dp, tp, pp;     /* config degrees (dp/tp/pp 1 when absent) */
  double batch;             /* config.batch, samples */
  double iteration_time_s;  /* T */
  double phase_s[COMPARE_N_PHASES]; /* breakdown_s, s per iteration */
  double comm_s;            /* all communication of the slowest rank, s */
  GArray *colls;            /* compare_coll, in document order of first appearance (owned) */
  GArray *rank_iter_s;      /* double: ranks[].iteration_time_s (owned; may be empty) */
  GArray *rank_compute_s;   /* double: ranks[].compute_s (owned; may be empty) */
} compare_doc;

/* Parses result JSON `text`; `path` names it in messages. NULL with DL_ERR_INPUT naming the file
 * and JSON path: "a.json: breakdown_s.idle: expected a number", "a.json:3:7: malformed JSON"
 * (line and column). Free with compare_doc_free. */
compare_doc *compare_doc_parse(const char *path, const char *text, GError **err);

/* Reads and parses the file at `path` (as compare_doc_parse; unreadable: DL_ERR_INPUT). */
compare_doc *compare_doc_load(const char *path, GError **err);

void compare_doc_free(compare_doc *d); /* NULL ignored */

/* FALSE with DL_ERR_INPUT when the two documents describe different configurations (workload,
 * gpus, batch, dp, tp, pp), naming B's file and JSON path: "b.json: config.gpus: expected 2 (as
 * in a.json), got 4". */
gboolean compare_check_match(const compare_doc *a, const compare_doc *b, GError **err);

/* The relative difference of B from A and its split (see the file comment); fractions of T_A. */
typedef struct {
  double total;   /* (T_B − T_A) / T_A */
  double compute; /* compute part */
  double comm;    /* communication part (all communication time) */
  double overlap; /* hiding part */
  double skew;    /* waiting part: the rest */
} compare_split;

/* Fills `out` for B against reference A (T_A > 0; else every field 0). */
void compare_split_error(const compare_doc *a, const compare_doc *b, compare_split *out);

/* Spread of the per-rank iteration times of `d`: max − min, s (0 with fewer than 2 ranks). */
double compare_rank_spread_s(const compare_doc *d);

/* Prints the comparison: per phase, the split, per collective, per-rank skew (values in ms, the
 * difference B − A and its share of T_B − T_A). */
void compare_print(const compare_doc *a, const compare_doc *b, FILE *out);

/* ---- validation table (`dlsim validate`) ------------------------------------------------------
 */

/* One configuration measured in the reference flavour and predicted in the other. */
typedef struct {
  char *config;      /* name, e.g. "dp2-mlp-small-b256" (owned) */
  int gpus;          /* ranks */
  int repeats;       /* reference runs that succeeded (0: none; the row is a failure) */
  double real_s;     /* median iteration time of the reference runs, s */
  double real_min_s; /* fastest reference run, s */
  double real_max_s; /* slowest reference run, s */
  double sim_s;      /* predicted iteration time, s (< 0: the prediction failed) */
  compare_split split;   /* (sim − real) / real and its parts */
  char *note;        /* why the row has no error figure, or NULL (owned) */
} compare_row;

void compare_row_release(compare_row *r); /* frees the owned strings */

/* Mean and maximum of |split.total| over rows that have both times; *n_used counts them (any
 * output pointer may be NULL). 0 when none. */
void compare_table_stats(const compare_row *rows, int n, double *mean_abs, double *max_abs,
                         int *n_used);

/* The table: config, real (median of repeats, ms), sim (ms), error, and the error split into
 * compute, comm, overlap and skew (% of real), then "mean absolute error X% (max Y%, N configs)"
 * and the part of the error with the largest mean magnitude. */
void compare_table_print(const compare_row *rows, int n, FILE *out);

/* The table as CSV with a header row: config,gpus,repeats,real_s,real_min_s,real_max_s,sim_s,
 * error,err_compute,err_comm,err_overlap,err_skew,note (fractions, not %; empty fields where a
 * figure is missing). analysis/pred_vs_meas.py reads config, real_s, sim_s. Newly allocated. */
char *compare_table_csv(const compare_row *rows, int n);

#endif
