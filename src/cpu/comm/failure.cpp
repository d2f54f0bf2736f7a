#include "cpu/comm/failure.hpp"

#include "cpu/comm/mpi_util.hpp"

namespace cofuse::detail {

void agree_on_failure(MPI_Comm comm, const std::optional<Error>& failure,
                      const std::function<std::string(int failed_rank)>& elsewhere) {
  // MAXLOC over (rank, code): the highest failing rank, and its code, in one allreduce.
  struct {
    int rank;
    int code;
  } worst{failure ? comm_rank(comm) : -1, failure ? static_cast<int>(failure->code()) : 0};
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_2INT, MPI_MAXLOC, comm), "MPI_Allreduce (failure agreement)");
  if (worst.rank < 0) return;
  if (failure) throw AgreedError(*failure);
  throw AgreedError(static_cast<ErrorCode>(worst.code), elsewhere(worst.rank));
}

void run_collectively(MPI_Comm comm, const std::function<void()>& step,
                      const std::function<std::string(int failed_rank)>& elsewhere) {
  std::optional<Error> failure;
  try {
    step();
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure = Error(ErrorCode::internal, e.what());
  }
  agree_on_failure(comm, failure, elsewhere);
}

}  // namespace cofuse::detail
