// `cofuse tune`: measure the planner's best-predicted schedules (and serial) on this machine and
// write the winners to a tuning database that the planner consults before its model.
//
// Flow: parse and expand the cases (no MPI) -> MPI -> ranks agree on the cases -> for each case
// the model ranks every schedule on --profile; its top K and serial are measured interleaved
// (bench_measure.hpp: the slowest rank's time, every output checked) -> rank 0 records the
// winner with its provenance -> the database is written once, at the end.
#include <mpi.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cofuse/backend.hpp"
#include "cofuse/model/calibrate.hpp"
#include "measure/bench_measure.hpp"
#include "measure/bench_sweep.hpp"
#include "cofuse/cofuse.hpp"
#include "commands.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "mpi_command.hpp"
#include "measure/op_data.hpp"
#include "op_options.hpp"
#include "progress.hpp"
#include "measure/text.hpp"
#include "tune/winner.hpp"

namespace cofuse::cli {

namespace {

struct TuneArgs {
  ListArgs lists;
  std::string profile;  // "" = config::profile()'s rule
  std::string db;
  int top = 3, iters = 10, warmup = 2;
  double margin = -1;  // an overlap must beat serial by this much to be recorded; < 0 = config::noise_guard()
  bool quiet = false;
};

int tune(const TuneArgs& args, const std::vector<BenchCase>& cases) {
  const int rank = detail::comm_rank(MPI_COMM_WORLD), size = detail::comm_size(MPI_COMM_WORLD);
  std::ostringstream digest;
  for (const BenchCase& c : cases) digest << c.desc(size).to_string() << ";";
  // The noise guard is each rank's reading of $COFUSE_NOISE_GUARD: a rank that cannot read it
  // fails every rank in the same agreement, instead of leaving them in the next collective.
  double margin = args.margin;
  Status read;
  try {
    if (margin < 0) margin = config::noise_guard().value;
  } catch (const Error& e) {
    read = {e.code(), e.what()};
  }
  agree_values(MPI_COMM_WORLD, "cofuse tune options",
               {{"cases", int64_t(cases.size())}, {"sweep digest", int64_t(std::hash<std::string>{}(digest.str()) >> 1)},
                {"top", args.top}, {"iters", args.iters}, {"warmup", args.warmup},
                {"margin (ppm)", int64_t(std::llround(margin * 1e6))}},
               read);
  const PlanningProfile planning = planning_profile(MPI_COMM_WORLD, args.profile);
  const MachineProfile& profile = planning.profile;
  std::vector<OpDesc> descs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const OpDesc d = cases[i].desc(size);
    if (const Status st = d.validate(); !st.ok())
      throw Error(ErrorCode::invalid_argument, "case " + std::to_string(i + 1) + ": " + st.message());
    descs.push_back(d);
  }
  std::string warning;
  TuningDb db = TuningDb::load(args.db, &warning);
  if (rank == 0 && !warning.empty()) std::cerr << warning << " (starting a new one)\n";
  PlannerOptions model;
  model.consult_tuning_db = false;
  model.backend = Backend::cpu_mpi;  // tune measures on the CPU executor, whatever the profile describes
  PlannerCache planner_cache;  // a sweep may list a shape twice
  const uint64_t seed = agree_seed("");
  Progress progress(int(cases.size()), rank != 0 || args.quiet, "tune");
  bool all_passed = true;
  if (rank == 0)
    std::cout << "cofuse tune  " << cases.size() << " case(s) on " << size << " ranks; the model (" << profile.name
              << ") proposes, " << args.iters << " interleaved iterations decide; database " << args.db << "\n";
  for (std::size_t i = 0; i < descs.size(); ++i) {
    const OpDesc& d = descs[i];
    const PlanChoice plan = choose_schedule(d, profile, model, &planner_cache);
    std::vector<Schedule> top;
    for (const PlanCandidate& c : plan.candidates)
      if (c.schedule.overlap != Overlap::none && int(top.size()) < args.top) top.push_back(c.schedule);
    MeasureSettings settings;
    settings.iters = args.iters;
    settings.warmup = args.warmup;
    progress.update(int(i), 0, d.to_string());
    const CaseResult r = measure_case(d, top, seed + i, settings,
                                      [&](double f) { progress.update(int(i), f, d.to_string()); });
    progress.update(int(i) + 1, 0, d.to_string());
    // Serial first, then the overlapped variants that ran; one that failed its check cannot win.
    std::vector<detail::MeasuredCandidate> measured;
    measured.push_back({serial_schedule(), r.serial().name, r.serial().total.median, true});
    for (const VariantResult& v : r.variants) {
      all_passed = all_passed && v.check.passed();
      if (v.kind == "naive" || &v == &r.serial()) continue;
      measured.push_back({*Schedule::parse(v.schedule), v.name, v.total.median, v.check.passed()});
    }
    const std::size_t winner = detail::pick_winner(measured, margin);
    if (rank != 0) continue;
    progress.finish();
    const TuningEntry e = detail::winner_entry(d, profile.name, measured, winner, "cofuse tune");
    db.put(e);
    std::cout << "\n" << d.to_string() << "\n  measured (ms): " << e.candidates << "\n  model's pick " << plan.name
              << " (predicted " << std::fixed << std::setprecision(3) << plan.predicted_s * 1e3 << " ms); winner "
              << measured[winner].name << " " << e.winner_ms << " ms, " << std::setprecision(2) << e.serial_ms / e.winner_ms
              << "x over serial\n";
  }
  progress.finish();
  bool saved = true;
  if (rank == 0) {
    try {
      db.save(args.db);
      std::cout << "\nwrote " << args.db << " (" << db.entries().size() << " entries); the planner reads it with "
                << "COFUSE_TUNING_DB=" << args.db << " or PlannerOptions::tuning_db\n";
    } catch (const Error& e) {
      std::cerr << "cofuse tune: error: " << e.what() << std::endl;
      saved = false;
    }
  }
  return ok_everywhere(saved) && all_passed ? 0 : 1;
}

}  // namespace

std::function<int()> add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* t = app.add_subcommand(
      "tune", "Measure the planner's best-predicted schedules and serial on this machine (under mpirun) and write\n"
              "the winners to a tuning database the planner consults first. See docs/planner.md.");
  add_list_options(t, args->lists);
  t->add_option("--profile", args->profile,
                "The machine's profile: ranks the candidates and names the machine (default $COFUSE_PROFILE, else " +
                    std::string(config::kProfile) + ")");
  t->add_option("--db", args->db, "The tuning database (JSON) to update")->required();
  t->add_option("--top", args->top, "Best-predicted overlapped schedules to measure beside serial")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  t->add_option("--iters", args->iters, "Timed iterations of each")->check(CLI::PositiveNumber)->capture_default_str();
  t->add_option("--warmup", args->warmup, "Untimed iterations first")->check(CLI::NonNegativeNumber)->capture_default_str();
  t->add_option("--margin", args->margin,
                "An overlapped schedule must beat serial by this fraction to be recorded as the winner (noise guard;\n"
                "default $COFUSE_NOISE_GUARD, else " + std::to_string(config::kNoiseGuard).substr(0, 4) + ", as online tuning)")
      ->check(CLI::Range(0.0, 0.9));
  t->add_flag("--quiet", args->quiet, "No progress on stderr");
  return [args] {
    std::vector<BenchCase> cases;
    try {
      cases = expand(sweep_of(args->lists));
    } catch (const Error& e) {
      std::cerr << "cofuse tune: error: " << e.what() << std::endl;
      return 2;
    }
    // A profile or database that cannot be read fails alike on every rank (they read the same files).
    return run_with_mpi("tune", [&] { return tune(*args, cases); },
                        {ErrorCode::mismatch, ErrorCode::invalid_argument, ErrorCode::io});
  };
}

}  // namespace cofuse::cli
