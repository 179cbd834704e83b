/* main.c — entry point of the SMPI executor `dlsim-smpi` (built by smpicc, run by smpirun).
 *
 * `dlsim-smpi MODE [options]`: MODE picks an entry of the mode table. Every rank parses the same
 * arguments; only rank 0 prints. Run with `smpirun -no-privatize`: the process-wide state below
 * (the scratch-memory kind) is set identically by every rank and read-only afterwards.
 *
 * Mode `coll`: the collective benchmark of coll_bench.c on payload-free SMPI_SHARED_MALLOC
 * buffers with a no-op MPI_Op (SMPI memory folding), unless --check asks for real data.
 * Mode `run`: smpi_exec.c.
 */
#include <mpi.h>
#include <smpi/smpi.h>

#include <cjson/cJSON.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll_mpi.h"
#include "exec/smpi/run.h"

/* ---- scratch memory for the collectives ----------------------------------------------------- */

static gboolean coll_real_data; /* TRUE: real malloc'd memory (--check); set before any call */

int coll_buf_real(int want_real) {
  coll_real_data = want_real != 0;
  return coll_real_data;
}

/* Payload-free scratch is one shared region for every rank and call: its contents mean nothing,
 * and a mapping per call (SMPI_SHARED_MALLOC maps a file) cost more host time than the
 * collective's simulation. It only grows; the old regions stay mapped (a rank may still be
 * sending from them). */
static void *scratch;
static size_t scratch_bytes;

void *coll_buf_alloc(size_t bytes) {
  if (bytes == 0) return NULL;
  if (coll_real_data) return g_malloc(bytes);
  if (bytes > scratch_bytes) {
    scratch_bytes = MAX(bytes, 2 * scratch_bytes);
    scratch = SMPI_SHARED_MALLOC(scratch_bytes);
  }
  return scratch;
}

void coll_buf_free(void *p) {
  if (p && coll_real_data) g_free(p);
}

/* ---- dispatch -------------------------------------------------------------------------------- */

typedef struct {
  const char *name;                /* first argument */
  const char *summary;             /* one line for the usage text */
  int (*fn)(int argc, char **argv); /* argv[0] is the mode name; returns the exit status */
} smpi_mode;

static const smpi_mode modes[] = {
    {"coll", "nccl-tests-style collective benchmark (coll_bench.c)", coll_bench_main},
    {"run", "simulate one training configuration (smpi_exec.c)", smpi_exec_main},
};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, status = 2;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const smpi_mode *m = NULL;
  for (size_t i = 0; argc > 1 && i < G_N_ELEMENTS(modes); i++)
    if (strcmp(argv[1], modes[i].name) == 0) m = &modes[i];
  if (m) {
    status = m->fn(argc - 1, argv + 1);
  } else if (r == 0) {
    fprintf(stderr, "dlsim-smpi: expected a mode as first argument, got '%s'; modes:",
            argc > 1 ? argv[1] : "");
    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) fprintf(stderr, " %s", modes[i].name);
    fprintf(stderr, "\n");
  }
  MPI_Finalize();
  return status;
}
