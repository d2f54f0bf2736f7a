#include "cofuse/model/profile.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/quote.hpp"

namespace cofuse {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& origin, const std::string& message) {
  throw Error(ErrorCode::invalid_argument, "profile " + origin + ": " + message);
}

// Reads an object's fields by name, so a misspelt or unknown key is an error, not a silent default.
class Fields {
 public:
  Fields(const json& object, std::string origin, std::string path) : object_(object), origin_(std::move(origin)), path_(std::move(path)) {
    if (!object_.is_object()) bad(origin_, where("") + " must be an object");
  }
  // Call after reading every field: anything left is a key this schema does not have (a typo
  // is reported as itself, before the field it failed to set is reported missing).
  void done() const {
    for (const auto& [key, v] : object_.items())
      if (std::find(read_.begin(), read_.end(), key) == read_.end()) bad(origin_, "unknown key '" + where(key) + "'");
    if (!missing_.empty()) bad(origin_, "missing " + missing_.front());
  }
  double number(const std::string& key, double& out, bool required = false) {
    read_.push_back(key);
    if (!object_.contains(key)) {
      if (required) missing_.push_back(where(key));
      return out;
    }
    if (!object_[key].is_number()) bad(origin_, where(key) + " must be a number, not " + object_[key].dump());
    return out = object_[key].get<double>();
  }
  int64_t integer(const std::string& key, int64_t& out) {
    read_.push_back(key);
    if (!object_.contains(key)) return out;
    if (!object_[key].is_number_integer()) bad(origin_, where(key) + " must be an integer, not " + object_[key].dump());
    return out = object_[key].get<int64_t>();
  }
  void text(const std::string& key, std::string& out, bool required = false) {
    read_.push_back(key);
    if (!object_.contains(key)) {
      if (required) missing_.push_back(where(key));
      return;
    }
    if (!object_[key].is_string()) bad(origin_, where(key) + " must be a string, not " + object_[key].dump());
    out = object_[key].get<std::string>();
  }
  void boolean(const std::string& key, bool& out) {
    read_.push_back(key);
    if (!object_.contains(key)) return;
    if (!object_[key].is_boolean()) bad(origin_, where(key) + " must be true or false");
    out = object_[key].get<bool>();
  }
  const json* child(const std::string& key) {
    read_.push_back(key);
    return object_.contains(key) ? &object_[key] : nullptr;
  }
  std::string where(const std::string& key) const {
    const std::string name = escape_controls(key);  // a key is the file's text: shown with its control bytes escaped
    return path_.empty() ? name : name.empty() ? path_ : path_ + "." + name;
  }

 private:
  const json& object_;
  std::string origin_, path_;
  std::vector<std::string> read_;
  std::vector<std::string> missing_;
};

void read_collective(const json* j, const std::string& origin, const std::string& path, CollectiveModel& c) {
  if (!j) return;
  Fields f(*j, origin, path);
  f.number("alpha_s", c.alpha_s);
  f.number("busbw_GBps", c.busbw_GBps);
  f.number("nonblocking_alpha_s", c.nonblocking_alpha_s);
  f.number("nonblocking_busbw_GBps", c.nonblocking_busbw_GBps);
  f.number("beyond_bytes", c.beyond_bytes);
  f.number("beyond_busbw_GBps", c.beyond_busbw_GBps);
  f.number("nonblocking_beyond_busbw_GBps", c.nonblocking_beyond_busbw_GBps);
  f.done();
}

json collective_json(const CollectiveModel& c) {
  json j = {{"alpha_s", c.alpha_s}, {"busbw_GBps", c.busbw_GBps}};
  // Either one alone is a valid profile too, so either one is written (else a round trip loses it).
  if (c.nonblocking_busbw_GBps != 0 || c.nonblocking_alpha_s != 0) {
    j["nonblocking_alpha_s"] = c.nonblocking_alpha_s;
    j["nonblocking_busbw_GBps"] = c.nonblocking_busbw_GBps;
  }
  if (c.beyond_bytes != 0 || c.beyond_busbw_GBps != 0 || c.nonblocking_beyond_busbw_GBps != 0) {
    j["beyond_bytes"] = c.beyond_bytes;
    j["beyond_busbw_GBps"] = c.beyond_busbw_GBps;
    j["nonblocking_beyond_busbw_GBps"] = c.nonblocking_beyond_busbw_GBps;
  }
  return j;
}

// The backends a profile may name, by their to_string() names.
constexpr Backend kBackends[] = {Backend::cpu_mpi, Backend::cuda_local, Backend::cuda_nccl};

// Where gemm_seconds() takes a dtype's rate from: a measured table (measured, or measured_16 for
// 16-bit GEMMs where the profile has one) or the roofline's peak, scaled by `scale` over it
// (bf16 and f16 without a 16-bit rate run "as f32"); `field` is what explains the scale.
struct DtypeRate {
  const char* field;
  double scale;
  bool as_f32;  // a 16-bit dtype on a profile with no 16-bit rate
  const std::vector<GemmPoint>* table;  // nullptr: the roofline
};

DtypeRate dtype_rate(const ComputeModel& c, DType dtype) {
  const std::vector<GemmPoint>* table = c.measured.empty() ? nullptr : &c.measured;
  if (dtype == DType::f64) return {"compute.peak_gflops_f64", c.peak_gflops_f64 / c.peak_gflops_f32, false, table};
  const bool half = dtype == DType::bf16 || dtype == DType::f16;
  if (half && table && !c.measured_16.empty()) return {"compute.measured_16", 1.0, false, &c.measured_16};
  if (half && c.peak_gflops_16 > 0) return {"compute.peak_gflops_16", c.peak_gflops_16 / c.peak_gflops_f32, false, table};
  return {"compute.peak_gflops_f32", 1.0, half, table};
}

std::filesystem::path source_profiles() { return COFUSE_SOURCE_PROFILES_DIR; }
std::filesystem::path installed_profiles() { return COFUSE_INSTALL_PROFILES_DIR; }

}  // namespace

double NetworkModel::polled_floor_polls_at(int64_t bytes) const {
  if (!(polled_floor_small_polls > 0) || bytes >= kPolledFloorBytes) return polled_floor_polls;
  if (bytes <= kPolledFloorSmallBytes) return polled_floor_small_polls;
  const double f = double(bytes - kPolledFloorSmallBytes) / double(kPolledFloorBytes - kPolledFloorSmallBytes);
  return polled_floor_small_polls + f * (polled_floor_polls - polled_floor_small_polls);
}

int MachineProfile::ranks_per_host(int ranks) const {
  const bool nodes = network.topology == "two_level" && network.ranks_per_node > 0 && network.ranks_per_node < ranks;
  return nodes ? int(network.ranks_per_node) : ranks;
}

Status MachineProfile::validate() const {
  auto fail = [&](const std::string& m) { return Status(ErrorCode::invalid_argument, "profile " + name + ": " + m); };
  if (compute.peak_gflops_f32 <= 0) return fail("compute.peak_gflops_f32 must be > 0");
  if (compute.peak_gflops_f64 <= 0) return fail("compute.peak_gflops_f64 must be > 0");
  if (compute.peak_gflops_16 < 0) return fail("compute.peak_gflops_16 must be >= 0 (0: as f32)");
  if (compute.tile_m < 1 || compute.tile_n < 1 || compute.units < 1) return fail("compute.tile_m, tile_n and units must be >= 1");
  if (!(compute.efficiency > 0 && compute.efficiency <= 1)) return fail("compute.efficiency must be in (0, 1]");
  if (compute.memory_GBps <= 0) return fail("compute.memory_GBps must be > 0");
  for (const GemmPoint& p : compute.measured)
    if (p.m < 1 || p.n < 1 || p.k < 1 || p.gflops <= 0) return fail("compute.measured: every point needs m, n, k >= 1 and gflops > 0");
  if (!compute.measured_16.empty() && compute.measured.empty())
    return fail("compute.measured_16 needs compute.measured (a profile of measured f32 rates); a roofline profile "
                "gives 16-bit GEMMs compute.peak_gflops_16");
  for (const GemmPoint& p : compute.measured_16)
    if (p.m < 1 || p.n < 1 || p.k < 1 || p.gflops <= 0)
      return fail("compute.measured_16: every point needs m, n, k >= 1 and gflops > 0");
  if (compute.sharing != "rank" && compute.sharing != "device")
    return fail("compute.sharing " + in_quotes(compute.sharing) + " is not rank or device");
  const NetworkModel& n = network;
  if (n.topology != "switch" && n.topology != "shared" && n.topology != "shared_duplex" && n.topology != "two_level")
    return fail("network.topology " + in_quotes(n.topology) + " is not switch, shared, shared_duplex or two_level");
  if (n.bandwidth_GBps <= 0) return fail("network.bandwidth_GBps must be > 0");
  if (n.alpha_s < 0 || n.inter_alpha_s < 0 || task_overhead_s < 0 || compute.launch_s < 0) return fail("latencies must be >= 0");
  if (!(n.polled_floor_polls >= 0 && n.polled_floor_small_polls >= 0))
    return fail("network.polled_floor_polls and network.polled_floor_small_polls must be >= 0");
  if (n.topology == "two_level" && (n.ranks_per_node < 1 || n.inter_bandwidth_GBps <= 0))
    return fail("two_level needs network.ranks_per_node >= 1 and network.inter_bandwidth_GBps > 0");
  if (n.nics_per_node < 0 || (n.nics_per_node > 0 && (n.ranks_per_node < 1 || n.ranks_per_node % n.nics_per_node != 0)))
    return fail("network.nics_per_node must be 0 (one per rank) or divide ranks_per_node");
  for (const auto* c : {&n.allgather, &n.reduce_scatter, &n.allreduce}) {
    if (c->busbw_GBps <= 0 || c->alpha_s < 0 || c->nonblocking_busbw_GBps < 0 || c->nonblocking_alpha_s < 0)
      return fail("every collective needs busbw_GBps > 0 and alpha_s, nonblocking_alpha_s, nonblocking_busbw_GBps >= 0");
    if (!(c->beyond_bytes >= 0 && c->beyond_busbw_GBps >= 0 && c->nonblocking_beyond_busbw_GBps >= 0))
      return fail("a collective's beyond_bytes, beyond_busbw_GBps and nonblocking_beyond_busbw_GBps must be >= 0");
    if (c->nonblocking_beyond_busbw_GBps > 0 && c->nonblocking_busbw_GBps <= 0)
      return fail("a collective's nonblocking_beyond_busbw_GBps bends the non-blocking line: it needs nonblocking_busbw_GBps > 0");
  }
  if (!(contention.gemm_rate_while_comm > 0 && contention.gemm_rate_while_comm <= 1) ||
      !(contention.comm_rate_while_gemm > 0 && contention.comm_rate_while_gemm <= 1))
    return fail("contention rates must be in (0, 1]");
  if (!(contention.poll_cost_s >= 0 && contention.poll_cost_s < 1))
    return fail("contention.poll_cost_s must be in [0, 1) seconds");
  return Status();
}

MachineProfile parse_profile(const std::string& text, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    bad(origin, std::string("not valid JSON: ") + e.what());
  }
  MachineProfile p;
  {
    Fields top(doc, origin, "");
    std::string schema;
    top.text("schema", schema, true);
    if (schema != "cofuse.profile/1") bad(origin, "schema " + in_quotes(schema) + " is not cofuse.profile/1");
    top.text("name", p.name, true);
    top.text("description", p.description);
    top.text("note", p.note);
    top.boolean("validated", p.validated);
    std::string backend = to_string(p.backend);
    top.text("backend", backend);
    const auto named = std::find_if(std::begin(kBackends), std::end(kBackends),
                                    [&](Backend b) { return backend == to_string(b); });
    if (named == std::end(kBackends)) bad(origin, "backend " + in_quotes(backend) + " is not cpu_mpi, cuda_nccl or cuda_local");
    p.backend = *named;
    top.number("task_overhead_s", p.task_overhead_s);
    if (const json* c = top.child("compute")) {
      Fields f(*c, origin, "compute");
      f.number("peak_gflops_f32", p.compute.peak_gflops_f32, true);
      f.number("peak_gflops_f64", p.compute.peak_gflops_f64, true);
      f.number("peak_gflops_16", p.compute.peak_gflops_16);
      f.integer("tile_m", p.compute.tile_m);
      f.integer("tile_n", p.compute.tile_n);
      f.integer("units", p.compute.units);
      f.number("efficiency", p.compute.efficiency);
      f.number("memory_GBps", p.compute.memory_GBps, true);
      f.number("launch_s", p.compute.launch_s);
      f.text("sharing", p.compute.sharing);
      for (auto [key, points] : {std::pair{"measured", &p.compute.measured}, {"measured_16", &p.compute.measured_16}})
        if (const json* m = f.child(key)) {
          const std::string name = std::string("compute.") + key;
          if (!m->is_array()) bad(origin, name + " must be a list of {m, n, k, gflops}");
          for (std::size_t i = 0; i < m->size(); ++i) {
            Fields g((*m)[i], origin, name + "[" + std::to_string(i) + "]");
            GemmPoint pt;
            g.integer("m", pt.m);
            g.integer("n", pt.n);
            g.integer("k", pt.k);
            g.number("gflops", pt.gflops, true);
            g.done();
            points->push_back(pt);
          }
        }
      f.done();
    } else {
      bad(origin, "missing compute");
    }
    if (const json* n = top.child("network")) {
      Fields f(*n, origin, "network");
      f.text("topology", p.network.topology);
      f.number("alpha_s", p.network.alpha_s);
      f.number("polled_floor_polls", p.network.polled_floor_polls);
      f.number("polled_floor_small_polls", p.network.polled_floor_small_polls);
      f.number("bandwidth_GBps", p.network.bandwidth_GBps, true);
      f.integer("ranks_per_node", p.network.ranks_per_node);
      f.number("inter_alpha_s", p.network.inter_alpha_s);
      f.number("inter_bandwidth_GBps", p.network.inter_bandwidth_GBps);
      f.integer("nics_per_node", p.network.nics_per_node);
      f.integer("copy_engines", p.network.copy_engines);
      read_collective(f.child("allgather"), origin, "network.allgather", p.network.allgather);
      read_collective(f.child("reduce_scatter"), origin, "network.reduce_scatter", p.network.reduce_scatter);
      read_collective(f.child("allreduce"), origin, "network.allreduce", p.network.allreduce);
      f.done();
    } else {
      bad(origin, "missing network");
    }
    if (const json* c = top.child("contention")) {
      Fields f(*c, origin, "contention");
      f.number("gemm_rate_while_comm", p.contention.gemm_rate_while_comm);
      f.number("comm_rate_while_gemm", p.contention.comm_rate_while_gemm);
      f.number("poll_cost_s", p.contention.poll_cost_s);
      f.done();
    }
    if (const json* s = top.child("sources")) {
      if (!s->is_object()) bad(origin, "sources must be an object of field -> where the number came from");
      for (const auto& [key, v] : s->items()) {
        if (!v.is_string()) bad(origin, "sources." + key + " must be a string");
        p.sources[key] = v.get<std::string>();
      }
    }
    top.done();
  }
  if (const Status st = p.validate(); !st.ok()) bad(origin, st.message());
  return p;
}

std::string to_json(const MachineProfile& p) {
  auto points = [](const std::vector<GemmPoint>& table) {
    json out = json::array();
    for (const GemmPoint& g : table) out.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"gflops", g.gflops}});
    return out;
  };
  json sources = json::object();
  for (const auto& [k, v] : p.sources) sources[k] = v;
  json doc = {{"schema", "cofuse.profile/1"}, {"name", p.name}, {"description", p.description}};
  if (!p.note.empty()) doc["note"] = p.note;
  doc["validated"] = p.validated;
  doc["backend"] = to_string(p.backend);
  doc["task_overhead_s"] = p.task_overhead_s;
  doc["compute"] = {{"peak_gflops_f32", p.compute.peak_gflops_f32}, {"peak_gflops_f64", p.compute.peak_gflops_f64},
                    {"peak_gflops_16", p.compute.peak_gflops_16},
                    {"tile_m", p.compute.tile_m}, {"tile_n", p.compute.tile_n}, {"units", p.compute.units},
                    {"efficiency", p.compute.efficiency}, {"memory_GBps", p.compute.memory_GBps},
                    {"launch_s", p.compute.launch_s}, {"measured", points(p.compute.measured)}};
  if (!p.compute.measured_16.empty()) doc["compute"]["measured_16"] = points(p.compute.measured_16);
  // Written where it is not the default, so a profile of its own ranks reads as it always did.
  if (p.compute.sharing != "rank") doc["compute"]["sharing"] = p.compute.sharing;
  doc["network"] = {{"topology", p.network.topology}, {"alpha_s", p.network.alpha_s},
                    {"bandwidth_GBps", p.network.bandwidth_GBps}, {"ranks_per_node", p.network.ranks_per_node},
                    {"inter_alpha_s", p.network.inter_alpha_s}, {"inter_bandwidth_GBps", p.network.inter_bandwidth_GBps},
                    {"nics_per_node", p.network.nics_per_node},
                    {"copy_engines", p.network.copy_engines}, {"allgather", collective_json(p.network.allgather)},
                    {"reduce_scatter", collective_json(p.network.reduce_scatter)},
                    {"allreduce", collective_json(p.network.allreduce)}};
  if (p.network.polled_floor_polls != 0) doc["network"]["polled_floor_polls"] = p.network.polled_floor_polls;
  if (p.network.polled_floor_small_polls != 0)
    doc["network"]["polled_floor_small_polls"] = p.network.polled_floor_small_polls;
  doc["contention"] = {{"gemm_rate_while_comm", p.contention.gemm_rate_while_comm},
                       {"comm_rate_while_gemm", p.contention.comm_rate_while_gemm}};
  if (p.contention.poll_cost_s != 0) doc["contention"]["poll_cost_s"] = p.contention.poll_cost_s;
  doc["sources"] = sources;
  return doc.dump(2) + "\n";
}

std::vector<std::string> builtin_profiles() {
  std::vector<std::string> names;
  for (const auto& dir : {installed_profiles(), source_profiles()}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
    if (!names.empty()) break;
  }
  std::sort(names.begin(), names.end());
  return names;
}

MachineProfile load_profile(const std::string& name_or_path) {
  std::vector<std::filesystem::path> tried;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 &&
                               name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (looks_like_path) tried.push_back(name_or_path);
  else tried = {installed_profiles() / (name_or_path + ".json"), source_profiles() / (name_or_path + ".json")};
  for (const auto& path : tried) {
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    return parse_profile(text.str(), path.string());
  }
  std::string message = "profile " + in_quotes(name_or_path) + " not found (tried";
  for (const auto& path : tried) message += " " + path.string();
  message += ")";
  if (!looks_like_path) {
    message += "; shipped profiles:";
    for (const std::string& n : builtin_profiles()) message += " " + n;
  }
  throw Error(ErrorCode::io, message);
}

namespace {

// A measured table's time for one GEMM. In the column of the table's (n, k) nearest the GEMM's
// (in log n and log k; the first of equals), between the rows of m on either side of its m: their
// times, linear in m. Elsewhere (beyond the column's rows, or a column of one row): the rate of
// the nearest measured shape in log m, log n and log k. A GEMM of few rows reads all of B whatever
// m is, so its time is a fixed cost plus a cost per row, not a rate: a calibration on an Intel
// Xeon (one core a rank, 2026-12-06) took 4x1024x1024 at 18 GFLOP/s and 16x1024x1024 at 55, and
// an 8-row GEMM, equally near both in log m, took whichever came first, 18: a decode-sized gemm_ar
// 16x2048x2048 cut into two 8-row ring blocks was predicted at 3.76 ms and ran in 2.07 (shared
// memory, 2 ranks). Linear in time, 8 rows run at 33. One column, not each row's nearest shape: a
// table of one shape a row (`cofuse profile --quick`) would otherwise mix in a row whose only
// shape is 4-8x off in n and k.
double table_seconds(const std::vector<GemmPoint>& table, double scale, int64_t m, int64_t n, int64_t k) {
  const auto log_distance = [](double a, double b) { return std::pow(std::log2(a / b), 2); };
  const auto nk_distance = [&](const GemmPoint& pt) {
    return log_distance(double(n), double(pt.n)) + log_distance(double(k), double(pt.k));
  };
  const auto seconds_at = [&](const GemmPoint& pt, double rows) {
    return 2.0 * rows * double(n) * double(k) / (pt.gflops * scale * 1e9);
  };
  const GemmPoint* column = &table.front();
  const GemmPoint* shape = &table.front();  // the nearest in all three
  double column_d = nk_distance(*column), shape_d = column_d + log_distance(double(m), double(shape->m));
  for (const GemmPoint& pt : table) {
    const double d = nk_distance(pt);
    if (d < column_d) {
      column_d = d;
      column = &pt;
    }
    if (const double all = d + log_distance(double(m), double(pt.m)); all < shape_d) {
      shape_d = all;
      shape = &pt;
    }
  }
  // The column's rows of m at or below m and at or above it, the nearest of each.
  const GemmPoint* below = nullptr;
  const GemmPoint* above = nullptr;
  for (const GemmPoint& pt : table) {
    if (pt.n != column->n || pt.k != column->k) continue;
    if (pt.m <= m && (!below || pt.m > below->m)) below = &pt;
    if (pt.m >= m && (!above || pt.m < above->m)) above = &pt;
  }
  if (!below || !above) return seconds_at(*shape, double(m));
  if (above->m == below->m) return seconds_at(*below, double(m));
  const double lo = seconds_at(*below, double(below->m)), hi = seconds_at(*above, double(above->m));
  return lo + (hi - lo) * double(m - below->m) / double(above->m - below->m);
}

}  // namespace

double gemm_seconds(const MachineProfile& p, DType dtype, int64_t m, int64_t n, int64_t k) {
  const ComputeModel& c = p.compute;
  if (m <= 0 || n <= 0 || k <= 0) return c.launch_s;  // an empty GEMM costs only its call
  const DtypeRate rate = dtype_rate(c, dtype);
  double compute_s = 0;
  if (rate.table) {
    compute_s = table_seconds(*rate.table, rate.scale, m, n, k);
  } else {
    // Roofline with tile and wave quantisation.
    const double tiles = std::ceil(double(m) / double(c.tile_m)) * std::ceil(double(n) / double(c.tile_n));
    const double waves = std::ceil(tiles / double(c.units));
    const double fill = tiles / (waves * double(c.units));  // the last wave runs part-empty
    // Edge tiles compute padding too: the useful fraction of the tiled area.
    const double padding = (double(m) * double(n)) / (std::ceil(double(m) / double(c.tile_m)) * double(c.tile_m) *
                                                      std::ceil(double(n) / double(c.tile_n)) * double(c.tile_n));
    const double flops = 2.0 * double(m) * double(n) * double(k);
    compute_s = flops / (c.peak_gflops_f32 * rate.scale * c.efficiency * fill * padding * 1e9);
  }
  const double elem = double(dtype_size(dtype));
  const double bytes = elem * (double(m) * double(k) + double(k) * double(n) + double(m) * double(n));
  const double memory_s = bytes / (c.memory_GBps * 1e9);
  // Measured rates were timed as whole calls, so they already include the call's cost.
  return (c.measured.empty() ? c.launch_s : 0.0) + std::max(compute_s, memory_s);
}

std::string gemm_rate_basis(const MachineProfile& p, DType dtype) {
  const ComputeModel& c = p.compute;
  const DtypeRate r = dtype_rate(c, dtype);
  // "datasheet", "measured", "estimate (unconfirmed)": a source's kind, not its whole text.
  auto kind = [&](const std::string& field) {
    const auto it = p.sources.find(field);
    if (it == p.sources.end()) return std::string();
    return it->second.substr(0, it->second.find(':'));
  };
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << to_string(dtype) << " at ";
  if (r.as_f32) o << "the f32 rate, ";
  if (c.measured.empty()) {
    const double gflops = c.peak_gflops_f32 * r.scale;
    if (gflops >= 1000) o << gflops / 1000 << " TFLOP/s";
    else o << gflops << " GFLOP/s";
    o << " peak per rank";
  } else {
    o << "the measured shapes' "
      << (r.table == &c.measured_16 ? "16-bit rates" : r.scale == 1 ? "rates" : "f32 rates");
    if (r.scale != 1) o << std::setprecision(3) << " x " << r.scale;
    o << ", time linear in m between them";
  }
  const std::string field = r.table == &c.measured && r.scale == 1 ? "compute.measured" : r.field;
  const std::string why = kind(r.as_f32 ? "compute.peak_gflops_16" : field);
  if (r.as_f32) o << ": the profile has no 16-bit rate (compute.peak_gflops_16 = 0";
  else o << " (" << field;
  if (!why.empty()) o << ": " << why;
  o << ")";
  return o.str();
}

}  // namespace cofuse
