// Which host each rank runs on: the one place cofuse asks (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED: ranks that can share memory), with an override for tests that stand for
// several hosts on one machine.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "cofuse/schedule.hpp"

namespace cofuse::detail {

struct HostLayout {
  int hosts = 1;
  int ranks_per_host = 1;      // the most ranks any host has
  std::vector<int> host_of;    // per rank of the communicator: its host, numbered by first rank
  bool regular = true;         // every host has ranks_per_host ranks, numbered host by host
                               // (rank = host * ranks_per_host + local rank)
  std::string source;          // "MPI_COMM_TYPE_SHARED" or "COFUSE_RANKS_PER_HOST=R"
};

/// The layout of a communicator's hosts from what host_layout gathers: per rank, the first rank
/// of its host (rank numbers, so any host naming reduces to it). Hosts are numbered in the order
/// of their first ranks. source: recorded as HostLayout::source. Pure (tests feed it made-up
/// layouts: uneven hosts, ranks dealt round-robin).
HostLayout layout_of(const std::vector<int>& first_rank_of_host, std::string source);

/// Collective over comm. COFUSE_RANKS_PER_HOST=R (a positive integer dividing the rank count)
/// replaces what MPI says: consecutive groups of R ranks, as if each were a host (tests of
/// two-level behaviour on one machine; bench/netlab --hosts gives real ones). A malformed value
/// is an Error(invalid_argument) naming it, on every rank.
HostLayout host_layout(MPI_Comm comm);

/// `schedule` with a two-level schedule's host_ranks=0 ("the machine's") replaced by comm's
/// ranks per host (host_layout: collective, so every rank of comm calls it or none; Operation
/// and cuda::Group call it after the ranks agree on the schedule). Any other schedule comes back
/// as it is. Throws Error(invalid_argument) where the hosts are not equal runs of consecutive
/// ranks, naming the layout and what to do.
Schedule with_machine_hosts(const Schedule& schedule, MPI_Comm comm);

/// with_machine_hosts on a layout already known (pure): a two-level schedule's host_ranks=0
/// becomes layout.ranks_per_host; an irregular layout is refused, the error naming the schedule,
/// layout.source and how many ranks each host has.
Schedule with_layout_hosts(const Schedule& schedule, const HostLayout& layout);

}  // namespace cofuse::detail
