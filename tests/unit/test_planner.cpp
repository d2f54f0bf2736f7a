// The planner on machine profiles made up for the purpose (no MPI, no machine): it chooses what
// the simulator predicts fastest, falls back to serial unless overlap wins by the margin,
// explains itself, and answers a repeated question from the cache its caller owns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "cofuse/model/planner.hpp"

namespace cofuse {
namespace {

MachineProfile profile(double link_GBps, double gemm_while_comm) {
  MachineProfile p;
  p.name = "made-up";
  p.compute.peak_gflops_f32 = 100;
  p.compute.peak_gflops_f64 = 50;
  p.compute.memory_GBps = 50;
  p.network.bandwidth_GBps = link_GBps;
  for (CollectiveModel* c : {&p.network.allgather, &p.network.reduce_scatter, &p.network.allreduce})
    c->busbw_GBps = link_GBps;
  p.contention.gemm_rate_while_comm = gemm_while_comm;
  return p;
}

OpDesc layer() {
  OpDesc d;
  d.op = OpKind::gemm_rs;
  d.axis = Axis::m;
  d.m = 1024;
  d.n = 1024;
  d.k = 512;
  d.ranks = 4;
  return d;
}

TEST(Planner, ChoosesTheFastestPredictionWhenOverlapPays) {
  // GEMM ~2.7 ms per rank, reduce-scatter of 4 MB at 1 GB/s ~3 ms: overlap can nearly halve it.
  const PlanChoice c = choose_schedule(layer(), profile(1.0, 1.0));
  EXPECT_NE(c.schedule.overlap, Overlap::none);
  EXPECT_EQ(c.schedule, c.candidates.front().schedule);
  EXPECT_LT(c.predicted_s, 0.97 * c.serial_s);
  for (std::size_t i = 1; i < c.candidates.size(); ++i)
    EXPECT_LE(c.candidates[i - 1].predicted_s, c.candidates[i].predicted_s * (1 + 1e-3));
  EXPECT_NE(c.why.find("so it is chosen"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("not validated"), std::string::npos) << c.why;
}

// overlap_headroom_s: the shorter of serial's GEMM and collective less one message latency. A
// layer has plenty; a decode step (one token's row) over a link of 50 us latency has none; the
// latency is the slowest link's (between hosts when the profile has two levels).
TEST(Planner, OverlapHeadroomIsSerialsShorterPartLessOneLatency) {
  MachineProfile p = profile(1.0, 1.0);
  p.network.alpha_s = 50e-6;
  const PlanChoice big = choose_schedule(layer(), p);
  const PlanCandidate* serial = nullptr;
  for (const PlanCandidate& c : big.candidates)
    if (c.schedule == serial_schedule()) serial = &c;
  ASSERT_NE(serial, nullptr);
  EXPECT_DOUBLE_EQ(overlap_headroom_s(big, p),
                   std::min(serial->losses.gemm_alone_s, serial->losses.comm_alone_s) - 50e-6);
  EXPECT_GT(overlap_headroom_s(big, p), 0.03 * big.serial_s);

  OpDesc decode = layer();
  decode.op = OpKind::gemm_ar;
  decode.axis = Axis::none;
  decode.m = 1;
  const PlanChoice step = choose_schedule(decode, p);
  EXPECT_LT(overlap_headroom_s(step, p), 0.03 * step.serial_s);

  MachineProfile hosts = p;
  hosts.network.inter_alpha_s = 80e-6;  // the slower level decides
  EXPECT_DOUBLE_EQ(overlap_headroom_s(big, hosts), overlap_headroom_s(big, p) - 30e-6);
}

TEST(Planner, FallsBackToSerialUnlessOverlapWinsByTheMargin) {
  // A fast link and a GEMM that communication slows to a crawl: nothing beats serial.
  const PlanChoice c = choose_schedule(layer(), profile(1000.0, 0.2));
  EXPECT_EQ(c.schedule, serial_schedule());
  EXPECT_EQ(c.predicted_s, c.serial_s);
  // A margin no overlap can meet forces serial too, and the reasons say so.
  PlannerOptions strict;
  strict.margin = 0.99;
  const PlanChoice s = choose_schedule(layer(), profile(1.0, 1.0), strict);
  EXPECT_EQ(s.schedule, serial_schedule());
  EXPECT_NE(s.why.find("margin"), std::string::npos) << s.why;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A process whose MPI runs below MPI_THREAD_SERIALIZED (mpi4py.rc.thread_level = "single") gets
// no schedule the CPU executor would refuse there, from the model or from a tuning database.
TEST(Planner, WithoutAProgressThreadNoCandidateNeedsOne) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_threads.json";
  OpDesc d = layer();
  d.n = 1536;  // a question no other test asked
  const MachineProfile p = profile(1.0, 1.0);
  TuningEntry e = TuningDb::key_of(d, p.name);
  e.schedule = *Schedule::parse("overlap=chunk,chunks=4");  // engine=thread
  ASSERT_TRUE(e.schedule.separate_comm_engine());
  TuningDb db;
  db.put(e);
  db.save(path);
  PlannerOptions options;
  options.tuning_db = path;
  EXPECT_TRUE(choose_schedule(d, p, options).measured);
  options.runtime.progress_thread = false;
  const PlanChoice c = choose_schedule(d, p, options);
  EXPECT_FALSE(c.measured);
  EXPECT_NE(c.schedule.overlap, Overlap::none);  // overlap still pays: fused schedules remain
  for (const PlanCandidate& k : c.candidates) EXPECT_FALSE(k.schedule.separate_comm_engine()) << k.name;
  EXPECT_TRUE(has(c.why, "MPI_THREAD_SERIALIZED")) << c.why;
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());  // beside it since the save (TuningDb::save)
}

// A CPU profile plans for the CPU executor, which runs no f16 GEMM: an f16 question gets serial
// and the reason (can_run's), never an empty candidate list, and names its rate. (bf16 runs.)
TEST(Planner, A16BitQuestionOnACpuProfileGetsSerialAndWhy) {
  for (DType dtype : {DType::f16}) {
    SCOPED_TRACE(to_string(dtype));
    OpDesc d = layer();
    d.dtype = dtype;
    MachineProfile p = profile(1.0, 1.0);
    p.compute.peak_gflops_16 = 400;
    const PlanChoice c = choose_schedule(d, p);
    EXPECT_EQ(c.backend, Backend::cpu_mpi);
    EXPECT_EQ(c.schedule, serial_schedule());
    ASSERT_EQ(c.candidates.size(), 1u);
    EXPECT_EQ(c.predicted_s, c.serial_s);
    EXPECT_GT(c.serial_s, 0);
    EXPECT_TRUE(has(c.why, "for the CPU executor (cpu_mpi)")) << c.why;
    EXPECT_TRUE(has(c.why, "does not run this op at all (dtype " + std::string(to_string(dtype)) +
                               " runs on the CUDA executor")) << c.why;
    EXPECT_TRUE(has(c.why, std::string(to_string(dtype)) + " at 400.0 GFLOP/s peak per rank (compute.peak_gflops_16)"))
        << c.why;
  }
}

// bf16 runs on the CPU executor (oneDNN): a CPU profile plans it like f32, with every candidate,
// its GEMMs at the profile's measured 16-bit rate.
TEST(Planner, Bf16OnACpuProfilePlansAtTheSixteenBitRate) {
  OpDesc d = layer();
  d.dtype = DType::bf16;
  MachineProfile p = profile(1.0, 1.0);
  p.compute.peak_gflops_16 = 4 * p.compute.peak_gflops_f32;
  p.sources["compute.peak_gflops_16"] = "measured: a test";
  const PlanChoice c = choose_schedule(d, p);
  EXPECT_EQ(c.backend, Backend::cpu_mpi);
  EXPECT_GT(c.candidates.size(), 10u);
  EXPECT_TRUE(has(c.why, "bf16 at ")) << c.why;
  EXPECT_TRUE(has(c.why, "(compute.peak_gflops_16")) << c.why;
  OpDesc f32 = d;
  f32.dtype = DType::f32;
  EXPECT_LT(c.serial_s, choose_schedule(f32, p).serial_s) << "bf16 GEMMs at 4x the rate, half the bytes";
}

// A GPU profile plans for the CUDA backend it names: a bf16 or f16 layer on 8xH100-SXM gets
// overlapped candidates, every one of them a schedule cuda::Group runs, and the reasons name
// the 16-bit rate the GEMMs were timed at.
TEST(Planner, A16BitQuestionOnAGpuProfileGetsOverlappedCandidates) {
  const MachineProfile h100 = load_profile("8xH100-SXM");
  ASSERT_EQ(h100.backend, Backend::cuda_nccl);
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(to_string(dtype));
    OpDesc d;
    d.op = OpKind::gemm_rs;
    d.axis = Axis::m;
    d.m = d.n = d.k = 8192;
    d.ranks = 8;
    d.dtype = dtype;
    PlannerOptions options;
    options.consult_tuning_db = false;  // whatever $COFUSE_TUNING_DB holds
    const PlanChoice c = choose_schedule(d, h100, options);
    EXPECT_EQ(c.backend, Backend::cuda_nccl);
    int overlapped = 0;
    for (const PlanCandidate& k : c.candidates) {
      if (k.schedule == serial_schedule()) continue;
      ++overlapped;
      EXPECT_TRUE(can_run(Backend::cuda_nccl, d, k.schedule).ok()) << k.name;
      EXPECT_EQ(k.schedule.driver, CommDriver::sm) << k.name;
    }
    EXPECT_GT(overlapped, 10);
    EXPECT_TRUE(has(c.why, "for the CUDA backend over NCCL (cuda_nccl)")) << c.why;
    EXPECT_TRUE(has(c.why, std::string(to_string(dtype)) +
                               " at 989.4 TFLOP/s peak per rank (compute.peak_gflops_16: datasheet)")) << c.why;
    EXPECT_FALSE(has(c.why, "does not run")) << c.why;
  }
}

// A GPU profile without a 16-bit rate times bf16 GEMMs as f32, and says so.
TEST(Planner, A16BitQuestionWithoutA16BitRateSaysItRunsAsF32) {
  OpDesc d = layer();
  d.dtype = DType::bf16;
  MachineProfile p = profile(1.0, 1.0);
  p.backend = Backend::cuda_nccl;
  const PlanChoice c = choose_schedule(d, p);
  EXPECT_GT(c.candidates.size(), 1u);
  EXPECT_TRUE(has(c.why, "bf16 at the f32 rate, 100.0 GFLOP/s peak per rank: the profile has no 16-bit rate")) << c.why;
}

// A caller that runs on a given executor names it: a GPU profile's numbers, the CPU's schedules.
TEST(Planner, TheCallerMayNameTheBackend) {
  const MachineProfile h100 = load_profile("8xH100-SXM");
  OpDesc d;
  d.op = OpKind::gemm_rs;
  d.axis = Axis::m;
  d.m = d.n = 4096;
  d.k = 8192;
  d.ranks = 8;
  PlannerOptions cpu;
  cpu.consult_tuning_db = false;
  cpu.backend = Backend::cpu_mpi;
  EXPECT_EQ(planning_backend(h100, cpu), Backend::cpu_mpi);
  EXPECT_EQ(planning_backend(h100), Backend::cuda_nccl);
  PlannerCache cache;
  const PlanChoice c = choose_schedule(d, h100, cpu, &cache);
  EXPECT_EQ(c.backend, Backend::cpu_mpi);
  for (const PlanCandidate& k : c.candidates) EXPECT_TRUE(can_run(Backend::cpu_mpi, d, k.schedule).ok()) << k.name;
  // Another backend is another question.
  PlannerOptions gpu = cpu;
  gpu.backend.reset();
  const PlanChoice g = choose_schedule(d, h100, gpu, &cache);
  EXPECT_FALSE(g.from_cache);
  EXPECT_EQ(g.backend, Backend::cuda_nccl);
  EXPECT_NE(c.candidates.size(), g.candidates.size());
}

TEST(Planner, RepeatedQuestionsComeFromTheCache) {
  const OpDesc d = layer();
  const MachineProfile p = profile(2.0, 0.9);
  PlannerCache cache;  // the test's own: no other test's questions are in it
  // Whether the answer came from the cache is said by the planner itself, not inferred from
  // the wall clock (which a busy machine can make say anything).
  const PlanChoice first = choose_schedule(d, p, {}, &cache);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(cache.size(), 1u);
  const PlanChoice again = choose_schedule(d, p, {}, &cache);
  EXPECT_TRUE(again.from_cache) << "a lookup, not a second round of simulations";
  EXPECT_EQ(first.schedule, again.schedule);
  EXPECT_EQ(first.candidates.size(), again.candidates.size());
  EXPECT_EQ(first.why, again.why);
  // Any change to the question is a new question: another profile, another margin, another poll.
  MachineProfile slower = p;
  slower.network.bandwidth_GBps = 1.0;
  EXPECT_FALSE(choose_schedule(d, slower, {}, &cache).from_cache);
  PlannerOptions other;
  other.margin = 0.2;
  EXPECT_FALSE(choose_schedule(d, p, other, &cache).from_cache);
  other = {};
  other.sim.poll_us = 50;
  EXPECT_FALSE(choose_schedule(d, p, other, &cache).from_cache);
  EXPECT_EQ(cache.size(), 4u);
  // Without a cache nothing is kept: the same question simulates again.
  EXPECT_FALSE(choose_schedule(d, p).from_cache);
  EXPECT_FALSE(choose_schedule(d, p).from_cache);
  // Another cache knows none of these; a cleared one forgets them.
  PlannerCache other_cache;
  EXPECT_FALSE(choose_schedule(d, p, {}, &other_cache).from_cache);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(choose_schedule(d, p, {}, &cache).from_cache);
  EXPECT_TRUE(choose_schedule(d, p, {}, &cache).from_cache);
}

TEST(Planner, ACacheSharedByThreadsKeepsOneAnswerPerQuestion) {
  const MachineProfile p = profile(2.0, 0.9);
  PlannerCache cache;
  std::vector<std::thread> threads;
  std::vector<PlanChoice> answers(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      OpDesc d = layer();
      d.m = 1024 * (1 + t % 2);  // two questions, each asked by two threads
      answers[std::size_t(t)] = choose_schedule(d, p, {}, &cache);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(answers[0].schedule, answers[2].schedule);
  EXPECT_EQ(answers[1].schedule, answers[3].schedule);
}

TEST(Planner, SeedHeuristicsFollowTheirRules) {
  OpDesc d = layer();
  // auto_tune: M/K = 2 -> 1d unfused; select_schedule on a slow link (small ts) -> hetero-unfused.
  HeuristicChoice h = ficco_heuristic_schedule(d, profile(1000.0, 1.0));
  EXPECT_EQ(h.schedule.split, Split::d1);
  EXPECT_EQ(h.schedule.fusion, Fusion::unfused);
  EXPECT_NE(h.why.find("auto_tune: M/K = 2"), std::string::npos) << h.why;
  // M/K > 4 -> 1d fused.
  d.m = 4096;
  d.k = 512;
  h = ficco_heuristic_schedule(d, profile(1.0, 1.0));
  EXPECT_EQ(h.schedule.fusion, Fusion::fused);
  EXPECT_EQ(h.schedule.driver, CommDriver::inline_);
  EXPECT_TRUE(h.schedule.validate_for(d).ok());
  // On a GPU backend the seed's fused pick runs unfused with the GPU's engine, and says so.
  MachineProfile gpu = profile(1.0, 1.0);
  gpu.backend = Backend::cuda_nccl;
  h = ficco_heuristic_schedule(d, gpu);
  EXPECT_EQ(h.schedule.fusion, Fusion::unfused);
  EXPECT_EQ(h.schedule.driver, CommDriver::sm);
  EXPECT_TRUE(can_run(Backend::cuda_nccl, d, h.schedule).ok()) << h.schedule.to_string();
  EXPECT_TRUE(has(h.why, "fused is a CPU technique: unfused on cuda_nccl")) << h.why;
}

}  // namespace
}  // namespace cofuse

namespace cofuse {
namespace {

TEST(TuningDb, NearestBucketRoundTripAndCorruptFiles) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_test.json";
  OpDesc d = layer();  // M = 1024: bucket 10
  TuningEntry e = TuningDb::key_of(d, "made-up");
  e.schedule = *Schedule::parse("hetero-unfused-1d");
  e.m = d.m;
  e.n = d.n;
  e.k = d.k;
  e.winner_ms = 1;
  e.serial_ms = 2;
  TuningDb db;
  db.put(e);
  e.schedule = *Schedule::parse("uniform-fused-1d");
  db.put(e);  // same key: replaces
  ASSERT_EQ(db.entries().size(), 1u);
  db.save(path);
  std::string warning;
  const TuningDb back = TuningDb::load(path, &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  ASSERT_TRUE(back.lookup(d, "made-up"));
  EXPECT_EQ(back.lookup(d, "made-up")->schedule, *Schedule::parse("uniform-fused-1d"));
  EXPECT_FALSE(back.lookup(d, "another-machine"));
  d.m = 2048;  // one bucket away: the nearest entry
  EXPECT_TRUE(back.lookup(d, "made-up"));
  d.m = 8192;  // three buckets away: not trusted, the model decides
  EXPECT_FALSE(back.lookup(d, "made-up"));
  d.m = 1024;
  d.ranks = 8;  // another rank count
  EXPECT_FALSE(back.lookup(d, "made-up"));

  std::ofstream(path) << "{\"schema\": \"cofuse.tuning/1\", \"entries\": [{\"machine\": 3}]}";
  const TuningDb bad = TuningDb::load(path, &warning);
  EXPECT_TRUE(bad.entries().empty());
  EXPECT_NE(warning.find("ignoring tuning database"), std::string::npos) << warning;
  // Numbers no field can hold (a float where a count belongs, a bucket out of range, a huge
  // provenance size the fuzzer found): the file is ignored, never undefined behaviour.
  const std::string good_entry = R"({"machine": "m", "ranks": 2, "op": "gemm_rs", "dtype": "f32", "axis": "m",
      "trans_a": false, "trans_b": false, "m_bucket": 10, "n_bucket": 10, "k_bucket": 8,
      "schedule": "serial", "provenance": {"m": 1024}})";
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"m\": 1024", "\"m\": 109999999999999999999924"}, {"\"ranks\": 2", "\"ranks\": 1e30"},
           {"\"m_bucket\": 10", "\"m_bucket\": 99999"}, {"\"m\": 1024", "\"m\": 18446744073709551615"}}) {
    std::string entry = good_entry;
    entry.replace(entry.find(from), from.size(), to);
    std::ofstream(path) << "{\"schema\": \"cofuse.tuning/1\", \"entries\": [" + entry + "]}";
    warning.clear();
    EXPECT_TRUE(TuningDb::load(path, &warning).entries().empty()) << to;
    EXPECT_NE(warning.find("ignoring tuning database"), std::string::npos) << warning;
  }
  std::ofstream(path) << "{\"schema\": \"cofuse.tuning/1\", \"entries\": [" + good_entry + "]}";
  EXPECT_EQ(TuningDb::load(path, &warning).entries().size(), 1u);
  std::ofstream(path) << "{\"schema\": \"cofuse.profile/1\"}";
  warning.clear();
  TuningDb::load(path, &warning);
  EXPECT_NE(warning.find("not a cofuse tuning database"), std::string::npos) << warning;
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());  // beside it since the save (TuningDb::save)
  EXPECT_TRUE(TuningDb::load(path, &warning).entries().empty());  // missing: empty, fine
}

TEST(Planner, AMeasuredWinnerOutranksTheModel) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_planner.json";
  OpDesc d = layer();
  d.n = 2048;  // a question no other test asked
  const MachineProfile p = profile(1.0, 1.0);
  TuningEntry e = TuningDb::key_of(d, p.name);
  e.schedule = serial_schedule();
  TuningDb db;
  db.put(e);
  db.save(path);
  PlannerOptions options;
  options.tuning_db = path;
  const PlanChoice c = choose_schedule(d, p, options);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.schedule, serial_schedule());
  EXPECT_NE(c.why.find("Measured on this machine"), std::string::npos) << c.why;
  options.consult_tuning_db = false;
  EXPECT_FALSE(choose_schedule(d, p, options).measured);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());  // beside it since the save (TuningDb::save)
}

// A winner measured on the CPU executor (cofuse tune) is no answer for a backend that cannot run it.
TEST(Planner, AMeasuredWinnerTheBackendCannotRunIsIgnored) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_backend.json";
  OpDesc d = layer();
  d.n = 512;  // a question no other test asked
  MachineProfile p = profile(1.0, 1.0);
  p.backend = Backend::cuda_nccl;
  TuningEntry e = TuningDb::key_of(d, p.name);
  e.schedule = *Schedule::parse("uniform-fused-1d");  // engine=inline: a CPU engine
  TuningDb db;
  db.put(e);
  db.save(path);
  PlannerOptions options;
  options.tuning_db = path;
  const PlanChoice c = choose_schedule(d, p, options);
  EXPECT_FALSE(c.measured);
  EXPECT_TRUE(can_run(Backend::cuda_nccl, d, c.schedule).ok()) << c.schedule.to_string();
  options.backend = Backend::cpu_mpi;
  EXPECT_TRUE(choose_schedule(d, p, options).measured);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());  // beside it since the save (TuningDb::save)
}

}  // namespace
}  // namespace cofuse
