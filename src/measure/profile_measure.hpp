// The measurements behind `cofuse profile`, one group per file: GEMM, copy and call costs
// (profile_compute.cpp), point-to-point and collectives (profile_network.cpp), engines slowing
// each other (profile_contention.cpp), the shared timing loop (profile_timing.cpp).
//
// Every function is collective over comm (all ranks call it together, in the same order) and
// returns the same result on every rank. A time is the slowest rank's: an op finishes when its
// slowest rank does, and all ranks measure at once because that is how the ops run (each rank on
// its own core, sharing the memory system and the link).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cofuse/model/profile.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/text.hpp"

namespace cofuse::measure {

/// How long the measurements may take: brief (calibration at first use, about a second: fewer
/// shapes, smaller messages, 3 samples), quick (`cofuse profile --quick`, seconds) or full (under
/// a minute).
enum class Effort { brief, quick, full };
struct ProfileEffort {
  Effort level = Effort::full;
  bool quick() const { return level != Effort::full; }
  bool brief() const { return level == Effort::brief; }
};

/// Reports progress within a measurement: fraction done (0..1) and what runs now.
using ProfileProgress = std::function<void(double, const std::string&)>;

// --- the timing loop (profile_timing.cpp) ---

/// One thing to time: a call, and how long a sample of it must last at least (short calls are
/// batched so the clock's resolution and the barrier before a sample do not count).
struct Timed {
  std::string name;
  std::function<void()> call;
  double min_sample_s = 0;
  /// This rank takes no part in `call` (a ping-pong or an exchange between two other ranks):
  /// it sleeps until the others are done instead of spinning in the next barrier, on cores the
  /// others may need where ranks outnumber them. Set per rank; its `call` is then not called.
  bool sits_out = false;
  /// Each sample's timed calls follow one untimed call back to back: what a link sustains, not
  /// what it gives after idling. A token-bucket-shaped link (bench/netlab's) lets its burst
  /// through at once after a pause, so a lone 4 MiB transfer over netlab's 2 Gbit/s switch took
  /// 15.8 ms and each of a train 17.5 ms; schedules that stream pieces see the second. The same
  /// on every rank that takes part (the untimed call is a call like the timed ones: ranks that
  /// disagree would mismatch their messages).
  bool primed = false;
};

/// Seconds per call of one of `timed`, over its samples (each the slowest rank's).
struct Sampled {
  double median = 0;
  /// For a call with two modes where the slow one is a transport's, not the link's (a TCP
  /// exchange, profile_network.cpp): what the link gives when nothing else gets in the way.
  double fastest = 0;
};

/// Seconds per call of each of `timed` over `passes` samples of the slowest rank's.
/// The calls are interleaved: a warm-up pass (which also sizes the batches), then each pass
/// takes one sample of every call, a barrier before each sample (and, for a primed call, its
/// untimed call between the barrier and the sample). A burst of outside load thus
/// spoils one sample of many calls instead of every sample of one, and the median drops it.
std::vector<Sampled> time_interleaved(MPI_Comm comm, const std::vector<Timed>& timed, int passes,
                                     const ProfileProgress& progress);

/// The medians of time_interleaved's results, in the same order.
std::vector<double> medians(const std::vector<Sampled>& sampled);

/// The largest value over the ranks.
double max_over_ranks(MPI_Comm comm, double value);

/// Waits for `count` requests as cofuse's progress thread drives them: MPI_Testall, sleeping
/// `interval` between tests (a waiting rank must not spin on a core another rank measures on).
void wait_polled(int count, MPI_Request* requests, std::chrono::microseconds interval);

/// How long a rank that waits while others measure sleeps between tests of its requests.
inline constexpr std::chrono::microseconds kBystanderPoll{200};

/// A barrier that sleeps (kBystanderPoll between tests) while it waits: for a rank with nothing
/// left to do in a phase while others measure on the cores it would spin on.
void sleeping_barrier(MPI_Comm comm);

// --- compute (profile_compute.cpp) ---

/// How this job's ranks share the cores of the machine this rank runs on. One machine is one
/// kernel (its boot id): network namespaces and containers on one host count together, as
/// netlab's "hosts" do, where MPI would see two hosts.
struct CoreSharing {
  int ranks = 1;         // the job's ranks on this machine
  int cpus = 1;          // the CPUs they may run on between them (the union of their affinity masks)
  int blas_threads = 1;  // BLAS threads per rank
  /// More threads multiplying than CPUs: each rank gets a share of a core over any span longer
  /// than the scheduler's switches.
  bool outnumbered() const { return int64_t(ranks) * blas_threads > cpus; }
  /// E.g. "4 ranks x 1 BLAS thread on 2 CPUs", the same on every rank of a machine.
  std::string text() const;
};

/// Collective over comm: the slowest case over the job's machines (the most threads per CPU),
/// so every rank holds the same answer.
CoreSharing core_sharing(MPI_Comm comm);

struct ComputeResult {
  std::vector<GemmPoint> grid;     // f32 GEMM rates per rank, GFLOP/s
  std::vector<GemmPoint> grid_16;  // bf16 GEMM rates (oneDNN, f32 accumulation) on the same shapes
  int dgemm_n = 0;              // the f64 GEMM (and the bf16 one) is dgemm_n cubed
  double dgemm_gflops = 0;
  double bf16_gflops = 0;       // oneDNN's bf16 matmul (f32 accumulation), dgemm_n cubed
  int copy_mib = 0;        // the copied buffer's size
  double copy_GBps = 0;    // (bytes read + bytes written) / time, GB/s (1e9)
  double blas_call_s = 0;  // one 1x1x1 sgemm call
  int passes = 0;
  double max_flops = 0;  // the grid leaves out shapes of more flops
  double sample_s = 0;   // a sample of a short call batches calls to at least this long
  CoreSharing sharing;   // what sample_s was chosen by
};

/// The sgemm grid, the same grid of bf16 GEMMs (on the process's bf16 path), one large dgemm and one large bf16
/// GEMM, a memcpy far larger than the caches and the cost of a tiny BLAS call, all interleaved.
/// Where ranks outnumber the cores (core_sharing), samples are long enough to span the scheduler's
/// switches, so each rate is what a rank gets while every rank multiplies.
/// sharing: core_sharing(comm), taken once by the caller (calibration keys its table by it too).
ComputeResult measure_compute(MPI_Comm comm, ProfileEffort effort, const ProfileProgress& progress,
                              const CoreSharing& sharing);

// --- network (profile_network.cpp) ---

enum class CollectiveKind { allgather, reduce_scatter, allreduce };

/// The nccl-tests bus factor of a collective on `ranks` ranks: (P-1)/P, or 2(P-1)/P for all-reduce.
double bus_factor(CollectiveKind kind, int ranks);

/// A collective timed at two sizes (bytes of the whole gathered or reduced buffer, f32 sum)
/// and fitted to time = alpha + bytes * factor / (busbw * 1e9); the raw times are kept.
/// Where a third, larger size was timed (beyond_bytes > 0) and ran more than 10% off the line,
/// the line bends at large_bytes (CollectiveModel::beyond_bytes) to pass through it.
struct CollectiveFit {
  CollectiveModel model;
  double small_bytes = 0, small_s = 0, large_bytes = 0, large_s = 0;
  bool fitted = true;  // false: the two times gave no positive slope; busbw from the large size alone
  double beyond_bytes = 0, beyond_s = 0;  // the third size and its time; 0: not timed
  bool bent = false;                      // the model bends at large_bytes (model.beyond_*)
  bool bent_below = false;                // the model bends at small_bytes instead (bend_below)
  std::string unbent_because;             // why a line bent below was straightened (unbend_below)
};

/// The line through a collective's two timed sizes (bytes, seconds), alpha clamped at 0; where
/// the two gave no positive slope, not fitted and the larger size's bus bandwidth alone.
CollectiveFit fit(CollectiveKind kind, int ranks, double small_bytes, double small_s, double large_bytes, double large_s);

/// Where the line through the two sizes crosses zero before the small one (a negative latency:
/// the large size ran slower per byte, past a shaped link's burst or the caches), alpha clamped
/// at 0 left a line through neither size: on 2 netlab hosts of 2 ranks (2 Gbit/s) MPI_Allgather
/// of 256 KiB took 0.50 ms and of 2 MiB 13.4 ms, and the line said 1.85 ms at 256 KiB, so the
/// serial schedule of ag_gemm 64x2048x1024 was predicted 3.24 ms where it ran 1.51. This bends
/// the line instead: from zero through the small size, then at small_bytes on to the large one
/// (CollectiveModel::beyond_bytes = small_bytes). Returns whether it bent. For the blocking calls:
/// a non-blocking call's latency holds the poll's notice delay, which the simulator adds itself.
bool bend_below(CollectiveFit& f, double factor);

/// Undoes bend_below, saying why (CollectiveFit::unbent_because): back to the line of the two
/// sizes, alpha clamped at 0.
void unbend_below(CollectiveFit& f, double factor, const std::string& because);

/// Bends `f`'s line at f.large_bytes when `seconds` at `bytes` (> f.large_bytes) is more than
/// `margin` off what the line predicts, slower or faster; records the third point either way. A
/// line bent below (bend_below) is judged as bent; off it by the margin, it is unbent first and
/// judged again as a line.
void bend_beyond(CollectiveFit& f, double factor, double bytes, double seconds, double margin = 0.1);

/// The third size for both calls of one collective, which share one bend
/// (CollectiveModel::beyond_bytes): the non-blocking call first; where it bends at the large
/// size, the blocking call's line bent below is unbent before the third size judges it.
void bend_beyond_both(CollectiveFit& blocking, CollectiveFit& nonblocking, double factor, double bytes,
                      double blocking_s, double nonblocking_s);

struct NetworkResult {
  double small_bytes = 8, small_round_trip_s = 0;  // ping-pong between ranks 0 and 1
  double large_bytes = 0, large_exchange_s = 0;     // both directions at once (MPI_Sendrecv), as a ring uses a link
  double large_exchange_fastest_s = 0;              // its fastest sample (exchange_s says why); 0: not measured
  double large_one_way_s = 0;                       // rank 0 to rank 1 alone (an 8-byte reply ends it)
  double large_one_way_train_s = 0;  // the same primed (Timed::primed): the second of two back to back
  double polled_bytes = 0;             // a small piece's message, one way (rank 0 to 1):
  double polled_one_way_s = 0;         // blocking (MPI_Send, MPI_Recv)
  double polled_one_way_polled_s = 0;  // both ends non-blocking, tested every poll_us asleep in between
  double polled_small_bytes = 0;                 // a decode step's piece, one way (rank 0 to 1),
  double polled_small_one_way_polled_s = 0;      // polled as above
  double large_two_pairs_s = 0;  // 0 to 1 and 2 to 3 at once, one way each; four ranks or more on one level, else 0
  CollectiveFit allgather, reduce_scatter, allreduce;  // blocking calls (the serial schedule's)
  // The non-blocking calls (MPI_I*) as overlapped schedules run them: posted, then MPI_Test
  // every poll_us with the thread asleep in between. alpha here still includes noticing.
  CollectiveFit allgather_nb, reduce_scatter_nb, allreduce_nb;
  int poll_us = 0;
  int passes = 0;
  // Whether the collectives were timed at 8 MiB too (CollectiveFit::beyond_*): always, unless
  // brief calibration estimated that timing them would take more than beyond_budget_s.
  bool beyond_timed = false;
  double beyond_budget_s = 0;
  // Two hosts or more of ranks_per_host ranks each (0: one host, or not regular): the link
  // between hosts, measured beside the one inside (the fields above, ranks 0 and 1).
  int ranks_per_host = 0;
  double inter_round_trip_s = 0;  // ping-pong of 8 bytes between rank 0 and rank ranks_per_host
  double inter_exchange_s = 0;    // every rank r of host 0 exchanges large_bytes with rank r + ranks_per_host, all at once
  double inter_exchange_one_s = 0;  // rank 0 alone exchanges large_bytes with rank ranks_per_host
};

/// A small ping-pong, a large exchange and the same message one way (ranks 0 and 1), a piece's
/// message one way blocking and polled, and the
/// three collectives, blocking and non-blocking polled every poll_us, interleaved.
/// ranks_per_host > 1 with at least two hosts of that many ranks (numbered host by host): the
/// link between hosts too (inter_*).
NetworkResult measure_network(MPI_Comm comm, ProfileEffort effort, int poll_us, const ProfileProgress& progress,
                              int ranks_per_host = 0);

/// The ranks per host when comm spans two hosts or more of that many ranks each (two or more),
/// numbered host by host (detail::host_layout, which COFUSE_RANKS_PER_HOST overrides); else 0.
/// Collective.
int two_level_ranks_per_host(MPI_Comm comm);

/// The time of the exchange (both directions of one pair at once) that tells how the directions
/// share a link: its fastest sample where one was kept, else its median. Over TCP the exchange
/// has two modes on a switch, one about twice as slow as the other (most likely: a rank's
/// acknowledgements queue behind its own outgoing data in its link's token bucket): on
/// bench/netlab's 2 Gbit/s switch the 4 MiB exchange took twice the one way in 6 of 20 tries.
/// The slow mode is the transport's, and ring steps run back to back mostly miss it (medians
/// 17.4 to 18.4 ms per 4 MiB at 2 to 4 ranks, against 17.5 ms for one way in a train), so the
/// fastest sample tells how the two directions share the link (detect_topology).
double exchange_s(const NetworkResult& r);

/// How the link is shared, from one transfer alone against two at once: a shared medium (one
/// loopback, one wire) gives one alone about twice what each of two gets; switched full-duplex
/// links give about the same. "shared" when alone is more than 1.5x faster, else "switch".
/// The two are two pairs one way each where four ranks were measured (large_two_pairs_s), else
/// the two directions of one pair (exchange_s). Two pairs at once read the switch right in 20
/// of 20 tries. With two ranks the models of the two readings nearly agree (each direction gets
/// half the one-way rate either way); with four a shared medium divides it by four.
std::string detect_topology(const NetworkResult& r);

/// Seconds per large_bytes that link_bandwidth_GBps stands for. On one level (a shared medium's
/// whole, a switch's one direction): one way, the slower of alone and in a train. A train is
/// slower where the link lets a burst through after idling (bench/netlab's token bucket: 15.8 ms
/// alone against 17.5 ms in a train per 4 MiB at 2 Gbit/s; the model had been 16% optimistic
/// on the switch), alone is slower where the first transfer warms what the second reuses
/// (shared memory's caches: 0.69 against 0.43 ms). Not the exchange on a switch: over TCP its
/// slow mode read twice the one way in all three samples of a calibration (31.2 ms per 4 MiB at
/// 4 ranks, 2026-12-06), and the model then called the 4-rank cases 28% slower than they ran
/// and kept serial at 4.9x the best. Inside a host of two_level: the exchange's median, shared
/// memory, where both directions' copies take the same cores and memory.
double link_seconds(const NetworkResult& r, const std::string& topology);

/// The bandwidth the simulator's NetworkModel::bandwidth_GBps means for that topology: per
/// direction (switch: measured one way, each direction a link of its own; inside a node of
/// two_level: the exchange, both busy), or the whole medium (shared: one direction alone).
/// GB/s: large_bytes / link_seconds * 1e-9.
double link_bandwidth_GBps(const NetworkResult& r, const std::string& topology);

/// The link between two hosts (two_level), from rank r of host 0 exchanging large_bytes with rank
/// r + R of host 1, all R pairs at once (inter_exchange_s) and one pair alone (inter_exchange_one_s).
struct InterHostLink {
  int nics_per_node = 1;  // 1: the R ranks of a host share one link; R: a link each
  double seconds = 0;     // large_bytes each way of one pair, on a link of its own
};
/// R pairs at once on one shared link take about R times as long each as one pair alone; on
/// links of their own about as long: the nearer decides. Both readings then time the same link,
/// and a rank whose core is taken (4 ranks on 2 cores) only slows a reading, so the link's time
/// is the faster of the pair alone and the R pairs' time over the pairs that share a link. On
/// bench/netlab's 2x2 hosts at 2 Gbit/s (0.25 GB/s), eight calibrations (out/s59 to out/s65) read
/// the pair alone at 17.5 to 21.2 ms per 4 MiB each way, 0.198 to 0.240 GB/s, and the two pairs at
/// once at 33.1 to 35.0 ms each, 16.6 to 17.5 over 2: the faster reading gives 0.239 to 0.253 GB/s
/// (a little above the shaped rate where the token bucket's burst helps).
InterHostLink inter_host_link(const NetworkResult& r);

/// The calibration's quick check: every rank sends 4 MiB (16 MiB on links that move 1 MiB in
/// under 0.5 ms) to the next and receives from the previous at once (a ring step), GB/s per
/// rank, the fastest of at least 3 steps and 30 ms (~0.1 s on a 2 Gbit/s link), each step the
/// slowest rank's. 0 with one rank.
double ring_check_GBps(MPI_Comm comm);

/// Seconds a rank spends on one non-blocking point-to-point task of 8 bytes: posting it plus the
/// MPI_Test that finds it complete (half of an Irecv + Isend pair exchanged by ranks 0 and 1).
double measure_task_overhead_s(MPI_Comm comm, int reps);

// --- contention (profile_contention.cpp) ---

struct ContentionResult {
  double gemm_alone_s = 0, gemm_busy_s = 0;          // one 512x1024x1024 sgemm, median
  double gemm_polled_s = 0;                          // the same beside a thread polling a receive
  double exchange_alone_s = 0, exchange_busy_s = 0;  // one 4 MiB exchange, median
  double gemm_rate = 1, comm_rate = 1;               // alone / busy, clamped into (0, 1]
  double poll_cost_s = 0;  // GEMM seconds one poll takes: poll x (polled / alone - 1), 0 if not slower
  int poll_us = 0;         // the polling thread's interval
  int rounds = 0;
};

/// Every rank at once, in pairs r and r + P/2 (an odd count's last rank only multiplies): GEMM
/// on the main thread while a second thread exchanges 4 MiB messages with the partner the way
/// cofuse's progress thread drives them (non-blocking posts, MPI_Test every ~200 us), against
/// each alone; and GEMM while that thread polls a receive nothing arrives for yet (what waiting
/// for a peer that still multiplies costs); the slowest rank's medians. Needs
/// MPI_THREAD_SERIALIZED or more.
ContentionResult measure_contention(MPI_Comm comm, ProfileEffort effort, const ProfileProgress& progress);

}  // namespace cofuse::measure
