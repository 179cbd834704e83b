/* pingpong.c — SMPI ping-pong between ranks 0 and 1 (the hostfile picks their hosts).
 *
 * usage: pingpong BYTES [EXPECTED_S]
 * Rank 0 sends BYTES to rank 1, which sends them back, REPS times; the one-way time is the total
 * divided by 2 × REPS, after one warm-up round trip. It prints "one-way <bytes> B: <seconds> s". With EXPECTED_S (the route's
 * latency + BYTES / bottleneck bandwidth, computed by hand from the platform's figures) it also
 * prints "PASS" when the measured time is within 1% of it, and "FAIL ..." otherwise.
 * Run with --cfg=smpi/wtime:0 so that reading the clock injects no time.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 4

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2 || size < 2) {
    if (rank == 0) fprintf(stderr, "usage: pingpong BYTES [EXPECTED_S] (2 ranks or more)\n");
    MPI_Finalize();
    return 2;
  }
  long bytes = strtol(argv[1], NULL, 10);
  double expected_s = argc > 2 ? strtod(argv[2], NULL) : 0.0;
  char *buf = malloc(bytes > 0 ? (size_t)bytes : 1);
  memset(buf, 0, bytes > 0 ? (size_t)bytes : 1);

  /* Round 0 is a warm-up: it leaves rank 1 already waiting in MPI_Recv when rank 0 starts the
   * clock, so the skew between ranks leaving MPI_Init does not count. */
  double t0 = 0.0;
  for (int r = 0; r <= REPS && rank < 2; r++) {
    if (r == 1) t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    }
  }
  double one_way_s = (MPI_Wtime() - t0) / (2.0 * REPS);
  int status = 0;
  if (rank == 0) {
    printf("one-way %ld B: %.9e s\n", bytes, one_way_s);
    if (expected_s > 0) {
      double rel = (one_way_s - expected_s) / expected_s;
      if (rel < -0.01 || rel > 0.01) {
        printf("FAIL expected %.9e s, off by %.3f%%\n", expected_s, 100.0 * rel);
        status = 1;
      } else {
        printf("PASS\n");
      }
    }
  }
  free(buf);
  MPI_Finalize();
  return status;
}
