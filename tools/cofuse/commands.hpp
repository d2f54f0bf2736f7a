// The subcommands of the `cofuse` tool. Each registers its options on the parser and
// returns the process exit code when run: 0 ok, 1 failure (check or runtime), 2 usage.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

// The subcommands call the measurement library (src/measure) by its names alone.
namespace cofuse::measure {}
namespace cofuse::cli {
using namespace cofuse::measure;

/// Adds `cofuse run` to app; the returned function runs it after parsing (it initialises MPI).
std::function<int()> add_run_command(CLI::App& app);

/// Adds `cofuse plan` (no MPI needed).
std::function<int()> add_plan_command(CLI::App& app);

/// Adds `cofuse bench` (initialises MPI when run). argc/argv are kept in every record.
std::function<int()> add_bench_command(CLI::App& app, int argc, char** argv);

/// Adds `cofuse sim` (no MPI needed).
std::function<int()> add_sim_command(CLI::App& app);

/// Adds `cofuse tune` (initialises MPI when run).
std::function<int()> add_tune_command(CLI::App& app);

/// Adds `cofuse report` (no MPI needed).
std::function<int()> add_report_command(CLI::App& app);

/// Adds `cofuse profile` (initialises MPI when run; needs at least 2 ranks).
std::function<int()> add_profile_command(CLI::App& app);

/// Adds `cofuse train-step` (initialises MPI when run).
std::function<int()> add_train_step_command(CLI::App& app);

/// Adds `cofuse calibrate` (initialises MPI when run).
std::function<int()> add_calibrate_command(CLI::App& app);

/// Adds `cofuse config` (no MPI needed): every setting, its value and where it came from.
std::function<int()> add_config_command(CLI::App& app);

}  // namespace cofuse::cli
