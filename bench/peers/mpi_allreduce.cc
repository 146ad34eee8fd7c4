// Open MPI's MPI_Allreduce (sum of floats) between the ranks mpirun starts, the peer of
// distributed_bench's BM_AllReduce2Proc (scripts/bench.sh builds it with mpicxx):
//   mpirun -np 2 mpi_allreduce BYTES...
// Rank 0 prints one JSON object: for each size, the median over rounds of the seconds one
// all-reduce takes (a round: enough all-reduces for about 0.1 s, after a barrier).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("{");
  for (int a = 1; a < argc; ++a) {
    const long bytes = std::atol(argv[a]);
    const int count = static_cast<int>(bytes / 4);
    std::vector<float> in(count, static_cast<float>(rank + 1)), out(count);
    // Warm-up, and how many all-reduces fill a round of about 0.1 s (the same on every rank).
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < 3; ++i) {
      MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double each = (MPI_Wtime() - start) / 3;
    MPI_Bcast(&each, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    const int iters = std::max(1, static_cast<int>(0.1 / std::max(each, 1e-7)));
    std::vector<double> rounds;
    for (int round = 0; round < 7; ++round) {
      MPI_Barrier(MPI_COMM_WORLD);
      start = MPI_Wtime();
      for (int i = 0; i < iters; ++i) {
        MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      rounds.push_back((MPI_Wtime() - start) / iters);
    }
    std::sort(rounds.begin(), rounds.end());
    if (out[count - 1] != 3.0f) {
      std::fprintf(stderr, "mpi_allreduce: the sum is %g, not 3\n", out[count - 1]);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) std::printf("%s\"%ld\": %.9f", a > 1 ? ", " : "", bytes, rounds[3]);
  }
  if (rank == 0) std::printf("}\n");
  MPI_Finalize();
  return 0;
}
