// Stream programs (the CUDA executor's single-device schedule of P ranks), checked on the CPU.
//
// FAKE ENGINE, for scheduling logic only: the program runs on host memory, every stream a FIFO
// queue. An op runs in two steps, as ops of different streams overlap in time on a GPU: when it
// STARTS it reads its inputs (and the output it accumulates into) and computes its result into
// staging; when it ENDS it writes the result, and only then counts as done for the waits of
// others. Between the two, other streams start and end ops, chosen at RANDOM among those whose
// waits are done (GEMMs through OpenBLAS, copies and sums on the host). So a missing wait shows
// up as a wrong result in some interleavings: a read before the write it needed, a write before
// a read it should have followed, or two accumulations into one output that overlap and lose
// one. How often it shows up is measured by StreamProgram.RemovingAnyNeededWaitIsCaught.
// Outputs and workspaces start as NaN; results are compared with an independent double-precision
// reference written here from the op table in op_desc.hpp. The real CUDA executor runs the same
// programs (tests/cuda, on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <tuple>
#include <limits>
#include <random>
#include <set>

#include "cofuse/backend.hpp"
#include "support/sweep_sample.hpp"
#include "cofuse/model/plan.hpp"
#include "cofuse/tools/reference.hpp"
#include "cpu/compute/gemm.hpp"
#include "core/stream/stream_program.hpp"
#include "core/stream/view_ops.hpp"
#include "support/local_reference.hpp"

namespace cofuse {
namespace {

using detail::RankView;
using detail::StreamOp;
using detail::StreamOpKind;
using detail::StreamProgram;
using testing_support::Buffers;
using testing_support::error_of;
using testing_support::fill_nan;
using testing_support::make_inputs;

// The program's own memory: device scratch and (host link) host staging, both host memory here.
struct Spare {
  std::vector<char> scratch, staging;
};

void* at(std::vector<Buffers>& ranks, Spare& spare, DType t, const RankView& v) {
  std::vector<char>& bytes = v.rank == detail::kScratchRank   ? spare.scratch
                             : v.rank == detail::kStagingRank ? spare.staging
                                                              : ranks[std::size_t(v.rank)].bytes[static_cast<int>(v.view.buf)];
  return bytes.data() + v.view.offset * int64_t(dtype_size(t));
}

// The op's result into dst, whose view is dv: the op's own output, or a staging copy of it.
void run_op_into(const OpDesc& d, const StreamOp& op, std::vector<Buffers>& ranks, Spare& scratch, void* dst,
                 const View& dv) {
  switch (op.kind) {
    case StreamOpKind::gemm: {
      const View& x = op.srcs[0].view;
      const View& y = op.srcs[1].view;
      const int64_t k = op.trans_x ? x.rows : x.cols;
      detail::gemm(d.dtype, dv.rows, dv.cols, k, {at(ranks, scratch, d.dtype, op.srcs[0]), x.ld, op.trans_x},
                   {at(ranks, scratch, d.dtype, op.srcs[1]), y.ld, op.trans_y}, dst, dv.ld, op.accumulate);
      break;
    }
    case StreamOpKind::copy: detail::copy_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, dv); break;
    case StreamOpKind::add: detail::add_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, dv); break;
    case StreamOpKind::sum:
      detail::copy_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, dv);
      for (std::size_t i = 1; i < op.srcs.size(); ++i)
        detail::add_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[i]), op.srcs[i].view, dst, dv);
      break;
    case StreamOpKind::send:
    case StreamOpKind::recv:
    case StreamOpKind::collective: FAIL() << "communication in a local op: " << op.label;
  }
}

void run_op(const OpDesc& d, const StreamOp& op, std::vector<Buffers>& ranks, Spare& scratch) {
  run_op_into(d, op, ranks, scratch, at(ranks, scratch, d.dtype, op.dst), op.dst.view);
}

// Runs the program with streams interleaved at random (see the top of the file).
void run_interleaved(const OpDesc& d, const StreamProgram& program, std::vector<Buffers>& ranks, std::mt19937_64& rng) {
  const std::size_t streams = std::size_t(program.streams());
  std::vector<std::vector<int>> queues(streams);
  for (std::size_t i = 0; i < program.ops.size(); ++i) queues[std::size_t(program.ops[i].stream)].push_back(int(i));
  std::vector<std::size_t> head(streams, 0);
  std::vector<char> done(program.ops.size(), 0), in_flight(streams, 0);
  std::vector<std::vector<char>> staged(streams);  // the result of the op in flight on each stream
  Spare scratch{std::vector<char>(std::size_t(program.scratch_elements) * dtype_size(d.dtype)),
                std::vector<char>(std::size_t(program.staging_elements) * dtype_size(d.dtype))};
  fill_nan(d.dtype, scratch.scratch);
  fill_nan(d.dtype, scratch.staging);
  // Which start or end comes next: the streams get a random priority order for the run, and
  // the run a random probability q of ending rather than starting. Each step ends the op in
  // flight on the highest-priority stream with probability q (or when nothing can start), else
  // starts an op on the highest-priority stream that can. Low streams then lag far behind and
  // keep their ops in flight long: a consumer runs far ahead of its producer, a write lands long
  // after a read began. (A uniform pick among all starts and ends keeps the streams in step: in
  // 16 runs it caught 80% of the needed waits removed below, this pick 98%.)
  std::vector<int> order(streams);
  for (std::size_t s = 0; s < streams; ++s) order[s] = int(s);
  std::shuffle(order.begin(), order.end(), rng);
  std::bernoulli_distribution end_now(std::uniform_real_distribution<double>(0.05, 0.95)(rng));
  for (std::size_t ended = 0; ended < program.ops.size();) {
    std::vector<int> can_start, can_end;
    for (int s : order) {  // in priority order
      if (head[std::size_t(s)] == queues[std::size_t(s)].size()) continue;
      if (in_flight[std::size_t(s)]) {
        can_end.push_back(s);
        continue;
      }
      bool ready = true;
      for (int w : program.ops[std::size_t(queues[std::size_t(s)][head[std::size_t(s)]])].waits) ready = ready && done[std::size_t(w)];
      if (ready) can_start.push_back(s);
    }
    ASSERT_FALSE(can_start.empty() && can_end.empty()) << "no stream can run: the program's waits deadlock";
    const bool end = can_start.empty() || (!can_end.empty() && end_now(rng));
    const int s = end ? can_end.front() : can_start.front();
    const int index = queues[std::size_t(s)][head[std::size_t(s)]];
    const StreamOp& op = program.ops[std::size_t(index)];
    const View& v = op.dst.view;
    const View dense{v.buf, 0, v.rows, v.cols, v.cols};
    void* dst = at(ranks, scratch, d.dtype, op.dst);
    if (!end) {  // start: read the output as it is now (an accumulation adds to it), compute
      staged[std::size_t(s)].resize(std::size_t(v.elements()) * dtype_size(d.dtype));
      detail::copy_view(d.dtype, dst, v, staged[std::size_t(s)].data(), dense);
      run_op_into(d, op, ranks, scratch, staged[std::size_t(s)].data(), dense);
      in_flight[std::size_t(s)] = 1;
    } else {  // end: write the result
      detail::copy_view(d.dtype, staged[std::size_t(s)].data(), dense, dst, v);
      in_flight[std::size_t(s)] = 0;
      done[std::size_t(index)] = 1;
      ++head[std::size_t(s)];
      ++ended;
    }
  }
}

// Interleavings run per program. 32 catch a single missing wait that matters with high
// probability: StreamProgram.RemovingAnyNeededWaitIsCaught asserts at least 95% of them (it
// catches about 99.5%; 16 runs catch about 98%, 8 about 93%). A sanitizer build runs the
// correctness test with 4: it looks for memory errors, 25x slower, while the normal build of
// the same CI run covers the interleavings with all 32.
constexpr int kWaitRounds = 32;
#ifdef COFUSE_SANITIZED
constexpr int kRounds = 4;
#else
constexpr int kRounds = kWaitRounds;
#endif

// --- one rank per process (build_rank_program), the library's rendezvous faked on the host ---

// to = from: same shape, or both contiguous with as many elements (a message's two ends).
void move(DType t, const void* from, const View& fv, void* to, const View& tv) {
  if (fv.rows == tv.rows && fv.cols == tv.cols) return detail::copy_view(t, from, fv, to, tv);
  ASSERT_TRUE(fv.contiguous() && tv.contiguous() && fv.elements() == tv.elements());
  std::memcpy(to, from, std::size_t(fv.elements()) * dtype_size(t));
}

void* at_rank(std::vector<Buffers>& ranks, DType t, int rank, const View& v) {
  return ranks[std::size_t(rank)].bytes[static_cast<int>(v.buf)].data() + v.offset * int64_t(dtype_size(t));
}

// Runs every rank's program at once, FAKING the communication library (NCCL) for scheduling
// logic only: a send or receive runs when its whole group, the peers' matching operations
// (k-th send r->p with k-th receive at p from r) and THEIR groups are all at the heads of their
// streams with their waits done, as a rendezvous; a collective when every rank's c-th one is.
// No runnable operation while some are left is a deadlock: returns false (true once all ran).
bool run_ranks(const OpDesc& d, const std::vector<StreamProgram>& programs, std::vector<Buffers>& ranks, std::mt19937_64& rng) {
  const int p = d.ranks;
  using Ref = std::pair<int, int>;  // (rank, op)
  std::map<Ref, Ref> match;
  std::vector<std::vector<int>> collectives(static_cast<std::size_t>(p));
  {
    std::map<std::tuple<int, int, int>, int> sends, recvs;  // (from, to, k) -> op
    for (int r = 0; r < p; ++r) {
      std::map<int, int> sent, received;
      for (std::size_t i = 0; i < programs[std::size_t(r)].ops.size(); ++i) {
        const StreamOp& op = programs[std::size_t(r)].ops[i];
        if (op.kind == StreamOpKind::send) sends[{r, op.peer, sent[op.peer]++}] = int(i);
        if (op.kind == StreamOpKind::recv) recvs[{op.peer, r, received[op.peer]++}] = int(i);
        if (op.kind == StreamOpKind::collective) collectives[std::size_t(r)].push_back(int(i));
      }
    }
    EXPECT_EQ(sends.size(), recvs.size());
    for (const auto& [key, i] : sends) {
      if (!recvs.count(key)) {
        ADD_FAILURE() << "a send nobody receives";
        return false;
      }
      const Ref s{std::get<0>(key), i}, v{std::get<1>(key), recvs[key]};
      match[s] = v;
      match[v] = s;
    }
  }
  std::vector<std::vector<std::vector<int>>> queues(static_cast<std::size_t>(p));
  std::vector<std::vector<std::size_t>> head(static_cast<std::size_t>(p));
  std::vector<std::vector<char>> done(static_cast<std::size_t>(p));
  std::vector<std::map<int, int>> collective_index(static_cast<std::size_t>(p));
  std::size_t left = 0;
  for (int r = 0; r < p; ++r) {
    const StreamProgram& prog = programs[std::size_t(r)];
    queues[std::size_t(r)].resize(std::size_t(prog.streams()));
    head[std::size_t(r)].assign(std::size_t(prog.streams()), 0);
    done[std::size_t(r)].assign(prog.ops.size(), 0);
    for (std::size_t i = 0; i < prog.ops.size(); ++i) queues[std::size_t(r)][std::size_t(prog.ops[i].stream)].push_back(int(i));
    for (std::size_t c = 0; c < collectives[std::size_t(r)].size(); ++c) collective_index[std::size_t(r)][collectives[std::size_t(r)][c]] = int(c);
    left += prog.ops.size();
  }
  auto op_of = [&](Ref x) -> const StreamOp& { return programs[std::size_t(x.first)].ops[std::size_t(x.second)]; };
  auto at_head = [&](Ref x) {
    // Ops of one group are consecutive on the stream: the group is at the head when all the
    // ops before its first are done.
    const StreamOp& op = op_of(x);
    const std::vector<int>& q = queues[std::size_t(x.first)][std::size_t(op.stream)];
    const std::size_t h = head[std::size_t(x.first)][std::size_t(op.stream)];
    for (std::size_t k = h; k < q.size(); ++k) {
      if (q[k] == x.second) return true;
      const StreamOp& before = programs[std::size_t(x.first)].ops[std::size_t(q[k])];
      if (op.group < 0 || before.group != op.group) return false;
    }
    return false;
  };
  auto waits_done = [&](Ref x) {
    for (int w : op_of(x).waits)
      if (!done[std::size_t(x.first)][std::size_t(w)]) return false;
    return true;
  };
  // Everything that must run together with x.
  auto unit_of = [&](Ref x) {
    std::vector<Ref> unit, todo = {x};
    std::set<Ref> seen = {x};
    while (!todo.empty()) {
      const Ref y = todo.back();
      todo.pop_back();
      unit.push_back(y);
      const StreamOp& op = op_of(y);
      std::vector<Ref> next;
      if (op.kind == StreamOpKind::collective) {
        const int c = collective_index[std::size_t(y.first)][y.second];
        for (int r = 0; r < p; ++r) next.push_back({r, collectives[std::size_t(r)][std::size_t(c)]});
      } else if (op.group >= 0) {
        next.push_back(match[y]);
        const StreamProgram& prog = programs[std::size_t(y.first)];
        for (std::size_t i = 0; i < prog.ops.size(); ++i)
          if (prog.ops[i].group == op.group) next.push_back({y.first, int(i)});
      }
      for (const Ref& n : next)
        if (seen.insert(n).second) todo.push_back(n);
    }
    return unit;
  };
  while (left > 0) {
    std::vector<std::vector<Ref>> runnable;
    for (int r = 0; r < p; ++r)
      for (std::size_t s = 0; s < queues[std::size_t(r)].size(); ++s) {
        const std::vector<int>& q = queues[std::size_t(r)][s];
        const std::size_t h = head[std::size_t(r)][s];
        if (h == q.size()) continue;
        const std::vector<Ref> unit = unit_of({r, q[h]});
        bool ready = true;
        for (const Ref& u : unit) ready = ready && at_head(u) && waits_done(u);
        if (ready) runnable.push_back(unit);
      }
    if (runnable.empty()) return false;
    const std::vector<Ref>& unit = runnable[std::uniform_int_distribution<std::size_t>(0, runnable.size() - 1)(rng)];
    const StreamOp& first = op_of(unit.front());
    if (first.kind == StreamOpKind::collective) {
      std::vector<const StreamOp*> c(static_cast<std::size_t>(p));
      for (const Ref& u : unit) c[std::size_t(u.first)] = &op_of(u);
      const View& z0 = c[0]->dst.view;
      switch (first.collective) {
        case Collective::allgather:
          for (int r = 0; r < p; ++r)
            for (int j = 0; j < p; ++j) {
              View to = c[std::size_t(r)]->dst.view;
              to.offset += j * c[std::size_t(r)]->stride;
              move(d.dtype, at_rank(ranks, d.dtype, j, c[std::size_t(j)]->srcs[0].view), c[std::size_t(j)]->srcs[0].view,
                   at_rank(ranks, d.dtype, r, to), to);
            }
          break;
        case Collective::reduce_scatter:
          for (int r = 0; r < p; ++r) {
            const View& z = c[std::size_t(r)]->dst.view;
            for (int j = 0; j < p; ++j) {
              View from = c[std::size_t(j)]->srcs[0].view;
              from.offset += r * c[std::size_t(j)]->stride;
              if (j == 0) move(d.dtype, at_rank(ranks, d.dtype, j, from), from, at_rank(ranks, d.dtype, r, z), z);
              else detail::add_view(d.dtype, at_rank(ranks, d.dtype, j, from), from, at_rank(ranks, d.dtype, r, z), z);
            }
          }
          break;
        case Collective::allreduce: {
          std::vector<char> sum(std::size_t(z0.elements()) * dtype_size(d.dtype));
          const View flat{Buf::work, 0, z0.rows, z0.cols, z0.cols};
          for (int j = 0; j < p; ++j) {  // every rank's partial (its dst where in place)
            const View& x = c[std::size_t(j)]->srcs[0].view;
            if (j == 0) detail::copy_view(d.dtype, at_rank(ranks, d.dtype, j, x), x, sum.data(), flat);
            else detail::add_view(d.dtype, at_rank(ranks, d.dtype, j, x), x, sum.data(), flat);
          }
          for (int r = 0; r < p; ++r)
            detail::copy_view(d.dtype, sum.data(), flat, at_rank(ranks, d.dtype, r, c[std::size_t(r)]->dst.view), c[std::size_t(r)]->dst.view);
          break;
        }
      }
    } else if (first.kind == StreamOpKind::send || first.kind == StreamOpKind::recv) {
      for (const Ref& u : unit) {
        const StreamOp& op = op_of(u);
        if (op.kind != StreamOpKind::send) continue;
        const Ref v = match[u];
        const StreamOp& recv = op_of(v);
        move(d.dtype, at_rank(ranks, d.dtype, u.first, op.srcs[0].view), op.srcs[0].view,
             at_rank(ranks, d.dtype, v.first, recv.dst.view), recv.dst.view);
      }
    } else {
      Spare no_scratch;
      StreamOp local = first;  // views of "rank 0" of its program are this rank's buffers
      for (RankView& s : local.srcs) s.rank = unit.front().first;
      local.dst.rank = unit.front().first;
      run_op(d, local, ranks, no_scratch);
    }
    for (const Ref& u : unit) {
      done[std::size_t(u.first)][std::size_t(u.second)] = 1;
      --left;
    }
    for (int r = 0; r < p; ++r)
      for (std::size_t s = 0; s < queues[std::size_t(r)].size(); ++s) {
        std::size_t& h = head[std::size_t(r)][s];
        while (h < queues[std::size_t(r)][s].size() && done[std::size_t(r)][std::size_t(queues[std::size_t(r)][s][h])]) ++h;
      }
  }
  return true;
}

std::vector<OpDesc> descs(int p) {
  std::vector<OpDesc> out;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops)
    for (bool t : {false, true})
      out.push_back(OpDesc{kind, 6 * p, 5 * p, 7 * p, t ? DType::f64 : DType::f32, t, !t, axis, p});
  return out;
}

// Every op (both axes, transposes, f32 and f64) and schedule (chunks 2 and 3) at 1-4 ranks (and
// the two-level schedules of 4 ranks in hosts of 2), with a fresh seed per run (printed on
// failure) and a seed per case; returns the number of cases.
int for_every_case(const std::function<void(const OpDesc&, const std::vector<Plan>&, uint64_t, std::mt19937_64&)>& check) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  int cases = 0, seen = 0;
  for (int p : {1, 2, 3, 4})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {2, 3}, p == 4 ? 2 : 0)) {
        if (!test::in_sweep_sample(seen)) continue;
        SCOPED_TRACE(d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(seed));
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        check(d, plans, seed + uint64_t(cases++), rng);
        if (::testing::Test::HasFatalFailure()) return cases;
      }
  return cases;
}

// Every case's program (pieces of host_piece elements through host memory, 0 for none) is run
// `rounds` times under random interleavings, each on fresh inputs, against the reference.
void correct_under_interleavings(int64_t max_host_piece, int rounds) {
  const int cases = for_every_case([&](const OpDesc& d, const std::vector<Plan>& plans, uint64_t seed, std::mt19937_64& rng) {
    const int64_t piece = max_host_piece > 0 ? std::uniform_int_distribution<int64_t>(1, max_host_piece)(rng) : 0;
    SCOPED_TRACE("host pieces of " + std::to_string(piece) + " elements (0: no host link)");
    const StreamProgram program = detail::build_stream_program(plans, 2, piece);
    for (int round = 0; round < rounds; ++round) {
      std::vector<Buffers> ranks = make_inputs(d, plans, seed + uint64_t(round));
      run_interleaved(d, program, ranks, rng);
      bool gathered_ok = true;
      ASSERT_LE(error_of(d, ranks, &gathered_ok), tolerance(d.dtype, d.k)) << program.dump();
      ASSERT_TRUE(gathered_ok) << program.dump();
    }
  });
  EXPECT_GT(cases, 500 / test::kSweepStride);
}

TEST(StreamProgram, EveryOpAndScheduleIsCorrectUnderRandomInterleavings) { correct_under_interleavings(0, kRounds); }

// The host link (cuda::Link::host): every transfer between ranks staged through host memory
// in pieces; pieces of 1..16 elements (so views split by rows and single rows by columns),
// fewer rounds than above since the staging adds ops, not orderings of the plans.
TEST(StreamProgram, HostLinkIsCorrectUnderRandomInterleavings) { correct_under_interleavings(16, std::max(1, kRounds / 8)); }

// What the host link promises structurally: no operation moves data from one rank's device to
// another's; every download runs on its source rank's device-to-host stream and every upload on
// its destination's host-to-device stream, each after its own piece's download; an all-gather
// shard crosses to the host once however many ranks read it.
TEST(StreamProgram, HostLinkStagesEveryTransferBetweenRanks) {
  for (int p : {2, 3, 4})
    for (const OpDesc& d : descs(p))
      for (const char* text : {"serial", "shard", "hetero-unfused-1d,chunks=2", "uniform-unfused-2d", "uniform-unfused-1d,chunks=2,algo=coll"}) {
        const Schedule s = *Schedule::parse(text);
        if (!s.validate_for(d).ok()) continue;
        SCOPED_TRACE(d.to_string() + " | " + text);
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        const StreamProgram program = detail::build_stream_program(plans, 2, 4);
        EXPECT_EQ(program.streams_per_rank(), 5);
        auto home = [](const RankView& v) { return v.rank >= 0 ? v.rank : 0; };
        int64_t downloaded = 0, uploaded = 0;
        for (std::size_t i = 0; i < program.ops.size(); ++i) {
          const StreamOp& op = program.ops[i];
          const bool down = op.dst.rank == detail::kStagingRank, up = !op.srcs.empty() && op.srcs[0].rank == detail::kStagingRank;
          if (down) {
            downloaded += op.dst.view.elements();
            EXPECT_EQ(op.stream, program.link_stream(home(op.srcs[0]), true)) << op.label;
            EXPECT_LE(op.dst.view.elements(), std::max<int64_t>(4, op.dst.view.cols)) << op.label;
          } else if (up) {
            uploaded += op.dst.view.elements();
            // Into a rank's buffer: on its upload stream; into scratch (a sum's input): on the
            // upload stream of the rank that sums it.
            EXPECT_EQ(op.stream, program.link_stream(op.dst.rank >= 0 ? op.dst.rank : op.rank, false)) << op.label;
            // The upload of a piece waits for that piece's download (on another stream).
            bool after_its_download = false;
            for (int w : op.waits) {
              const StreamOp& from = program.ops[std::size_t(w)];
              after_its_download = after_its_download || (from.dst.rank == detail::kStagingRank && from.dst.view.offset == op.srcs[0].view.offset);
            }
            EXPECT_TRUE(after_its_download) << op.label;
          } else {
            // Scratch is the program's (each region is used by one rank), so only buffers count.
            const int owner = op.stream / program.streams_per_rank();
            for (const RankView& src : op.srcs)
              if (src.rank >= 0) {
                EXPECT_EQ(src.rank, owner) << op.label << ": reads another rank's device memory";
              }
            if (op.dst.rank >= 0) {
              EXPECT_EQ(op.dst.rank, owner) << op.label;
            }
            EXPECT_TRUE(program.is_compute_stream(op.stream) || op.stream == program.stream_of(owner, EngineId::comm)) << op.label;
          }
        }
        EXPECT_EQ(downloaded, program.staging_elements);  // every staged element was downloaded once
        EXPECT_GE(uploaded, downloaded);
        if (p > 1 && s.overlap == Overlap::none) {
          EXPECT_GT(downloaded, 0) << "serial's collective does not use the link";
        }
      }
}

// cuda::Group with engine=ce runs the merged program with each rank's streams in its own
// process, which maps the peers' memory to READ it: that needs every op to write only memory of
// the rank whose stream it is on (scratch counts as rank 0's, whose process allocates it).
TEST(StreamProgram, EveryOpWritesOnlyTheMemoryOfItsStreamsRank) {
  const int cases = for_every_case([](const OpDesc&, const std::vector<Plan>& plans, uint64_t, std::mt19937_64&) {
    const StreamProgram program = detail::build_stream_program(plans, 2);
    for (const StreamOp& op : program.ops) {
      const int owner = op.stream / program.streams_per_rank();
      ASSERT_EQ(op.dst.rank >= 0 ? op.dst.rank : 0, owner) << op.label << "\n" << program.dump();
    }
  });
  EXPECT_GT(cases, 500 / test::kSweepStride);
}

TEST(RankProgram, EveryOpAndScheduleIsCorrectWithOneProcessPerRank) {
  const int cases = for_every_case([](const OpDesc& d, const std::vector<Plan>& plans, uint64_t seed, std::mt19937_64& rng) {
    std::vector<StreamProgram> programs;
    for (const Plan& plan : plans) programs.push_back(detail::build_rank_program(plan, 2));
    std::vector<Buffers> ranks = make_inputs(d, plans, seed);
    ASSERT_TRUE(run_ranks(d, programs, ranks, rng)) << "no operation can run: the ranks' programs deadlock";
    bool gathered_ok = true;
    ASSERT_LE(error_of(d, ranks, &gathered_ok), tolerance(d.dtype, d.k)) << programs[0].dump();
    ASSERT_TRUE(gathered_ok);
  });
  EXPECT_GT(cases, 500 / test::kSweepStride);
}

// Without groups, two ranks that each send to the other first would wait forever in NCCL.
TEST(RankProgram, SendsAndReceivesOfOneStepShareAGroup) {
  const OpDesc d{OpKind::gemm_rs, 8, 6, 8, DType::f32, false, false, Axis::m, 2};
  const StreamProgram program = detail::build_rank_program(lower(d, *Schedule::parse("hetero-unfused-1d"), 0), 2);
  int p2p = 0;
  for (const StreamOp& op : program.ops)
    if (op.kind == StreamOpKind::send || op.kind == StreamOpKind::recv) {
      ++p2p;
      EXPECT_GE(op.group, 0) << op.label;
    }
  EXPECT_GT(p2p, 0);
  std::map<int, std::set<StreamOpKind>> kinds;
  for (const StreamOp& op : program.ops)
    if (op.group >= 0) kinds[op.group].insert(op.kind);
  for (const auto& [group, k] : kinds) EXPECT_EQ(k.size(), 2u) << "group " << group << " does not both send and receive";
}

// ---- the test above catches a missing wait: remove each wait of many programs in turn ----

// ancestors[i]: the ops that end before op i starts: earlier ops of its stream, the ops it
// waits for, and theirs (bit j of a bitset per op).
using Bits = std::vector<uint64_t>;
std::vector<Bits> ancestors(const StreamProgram& program) {
  const std::size_t n = program.ops.size(), words = (n + 63) / 64;
  std::vector<Bits> anc(n, Bits(words, 0));
  std::vector<int> last(std::size_t(program.streams()), -1);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<int> preds = program.ops[i].waits;
    int& previous = last[std::size_t(program.ops[i].stream)];
    if (previous >= 0) preds.push_back(previous);
    previous = int(i);
    for (int p : preds) {
      for (std::size_t w = 0; w < words; ++w) anc[i][w] |= anc[std::size_t(p)][w];
      anc[i][std::size_t(p) / 64] |= uint64_t(1) << (std::size_t(p) % 64);
    }
  }
  return anc;
}

bool has(const Bits& bits, std::size_t j) { return (bits[j / 64] >> (j % 64)) & 1; }

// Do two views of one rank's buffer (or both of the scratch, rank -1) share an element?
bool overlap(const RankView& a, const RankView& b) {
  if (a.rank != b.rank || (a.rank >= 0 && a.view.buf != b.view.buf) || a.view.empty() || b.view.empty()) return false;
  for (int64_t i = 0; i < a.view.rows; ++i)
    for (int64_t j = 0; j < b.view.rows; ++j) {
      const int64_t lo = a.view.offset + i * a.view.ld, blo = b.view.offset + j * b.view.ld;
      if (lo < blo + b.view.cols && blo < lo + a.view.cols) return true;
    }
  return false;
}

// Must a and b run in some order: do they touch an element that one of them writes?
bool conflict(const StreamOp& a, const StreamOp& b) {
  for (const RankView& read : a.srcs)
    if (overlap(read, b.dst)) return true;
  for (const RankView& read : b.srcs)
    if (overlap(read, a.dst)) return true;
  return overlap(a.dst, b.dst);
}

// For every op of programs of every op kind and main schedule at 2 and 3 ranks, each wait is
// removed in turn. Three kinds of wait come out:
//   implied:  the order it enforces still follows from the stream order and the other waits,
//             so nothing can go wrong without it (build_stream_program drops only waits implied
//             by an earlier wait of the same stream; here: an all-reduce's copy back waits for
//             the GEMM its sum, on another stream, already waited for);
//   unneeded: no two ops that touch the same element (one writing) lose their order. Here: a
//             collective's parts wait for what ANY rank's collective task waited for (a
//             reduce-scatter's sum into rank 0 also waits for the GEMMs of the other blocks,
//             which it does not read), and what follows an all-gather (a GEMM or unpack of one
//             shard) waits for the copies of every shard. Conservative and harmless: no result
//             can show their absence;
//   needed:   the rest. Without one of them some interleaving is wrong, and the kWaitRounds
//             interleavings the test above runs must find that for at least 95% of them.
// The host link's programs too (at 2 ranks, pieces of 5 elements): its waits are caught alike.
void remove_each_needed_wait(const std::vector<int>& rank_counts, int64_t host_piece, int minimum_needed) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  int implied = 0, unneeded = 0, needed = 0, caught = 0;
  std::string missed;
  for (int p : rank_counts)
    for (const OpDesc& d : descs(p))
      for (const char* text : {"hetero-unfused-1d", "uniform-unfused-2d,chunks=2", "hetero-unfused-1d,chunks=2,algo=direct",
                               "uniform-unfused-1d,chunks=2,algo=coll", "shard"}) {
        const Schedule s = *Schedule::parse(text);
        if (!s.validate_for(d).ok()) continue;
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        const StreamProgram program = detail::build_stream_program(plans, 2, host_piece);
        const std::vector<Bits> before = ancestors(program);
        for (std::size_t i = 0; i < program.ops.size(); ++i)
          for (std::size_t k = 0; k < program.ops[i].waits.size(); ++k) {
            StreamProgram broken = program;
            const int w = program.ops[i].waits[k];
            broken.ops[i].waits.erase(broken.ops[i].waits.begin() + std::ptrdiff_t(k));
            const std::vector<Bits> after = ancestors(broken);
            if (has(after[i], std::size_t(w))) {
              ++implied;
              continue;
            }
            bool matters = false;  // a conflicting pair (x before y) that lost its order
            for (std::size_t y = 0; y < program.ops.size() && !matters; ++y)
              for (std::size_t x = 0; x < y && !matters; ++x)
                matters = has(before[y], x) && !has(after[y], x) && conflict(program.ops[x], program.ops[y]);
            if (!matters) {
              ++unneeded;
              continue;
            }
            ++needed;
            bool wrong = false;
            for (int round = 0; round < kWaitRounds && !wrong; ++round) {
              std::vector<Buffers> ranks = make_inputs(d, plans, seed + uint64_t(round));
              run_interleaved(d, broken, ranks, rng);
              bool gathered_ok = true;
              wrong = error_of(d, ranks, &gathered_ok) > tolerance(d.dtype, d.k) || !gathered_ok;
            }
            caught += wrong;
            if (!wrong)
              missed += d.to_string() + " | " + text + ": '" + program.ops[i].label + "' without its wait for '" +
                        program.ops[std::size_t(w)].label + "'\n";
          }
      }
  std::cout << "waits removed" << (host_piece > 0 ? " (host link)" : "") << ": " << needed << " needed (" << caught
            << " caught), " << unneeded << " unneeded, " << implied << " implied; seed " << seed << "\n";
  EXPECT_GT(needed, minimum_needed);
  EXPECT_GE(caught, 0.95 * needed) << "missed:\n" << missed;
}

TEST(StreamProgram, RemovingAnyNeededWaitIsCaught) { remove_each_needed_wait({2, 3}, 0, 1000); }

TEST(StreamProgram, RemovingAnyNeededWaitOfTheHostLinkIsCaught) { remove_each_needed_wait({2}, 5, 500); }

TEST(StreamProgram, WaitsOnlyCrossStreamsAndPointBackwards) {
  const OpDesc d{OpKind::ag_gemm, 16, 8, 8, DType::f32, false, false, Axis::m, 4};
  const Schedule s = *Schedule::parse("uniform-unfused-2d");
  std::vector<Plan> plans;
  for (int r = 0; r < 4; ++r) plans.push_back(lower(d, s, r));
  const StreamProgram program = detail::build_stream_program(plans, 2);
  EXPECT_EQ(program.streams(), 12);
  int recorded = 0;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    for (int w : program.ops[i].waits) {
      EXPECT_LT(w, int(i));
      EXPECT_NE(program.ops[std::size_t(w)].stream, program.ops[i].stream);
      EXPECT_TRUE(program.ops[std::size_t(w)].record);
    }
    recorded += program.ops[i].record ? 1 : 0;
  }
  EXPECT_EQ(recorded, program.events);
  // GEMM pieces of one rank alternate between its two compute streams.
  std::set<int> gemm_streams;
  for (const StreamOp& op : program.ops)
    if (op.kind == StreamOpKind::gemm && op.rank == 0) gemm_streams.insert(op.stream);
  EXPECT_EQ(gemm_streams, (std::set<int>{0, 1}));
}

TEST(StreamProgram, RejectsPlansThatDoNotFit) {
  const OpDesc d{OpKind::gemm_rs, 8, 6, 8, DType::f32, false, false, Axis::m, 2};
  const Schedule s = *Schedule::parse("hetero-unfused-1d");
  std::vector<Plan> plans = {lower(d, s, 0), lower(d, s, 1)};
  EXPECT_THROW(detail::build_stream_program({plans[0]}, 2), Error);                // one plan of two ranks
  EXPECT_THROW(detail::build_stream_program({plans[1], plans[0]}, 2), Error);      // out of order
  EXPECT_THROW(detail::build_stream_program(plans, 0), Error);                     // no compute stream
  // A receive nobody sends.
  std::vector<Plan> broken = plans;
  for (Task& t : broken[1].tasks)
    if (t.kind == TaskKind::send) {
      t.tag += 1000;
      break;
    }
  try {
    detail::build_stream_program(broken, 2);
    FAIL() << "an unmatched message was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not one send and one receive"), std::string::npos) << e.what();
  }
  // A cycle: a task that waits for the first task becomes the first task's dependency too.
  std::vector<Plan> cyclic = plans;
  for (std::size_t i = 1; i < cyclic[0].tasks.size(); ++i) {
    const std::vector<int>& deps = cyclic[0].tasks[i].deps;
    if (std::find(deps.begin(), deps.end(), 0) != deps.end()) {
      cyclic[0].tasks[0].deps.push_back(int(i));
      break;
    }
  }
  ASSERT_FALSE(cyclic[0].tasks[0].deps.empty());
  try {
    detail::build_stream_program(cyclic, 2);
    FAIL() << "a cycle was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

// gemm_ar over uneven row blocks (M % P != 0: blocks of 1 and 2 rows, cut into different
// numbers of pieces), flat and two-level, one process per rank: every exchange that cannot be
// ordered (it would wait forever inside NCCL's groups) is refused by can_run(cuda_nccl), and
// every accepted one computes the right answer. (can_run's rule is the simple sufficient one:
// it also refuses a few that happen to order.)
TEST(RankProgram, CanRunRefusesEveryExchangeOfUnevenBlocksThatCannotBeOrdered) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  int accepted = 0, unorderable = 0;
  for (int m : {5, 6, 7}) {
    const OpDesc d{OpKind::gemm_ar, m, 5, 8, DType::f64, false, false, Axis::none, 4};
    for (Schedule s : enumerate_schedules(d, {2, 3}, 2)) {
      if (s.overlap == Overlap::none || s.fusion == Fusion::fused) continue;
      s.driver = CommDriver::sm;
      SCOPED_TRACE(d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(seed));
      std::vector<Plan> plans;
      for (int r = 0; r < 4; ++r) plans.push_back(lower(d, s, r));
      const Status verdict = can_run(Backend::cuda_nccl, d, s);
      std::vector<Buffers> ranks = make_inputs(d, plans, seed + uint64_t(accepted + unorderable));
      try {
        std::vector<StreamProgram> programs;
        for (const Plan& plan : plans) programs.push_back(detail::build_rank_program(plan, 2));
        if (!run_ranks(d, programs, ranks, rng)) throw Error(ErrorCode::internal, "the ranks' programs deadlock");
      } catch (const Error& e) {
        ++unorderable;
        EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
        EXPECT_FALSE(verdict.ok()) << "can_run accepts a schedule whose rank programs wait for each other";
        continue;
      }
      if (!verdict.ok()) continue;
      ++accepted;
      bool gathered_ok = true;
      ASSERT_LE(error_of(d, ranks, &gathered_ok), tolerance(d.dtype, d.k));
    }
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(unorderable, 4);
}

}  // namespace
}  // namespace cofuse
