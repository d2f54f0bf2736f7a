#include "cofuse/model/tuning.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cofuse/backend.hpp"
#include "cofuse/config.hpp"
#include "cofuse/status.hpp"

namespace cofuse {

namespace {

using json = nlohmann::ordered_json;
constexpr const char* kSchema = "cofuse.tuning/1";

// Now, in UTC, as ISO 8601 (the model layer has no clock helper of its own).
std::string utc_text() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

int bucket(int64_t size) { return size < 1 ? 0 : static_cast<int>(std::floor(std::log2(double(size)))); }

bool same_key_but_m(const TuningEntry& a, const TuningEntry& b) {
  return a.machine == b.machine && a.ranks == b.ranks && a.op == b.op && a.dtype == b.dtype && a.axis == b.axis &&
         a.trans_a == b.trans_a && a.trans_b == b.trans_b && a.n_bucket == b.n_bucket && a.k_bucket == b.k_bucket;
}

json to_json(const TuningEntry& e) {
  return {{"machine", e.machine}, {"ranks", e.ranks}, {"op", e.op}, {"dtype", e.dtype}, {"axis", e.axis},
          {"trans_a", e.trans_a}, {"trans_b", e.trans_b}, {"m_bucket", e.m_bucket}, {"n_bucket", e.n_bucket},
          {"k_bucket", e.k_bucket}, {"schedule", e.schedule.to_string()},
          {"provenance", {{"m", e.m}, {"n", e.n}, {"k", e.k}, {"measured_at", e.measured_at}, {"revision", e.revision},
                          {"winner_ms", e.winner_ms}, {"serial_ms", e.serial_ms}, {"candidates", e.candidates},
                          {"measured_by", e.measured_by}}}};
}

// An integer field within [lo, hi]: a float, or an integer out of range, is malformed. (nlohmann's
// get<int64_t>() of 1.1e23 is undefined behaviour, which the tuning fuzzer found.)
int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw Error(ErrorCode::invalid_argument, std::string(key) + " is not an integer");
  const bool too_large = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX);
  if (too_large || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw Error(ErrorCode::invalid_argument, std::string(key) + " is out of range");
  return v.get<int64_t>();
}

// A number field (integer or float) that fits a double and is finite; `fallback` when absent.
double number(const json& j, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) throw Error(ErrorCode::invalid_argument, std::string(key) + " is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) throw Error(ErrorCode::invalid_argument, std::string(key) + " is not finite");
  return x;
}

TuningEntry from_json(const json& j) {
  TuningEntry e;
  e.machine = j.at("machine").get<std::string>();
  e.ranks = int(integer(j, "ranks", 1, 1 << 30));
  e.op = j.at("op").get<std::string>();
  e.dtype = j.at("dtype").get<std::string>();
  e.axis = j.at("axis").get<std::string>();
  e.trans_a = j.at("trans_a").get<bool>();
  e.trans_b = j.at("trans_b").get<bool>();
  e.m_bucket = int(integer(j, "m_bucket", 0, 63));
  e.n_bucket = int(integer(j, "n_bucket", 0, 63));
  e.k_bucket = int(integer(j, "k_bucket", 0, 63));
  Status error;
  const auto s = Schedule::parse(j.at("schedule").get<std::string>(), &error);
  if (!s) throw Error(ErrorCode::invalid_argument, "schedule: " + error.message());
  e.schedule = *s;
  const json& p = j.at("provenance");
  e.m = p.contains("m") ? integer(p, "m", 0, INT64_MAX) : 0;
  e.n = p.contains("n") ? integer(p, "n", 0, INT64_MAX) : 0;
  e.k = p.contains("k") ? integer(p, "k", 0, INT64_MAX) : 0;
  e.measured_at = p.value("measured_at", "");
  e.revision = p.value("revision", "");
  e.winner_ms = number(p, "winner_ms", 0.0);
  e.serial_ms = number(p, "serial_ms", 0.0);
  e.candidates = p.value("candidates", "");
  e.measured_by = p.value("measured_by", "cofuse tune");  // older files: only cofuse tune wrote them
  return e;
}

bool same_correction_but_m(const ModelCorrection& a, const ModelCorrection& b) {
  return a.machine == b.machine && a.ranks == b.ranks && a.op == b.op && a.axis == b.axis && a.dtype == b.dtype &&
         a.family == b.family;
}
bool same_correction(const ModelCorrection& a, const ModelCorrection& b) {
  return same_correction_but_m(a, b) && a.m_bucket == b.m_bucket;
}

json to_json(const ModelCorrection& c) {
  return {{"machine", c.machine}, {"ranks", c.ranks}, {"op", c.op}, {"axis", c.axis}, {"dtype", c.dtype}, {"family", c.family},
          {"m_bucket", c.m_bucket}, {"ratios", c.ratios}, {"factor", c.factor()},
          {"provenance", {{"updated_at", c.updated_at}, {"measured_by", c.measured_by}, {"revision", c.revision}}}};
}

ModelCorrection correction_from_json(const json& j) {
  ModelCorrection c;
  c.machine = j.at("machine").get<std::string>();
  c.ranks = int(integer(j, "ranks", 1, 1 << 30));
  c.op = j.at("op").get<std::string>();
  c.axis = j.at("axis").get<std::string>();
  c.dtype = j.at("dtype").get<std::string>();
  c.family = j.at("family").get<std::string>();
  c.m_bucket = int(integer(j, "m_bucket", 0, 63));
  const json& ratios = j.at("ratios");
  if (!ratios.is_array()) throw Error(ErrorCode::invalid_argument, "ratios is not an array");
  for (const json& r : ratios) {
    if (!r.is_number() || !std::isfinite(r.get<double>()) || !(r.get<double>() > 0))
      throw Error(ErrorCode::invalid_argument, "a ratio is not a finite number > 0");
    c.ratios.push_back(r.get<double>());
  }
  if (c.ratios.size() > ModelCorrection::kKept) c.ratios.erase(c.ratios.begin(), c.ratios.end() - ModelCorrection::kKept);
  const json& p = j.at("provenance");
  c.updated_at = p.value("updated_at", "");
  c.measured_by = p.value("measured_by", "");
  c.revision = p.value("revision", "");
  return c;
}

// Appends `from`'s ratios to the correction of its key in `to` (made if missing), keeping the
// newest kKept, and takes its provenance.
void append(std::vector<ModelCorrection>& to, const ModelCorrection& from) {
  auto it = std::find_if(to.begin(), to.end(), [&](const ModelCorrection& c) { return same_correction(c, from); });
  if (it == to.end()) {
    to.push_back(from);
    to.back().ratios.clear();
    it = to.end() - 1;
  }
  it->ratios.insert(it->ratios.end(), from.ratios.begin(), from.ratios.end());
  if (it->ratios.size() > ModelCorrection::kKept) it->ratios.erase(it->ratios.begin(), it->ratios.end() - ModelCorrection::kKept);
  it->updated_at = from.updated_at;
  it->measured_by = from.measured_by;
  it->revision = from.revision;
}

// An exclusive flock on the file `path` (created if missing) for the object's lifetime. Each
// lock opens its own file description, so it excludes other threads of this process as well as
// other processes; closing the descriptor releases it, also when the process dies holding it.
// Opened read-only (flock needs no more), so users who share a database need only read its lock.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666)) {
    if (fd_ < 0) throw Error(ErrorCode::io, "cannot open the lock file " + path + ": " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        const std::string why = std::strerror(errno);
        ::close(fd_);
        throw Error(ErrorCode::io, "cannot lock " + path + ": " + why);
      }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

double ModelCorrection::factor() const {
  if (ratios.empty()) return 1;
  std::vector<double> logs;
  for (double r : ratios) logs.push_back(std::log(r));
  std::sort(logs.begin(), logs.end());
  const std::size_t h = logs.size() / 2;
  const double median = logs.size() % 2 ? logs[h] : 0.5 * (logs[h - 1] + logs[h]);
  const double w = double(logs.size()) / (double(logs.size()) + kPrior);
  return std::clamp(std::exp(w * median), kMin, kMax);
}

std::string correction_family(const Schedule& s) {
  std::string f = s.overlap == Overlap::none ? "unfused " : "overlapped ";
  f += to_string(s.algo);
  if (s.overlap == Overlap::none && s.data == DataMode::uniform) f += " packed";  // serial-packed: other GEMMs
  if (s.topo == Topo::two_level) f += " 2level";
  return f;
}

std::string correction_machine(const std::string& name) {
  const std::string prefix = "calibrated-";
  if (name.compare(0, prefix.size(), prefix) != 0) return name;
  const std::size_t dash = name.find('-', prefix.size());
  return dash == std::string::npos ? name : name.substr(0, dash);
}

const ModelCorrection* TuningDb::correction(const OpDesc& desc, const std::string& machine, const std::string& family) const {
  const ModelCorrection key{correction_machine(machine), desc.ranks, to_string(desc.op), to_string(desc.axis),
                            to_string(desc.dtype), family, bucket(desc.m), {}, {}, {}, {}};
  const ModelCorrection* nearest = nullptr;
  for (const ModelCorrection& c : corrections_) {
    if (!same_correction_but_m(c, key)) continue;
    const int distance = std::abs(c.m_bucket - key.m_bucket);
    if (distance == 0) return &c;
    if (distance == 1 && !nearest) nearest = &c;
  }
  return nearest;
}

void TuningDb::add_evidence(const OpDesc& desc, const std::string& machine, const std::string& family, double ratio,
                            const std::string& measured_by, const std::string& revision) {
  if (!std::isfinite(ratio) || !(ratio > 0)) return;
  ModelCorrection one{correction_machine(machine), desc.ranks, to_string(desc.op), to_string(desc.axis),
                      to_string(desc.dtype), family, bucket(desc.m), {ratio}, {}, measured_by, {}};
  one.updated_at = utc_text();
  one.revision = revision;
  append(corrections_, one);
  append(added_, one);
}

TuningEntry TuningDb::key_of(const OpDesc& d, const std::string& machine) {
  TuningEntry e;
  e.machine = machine;
  e.ranks = d.ranks;
  e.op = to_string(d.op);
  e.dtype = to_string(d.dtype);
  e.axis = to_string(d.axis);
  e.trans_a = d.trans_a;
  e.trans_b = d.trans_b;
  e.m_bucket = bucket(d.m);
  e.n_bucket = bucket(d.n);
  e.k_bucket = bucket(d.k);
  return e;
}

TuningDb TuningDb::load(const std::string& path, std::string* warning) {
  TuningDb db;
  std::ifstream in(path);
  if (!in) return db;  // no database yet
  try {
    const json doc = json::parse(in);
    if (!doc.is_object() || doc.value("schema", "") != kSchema)
      throw Error(ErrorCode::invalid_argument, std::string("not a cofuse tuning database (schema ") + kSchema + ")");
    const json& entries = doc.at("entries");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      try {
        db.entries_.push_back(from_json(entries[i]));
      } catch (const std::exception& e) {
        throw Error(ErrorCode::invalid_argument, "entry " + std::to_string(i) + ": " + e.what());
      }
    }
    // Older files have no corrections; a malformed one is a malformed file.
    if (doc.contains("corrections")) {
      const json& corrections = doc.at("corrections");
      for (std::size_t i = 0; i < corrections.size(); ++i) {
        try {
          db.corrections_.push_back(correction_from_json(corrections[i]));
        } catch (const std::exception& e) {
          throw Error(ErrorCode::invalid_argument, "correction " + std::to_string(i) + ": " + e.what());
        }
      }
    }
  } catch (const std::exception& e) {
    if (warning) *warning = "cofuse: ignoring tuning database " + path + ": " + e.what();
    return TuningDb();
  }
  db.put_.assign(db.entries_.size(), false);  // read, not put: save leaves them to the file
  return db;
}

std::optional<TuningEntry> TuningDb::lookup(const OpDesc& desc, const std::string& machine) const {
  const TuningEntry key = key_of(desc, machine);
  const TuningEntry* nearest = nullptr;
  for (const TuningEntry& e : entries_) {
    if (!same_key_but_m(e, key)) continue;
    const int distance = std::abs(e.m_bucket - key.m_bucket);
    if (distance == 0) return e;
    if (distance == 1 && !nearest) nearest = &e;
  }
  // Entries are measured by the CPU executor (cofuse tune): a neighbour must be runnable there.
  if (nearest && can_run(Backend::cpu_mpi, desc, nearest->schedule).ok()) return *nearest;
  return std::nullopt;
}

void TuningDb::put(const TuningEntry& entry) {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (same_key_but_m(entries_[i], entry) && entries_[i].m_bucket == entry.m_bucket) {
      entries_[i] = entry;
      put_[i] = true;
      return;
    }
  entries_.push_back(entry);
  put_.push_back(true);
}

void TuningDb::save(const std::string& path) const {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code made;
  if (!parent.empty()) std::filesystem::create_directories(parent, made);
  if (made)
    throw Error(ErrorCode::io, "cannot make the directory " + parent.string() + " of " + path + ": " + made.message());
  // Read, merge and replace the file under one lock: without it, two processes that read the
  // file before either renamed its new one over it would each drop the other's entry.
  const FileLock lock(path + ".lock");
  TuningDb merged = load(path);
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (put_[i]) merged.put(entries_[i]);
  for (const ModelCorrection& c : added_) append(merged.corrections_, c);
  json entries = json::array();
  for (const TuningEntry& e : merged.entries_) entries.push_back(to_json(e));
  json corrections = json::array();
  for (const ModelCorrection& c : merged.corrections_) corrections.push_back(to_json(c));
  const json doc = {{"schema", kSchema},
                    {"comment", "schedules measured to win (cofuse tune, online tuning); the planner consults them before its model"},
                    {"entries", entries},
                    {"corrections", corrections}};
  // A temporary of this process and call: the lock orders the savers, but where flock reaches
  // only this machine (some network filesystems), writers on others must not share one.
  static std::atomic<unsigned> serial{0};
  const std::string partial = path + ".partial." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream out(partial);
    out << doc.dump(2) << "\n";
    out.close();
    if (!out) {
      std::remove(partial.c_str());
      throw Error(ErrorCode::io, "cannot write " + partial);
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    throw Error(ErrorCode::io, "cannot rename " + partial + " to " + path);
  }
}

std::string tuning_db_path(const std::string& given) {
  if (!given.empty()) return given;
  if (std::string db = config::tuning_db().value; !db.empty()) return db;
  return config::cache_dir().value + "/tuning.json";
}

}  // namespace cofuse
