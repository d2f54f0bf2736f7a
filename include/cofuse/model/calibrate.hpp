// Calibration: the machine profile `auto` plans with when no profile is named, measured on the
// communicator the op runs on, at first use, and kept on disk so later processes start at once.
//
// calibrate() measures, with the same probes `cofuse profile` uses but fewer repetitions and
// smaller messages (about 1-2 s on this project's host):
//   - the link as the schedules use it: latency, one direction and both directions busy (which
//     tells a full-duplex switched link from a shared medium), and the three collectives,
//     blocking and non-blocking polled as the executor drives them;
//   - the GEMM rate of this CPU and BLAS on a table of piece shapes (kept per host, BLAS and
//     thread count, so a second link on the same machine does not measure it again);
//   - contention: GEMM and communication slowing each other on one rank;
// agrees the result across ranks (every rank ends with the same profile), and writes it under
// cache_dir (config::cache_dir()) keyed by a signature: the hosts, ranks per host (host_layout: MPI_COMM_TYPE_SHARED or COFUSE_RANKS_PER_HOST), the MPI
// transport and the CPU. A later process with the same signature runs only a quick bandwidth check (a few
// tens of ms) and reuses the file unless the check disagrees with it by more than 25%. A file that is
// corrupt, of another schema or signature, or stale (the check disagrees) is measured again with
// a warning, never trusted and never a crash. Ranks whose files differ (other hosts, other
// home directories) measure again together, so they still agree.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <string_view>

#include "cofuse/model/profile.hpp"

namespace cofuse {

struct CalibrateOptions {
  /// Where calibrations are kept; "" = config::cache_dir().
  std::string cache_dir;
  /// false: measure even when a valid file exists (and replace it).
  bool use_cache = true;
  /// How far (a fraction) the quick check may be from the one kept with a file before the file
  /// is taken to describe another link and measured again. A check that disagrees is run a
  /// second time and the better one counts, so a burst of load does not cost a calibration.
  /// Where the ranks share one host and no TCP is named (shared memory), at least 2: there the
  /// check measures the cores' load, not a link that could have changed (3.2 to 6.1 GB/s in six
  /// idle processes in a row, 1 to 16 GB/s with 6 processes on 2 cores); a test that must reuse
  /// its file under any load passes a wider one.
  double check_tolerance = 0.25;
  /// Deadline of the whole calibration, seconds, as ExecSettings::deadline_s (< 0: the
  /// configured deadline; 0: none). Past it the rank reports what it waited for and the job
  /// is aborted (exit 124), as a call's deadline does.
  double deadline_s = -1;
};

/// What calibrate() found and where it came from.
struct Calibration {
  MachineProfile profile;     // validated; named "calibrated-<hash of the signature>"
  std::string signature;      // e.g. "hosts=vm ranks=2 per_host=2 host_groups=1 by MPI_COMM_TYPE_SHARED transport=tcp,self"
  double check_GBps = 0;      // the quick check of this process: ring exchange, GB/s per rank
  double cached_check_GBps = 0;  // the quick check kept with the file (= check_GBps when measured now)
  bool from_cache = false;    // the file was reused
  std::string measured_at;    // UTC time of the measurement
  double measure_s = 0;       // seconds the measurement took, when it was made
  double rest_s = 0;          // of which all but the GEMM table: the job's signature, the quick check, the link, the
                              // collectives, contention (0: a file kept before this was recorded)
  double table_s = 0;         // of which the GEMM table (0: the table kept for this CPU was reused)
  double this_call_s = 0;     // seconds calibrate() took in this process
  std::string cache_file;     // the file ("" when it could not be written; see warning)
  std::string warning;        // why a file was not reused, or could not be written ("" = none)

  /// One paragraph for explanations: what was measured, when, how long it took, the figures
  /// (GEMM rate, link latency and bandwidth, topology, collectives, contention).
  std::string summary() const;
  /// What the measurement's time went on: " (the GEMM table 0.71 s, the rest 0.24 s)", or
  /// " (the GEMM table kept for this CPU, the rest 0.24 s)"; "" for a file kept before this was
  /// recorded.
  std::string parts() const;
};

/// Collective over comm (every rank calls it; at least 1 rank; MPI_THREAD_SERIALIZED or more
/// for the contention probe, else it is skipped and said so). Returns the same Calibration
/// profile on every rank. One rank: only the GEMM table is measured; the link is not used.
/// Throws Error(mpi) for a failed MPI call, identically on every rank where it can.
Calibration calibrate(MPI_Comm comm, const CalibrateOptions& options = {});

/// Without a communicator (`cofuse plan`, `cofuse sim`): the calibration most recently
/// written under cache_dir ("" = config::cache_dir()) on this host for `ranks` ranks, or
/// nullopt. A malformed file is skipped. Not collective, no MPI.
std::optional<Calibration> cached_calibration(int ranks, const std::string& cache_dir = "");

/// The profile the planner uses, and how it was found.
struct PlanningProfile {
  MachineProfile profile;
  std::optional<Calibration> calibration;  // set when the profile is a calibration
  /// One line: "calibrated on this communicator ..." / "profile 8xH100-SXM (flag)" / "no
  /// calibration cached for 2 ranks on this host: this-host-shm".
  std::string source;
};

/// The one rule for `auto`: `flag` (a --profile option, LinearConfig::profile), else
/// $COFUSE_PROFILE, else config::kProfile ("calibrated"). Collective: the ranks first agree
/// whether they calibrate (a rank that names a profile while another does not: every rank throws
/// the same Error(mismatch)); a named profile is then loaded on every rank (one that cannot be
/// read fails every rank alike; ranks that read different files are not compared here: an
/// an auto operation plans with rank 0's answer); "calibrated" calls calibrate(comm, options).
PlanningProfile planning_profile(MPI_Comm comm, std::string_view flag = {}, const CalibrateOptions& options = {});

/// The same rule without a communicator: "calibrated" takes cached_calibration(ranks), else
/// config::kUncalibratedProfile, and `source` says so. No MPI.
PlanningProfile planning_profile_offline(int ranks, std::string_view flag = {});

}  // namespace cofuse
