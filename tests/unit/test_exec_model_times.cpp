// One synthetic timeline through every consumer of the time arithmetic
// (core/exec_model/times.hpp): the CPU executor's RunStats, the simulator's busy times and loss
// breakdown, the CUDA runner's stream-program stats, the bench's records and `cofuse report
// --predict` must all report the hand-computed numbers, so a predicted and a measured number of
// one name cannot drift apart again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cofuse/model/profile.hpp"
#include "cofuse/model/simulate.hpp"
#include "core/exec_model/times.hpp"
#include "core/stream/stream_program.hpp"
#include "measure/bench_record.hpp"
#include "measure/report_predict.hpp"
#include "model/sim/losses.hpp"

namespace cofuse {
namespace {

using detail::StreamOp;
using detail::StreamOpKind;
using detail::StreamProgram;

// The timeline (seconds; one call of 32 s on two ranks):
//   rank 0: pack [2,4]  gemm [0,10]  send [10,25]  recv [5,20]  gemm [10,22]  reduce [25,32]
//   rank 1: gemm [0,8]  recv [0,12]  reduce [12,14]
// rank 0: GEMM 10 + 12 = 22; busy (compute engine) 22 + 7 = 29; communication in flight
//   [2,4] + [5,25] = 22; exposed 32 - 22 = 10 (not 32 - 29 = 3: the reduction is exposed).
// rank 1: GEMM 8; busy 10; communication 12; exposed 24.
struct Timed {
  TaskKind kind;
  EngineId engine;
  double start, end;
};
const std::vector<std::vector<Timed>> kTimeline = {
    {{TaskKind::pack, EngineId::comm, 2, 4},
     {TaskKind::gemm, EngineId::compute, 0, 10},
     {TaskKind::send, EngineId::comm, 10, 25},
     {TaskKind::recv, EngineId::comm, 5, 20},
     {TaskKind::gemm, EngineId::compute, 10, 22},
     {TaskKind::reduce, EngineId::compute, 25, 32}},
    {{TaskKind::gemm, EngineId::compute, 0, 8},
     {TaskKind::recv, EngineId::comm, 0, 12},
     {TaskKind::reduce, EngineId::compute, 12, 14}},
};
constexpr double kTotal = 32;

OpDesc synthetic_desc() {
  OpDesc d;
  d.op = OpKind::gemm_rs;
  d.axis = Axis::m;
  d.m = 64;
  d.n = 64;
  d.k = 64;
  d.ranks = 2;
  return d;
}

Plan plan_of(int rank) {
  Plan p;
  p.desc = synthetic_desc();
  p.schedule = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  p.rank = rank;
  for (const Timed& t : kTimeline[std::size_t(rank)]) {
    Task task;
    task.kind = t.kind;
    task.engine = t.engine;
    if (t.kind == TaskKind::gemm) task.x = task.y = task.z = View{Buf::work, 0, 32, 32, 32};
    p.tasks.push_back(task);
  }
  return p;
}

std::vector<TaskTime> times_of(int rank) {
  std::vector<TaskTime> times;
  for (const Timed& t : kTimeline[std::size_t(rank)]) times.push_back({t.start, t.end});
  return times;
}

MachineProfile made_up_profile() {
  MachineProfile p;
  p.name = "made-up";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 50;
  p.network.bandwidth_GBps = 2;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce}) c->busbw_GBps = 2;
  return p;
}

TEST(ExecModelTimes, BreakdownOfTheSyntheticTimeline) {
  const detail::TimeBreakdown b0 = detail::breakdown(plan_of(0), times_of(0), kTotal);
  EXPECT_DOUBLE_EQ(b0.gemm_s, 22);
  EXPECT_DOUBLE_EQ(b0.compute_busy_s, 29);
  EXPECT_DOUBLE_EQ(b0.comm_s, 22);
  EXPECT_DOUBLE_EQ(b0.total_s, 32);
  EXPECT_DOUBLE_EQ(b0.exposed_s, 10);
  const detail::TimeBreakdown b1 = detail::breakdown(plan_of(1), times_of(1), kTotal);
  EXPECT_DOUBLE_EQ(b1.gemm_s, 8);
  EXPECT_DOUBLE_EQ(b1.compute_busy_s, 10);
  EXPECT_DOUBLE_EQ(b1.comm_s, 12);
  EXPECT_DOUBLE_EQ(b1.exposed_s, 24);
}

// The CPU executor's RunStats are run_stats(breakdown(plan, task times, call time)), reusing one
// accumulator across calls; the bench records exposed_seconds(total_s, gemm_s) of them.
TEST(ExecModelTimes, ExecutorStatsAndTheBenchExposedTime) {
  detail::TimeAccumulator scratch;
  for (int call = 0; call < 2; ++call) {  // a second call must not see the first one's spans
    const RunStats s = detail::run_stats(detail::breakdown(plan_of(0), times_of(0), kTotal, scratch));
    EXPECT_DOUBLE_EQ(s.gemm_s, 22);
    EXPECT_DOUBLE_EQ(s.busy_s, 29);
    EXPECT_DOUBLE_EQ(s.comm_s, 22);
    EXPECT_DOUBLE_EQ(s.total_s, 32);
    EXPECT_DOUBLE_EQ(s.progress_cpu_s, 0);
    EXPECT_DOUBLE_EQ(detail::exposed_seconds(s.total_s, s.gemm_s), 10);
  }
}

TEST(ExecModelTimes, SimulatorBusyTimesAndLosses) {
  SimResult r;
  r.plans = {plan_of(0), plan_of(1)};
  r.times = {times_of(0), times_of(1)};
  r.makespan_s = kTotal;
  detail::fill_busy_times(r);
  ASSERT_EQ(r.compute_busy_s.size(), 2u);
  EXPECT_DOUBLE_EQ(r.compute_busy_s[0], 29);
  EXPECT_DOUBLE_EQ(r.compute_busy_s[1], 10);
  EXPECT_DOUBLE_EQ(r.comm_busy_s[0], 22);
  EXPECT_DOUBLE_EQ(r.comm_busy_s[1], 12);
  // As its own serial baseline: rank 0 finishes last, so G = 22, M = 22, and exposed is the
  // measured definition of the same timeline.
  const SimLosses l = detail::sim_losses(r, r, made_up_profile(), {});
  EXPECT_DOUBLE_EQ(l.gemm_alone_s, 22);
  EXPECT_DOUBLE_EQ(l.comm_alone_s, 22);
  EXPECT_DOUBLE_EQ(l.serial_s, 32);
  EXPECT_DOUBLE_EQ(l.exposed_comm_s, 10);
  EXPECT_NEAR(l.gemm_alone_s + l.dil_s + l.cil_s + l.exposed_comm_s, kTotal, 1e-12);
}

// The CUDA runner's path: the same timeline as stream operations (2 compute streams and one
// communication stream per rank); the group reports the largest of each field over the ranks.
TEST(ExecModelTimes, StreamProgramStatsOfTheCudaRunner) {
  StreamProgram program;
  program.ranks = 2;
  program.compute_streams = 2;
  std::vector<TaskTime> times;
  for (int rank = 0; rank < 2; ++rank) {
    int gemms = 0;
    for (const Timed& t : kTimeline[std::size_t(rank)]) {
      StreamOp op;
      op.rank = rank;
      op.kind = t.kind == TaskKind::gemm ? StreamOpKind::gemm : t.kind == TaskKind::reduce ? StreamOpKind::add : StreamOpKind::copy;
      op.stream = program.stream_of(rank, t.engine, t.kind == TaskKind::gemm ? gemms++ : 0);
      program.ops.push_back(op);
      times.push_back({t.start, t.end});
    }
  }
  const RunStats s = detail::stream_program_stats(program, times, kTotal);
  EXPECT_DOUBLE_EQ(s.gemm_s, 22);
  EXPECT_DOUBLE_EQ(s.busy_s, 29);
  EXPECT_DOUBLE_EQ(s.comm_s, 22);
  EXPECT_DOUBLE_EQ(s.total_s, 32);
  EXPECT_DOUBLE_EQ(detail::exposed_seconds(s.total_s, s.gemm_s), 10);
}

// A real prediction with reductions (gemm_rs, ring): exposed is makespan - GEMM time of the
// slowest rank, so the losses add up to the makespan.
TEST(ExecModelTimes, PredictedExposedTimeIsTheMeasuredDefinition) {
  OpDesc d = synthetic_desc();
  d.m = d.n = 512;
  d.k = 256;
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const SimResult r = simulate(d, ring, made_up_profile());
  int slowest = -1;  // the first rank whose last task ends at the makespan, as the losses take it
  for (int rank = 1; rank >= 0; --rank)
    for (const TaskTime& t : r.times[std::size_t(rank)])
      if (t.end == r.makespan_s) slowest = rank;
  ASSERT_GE(slowest, 0);
  double gemm = 0, reduce = 0;
  const Plan& plan = r.plans[std::size_t(slowest)];
  for (std::size_t t = 0; t < plan.tasks.size(); ++t) {
    const double span = r.times[std::size_t(slowest)][t].end - r.times[std::size_t(slowest)][t].start;
    if (plan.tasks[t].kind == TaskKind::gemm) gemm += span;
    if (plan.tasks[t].kind == TaskKind::reduce) reduce += span;
  }
  ASSERT_GT(reduce, 0);  // the case must have reductions, or both definitions agree
  const SimLosses& l = r.losses;
  EXPECT_NEAR(l.exposed_comm_s, r.makespan_s - gemm, 1e-12);
  EXPECT_NEAR(l.gemm_alone_s + l.dil_s + l.cil_s + l.exposed_comm_s, r.makespan_s, 1e-12);
  EXPECT_DOUBLE_EQ(r.compute_busy_s[std::size_t(slowest)], gemm + reduce);
}

// simulate() with the serial baseline passed in gives exactly what it gives alone.
TEST(ExecModelTimes, SimulateWithAPrecomputedSerialBaseline) {
  const OpDesc d = synthetic_desc();
  const MachineProfile p = made_up_profile();
  const SimResult serial = simulate(d, serial_schedule(), p);
  for (const char* text : {"serial", "overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring",
                           "overlap=chunk,chunks=4,split=1d,data=uniform,fusion=unfused,engine=thread,algo=coll"}) {
    const Schedule s = std::string(text) == "serial" ? serial_schedule() : *Schedule::parse(text);
    const SimResult alone = simulate(d, s, p), with = simulate(d, s, p, {}, serial);
    EXPECT_EQ(with.makespan_s, alone.makespan_s) << text;
    EXPECT_EQ(with.losses.gemm_alone_s, alone.losses.gemm_alone_s) << text;
    EXPECT_EQ(with.losses.comm_alone_s, alone.losses.comm_alone_s) << text;
    EXPECT_EQ(with.losses.serial_s, alone.losses.serial_s) << text;
    EXPECT_EQ(with.losses.dil_s, alone.losses.dil_s) << text;
    EXPECT_EQ(with.losses.cil_s, alone.losses.cil_s) << text;
    EXPECT_EQ(with.losses.exposed_comm_s, alone.losses.exposed_comm_s) << text;
    EXPECT_EQ(with.losses.overhead_s, alone.losses.overhead_s) << text;
    EXPECT_EQ(with.compute_busy_s, alone.compute_busy_s) << text;
  }
  // A baseline of another op is refused, not silently compared against.
  OpDesc other = d;
  other.m = 128;
  try {
    simulate(other, serial_schedule(), p, {}, serial);
    FAIL() << "a foreign baseline was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("serial baseline"), std::string::npos) << e.what();
  }
}

// A bench variant whose slowest-rank medians are those of one call, as case_record gets them.
measure::VariantResult variant_of(const std::string& kind, const std::string& schedule, double total_s, double gemm_s) {
  measure::VariantResult v;
  v.kind = kind;
  v.schedule = v.name = schedule;
  v.total = {total_s, total_s, total_s};
  v.gemm = {gemm_s, gemm_s, gemm_s};
  return v;
}

// The bench's record of a variant whose call is the timeline's rank 0 (the slower one): its
// exposed time is the executor's, 10 s.
TEST(ExecModelTimes, BenchRecordExposedTime) {
  const RunStats s = detail::run_stats(detail::breakdown(plan_of(0), times_of(0), kTotal));
  measure::CaseResult r;
  r.desc = synthetic_desc();
  r.gemm_alone = r.comm_alone = {1, 1, 1};
  r.variants = {variant_of("serial", "serial", 40, 20), variant_of("naive", "naive:chunks=4", 40, 20),
                variant_of("unfused", "serial-ring", 30, 20),
                variant_of("cofuse", plan_of(0).schedule.to_string(), s.total_s, s.gemm_s)};
  const nlohmann::ordered_json record = measure::case_record({}, measure::BenchCase{}, 0, r, r.variants[3]);
  EXPECT_DOUBLE_EQ(record["metrics"]["exposed_ms"].get<double>(), 10e3);
  EXPECT_DOUBLE_EQ(record["metrics"]["gemm_in_run_ms"].get<double>(), 22e3);
}

// A run that went exactly as predicted, recorded by the bench and read back by `report
// --predict`: the measured and predicted exposed times are one number (they were not when the
// simulator counted reductions as busy), and so are the totals.
TEST(ExecModelTimes, ReportComparesExposedTimeOfOneMeaning) {
  OpDesc d = synthetic_desc();
  d.m = d.n = 512;
  d.k = 256;
  const MachineProfile profile = made_up_profile();
  const Schedule ring = *Schedule::parse("overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused,engine=thread,algo=ring");
  const SimResult sim = simulate(d, ring, profile);
  // The bench takes the slowest rank's total and GEMM time of each call.
  double gemm_s = 0;
  for (std::size_t rank = 0; rank < sim.plans.size(); ++rank)
    gemm_s = std::max(gemm_s, detail::breakdown(sim.plans[rank], sim.times[rank], sim.makespan_s).gemm_s);
  measure::CaseResult r;
  r.desc = d;
  r.gemm_alone = r.comm_alone = {1, 1, 1};
  r.variants = {variant_of("serial", "serial", 1, 1), variant_of("naive", "naive:chunks=4", 1, 1),
                variant_of("unfused", "serial-ring", 1, 1), variant_of("cofuse", ring.to_string(), sim.makespan_s, gemm_s)};
  measure::RecordContext ctx;
  ctx.run = {{"tile_rows", 64}};
  ctx.machine = {{"link", {{"description", "made-up"}}}};
  const std::vector<nlohmann::ordered_json> records = {measure::case_record(ctx, measure::BenchCase{}, 0, r, r.variants[3])};
  const std::vector<measure::Prediction> p = measure::predict_records(records, profile);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NEAR(p[0].error(), 0, 1e-12);
  EXPECT_NEAR(p[0].measured_exposed_ms, p[0].predicted_exposed_ms, 1e-9);
  EXPECT_NEAR(p[0].predicted_exposed_ms, sim.losses.exposed_comm_s * 1e3, 1e-12);
}

TEST(ExecModelTimes, CoveredSecondsIsTheLengthOfTheUnion) {
  std::vector<std::pair<double, double>> spans = {{5, 20}, {2, 4}, {10, 25}, {6, 7}, {30, 30}, {-3, -1}};
  EXPECT_DOUBLE_EQ(detail::covered_seconds(spans), 2 + 2 + 20);  // [-3,-1] [2,4] [5,25]
  std::vector<std::pair<double, double>> none;
  EXPECT_DOUBLE_EQ(detail::covered_seconds(none), 0);
}

TEST(ExecModelTimes, BusFactor) {
  EXPECT_DOUBLE_EQ(detail::bus_factor(Collective::allgather, 4), 0.75);
  EXPECT_DOUBLE_EQ(detail::bus_factor(Collective::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(detail::bus_factor(Collective::allreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(detail::bus_factor(Collective::allreduce, 1), 0);
  EXPECT_STREQ(detail::bus_factor_text(Collective::allgather), "(P-1)/P");
  EXPECT_STREQ(detail::bus_factor_text(Collective::reduce_scatter), "(P-1)/P");
  EXPECT_STREQ(detail::bus_factor_text(Collective::allreduce), "2(P-1)/P");
}

}  // namespace
}  // namespace cofuse
