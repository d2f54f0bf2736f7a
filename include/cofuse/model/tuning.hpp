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

  /// Records the entries put() into this database in the file `path`, merged with what the
  /// file holds by then: other processes (the ranks of a job, two jobs tuning at once) may save
  /// the same file, and none may lose another's entries. Under an exclusive lock on the file
  /// `path + ".lock"` (flock, created beside it and left there; it excludes other processes and
  /// other threads alike), it reads `path` again (a missing, corrupt or foreign file counts as
  /// empty, as for load), puts this database's put() entries into it (each replacing the entry
  /// of its key), writes a temporary file and renames it over `path`, so a reader never sees
  /// half a file. Entries this database only loaded are not written back: a copy read long ago
  /// must not undo a newer verdict another process saved since. Of two saves of one key, the
  /// later wins. path: the database file (its directory must exist). Throws Error(io).
  void save(const std::string& path) const;

  const std::vector<TuningEntry>& entries() const { return entries_; }

  /// The key fields of desc, filled into an entry (schedule and provenance left empty).
  static TuningEntry key_of(const OpDesc& desc, const std::string& machine);

 private:
  std::vector<TuningEntry> entries_;
  std::vector<bool> put_;  // per entry: put() since load, so save writes it
};

/// The one tuning database rule, for every reader and writer (the planner, online tuning,
/// `cofuse plan`, the layers, Python): `given` when not empty, else $COFUSE_TUNING_DB, else
/// config::cache_dir() + "/tuning.json" (config.hpp), so what one process measured, the next
/// on this machine starts from without being told, and a library call to the planner sees it.
std::string tuning_db_path(const std::string& given = "");

}  // namespace cofuse
