// How a subcommand that runs under mpirun starts and stops MPI, and what it does with an error.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "cofuse/status.hpp"

namespace cofuse::cli {

/// Runs body() between MPI_Init_thread(MPI_THREAD_MULTIPLE) and MPI_Finalize and returns its
/// exit code. A cofuse::Error every rank threw together (an AgreedError, or a code in
/// `same_everywhere`: agreement and validation fail identically on every rank) is printed
/// once, by rank 0, as "cofuse COMMAND: error: ..." and gives exit code 1. Any other exception is this rank's own: it is printed with the rank and
/// the job is aborted (MPI_Abort), so no peer waits for it in a collective.
int run_with_mpi(const std::string& command, const std::function<int()>& body,
                 std::initializer_list<ErrorCode> same_everywhere = {ErrorCode::mismatch, ErrorCode::invalid_argument});

}  // namespace cofuse::cli
