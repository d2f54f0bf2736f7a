// `cofuse calibrate`: what `--schedule auto` does on its own at first use, on demand — measures
// (or reuses) the calibration of this communicator (include/cofuse/model/calibrate.hpp), prints what
// it found, what it cost and where it is kept. --repeat times the first call against the
// cached ones; --force measures every time.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cofuse/model/calibrate.hpp"
#include "cofuse/config.hpp"
#include "cofuse/ops.hpp"
#include "commands.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/text.hpp"
#include "mpi_command.hpp"

namespace cofuse::cli {

namespace {

struct CalibrateArgs {
  CalibrateOptions options;
  int repeat = 1;
  bool json = false;
};

int calibrate_command(const CalibrateArgs& args) {
  return run_with_mpi("calibrate", [&args] {
    const int rank = detail::comm_rank(MPI_COMM_WORLD);
    agree_values(MPI_COMM_WORLD, "cofuse calibrate options", {{"repeat", args.repeat}, {"force", !args.options.use_cache}});
    for (int i = 0; i < args.repeat; ++i) {
      const Calibration c = calibrate(MPI_COMM_WORLD, args.options);
      if (rank != 0) continue;
      if (args.json) {
        nlohmann::ordered_json j = {{"call", i + 1},          {"from_cache", c.from_cache},   {"this_call_s", c.this_call_s},
                                    {"measure_s", c.measure_s}, {"rest_s", c.rest_s}, {"table_s", c.table_s},
                                    {"measured_at", c.measured_at}, {"signature", c.signature},
                                    {"check_GBps", c.check_GBps}, {"cache_file", c.cache_file}, {"warning", c.warning},
                                    {"profile", c.profile.name},  {"summary", c.summary()}};
        std::cout << j.dump() << std::endl;
        continue;
      }
      if (!c.warning.empty()) std::cerr << "cofuse calibrate: warning: " << c.warning << std::endl;
      std::cout << "call " << i + 1 << ": " << (c.from_cache ? "reused" : "measured") << " in "
                << fixed(c.this_call_s * 1e3, 1) << " ms; profile " << c.profile.name << ", kept in "
                << (c.cache_file.empty() ? "(not kept)" : c.cache_file) << "\n";
      if (i == 0) std::cout << c.summary() << "\n";
    }
    return 0;
  });
}

}  // namespace

std::function<int()> add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* c = app.add_subcommand(
      "calibrate",
      "Measure this communicator's link, GEMM rates and contention as --schedule auto does at first use\n"
      "(about 1-2 s), or reuse the calibration kept for it, and print the figures. Run under mpirun.");
  c->add_option("--cache-dir", args->options.cache_dir,
                "Where calibrations are kept (default: $COFUSE_CACHE_DIR, else $XDG_CACHE_HOME/cofuse, else ~/.cache/cofuse)");
  c->add_flag("--force", [args](int64_t) { args->options.use_cache = false; }, "Measure even when a calibration is kept");
  c->add_option("--repeat", args->repeat, "Calibrate this many times (the first measures or reuses, the rest reuse)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  c->add_option("--deadline", args->options.deadline_s,
                "Seconds the calibration may take before the job is aborted (default: $COFUSE_DEADLINE_S, else " +
                    std::to_string(int(config::kDeadlineS)) + "; 0 = none)")
      ->check(CLI::Range(0.0, 1e9));
  c->add_flag("--json", args->json, "One JSON object per call");
  return [args] { return calibrate_command(*args); };
}

}  // namespace cofuse::cli
