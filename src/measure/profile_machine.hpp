// `cofuse profile` as library work: every measurement of profile_measure.hpp in turn, then the
// MachineProfile (schema cofuse.profile/1) built from them, with a `sources` entry saying how,
// where and when each number was measured, and written so a failure leaves no half a file.
#pragma once

#include <mpi.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cofuse/model/profile.hpp"
#include "measure/profile_measure.hpp"

namespace cofuse::measure {

/// What the user says about the machine (what cannot be measured) and how long to measure.
struct ProfileRequest {
  std::string name = "this-host";  // the profile's name
  std::string link;                // the link between ranks, in words, kept in the description
  /// How links are shared: "switch" or "shared" (NetworkModel::topology), or "auto": detected
  /// (detect_topology, profile_measure.hpp), and "two_level" where the ranks sit on two hosts or
  /// more of equally many ranks (two_level_ranks_per_host).
  std::string topology = "auto";
  std::string note;                // kept in the profile's note field
  bool quick = false;              // fewer shapes and repetitions: seconds, less precise
  std::string tool = "cofuse profile";  // what measured, in the description and every source
};

/// Everything the measurements found, as every rank has it.
struct Measured {
  ComputeResult compute;
  NetworkResult network;
  ContentionResult contention;
  int task_reps = 0;
  double task_overhead_s = 0;
};

/// Progress steps of measure_machine, weighted by how long each part takes (the GEMM grid
/// most), so the time left shown is about right.
inline constexpr int kComputeSteps = 7, kNetworkSteps = 2, kContentionSteps = 1;
inline constexpr int kProfileSteps = kComputeSteps + kNetworkSteps + kContentionSteps;

/// Reports progress: steps done of kProfileSteps, the fraction of the next one, what runs now.
using StepProgress = std::function<void(int done, double fraction, const std::string& what)>;

/// Collective over comm (at least 2 ranks; MPI_THREAD_SERIALIZED or more): compute, network,
/// contention and task overhead. Throws Error(invalid_argument), identically on every rank,
/// when the link is too slow to profile; Error(mpi) for a failed MPI call (this rank's own).
Measured measure_machine(MPI_Comm comm, bool quick, const StepProgress& progress);

/// The profile those measurements give. machine: machine_json() of the same ranks.
MachineProfile build_profile(const ProfileRequest& request, const Measured& m, int ranks,
                             const nlohmann::ordered_json& machine);

/// Why `out` cannot be written ("" when it can), checked before any measuring.
std::string output_problem(const std::string& out);

/// Writes text beside `out` (a temporary named after this process) and renames it there, so a
/// failed write leaves no half a file and concurrent writers of the same file do not mix.
/// Throws Error(io).
void write_file_atomically(const std::string& out, const std::string& text);

}  // namespace cofuse::measure
