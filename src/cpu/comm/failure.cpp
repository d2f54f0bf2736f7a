#include "cpu/comm/failure.hpp"

#include "cpu/comm/mpi_util.hpp"

namespace cofuse::detail {

std::optional<FailedRank> failed_rank(MPI_Comm comm, std::optional<ErrorCode> failure) {
  // MAXLOC over (rank, code): the highest failing rank, and its code, in one allreduce.
  struct {
    int rank;
    int code;
  } worst{failure ? comm_rank(comm) : -1, failure ? static_cast<int>(*failure) : 0};
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_2INT, MPI_MAXLOC, comm), "MPI_Allreduce (failure agreement)");
  if (worst.rank < 0) return std::nullopt;
  return FailedRank{worst.rank, static_cast<ErrorCode>(worst.code)};
}

void agree_on_failure(MPI_Comm comm, const std::optional<Error>& failure,
                      const std::function<std::string(int failed_rank)>& elsewhere) {
  const std::optional<FailedRank> worst = failed_rank(comm, failure ? std::optional(failure->code()) : std::nullopt);
  if (!worst) return;
  if (failure) throw AgreedError(*failure);
  throw AgreedError(worst->code, elsewhere(worst->rank));
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
