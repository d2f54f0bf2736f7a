#include "measure/bench_record.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cofuse/build_info.hpp"
#include "core/exec_model/times.hpp"
#include "cofuse/status.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/op_data.hpp"
#include "measure/text.hpp"

namespace cofuse::measure {

using json = nlohmann::ordered_json;

namespace {

// The model name, with the family and model numbers: a VM's name can be as bare as "AMD EPYC"
// for a Zen 3 and a Zen 5 alike, and records, calibrations and the GEMM table are kept per CPU.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&line] {
    const auto colon = line.find(':');
    const auto start = colon == std::string::npos ? std::string::npos : line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  };
  // The first processor's entry (the keys repeat per processor); "model" alone, not "model name".
  auto key = [&line](std::string_view k) {
    return line.rfind(k, 0) == 0 && line.find_first_not_of(" \t", k.size()) == line.find(':');
  };
  while (std::getline(in, line)) {
    if (name.empty() && key("model name")) name = value();
    if (family.empty() && key("cpu family")) family = value();
    if (model.empty() && key("model")) model = value();
  }
  if (name.empty()) return "unknown";
  return family.empty() || model.empty() ? name : name + " (family " + family + ", model " + model + ")";
}

// Median round trip of `reps` ping-pongs of `bytes` between ranks 0 and 1 (seen by rank 0).
double round_trip(MPI_Comm comm, int rank, std::vector<char>& buffer, int bytes, int reps) {
  std::vector<double> trips;
  for (int i = 0; i < reps; ++i) {
    detail::mpi_check(MPI_Barrier(comm), "MPI_Barrier");
    const double start = steady_seconds();
    if (rank == 0) {
      detail::mpi_check(MPI_Send(buffer.data(), bytes, MPI_BYTE, 1, 0, comm), "MPI_Send");
      detail::mpi_check(MPI_Recv(buffer.data(), bytes, MPI_BYTE, 1, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
    } else if (rank == 1) {
      detail::mpi_check(MPI_Recv(buffer.data(), bytes, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      detail::mpi_check(MPI_Send(buffer.data(), bytes, MPI_BYTE, 0, 0, comm), "MPI_Send");
    }
    trips.push_back(steady_seconds() - start);
  }
  std::sort(trips.begin(), trips.end());
  return trips[trips.size() / 2];
}

}  // namespace

LinkProbe probe_link(MPI_Comm comm, const std::string& description) {
  LinkProbe probe;
  probe.description = description;
  const int rank = detail::comm_rank(comm), size = detail::comm_size(comm);
  if (size < 2) return probe;
  constexpr int kBytes = 4 << 20;
  std::vector<char> buffer(kBytes, 1);
  round_trip(comm, rank, buffer, kBytes, 1);  // connect and fault the pages in
  double result[2] = {round_trip(comm, rank, buffer, 8, 21), round_trip(comm, rank, buffer, kBytes, 5)};
  detail::mpi_check(MPI_Bcast(result, 2, MPI_DOUBLE, 0, comm), "MPI_Bcast");
  probe.measured = true;
  probe.bytes = kBytes;
  probe.latency_us = result[0] / 2 * 1e6;
  probe.gbit_per_s = kBytes * 8.0 / (result[1] / 2) * 1e-9;
  return probe;
}

json machine_json(MPI_Comm comm, const LinkProbe& link) {
  const int size = detail::comm_size(comm);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  detail::mpi_check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  detail::mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
                    "MPI_Allgather");
  std::set<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.insert(std::string(names.data() + std::size_t(r) * MPI_MAX_PROCESSOR_NAME));
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  const char* omp_threads = std::getenv("OMP_NUM_THREADS");  // oneDNN's (bf16 GEMMs)
  json out = {{"cpu_model", cpu_model()},
              {"cores_online", sysconf(_SC_NPROCESSORS_ONLN)},
              {"hosts", std::vector<std::string>(hosts.begin(), hosts.end())},
              {"openblas_num_threads", blas_threads ? blas_threads : "unset"},
              {"omp_num_threads", omp_threads ? omp_threads : "unset"},
              {"bf16_gemm", build_info().bf16_gemm},
              {"vector_level", build_info().vector_level},
              {"link", {{"description", link.description}, {"measured", link.measured}}}};
  if (link.measured) {
    out["link"]["probe_bytes"] = link.bytes;
    out["link"]["gbit_per_s"] = link.gbit_per_s;
    out["link"]["latency_us"] = link.latency_us;
    out["link"]["probe"] = "MPI_Send/MPI_Recv ping-pong between ranks 0 and 1, median round trip / 2";
  }
  return out;
}

json versions_json() {
  const BuildInfo info = build_info();
  return {{"cofuse", info.version}, {"git_revision", info.git_revision}, {"compiler", info.compiler},
          {"mpi", info.mpi}, {"blas", info.blas}};
}

std::vector<json> read_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io, path + ": cannot be read");
  std::vector<json> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {
      throw Error(ErrorCode::invalid_argument, where + ": not a JSON object (" + std::string(e.what()) + ")");
    }
    if (!record.is_object() || record.value("schema", "") != kRecordSchema)
      throw Error(ErrorCode::invalid_argument,
                  where + ": not a cofuse bench record (expected \"schema\": \"" + kRecordSchema + "\")");
    out.push_back(std::move(record));
  }
  return out;
}

namespace {

void flatten(const json& value, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  if (value.is_object()) {
    for (const auto& [key, v] : value.items()) flatten(v, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out.emplace_back(prefix, value);
  }
}

std::string csv_cell(const json& value) {
  if (value.is_null()) return "";
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

void write_csv(std::ostream& out, const std::vector<json>& records) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  std::vector<std::vector<std::pair<std::string, json>>> rows;
  for (const json& r : records) {
    rows.emplace_back();
    flatten(r, "", rows.back());
    for (const auto& [key, v] : rows.back())
      if (seen.insert(key).second) columns.push_back(key);
  }
  for (std::size_t i = 0; i < columns.size(); ++i) out << (i ? "," : "") << csv_cell(columns[i]);
  out << "\n";
  for (const auto& row : rows) {
    std::map<std::string, const json*> cells;
    for (const auto& [key, v] : row) cells[key] = &v;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const auto it = cells.find(columns[i]);
      out << (i ? "," : "") << (it == cells.end() ? "" : csv_cell(*it->second));
    }
    out << "\n";
  }
}

json summary_ms(const Summary& s) { return {{"median", s.median * 1e3}, {"min", s.min * 1e3}, {"max", s.max * 1e3}}; }

json comm_json(const OpDesc& d, double comm_s) {
  const CommSize cs = comm_size(d);
  const double algbw = comm_s > 0 ? cs.bytes / comm_s * 1e-9 : 0;
  return {{"collective", cs.collective}, {"bytes", cs.bytes}, {"algbw_GBps", algbw},
          {"busbw_GBps", algbw * cs.busbw_factor}, {"busbw_factor", cs.factor_text}};
}

json check_json(const CheckResult& check) {
  return {{"rel_error", check.rel_error}, {"tolerance", check.tolerance}, {"worst_rank", check.worst_rank},
          {"gathered_ok", check.gathered_ok}, {"passed", check.passed()}};
}

std::string layer_of(const OpDesc& d) {
  switch (d.op) {
    case OpKind::ag_gemm:
      return d.axis == Axis::m ? "column-parallel linear, forward (sequence-parallel input gathered)"
                               : "column-parallel linear, weight gradient (activations gathered over K)";
    case OpKind::gemm_rs: return "row-parallel linear, forward, sequence parallel (output reduce-scattered)";
    case OpKind::gemm_ar: return "row-parallel linear, forward (output all-reduced)";
  }
  return "";
}

json case_record(const RecordContext& ctx, const BenchCase& c, int index, const CaseResult& r, const VariantResult& v) {
  const OpDesc& d = r.desc;
  const double G = r.gemm_alone.median, M = r.comm_alone.median, T = v.total.median;
  const double Mbest = r.best_unfused_comm_s();
  json metrics = {
      // The honest comparison first: the fastest unfused call (library collective, cofuse's ring,
      // or an unfused schedule asked for), and the longer of G and the fastest communication alone.
      {"speedup_vs_best_unfused", r.best_unfused().total.median / T},
      {"efficiency_vs_best_unfused", std::max(G, Mbest) / T},
      {"ideal_best_unfused_ms", std::max(G, Mbest) * 1e3},
      {"speedup_vs_serial", r.serial().total.median / T},
      {"speedup_vs_naive", r.naive().total.median / T},
      {"overlap_efficiency", std::max(G, M) / T},
      {"ideal_ms", std::max(G, M) * 1e3},
      {"serial_sum_ms", (G + M) * 1e3},
      {"gemm_in_run_ms", v.gemm.median * 1e3},
      {"exposed_ms", detail::exposed_seconds(T, v.gemm.median) * 1e3},  // the one definition
  };
  if (v.chunks_alone_s) {
    metrics["gemm_pieces_alone_ms"] = *v.chunks_alone_s * 1e3;
    metrics["dil_ms"] = (*v.chunks_alone_s - r.gemm_alone_dil_s) * 1e3;
    metrics["cil_ms"] = (v.gemm.median - *v.chunks_alone_s) * 1e3;
  } else {
    metrics["dil_ms"] = nullptr;
    metrics["cil_ms"] = nullptr;
  }
  if (v.comm_alone_s) {
    metrics["own_comm_alone_ms"] = *v.comm_alone_s * 1e3;
    metrics["own_overlap_efficiency"] = std::max(G, *v.comm_alone_s) / T;
    metrics["own_comm_cpu_ms"] = *v.comm_alone_cpu_s * 1e3;
  } else {
    metrics["own_comm_alone_ms"] = nullptr;
    metrics["own_overlap_efficiency"] = nullptr;
    metrics["own_comm_cpu_ms"] = nullptr;
  }
  return {
      {"schema", kRecordSchema},
      {"run", ctx.run},
      {"case", {{"index", index}, {"label", c.label}, {"op", to_string(d.op)}, {"m", d.m}, {"n", d.n}, {"k", d.k},
                {"dtype", to_string(d.dtype)}, {"axis", to_string(d.axis)}, {"trans_a", d.trans_a},
                {"trans_b", d.trans_b}, {"ranks", d.ranks}, {"layer", layer_of(d)}, {"flops", d.flops()},
                {"seed", r.seed}}},
      {"variant", v.kind},
      {"schedule", v.schedule},
      {"schedule_name", v.name},
      {"times_ms", {{"total", summary_ms(v.total)}, {"gemm", summary_ms(v.gemm)},
                    {"comm", v.kind == "naive" ? json(nullptr) : summary_ms(v.comm)}}},
      {"baselines_ms", {{"gemm_alone", summary_ms(r.gemm_alone)}, {"comm_alone", summary_ms(r.comm_alone)},
                        {"comm_alone_cpu", r.comm_alone_cpu_s * 1e3},
                        {"serial", summary_ms(r.serial().total)}, {"naive", summary_ms(r.naive().total)},
                        {"comm_alone_p2p", summary_ms(r.comm_alone_p2p)}, {"serial_ring", summary_ms(r.serial_ring().total)},
                        {"best_unfused", r.best_unfused().name}}},
      {"metrics", metrics},
      {"comm", comm_json(d, M)},
      {"workspace_bytes", v.workspace_bytes},
      {"error", check_json(v.check)},
      {"trace", v.trace_file.empty() ? json(nullptr) : json(v.trace_file)},
      {"machine", ctx.machine},
      {"versions", ctx.versions},
  };
}

nlohmann::json against_serial_json(const OpDesc& d, const AgainstSerial& r, uint64_t seed) {
  const VariantResult& s = r.schedule;
  return {{"op", d.to_string()}, {"schedule", s.schedule}, {"schedule_name", s.name},
          {"median_ms", s.total.median * 1e3}, {"serial_ms", r.serial.total.median * 1e3},
          {"gemm_alone_ms", r.serial.gemm.median * 1e3}, {"comm_alone_ms", r.serial.comm.median * 1e3},
          {"speedup", r.speedup()}, {"overlap_efficiency", r.overlap_efficiency()},
          {"rel_error", s.check.rel_error}, {"passed", s.check.passed()}, {"seed", seed}};
}

}  // namespace cofuse::measure
