// Schedule: string form, presets, validation against an op, enumeration of the space.
#include "cofuse/schedule.hpp"

#include "cofuse/backend.hpp"

#include <array>
#include <charconv>
#include <set>

#include "core/common/quote.hpp"
#include "core/exec_model/engines.hpp"

namespace cofuse {

const char* to_string(Overlap v) { return v == Overlap::none ? "none" : v == Overlap::shard ? "shard" : "chunk"; }
const char* to_string(Split v) { return v == Split::d1 ? "1d" : "2d"; }
const char* to_string(DataMode v) { return v == DataMode::uniform ? "uniform" : "hetero"; }
const char* to_string(Fusion v) { return v == Fusion::unfused ? "unfused" : "fused"; }
const char* to_string(CommDriver v) {
  switch (v) {
    case CommDriver::thread: return "thread";
    case CommDriver::inline_: return "inline";
    case CommDriver::ce: return "ce";
    case CommDriver::sm: return "sm";
  }
  return "?";
}
const char* to_string(Algo v) { return v == Algo::coll ? "coll" : v == Algo::ring ? "ring" : "direct"; }
const char* to_string(Topo v) { return v == Topo::flat ? "flat" : "2level"; }
const char* to_string(Wire v) { return v == Wire::op ? "op" : "f32"; }

namespace {

// Looks text up among an enum's values by their printed names.
template <typename E, std::size_t N>
std::optional<E> lookup(std::string_view text, const std::array<E, N>& values) {
  for (E v : values)
    if (text == to_string(v)) return v;
  return std::nullopt;
}

template <typename E, std::size_t N>
std::string choices(const std::array<E, N>& values) {
  std::string out;
  for (E v : values) out += std::string(out.empty() ? "" : " | ") + to_string(v);
  return out;
}

constexpr std::array kOverlaps{Overlap::none, Overlap::shard, Overlap::chunk};
constexpr std::array kSplits{Split::d1, Split::d2};
constexpr std::array kData{DataMode::uniform, DataMode::hetero};
constexpr std::array kFusions{Fusion::unfused, Fusion::fused};
constexpr std::array kDrivers{CommDriver::thread, CommDriver::inline_, CommDriver::ce, CommDriver::sm};
constexpr std::array kAlgos{Algo::coll, Algo::ring, Algo::direct};
constexpr std::array kTopos{Topo::flat, Topo::two_level};
constexpr std::array kWires{Wire::op, Wire::f32};
constexpr int kMaxChunks = 65536;
constexpr int kMaxHostRanks = 1 << 20;

// ",topo=2level,host_ranks=R,wire=f32": what a two-level or wide-wire schedule adds to the
// string of its flat, wire=op twin (a preset, often).
std::string suffix(const Schedule& s) {
  std::string out;
  if (s.topo != Topo::flat || s.host_ranks != 0) out += std::string(",topo=") + to_string(s.topo);
  if (s.host_ranks != 0) out += ",host_ranks=" + std::to_string(s.host_ranks);
  if (s.wire != Wire::op) out += std::string(",wire=") + to_string(s.wire);
  return out;
}

Schedule make(Overlap o, int chunks, Split s, DataMode d, Fusion f, CommDriver e, Algo a) {
  return Schedule{o, chunks, s, d, f, e, a, Topo::flat, 0, Wire::op};
}

Status invalid(const std::string& what) { return Status(ErrorCode::invalid_argument, what); }

}  // namespace

std::string Schedule::to_string() const {
  return std::string("overlap=") + cofuse::to_string(overlap) + ",chunks=" + std::to_string(chunks) +
         ",split=" + cofuse::to_string(split) + ",data=" + cofuse::to_string(data) +
         ",fusion=" + cofuse::to_string(fusion) + ",engine=" + cofuse::to_string(driver) +
         ",algo=" + cofuse::to_string(algo) + suffix(*this);
}

Schedule with_host_ranks(const Schedule& schedule, int ranks_per_host) {
  Schedule s = schedule;
  if (s.topo == Topo::two_level && s.host_ranks == 0) s.host_ranks = ranks_per_host;
  return s;
}

bool Schedule::separate_comm_engine() const { return detail::engine_rules(*this).separate_comm_driver; }

Schedule serial_schedule() { return Schedule{}; }

Schedule serial_ring_schedule() {
  Schedule s = serial_schedule();
  s.algo = Algo::ring;
  return s;
}

namespace {
// gemm_rs along n's unfused baseline in the hand-written code's shape (preset "serial-packed").
Schedule serial_packed_schedule() {
  Schedule s = serial_schedule();
  s.data = DataMode::uniform;
  return s;
}
}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = [] {
    using O = Overlap;
    std::vector<Preset> p = {
        {"serial", serial_schedule(), "the unfused baseline: whole collective, whole GEMM"},
        {"serial-ring", serial_ring_schedule(),
         "the unfused baseline by cofuse's own transport: whole GEMM and a blocking point-to-point ring, one after "
         "the other"},
        {"serial-packed", serial_packed_schedule(),
         "gemm_rs along n only: the unfused baseline as hand-written code makes it, one whole GEMM, each rank's "
         "column block packed, one reduce-scatter ('serial' makes one GEMM per column block, straight into place)"},
        {"shard", make(O::shard, 1, Split::d1, DataMode::hetero, Fusion::unfused, CommDriver::thread, Algo::ring),
         "one ring step per peer shard, progress thread (FiCCO's shard-overlap baseline)"},
    };
    // FiCCO's named points: {uniform, hetero} x {unfused, fused} x {1d, 2d}, 4 chunks, ring.
    for (DataMode d : kData)
      for (Fusion f : kFusions)
        for (Split s : kSplits) {
          const std::string name = std::string(to_string(d)) + "-" + to_string(f) + "-" + to_string(s);
          const CommDriver e = f == Fusion::fused ? CommDriver::inline_ : CommDriver::thread;
          p.push_back({name, make(O::chunk, 4, s, d, f, e, Algo::ring),
                       std::string(d == DataMode::uniform ? "packed" : "strided") + " pieces, " +
                           (f == Fusion::fused ? "GEMM tiles interleaved with MPI progress on one thread"
                                               : "GEMM and a progress thread") +
                           ", " + (s == Split::d1 ? "row" : "tile") + " chunks, ring"});
        }
    return p;
  }();
  return all;
}

std::optional<Schedule> Schedule::parse(std::string_view text, Status* error) {
  auto fail = [&](const std::string& why) -> std::optional<Schedule> {
    if (error) *error = invalid("schedule " + in_quotes(text) + ": " + why);
    return std::nullopt;
  };
  if (text.empty()) return fail("empty; give a preset name or key=value pairs");
  Schedule s;
  std::set<std::string> seen;
  std::size_t start = 0;
  bool first = true;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view token = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (token.empty()) return fail("empty field (two commas, or a trailing comma)");
    const std::size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      if (!first) return fail(in_quotes(token) + " is not key=value (a preset name may only come first)");
      bool found = false;
      for (const Preset& p : presets())
        if (token == p.name) {
          s = p.schedule;
          found = true;
        }
      if (!found) {
        std::string names;
        for (const Preset& p : presets()) names += (names.empty() ? "" : ", ") + p.name;
        return fail("unknown preset " + in_quotes(token) + "; presets: " + names);
      }
      first = false;
      continue;
    }
    first = false;
    std::string key(token.substr(0, eq));
    if (key == "driver") key = "engine";  // the C++ name of the field, accepted as its key too
    const std::string_view value = token.substr(eq + 1);
    if (!seen.insert(key).second) return fail("key " + in_quotes(key) + " given twice");
    std::string allowed;  // set when the value is not one of the field's names
    auto set = [&](auto& field, const auto& values) {
      if (auto v = lookup(value, values)) field = *v;
      else allowed = choices(values);
    };
    if (key == "overlap") set(s.overlap, kOverlaps);
    else if (key == "split") set(s.split, kSplits);
    else if (key == "data") set(s.data, kData);
    else if (key == "fusion") set(s.fusion, kFusions);
    else if (key == "engine") set(s.driver, kDrivers);
    else if (key == "algo") set(s.algo, kAlgos);
    else if (key == "topo") set(s.topo, kTopos);
    else if (key == "wire") set(s.wire, kWires);
    else if (key == "chunks" || key == "host_ranks") {
      const int lo = key == "chunks" ? 1 : 0, hi = key == "chunks" ? kMaxChunks : kMaxHostRanks;
      int n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < lo || n > hi)
        return fail(key + "=" + escape_controls(value) + " is not an integer in " + std::to_string(lo) + ".." +
                    std::to_string(hi));
      (key == "chunks" ? s.chunks : s.host_ranks) = n;
    } else {
      return fail("unknown key " + in_quotes(key) +
                  "; keys: overlap, chunks, split, data, fusion, engine (or driver), algo, topo, host_ranks, wire");
    }
    if (!allowed.empty()) return fail(key + "=" + escape_controls(value) + " is not one of " + allowed);
  }
  return s;
}

Status Schedule::validate_for(const OpDesc& desc) const {
  const std::string name = "schedule " + to_string() + " for " + cofuse::to_string(desc.op);
  auto fail = [&](const std::string& why) { return invalid(name + ": " + why); };
  if (chunks < 1 || chunks > kMaxChunks) return fail("chunks must be in 1.." + std::to_string(kMaxChunks));
  if (topo == Topo::flat && host_ranks != 0)
    return fail("host_ranks sizes the hosts of a two-level schedule: it needs topo=2level");
  if (topo == Topo::two_level) {
    if (algo != Algo::ring)
      return fail("topo=2level runs a ring inside each host and direct messages between hosts: algo must be ring");
    // host_ranks=0 (the machine's) is a valid schedule; lower() needs the number (with_host_ranks).
    if (host_ranks < 0) return fail("host_ranks must be 0 (the machine's) or a number of ranks");
    if (host_ranks > 0 && desc.ranks % host_ranks != 0)
      return fail("host_ranks=" + std::to_string(host_ranks) + " does not divide ranks=" + std::to_string(desc.ranks) +
                  " (" + std::to_string(desc.ranks) + " % " + std::to_string(host_ranks) + " = " +
                  std::to_string(desc.ranks % host_ranks) + "): hosts hold equal runs of consecutive ranks");
  }
  if (wire == Wire::f32) {
    if (desc.op == OpKind::ag_gemm)
      return fail("wire=f32 sets how partial sums travel; ag_gemm moves its inputs, not partial sums: use wire=op");
    if (desc.dtype != DType::bf16)
      return fail(std::string("wire=f32 carries the partial sums of a bf16 op in f32 (on the CPU executor); a ") +
                  cofuse::to_string(desc.dtype) + " op's partial sums travel in " + cofuse::to_string(desc.dtype) +
                  ": use wire=op");
  }
  if (overlap == Overlap::none) {
    // The unfused baselines differ only in how they move the data: a library collective
    // (serial), or cofuse's own point-to-point ring or direct exchange (serial-ring), flat or
    // two-level, partial sums in the op's dtype or f32.
    // gemm_rs along n by the library collective also varies in data: uniform makes one GEMM
    // and packs every rank's column block, hetero makes one GEMM per block (lower_reduce).
    Schedule base = serial_schedule();
    base.algo = algo;
    base.topo = topo;
    base.host_ranks = host_ranks;
    base.wire = wire;
    const bool packs_blocks = desc.op == OpKind::gemm_rs && desc.axis == Axis::n && algo == Algo::coll;
    if (packs_blocks) base.data = data;
    if (!(*this == base))
      return fail("overlap=none is the unfused baseline (whole GEMM and whole communication, one after the other) "
                  "and varies only in algo: " + serial_schedule().to_string() +
                  " (preset 'serial'), or the same with algo=ring (preset 'serial-ring') or algo=direct; and for "
                  "gemm_rs along n by the library collective in data (data=uniform: one GEMM, then each rank's "
                  "column block packed; preset 'serial-packed')");
    return Status::Ok();
  }
  if (overlap == Overlap::shard) {
    if (chunks != 1) return fail("overlap=shard moves whole shards: chunks must be 1 (use overlap=chunk to cut them)");
    if (split != Split::d1) return fail("overlap=shard moves whole shards: split=2d needs overlap=chunk");
    if (algo == Algo::coll)
      return fail("overlap=shard is one step per peer shard: algo must be ring or direct (coll on whole shards is "
                  "overlap=none)");
  }
  if (overlap == Overlap::chunk && chunks == 1 && algo == Algo::coll)
    return fail("one collective on whole shards is the baseline: use overlap=none, or more chunks");
  if (fusion == Fusion::fused && driver != CommDriver::inline_)
    return fail("fusion=fused means the compute thread drives communication: engine must be inline");
  if (fusion == Fusion::unfused && driver == CommDriver::inline_)
    return fail("engine=inline runs communication on the compute thread: that is fusion=fused");
  // What a backend's libraries cannot do (MPI reductions of strided tiles, say) is can_run's.
  return Status::Ok();
}

std::vector<Schedule> enumerate_schedules(const OpDesc& desc, const std::vector<int>& chunk_counts,
                                          int ranks_per_host) {
  std::vector<Schedule> out = {serial_schedule()};
  const int R = ranks_per_host;
  const bool hosts = R > 1 && R < desc.ranks && desc.ranks % R == 0;
  // These are CPU schedules (engine thread / inline): keep those the CPU backend runs.
  auto add = [&](const Schedule& s) {
    if (!can_run(Backend::cpu_mpi, desc, s).ok()) return;
    out.push_back(s);
    if (hosts && s.algo == Algo::ring) {
      Schedule two = s;
      two.topo = Topo::two_level;
      two.host_ranks = R;
      if (can_run(Backend::cpu_mpi, desc, two).ok()) out.push_back(two);
    }
  };
  add(serial_packed_schedule());
  for (Algo a : {Algo::ring, Algo::direct}) add(make(Overlap::none, 1, Split::d1, DataMode::hetero, Fusion::unfused, CommDriver::thread, a));
  for (Fusion f : kFusions) {
    const CommDriver e = f == Fusion::fused ? CommDriver::inline_ : CommDriver::thread;
    for (Algo a : {Algo::ring, Algo::direct})
      for (DataMode d : kData) add(make(Overlap::shard, 1, Split::d1, d, f, e, a));
    for (int c : chunk_counts)
      for (Split s : kSplits)
        for (DataMode d : kData)
          for (Algo a : kAlgos) add(make(Overlap::chunk, c, s, d, f, e, a));
  }
  return out;
}

std::string schedule_name(const Schedule& schedule) {
  // A two-level or wide-wire schedule is named by its flat, wire=op twin:
  // "hetero-unfused-1d,topo=2level,host_ranks=2", "serial,wire=f32".
  Schedule flat = schedule;
  flat.topo = Topo::flat;
  flat.host_ranks = 0;
  flat.wire = Wire::op;
  for (const Preset& p : presets())
    if (p.schedule == flat) return p.name + suffix(schedule);
  return schedule.to_string();
}

}  // namespace cofuse
