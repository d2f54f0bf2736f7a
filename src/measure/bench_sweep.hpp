// What `cofuse bench` measures: the sweep of cases, from command-line lists and ranges or a
// sweep file, expanded into one BenchCase per (op, axis, dtype, M, N, K). Pure: no MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse::measure {

/// One layer shape to measure, with the cofuse schedules to run beside the baselines.
struct BenchCase {
  std::string label;  // the user's name for the layer, or ""
  OpKind op = OpKind::gemm_ar;
  Axis axis = Axis::none;
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::string schedules;  // "presets", "all", or a ';'-separated list of schedules / presets

  /// The description for `ranks` ranks (not validated).
  OpDesc desc(int ranks) const;
};

/// A sweep before expansion: every field a list; the cases are their cross product.
/// Strings are the CLI's spellings ("gemm_rs", "f32", "auto").
struct SweepSpec {
  std::string label;
  std::vector<std::string> ops{"gemm_ar"};
  std::vector<std::string> axes{"auto"};  // combinations whose axis does not suit the op are left out
  std::vector<std::string> dtypes{"f32"};
  std::vector<int64_t> m{128}, n{2048}, k{2048};
  bool trans_a = false, trans_b = false;
  std::string schedules = "presets";
};

/// nccl-tests style range: begin, begin*factor, ... up to and including end (factor > 1), or
/// begin, begin+step, ... when step > 0 (then factor is ignored).
/// Throws Error(invalid_argument) for begin < 1, end < begin, or neither factor > 1 nor step > 0.
std::vector<int64_t> size_range(int64_t begin, int64_t end, double factor, int64_t step);

/// "128,256,1024" -> {128, 256, 1024}. Throws Error(invalid_argument) naming `what` for an
/// empty list, a non-number or a value below 1.
std::vector<int64_t> parse_size_list(const std::string& text, const std::string& what);

/// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(const std::string& text, char separator = ',');

/// The cross product, in the order op, axis, dtype, M, N, K (M varies fastest but one, K fastest).
/// Throws Error(invalid_argument) for an unknown op, dtype or axis, or an op that no listed axis suits.
std::vector<BenchCase> expand(const SweepSpec& spec);

/// Reads a sweep file (JSON, format in docs/benchmarks.md): {"cases": [ {...}, ... ]}, every
/// case a SweepSpec whose missing fields come from `defaults` (the command line). A size is a
/// number, a list of numbers, or {"begin": b, "end": e, "factor": f} / {"begin", "end", "step"}.
/// Throws Error(io) when the file cannot be read, Error(invalid_argument) naming the file and
/// the field for anything malformed or unknown (a misspelt key is an error, not ignored).
std::vector<BenchCase> load_sweep_file(const std::string& path, const SweepSpec& defaults);

/// The schedules a sweep names for desc, in order: "all" (every valid schedule, serial
/// included), "presets" (the presets valid for desc), or a ';'-separated list of schedules and
/// presets, each of which must be valid for desc. Throws Error(invalid_argument) starting with
/// `where` for an item that does not parse or does not suit desc.
std::vector<Schedule> schedule_list(const std::string& schedules, const OpDesc& desc, const std::string& where);

/// A case ready to measure: its description and the cofuse schedules to run beside the baselines.
struct PreparedCase {
  OpDesc desc;
  std::vector<Schedule> schedules;  // from BenchCase::schedules, less serial (always measured as a
                                    // baseline) and repeats
};

/// Every case validated for `ranks` ranks before anything is measured (a sweep must not fail
/// after an hour). Throws Error(invalid_argument) starting "case I (DESC)" for an invalid
/// description or a schedule that does not suit it (the same on every rank).
std::vector<PreparedCase> prepare_cases(const std::vector<BenchCase>& cases, int ranks);

using cofuse::schedule_name;  // schedule.hpp

}  // namespace cofuse::measure
