/* main.c — entry point of the real executor `dlsim-real` (built with mpicc, run by mpirun).
 *
 * `dlsim-real MODE [options]`: MODE picks an entry of the mode table; only rank 0 prints usage.
 * MPI is initialised for MPI_THREAD_FUNNELED: each rank's compute thread never calls MPI.
 * Collectives get their scratch memory from the heap here (real payloads).
 */
#include <mpi.h>

#include <glib.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll_mpi.h"
#include "kernels.h"
#include "exec/real/run.h"

void *coll_buf_alloc(size_t bytes) { return bytes ? g_malloc(bytes) : NULL; }

void coll_buf_free(void *p) { g_free(p); }

int coll_buf_real(int want_real) {
  (void)want_real;
  return 1; /* real buffers and real sums always */
}

int coll_buf_has_data(void) { return 1; }

void coll_buf_message_level(int on) { (void)on; /* steps always */ }

int coll_ring_phase(const coll_rings *R, int steps, const size_t *bytes, size_t n_bytes,
                    MPI_Comm comm) {
  (void)R, (void)steps, (void)bytes, (void)n_bytes, (void)comm;
  return 0; /* real data moves step by step */
}

void coll_ring_settle(const coll_rings *R, int steps, double chunk_bytes, MPI_Comm comm) {
  (void)R, (void)steps, (void)chunk_bytes, (void)comm; /* real time is what it is */
}

void coll_tree_settle(const nccl_call *nc, int P, int rpn, int steps, double chunk_bytes,
                      MPI_Comm comm) {
  (void)nc, (void)P, (void)rpn, (void)steps, (void)chunk_bytes, (void)comm;
}

void coll_fold_sync(MPI_Comm comm, int first, int size) {
  (void)comm, (void)first, (void)size; /* nothing folds on real data */
}

int coll_tree_bulk(double chunk_bytes, double whole_bytes) {
  (void)chunk_bytes, (void)whole_bytes;
  return 0; /* real data moves chunk by chunk */
}

void coll_tree_hold(const int *peers, int n, int steps, double chunk_bytes, double whole_bytes,
                    MPI_Comm comm) {
  (void)peers, (void)n, (void)steps, (void)chunk_bytes, (void)whole_bytes, (void)comm;
}

typedef struct {
  const char *name;                 /* first argument */
  const char *summary;              /* one line for the usage text */
  int (*fn)(int argc, char **argv); /* argv[0] is the mode name; returns the exit status */
} real_mode;

static const real_mode modes[] = {
    {"run", "run one training configuration for real (real_exec.c)", real_exec_main},
    {"coll", "nccl-tests-style collective benchmark on this machine (coll_bench.c)", coll_bench_main},
};

int main(int argc, char **argv) {
  int provided = 0, r, status = 2;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  kn_cpu_init();
  const real_mode *m = NULL;
  for (size_t i = 0; argc > 1 && i < G_N_ELEMENTS(modes); i++)
    if (strcmp(argv[1], modes[i].name) == 0) m = &modes[i];
  if (provided < MPI_THREAD_FUNNELED) {
    if (r == 0) fprintf(stderr, "dlsim-real: this MPI does not support MPI_THREAD_FUNNELED\n");
  } else if (m) {
    status = m->fn(argc - 1, argv + 1);
  } else if (r == 0) {
    fprintf(stderr, "dlsim-real: expected a mode as first argument, got '%s'; modes:",
            argc > 1 ? argv[1] : "");
    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++)
      fprintf(stderr, " %s (%s)", modes[i].name, modes[i].summary);
    fprintf(stderr, "\n");
  }
  MPI_Finalize();
  return status;
}
