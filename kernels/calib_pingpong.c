/* calib_pingpong.c — dlsim-pingpong: MPI ping-pong between ranks 0 and 1 on the machine at hand,
 * the measurement behind `dlsim platform --calibrate` (sim/calibrate.h).
 *
 * Built with the system MPI (mpicc), run under mpirun with 2 or more ranks (ranks above 1 only
 * wait at the final barrier). For each message size rank 0 sends, rank 1 sends the same size
 * back; one sample is `k` round trips timed with MPI_Wtime, its one-way time is elapsed / (2k).
 * After 2 warm-up round trips, `repeats` samples are taken and rank 0 prints one line per size:
 *
 *   # dlsim-pingpong 1 ranks=<P> repeats=<R>
 *   <size_bytes> <median one-way s> <min one-way s> <samples>
 *
 * Usage: dlsim-pingpong [--quick] [--repeats R] [--sizes a,b,...]
 *   default sizes 1 B, 2 B, ... 64 MiB (powers of two), 15 samples each;
 *   --quick: 1 B, 64 B, 1 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB, 4 MiB, 5 samples each.
 * Exit status 2 with one line on stderr for bad arguments or fewer than 2 ranks.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Round trips per sample: enough that one sample lasts well above the clock's resolution. */
static int trips_for(long size) {
  if (size <= 65536) return 50;
  if (size <= 1048576) return 10;
  return 2;
}

static int parse_sizes(const char *text, long *sizes) {
  int n = 0;
  const char *p = text;
  while (*p && n < MAX_SIZES) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > (1L << 30)) return -1;
    sizes[n++] = v;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  long sizes[MAX_SIZES];
  int nsizes = 0, repeats = 15, quick = 0, bad = 0;
  const char *sizes_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) quick = 1;
    else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) sizes_arg = argv[++i];
    else bad = 1;
  }
  if (quick && repeats == 15) repeats = 5;
  if (sizes_arg) {
    nsizes = parse_sizes(sizes_arg, sizes);
    if (nsizes <= 0) bad = 1;
  } else if (quick) {
    static const long q[] = {1, 64, 1024, 16384, 65536, 262144, 1048576, 4194304};
    nsizes = (int)(sizeof q / sizeof q[0]);
    memcpy(sizes, q, sizeof q);
  } else {
    for (long s = 1; s <= (64L << 20); s *= 2) sizes[nsizes++] = s;
  }
  if (repeats < 1 || repeats > 10000) bad = 1;
  if (bad || nranks < 2) {
    if (rank == 0)
      fprintf(stderr, "dlsim-pingpong: %s\n",
              nranks < 2 ? "expected 2 or more ranks (mpirun -np 2)"
                         : "usage: dlsim-pingpong [--quick] [--repeats R] [--sizes a,b,...]");
    MPI_Finalize();
    return 2;
  }

  long max_size = 0;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] > max_size) max_size = sizes[i];
  char *buf = malloc((size_t)max_size);
  double *samples = malloc(sizeof(double) * (size_t)repeats);
  if (!buf || !samples) {
    fprintf(stderr, "dlsim-pingpong: out of memory for %ld bytes\n", max_size);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(buf, rank + 1, (size_t)max_size);
  if (rank == 0) printf("# dlsim-pingpong 1 ranks=%d repeats=%d\n", nranks, repeats);

  for (int si = 0; si < nsizes && rank < 2; si++) {
    int n = (int)sizes[si], k = trips_for(sizes[si]);
    int peer = 1 - rank;
    for (int r = -2; r < repeats; r++) {
      int trips = r < 0 ? 1 : k;
      double t0 = MPI_Wtime();
      for (int t = 0; t < trips; t++) {
        if (rank == 0) {
          MPI_Send(buf, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
          MPI_Recv(buf, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf, n, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
      }
      if (r >= 0) samples[r] = (MPI_Wtime() - t0) / (2.0 * trips);
    }
    if (rank == 0) {
      qsort(samples, (size_t)repeats, sizeof(double), compare_double);
      double med = repeats % 2 ? samples[repeats / 2]
                               : 0.5 * (samples[repeats / 2 - 1] + samples[repeats / 2]);
      printf("%ld %.9e %.9e %d\n", sizes[si], med, samples[0], repeats);
      fflush(stdout);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(samples);
  free(buf);
  MPI_Finalize();
  return 0;
}
