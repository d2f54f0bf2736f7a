// Online tuning (include/cofuse/auto_operation.hpp): the planner proposes, the caller's own
// calls measure, the slowest rank's medians decide, the database remembers.
#include "cofuse/auto_operation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "cofuse/build_info.hpp"
#include "cofuse/config.hpp"
#include "cofuse/tuning.hpp"
#include "cpu/comm/comm_state.hpp"
#include "cpu/exec/call_deadline.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/text.hpp"
#include "measure/timing.hpp"

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

// The overlapped candidates measured beside serial, in the model's order: its best of each way
// of moving the data (a library collective, cofuse's ring, direct exchange; flat or two-level)
// first, then its next best. The model is least sure between those families (a collective's
// cost under overlap, the slow link's share): on 2 netlab hosts of 2 ranks it ranked three
// chunked library all-reduces first for gemm_ar 1024^3, predicted 39 ms and measured 90 ms,
// while the two-level ring below them ran in 40 ms.
std::vector<const PlanCandidate*> to_measure(const std::vector<PlanCandidate>& ranked, int count) {
  std::vector<bool> taken(ranked.size(), false);
  std::set<std::pair<Algo, Topo>> families;
  int left = count;
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < ranked.size() && left > 0; ++i) {
      const Schedule& s = ranked[i].schedule;
      if (taken[i] || s == serial_schedule()) continue;  // serial is always measured, first
      if (pass == 0 && !families.insert({s.algo, s.topo}).second) continue;
      taken[i] = true;
      --left;
    }
  std::vector<const PlanCandidate*> out;
  for (std::size_t i = 0; i < ranked.size(); ++i)
    if (taken[i]) out.push_back(&ranked[i]);
  return out;
}

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

// What rank 0 broadcasts: these fields, then three per overlapped candidate (schedule, name,
// prediction).
constexpr std::size_t kChoiceFields = 10;

}  // namespace

AutoOperation::AutoOperation(const OpDesc& desc, MPI_Comm comm, const AutoOptions& options) : desc_(desc) {
  start(comm, nullptr, options);
}

AutoOperation::AutoOperation(const OpDesc& desc, MPI_Comm comm, const PlanningProfile& planning, const AutoOptions& options)
    : desc_(desc) {
  start(comm, &planning, options);
}

AutoOperation::~AutoOperation() = default;
AutoOperation::AutoOperation(AutoOperation&&) noexcept = default;
AutoOperation& AutoOperation::operator=(AutoOperation&&) noexcept = default;

void AutoOperation::start(MPI_Comm user, const PlanningProfile* planning, const AutoOptions& options) {
  detail::CommState& state = detail::comm_state(user);
  comm_ = state.comm;
  const int rank = state.rank;
  who_ = options.who.empty() ? "AutoOperation" : options.who;
  const std::string what = "AutoOperation (" + desc_.to_string() + ")";
  deadline_s_ = options.exec.deadline_s;
  state_ = &state;
  // Its own collectives (the agreements, rank 0's answer) end the job at the deadline too.
  const detail::CallDeadline deadline(state, deadline_s_, what + ", planning",
                                      [] { return std::string("a peer, agreeing on the plan"); });
  auto elsewhere = [&](int failed) { return what + ": rank " + std::to_string(failed) + " could not plan it"; };

  // Each rank's own reading of its settings and environment first, agreed, so that a rank that
  // rejects them (a malformed $COFUSE_AUTOTUNE_CALLS, say) fails every rank before anything
  // collective depends on them.
  int tune_calls = 0;
  detail::run_collectively(comm_, [&] {
    throw_if_error(desc_.validate());
    if (desc_.ranks != state.size)
      throw Error(ErrorCode::mismatch, what + ": the description says ranks=" + std::to_string(desc_.ranks) +
                                           " but the communicator has " + std::to_string(state.size) + " ranks");
    if (options.candidates < 0) throw Error(ErrorCode::invalid_argument, what + ": candidates must be >= 0");
    if (!(options.noise_guard >= 0 && options.noise_guard < 1))
      throw Error(ErrorCode::invalid_argument, what + ": noise_guard must be in [0, 1)");
    tune_calls = options.tune_calls < 0 ? config::autotune_calls().value : options.tune_calls;
    db_path_ = auto_tuning_db(options.tuning_db);
  }, elsewhere);
  // The profile (collective, agreed inside; a calibration takes the call's deadline unless
  // given its own).
  if (planning) {
    planning_ = *planning;
  } else {
    CalibrateOptions calibrate = options.calibrate;
    if (calibrate.deadline_s < 0) calibrate.deadline_s = options.exec.deadline_s;
    planning_ = planning_profile(user, options.profile, calibrate);
  }
  PlannerOptions planner = options.planner;
  planner.tuning_db = db_path_;
  // Every candidate runs as an Operation, on the CPU executor, whatever backend the profile
  // describes: a GPU profile's numbers must still give schedules this executor runs.
  planner.backend = Backend::cpu_mpi;
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&thread_level);
  planner.progress_thread = thread_level >= MPI_THREAD_SERIALIZED;
  detail::run_collectively(comm_, [&] { choice_ = choose_schedule(desc_, planning_.profile, planner, options.planner_cache); },
                           elsewhere);

  // Rank 0's answer and settings everywhere: ranks whose databases, profiles or environments
  // differ would otherwise build different candidates, or settle at different calls.
  std::vector<std::string> fields;
  if (rank == 0) {
    fields = {std::to_string(tune_calls), exact(options.noise_guard), options.record ? "1" : "0",
              choice_.measured ? "1" : "0", choice_.schedule.to_string(), choice_.name, exact(choice_.predicted_s),
              exact(choice_.serial_s), choice_.why, choice_.warning};
    for (const PlanCandidate* c : to_measure(choice_.candidates, options.candidates))
      fields.insert(fields.end(), {c->schedule.to_string(), c->name, exact(c->predicted_s)});
  }
  fields = broadcast_fields(comm_, rank, fields);
  tune_calls = std::stoi(fields[0]);
  noise_guard_ = from_exact(fields[1]);
  record_ = fields[2] == "1";
  choice_.measured = fields[3] == "1";
  choice_.schedule = *Schedule::parse(fields[4]);
  choice_.name = fields[5];
  choice_.predicted_s = from_exact(fields[6]);
  choice_.serial_s = from_exact(fields[7]);
  choice_.why = fields[8];
  choice_.warning = fields[9];
  warning_ = choice_.warning;

  tuning_off_ = tune_calls == 0;
  if (choice_.measured || tune_calls == 0 || fields.size() == kChoiceFields) {
    by_ = choice_.measured ? SettledBy::database : SettledBy::model;
    tune_calls_ = 0;
    ops_.push_back(std::make_unique<Operation>(desc_, user, choice_.schedule, options.exec));
    return;
  }
  // Serial first (the baseline every winner must beat, and the one measured when calls are
  // few), then the model's best overlapped schedules, fastest predicted first.
  candidates_.push_back({serial_schedule(), "serial", choice_.serial_s, 0, 0});
  for (std::size_t i = kChoiceFields; i + 2 < fields.size(); i += 3)
    candidates_.push_back({*Schedule::parse(fields[i]), fields[i + 1], from_exact(fields[i + 2]), 0, 0});
  if (candidates_.size() > static_cast<std::size_t>(tune_calls)) candidates_.resize(static_cast<std::size_t>(tune_calls));
  tune_calls_ = tune_calls;
  samples_.assign(candidates_.size(), {});
  for (const TunedCandidate& c : candidates_) ops_.push_back(std::make_unique<Operation>(desc_, user, c.schedule, options.exec));
  by_ = SettledBy::tuning;
}

const Schedule& AutoOperation::schedule() const { return ops_[current_]->schedule(); }
Operation& AutoOperation::operation() { return *ops_[current_]; }
const Operation& AutoOperation::operation() const { return *ops_[current_]; }

RunStats AutoOperation::execute(const OpBuffers& buffers) { return execute(buffers, Status::Ok()); }

RunStats AutoOperation::execute(const OpBuffers& buffers, const Status& caller_check) {
  if (!settled() && calls_ >= tune_calls_) settle();  // a settling that threw: again, before anything else
  RunStats stats;
  try {
    stats = ops_[current_]->execute(buffers, caller_check);
  } catch (const detail::AgreedError&) {
    // Every rank threw it at this call, so all move on alike: the call counts, its candidate gets
    // no sample. A candidate that fails every call (its workspace does not fit, say) is thus
    // left out of the race instead of being retried forever.
    if (!settled()) {
      ++calls_;
      if (calls_ < tune_calls_) current_ = static_cast<std::size_t>(calls_) % ops_.size();
    }
    throw;
  }
  ++calls_;
  if (settled()) return stats;
  samples_[current_].push_back(stats.run_s);  // from the ranks' common start, not this rank's entry
  ++candidates_[current_].calls;
  if (calls_ >= tune_calls_) settle();
  else current_ = static_cast<std::size_t>(calls_) % ops_.size();
  return stats;
}

void AutoOperation::settle() {
  const detail::CallDeadline deadline(*state_, deadline_s_, "AutoOperation (" + desc_.to_string() + "), settling",
                                      [] { return std::string("a peer, agreeing on the fastest candidate"); });
  // Each rank's median per candidate, then the slowest rank's: the numbers every rank then holds
  // are identical, so every rank picks the same winner without another message. (A slow rank
  // makes the others wait inside the same calls, so the slowest rank's time is the one a
  // caller's step actually pays.)
  // A candidate's first call is its warm-up and is not counted when it has others: it pays what
  // later calls do not (the first message on each new path, pages of a workspace that grew; the
  // very first call of all, whichever candidate it runs, the process's own start-up). On this
  // host serial's first call of a gemm_rs 8x6x4 at 1 rank took 1.9 ms against 0.009 ms after,
  // and counted, serial (always the first candidate) lost to everything at 2 calls each.
  const std::size_t n = ops_.size();
  std::vector<double> medians(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> counted = samples_[i];
    if (counted.size() > 1) counted.erase(counted.begin());
    medians[i] = measure::summarize(counted).median;
  }
  detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, medians.data(), static_cast<int>(n), MPI_DOUBLE, MPI_MAX, comm_),
                    "MPI_Allreduce");
  // Candidates without a counted call (every one of theirs failed) are not in the race.
  std::size_t winner = 0;
  for (std::size_t i = 1; i < n; ++i)
    if (candidates_[i].calls > 0 && medians[i] < medians[winner]) winner = i;
  // A lead smaller than run-to-run noise is no lead: serial stays the safe answer.
  if (winner != 0 && !(medians[winner] < medians[0] * (1 - noise_guard_))) winner = 0;

  // Nothing above changed this object; from here on nothing throws.
  for (std::size_t i = 0; i < n; ++i) candidates_[i].median_s = medians[i];
  std::unique_ptr<Operation> kept = std::move(ops_[winner]);
  ops_.clear();
  ops_.push_back(std::move(kept));
  current_ = 0;
  winner_ = winner;
  by_ = SettledBy::measurement;
  samples_.clear();
  if (record_ && detail::comm_rank(comm_) == 0) record(candidates_[winner], candidates_[0]);
}

void AutoOperation::record(const TunedCandidate& winner, const TunedCandidate& serial) {
  try {
    // Read again: another AutoOperation of this process (or another process) may have written
    // since this one planned. (save() merges under the file's lock, so what others write even
    // between this read and the save survives too; this read says whether the file was usable.)
    std::string ignored;
    TuningDb db = TuningDb::load(db_path_, &ignored);
    TuningEntry e = TuningDb::key_of(desc_, planning_.profile.name);
    e.schedule = winner.schedule;
    e.m = desc_.m;
    e.n = desc_.n;
    e.k = desc_.k;
    e.measured_at = measure::utc_now();
    e.revision = build_info().git_revision;
    e.winner_ms = winner.median_s * 1e3;
    e.serial_ms = serial.median_s * 1e3;
    std::ostringstream measured;
    for (const TunedCandidate& c : candidates_)
      measured << (measured.tellp() > 0 ? "; " : "") << c.name << "=" << std::fixed << std::setprecision(3) << c.median_s * 1e3;
    e.candidates = measured.str();
    e.measured_by = "online tuning in " + who_;
    db.put(e);
    const std::filesystem::path parent = std::filesystem::path(db_path_).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    db.save(db_path_);
    if (!ignored.empty()) warning_ = ignored + " (replaced by a new one)";
  } catch (const std::exception& e) {
    warning_ = "cofuse: the tuned schedule of " + desc_.to_string() + " was not recorded in " + db_path_ + ": " + e.what();
  }
}

std::string AutoOperation::explain() const {
  std::ostringstream o;
  o << "Profile: " << planning_.source << ". ";
  switch (by_) {
    case SettledBy::database:
      o << "Settled at once from the tuning database " << db_path_ << ": " << choice_.why;
      break;
    case SettledBy::model:
      o << (tuning_off_ ? "Online tuning is off (tune_calls = 0), so the model's choice is final: "
                        : "There is no overlapped candidate to measure, so the model's choice is final: ")
        << choice_.name << ", predicted " << ms(choice_.predicted_s) << " (serial " << ms(choice_.serial_s) << "). "
        << choice_.why;
      break;
    case SettledBy::tuning: {
      o << "The model chose " << choice_.name << " (predicted " << ms(choice_.predicted_s) << ", serial "
        << ms(choice_.serial_s) << "); tuning: call " << calls_ << " of " << tune_calls_ << ", measuring in turn";
      for (const TunedCandidate& c : candidates_) o << " " << c.name << " (" << c.calls << " calls so far)";
      o << ".";
      break;
    }
    case SettledBy::measurement: {
      const TunedCandidate& w = candidates_[winner_];
      const TunedCandidate& s = candidates_[0];
      o << "The model chose " << choice_.name << " (predicted " << ms(choice_.predicted_s) << ", serial "
        << ms(choice_.serial_s) << "). Measured over " << tune_calls_
        << " calls, interleaved (median of each candidate's calls but its first, slowest rank):";
      for (std::size_t i = 0; i < candidates_.size(); ++i) {
        const TunedCandidate& c = candidates_[i];
        o << (i ? ";" : "") << " " << c.name << " " << ms(c.median_s) << " (" << c.calls << " calls, predicted "
          << ms(c.predicted_s) << ")";
      }
      o << ". ";
      std::size_t fastest = 0;
      for (std::size_t i = 1; i < candidates_.size(); ++i)
        if (candidates_[i].calls > 0 && candidates_[i].median_s < candidates_[fastest].median_s) fastest = i;
      if (winner_ != 0)
        o << w.name << " wins, " << measure::fixed(100 * (1 - w.median_s / s.median_s), 1) << "% faster than serial (the noise guard asks for "
          << measure::fixed(100 * noise_guard_, 1) << "%).";
      else if (fastest != 0)
        o << candidates_[fastest].name << " was fastest, but not by the " << measure::fixed(100 * noise_guard_, 1)
          << "% noise guard over serial, so serial is kept.";
      else
        o << "Serial was fastest, so serial is kept.";
      break;
    }
  }
  return o.str();
}

}  // namespace cofuse
