// GoogleTest main for tests that run under mpirun: MPI is initialised once for the process.
// Rank 0 prints the usual gtest output; other ranks print only their failures, prefixed with
// their rank, so a failure on any rank is visible and the summary is printed once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "cpu/compute/gemm.hpp"
#include "mpi_test_util.hpp"
#include "support/skip_aware_main.hpp"

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
  // A run told to multiply bf16 on a path this CPU lacks (COFUSE_CPU_BF16=onednn where oneDNN
  // has no bf16 matmul: tests/mpi/CMakeLists.txt's mpi_bf16_onednn_*) skips as a whole, and says
  // why; the same CPU runs the bf16 cases on the widened path (mpi_bf16_widened_*). Every rank
  // decides alike: they share the CPU model and the environment.
  if (const std::string problem = cofuse::detail::bf16_gemm_problem(); !problem.empty()) {
    if (rank == 0) std::printf("skipped: no bf16 GEMM path in this process: %s\n", problem.c_str());
    MPI_Finalize();
    return cofuse::test::kSkipExitCode;
  }
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
  // Whether every test was skipped is rank 0's count (ranks skip alike).
  int code = cofuse::test::exit_code_of_run(any_failed != 0);
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}
