// Point-to-point latency (ping-pong) and bandwidth (one way, alone and primed; an exchange for how
// the directions share the link) between ranks 0 and 1, the library's
// collectives at two sizes fitted to a latency-bandwidth line, and the CPU cost of one
// non-blocking point-to-point task.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/exec_model/times.hpp"
#include "cpu/comm/host_layout.hpp"
#include "measure/profile_measure.hpp"
#include "measure/timing.hpp"

namespace cofuse::measure {

namespace {

const char* name_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::allgather: return "MPI_Allgather";
    case CollectiveKind::reduce_scatter: return "MPI_Reduce_scatter_block";
    case CollectiveKind::allreduce: return "MPI_Allreduce";
  }
  return "";
}

// Seconds per byte between the two sizes.
double slope_of(const CollectiveFit& f) { return (f.large_s - f.small_s) / (f.large_bytes - f.small_bytes); }

// The line through the two sizes, alpha clamped at 0 (what fit() gives and unbend_below restores).
void straight_line(CollectiveFit& f, double factor) {
  const double slope = slope_of(f);
  f.fitted = slope > 0;
  if (f.fitted) {
    f.model.busbw_GBps = factor / slope * 1e-9;
    f.model.alpha_s = std::max(0.0, f.small_s - f.small_bytes * slope);
  } else {
    // Noise swamped the difference (the small call took as long as the large one): the large
    // call's bus bandwidth is the honest number left, and no latency can be separated from it.
    f.model.busbw_GBps = f.large_bytes * factor / f.large_s * 1e-9;
    f.model.alpha_s = 0;
  }
}

}  // namespace

CollectiveFit fit(CollectiveKind kind, int ranks, double small_bytes, double small_s, double large_bytes, double large_s) {
  CollectiveFit f{{}, small_bytes, small_s, large_bytes, large_s, true};
  straight_line(f, bus_factor(kind, ranks));
  return f;
}

bool bend_below(CollectiveFit& f, double factor) {
  if (!f.fitted || !(f.small_bytes > 0) || !(f.small_s > 0) || !(f.large_bytes > f.small_bytes) ||
      !(f.large_s > f.small_s))
    return false;
  const double slope = slope_of(f);
  if (f.small_s - f.small_bytes * slope >= 0) return false;  // a latency of 0 or more: the line stands
  f.bent_below = true;
  f.model.alpha_s = 0;
  f.model.busbw_GBps = factor * f.small_bytes / f.small_s * 1e-9;
  f.model.beyond_bytes = f.small_bytes;
  f.model.beyond_busbw_GBps = factor / slope * 1e-9;
  return true;
}

void unbend_below(CollectiveFit& f, double factor, const std::string& because) {
  if (!f.bent_below) return;
  f.bent_below = false;
  f.unbent_because = because;
  f.model.beyond_bytes = 0;
  f.model.beyond_busbw_GBps = 0;
  straight_line(f, factor);
}

void bend_beyond(CollectiveFit& f, double factor, double bytes, double seconds, double margin) {
  f.beyond_bytes = bytes;
  f.beyond_s = seconds;
  // A line bent below passes through the large size; the third one judges its second part.
  if (f.bent_below) {
    const double bent_at = f.large_s + (bytes - f.large_bytes) * factor / (f.model.beyond_busbw_GBps * 1e9);
    if (!(bytes > f.large_bytes) || std::fabs(seconds / bent_at - 1) <= margin) return;
    unbend_below(f, factor, "the third size ran more than 10% off its bent line");
  }
  const auto line = [&](double b) { return f.model.alpha_s + b * factor / (f.model.busbw_GBps * 1e9); };
  // Continuous at large_bytes: the bent part starts where the line ends, not at the measured
  // large_s (they differ where alpha was clamped at 0). Either way off the line: slower past the
  // caches or a shaped link's burst, faster where a latency the two smaller sizes could not
  // separate weighed on them. A third size no slower than the line's end at the second is
  // noise: no rate meets it.
  if (!(bytes > f.large_bytes) || !(seconds > line(f.large_bytes)) || std::fabs(seconds / line(bytes) - 1) <= margin)
    return;
  f.bent = true;
  f.model.beyond_bytes = f.large_bytes;
  f.model.beyond_busbw_GBps = factor * (bytes - f.large_bytes) / (seconds - line(f.large_bytes)) * 1e-9;
}

void bend_beyond_both(CollectiveFit& blocking, CollectiveFit& nonblocking, double factor, double bytes,
                      double blocking_s, double nonblocking_s) {
  bend_beyond(nonblocking, factor, bytes, nonblocking_s);
  if (nonblocking.bent) unbend_below(blocking, factor, "the non-blocking call bends at the larger size, and a collective bends once");
  bend_beyond(blocking, factor, bytes, blocking_s);
}

double bus_factor(CollectiveKind kind, int ranks) {
  const Collective c = kind == CollectiveKind::allgather        ? Collective::allgather
                       : kind == CollectiveKind::reduce_scatter ? Collective::reduce_scatter
                                                                : Collective::allreduce;
  return detail::bus_factor(c, ranks);
}

NetworkResult measure_network(MPI_Comm comm, ProfileEffort effort, int poll_us, const ProfileProgress& progress,
                              int ranks_per_host) {
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  NetworkResult r;
  const bool two_level = ranks_per_host > 1 && size >= 2 * ranks_per_host && size % ranks_per_host == 0;
  r.ranks_per_host = two_level ? ranks_per_host : 0;
  r.passes = effort.brief() ? 3 : effort.quick() ? 5 : 21;
  r.poll_us = poll_us;
  // 4 MiB even when brief: a token-bucket-shaped link lets its burst (512 KiB in bench/netlab)
  // through at once, which made 1 MiB messages read 25% faster than the link.
  r.large_bytes = 4 << 20;
  std::vector<char> message(std::size_t(r.large_bytes), 1);
  std::vector<char> incoming(std::size_t(r.large_bytes), 0);
  // Both directions at once: what a ring or an exchange asks of a link. Over TCP it has a slow
  // mode at about twice the one way (exchange_s), so it decides only how the directions share
  // the link, and the bandwidth inside a host of two_level (link_seconds).
  // peer_of(rank): the rank it exchanges with, or -1 to sit it out.
  auto exchange_with = [&, comm, rank](int bytes, int peer) {
    if (peer < 0) return;
    detail::mpi_check(MPI_Sendrecv(message.data(), bytes, MPI_BYTE, peer, 4, incoming.data(), bytes, MPI_BYTE, peer, 4,
                                   comm, MPI_STATUS_IGNORE),
                      "MPI_Sendrecv");
  };
  auto exchange = [&, rank](int bytes) { exchange_with(bytes, rank < 2 ? 1 - rank : -1); };
  // One direction alone: the receiver answers with 8 bytes once all has arrived, so the time is
  // the transfer plus one small latency. polled: both ends non-blocking and tested every
  // poll_us, asleep in between, as cofuse's progress thread drives a message.
  auto one_way_between = [&, comm, rank, poll_us](int bytes, int from, int to, bool polled = false) {
    if (rank != from && rank != to) return;
    const int peer = rank == from ? to : from;
    if (polled) {
      MPI_Request request;
      if (rank == from)
        detail::mpi_check(MPI_Isend(message.data(), bytes, MPI_BYTE, peer, 5, comm, &request), "MPI_Isend");
      else
        detail::mpi_check(MPI_Irecv(incoming.data(), bytes, MPI_BYTE, peer, 5, comm, &request), "MPI_Irecv");
      wait_polled(1, &request, std::chrono::microseconds(poll_us));
    } else if (rank == from) {
      detail::mpi_check(MPI_Send(message.data(), bytes, MPI_BYTE, peer, 5, comm), "MPI_Send");
    } else {
      detail::mpi_check(MPI_Recv(incoming.data(), bytes, MPI_BYTE, peer, 5, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    }
    if (rank == from)
      detail::mpi_check(MPI_Recv(incoming.data(), 8, MPI_BYTE, peer, 5, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    else
      detail::mpi_check(MPI_Send(message.data(), 8, MPI_BYTE, peer, 5, comm), "MPI_Send");
  };
  auto one_way = [&](int bytes, bool polled = false) { one_way_between(bytes, 0, 1, polled); };
  auto ping_pong_with = [&, comm, rank](int bytes, int other) {
    if (rank == 0) {
      detail::mpi_check(MPI_Send(message.data(), bytes, MPI_BYTE, other, 3, comm), "MPI_Send");
      detail::mpi_check(MPI_Recv(message.data(), bytes, MPI_BYTE, other, 3, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    } else if (rank == other) {
      detail::mpi_check(MPI_Recv(message.data(), bytes, MPI_BYTE, 0, 3, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      detail::mpi_check(MPI_Send(message.data(), bytes, MPI_BYTE, 0, 3, comm), "MPI_Send");
    }
  };
  auto ping_pong = [&](int bytes) { ping_pong_with(bytes, 1); };

  // Whole buffers of 256 KiB (latency matters) and 2 MiB (bandwidth dominates) for the line, and
  // 8 MiB where it may bend (beyond below), in floats rounded down to a multiple of the rank
  // count. 1.0 everywhere: sums stay exact, no denormals.
  const int sizes[2] = {(256 << 10) / 4 / size * size, (2 << 20) / 4 / size * size};
  const int beyond = (8 << 20) / 4 / size * size;
  std::vector<float> send(std::size_t(beyond), 1.0f), recv(std::size_t(beyond), 0.0f);
  auto collective = [&, comm](CollectiveKind kind, int elements) {
    const int part = elements / size;
    switch (kind) {
      case CollectiveKind::allgather:
        detail::mpi_check(MPI_Allgather(send.data(), part, MPI_FLOAT, recv.data(), part, MPI_FLOAT, comm), "MPI_Allgather");
        break;
      case CollectiveKind::reduce_scatter:
        detail::mpi_check(MPI_Reduce_scatter_block(send.data(), recv.data(), part, MPI_FLOAT, MPI_SUM, comm),
                  "MPI_Reduce_scatter_block");
        break;
      case CollectiveKind::allreduce:
        detail::mpi_check(MPI_Allreduce(send.data(), recv.data(), elements, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
        break;
    }
  };

  // As cofuse's progress thread drives a collective: post it, then test, sleeping poll_us
  // between tests (the library may use other algorithms for these, and they move only when
  // tested). The main thread does the polling here; nothing else runs beside it.
  auto polled = [&, comm, poll_us](CollectiveKind kind, int elements) {
    const int part = elements / size;
    MPI_Request request;
    switch (kind) {
      case CollectiveKind::allgather:
        detail::mpi_check(MPI_Iallgather(send.data(), part, MPI_FLOAT, recv.data(), part, MPI_FLOAT, comm, &request),
                  "MPI_Iallgather");
        break;
      case CollectiveKind::reduce_scatter:
        detail::mpi_check(MPI_Ireduce_scatter_block(send.data(), recv.data(), part, MPI_FLOAT, MPI_SUM, comm, &request),
                  "MPI_Ireduce_scatter_block");
        break;
      case CollectiveKind::allreduce:
        detail::mpi_check(MPI_Iallreduce(send.data(), recv.data(), elements, MPI_FLOAT, MPI_SUM, comm, &request),
                  "MPI_Iallreduce");
        break;
    }
    wait_polled(1, &request, std::chrono::microseconds(poll_us));
  };

  const CollectiveKind kinds[3] = {CollectiveKind::allgather, CollectiveKind::reduce_scatter, CollectiveKind::allreduce};
  // Ranks past the pair sit the pair's calls out (asleep, not spinning on the pair's cores).
  const bool not_of_the_pair = rank >= 2;
  // One way is timed twice: alone (after a barrier, as every other call here) and primed
  // (Timed::primed), as the second of two back to back: what the link sustains, which a shaped
  // link's burst hides from a lone transfer (link_seconds). The exchanges and collectives, which
  // move both ways at once, are not primed: primed they ran in TCP's slow mode (exchange_s) in
  // nearly every sample over netlab's 2 Gbit/s switch (4 MiB each way: 35 ms at 2 ranks, 45 ms
  // at 4, where ring steps take 17.4 to 18.4 ms; a 2-rank all-gather 0.14 GB/s of bus bandwidth
  // against 0.29 cold), and the model's collectives then read 20% slower than the chunked
  // schedules ran (26% median error over 209 runs, against 12% from cold fits of the same hour).
  const std::string mib = std::to_string(int(r.large_bytes) >> 20) + " MiB";
  // A small piece's message, one way, blocking and polled: the least time a polled message takes
  // (NetworkModel::polled_floor_polls). 128 KiB is past the eager limit of Open MPI's shared
  // memory (4 KiB) and TCP (64 KiB) transports, so it waits for the rendezvous' hand-shake as a
  // piece's message does, and short enough that over a 2 Gbit/s link the hand-shake, not the
  // transfer, sets its polled time (mpi4py, Intel Xeon: 0.50 ms blocking, 0.9 ms polled every
  // 200 us; 64 KiB 0.04 and 0.9 ms; 256 KiB and up no slower polled than blocking). And 16 KiB
  // polled, a decode step's piece, which TCP sends eagerly, with no hand-shake (0.3 ms polled).
  r.polled_bytes = double(NetworkModel::kPolledFloorBytes);
  r.polled_small_bytes = double(NetworkModel::kPolledFloorSmallBytes);
  const std::string kib = std::to_string(int(r.polled_bytes) >> 10) + " KiB";
  const std::string small_kib = std::to_string(int(r.polled_small_bytes) >> 10) + " KiB";
  std::vector<Timed> timed = {
      {"ping-pong 8 B", [&] { ping_pong(8); }, 1e-3, not_of_the_pair},
      {"exchange " + mib, [&] { exchange(int(r.large_bytes)); }, 0, not_of_the_pair},
      {"one way " + mib, [&] { one_way(int(r.large_bytes)); }, 0, not_of_the_pair},
      {"one way " + mib + " in a train", [&] { one_way(int(r.large_bytes)); }, 0, not_of_the_pair, /*primed=*/true},
      {"one way " + kib, [&] { one_way(int(r.polled_bytes)); }, 0, not_of_the_pair},
      {"one way " + kib + " polled", [&] { one_way(int(r.polled_bytes), /*polled=*/true); }, 0, not_of_the_pair},
      {"one way " + small_kib + " polled", [&] { one_way(int(r.polled_small_bytes), /*polled=*/true); }, 0,
       not_of_the_pair}};
  // A collective at one size, blocking then polled: two entries.
  auto time_collective = [&collective, &polled](std::vector<Timed>& into, CollectiveKind kind, int elements,
                                                double min_sample) {
    const std::string bytes = " " + std::to_string(elements * 4) + " B";
    into.push_back({std::string(name_of(kind)) + bytes, [&collective, kind, elements] { collective(kind, elements); },
                    min_sample});
    into.push_back({std::string(name_of(kind)).insert(4, "I") + bytes + " polled",
                    [&polled, kind, elements] { polled(kind, elements); }, min_sample});
  };
  for (CollectiveKind kind : kinds)
    for (int elements : sizes) time_collective(timed, kind, elements, elements == sizes[0] ? 1e-3 : 0);

  // Four ranks on one level: 0 to 1 and 2 to 3 at once, one way each, against 0 to 1 alone,
  // which tells a shared medium from a switch (detect_topology).
  const bool two_pairs = !two_level && size >= 4;
  const std::size_t two_pairs_at = timed.size();
  if (two_pairs)
    timed.push_back({"two pairs one way at once, " + std::to_string(int(r.large_bytes) >> 20) + " MiB each",
                     [&] {
                       one_way_between(int(r.large_bytes), 0, 1);
                       one_way_between(int(r.large_bytes), 2, 3);
                     },
                     0, rank >= 4});
  if (two_level) {
    const int R = ranks_per_host;
    const bool not_of_the_hosts_pair = rank != 0 && rank != R;
    timed.push_back({"ping-pong 8 B between hosts", [&, R] { ping_pong_with(8, R); }, 1e-3, not_of_the_hosts_pair});
    // Host 0's ranks with their counterparts on host 1, all at once: each rank's share of what
    // the hosts' links give (the ranks of a host may share one link, or each have its own).
    timed.push_back({"exchange between hosts, " + std::to_string(R) + " pairs at once",
                     [&, R, rank] { exchange_with(int(r.large_bytes), rank < R ? rank + R : rank < 2 * R ? rank - R : -1); },
                     0, rank >= 2 * R});
    timed.push_back({"exchange between hosts, one pair alone",
                     [&, R, rank] { exchange_with(int(r.large_bytes), rank == 0 ? R : rank == R ? 0 : -1); }, 0,
                     not_of_the_hosts_pair});
  }
  // The 8 MiB pass below may follow: the first pass reports up to 0.8 of the way.
  const ProfileProgress first = [&progress](double f, const std::string& now) { progress(0.8 * f, now); };
  const std::vector<Sampled> sampled = time_interleaved(comm, timed, r.passes, first);
  const std::vector<double> s = medians(sampled);
  if (two_level) {
    r.inter_round_trip_s = s[s.size() - 3];
    r.inter_exchange_s = s[s.size() - 2];
    r.inter_exchange_one_s = s[s.size() - 1];
  }
  if (two_pairs) r.large_two_pairs_s = s[two_pairs_at];
  r.small_round_trip_s = s[0];
  r.large_exchange_s = s[1];
  r.large_exchange_fastest_s = sampled[1].fastest;
  r.large_one_way_s = s[2];
  r.large_one_way_train_s = s[3];
  r.polled_one_way_s = s[4];
  r.polled_one_way_polled_s = s[5];
  r.polled_small_one_way_polled_s = s[6];
  CollectiveFit* fits[3] = {&r.allgather, &r.reduce_scatter, &r.allreduce};
  CollectiveFit* nb_fits[3] = {&r.allgather_nb, &r.reduce_scatter_nb, &r.allreduce_nb};
  double large_calls_s = 0;  // one pass of the six 2 MiB calls
  for (int i = 0; i < 3; ++i) {
    const double* t = &s[7 + 4 * i];  // blocking small, polled small, blocking large, polled large
    *fits[i] = fit(kinds[i], size, 4.0 * sizes[0], t[0], 4.0 * sizes[1], t[2]);
    bend_below(*fits[i], bus_factor(kinds[i], size));
    *nb_fits[i] = fit(kinds[i], size, 4.0 * sizes[0], t[1], 4.0 * sizes[1], t[3]);
    large_calls_s += t[2] + t[3];
  }

  // Beyond 2 MiB a collective may slow down per byte: over shared memory its buffers outgrow the
  // caches (on an AMD EPYC Zen 3 VM MPI_Allreduce ran at 3.6 GB/s of bus bandwidth at 2 MiB and
  // 1.2-1.6 at 4 MiB; Reduce_scatter's 2 MiB line put 8 MiB at 2.5 ms, measured 5.6-7.7), and a
  // shaped link's burst flatters the smaller size. Schedules post buffers of either side, so the
  // line bends once at 2 MiB to pass through 8 MiB. Brief calibration times 8 MiB only where it
  // is cheap (estimated as 4 times the 2 MiB calls, every pass and the warm-up, at most
  // beyond_budget_s), which every rank decides alike: the medians are the slowest rank's.
  r.beyond_budget_s = 0.4;
  r.beyond_timed = !effort.brief() || 4.0 * large_calls_s * (r.passes + 1) <= r.beyond_budget_s;
  if (r.beyond_timed) {
    std::vector<Timed> far;
    for (CollectiveKind kind : kinds) time_collective(far, kind, beyond, 0);
    const ProfileProgress second = [&progress](double f, const std::string& now) {
      progress(0.8 + 0.2 * f, "8 MiB collectives: " + now);
    };
    const std::vector<double> t = medians(time_interleaved(comm, far, r.passes, second));
    for (int i = 0; i < 3; ++i) {
      const double factor = bus_factor(kinds[i], size);
      bend_beyond_both(*fits[i], *nb_fits[i], factor, 4.0 * beyond, t[2 * i], t[2 * i + 1]);
    }
  }
  progress(1, "done");
  return r;
}

int two_level_ranks_per_host(MPI_Comm comm) {
  const detail::HostLayout l = detail::host_layout(comm);
  return l.hosts >= 2 && l.regular && l.ranks_per_host >= 2 ? l.ranks_per_host : 0;
}

std::string detect_topology(const NetworkResult& r) {
  const double together_s = r.large_two_pairs_s > 0 ? r.large_two_pairs_s : exchange_s(r);
  return r.large_one_way_s > 0 && together_s > 1.5 * r.large_one_way_s ? "shared" : "switch";
}

double exchange_s(const NetworkResult& r) {
  return r.large_exchange_fastest_s > 0 ? r.large_exchange_fastest_s : r.large_exchange_s;
}

double link_seconds(const NetworkResult& r, const std::string& topology) {
  return topology == "two_level" ? r.large_exchange_s : std::max(r.large_one_way_s, r.large_one_way_train_s);
}

double link_bandwidth_GBps(const NetworkResult& r, const std::string& topology) {
  return r.large_bytes / link_seconds(r, topology) * 1e-9;
}

InterHostLink inter_host_link(const NetworkResult& r) {
  const int R = std::max(1, r.ranks_per_host);
  InterHostLink link;
  const bool shared = r.inter_exchange_s > (1.0 + R) / 2 * r.inter_exchange_one_s;
  link.nics_per_node = shared ? 1 : R;
  const double all_pairs_s = r.inter_exchange_s / (shared ? R : 1);
  const bool by_all_pairs = all_pairs_s > 0 && (r.inter_exchange_one_s <= 0 || all_pairs_s < r.inter_exchange_one_s);
  link.seconds = by_all_pairs ? all_pairs_s : r.inter_exchange_one_s;
  return link;
}

double ring_check_GBps(MPI_Comm comm) {
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  if (size < 2) return 0;
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  std::vector<char> out(16 << 20, 1), in(16 << 20, 0);
  auto step = [&](int bytes) {
    detail::mpi_check(MPI_Barrier(comm), "MPI_Barrier");
    const double t0 = steady_seconds();
    detail::mpi_check(MPI_Sendrecv(out.data(), bytes, MPI_BYTE, next, 6, in.data(), bytes, MPI_BYTE, previous, 6, comm,
                                   MPI_STATUS_IGNORE),
                      "MPI_Sendrecv");
    return max_over_ranks(comm, steady_seconds() - t0);  // the same on every rank: all decide alike
  };
  // 4 MiB, so a token bucket's burst (512 KiB in bench/netlab) is a small part of a step, unless
  // the link moves 1 MiB in under half a millisecond (shared memory): then 16 MiB, beyond the
  // caches, or the figure swings with what the caches hold (14 to 21 GB/s here).
  step(1 << 20);  // connects
  const int bytes = step(1 << 20) < 5e-4 ? 16 << 20 : 4 << 20;
  // The fastest step: outside load only ever adds time, so the best of several is the stable
  // figure of what the link can do. At least 3 steps and 30 ms of them.
  double best = 1e300, spent = 0;
  for (int i = 0; i < 3 || (spent < 0.03 && i < 1000); ++i) {
    const double t = step(bytes);
    best = std::min(best, t);
    spent += t;
  }
  return bytes / best * 1e-9;
}

double measure_task_overhead_s(MPI_Comm comm, int reps) {
  const int rank = detail::comm_rank(comm);
  std::vector<double> costs;
  if (rank < 2) {
    const int peer = 1 - rank;
    double out = 1, in = 0;
    MPI_Request requests[2];
    for (int i = 0; i < reps; ++i) {
      const double t0 = steady_seconds();
      detail::mpi_check(MPI_Irecv(&in, 1, MPI_DOUBLE, peer, 7, comm, &requests[0]), "MPI_Irecv");
      detail::mpi_check(MPI_Isend(&out, 1, MPI_DOUBLE, peer, 7, comm, &requests[1]), "MPI_Isend");
      const double posted = steady_seconds() - t0;
      // Only the test that finds both complete is charged: the earlier ones wait for the peer,
      // which is the link's latency (alpha), not a task's CPU cost.
      double last_test = 0;
      for (int done = 0; !done;) {
        const double t1 = steady_seconds();
        detail::mpi_check(MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
        last_test = steady_seconds() - t1;
      }
      costs.push_back((posted + last_test) / 2);  // two tasks: the receive and the send
    }
  }
  sleeping_barrier(comm);  // the other ranks wait asleep, off the cores the pair is timed on
  return max_over_ranks(comm, rank < 2 ? summarize(costs).median : 0.0);
}

}  // namespace cofuse::measure
