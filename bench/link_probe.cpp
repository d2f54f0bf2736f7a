// Measures the link two MPI ranks talk over, so every result can name it: one-way bandwidth
// (ping-pong of large messages, half the round trip) and small-message latency.
//   mpirun -np 2 build/bench/link_probe [MiB] [rounds]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) std::printf("link: one rank, no link to measure\n");
    MPI_Finalize();
    return 0;
  }
  const int mib = argc > 1 ? std::atoi(argv[1]) : 4;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<char> buffer(static_cast<std::size_t>(mib) << 20, 1);
  // Round trips between ranks 0 and 1; the best of `rounds` (least disturbed) is reported.
  auto round_trip = [&](int bytes) {
    double best = 1e30;
    for (int i = 0; i < rounds + 1; ++i) {  // the first round opens the connection
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buffer.data(), bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buffer.data(), bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buffer.data(), bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buffer.data(), bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
      if (i > 0) best = std::min(best, MPI_Wtime() - t0);
    }
    return best;
  };
  const double small = round_trip(8);
  const double large = round_trip(static_cast<int>(buffer.size()));
  if (rank == 0)
    std::printf("link: %.2f Gbit/s one way (%d MiB ping-pong, best of %d), %.1f us one-way latency (8 B)\n",
                2.0 * buffer.size() * 8 / large * 1e-9, mib, rounds, small / 2 * 1e6);
  MPI_Finalize();
  return 0;
}
