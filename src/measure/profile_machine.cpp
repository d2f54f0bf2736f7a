#include "measure/profile_machine.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cofuse/build_info.hpp"
#include "cofuse/model/simulate.hpp"
#include "cofuse/status.hpp"
#include "core/exec_model/times.hpp"
#include "cpu/compute/gemm.hpp"
#include "measure/text.hpp"

namespace cofuse::measure {

namespace {

// What `sources` says about each number: how, where, when and with which cofuse.
class Sourcer {
 public:
  Sourcer(std::string tool, std::string hosts, std::string date)
      : tool_(std::move(tool)), hosts_(std::move(hosts)), date_(std::move(date)) {
    const BuildInfo info = build_info();
    cofuse_ = "cofuse " + info.version + " (git " + info.git_revision + ")";
  }
  std::string measured(const std::string& how) const {
    return "measured: " + tool_ + " (" + how + ") on " + hosts_ + ", " + date_ + ", " + cofuse_;
  }

 private:
  std::string tool_, hosts_, date_, cofuse_;
};

std::string ms(double seconds) { return fixed(seconds * 1e3, 3) + " ms"; }
std::string us(double seconds) { return fixed(seconds * 1e6, 2) + " us"; }

std::string shape_list(const std::vector<GemmPoint>& grid) {
  std::string out;
  for (const GemmPoint& p : grid) {
    if (!out.empty()) out += ' ';
    out += std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
  }
  return out;
}

}  // namespace

Measured measure_machine(MPI_Comm comm, bool quick, const StepProgress& progress) {
  const ProfileEffort effort{quick ? Effort::quick : Effort::full};
  Measured m;
  int done = 0;
  auto within = [&](int steps, const std::string& what) {
    // Never a whole step from inside a part: a log (not a terminal) lists finished parts only.
    return [&progress, &done, steps, what](double f, const std::string& now) {
      const double at = std::min(f, 0.999) * steps;
      progress(done + int(at), std::max(at - int(at), 1e-6), what + ": " + now);
    };
  };
  m.compute = measure_compute(comm, effort, within(kComputeSteps, "compute"), core_sharing(comm));
  done += kComputeSteps;
  progress(done, 0, "compute: " + std::to_string(m.compute.grid.size()) + " GEMM shapes in f32 and " +
                        std::to_string(m.compute.grid_16.size()) + " in bf16, dgemm, bf16 GEMM, memcpy, BLAS call");
  // The executor's default polling interval: the simulator's default assumes the same.
  m.network = measure_network(comm, effort, SimOptions{}.poll_us, within(kNetworkSteps, "network"),
                              two_level_ranks_per_host(comm));
  done += kNetworkSteps;
  progress(done, 0, "network: ping-pong, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Allreduce");
  m.contention = measure_contention(comm, effort, within(kContentionSteps, "contention"));
  m.task_reps = quick ? 200 : 2000;
  m.task_overhead_s = measure_task_overhead_s(comm, m.task_reps);
  done += kContentionSteps;
  progress(done, 0, "contention (GEMM beside communication) and task overhead");
  if (!(m.contention.exchange_alone_s > 0 && m.contention.exchange_busy_s > 0))
    throw Error(ErrorCode::invalid_argument,
                "no 4 MiB exchange between paired ranks finished within the contention measurement's time "
                "limit; the link is too slow to profile");
  return m;
}

MachineProfile build_profile(const ProfileRequest& args, const Measured& m, int ranks, const nlohmann::ordered_json& machine) {
  std::string hosts;
  for (const auto& h : machine["hosts"]) hosts += (hosts.empty() ? "" : "+") + h.get<std::string>();
  const std::string date = utc_now();
  const Sourcer src(args.tool, hosts, date);
  const std::string who = std::to_string(ranks) + " ranks at once, the slowest rank's";
  MachineProfile p;
  p.name = args.name;
  p.description = "Measured by " + args.tool + std::string(args.quick ? " --quick" : "") + " on " + hosts + " (" +
                  machine["cpu_model"].get<std::string>() + ", " + std::to_string(ranks) + " ranks, " +
                  "OPENBLAS_NUM_THREADS=" + machine["openblas_num_threads"].get<std::string>() +
                  ", OMP_NUM_THREADS=" + machine["omp_num_threads"].get<std::string>() +
                  ", bf16 GEMMs " + detail::to_string(detail::bf16_gemm_path().kind) + "), " + date +
                  "; link: " + args.link;
  p.note = args.note;
  p.validated = true;
  auto& s = p.sources;

  const ComputeResult& mc = m.compute;
  ComputeModel& c = p.compute;
  c.measured = mc.grid;
  c.measured_16 = mc.grid_16;
  const GemmPoint* best = &mc.grid.front();
  for (const GemmPoint& g : mc.grid)
    if (g.gflops > best->gflops) best = &g;
  c.peak_gflops_f32 = best->gflops;
  c.peak_gflops_f64 = mc.dgemm_gflops;
  c.peak_gflops_16 = mc.bf16_gflops;
  c.memory_GBps = mc.copy_GBps;
  c.launch_s = mc.blas_call_s;
  c.tile_m = c.tile_n = c.units = 1;
  c.efficiency = 1;
  // Where ranks outnumber the cores the samples are longer (profile_compute.cpp), and say why.
  const std::string batching = "a sample batches calls to >= " + fixed(mc.sample_s * 1e3, 0) + " ms" +
                               (mc.sharing.outnumbered() ? ", to span the scheduler's switches where " + mc.sharing.text() +
                                                               " share the cores"
                                                         : "");
  const std::string passes = "median of " + std::to_string(mc.passes) +
                             " samples interleaved with the other compute measurements, " + who;
  s["compute.measured"] = src.measured(
      "cblas_sgemm f32, row-major, no transposes, beta 0, nonzero inputs; m in {1,4,16,64,256,1024,4096} x n in "
      "{256,1024,2048} x k in {128,512,1024,2048} up to " + fixed(mc.max_flops / 1e9, 1) + " GFLOP: " +
      shape_list(mc.grid) + "; seconds per call (" + batching + "), " + passes);
  s["compute.peak_gflops_f32"] = src.measured("the best rate of compute.measured, at " + std::to_string(best->m) + "x" +
                                              std::to_string(best->n) + "x" + std::to_string(best->k));
  const std::string n = std::to_string(mc.dgemm_n);
  s["compute.peak_gflops_f64"] = src.measured("cblas_dgemm " + n + "x" + n + "x" + n + ", " + passes);
  s["compute.memory_GBps"] = src.measured("memcpy of " + std::to_string(mc.copy_mib) +
                                          " MiB, (bytes read + bytes written) / time, " + passes);
  s["compute.launch_s"] = src.measured("one 1x1x1 cblas_sgemm call, " + passes);
  if (mc.grid_16.empty()) {
    s["compute.peak_gflops_16"] = "fixed: 0 (as f32): " + detail::bf16_gemm_problem();
  } else {
    const std::string gemm16 = "bf16 GEMM on this process's path, " + detail::bf16_gemm_path().describe();
    s["compute.measured_16"] = src.measured(
        gemm16 + "; f32 accumulation, C 64-byte aligned; on the shapes of "
        "compute.measured: " + shape_list(mc.grid_16) + "; the simulator's rate for bf16 GEMMs; seconds per call (" +
        batching + "), " + passes);
    s["compute.peak_gflops_16"] = src.measured(
        gemm16 + "; " + n + "x" + n + "x" + n + "; used only where compute.measured_16 is absent (scaling compute.measured by its ratio to "
        "compute.peak_gflops_f32), " + passes);
  }
  const std::string unused = "fixed: roofline parameter, unused because compute.measured is set";
  s["compute.tile_m"] = s["compute.tile_n"] = s["compute.units"] = s["compute.efficiency"] = unused;

  if (ranks < 2) {
    // Nothing is communicated on one rank: any valid link will do, and the sources say so.
    p.network = {"switch", 0, 1, 0, 0, 0, 0, {0, 1, 0, 0}, {0, 1, 0, 0}, {0, 1, 0, 0}};
    for (const char* key : {"network", "contention", "task_overhead_s"})
      s[key] = "fixed: one rank, nothing is communicated (placeholders the simulator never uses)";
    return p;
  }
  const NetworkResult& mn = m.network;
  NetworkModel& net = p.network;
  const bool detected = args.topology == "auto";
  // Hosts of several ranks: ranks 0 and 1 measure the link inside a host, rank 0 and the first
  // rank of the next host the one between. Inside a host (shared memory) link_bandwidth_GBps
  // takes the exchange's median: both directions' copies share the cores (link_seconds).
  const bool two_level = detected && mn.ranks_per_host > 0;
  net.topology = two_level ? "two_level" : detected ? detect_topology(mn) : args.topology;
  net.alpha_s = mn.small_round_trip_s / 2;
  net.bandwidth_GBps = link_bandwidth_GBps(mn, net.topology);
  net.copy_engines = 0;
  const std::string net_passes =
      "median of " + std::to_string(mn.passes) + " samples interleaved with the other network measurements";
  const std::string directions =
      "one way " + ms(mn.large_one_way_s) + " (in a train " + ms(mn.large_one_way_train_s) + "), both ways at once " +
      ms(mn.large_exchange_s) + " (fastest " + ms(mn.large_exchange_fastest_s) + ")" +
      (mn.large_two_pairs_s > 0 ? ", two pairs one way at once (0 to 1, 2 to 3) " + ms(mn.large_two_pairs_s) : "") +
      " per " + std::to_string(int64_t(mn.large_bytes)) + " bytes";
  const std::string rule = mn.large_two_pairs_s > 0 ? "shared when one pair alone is > 1.5x faster than each of two at once"
                                                    : "shared when one way alone is > 1.5x faster than each way of both (fastest)";
  s["network.topology"] =
      two_level  ? src.measured("detected: hosts of " + std::to_string(mn.ranks_per_host) +
                                " ranks (MPI_COMM_TYPE_SHARED, or COFUSE_RANKS_PER_HOST), so two levels; inside a host: " +
                                directions)
      : detected ? src.measured("detected: " + directions + "; " + rule)
                 : "given: --topology " + args.topology + " (" + directions + ")";
  s["network.alpha_s"] = src.measured(
      "MPI_Send/MPI_Recv ping-pong of 8 bytes between ranks 0 and 1, half the round trip " + us(mn.small_round_trip_s) +
      ", " + net_passes + " (a sample batches round trips to >= 1 ms)");
  const std::string bytes = std::to_string(int64_t(mn.large_bytes)) + " bytes";
  s["network.bandwidth_GBps"] = src.measured(
      two_level ? "MPI_Sendrecv of " + bytes + " each way between ranks 0 and 1 (one host; both directions busy, as in a "
                  "ring), bytes / " + ms(link_seconds(mn, net.topology)) + ", " + net_passes
                : "MPI_Send of " + bytes + " from rank 0 to 1 (" +
                      (net.topology == "shared" ? "the whole shared medium" : "one direction of a switched link") +
                      "), alone " + ms(mn.large_one_way_s) + " and in a train (the second of two back to back, what the "
                      "link sustains) " + ms(mn.large_one_way_train_s) + ", bytes / the slower, " +
                      ms(link_seconds(mn, net.topology)) + ", " + net_passes);
  // The least time a polled message takes, in poll intervals: a small piece's message polled,
  // less the 8-byte reply that ends it (none measured where polling spins). Blocking beside it
  // says how much of it is the transfer itself.
  const double poll_s = 1e-6 * mn.poll_us;
  const auto floor_polls = [&](double polled_s) {
    return poll_s > 0 ? std::max(0.0, (polled_s - mn.small_round_trip_s / 2) / poll_s) : 0.0;
  };
  net.polled_floor_polls = floor_polls(mn.polled_one_way_polled_s);
  s["network.polled_floor_polls"] = src.measured(
      std::to_string(int64_t(mn.polled_bytes)) + " bytes from rank 0 to 1 (an 8-byte reply ends it), MPI_Isend and "
      "MPI_Irecv tested every " + std::to_string(mn.poll_us) + " us asleep in between (as cofuse's progress thread) " +
      ms(mn.polled_one_way_polled_s) + " (by MPI_Send and MPI_Recv " + ms(mn.polled_one_way_s) +
      "), less half the 8-byte round trip, in poll intervals, clamped at >= 0; " + net_passes);
  net.polled_floor_small_polls = floor_polls(mn.polled_small_one_way_polled_s);
  s["network.polled_floor_small_polls"] = src.measured(
      std::to_string(int64_t(mn.polled_small_bytes)) + " bytes from rank 0 to 1 (an 8-byte reply ends it), polled as "
      "network.polled_floor_polls, " + ms(mn.polled_small_one_way_polled_s) +
      ", less half the 8-byte round trip, in poll intervals, clamped at >= 0; " + net_passes);
  if (two_level) {
    const int R = mn.ranks_per_host;
    net.ranks_per_node = R;
    net.inter_alpha_s = mn.inter_round_trip_s / 2;
    const InterHostLink link = inter_host_link(mn);
    const bool shared_link = link.nics_per_node == 1;  // R > 1 here (two_level_ranks_per_host)
    net.nics_per_node = link.nics_per_node;
    net.inter_bandwidth_GBps = mn.large_bytes / link.seconds * 1e-9;
    const std::string pairs = "one pair alone " + ms(mn.inter_exchange_one_s) + ", all " + std::to_string(R) +
                              " pairs at once " + ms(mn.inter_exchange_s) + " each";
    s["network.ranks_per_node"] = src.measured("ranks per host, every host alike and numbered host by host");
    s["network.inter_alpha_s"] = src.measured("MPI_Send/MPI_Recv ping-pong of 8 bytes between rank 0 and rank " +
                                              std::to_string(R) + " (the next host), half the round trip " +
                                              us(mn.inter_round_trip_s) + ", " + net_passes);
    s["network.nics_per_node"] = src.measured(
        "MPI_Sendrecv of " + std::to_string(int64_t(mn.large_bytes)) + " bytes each way between rank r of host 0 and "
        "rank r + " + std::to_string(R) + ": " + pairs + "; " + (shared_link ? "1 (the host's ranks share one link)"
                                                                            : "one per rank (each pair as fast as one alone)") +
        ", whichever of R times and once as long as one pair alone is nearer");
    const std::string over = shared_link ? " over " + std::to_string(R) + " (they share the host's one link), " +
                                               ms(mn.inter_exchange_s / R)
                                         : " (a link each)";
    s["network.inter_bandwidth_GBps"] = src.measured(
        "MPI_Sendrecv of " + std::to_string(int64_t(mn.large_bytes)) + " bytes each way between rank r of host 0 and "
        "rank r + " + std::to_string(R) + ": bytes / " + ms(link.seconds) + ", the faster of one pair alone " +
        ms(mn.inter_exchange_one_s) + " and all " + std::to_string(R) + " pairs at once, " + ms(mn.inter_exchange_s) +
        " each" + over + " (a rank whose core is taken only slows a reading), " + net_passes);
  } else {
    s["network.ranks_per_node"] = s["network.inter_alpha_s"] = s["network.inter_bandwidth_GBps"] =
        s["network.nics_per_node"] = "fixed: used by topology two_level only";
  }
  s["network.copy_engines"] = "fixed: 0, CPU ranks move data with their own cores";
  // The third size (profile_network.cpp, beyond): where the line bends, or why it does not.
  auto beyond = [&](const CollectiveFit& f) -> std::string {
    if (f.beyond_bytes <= 0)
      return mn.beyond_timed ? std::string()
                             : "; not timed beyond: brief calibration estimated 8 MiB's passes above " +
                                   ms(mn.beyond_budget_s) +
                                   (f.bent_below ? ", so no bend at the larger size" : ", so one line for every size");
    return "; at " + std::to_string(int64_t(f.beyond_bytes)) + " bytes " + ms(f.beyond_s) +
           (f.bent         ? ", more than 10% off the line: beyond " + std::to_string(int64_t(f.large_bytes)) +
                                 " bytes the bus bandwidth that meets it"
            : f.bent_below ? ", within 10% of the bent line"
                           : ", within 10% of the line: one line for every size");
  };
  // How the two sizes became a line (profile_measure.hpp, bend_below).
  auto line_of = [](const CollectiveFit& f, const std::string& factor) -> std::string {
    if (!f.fitted) return "no positive slope between the two: busbw from the large size alone, alpha 0";
    if (f.bent_below)
      return "their line crosses zero before the smaller size (a negative latency), so from 0 through the smaller "
             "size (busbw) and bent there to pass through the larger one (beyond_busbw_GBps), time = bytes * " +
             factor + " / busbw below the bend";
    return "fitted to alpha + bytes * " + factor + " / busbw, alpha clamped at >= 0" +
           (f.unbent_because.empty() ? std::string()
                                     : " (not bent at the smaller size, where it crosses zero: " + f.unbent_because + ")");
  };
  auto collective = [&](const std::string& key, const std::string& call, const CollectiveFit& f, CollectiveModel& out,
                        const std::string& factor) {
    out = f.model;
    const std::string how =
        call + " of f32 timed at " + std::to_string(int64_t(f.small_bytes)) + " and " +
        std::to_string(int64_t(f.large_bytes)) + " bytes (the whole gathered or reduced buffer): " + ms(f.small_s) +
        " and " + ms(f.large_s) + ", " + net_passes + ", " + who + "; " +
        line_of(f, factor) + beyond(f);
    s["network." + key + ".alpha_s"] = src.measured(how);
    s["network." + key + ".busbw_GBps"] = src.measured(how);
    s["network." + key + ".beyond_busbw_GBps"] =
        f.bent || f.bent_below ? src.measured(how) : "fixed: 0, one line for every size (see busbw_GBps)";
  };
  // The simulator adds the average wait to notice a completion (poll_us / 2) and a task's
  // overhead to every polled collective itself, so the fit's latency is charged without them.
  auto nonblocking = [&](const std::string& key, const std::string& call, const CollectiveFit& f,
                         const CollectiveFit& blocking, CollectiveModel& out, const std::string& factor) {
    const double notice_s = 0.5e-6 * mn.poll_us;
    out.nonblocking_busbw_GBps = f.model.busbw_GBps;
    out.nonblocking_beyond_busbw_GBps = f.model.beyond_busbw_GBps;
    // One bend per collective (measure_network): at the larger size for either call, or at the
    // smaller one for the blocking call alone (the non-blocking line then has no beyond rate).
    out.beyond_bytes = std::max(out.beyond_bytes, f.model.beyond_bytes);
    out.nonblocking_alpha_s = std::max(0.0, f.model.alpha_s - notice_s - m.task_overhead_s);
    const std::string how =
        call + " of f32 progressed by MPI_Test every " + std::to_string(mn.poll_us) +
        " us (asleep in between, as cofuse's progress thread), timed at " + std::to_string(int64_t(f.small_bytes)) +
        " and " + std::to_string(int64_t(f.large_bytes)) + " bytes: " + ms(f.small_s) + " and " + ms(f.large_s) + ", " +
        net_passes + ", " + who + "; " +
        (f.fitted ? "fitted to alpha + bytes * " + factor + " / busbw; alpha less poll_us/2 (" + us(notice_s) +
                        ") and task_overhead_s, which the simulator adds, clamped at >= 0"
                  : "no positive slope between the two: busbw from the large size alone, alpha 0") +
        beyond(f);
    s["network." + key + ".nonblocking_alpha_s"] = src.measured(how);
    s["network." + key + ".nonblocking_busbw_GBps"] = src.measured(how);
    s["network." + key + ".nonblocking_beyond_busbw_GBps"] =
        f.bent ? src.measured(how) : "fixed: 0, one line for every size (see nonblocking_busbw_GBps)";
    s["network." + key + ".beyond_bytes"] =
        blocking.bent_below ? "fixed: the smaller of the two sizes, where the blocking call's line of the two crosses zero "
                              "before it (the non-blocking call: one line for every size)"
        : out.beyond_bytes > 0 ? "fixed: the larger of the two sizes of the line, where a third size ran more than 10% off it"
                               : "fixed: 0, one line for every size";
  };
  // The factor in words, as written into each source line.
  const char* const ag = detail::bus_factor_text(Collective::allgather);
  const char* const rs = detail::bus_factor_text(Collective::reduce_scatter);
  const char* const ar = detail::bus_factor_text(Collective::allreduce);
  collective("allgather", "MPI_Allgather", mn.allgather, net.allgather, ag);
  collective("reduce_scatter", "MPI_Reduce_scatter_block (MPI_SUM)", mn.reduce_scatter, net.reduce_scatter, rs);
  collective("allreduce", "MPI_Allreduce (MPI_SUM)", mn.allreduce, net.allreduce, ar);
  nonblocking("allgather", "MPI_Iallgather", mn.allgather_nb, mn.allgather, net.allgather, ag);
  nonblocking("reduce_scatter", "MPI_Ireduce_scatter_block (MPI_SUM)", mn.reduce_scatter_nb, mn.reduce_scatter,
              net.reduce_scatter, rs);
  nonblocking("allreduce", "MPI_Iallreduce (MPI_SUM)", mn.allreduce_nb, mn.allreduce, net.allreduce, ar);

  const ContentionResult& k = m.contention;
  p.contention.gemm_rate_while_comm = k.gemm_rate;
  p.contention.comm_rate_while_gemm = k.comm_rate;
  const std::string thread =
      "a second thread of the rank exchanging 4 MiB with its partner back to back (MPI_Irecv + MPI_Isend, "
      "MPI_Testall every 200 us, as cofuse's progress thread)";
  const std::string pooled = "every rank at once in pairs r and r + P/2, medians of " + std::to_string(k.rounds) +
                             " rounds of (GEMM alone, GEMM beside the polling thread, exchanges alone, both together) pooled, the slowest rank's";
  s["contention.gemm_rate_while_comm"] =
      src.measured("512x1024x1024 cblas_sgemm alone " + ms(k.gemm_alone_s) + " / beside " + thread + " " +
                   ms(k.gemm_busy_s) + "; " + pooled + ", clamped into (0, 1]");
  p.contention.poll_cost_s = k.poll_cost_s;
  s["contention.poll_cost_s"] =
      src.measured("512x1024x1024 cblas_sgemm alone " + ms(k.gemm_alone_s) + " / beside a second thread of the rank "
                   "polling a posted MPI_Irecv that nothing arrives for (MPI_Test every " + std::to_string(k.poll_us) +
                   " us, as cofuse's progress thread waits for a peer that still multiplies) " + ms(k.gemm_polled_s) +
                   ": the poll interval x (beside / alone - 1), 0 where not slower; " + pooled);
  s["contention.comm_rate_while_gemm"] =
      src.measured("one exchange of " + thread + ": alone " + ms(k.exchange_alone_s) +
                   " / while the rank's main thread runs 512x1024x1024 cblas_sgemm back to back " +
                   ms(k.exchange_busy_s) + "; " + pooled + ", clamped into (0, 1]");

  p.task_overhead_s = m.task_overhead_s;
  s["task_overhead_s"] = src.measured(
      "posting MPI_Irecv + MPI_Isend of 8 bytes between ranks 0 and 1 plus the MPI_Testall that finds both complete, "
      "halved (two tasks), median of " + std::to_string(m.task_reps) + ", the slower rank's");
  return p;
}

std::string output_problem(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path path(out);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "cannot write " + out + ": directory " + dir.string() + " does not exist";
  if (fs::is_directory(path, ec)) return "cannot write " + out + ": it is a directory";
  if (access(dir.c_str(), W_OK) != 0) return "cannot write " + out + ": directory " + dir.string() + " is not writable";
  if (fs::exists(path, ec) && access(path.c_str(), W_OK) != 0) return "cannot write " + out + ": the file is not writable";
  return "";
}

void write_file_atomically(const std::string& out, const std::string& text) {
  // A temporary of this process: ranks of one job (or two jobs) may write the same file at once,
  // and the last rename wins whole.
  const std::string temporary = out + ".partial." + std::to_string(::getpid());
  {
    std::ofstream file(temporary);
    file << text;
    file.close();
    std::error_code ignored;
    if (!file) {
      std::filesystem::remove(temporary, ignored);
      throw Error(ErrorCode::io, "cannot write " + temporary);
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, out, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(ErrorCode::io, "cannot rename " + temporary + " to " + out + ": " + ec.message());
  }
}

}  // namespace cofuse::measure
