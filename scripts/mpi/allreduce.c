/* allreduce.c - the multinode tests' MPI program (scripts/make-mpi-image.sh builds it against
 * Open MPI and MPICH).
 *
 *   allreduce            every rank contributes rank+1; MPI_Allreduce sums them; rank 0
 *                        gathers each rank's hostname and prints "rank R of N on HOST" for
 *                        every rank and "sum S (expected E)". Each rank also prints its own
 *                        line ("hello from rank R on HOST"), which reaches the job's log only
 *                        through the launcher's output forwarding.
 *   allreduce startup    every rank passes MPI_Init and a barrier; rank 0 prints "ranks up at
 *                        MS" (Unix milliseconds), for bench/mpi.sh's start-up figure.
 *   allreduce pingpong [ITERS]
 *                        ranks 0 and 1 bounce messages: the mean one-way latency of 8-byte
 *                        messages (us) and the bandwidth of 1 MiB ones (MB/s), osu-style.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static void pingpong(int rank, int iters) {
  static char buf[1 << 20];
  const int sizes[2] = {8, 1 << 20};
  for (int s = 0; s < 2; s++) {
    int n = sizes[s], warm = iters / 10 + 1;
    double t0 = 0;
    for (int i = 0; i < iters + warm; i++) {
      if (i == warm) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
      if (rank == 0) {
        MPI_Send(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
      }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) {
      if (s == 0) printf("latency %d B: %.2f us\n", n, t / iters / 2 * 1e6);
      else printf("bandwidth %d B: %.1f MB/s\n", n, 2.0 * n * iters / t / 1e6);
    }
  }
}

int main(int argc, char **argv) {
  int rank, size, len;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  memset(host, 0, sizeof host);
  MPI_Get_processor_name(host, &len);
  if (argc > 1 && strcmp(argv[1], "startup") == 0) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      struct timeval tv;
      gettimeofday(&tv, NULL);
      printf("ranks up at %lld\n", (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000);
      fflush(stdout);
    }
    MPI_Finalize();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "pingpong") == 0) {
    if (size < 2) { if (rank == 0) fprintf(stderr, "pingpong needs 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    pingpong(rank, argc > 2 ? atoi(argv[2]) : 1000);
    MPI_Finalize();
    return 0;
  }
  printf("hello from rank %d on %s\n", rank, host);
  fflush(stdout);
  long mine = rank + 1, sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  char *all = rank == 0 ? calloc(size, sizeof host) : NULL;
  MPI_Gather(host, sizeof host, MPI_CHAR, all, sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; r++) printf("rank %d of %d on %s\n", r, size, all + r * sizeof host);
    printf("sum %ld (expected %ld)\n", sum, (long)size * (size + 1) / 2);
    fflush(stdout);
  }
  MPI_Finalize();
  return sum == (long)size * (size + 1) / 2 ? 0 : 1;
}
