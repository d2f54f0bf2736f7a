// The records of the measurements: where a run ran (machine, link, versions), one `cofuse bench`
// record per measured variant (JSON Lines on disk, schema in docs/benchmarks.md) and its flat CSV
// form, and the line `cofuse run --schedules --json` prints per schedule.
#pragma once

#include <mpi.h>

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "measure/bench_measure.hpp"
#include "measure/bench_sweep.hpp"

namespace cofuse::measure {

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

/// What every record of one bench run shares.
struct RecordContext {
  nlohmann::ordered_json machine;   // machine_json()
  nlohmann::ordered_json versions;  // versions_json()
  nlohmann::ordered_json run;       // the run's settings: started, command, seed, iters, ...
};

/// The record of variant v of case number `index` (from 0): the case, the variant's times, the
/// case's baselines and the metrics derived from them, so a line of the file stands on its own.
nlohmann::ordered_json case_record(const RecordContext& ctx, const BenchCase& c, int index, const CaseResult& r,
                                   const VariantResult& v);

/// The layer of a transformer block an op is (text kept in records).
std::string layer_of(const OpDesc& d);

/// `cofuse run --schedules --json`: one schedule's line (times in ms, speedup, overlap
/// efficiency, error).
nlohmann::json against_serial_json(const OpDesc& d, const AgainstSerial& r, uint64_t seed);

/// {"median", "min", "max"} in milliseconds.
nlohmann::ordered_json summary_ms(const Summary& s);

/// The op's collective and its rates, as every timed-op writer spells them (bench records and
/// `cofuse run --json`): collective, bytes, algbw_GBps and busbw_GBps (nccl-tests conventions,
/// comm_size) over comm_s seconds of communication alone (<= 0: rates 0), busbw_factor.
nlohmann::ordered_json comm_json(const OpDesc& d, double comm_s);

/// A reference check's verdict, as every timed-op writer spells it: rel_error, tolerance,
/// worst_rank, gathered_ok, passed.
nlohmann::ordered_json check_json(const CheckResult& check);

/// Reads a JSON Lines file of records. Blank lines are skipped. Throws cofuse::Error: io when
/// the file cannot be read, invalid_argument naming FILE:LINE for a line that is not a JSON
/// object or not a cofuse bench record.
std::vector<nlohmann::ordered_json> read_records(const std::string& path);

/// One CSV row per record: a header of every leaf field ("times_ms.total.median", ...), in
/// first-seen order, then the values; strings quoted where needed; a missing field is empty.
void write_csv(std::ostream& out, const std::vector<nlohmann::ordered_json>& records);

}  // namespace cofuse::measure
