// `cofuse profile`: measures this machine and writes the MachineProfile (JSON, schema
// cofuse.profile/1) that the simulator predicts plans with. Every number it writes is measured
// here (the topology too, unless --topology names it), except roofline fields the measured GEMM
// table makes unused; `sources` says which is which, how, where and when.
//
// Flow: parse (no MPI) -> MPI -> at least 2 ranks -> ranks agree on the options -> rank 0 checks
// it can write --out -> measurements (measure/profile_machine.hpp), each collective -> rank 0
// builds the profile, validates it, checks it reads back identically, writes it.
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>

#include "cofuse/cofuse.hpp"
#include "cofuse/model/profile.hpp"
#include "commands.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/bench_record.hpp"
#include "measure/op_data.hpp"
#include "measure/profile_machine.hpp"
#include "measure/text.hpp"
#include "mpi_command.hpp"
#include "progress.hpp"

namespace cofuse::cli {

namespace {

using detail::mpi_check;

struct ProfileArgs {
  ProfileRequest request;
  std::string out;
  bool quiet = false;
};

void print_summary(std::ostream& o, const MachineProfile& p, const Measured& m, const std::string& out) {
  const NetworkModel& n = p.network;
  auto coll = [&](const char* name, const CollectiveModel& c) {
    o << "  " << std::left << std::setw(15) << name << std::right << "alpha " << fixed(c.alpha_s * 1e6, 1)
      << " us, busbw " << fixed(c.busbw_GBps, 3) << " GB/s; non-blocking, polled: alpha "
      << fixed(c.nonblocking_alpha_s * 1e6, 1) << " us, busbw " << fixed(c.nonblocking_busbw_GBps, 3) << " GB/s";
    if (c.beyond_bytes > 0)
      o << "; beyond " << int64_t(c.beyond_bytes) << " B: busbw " << fixed(c.beyond_busbw_GBps, 3)
        << " GB/s, polled " << fixed(c.nonblocking_beyond_busbw_GBps, 3) << " GB/s (0: the line's)";
    o << "\n";
  };
  const GemmPoint& first = m.compute.grid.front();
  o << "cofuse profile  " << p.name << "\n"
    << "  " << p.description << "\n"
    << "  compute        f32 peak " << fixed(p.compute.peak_gflops_f32, 1) << " GFLOP/s per rank (" << m.compute.grid.size()
    << " shapes, from " << fixed(first.gflops, 1) << " at " << first.m << "x" << first.n << "x" << first.k << "), f64 "
    << fixed(p.compute.peak_gflops_f64, 1) << " GFLOP/s, copy " << fixed(p.compute.memory_GBps, 2) << " GB/s, BLAS call "
    << fixed(p.compute.launch_s * 1e6, 2) << " us\n"
    << "  link           " << n.topology << ", alpha " << fixed(n.alpha_s * 1e6, 2) << " us, bandwidth "
    << fixed(n.bandwidth_GBps, 3) << " GB/s (" << fixed(n.bandwidth_GBps * 8, 2) << " Gbit/s)"
    << (n.topology == "two_level" ? " inside a host of " + std::to_string(n.ranks_per_node) + " ranks" : std::string())
    << "; a message polled by a progress thread takes at least " << fixed(n.polled_floor_polls, 2) << " polls ("
    << fixed(n.polled_floor_polls_at(NetworkModel::kPolledFloorSmallBytes), 2) << " at "
    << (NetworkModel::kPolledFloorSmallBytes >> 10) << " KiB or less)\n";
  if (n.topology == "two_level")
    o << "  between hosts  alpha " << fixed(n.inter_alpha_s * 1e6, 2) << " us, bandwidth " << fixed(n.inter_bandwidth_GBps, 3)
      << " GB/s (" << fixed(n.inter_bandwidth_GBps * 8, 2) << " Gbit/s) "
      << (n.nics_per_node == 1 ? "per host, one link its ranks share" : "per rank, a link each") << "\n";
  coll("allgather", n.allgather);
  coll("reduce_scatter", n.reduce_scatter);
  coll("allreduce", n.allreduce);
  o << "  contention     GEMM at " << fixed(p.contention.gemm_rate_while_comm, 3) << " of its speed while communicating, "
    << "communication at " << fixed(p.contention.comm_rate_while_gemm, 3) << " while multiplying\n"
    << "  task overhead  " << fixed(p.task_overhead_s * 1e6, 2) << " us\n"
    << "wrote " << out << " (valid; reads back identically)\n";
}

int profile(const ProfileArgs& args, MPI_Comm comm) {
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  if (size < 2) {
    std::cerr << "cofuse profile: error: needs at least 2 ranks, to measure the network between them "
                 "(e.g. mpirun -np 2 cofuse profile --out FILE)"
              << std::endl;
    return 1;
  }
  agree_values(comm, "cofuse profile options",
               {{"quick", args.request.quick}, {"topology", args.request.topology == "auto" ? 0 : args.request.topology == "shared" ? 1 : 2}});

  bool writable = true;
  if (rank == 0) {
    if (const std::string problem = output_problem(args.out); !problem.empty()) {
      std::cerr << "cofuse profile: error: " << problem << std::endl;
      writable = false;
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && size > cores)
      std::cerr << "cofuse profile: warning: " << size << " ranks on " << cores
                << " cores: ranks share cores, and the profile describes that sharing" << std::endl;
  }
  if (!ok_everywhere(writable)) return 1;

  Progress progress(kProfileSteps, rank != 0 || args.quiet, "profile", "step");
  const Measured m = measure_machine(comm, args.request.quick, [&progress](int done, double fraction, const std::string& what) {
    progress.update(done, fraction, what);
  });
  progress.finish();
  LinkProbe link;
  link.description = args.request.link;
  const nlohmann::ordered_json machine = machine_json(comm, link);

  bool ok = true;
  if (rank == 0) {
    try {
      const MachineProfile p = build_profile(args.request, m, size, machine);
      throw_if_error(p.validate());
      const std::string text = to_json(p);
      if (!(parse_profile(text, args.out) == p))  // field by field, as the profile fuzzer checks
        throw Error(ErrorCode::internal, "the profile does not read back identically from its JSON");
      write_file_atomically(args.out, text);
      print_summary(std::cout, p, m, args.out);
    } catch (const std::exception& e) {
      std::cerr << "cofuse profile: error: the measured profile was not written: " << e.what() << std::endl;
      ok = false;
    }
  }
  return ok_everywhere(ok) ? 0 : 1;
}

// MPI calls of the measurements return errors (checked, as cofuse::Error) instead of aborting.
class ReturningComm {
 public:
  ReturningComm() {
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  ~ReturningComm() { MPI_Comm_free(&comm_); }  // unchecked: a destructor cannot throw
  ReturningComm(const ReturningComm&) = delete;
  ReturningComm& operator=(const ReturningComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Agreement and the decisions all ranks take from the same agreed data (invalid_argument) fail
// alike everywhere and are printed once; anything else is this rank's own and aborts the job.
int profile_command(const ProfileArgs& args) {
  return run_with_mpi("profile", [&args] {
    // The contention measurement's exchange thread is the only thread calling MPI while it runs.
    int provided = 0;
    mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error(ErrorCode::invalid_argument,
                  "this MPI library gives threads no MPI access (MPI_THREAD_SERIALIZED or more is needed)");
    const ReturningComm comm;
    return profile(args, comm.get());
  });
}

}  // namespace

std::function<int()> add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* p = app.add_subcommand(
      "profile",
      "Measure this machine under mpirun (at least 2 ranks; one core each) and write a machine profile for the\n"
      "simulator: GEMM rates, memory copy, link latency and bandwidth, the MPI collectives, and how GEMM and\n"
      "communication slow each other. Well under a minute (--quick: seconds). See docs/cli.md.");
  p->add_option("--out", args->out, "Write the profile (JSON, schema cofuse.profile/1) to this file")->required();
  p->add_option("--name", args->request.name, "The profile's name")->capture_default_str();
  p->add_option("--note", args->request.note,
                "A remark kept in the profile's note field (what it was measured for, where it is used); the\n"
                "measured fields and the description are always what was measured");
  p->add_option("--topology", args->request.topology,
                "How the ranks' links are shared: switch (a full-duplex link per rank), shared (one medium for all\n"
                "traffic), or auto: detected from one direction alone against both at once, and two_level where the\n"
                "ranks sit on two hosts or more of equally many ranks (MPI_COMM_TYPE_SHARED, or COFUSE_RANKS_PER_HOST)")
      ->check(CLI::IsMember({"auto", "switch", "shared"}))
      ->capture_default_str();
  p->add_option("--link", args->request.link,
                "What the link between ranks is, in words, kept in the description "
                "(default: $COFUSE_LINK, else 'not described')");
  p->add_flag("--quick", args->request.quick, "4 GEMM shapes and fewer repetitions: seconds, less precise (for tests)");
  p->add_flag("--quiet", args->quiet, "No progress on stderr");
  return [args] {
    args->request.link = config::link(args->request.link).value;
    return profile_command(*args);
  };
}

}  // namespace cofuse::cli
