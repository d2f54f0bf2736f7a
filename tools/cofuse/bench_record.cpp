#include "bench_record.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cofuse/build_info.hpp"
#include "cofuse/status.hpp"
#include "text.hpp"

namespace cofuse::cli {

using json = nlohmann::ordered_json;

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

// Median round trip of `reps` ping-pongs of `bytes` between ranks 0 and 1 (seen by rank 0).
double round_trip(MPI_Comm comm, int rank, std::vector<char>& buffer, int bytes, int reps) {
  std::vector<double> trips;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(comm);
    const double start = steady_seconds();
    if (rank == 0) {
      MPI_Send(buffer.data(), bytes, MPI_BYTE, 1, 0, comm);
      MPI_Recv(buffer.data(), bytes, MPI_BYTE, 1, 0, comm, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buffer.data(), bytes, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), bytes, MPI_BYTE, 0, 0, comm);
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
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2) return probe;
  constexpr int kBytes = 4 << 20;
  std::vector<char> buffer(kBytes, 1);
  round_trip(comm, rank, buffer, kBytes, 1);  // connect and fault the pages in
  double result[2] = {round_trip(comm, rank, buffer, 8, 21), round_trip(comm, rank, buffer, kBytes, 5)};
  MPI_Bcast(result, 2, MPI_DOUBLE, 0, comm);
  probe.measured = true;
  probe.bytes = kBytes;
  probe.latency_us = result[0] / 2 * 1e6;
  probe.gbit_per_s = kBytes * 8.0 / (result[1] / 2) * 1e-9;
  return probe;
}

json machine_json(MPI_Comm comm, const LinkProbe& link) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::set<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.insert(std::string(names.data() + std::size_t(r) * MPI_MAX_PROCESSOR_NAME));
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  json out = {{"cpu_model", cpu_model()},
              {"cores_online", sysconf(_SC_NPROCESSORS_ONLN)},
              {"hosts", std::vector<std::string>(hosts.begin(), hosts.end())},
              {"openblas_num_threads", blas_threads ? blas_threads : "unset"},
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

}  // namespace cofuse::cli
