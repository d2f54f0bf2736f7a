// Options that describe an op, shared by the subcommands that take one (run, plan).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"
#include "measure/bench_sweep.hpp"

namespace cofuse::cli {

struct OpArgs {
  std::string op = "gemm_ar";
  int64_t m = 128, n = 2048, k = 2048;  // seed 000's worked example, global sizes
  std::string dtype = "f32";
  bool trans_a = false, trans_b = false;
  std::string axis = "auto";
};

/// The same options as lists, for the subcommands that sweep (bench, tune): comma-separated.
struct ListArgs {
  std::string ops = "gemm_ar", axes = "auto", dtypes = "f32";
  std::string m = "128", n = "2048", k = "2048";  // seed 000's worked example
  bool trans_a = false, trans_b = false;
};

/// Registers --op --m --n --k --dtype --axis --trans-a --trans-b as lists; m_note is added to
/// the help of --m.
void add_list_options(CLI::App* app, ListArgs& args, const std::string& m_note = "");

/// The sweep those lists describe (schedules and label left at their defaults). Throws
/// Error(invalid_argument) naming the option for a malformed size list.
measure::SweepSpec sweep_of(const ListArgs& args);

/// Which dtypes --dtype accepts: those the CPU executor runs (a command that runs the op:
/// run), or every dtype some backend runs (a command that predicts any machine, GPUs included:
/// plan, sim). Both lists are can_run's answer (cofuse/backend.hpp), not written here.
enum class Dtypes { cpu_executor, any_backend };

/// Registers --op --m --n --k --dtype --trans-a --trans-b --axis on a subcommand.
void add_op_options(CLI::App* app, OpArgs& args, Dtypes dtypes = Dtypes::cpu_executor);

/// The description for `ranks` ranks (not yet validated: OpDesc::validate() says what is wrong).
OpDesc make_desc(const OpArgs& args, int ranks);

/// A CLI11 validator accepting a schedule string or preset (parse errors only; whether it suits
/// the op is checked later, identically on every rank).
CLI::Validator schedule_validator(bool allow_auto = false);

/// A CLI11 validator for --seed: an integer in 0..2^64-1.
CLI::Validator seed_validator();

}  // namespace cofuse::cli
