// Calibration at first use (include/cofuse/model/calibrate.hpp): the signature of the job, the
// agreement on what the ranks have kept, the brief measurements when nothing can be trusted,
// and the rule `auto` follows to find its profile.
#include "cofuse/model/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cofuse/build_info.hpp"
#include "cofuse/config.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/model/simulate.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/host_layout.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "cpu/compute/gemm.hpp"
#include "core/common/vector_level.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "measure/bench_record.hpp"
#include "tune/calibration_cache.hpp"
#include "measure/profile_machine.hpp"
#include "measure/text.hpp"

namespace cofuse {

namespace {

using measure::fixed;

// Who the job is, as far as the link and the cores go: the hosts, how the ranks sit on them,
// and the transport Open MPI was told to use (mpirun --mca btl/pml, which reach the ranks as
// OMPI_MCA_* variables). The link's speed is not in it: the quick check compares that.
struct JobSignature {
  std::string text;        // the calibration's key
  std::string compute_key;  // the compute table's key: this CPU, BLAS, threads, ranks per host, sharing
  measure::CoreSharing sharing;  // how the ranks share the cores: the table is measured and keyed by it
  std::string hosts;        // for messages
  int ranks_per_host = 1;
  // One host and no TCP named (measure::shared_memory_transport): the quick check is judged
  // more loosely (measure::check_tolerance).
  bool shared_memory = false;
};

// Which bf16 path measured the rates: a calibration of the other path is not reused (its bf16
// GEMMs would be 2-4x off).
std::string bf16_path_name() { return detail::to_string(detail::bf16_gemm_path().kind); }

JobSignature job_signature(MPI_Comm comm, const nlohmann::ordered_json& machine) {
  const int size = detail::comm_size(comm);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  detail::mpi_check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  std::vector<char> names(std::size_t(size) * MPI_MAX_PROCESSOR_NAME);
  detail::mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                                  MPI_CHAR, comm),
                    "MPI_Allgather");
  // Collective too: taken before any text is made (a throw there must not leave peers in it).
  const measure::CoreSharing sharing = measure::core_sharing(comm);
  std::map<std::string, int> per_host;
  for (int r = 0; r < size; ++r) ++per_host[std::string(names.data() + std::size_t(r) * MPI_MAX_PROCESSOR_NAME)];
  JobSignature s;
  for (const auto& [host, count] : per_host) s.hosts += (s.hosts.empty() ? "" : ",") + host;
  // How many hosts and ranks per host is host_layout's answer (the one the profile measures by,
  // COFUSE_RANKS_PER_HOST included), so a calibration of another layout is not reused.
  const detail::HostLayout layout = detail::host_layout(comm);
  s.ranks_per_host = layout.ranks_per_host;
  std::string transport;
  for (const char* variable : {"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_mtl"})
    if (const char* v = std::getenv(variable); v && *v) transport += std::string(variable + 9) + "=" + v + " ";
  if (transport.empty()) transport = "default ";
  transport.pop_back();
  s.shared_memory = measure::shared_memory_transport(per_host.size(), transport);
  // The CPU too: a host name can outlive its hardware (a VM moved to another machine), and a
  // kept calibration's GEMM rates are that CPU's.
  s.text = "hosts=" + s.hosts + " ranks=" + std::to_string(size) + " per_host=" + std::to_string(s.ranks_per_host) +
           " host_groups=" + std::to_string(layout.hosts) + (layout.regular ? "" : "(irregular)") + " by " + layout.source +
           " transport=" + transport + " bf16=" + bf16_path_name() + " cpu=" + machine["cpu_model"].get<std::string>();
  s.compute_key = "cpu=" + machine["cpu_model"].get<std::string>() + " blas=" + build_info().blas +
                  " bf16=" + bf16_path_name() + " vector=" + detail::to_string(detail::best_vector_level()) +
                  " threads=" + machine["openblas_num_threads"].get<std::string>() +
                  " per_host=" + std::to_string(s.ranks_per_host) + " cores=" + sharing.text();
  s.sharing = sharing;
  return s;
}

// Whether `mine` holds on every rank (one small allreduce): decisions that lead into different
// collectives are taken from this, never from one rank's own view.
bool all_agree(MPI_Comm comm, bool mine) {
  int in = mine ? 1 : 0, out = 0;
  detail::mpi_check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return out == 1;
}

// Every rank's own copy of a file against rank 0's: the text all ranks then judge (rank 0's)
// and whether every rank holds exactly that. Files differ across hosts (each has its own
// cache) or home directories; a calibration is trusted only when all hold the same one.
struct AgreedText {
  std::string text;
  bool everyone_holds_it = false;
};

AgreedText agree_on_text(MPI_Comm comm, const std::string& mine) {
  AgreedText out;
  out.text = detail::broadcast_text(comm, mine);
  out.everyone_holds_it = all_agree(comm, mine == out.text);
  return out;
}

// Writes `text` to `path` unless this rank already holds it; a failure is a warning (the job
// goes on with what it measured), never an error.
std::string keep(const std::string& path, const std::string& text, const std::string& held) {
  if (held == text) return "";
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    measure::write_file_atomically(path, text);
    return "";
  } catch (const std::exception& e) {
    return "the calibration could not be kept (" + std::string(e.what()) + "); the next process measures again";
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool threads_allowed() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_SERIALIZED;
}

std::string gbps(double v) { return fixed(v, v < 1 ? 3 : 2) + " GB/s"; }

// A collective's bus bandwidth, and where its line bends the rate past the bend.
std::string busbw(const CollectiveModel& c) {
  if (!(c.beyond_bytes > 0 && c.beyond_busbw_GBps > 0)) return gbps(c.busbw_GBps);
  return gbps(c.busbw_GBps) + " (" + gbps(c.beyond_busbw_GBps) + " beyond " + std::to_string(int64_t(c.beyond_bytes) >> 10) +
         " KiB)";
}

}  // namespace

std::string Calibration::parts() const {
  if (rest_s <= 0) return "";  // kept before the parts were: not known
  return table_s > 0 ? " (the GEMM table " + fixed(table_s, 2) + " s, the rest " + fixed(rest_s, 2) + " s)"
                     : " (the GEMM table kept for this CPU, the rest " + fixed(rest_s, 2) + " s)";
}

std::string Calibration::summary() const {
  const MachineProfile& p = profile;
  auto range = [](const std::vector<GemmPoint>& table) {
    double peak = 0, low = 1e300;
    for (const GemmPoint& g : table) {
      peak = std::max(peak, g.gflops);
      low = std::min(low, g.gflops);
    }
    return fixed(low, 1) + " to " + fixed(peak, 1);
  };
  std::ostringstream o;
  o << "Calibrated on this communicator (" << signature << ") at " << measured_at << " in " << fixed(measure_s, 2)
    << " s" << parts() << (from_cache ? ", reused from " + cache_file + " (quick check " + gbps(check_GBps) + ", kept " +
                                 gbps(cached_check_GBps) + ")"
                           : ", measured now")
      << ": GEMM " << range(p.compute.measured) << " GFLOP/s per rank over " << p.compute.measured.size()
      << " piece shapes";
  if (!p.compute.measured_16.empty()) o << " (bf16 " << range(p.compute.measured_16) << ")";
  if (p.sources.count("network") == 0) {  // one rank: the link is a placeholder, nothing measured
    const NetworkModel& n = p.network;
    o << "; link " << n.topology << ", latency " << fixed(n.alpha_s * 1e6, 1) << " us, " << gbps(n.bandwidth_GBps)
      << (n.topology == "shared" ? " shared by all traffic" : " per rank each way")
      << (n.topology == "two_level" ? "; between hosts of " + std::to_string(n.ranks_per_node) + " ranks: latency " +
                                          fixed(n.inter_alpha_s * 1e6, 1) + " us, " + gbps(n.inter_bandwidth_GBps) +
                                          (n.nics_per_node == 1 ? " per host (one link shared by its ranks)" : " per rank")
                                    : std::string())
      << "; busbw all-gather "
      << busbw(n.allgather) << ", reduce-scatter " << busbw(n.reduce_scatter) << ", all-reduce "
      << busbw(n.allreduce) << "; GEMM at " << fixed(p.contention.gemm_rate_while_comm, 2)
      << " of its speed while communicating, communication at " << fixed(p.contention.comm_rate_while_gemm, 2)
      << " while multiplying; each poll of a progress thread waiting for a message takes "
      << fixed(p.contention.poll_cost_s * 1e6, 1) << " us of GEMM time";
  }
  o << ".";
  return o.str();
}

Calibration calibrate(MPI_Comm user_comm, const CalibrateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  detail::CommState& state = detail::comm_state(user_comm);
  // A dead or stalled peer must end the job, not hang it in a measurement (as in any call);
  // inside a caller's DeadlineGuard the guard's deadline holds.
  const detail::CallDeadline deadline(state, options.deadline_s, "calibration at first use",
                                      [] { return std::string("a peer, inside a calibration measurement"); });
  const MPI_Comm comm = state.comm;
  const int size = detail::comm_size(comm);
  const nlohmann::ordered_json machine = measure::machine_json(comm, measure::LinkProbe{});
  // Rank 0's signature and compute key for all: ranks whose environments or CPUs differ must
  // still read, judge and write the same files.
  JobSignature job = job_signature(comm, machine);
  job.text = agree_on_text(comm, job.text).text;
  job.compute_key = agree_on_text(comm, job.compute_key).text;
  const std::string dir = options.cache_dir.empty() ? config::cache_dir().value : options.cache_dir;
  const std::string path = dir + "/calibration-" + measure::text_hash(job.text) + ".json";
  double check = measure::ring_check_GBps(comm);

  // Every decision below is taken from figures all ranks hold (rank 0's text, the slowest
  // rank's check) and then agreed (all_agree), so no rank measures while another returns.
  const std::string held = measure::read_text(path);
  const AgreedText kept = agree_on_text(comm, held);
  measure::JudgedCalibration judged;
  // Rank 0's answer, as the signature is, so every rank judges alike.
  const bool shared_memory = agree_on_text(comm, job.shared_memory ? "1" : "0").text == "1";
  const double tolerance = measure::check_tolerance(shared_memory, options.check_tolerance);
  if (options.use_cache) {
    judged = measure::judge_calibration(kept.text, path, job.text, check, tolerance);
    if (all_agree(comm, judged.check_disagrees)) {
      // A second look before measuring: load only ever slows the check, and the better of two
      // is what the link can do.
      check = std::max(check, measure::ring_check_GBps(comm));
      judged = measure::judge_calibration(kept.text, path, job.text, check, tolerance);
    }
    if (all_agree(comm, judged.calibration && kept.everyone_holds_it)) {
      judged.calibration->this_call_s = seconds_since(start);
      return *judged.calibration;
    }
  }
  Calibration c;
  if (options.use_cache && !kept.text.empty())
    c.warning = !kept.everyone_holds_it ? "the ranks hold different calibrations (other hosts or cache directories): measured again"
                : judged.calibration    ? "a rank could not trust the kept calibration (its clock?): measured again"
                                        : "calibration " + judged.problem + ": measured again";

  // The compute table: kept per CPU, BLAS, threads and ranks per host, so a second link on the
  // same machine measures only the link. --force (use_cache false) measures it too.
  const std::string table_path = dir + "/compute-" + measure::text_hash(job.compute_key) + ".json";
  const std::string table_held = measure::read_text(table_path);
  const AgreedText table = agree_on_text(comm, table_held);
  std::string table_problem;
  std::optional<measure::ComputeResult> compute =
      options.use_cache && table.everyone_holds_it ? measure::parse_compute_table(table.text, job.compute_key, &table_problem)
                                                   : std::nullopt;
  if (!all_agree(comm, compute.has_value())) compute.reset();
  const measure::ProfileEffort brief{measure::Effort::brief};
  const measure::ProfileProgress quiet = [](double, const std::string&) {};
  measure::Measured m;
  // Timed apart: the GEMM table is kept per CPU, so only a machine's first calibration pays it,
  // and what a first use costs is said in those two parts (docs/planner.md "What first use costs").
  const double before_table_s = measure::max_over_ranks(comm, seconds_since(start));
  if (compute) {
    m.compute = *compute;
  } else {
    m.compute = measure::measure_compute(comm, brief, quiet, job.sharing);
    c.table_s = measure::max_over_ranks(comm, seconds_since(start)) - before_table_s;
  }
  std::string notes;
  if (size > 1) {
    m.network = measure::measure_network(comm, brief, SimOptions{}.poll_us, quiet, measure::two_level_ranks_per_host(comm));
    if (all_agree(comm, threads_allowed()))
      m.contention = measure::measure_contention(comm, brief, quiet);
    else
      notes = "; contention not measured (MPI was initialised below MPI_THREAD_SERIALIZED): none assumed";
    m.task_reps = 100;
    m.task_overhead_s = measure::measure_task_overhead_s(comm, m.task_reps);
  }
  c.measured_at = agree_on_text(comm, measure::utc_now()).text;
  measure::ProfileRequest request;
  // The tuning database keys its winners by this name: a new measurement (another link's, say)
  // is a new machine, whose winners are measured afresh.
  request.name = "calibrated-" + measure::text_hash(job.text).substr(0, 8) + "-" +
                 measure::text_hash(c.measured_at).substr(0, 4);
  request.tool = "cofuse calibration at first use";
  request.link = job.text + notes;
  request.topology = "auto";
  c.profile = measure::build_profile(request, m, size, machine);
  c.signature = job.text;
  c.cached_check_GBps = check;
  c.measure_s = measure::max_over_ranks(comm, seconds_since(start));
  c.rest_s = c.measure_s - c.table_s;
  // The measurements are the same on every rank (each is the slowest rank's); the clocks are
  // not. Every rank adopts rank 0's text whole, so all plan with the same profile and keep (and
  // later compare) the same bytes.
  const std::string text = agree_on_text(comm, measure::calibration_text(c)).text;
  const std::string warning = c.warning;
  std::optional<Error> unreadable;
  measure::JudgedCalibration adopted = measure::judge_calibration(text, path, job.text, check, tolerance);
  if (!adopted.calibration)
    unreadable = Error(ErrorCode::internal, "the calibration just measured does not read back: " + adopted.problem);
  detail::agree_on_failure(comm, unreadable, [](int rank) {
    return "the calibration just measured does not read back on rank " + std::to_string(rank);
  });
  c = std::move(*adopted.calibration);
  c.from_cache = false;
  c.warning = warning;
  std::string write_problem = keep(path, text, held);
  if (!compute) {
    const std::string table_text = agree_on_text(comm, measure::compute_table_text(m.compute, job.compute_key)).text;
    const std::string problem = keep(table_path, table_text, table_held);
    if (write_problem.empty()) write_problem = problem;
  }
  if (!write_problem.empty()) {
    c.cache_file.clear();
    c.warning += (c.warning.empty() ? "" : "; ") + write_problem;
  }
  c.this_call_s = seconds_since(start);
  return c;
}

}  // namespace cofuse

namespace cofuse {

std::optional<Calibration> cached_calibration(int ranks, const std::string& cache_dir) {
  namespace fs = std::filesystem;
  const std::string dir = cache_dir.empty() ? config::cache_dir().value : cache_dir;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string wanted_hosts = "hosts=" + std::string(host) + " ranks=" + std::to_string(ranks) + " ";
  std::optional<Calibration> newest;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("calibration-", 0) != 0 || entry.path().extension() != ".json") continue;
    const std::string text = measure::read_text(entry.path().string());
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      const std::string signature = j.at("signature").get<std::string>();
      if (signature.rfind(wanted_hosts, 0) != 0) continue;  // another host's or another size's
      measure::JudgedCalibration judged =
          measure::judge_calibration(text, entry.path().string(), signature, j.at("check_GBps").get<double>(), 0);
      if (judged.calibration && (!newest || judged.calibration->measured_at > newest->measured_at))
        newest = std::move(judged.calibration);
    } catch (const std::exception&) {
      // Malformed: skipped here; the next calibration on a communicator measures and replaces it.
    }
  }
  return newest;
}

namespace {

PlanningProfile named(const config::Setting<std::string>& name) {
  PlanningProfile p;
  p.profile = load_profile(name.value);
  p.source = "profile " + name.value + " (" + (name.source == config::Source::flag ? "given" : config::to_string(name.source)) +
             (p.profile.validated ? ", measured" : ", datasheet numbers") + ")";
  return p;
}

}  // namespace

PlanningProfile planning_profile(MPI_Comm comm, std::string_view flag, const CalibrateOptions& options) {
  const detail::CallDeadline deadline(detail::comm_state(comm), options.deadline_s, "choosing the planner's profile",
                                      [] { return std::string("a peer, agreeing on the planner's profile"); });
  const config::Setting<std::string> name = config::profile(flag);
  // Calibrating is collective: a rank that names a profile while another calibrates would leave
  // the other alone in its measurements. Every rank throws the same mismatch instead.
  agree_values(comm, "the planner's profile", {{"calibrated (no profile named)", name.value == config::kProfile}});
  if (name.value != config::kProfile) {
    // Agreed, so a rank that cannot read a named profile fails every rank, not only itself.
    PlanningProfile p;
    detail::run_collectively(detail::comm_state(comm).comm, [&] { p = named(name); },
                             [&](int rank) { return "rank " + std::to_string(rank) + " could not load profile " + name.value; });
    return p;
  }
  PlanningProfile p;
  p.calibration = calibrate(comm, options);
  p.profile = p.calibration->profile;
  p.source = p.calibration->summary();
  return p;
}

PlanningProfile planning_profile_offline(int ranks, std::string_view flag) {
  const config::Setting<std::string> name = config::profile(flag);
  if (name.value != config::kProfile) return named(name);
  PlanningProfile p;
  p.calibration = cached_calibration(ranks);
  if (p.calibration) {
    p.profile = p.calibration->profile;
    p.source = p.calibration->summary();
    return p;
  }
  p.profile = load_profile(std::string(config::kUncalibratedProfile));
  p.source = "No calibration is cached for " + std::to_string(ranks) + " ranks on this host (" +
             config::cache_dir().value + "; a run with --schedule auto under mpirun makes one): profile " +
             std::string(config::kUncalibratedProfile) + " instead.";
  return p;
}

}  // namespace cofuse
