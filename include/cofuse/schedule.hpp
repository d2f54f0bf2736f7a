// How an op is run: one point in the schedule design space, as a plain value.
//
//   field    values                   meaning
//   overlap  none | shard | chunk     none: the unfused baseline (whole GEMM, whole communication,
//                                     one after the other; algo says how the data moves: a
//                                     library collective, or cofuse's own ring / direct exchange).
//                                     shard: one step per peer shard (ring / direct exchange).
//                                     chunk: every shard (or output block) cut into `chunks` pieces.
//   chunks   1..65536                 pieces per shard (ag_gemm) or per output block (gemm_rs/ar)
//   split    1d | 2d                  1d: a piece is a range of rows; 2d: a tile (rows x column
//                                     range), i.e. strided memory
//   data     uniform | hetero         uniform: strided pieces are packed into contiguous staging
//                                     before they move (and unpacked after); hetero: they move
//                                     straight from/to strided memory (MPI derived datatypes)
//   fusion   unfused | fused          unfused: GEMM and communication on separate engines;
//                                     fused: one thread interleaves GEMM tiles with MPI progress
//   engine   thread | inline | ce | sm   what drives communication (Schedule::driver): a
//                                     progress thread (unfused), the compute thread itself
//                                     between GEMM tiles (fused); ce / sm: GPU copy engines or
//                                     SM copy kernels
//   algo     coll | ring | direct     coll: a library collective per piece; ring: point-to-point
//                                     ring, reduce / forward per step; direct: every piece
//                                     straight to its destination, start staggered by rank
//   topo     flat | 2level            flat: one ring (or exchange) over all P ranks, every link
//                                     alike; 2level: ranks in hosts of host_ranks consecutive
//                                     ranks: a ring inside each host (shared memory) and direct
//                                     messages between hosts, each rank to the rank with its
//                                     local index on every other host (needs algo=ring)
//   host_ranks 0 | R                  2level only: ranks per host, dividing P; 0 (the default)
//                                     is "this machine's": Operation takes it from MPI
//                                     (detail::host_layout), the simulator and the planner from
//                                     the profile (with_host_ranks). A wrong R still computes the
//                                     right answer, only over slower links
//   wire     op | f32                 how partial sums of gemm_rs / gemm_ar travel and are kept
//                                     op: in the op's dtype, each sum rounded to it on the way;
//                                     f32 (bf16 ops, CPU executor): in f32 (a second workspace),
//                                     so a block's whole sum is rounded once, when it lands in C
//                                     (twice the bytes). ag_gemm and the all-gather half of
//                                     gemm_ar move no partial sums; other dtypes have only op
//
// String form (parses and prints round-trip), fields in this order:
//   overlap=chunk,chunks=4,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring
// followed by ",topo=2level" (and ",host_ranks=R" when R is set) for two-level schedules only,
// then ",wire=f32" where partial sums travel in f32: the schedules that existed before these
// fields print as they did, so stored strings keep their meaning.
// A preset name may stand for all fields, optionally followed by overrides:
//   "hetero-unfused-1d", "hetero-unfused-1d,chunks=8".
//
// "Engine" in cofuse means one of a plan's two execution resources (EngineId: compute, comm).
// The field that says what drives the comm engine is therefore `driver` (enum CommDriver) in
// C++. Its text key stays `engine=`, printed and parsed, with `driver=` accepted as a synonym:
// schedule strings live in tuning databases, bench records, planner caches, test lists and
// docs, and a printed `driver=` would not parse in an older build.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cofuse/op_desc.hpp"
#include "cofuse/status.hpp"

namespace cofuse {

enum class Overlap { none, shard, chunk };
enum class Split { d1, d2 };
enum class DataMode { uniform, hetero };
enum class Fusion { unfused, fused };
/// What drives a plan's communication engine (text key `engine`, see above).
enum class CommDriver {
  thread,   // a progress thread of its own, next to the compute thread (CPU, fusion=unfused)
  inline_,  // the compute thread, between GEMM tiles (CPU, fusion=fused); printed "inline"
  ce,       // GPU copy engines (cudaMemcpyAsync on a communication stream)
  sm,       // GPU SMs: copy kernels, or NCCL between processes
};
/// The enum's name before CommDriver (Schedule::engine is now Schedule::driver).
using Engine [[deprecated("use CommDriver (and Schedule::driver)")]] = CommDriver;
enum class Algo { coll, ring, direct };
/// The schedule's view of where ranks sit: all alike (flat), or hosts of host_ranks ranks.
enum class Topo { flat, two_level };  // printed "flat", "2level"
/// The element type partial sums travel and are summed in: the op's, or f32.
enum class Wire { op, f32 };

struct Schedule {
  Overlap overlap = Overlap::none;
  int chunks = 1;
  Split split = Split::d1;
  DataMode data = DataMode::hetero;
  Fusion fusion = Fusion::unfused;
  CommDriver driver = CommDriver::thread;  // text key `engine` (or `driver`)
  Algo algo = Algo::coll;
  Topo topo = Topo::flat;
  int host_ranks = 0;  // topo=2level: ranks per host; 0 = the machine's (see with_host_ranks)
  Wire wire = Wire::op;

  /// The full string form, every field, e.g. "overlap=none,chunks=1,split=1d,...".
  std::string to_string() const;

  /// Parses the string form or a preset (optionally with overrides). Unknown keys, values,
  /// duplicate keys and empty input are errors (invalid_argument) naming the offending token.
  static std::optional<Schedule> parse(std::string_view text, Status* error = nullptr);

  /// Checks that this combination means something for `desc` (validated separately); the
  /// message names the fields and says why, e.g. "overlap=shard moves whole shards: chunks must be 1".
  /// Whether a particular backend can run it is can_run's answer (cofuse/backend.hpp).
  Status validate_for(const OpDesc& desc) const;

  /// Whether communication runs on its own engine next to the GEMM (a progress thread on the
  /// CPU): an overlapped, unfused schedule. Serial and fused schedules use one thread.
  /// (The execution model's engine rules, src/core/exec_model/engines.hpp, decide it.)
  bool separate_comm_engine() const;

  bool operator==(const Schedule&) const = default;
};

/// `schedule` with its host size filled in: a two-level schedule whose host_ranks is 0 gets
/// `ranks_per_host` (the machine's); any other schedule comes back as it is. The one place where
/// "the machine's ranks per host" becomes a number.
Schedule with_host_ranks(const Schedule& schedule, int ranks_per_host);

/// The unfused baseline by the library collective (preset "serial").
Schedule serial_schedule();
/// The same with algo=ring (preset "serial-ring"): the unfused baseline by cofuse's own
/// point-to-point transport.
Schedule serial_ring_schedule();

/// A named schedule and what it is.
struct Preset {
  std::string name;
  Schedule schedule;
  std::string summary;
};

/// Every preset: serial, serial-ring, serial-packed (gemm_rs along n only), shard, and FiCCO's {uniform, hetero} x {unfused, fused} x {1d, 2d}.
const std::vector<Preset>& presets();

/// The preset name of a schedule, or its full string form when no preset is it.
std::string schedule_name(const Schedule& schedule);

/// Every CPU schedule (engine thread / inline) from a grid (chunks in `chunk_counts`) that the
/// CPU backend can run for desc (can_run(Backend::cpu_mpi, ...)): serial first, then
/// serial-packed (gemm_rs along n only), the unfused baselines by ring and direct exchange, then the overlapped schedules. With `ranks_per_host`
/// R where 1 < R < P and R divides P (ranks in hosts of R), every flat ring schedule is followed
/// by its two-level twin (topo=2level,host_ranks=R); otherwise only flat schedules.
std::vector<Schedule> enumerate_schedules(const OpDesc& desc, const std::vector<int>& chunk_counts = {2, 4, 8},
                                          int ranks_per_host = 0);

const char* to_string(Overlap v);
const char* to_string(Split v);
const char* to_string(DataMode v);
const char* to_string(Fusion v);
const char* to_string(CommDriver v);
const char* to_string(Algo v);
const char* to_string(Topo v);
const char* to_string(Wire v);

}  // namespace cofuse
