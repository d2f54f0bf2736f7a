// The files calibration keeps (include/cofuse/model/calibrate.hpp): what a calibration and a compute
// table look like on disk, and how a file is judged before it is trusted. No MPI: calibrate.cpp
// decides with the other ranks what to do with what these functions read.
#pragma once

#include <optional>
#include <string>

#include "cofuse/model/calibrate.hpp"
#include "measure/profile_measure.hpp"

namespace cofuse::measure {

// /2 since 2026-12-05: contention measured on every rank at once. A /1 file is foreign, so a
// kept calibration whose contention came from ranks 0 and 1 alone is measured again once.
// /3, the same day: the GEMM table sampled in 12 ms, not 2, where ranks outnumber the cores.
// /4, the same day: four ranks or more on one level detect a shared medium by two pairs one way
// at once (a /3 file may hold a switch read as a shared medium).
// /5, 2026-12-06: the bandwidth from one way, the slower of alone and in a train (Timed::primed), on
// a switch too (a /4 file holds a shaped link's burst, 10% fast, or the exchange's median, half).
// /6, 2026-12-06: a collective's line bends at 2 MiB where 8 MiB ran more than 10% off it (a /5 file
// has one line, through 256 KiB and 2 MiB, that puts 8 MiB over shared memory at half its time),
// and a polled message's latency (network.polled_wait_polls) is measured.
// /7, 2026-12-06: a polled message's least time (network.polled_floor_polls, 128 KiB polled, and
// network.polled_floor_small_polls, 16 KiB) in place of a wait added to every message (512 KiB
// polled less blocking: over a 2 Gbit/s link it charged 0.36 ms to messages whose polled
// transfer took no longer than a blocking one).
inline constexpr const char* kCalibrationSchema = "cofuse.calibration/7";
inline constexpr const char* kComputeTableSchema = "cofuse.compute-table/1";
/// A calibration older than this is measured again: machines change (a BIOS setting, a driver,
/// a new BLAS) without their names changing.
inline constexpr double kCalibrationMaxAgeDays = 30;

/// A short stable name of a text (FNV-1a, 64 bits, 16 hex digits): file names of signatures.
std::string text_hash(const std::string& text);

/// A file's whole text, or "" when it is missing or unreadable; a file over 16 MiB (no
/// calibration is near that) reads as "{" so it is judged corrupt, not sent to every rank.
std::string read_text(const std::string& path);

/// The text a calibration is kept as (schema kCalibrationSchema): the signature, the quick
/// check, when and how long, the profile.
std::string calibration_text(const Calibration& c);

/// A calibration file judged: the calibration when it can be trusted for `signature` (its
/// from_cache, check and timing fields as kept), else nullopt and why, in words: "corrupt
/// (...)", "foreign (...)" or "stale (...)". check_GBps: this process's quick check, which may
/// differ from the file's by `tolerance` (a fraction).
struct JudgedCalibration {
  std::optional<Calibration> calibration;
  std::string problem;
  bool check_disagrees = false;  // the only problem is the quick check (worth a second look)
};
JudgedCalibration judge_calibration(const std::string& text, const std::string& path, const std::string& signature,
                                    double check_GBps, double tolerance);

/// Whether a quick check of check_GBps agrees with the file's: the larger over the smaller is at
/// most 1 + tolerance. A file kept without a link (one rank, 0) agrees with anything.
bool check_agrees(double check_GBps, double kept_GBps, double tolerance);

/// Whether ranks on `host_count` hosts, told `transport` (the OMPI_MCA_* settings as the
/// signature writes them, "default" for none), talk through shared memory: one host, no TCP.
bool shared_memory_transport(std::size_t host_count, const std::string& transport);

/// The tolerance a quick check is judged with (check_agrees): `asked`, but at least 2 (a factor 3
/// either way) over shared memory, where nothing but the cores' load moves the check (3.2 to 6.1
/// GB/s in six idle processes in a row at 2 ranks, 2026-12-04: half of them measured again
/// under 25%); a network can change under one signature (a link reshaped), so there `asked` holds.
double check_tolerance(bool shared_memory, double asked);

/// The compute table's text (schema kComputeTableSchema) under `key` (CPU, BLAS, threads, ranks
/// per host), and back: nullopt and why for a file that is corrupt or made for another key.
std::string compute_table_text(const ComputeResult& r, const std::string& key);
std::optional<ComputeResult> parse_compute_table(const std::string& text, const std::string& key, std::string* problem);

}  // namespace cofuse::measure
