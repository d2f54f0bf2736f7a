// The tuning database: schedules measured to win on a real machine (`cofuse tune`, or online
// tuning in an `auto` Operation, context.hpp), which the planner consults before its model.
// A JSON file (schema cofuse.tuning/1, docs/planner.md).
//
// Entries are keyed by machine (the profile's name: the profile describes the machine), rank
// count, op, dtype, sharded axis, transposes, and a shape bucket: floor(log2) of M, N and K.
// A shape with no entry of its own takes the entry of the nearest bucket in M with the same N
// and K buckets (at most one bucket away: schedules change with size, so farther entries are
// not trusted), else the model decides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse {

struct TuningEntry {
  std::string machine;  // the profile's name
  int ranks = 0;
  std::string op, dtype, axis;
  bool trans_a = false, trans_b = false;
  int m_bucket = 0, n_bucket = 0, k_bucket = 0;  // floor(log2(size))
  Schedule schedule;
  // Provenance: where the verdict came from.
  int64_t m = 0, n = 0, k = 0;  // the shape measured
  std::string measured_at;      // UTC time
  std::string revision;         // cofuse git revision
  double winner_ms = 0, serial_ms = 0;
  std::string candidates;       // what was measured, "name=ms; ..."
  /// Which tool measured it: "cofuse tune" (interleaved iterations on random data, every output
  /// checked) or "online tuning in <who>" (an auto Operation's first calls on the user's data),
  /// so an explanation can say which kind of measurement outranks the model. Entries written
  /// before the field existed were all cofuse tune's, and read as such.
  std::string measured_by = "cofuse tune";
};

/// How far the model's predictions are from what this machine measured, for one kind of
/// schedule: every tuned run (online tuning, `cofuse tune`) adds measured / predicted of each
/// candidate it measured, and the planner scales its predictions of that kind by factor(), so
/// the next plan on this machine is closer (docs/planner.md, "The model learns from what it
/// measured"). Keyed by machine (correction_machine of the profile's name), rank count, op,
/// sharded axis, dtype, family (correction_family) and M bucket (floor(log2 M)): the model's
/// errors differ by the way data moves (a library collective's cost under overlap, the ring's
/// per-step notice), by op and axis (ag_gemm along K measured against ag_gemm along M's
/// correction was worse than uncorrected), and by size (evidence from M = 2048 misled the plan of M = 64 into an overlap 7%
/// slower than serial). A shape takes its own bucket's correction, else one bucket away in M,
/// as the tuning database's winners, else none.
struct ModelCorrection {
  std::string machine;  // correction_machine(profile name)
  int ranks = 0;
  std::string op, axis, dtype, family;
  int m_bucket = 0;
  /// measured / predicted (the uncorrected model's prediction), oldest first, the newest
  /// kKept kept: a machine that changed forgets its old self.
  std::vector<double> ratios;
  // Provenance of the newest evidence.
  std::string updated_at, measured_by, revision;
  /// exp(w * median(log ratio)) with w = n / (n + kPrior), clamped to [kMin, kMax]: the median,
  /// so one noisy run among several does not drag it; shrunk toward 1 while the evidence is
  /// thin (one run moves a prediction a third of the way), and bounded, so a broken
  /// measurement cannot make the model say anything. 1 without evidence.
  double factor() const;
  static constexpr std::size_t kKept = 16;
  static constexpr double kPrior = 2, kMin = 0.5, kMax = 2.0;
};

/// The family a schedule's correction is kept under: "unfused coll" (serial: the blocking
/// library collective), "unfused ring", "overlapped coll" (chunked non-blocking collectives),
/// "overlapped ring", "overlapped direct", with " 2level" for two-level ones.
std::string correction_family(const Schedule& schedule);

/// The machine a correction belongs to: the profile's name, except that a calibration's
/// ("calibrated-<job>-<measurement>") drops its measurement part. Winners are keyed by the whole
/// name (a new measurement is a new machine, measured afresh), but the model's errors are the
/// machine's and outlive a re-measurement: on a loaded host every process may calibrate again.
std::string correction_machine(const std::string& profile_name);

class TuningDb {
 public:
  /// Reads `path`. A missing file is an empty database. A corrupt or foreign file (not JSON,
  /// another schema, a malformed entry) is ignored: the database is empty and `warning` says
  /// why, so a bad file never stops a run. Throws nothing.
  static TuningDb load(const std::string& path, std::string* warning = nullptr);

  /// The measured winner for desc on machine, or nothing (see the bucket rule above).
  std::optional<TuningEntry> lookup(const OpDesc& desc, const std::string& machine) const;

  /// Adds or replaces the entry of the same key (and marks it for the next save).
  void put(const TuningEntry& entry);

  /// Records the entries put() (and the evidence added) into this database in the file `path`,
  /// merged with what the file holds by then: other processes (the ranks of a job, two jobs tuning at once) may save
  /// the same file, and none may lose another's entries. Under an exclusive lock on the file
  /// `path + ".lock"` (flock, created beside it and left there; it excludes other processes and
  /// other threads alike), it reads `path` again (a missing, corrupt or foreign file counts as
  /// empty, as for load), puts this database's put() entries into it (each replacing the entry
  /// of its key), writes a temporary file and renames it over `path`, so a reader never sees
  /// half a file. Entries this database only loaded are not written back: a copy read long ago
  /// must not undo a newer verdict another process saved since. Of two saves of one key, the
  /// later wins. path: the database file (its directory is made when missing, as every writer
  /// needs: online tuning, cofuse tune, cofuse bench --evidence). Throws Error(io).
  void save(const std::string& path) const;

  const std::vector<TuningEntry>& entries() const { return entries_; }

  /// The correction of this kind of prediction, or null when nothing was measured for it.
  const ModelCorrection* correction(const OpDesc& desc, const std::string& machine, const std::string& family) const;
  /// Adds one measured / predicted ratio (finite, > 0; others are ignored) to the correction of
  /// (desc, machine, family), with its provenance, and marks it for the next save, which appends
  /// it to what the file holds by then (two processes' evidence both survive). measured_by,
  /// revision: who measured it ("online tuning in cofuse run") with which cofuse revision.
  void add_evidence(const OpDesc& desc, const std::string& machine, const std::string& family, double ratio,
                    const std::string& measured_by, const std::string& revision = "");
  const std::vector<ModelCorrection>& corrections() const { return corrections_; }

  /// The key fields of desc, filled into an entry (schedule and provenance left empty).
  static TuningEntry key_of(const OpDesc& desc, const std::string& machine);

 private:
  std::vector<TuningEntry> entries_;
  std::vector<bool> put_;  // per entry: put() since load, so save writes it
  std::vector<ModelCorrection> corrections_;
  std::vector<ModelCorrection> added_;  // evidence added since load: only its ratios, for save
};

/// The one tuning database rule, for every reader and writer (the planner, online tuning,
/// `cofuse plan`, the layers, Python): `given` when not empty, else $COFUSE_TUNING_DB, else
/// config::cache_dir() + "/tuning.json" (config.hpp), so what one process measured, the next
/// on this machine starts from without being told, and a library call to the planner sees it.
std::string tuning_db_path(const std::string& given = "");

}  // namespace cofuse
