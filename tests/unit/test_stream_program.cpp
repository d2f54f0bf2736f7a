// Stream programs (the CUDA executor's single-device schedule of P ranks), checked on the CPU.
//
// FAKE ENGINE, for scheduling logic only: the program runs on host memory, every stream a FIFO
// queue, and at each step a RANDOM stream whose next op has all its waits done runs that op
// (GEMMs through OpenBLAS, copies and sums on the host). Any interleaving a GPU could produce is
// one of these, so a missing wait shows up as a wrong result in some of them. Outputs and
// workspaces start as NaN; results are compared with an independent double-precision
// reference written here from the op table in op_desc.hpp. The real CUDA executor runs the same
// programs (tests/cuda, on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "cofuse/plan.hpp"
#include "cofuse/reference.hpp"
#include "compute/gemm.hpp"
#include "exec/stream_program.hpp"
#include "exec/view_ops.hpp"
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

void* at(std::vector<Buffers>& ranks, std::vector<char>& scratch, DType t, const RankView& v) {
  std::vector<char>& bytes = v.rank < 0 ? scratch : ranks[std::size_t(v.rank)].bytes[static_cast<int>(v.view.buf)];
  return bytes.data() + v.view.offset * int64_t(dtype_size(t));
}

void run_op(const OpDesc& d, const StreamOp& op, std::vector<Buffers>& ranks, std::vector<char>& scratch) {
  void* dst = at(ranks, scratch, d.dtype, op.dst);
  switch (op.kind) {
    case StreamOpKind::gemm: {
      const View& x = op.srcs[0].view;
      const View& y = op.srcs[1].view;
      const int64_t k = op.trans_x ? x.rows : x.cols;
      detail::gemm(d.dtype, op.dst.view.rows, op.dst.view.cols, k, {at(ranks, scratch, d.dtype, op.srcs[0]), x.ld, op.trans_x},
                   {at(ranks, scratch, d.dtype, op.srcs[1]), y.ld, op.trans_y}, dst, op.dst.view.ld, op.accumulate);
      break;
    }
    case StreamOpKind::copy:
      detail::copy_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, op.dst.view);
      break;
    case StreamOpKind::add:
      detail::add_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, op.dst.view);
      break;
    case StreamOpKind::sum:
      detail::copy_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[0]), op.srcs[0].view, dst, op.dst.view);
      for (std::size_t i = 1; i < op.srcs.size(); ++i)
        detail::add_view(d.dtype, at(ranks, scratch, d.dtype, op.srcs[i]), op.srcs[i].view, dst, op.dst.view);
      break;
  }
}

// Runs the program with streams interleaved at random (see the top of the file).
void run_interleaved(const OpDesc& d, const StreamProgram& program, std::vector<Buffers>& ranks, std::mt19937_64& rng) {
  std::vector<std::vector<int>> queues(std::size_t(program.streams()));
  for (std::size_t i = 0; i < program.ops.size(); ++i) queues[std::size_t(program.ops[i].stream)].push_back(int(i));
  std::vector<std::size_t> head(queues.size(), 0);
  std::vector<char> done(program.ops.size(), 0);
  std::vector<char> scratch(std::size_t(program.scratch_elements) * dtype_size(d.dtype));
  fill_nan(d.dtype, scratch);
  for (std::size_t left = program.ops.size(); left > 0; --left) {
    std::vector<int> runnable;
    for (std::size_t s = 0; s < queues.size(); ++s) {
      if (head[s] == queues[s].size()) continue;
      const StreamOp& op = program.ops[std::size_t(queues[s][head[s]])];
      bool ready = true;
      for (int w : op.waits) ready = ready && done[std::size_t(w)];
      if (ready) runnable.push_back(int(s));
    }
    ASSERT_FALSE(runnable.empty()) << "no stream can run: the program's waits deadlock";
    const int s = runnable[std::uniform_int_distribution<std::size_t>(0, runnable.size() - 1)(rng)];
    const int index = queues[std::size_t(s)][head[std::size_t(s)]++];
    run_op(d, program.ops[std::size_t(index)], ranks, scratch);
    done[std::size_t(index)] = 1;
  }
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

TEST(StreamProgram, EveryOpAndScheduleIsCorrectUnderRandomInterleavings) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  int programs = 0;
  for (int p : {1, 2, 3, 4})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {2, 3})) {
        SCOPED_TRACE(d.to_string() + " | " + s.to_string() + " | seed " + std::to_string(seed));
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        const StreamProgram program = detail::build_stream_program(plans, 2);
        for (int round = 0; round < 2; ++round) {
          std::vector<Buffers> ranks = make_inputs(d, plans, seed + uint64_t(programs));
          run_interleaved(d, program, ranks, rng);
          bool gathered_ok = true;
          const double error = error_of(d, ranks, &gathered_ok);
          ASSERT_LE(error, tolerance(d.dtype, d.k)) << program.dump();
          ASSERT_TRUE(gathered_ok) << program.dump();
        }
        ++programs;
      }
  EXPECT_GT(programs, 500);
}

// The test above would catch a missing wait: without waits the same programs go wrong.
TEST(StreamProgram, TheInterleavingCatchesAMissingWait) {
  std::mt19937_64 rng(7);
  const OpDesc d{OpKind::gemm_rs, 8, 6, 8, DType::f32, false, false, Axis::m, 2};
  const Schedule s = *Schedule::parse("hetero-unfused-1d");
  std::vector<Plan> plans = {lower(d, s, 0), lower(d, s, 1)};
  StreamProgram program = detail::build_stream_program(plans, 2);
  for (StreamOp& op : program.ops) op.waits.clear();
  int wrong = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<Buffers> ranks = make_inputs(d, plans, 11);
    run_interleaved(d, program, ranks, rng);
    bool gathered_ok = true;
    wrong += error_of(d, ranks, &gathered_ok) > tolerance(d.dtype, d.k) ? 1 : 0;
  }
  EXPECT_GT(wrong, 0);
}

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

}  // namespace
}  // namespace cofuse
