#include "tune/calibration_cache.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cofuse/build_info.hpp"
#include "cofuse/status.hpp"

namespace cofuse::measure {

namespace {

using json = nlohmann::ordered_json;

// Seconds since the epoch of an ISO 8601 UTC time as utc_now() writes it; nullopt otherwise.
std::optional<double> epoch_seconds(const std::string& iso) {
  std::tm tm{};
  std::istringstream in(iso);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  if (in.fail()) return std::nullopt;
  return double(timegm(&tm));
}

std::string percent(double fraction) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(0) << fraction * 100 << "%";
  return o.str();
}

}  // namespace

std::string text_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::ostringstream o;
  o << std::hex << std::setw(16) << std::setfill('0') << h;
  return o.str();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  if (in.tellg() > std::streamoff(16 << 20)) return "{";
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string calibration_text(const Calibration& c) {
  const BuildInfo info = build_info();
  const json out = {{"schema", kCalibrationSchema},
                    {"signature", c.signature},
                    {"check_GBps", c.cached_check_GBps},
                    {"measured_at", c.measured_at},
                    {"measure_s", c.measure_s},
                    {"rest_s", c.rest_s},
                    {"table_s", c.table_s},
                    {"cofuse", info.version + " (git " + info.git_revision + ")"},
                    {"profile", json::parse(to_json(c.profile))}};
  return out.dump(2) + "\n";
}

bool check_agrees(double check_GBps, double kept_GBps, double tolerance) {
  // As a ratio either way: a link twice as fast and one twice as slow are equally another link.
  if (kept_GBps <= 0) return true;
  if (check_GBps <= 0) return false;
  return std::max(check_GBps / kept_GBps, kept_GBps / check_GBps) - 1 <= tolerance;
}

bool shared_memory_transport(std::size_t host_count, const std::string& transport) {
  return host_count == 1 && transport.find("tcp") == std::string::npos;
}

double check_tolerance(bool shared_memory, double asked) { return shared_memory ? std::max(asked, 2.0) : asked; }

JudgedCalibration judge_calibration(const std::string& text, const std::string& path, const std::string& signature,
                                    double check_GBps, double tolerance) {
  JudgedCalibration out;
  if (text.empty()) {
    out.problem = "none kept";
    return out;
  }
  Calibration c;
  try {
    const json j = json::parse(text);
    if (!j.is_object() || j.value("schema", "") != kCalibrationSchema) {
      out.problem = "foreign (" + path + " is not a " + kCalibrationSchema + " file)";
      return out;
    }
    c.signature = j.at("signature").get<std::string>();
    c.cached_check_GBps = j.at("check_GBps").get<double>();
    c.measured_at = j.at("measured_at").get<std::string>();
    c.measure_s = j.at("measure_s").get<double>();
    // Files kept before 2026-12-04 lack the parts: 0, "not known".
    c.rest_s = j.value("rest_s", 0.0);
    c.table_s = j.value("table_s", 0.0);
    c.profile = parse_profile(j.at("profile").dump(), path);
    throw_if_error(c.profile.validate());
  } catch (const std::exception& e) {
    out.problem = "corrupt (" + path + ": " + e.what() + ")";
    return out;
  }
  if (c.signature != signature) {
    out.problem = "foreign (" + path + " was measured for " + c.signature + ", this job is " + signature + ")";
    return out;
  }
  // Measured where bf16 GEMMs run (a 16-bit rate) but before they were measured shape by shape:
  // its bf16 GEMMs would be timed by one n^3 ratio.
  if (c.profile.compute.peak_gflops_16 > 0 && c.profile.compute.measured_16.empty()) {
    out.problem = "stale (" + path + " was kept before bf16 GEMMs were measured shape by shape)";
    return out;
  }
  // Measured before the table went down to one row: decode-sized pieces would take m = 16's rate.
  if (std::none_of(c.profile.compute.measured.begin(), c.profile.compute.measured.end(),
                   [](const GemmPoint& g) { return g.m == 1; })) {
    out.problem = "stale (" + path + " was kept before GEMMs of one row were measured)";
    return out;
  }
  const std::optional<double> measured = epoch_seconds(c.measured_at);
  const double age_days = measured ? (double(std::time(nullptr)) - *measured) / 86400 : 1e9;
  if (!measured || age_days > kCalibrationMaxAgeDays || age_days < -1) {
    out.problem = "stale (" + path + " was measured at '" + c.measured_at + "', more than " +
                  std::to_string(int(kCalibrationMaxAgeDays)) + " days ago or at no valid time)";
    return out;
  }
  if (!check_agrees(check_GBps, c.cached_check_GBps, tolerance)) {
    std::ostringstream why;
    why << std::setprecision(3) << "stale (the quick check gives " << check_GBps << " GB/s, the file's was "
        << c.cached_check_GBps << " GB/s: more than " << percent(tolerance) << " apart, another link)";
    out.problem = why.str();
    out.check_disagrees = true;
    return out;
  }
  c.from_cache = true;
  c.check_GBps = check_GBps;
  c.cache_file = path;
  out.calibration = std::move(c);
  return out;
}

std::string compute_table_text(const ComputeResult& r, const std::string& key) {
  auto points = [](const std::vector<GemmPoint>& table) {
    json out = json::array();
    for (const GemmPoint& p : table) out.push_back({p.m, p.n, p.k, p.gflops});
    return out;
  };
  const json out = {{"schema", kComputeTableSchema}, {"key", key}, {"grid", points(r.grid)}, {"grid_16", points(r.grid_16)},
                    {"dgemm_n", r.dgemm_n},          {"dgemm_gflops", r.dgemm_gflops}, {"bf16_gflops", r.bf16_gflops},
                    {"copy_mib", r.copy_mib},
                    {"copy_GBps", r.copy_GBps},      {"blas_call_s", r.blas_call_s},   {"passes", r.passes},
                    {"max_flops", r.max_flops},
                    {"sample_s", r.sample_s},
                    {"sharing", {r.sharing.ranks, r.sharing.cpus, r.sharing.blas_threads}}};
  return out.dump(1) + "\n";
}

std::optional<ComputeResult> parse_compute_table(const std::string& text, const std::string& key, std::string* problem) {
  if (text.empty()) {
    *problem = "none kept";
    return std::nullopt;
  }
  try {
    const json j = json::parse(text);
    if (!j.is_object() || j.value("schema", "") != kComputeTableSchema) {
      *problem = std::string("foreign (not a ") + kComputeTableSchema + " file)";
      return std::nullopt;
    }
    if (j.at("key").get<std::string>() != key) {
      *problem = "foreign (measured for " + j.at("key").get<std::string>() + ")";
      return std::nullopt;
    }
    if (!j.contains("bf16_gflops") || !j.contains("grid_16")) {  // a CPU without bf16 GEMMs keeps both, empty and 0
      *problem = "kept before bf16 GEMMs were measured shape by shape";
      return std::nullopt;
    }
    if (!j.contains("sample_s") || !j.contains("sharing")) {
      *problem = "kept before samples were sized by how ranks share the cores";
      return std::nullopt;
    }
    ComputeResult r;
    for (auto [name, table] : {std::pair{"grid", &r.grid}, {"grid_16", &r.grid_16}})
      for (const json& p : j.at(name)) {
        const GemmPoint g{p.at(0).get<int64_t>(), p.at(1).get<int64_t>(), p.at(2).get<int64_t>(), p.at(3).get<double>()};
        if (g.m < 1 || g.n < 1 || g.k < 1 || !(g.gflops > 0) || !std::isfinite(g.gflops))
          throw Error(ErrorCode::invalid_argument, "a GEMM rate that is not positive");
        table->push_back(g);
      }
    r.dgemm_n = j.at("dgemm_n").get<int>();
    r.dgemm_gflops = j.at("dgemm_gflops").get<double>();
    r.bf16_gflops = j.at("bf16_gflops").get<double>();
    r.copy_mib = j.at("copy_mib").get<int>();
    r.copy_GBps = j.at("copy_GBps").get<double>();
    r.blas_call_s = j.at("blas_call_s").get<double>();
    r.passes = j.at("passes").get<int>();
    r.max_flops = j.at("max_flops").get<double>();
    r.sample_s = j.at("sample_s").get<double>();
    // Counts as integers in 1..2^20 (no cast of a huge or fractional number), a sample under 1 s.
    const json& sharing = j.at("sharing");
    int counts[3] = {};
    for (int i = 0; i < 3; ++i) {
      const json& v = sharing.at(std::size_t(i));
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 20))
        throw Error(ErrorCode::invalid_argument, "a core count that is not an integer in 1..2^20");
      counts[i] = int(v.get<int64_t>());
    }
    r.sharing = {counts[0], counts[1], counts[2]};
    if (!(r.sample_s > 0 && r.sample_s < 1))
      throw Error(ErrorCode::invalid_argument, "a sample length that is not in (0, 1) s");
    if (std::none_of(r.grid.begin(), r.grid.end(), [](const GemmPoint& g) { return g.m == 1; })) {
      *problem = "kept before GEMMs of one row were measured";
      return std::nullopt;
    }
    const bool bf16 = !r.grid_16.empty();  // measured where oneDNN multiplies bf16
    if (r.grid.empty() || (bf16 && r.grid_16.size() != r.grid.size()) || !(r.dgemm_gflops > 0) ||
        (bf16 ? !(r.bf16_gflops > 0) : r.bf16_gflops != 0) || !(r.copy_GBps > 0) || !(r.blas_call_s >= 0))
      throw Error(ErrorCode::invalid_argument, "empty table or a rate that is not positive");
    return r;
  } catch (const std::exception& e) {
    *problem = std::string("corrupt (") + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace cofuse::measure
