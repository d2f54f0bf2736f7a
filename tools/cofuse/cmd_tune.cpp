// `cofuse tune`: race the planner's best-predicted schedules, serial and the best other unfused
// way on this machine and write the winners to a tuning database that the planner consults
// before its model.
//
// Flow: parse and expand the cases (no MPI) -> MPI -> ranks agree on the cases -> for each case
// an auto Operation (the context's, as online tuning makes it, with the database neither read
// nor written) runs its race (tune/race.hpp: successive halving within --calls) on random data,
// every call's output checked against the reference -> rank 0 records the winner with its
// provenance -> the database is written once, at the end. One rule for online and offline
// tuning: this is online tuning on calls made for the purpose.
#include <mpi.h>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "cofuse/backend.hpp"
#include "cofuse/model/calibrate.hpp"
#include "cofuse/context.hpp"
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
  int top = OperationOptions{}.candidates;
  int calls = -1;  // the race's budget; < 0 = config::autotune_calls()
  double margin = -1;  // an overlap must beat serial by this much to be recorded; < 0 = config::noise_guard()
  bool quiet = false;
};

std::string ms_text(double seconds) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << seconds * 1e3;
  return o.str();
}

int tune(const TuneArgs& args, const std::vector<BenchCase>& cases) {
  const int rank = detail::comm_rank(MPI_COMM_WORLD), size = detail::comm_size(MPI_COMM_WORLD);
  std::ostringstream digest;
  for (const BenchCase& c : cases) digest << c.desc(size).to_string() << ";";
  // The noise guard and the budget are each rank's reading of $COFUSE_NOISE_GUARD and
  // $COFUSE_AUTOTUNE_CALLS: a rank that cannot read them fails every rank in the same agreement,
  // instead of leaving them in the next collective.
  double margin = args.margin;
  int calls = args.calls;
  Status read;
  try {
    if (margin < 0) margin = config::noise_guard().value;
    if (calls < 0) calls = config::autotune_calls().value;
  } catch (const Error& e) {
    read = {e.code(), e.what()};
  }
  agree_values(MPI_COMM_WORLD, "cofuse tune options",
               {{"cases", int64_t(cases.size())}, {"sweep digest", int64_t(std::hash<std::string>{}(digest.str()) >> 1)},
                {"top", args.top}, {"calls", calls}, {"margin (ppm)", int64_t(std::llround(margin * 1e6))}},
               read);
  std::vector<OpDesc> descs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const OpDesc d = cases[i].desc(size);
    if (const Status st = d.validate(); !st.ok())
      throw Error(ErrorCode::invalid_argument, "case " + std::to_string(i + 1) + ": " + st.message());
    descs.push_back(d);
  }
  Context& context = Context::of(MPI_COMM_WORLD);
  const PlanningProfile& planning = context.profile(args.profile);
  std::string warning;
  TuningDb db = TuningDb::load(args.db, &warning);
  if (rank == 0 && !warning.empty()) std::cerr << warning << " (starting a new one)\n";
  OperationOptions options;
  options.profile = args.profile;
  options.tune_calls = calls;
  options.candidates = args.top;
  options.noise_guard = margin;
  // Offline tuning is the measurement itself, not a user's job paying for it: the race's rule
  // (halving, the noise stop, the call budget) without the excess bound of first use.
  options.tune_excess = 0;
  options.record = false;  // written here, once, to --db
  options.who = "cofuse tune";
  options.planner.consult_tuning_db = false;  // measure, whatever a database says
  const uint64_t seed = agree_seed("");
  Progress progress(int(cases.size()), rank != 0 || args.quiet, "tune");
  bool all_passed = true;
  if (rank == 0)
    std::cout << "cofuse tune  " << cases.size() << " case(s) on " << size << " ranks; the model (" << planning.profile.name
              << ") proposes, a race of at most " << calls << " calls decides; database " << args.db << "\n";
  for (std::size_t i = 0; i < descs.size(); ++i) {
    const OpDesc& d = descs[i];
    progress.update(int(i), 0, d.to_string());
    Inputs in(d, seed + i, rank);
    const OpBuffers buffers = in.buffers();
    const Reference reference(d, buffers.a, buffers.b, MPI_COMM_WORLD);
    Operation op = context.operation(d, ScheduleChoice::automatic(), options);
    // Every call of the race on poisoned outputs, checked: a candidate that computes a wrong
    // answer fails the command, and cannot be recorded.
    std::set<std::string> failed;
    while (!op.tuning()->settled()) {
      const std::string running = op.schedule().to_string();
      if (!check_fresh_call(op, in, reference).passed()) failed.insert(running);
      const TuningReport& t = *op.tuning();
      progress.update(int(i), t.tune_calls > 0 ? double(t.calls) / t.tune_calls : 1.0, d.to_string());
    }
    progress.update(int(i) + 1, 0, d.to_string());
    const TuningReport& t = *op.tuning();
    all_passed = all_passed && failed.empty();
    if (rank != 0) continue;
    progress.finish();
    if (t.settled_by != SettledBy::measurement) {
      std::cout << "\n" << d.to_string() << "\n  not raced: " << op.explain() << "\n";
      continue;
    }
    std::vector<detail::MeasuredCandidate> measured;
    for (const TunedCandidate& c : t.candidates) measured.push_back({c.schedule, c.name, c.median_s, c.calls > 0});
    const TuningEntry e = detail::winner_entry(d, planning.profile.name, measured, t.winner, "cofuse tune");
    if (failed.count(t.candidates[t.winner].schedule.to_string()) == 0) db.put(e);
    if (failed.empty()) detail::add_evidence(db, d, t, "cofuse tune");
    std::cout << "\n" << d.to_string() << "\n  measured (ms): " << e.candidates << "\n  raced " << t.calls_raced << " calls in "
              << t.rounds << " rounds (" << t.stop_reason << "); model's pick " << t.model_choice.name << " (predicted "
              << ms_text(t.model_choice.predicted_s) << " ms); winner " << t.candidates[t.winner].name << " "
              << std::fixed << std::setprecision(3) << e.winner_ms << " ms, " << std::setprecision(2)
              << e.serial_ms / e.winner_ms << "x over serial\n";
    for (const std::string& f : failed) std::cout << "  FAILED its check: " << f << "\n";
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
      "tune", "Race the planner's best-predicted schedules, serial and the best other unfused way on this machine\n"
              "(under mpirun) and write the winners to a tuning database the planner consults first. See docs/planner.md.");
  add_list_options(t, args->lists);
  t->add_option("--profile", args->profile,
                "The machine's profile: ranks the candidates and names the machine (default $COFUSE_PROFILE, else " +
                    std::string(config::kProfile) + ")");
  t->add_option("--db", args->db, "The tuning database (JSON) to update")->required();
  t->add_option("--top", args->top,
                "The model's best overlapped schedules that race beside serial and the best other unfused way\n"
                "(its best of each way of moving the data first)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  t->add_option("--calls", args->calls,
                "The race's budget per case: successive halving stops within this many calls (default\n"
                "$COFUSE_AUTOTUNE_CALLS, else " + std::to_string(config::kAutotuneCalls) + ", as online tuning)")
      ->check(CLI::Range(2, 100000));
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
