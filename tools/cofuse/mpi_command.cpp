#include "mpi_command.hpp"

#include "cofuse/build_info.hpp"
#include "cpu/comm/failure.hpp"

#include <mpi.h>

#include <algorithm>
#include <iostream>

namespace cofuse::cli {

int run_with_mpi(const std::string& command, const std::function<int()>& body,
                 std::initializer_list<ErrorCode> same_everywhere) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::cerr << "cofuse " << command << ": error: MPI_Init_thread failed" << std::endl;
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const std::string slow = build_info().blas_warning; rank == 0 && !slow.empty())
    std::cerr << "cofuse " << command << ": warning: " << slow << std::endl;
  int exit_code = 0;
  try {
    exit_code = body();
  } catch (const Error& e) {
    // Agreed failures (every rank throws the same) end cleanly whatever their code.
    const bool agreed = dynamic_cast<const detail::AgreedError*>(&e) != nullptr;
    if (agreed || std::find(same_everywhere.begin(), same_everywhere.end(), e.code()) != same_everywhere.end()) {
      if (rank == 0) std::cerr << "cofuse " << command << ": error: " << e.what() << std::endl;
      MPI_Finalize();
      return 1;
    }
    std::cerr << "cofuse " << command << ": rank " << rank << ": error: " << e.what() << std::endl;
    // A bug in cofuse: where it was thrown is what a report needs.
    if (e.code() == ErrorCode::internal) std::cerr << "  (thrown at " << e.where_string() << ")" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (const std::exception& e) {
    std::cerr << "cofuse " << command << ": rank " << rank << ": error: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return exit_code;
}

}  // namespace cofuse::cli
