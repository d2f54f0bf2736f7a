// GoogleTest main for tests that run under mpirun: MPI is initialised once for the process.
// Rank 0 prints the usual gtest output; other ranks print only their failures, prefixed with
// their rank, so a failure on any rank is visible and the summary is printed once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "mpi_test_util.hpp"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  // The executor's progress thread needs MPI_THREAD_SERIALIZED at least.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "this MPI provides thread level %d, below MPI_THREAD_SERIALIZED\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  testing::InitGoogleTest(&argc, argv);
  const int rank = cofuse::test::world_rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  if (rank == 0)
    std::printf("cofuse MPI tests on %d ranks, seed %llu (set COFUSE_TEST_SEED to repeat)\n",
                cofuse::test::world_size(), static_cast<unsigned long long>(cofuse::test::run_seed()));
  const int failed = RUN_ALL_TESTS();
  // A rank whose tests failed makes the whole run fail, whichever rank it is.
  int any_failed = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed ? 1 : 0;
}
