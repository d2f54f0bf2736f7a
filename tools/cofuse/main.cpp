// `cofuse`: the command-line front end. Parsing happens before MPI starts, so `--help`,
// `--version` and usage errors work without mpirun and without MPI ranks.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cofuse/build_info.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"cofuse: fused AllGather+GEMM, GEMM+ReduceScatter and GEMM+AllReduce with explicit, measurable schedules.\n"
               "Run the ops under mpirun, e.g.  mpirun -np 2 cofuse run --op gemm_ar --m 128 --n 2048 --k 2048 --check"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version, git revision and libraries, then exit");

  auto run_command = cofuse::cli::add_run_command(app);
  auto plan_command = cofuse::cli::add_plan_command(app);
  auto bench_command = cofuse::cli::add_bench_command(app, argc, argv);
  auto report_command = cofuse::cli::add_report_command(app);
  auto sim_command = cofuse::cli::add_sim_command(app);
  auto tune_command = cofuse::cli::add_tune_command(app);
  auto profile_command = cofuse::cli::add_profile_command(app);
  auto train_step_command = cofuse::cli::add_train_step_command(app);
  auto calibrate_command = cofuse::cli::add_calibrate_command(app);
  auto config_command = cofuse::cli::add_config_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the usage error
    return code == 0 ? 0 : 2;
  }
  if (show_version) {
    const cofuse::BuildInfo info = cofuse::build_info();
    std::cout << "cofuse " << info.version << " (git " << info.git_revision << ")\n"
              << "compiler: " << info.compiler << "\n"
              << "mpi:      " << info.mpi << "\n"
              << "blas:     " << info.blas << "\n"
              << "bf16:     " << info.bf16_gemm << "\n"
              << "vectors:  " << (info.vector_level.empty() ? "-" : info.vector_level) << " (cofuse's own loops)\n";
    if (!info.blas_warning.empty()) std::cout << "warning:  " << info.blas_warning << "\n";
    return 0;
  }
  if (app.got_subcommand("run")) return run_command();
  if (app.got_subcommand("plan")) return plan_command();
  if (app.got_subcommand("bench")) return bench_command();
  if (app.got_subcommand("report")) return report_command();
  if (app.got_subcommand("sim")) return sim_command();
  if (app.got_subcommand("tune")) return tune_command();
  if (app.got_subcommand("profile")) return profile_command();
  if (app.got_subcommand("train-step")) return train_step_command();
  if (app.got_subcommand("calibrate")) return calibrate_command();
  if (app.got_subcommand("config")) return config_command();
  std::cout << app.help();
  return 0;
}
