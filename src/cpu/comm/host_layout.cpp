#include "cpu/comm/host_layout.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "cofuse/config.hpp"
#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"

namespace cofuse::detail {

HostLayout layout_of(const std::vector<int>& first_rank_of_host_of, std::string source) {
  // Hosts numbered in the order of their first ranks.
  HostLayout l;
  l.source = std::move(source);
  std::map<int, int> index;
  for (int first : first_rank_of_host_of) index.emplace(first, 0);
  int next = 0;
  for (auto& [first, i] : index) i = next++;
  l.hosts = next;
  std::vector<int> count(std::size_t(next), 0);
  for (int first : first_rank_of_host_of) {
    l.host_of.push_back(index[first]);
    ++count[std::size_t(index[first])];
  }
  for (int c : count) l.ranks_per_host = std::max(l.ranks_per_host, c);
  for (int r = 0; r < int(l.host_of.size()); ++r)
    l.regular = l.regular && count[std::size_t(l.host_of[std::size_t(r)])] == l.ranks_per_host &&
                l.host_of[std::size_t(r)] == r / l.ranks_per_host;
  return l;
}

HostLayout host_layout(MPI_Comm comm) {
  const int size = comm_size(comm), rank = comm_rank(comm);
  // Every rank must read the same override, or each would take its own path into a different
  // collective below: -1 unset, 0 malformed, else the value, agreed before anything else.
  const std::string setting = config::ranks_per_host().value;
  const char* text = setting.c_str();
  long per = -1;
  if (*text) {
    char* end = nullptr;
    per = std::strtol(text, &end, 10);
    if (*end != '\0' || per < 1 || per > size) per = 0;
  }
  long range[2] = {-per, per};  // the max of -per is -(the min of per)
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_LONG, MPI_MAX, comm), "MPI_Allreduce");
  if (-range[0] != range[1])
    throw Error(ErrorCode::invalid_argument,
                "COFUSE_RANKS_PER_HOST differs between ranks (set on some only, or to different values): give every "
                "rank the same, or none");
  if (per != -1) {
    if (per == 0 || size % per != 0)
      throw Error(ErrorCode::invalid_argument, std::string("COFUSE_RANKS_PER_HOST=") + text +
                                                   ": must be a positive integer that divides the " +
                                                   std::to_string(size) + " ranks");
    std::vector<int> first(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) first[std::size_t(r)] = r / int(per) * int(per);
    return layout_of(first, std::string("COFUSE_RANKS_PER_HOST=") + text);
  }
  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int mine = rank;
  const int status = MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, node);  // the host's first rank
  MPI_Comm_free(&node);  // before a failure can throw past it
  mpi_check(status, "MPI_Allreduce");
  std::vector<int> first(static_cast<std::size_t>(size));
  mpi_check(MPI_Allgather(&mine, 1, MPI_INT, first.data(), 1, MPI_INT, comm), "MPI_Allgather");
  return layout_of(first, "MPI_COMM_TYPE_SHARED");
}

Schedule with_machine_hosts(const Schedule& schedule, MPI_Comm comm) {
  if (schedule.topo != Topo::two_level || schedule.host_ranks != 0) return schedule;
  return with_layout_hosts(schedule, host_layout(comm));
}

Schedule with_layout_hosts(const Schedule& schedule, const HostLayout& layout) {
  if (schedule.topo != Topo::two_level || schedule.host_ranks != 0) return schedule;
  if (!layout.regular) {
    // Which ranks each host has, as runs ("host 1: ranks 2-3,6"), so the caller sees what is
    // uneven or interleaved; the first 8 hosts and 4 runs of each keep it short at any scale.
    std::string hosts;
    for (int h = 0; h < std::min(layout.hosts, 8); ++h) {
      std::string runs;
      int count = 0;
      const int n = int(layout.host_of.size());
      for (int r = 0; r < n; ++r) {
        if (layout.host_of[std::size_t(r)] != h) continue;
        int last = r;
        while (last + 1 < n && layout.host_of[std::size_t(last + 1)] == h) ++last;
        if (++count <= 4)
          runs += (count > 1 ? "," : "") + std::to_string(r) + (last > r ? "-" + std::to_string(last) : "");
        r = last;
      }
      hosts += (h ? "; host " : "host ") + std::to_string(h) + ": ranks " + runs + (count > 4 ? ",..." : "");
    }
    if (layout.hosts > 8) hosts += "; ...";
    throw Error(ErrorCode::invalid_argument,
                "schedule " + schedule.to_string() + ": topo=2level takes its hosts from the machine (" + layout.source +
                    "), whose " + std::to_string(layout.hosts) + " hosts are not equal runs of consecutive ranks (" +
                    hosts + "); give host_ranks=R (a two-level plan over other hosts still computes the right "
                    "answer), or launch ranks host by host");
  }
  return with_host_ranks(schedule, layout.ranks_per_host);
}

}  // namespace cofuse::detail
