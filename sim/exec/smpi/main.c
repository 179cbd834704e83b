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
  int r, P, status = 2;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  smpi_phase_init(r, P); /* each rank says where it is before any collective */
  smpi_meet();  /* ... all of them (SMPI runs a rank until it blocks) */
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
