// The one measuring path of `cofuse bench`, `run` and `tune`: ways of running the op (the
// baselines and cofuse schedules) timed interleaved (the order shuffled each iteration, so drift
// hits all alike and no variant always follows the same one), each time the slowest rank's; every output checked against the independent
// reference after a fresh call on poisoned buffers. All of it is collective over MPI_COMM_WORLD.
//
//   measure_case            bench and tune: G, M, serial, naive and the schedules, then each
//                           schedule's GEMM pieces alone (DIL) and its communication alone
//   measure_against_serial  run --schedules: each schedule interleaved with serial alone
//   measure_operation       run: one Operation's calls, timed
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/ops.hpp"
#include "cofuse/tools/reference.hpp"
#include "cofuse/schedule.hpp"
#include "measure/op_data.hpp"
#include "measure/timing.hpp"

namespace cofuse::measure {

struct MeasureSettings {
  int iters = 10, warmup = 2;
  int naive_chunks = 4;
  ExecSettings exec;  // also: exec.deadline_s bounds every timed call with the barrier and reductions around it
  std::string trace_prefix;  // non-empty: write PREFIX-serial.json and PREFIX-best.json traces
  /// The communicator every variant of measure_case and measure_against_serial runs on (the
  /// caller's; cofuse duplicates it for its own messages as every Operation does).
  /// measure_operation and check_fresh_call use the operation's own (Operation::comm).
  MPI_Comm comm = MPI_COMM_WORLD;
};

/// One measured way of running the op (serial, naive or a cofuse schedule).
struct VariantResult {
  std::string kind;      // "serial", "naive", "unfused" (serial-ring, or overlap=none asked for) or "cofuse"
  std::string schedule;  // full schedule string; "naive:chunks=C" for the naive baseline
  std::string name;      // preset name, or the schedule string
  Summary total, gemm;   // slowest rank per call
  Summary comm;          // cofuse: time with communication in flight (rank that waited least)
  Summary progress_cpu;  // cofuse: CPU time of the progress thread per call, slowest rank
  std::optional<double> chunks_alone_s;  // cofuse: median GEMM time of its pieces, nothing else running
  std::optional<double> comm_alone_s;    // cofuse: median time of its own communication, no GEMM at all
  std::optional<double> comm_alone_cpu_s;  // cofuse: CPU time (user + system, all threads) the
                                           // rank spends on that communication, slowest rank
  int64_t workspace_bytes = 0;
  CheckResult check;
  std::string trace_file;  // written trace, or ""
};

struct CaseResult {
  OpDesc desc;
  uint64_t seed = 0;
  Summary gemm_alone, comm_alone;  // G and M, interleaved with everything else
  Summary comm_alone_p2p;          // the serial-ring baseline's communication alone (cofuse's
                                   // point-to-point ring, no GEMM), interleaved likewise
  double gemm_alone_dil_s = 0;     // G again, median of the runs interleaved with the pieces-alone runs
  double comm_alone_cpu_s = 0;     // CPU time a rank spends in M (user + system), slowest rank:
                                   // what communication takes from the cores the GEMM needs
  std::vector<VariantResult> variants;  // serial, naive, serial-ring, then the schedules in order
  const VariantResult& serial() const { return variants.at(0); }
  const VariantResult& naive() const { return variants.at(1); }
  const VariantResult& serial_ring() const { return variants.at(2); }
  /// The honest baseline: the fastest unfused way (the library collective, cofuse's ring, or an
  /// unfused schedule that was asked for, such as serial,algo=direct).
  const VariantResult& best_unfused() const;
  /// The fastest communication alone: the library collective (M), the ring's (M'), or that of an
  /// unfused schedule that was asked for.
  double best_unfused_comm_s() const;
  /// The fastest cofuse schedule by median time, or serial when none ran.
  const VariantResult& best() const;
};

/// Where each variant sits in CaseResult::variants.
inline constexpr std::size_t kFirstSchedule = 3;

/// Bench and tune. desc must be valid and every schedule valid for it. progress(fraction) is
/// called on every rank as the case advances (0..1).
CaseResult measure_case(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                        const MeasureSettings& settings, const std::function<void(double)>& progress);

/// One schedule of `cofuse run --schedules` and the serial calls interleaved with it. The serial
/// calls' GEMM and communication phases are G and M (measured in the same run).
struct AgainstSerial {
  VariantResult serial, schedule;  // schedule.check: its output after a fresh call
  double speedup() const { return serial.total.median / schedule.total.median; }
  /// max(G, M) / T: 1 when the schedule takes no longer than its longer phase alone.
  double overlap_efficiency() const {
    return std::max(serial.gemm.median, serial.comm.median) / schedule.total.median;
  }
};

/// Run --schedules: each schedule, in order, timed interleaved call by call with the serial
/// baseline (settings.warmup untimed pairs first), then checked; each(result) is called on every
/// rank as soon as a schedule is done. Throws what Operation throws for a schedule the op rejects.
void measure_against_serial(const OpDesc& desc, const std::vector<Schedule>& schedules, uint64_t seed,
                            const MeasureSettings& settings, const std::function<void(const AgainstSerial&)>& each);

/// Run: settings.warmup untimed calls of op, then settings.iters timed ones (kind, names, check
/// and workspace left empty).
VariantResult measure_operation(Operation& op, const OpBuffers& buffers, const MeasureSettings& settings);

/// One more, untimed call of op on poisoned outputs and workspace, checked against reference:
/// the check sees only what that call wrote.
CheckResult check_fresh_call(Operation& op, Inputs& in, const Reference& reference);

}  // namespace cofuse::measure
