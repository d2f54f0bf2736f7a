// Online tuning (tune/tuning_operation.hpp). The candidates are serial, the best other unfused
// way, and the model's best overlapped schedules; the race (tune/race.hpp: successive halving,
// the same rule as `cofuse tune`) says which one each call runs, every call a normal execute
// with a correct result. At the end of each round the ranks agree on the numbers (each rank's
// median and spread per candidate, then the slowest rank's: every rank holds the same numbers,
// so every rank narrows alike), and when the race stops they keep the winner (the noise guard
// against serial, tune/winner.hpp) and rank 0 writes it to the tuning database with its
// provenance, so the next process on this machine starts settled.
//
//   calls:   S U A B C D  S U A B C D | S A C  S A C | S A  S A | winner ...
//            round 0 (warm-up, counted) | round 1      | round 2  ^ settle: one left beside serial
//
// It settles at once, measuring nothing, when the planner's answer came from the tuning
// database (PlanChoice::measured), when tuning is off (tune_calls = 0) or too short for a race,
// or when the model has no schedule but serial to offer. Where nothing can be hidden (a decode
// step's call, overlap_headroom_s) only serial and the best unfused way race. Ranks whose
// databases or profile files differ still agree: the planner's answer and the tuning settings
// are rank 0's.
#include "tune/tuning_operation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <optional>
#include <sstream>

#include "cofuse/config.hpp"
#include "cofuse/log.hpp"
#include "cofuse/model/tuning.hpp"
#include "cpu/exec/cpu_operation.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "cpu/exec/started_whole.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/text.hpp"
#include "measure/timing.hpp"
#include "tune/race.hpp"
#include "tune/race_candidates.hpp"
#include "tune/winner.hpp"

namespace cofuse {

const char* to_string(SettledBy s) {
  switch (s) {
    case SettledBy::tuning: return "tuning";
    case SettledBy::database: return "database";
    case SettledBy::model: return "model";
    case SettledBy::measurement: return "measurement";
  }
  return "";
}

namespace {

// Doubles travel as hexadecimal text: exact, so every rank holds rank 0's very numbers.
std::string exact(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%a", v);
  return text;
}
double from_exact(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

// Rank 0's fields on every rank (detail::broadcast_text). Each field is written as
// "<length>:<bytes>", so any text (a reason with newlines, say) survives.
std::vector<std::string> broadcast_fields(MPI_Comm comm, int rank, const std::vector<std::string>& fields) {
  std::string blob;
  if (rank == 0)
    for (const std::string& f : fields) blob += std::to_string(f.size()) + ":" + f;
  blob = detail::broadcast_text(comm, blob);
  std::vector<std::string> out;
  for (std::size_t at = 0; at < blob.size();) {
    const std::size_t colon = blob.find(':', at);
    const std::size_t length = std::stoull(blob.substr(at, colon - at));
    out.push_back(blob.substr(colon + 1, length));
    at = colon + 1 + length;
  }
  return out;
}

std::string ms(double seconds) { return measure::fixed(seconds * 1e3, 3) + " ms"; }

// What rank 0 broadcasts: these fields, then five per candidate beside serial (schedule, name,
// prediction, the model's uncorrected prediction, and "" for a raced one or, for one of the
// refine step's reserve, the raced candidate it neighbours: its index among the candidates).
constexpr std::size_t kChoiceFields = 13;
constexpr std::size_t kCandidateFields = 5;


// The backend of an `auto` Operation: the candidates' CPU operations, one of which runs a call.
class TuningOperation final : public detail::OperationBackend {
 public:
  TuningOperation(const OpDesc& desc, MPI_Comm user, const PlanningProfile& planning, const OperationOptions& options,
                  const std::string& tuning_db, PlannerCache* cache);

  RunStats execute(const OpBuffers& buffers, const Status& caller_check) override {
    return run_one([&](detail::OperationBackend& op) { return op.execute(buffers, caller_check); });
  }
  // Every candidate's operation binds them (each agrees once), so that the winner's calls run with
  // no agreement. The race's calls still agree (on the bound buffers): that allreduce is the ranks'
  // common start its times are taken from (RunStats::run_s), without which a rank done early with
  // one candidate would wait inside the next and charge it for the previous one.
  // All or nothing: a candidate that cannot bind them (its workspace, say) fails the bind on
  // every rank alike, and then no candidate keeps any binding, old or new.
  void bind(const OpBuffers& buffers, const Status& caller_check) override {
    bound_.reset();
    try {
      for (auto& op : ops_) op->bind(buffers, caller_check);  // a bad verdict fails the first
    } catch (...) {
      for (auto& op : ops_) op->unbind();
      throw;
    }
    bound_ = buffers;
  }
  void unbind() override {
    bound_.reset();
    for (auto& op : ops_) op->unbind();
  }
  RunStats execute_bound() override {
    if (!report_.settled() && bound_)
      return run_one([this](detail::OperationBackend& op) { return op.execute(*bound_, Status::Ok()); });
    return run_one([](detail::OperationBackend& op) { return op.execute_bound(); });
  }
  // While it tunes, a started call is a whole call (the race times whole calls, from the ranks'
  // common start; refused as any call is while another is started), after which the communicator
  // stays the call's until finish() as for one in flight; once settled, the kept schedule's own
  // halves.
  void start(const OpBuffers& buffers, const Status& caller_check) override {
    if (report_.settled()) return ops_[current_]->start(buffers, caller_check);
    whole_.hold(*state_, "auto operation (" + desc_.to_string() + ") (started)", execute(buffers, caller_check));
  }
  void start_bound() override {
    if (report_.settled()) return ops_[current_]->start_bound();
    whole_.hold(*state_, "auto operation (" + desc_.to_string() + ") (started)", execute_bound());
  }
  bool communication_done() const override { return whole_.active() || ops_[current_]->communication_done(); }
  RunStats finish() override {
    if (whole_.active()) return whole_.finish();
    const RunStats stats = ops_[current_]->finish();
    ++report_.calls;
    return stats;
  }
  RunStats execute_compute_only(const OpBuffers& buffers) override { return ops_[current_]->execute_compute_only(buffers); }
  RunStats execute_comm_only(const OpBuffers& buffers) override { return ops_[current_]->execute_comm_only(buffers); }
  void poison_workspace() override { ops_[current_]->poison_workspace(); }
  const Plan& plan() const override { return ops_[current_]->plan(); }
  const ExecSettings& settings() const override { return ops_[current_]->settings(); }
  const std::vector<TaskTime>& task_times() const override { return ops_[current_]->task_times(); }
  const TuningReport* tuning() const override { return &report_; }
  std::string explain() const override;

 private:
  // One call of the current candidate (call: how it runs, on given or bound buffers), counted
  // by the race while it tunes.
  template <typename Call>
  RunStats run_one(Call call);
  void close_round();
  void add_neighbours(std::size_t around);
  void account(double seconds);
  void record(const std::vector<detail::MeasuredCandidate>& measured);
  // A warning from rank 0's tuning: said once, through the log.
  void warn(const std::string& message) const {
    if (rank_ == 0 && !message.empty()) log(LogLevel::warn, "tune", message);
  }

  OpDesc desc_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // cofuse's duplicate of the caller's communicator
  int rank_ = 0;
  std::string who_;
  double deadline_s_ = -1;  // the calls' (ExecSettings::deadline_s), for its own collectives
  detail::CommState* state_ = nullptr;  // the communicator's state (its watchdog), owned there
  bool record_ = true;
  TuningReport report_;
  std::unique_ptr<detail::Race> race_;  // while tuning: which candidate each call runs
  std::vector<std::unique_ptr<detail::OperationBackend>> ops_;  // one per candidate while tuning; then the winner alone
  std::size_t current_ = 0;                                      // index into ops_ of the next call
  std::optional<OpBuffers> bound_;                               // bind()'s buffers, for the race's calls
  detail::StartedWhole whole_;  // a call start() ran whole while tuning, until finish()
  double excess_floor_s_ = 0;  // the excess bound's floor in effect (rank 0's; 0: none)
  // The refine step's reserve (race.hpp): each raced candidate's neighbours, by its index.
  std::vector<std::pair<std::size_t, TunedCandidate>> reserve_;
  MPI_Comm user_ = MPI_COMM_NULL;  // the caller's communicator and settings, for the neighbours' operations
  ExecSettings exec_;
  std::size_t first_neighbour_ = SIZE_MAX;  // the first neighbour's index in ops_ (none: SIZE_MAX)
};

}  // namespace

namespace {

TuningOperation::TuningOperation(const OpDesc& desc, MPI_Comm user, const PlanningProfile& planning,
                                 const OperationOptions& options, const std::string& tuning_db, PlannerCache* cache)
    : desc_(desc) {
  detail::CommState& state = detail::comm_state(user);
  comm_ = state.comm;
  rank_ = state.rank;
  who_ = options.who.empty() ? "Operation" : options.who;
  const std::string what = "auto operation (" + desc_.to_string() + ")";
  deadline_s_ = options.exec.deadline_s;
  state_ = &state;
  report_.profile = planning.profile.name;
  report_.profile_source = planning.source;
  report_.calibration_s = planning.calibration ? planning.calibration->this_call_s : 0;
  report_.tuning_db = tuning_db;
  // Its own collectives (the agreements, rank 0's answer) end the job at the deadline too.
  const detail::CallDeadline deadline(state, deadline_s_, what + ", planning",
                                      [] { return std::string("a peer, agreeing on the plan"); });
  auto elsewhere = [&](int failed) { return what + ": rank " + std::to_string(failed) + " could not plan it"; };

  // Each rank's own reading of its settings and environment first, agreed, so that a rank that
  // rejects them (a malformed $COFUSE_AUTOTUNE_CALLS, say) fails every rank before anything
  // collective depends on them.
  int tune_calls = 0;
  double noise_guard = 0;
  double tune_excess = 0;
  double excess_floor_s = 0;
  Capabilities runtime;
  detail::run_collectively(comm_, [&] {
    throw_if_error(desc_.validate());
    if (desc_.ranks != state.size)
      throw Error(ErrorCode::mismatch, what + ": the description says ranks=" + std::to_string(desc_.ranks) +
                                           " but the communicator has " + std::to_string(state.size) + " ranks");
    if (options.candidates < 0) throw Error(ErrorCode::invalid_argument, what + ": candidates must be >= 0");
    if (!(options.noise_guard < 1))
      throw Error(ErrorCode::invalid_argument, what + ": noise_guard must be in [0, 1)");
    noise_guard = options.noise_guard < 0 ? config::noise_guard().value : options.noise_guard;
    tune_calls = options.tune_calls < 0 ? config::autotune_calls().value : options.tune_calls;
    if (!std::isfinite(options.tune_excess))
      throw Error(ErrorCode::invalid_argument, what + ": tune_excess must be finite (0 = no bound)");
    const config::Setting<double> configured = config::tune_excess();
    tune_excess = options.tune_excess < 0 ? configured.value : options.tune_excess;
    // The floor belongs to the default bound only: a bound someone chose is taken as given.
    excess_floor_s = options.tune_excess < 0 && configured.source == config::Source::default_value
                         ? config::kTuneExcessFloorS
                         : 0;
    runtime = cpu_capabilities(desc_.dtype == DType::bf16);  // reads $COFUSE_CPU_BF16 for bf16
  }, elsewhere);
  PlannerOptions planner = options.planner;
  planner.tuning_db = tuning_db;
  // Every candidate runs on the CPU executor, whatever backend the profile describes: a GPU
  // profile's numbers must still give schedules this executor runs.
  planner.backend = Backend::cpu_mpi;
  planner.runtime = runtime;  // what this process runs: MPI's thread level, bf16
  PlanChoice& choice = report_.model_choice;
  detail::run_collectively(comm_, [&] { choice = choose_schedule(desc_, planning.profile, planner, cache); }, elsewhere);

  // Rank 0's answer and settings everywhere: ranks whose databases, profiles or environments
  // differ would otherwise build different candidates, or settle at different calls.
  std::vector<std::string> fields;
  if (rank_ == 0) {
    // A call whose collective is all latency (a decode step's row): no overlapped schedule can
    // lead serial by the guard, so none is raced. The best unfused way still races serial: the
    // model's ranking of transports is least sure at these sizes (on shared memory, 2 ranks,
    // ag_gemm 64x2048x1024 ran 7.5% faster on cofuse's ring than on the library's allgather,
    // which the model rated level), and a race of two is short.
    const double headroom_s = overlap_headroom_s(choice, planning.profile);
    const bool latency_bound = tune_calls > 0 && headroom_s < noise_guard * choice.serial_s;
    // Another shape's winner (the database's nearest M) is a candidate, not a verdict: at small M
    // the GEMM library's own paths change between neighbouring sizes (OpenBLAS here: a 2-piece
    // schedule won at M=8 and was 1.5x slower than serial at M=16), so it races with the rest.
    // Except where nothing can be hidden and that winner overlaps nothing (serial or an unfused
    // way): then the GEMM runs whole whichever wins, so those paths do not decide it, and a
    // server whose batch size changes from step to step must not race again at every M (each
    // race's record replaces its bucket's, so two sizes in turn would race for ever).
    std::optional<Schedule> nearby_winner;
    if (choice.measured && choice.measured_nearby) {
      if (latency_bound && choice.schedule.overlap == Overlap::none) {
        choice.why += " Nothing can be hidden at this size and that winner overlaps nothing, so it is kept without a race.";
      } else {
        nearby_winner = choice.schedule;
        choice.measured = false;
        choice.why += latency_bound ? " That winner was another shape's and overlaps, which nothing at this size can gain from, so it does not race."
                                    : " That winner was another shape's, so it races beside the model's candidates.";
      }
    }
    const bool nothing_to_hide = !choice.measured && latency_bound;
    const PlanCandidate* unfused = detail::best_unfused(choice.candidates);
    if (nothing_to_hide) {
      choice.schedule = serial_schedule();
      choice.name = "serial";
      choice.predicted_s = choice.serial_s;
      choice.why += " Online tuning races no overlapped schedule: even a perfect overlap would save at most " +
                    ms(std::max(0.0, headroom_s)) + " a call (serial's shorter part less one message latency), less "
                    "than the " + measure::fixed(noise_guard * 100, 1) + "% lead over serial's " + ms(choice.serial_s) +
                    " a winner needs, so " +
                    (unfused && detail::Race::racing(2, tune_calls) == 2
                         ? "only the best unfused way (" + unfused->name + ") races serial, the library's own collective."
                         : "serial is kept without measuring.");
    }
    double serial_model_s = choice.serial_s;
    for (const PlanCandidate& c : choice.candidates)
      if (c.schedule == serial_schedule()) serial_model_s = c.model_s;
    fields = {std::to_string(tune_calls), exact(noise_guard), options.record ? "1" : "0",
              choice.measured ? "1" : "0", choice.schedule.to_string(), choice.name, exact(choice.predicted_s),
              exact(choice.serial_s), choice.why, choice.warning, exact(serial_model_s), exact(tune_excess), exact(excess_floor_s)};
    std::vector<const PlanCandidate*> racing;
    if (!nothing_to_hide) racing = detail::to_measure(choice.candidates, options.candidates);
    if (nearby_winner && !nothing_to_hide && *nearby_winner != serial_schedule())
      for (const PlanCandidate& c : choice.candidates)
        if (c.schedule == *nearby_winner && std::find(racing.begin(), racing.end(), &c) == racing.end())
          racing.insert(racing.begin(), &c);
    // Serial and the best unfused way are always in the race, alone where nothing overlapped is.
    if (unfused && std::find(racing.begin(), racing.end(), unfused) == racing.end()) racing.insert(racing.begin(), unfused);
    for (const PlanCandidate* c : racing)
      fields.insert(fields.end(), {c->schedule.to_string(), c->name, exact(c->predicted_s), exact(c->model_s), ""});
    for (std::size_t i = 0; i < racing.size(); ++i)
      for (const PlanCandidate* c : detail::neighbours_of(racing[i]->schedule, choice.candidates, racing))
        fields.insert(fields.end(), {c->schedule.to_string(), c->name, exact(c->predicted_s), exact(c->model_s),
                                     std::to_string(i + 1)});
  }
  fields = broadcast_fields(comm_, rank_, fields);
  tune_calls = std::stoi(fields[0]);
  report_.noise_guard = from_exact(fields[1]);
  record_ = fields[2] == "1";
  choice.measured = fields[3] == "1";
  choice.schedule = *Schedule::parse(fields[4]);
  choice.name = fields[5];
  choice.predicted_s = from_exact(fields[6]);
  choice.serial_s = from_exact(fields[7]);
  choice.why = fields[8];
  choice.warning = fields[9];
  warn(choice.warning);
  report_.tune_excess = from_exact(fields[11]);
  excess_floor_s_ = from_exact(fields[12]);

  report_.tuning_off = tune_calls == 0;
  if (choice.measured || tune_calls == 0 || fields.size() == kChoiceFields) {
    report_.settled_by = choice.measured ? SettledBy::database : SettledBy::model;
    ops_.push_back(detail::make_cpu_operation(desc_, user, choice.schedule, options.exec));
    return;
  }
  // Serial first (the baseline every winner must beat, and the one measured when calls are
  // few), the best other unfused way, then the model's best overlapped schedules, fastest
  // predicted first; the race (tune/race.hpp) narrows them.
  std::vector<TunedCandidate>& candidates = report_.candidates;
  candidates.push_back({serial_schedule(), "serial", choice.serial_s, 0, 0, from_exact(fields[10])});
  std::vector<std::size_t> reserve_counts;
  for (std::size_t i = kChoiceFields; i + kCandidateFields <= fields.size(); i += kCandidateFields) {
    TunedCandidate c{*Schedule::parse(fields[i]), fields[i + 1], from_exact(fields[i + 2]), 0, 0, from_exact(fields[i + 3])};
    if (fields[i + 4].empty()) {
      candidates.push_back(std::move(c));
      continue;
    }
    const std::size_t of = std::stoul(fields[i + 4]);
    if (reserve_counts.size() <= of) reserve_counts.resize(of + 1, 0);
    ++reserve_counts[of];
    reserve_.push_back({of, std::move(c)});
  }
  race_ = std::make_unique<detail::Race>(candidates.size(), tune_calls, report_.noise_guard, report_.tune_excess,
                                         excess_floor_s_);
  race_->set_reserve(reserve_counts);
  if (race_->settled()) {  // a budget too small for two candidates: the planner's choice
    candidates.clear();
    report_.stop_reason = race_->stop_reason();
    report_.settled_by = SettledBy::model;
    ops_.push_back(detail::make_cpu_operation(desc_, user, choice.schedule, options.exec));
    return;
  }
  report_.tune_calls = tune_calls;
  for (const TunedCandidate& c : candidates) ops_.push_back(detail::make_cpu_operation(desc_, user, c.schedule, options.exec));
  user_ = user;
  exec_ = options.exec;
  current_ = race_->next();
  report_.settled_by = SettledBy::tuning;
}

template <typename Call>
RunStats TuningOperation::run_one(Call call) {
  if (!report_.settled() && race_->round_over()) close_round();  // a closing that threw: again, first
  RunStats stats;
  try {
    stats = call(*ops_[current_]);
  } catch (const detail::AgreedError&) {
    // Every rank threw it at this call, so all move on alike: the call counts, its candidate gets
    // no sample. A candidate that fails every call (its workspace does not fit, say) is thus
    // left out of the race instead of being retried forever.
    if (!report_.settled()) {
      ++report_.calls;
      ++report_.candidates[current_].calls;
      race_->failed();
      if (race_->round_over()) close_round();
      else current_ = race_->next();
    }
    throw;
  }
  ++report_.calls;
  if (report_.settled()) return stats;
  race_->record(stats.run_s);  // from the ranks' common start, not this rank's entry
  ++report_.candidates[current_].calls;
  if (race_->bounded()) account(stats.run_s);
  if (race_->round_over()) close_round();
  else current_ = race_->next();
  return stats;
}

// The excess bound is judged on the slowest rank's time of each call (one MPI_Allreduce of a
// double per tuning call), so every rank ends the race at the same call.
void TuningOperation::account(double seconds) {
  const detail::CallDeadline deadline(*state_, deadline_s_, "auto operation (" + desc_.to_string() + "), tuning",
                                      [] { return std::string("a peer, agreeing on a tuning call's time"); });
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce");
  race_->account(seconds);
}

void TuningOperation::close_round() {
  const detail::CallDeadline deadline(*state_, deadline_s_, "auto operation (" + desc_.to_string() + "), settling",
                                      [] { return std::string("a peer, agreeing on the fastest candidate"); });
  // Each rank's median (and spread) per candidate, then the slowest rank's: the numbers every
  // rank then holds are identical, so every rank narrows the field alike and picks the same
  // winner without another message. (A slow rank makes the others wait inside the same calls,
  // so the slowest rank's time is the one a caller's step actually pays.) Each candidate's first
  // call is its warm-up (race.hpp): it pays what later calls do not (the first message on each
  // new path, pages of a workspace that grew; the very first call of all, the process's own
  // start-up). On this host serial's first call of a gemm_rs 8x6x4 at 1 rank took 1.9 ms
  // against 0.009 ms after.
  std::vector<double> numbers = race_->round_numbers();
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, numbers.data(), static_cast<int>(numbers.size()), MPI_DOUBLE, MPI_MAX, comm_),
                    "MPI_Allreduce");
  // On a copy first: a refine step's neighbours get their operations before the race moves on,
  // so that a construction that throws leaves the round to close again at the next call.
  detail::Race next = *race_;
  next.close_round(numbers);
  if (next.candidates() > ops_.size()) add_neighbours(next.refined_around());
  *race_ = std::move(next);
  report_.rounds = race_->rounds();
  if (!race_->settled()) {
    current_ = race_->next();
    return;
  }
  const std::size_t n = ops_.size();
  const std::vector<bool> eligible = race_->eligible();
  std::vector<detail::MeasuredCandidate> measured;
  for (std::size_t i = 0; i < n; ++i)
    measured.push_back({report_.candidates[i].schedule, report_.candidates[i].name, race_->medians()[i], eligible[i]});
  // The lead over serial must be more than the guard and more than the medians' own wander
  // (the calls' spread, less where both have more calls: Race::lead_needed).
  const detail::RaceVerdict verdict = detail::judge(measured, *race_);
  std::size_t winner = verdict.winner;
  // A neighbour's operation joined after bind() and ran the race's calls on the buffers: bound
  // now, where the others are, as the winner's calls after it make no agreement. Where that
  // fails (its workspace, on every rank alike) serial, bound already, is kept.
  if (bound_ && winner >= first_neighbour_) {
    try {
      ops_[winner]->bind(*bound_, Status::Ok());
    } catch (const detail::AgreedError& e) {
      warn("the tuned schedule " + report_.candidates[winner].name + " could not bind the buffers (" + e.what() +
           "), so serial is kept");
      winner = 0;
    }
  }

  // Nothing above changed this object but the winner's binding; from here on nothing throws.
  for (std::size_t i = 0; i < n; ++i) report_.candidates[i].median_s = race_->medians()[i];
  std::unique_ptr<detail::OperationBackend> kept = std::move(ops_[winner]);
  ops_.clear();
  ops_.push_back(std::move(kept));
  current_ = 0;
  report_.winner = winner;
  report_.leader = verdict.leader;
  report_.stop_reason = race_->stop_reason();
  report_.calls_raced = race_->calls_used();
  report_.lead_needed = verdict.lead_needed;
  report_.excess_s = race_->excess();
  report_.excess_bound_s = race_->excess_bound();
  report_.settled_by = SettledBy::measurement;
  if (record_ && rank_ == 0) record(measured);
}

// The race refined around a candidate: its reserve joins, in the order the race numbered it, with
// operations of its own (every rank builds them at the same call). They are not bound: the race's
// calls run on the buffers (execute_bound), and a winner among them is bound when it wins.
void TuningOperation::add_neighbours(std::size_t around) {
  std::vector<std::unique_ptr<detail::OperationBackend>> made;
  std::vector<TunedCandidate> joined;
  for (const auto& [of, candidate] : reserve_)
    if (of == around) {
      made.push_back(detail::make_cpu_operation(desc_, user_, candidate.schedule, exec_));
      joined.push_back(candidate);
    }
  // Nothing above changed this object.
  first_neighbour_ = ops_.size();
  for (auto& op : made) ops_.push_back(std::move(op));
  report_.candidates.insert(report_.candidates.end(), joined.begin(), joined.end());
  reserve_.clear();
}

void TuningOperation::record(const std::vector<detail::MeasuredCandidate>& measured) {
  const std::string& path = report_.tuning_db;
  try {
    // Read first: whether the file was usable (save() merges under the file's lock, so what
    // other processes write, even between this read and the save, survives).
    std::string ignored;
    TuningDb db = TuningDb::load(path, &ignored);
    db.put(detail::winner_entry(desc_, report_.profile, measured, report_.winner, "online tuning in " + who_));
    detail::add_evidence(db, desc_, report_, "online tuning in " + who_);
    db.save(path);
    if (!ignored.empty()) warn(ignored + " (replaced by a new one)");
  } catch (const std::exception& e) {
    warn("the tuned schedule of " + desc_.to_string() + " was not recorded in " + path + ": " + e.what());
  }
}

std::string TuningOperation::explain() const {
  const PlanChoice& choice = report_.model_choice;
  const std::vector<TunedCandidate>& candidates = report_.candidates;
  std::ostringstream o;
  const std::string& source = report_.profile_source;
  o << "Profile: " << source << (!source.empty() && source.back() == '.' ? " " : ". ");
  switch (report_.settled_by) {
    case SettledBy::database:
      o << "Settled at once from the tuning database " << report_.tuning_db << ": " << choice.why;
      break;
    case SettledBy::model:
      o << (report_.tuning_off            ? "Online tuning is off (tune_calls = 0), so the model's choice is final: "
            : !report_.stop_reason.empty() ? "No race (" + report_.stop_reason + "), so the model's choice is final: "
                                           : std::string("There is no candidate beside serial to measure, so the model's choice is final: "))
        << choice.name << ", predicted " << ms(choice.predicted_s) << " (serial " << ms(choice.serial_s) << "). "
        << choice.why;
      break;
    case SettledBy::tuning: {
      o << "The model chose " << choice.name << " (predicted " << ms(choice.predicted_s) << ", serial "
        << ms(choice.serial_s) << "); tuning: call " << report_.calls << " of at most " << report_.tune_calls
        << ", round " << report_.rounds << " of the race, calls so far:";
      for (const TunedCandidate& c : candidates) o << " " << c.name << " (" << c.calls << " calls so far)";
      o << ".";
      break;
    }
    case SettledBy::measurement: {
      const TunedCandidate& w = candidates[report_.winner];
      const TunedCandidate& s = candidates[0];
      o << "The model chose " << choice.name << " (predicted " << ms(choice.predicted_s) << ", serial "
        << ms(choice.serial_s) << "). Raced over " << report_.calls_raced << " of at most " << report_.tune_calls
        << " calls in " << report_.rounds << (report_.rounds == 1 ? " round" : " rounds") << " of successive halving, stopped: " << report_.stop_reason
        << " (median of each candidate's calls but its first, slowest rank):";
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const TunedCandidate& c = candidates[i];
        o << (i ? ";" : "") << " " << c.name << " " << ms(c.median_s) << " (" << c.calls << " calls, predicted "
          << ms(c.predicted_s) << ")";
      }
      o << ". ";
      if (report_.excess_bound_s > 0)
        o << "The race cost " << ms(report_.excess_s) << " beyond its fastest call (bound " << ms(report_.excess_bound_s)
          << ": " << measure::fixed(report_.tune_excess, 1) << " of serial's calls"
          << (excess_floor_s_ > 0 ? ", at least " + ms(excess_floor_s_) : std::string()) << "). ";
      if (report_.calibration_s > 0)
        o << "First use in this process: the calibration's " << ms(report_.calibration_s) << " and the race's "
          << ms(report_.excess_s) << " beyond its fastest call, " << ms(report_.calibration_s + report_.excess_s)
          << " in all; a later process reads both back. ";
      // The lead asked: the guard, or the calls' spread where larger, less the more counted calls
      // the two compared have beyond three (Race::lead_needed).
      const std::string asked = measure::fixed(100 * report_.lead_needed, 1) + "%: the guard, or the calls' spread where larger, less for medians of more calls";
      if (report_.winner != 0)
        o << w.name << " wins, " << measure::fixed(100 * (1 - w.median_s / s.median_s), 1)
          << "% faster than serial (the noise asks for " << asked << ").";
      else if (report_.leader != 0)
        o << candidates[report_.leader].name << " was the fastest that may win, but not by the lead the noise asks for ("
          << asked << ") over serial, so serial is kept.";
      else
        o << "Serial was fastest, so serial is kept.";
      break;
    }
  }
  return o.str();
}

}  // namespace

namespace detail {

std::unique_ptr<OperationBackend> make_tuning_operation(const OpDesc& desc, MPI_Comm comm, const PlanningProfile& planning,
                                                        const OperationOptions& options, const std::string& tuning_db,
                                                        PlannerCache* cache) {
  return std::make_unique<TuningOperation>(desc, comm, planning, options, tuning_db, cache);
}

}  // namespace detail

}  // namespace cofuse
