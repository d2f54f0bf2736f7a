// The record of a `cofuse bench` run: where it ran (machine, link, versions), how one record
// looks on disk (JSON Lines), and its flat CSV form. Schema: docs/benchmarks.md.
#pragma once

#include <mpi.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cofuse::cli {

/// Identifies the record layout; bumped when a field changes meaning.
inline constexpr const char* kRecordSchema = "cofuse.bench.record/1";

/// The link between ranks 0 and 1, measured by a ping-pong of MPI point-to-point messages.
struct LinkProbe {
  std::string description;  // what the user says the link is (--link, or $COFUSE_LINK)
  bool measured = false;    // false with one rank
  double bytes = 0;         // message size of the bandwidth probe
  double gbit_per_s = 0;    // one direction, bytes * 8 / (round trip / 2)
  double latency_us = 0;    // half the round trip of an 8-byte message
};

/// Collective over comm: measures the link (ranks 0 and 1; every rank gets the result).
LinkProbe probe_link(MPI_Comm comm, const std::string& description);

/// Collective over comm: CPU model, online cores, host names of the ranks, BLAS threads, link.
nlohmann::ordered_json machine_json(MPI_Comm comm, const LinkProbe& link);

/// cofuse version and git revision, compiler, MPI library, BLAS.
nlohmann::ordered_json versions_json();

/// Reads a JSON Lines file of records. Blank lines are skipped. Throws cofuse::Error: io when
/// the file cannot be read, invalid_argument naming FILE:LINE for a line that is not a JSON
/// object or not a cofuse bench record.
std::vector<nlohmann::ordered_json> read_records(const std::string& path);

/// One CSV row per record: a header of every leaf field ("times_ms.total.median", ...), in
/// first-seen order, then the values; strings quoted where needed; a missing field is empty.
void write_csv(std::ostream& out, const std::vector<nlohmann::ordered_json>& records);

}  // namespace cofuse::cli
