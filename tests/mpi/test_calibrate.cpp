// Calibration at first use (include/cofuse/model/calibrate.hpp) on real ranks: it measures once and
// is reused; every rank ends with the same profile; a corrupt, foreign or stale file, or ranks
// that hold different files, are measured again with a warning and never trusted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cofuse/model/calibrate.hpp"
#include "cofuse/config.hpp"
#include "cofuse/model/planner.hpp"
#include "mpi_test_util.hpp"
#include "tune/calibration_cache.hpp"

namespace cofuse {
namespace {

namespace fs = std::filesystem;

// The profile every rank holds, as text, must be rank 0's.
void expect_same_everywhere(const Calibration& c) {
  const std::vector<std::string> all = test::allgather_strings(to_json(c.profile));
  for (std::size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " planned with another profile";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Options for a test that must see its file reused: shared memory's quick check swings far more
// than the default tolerance on a loaded 2-core host (1 to 16 GB/s seen), and a test's reuse must
// not depend on the load of the tests beside it. The stale case below moves the kept check by 1e6.
CalibrateOptions reusing(const std::string& dir) {
  CalibrateOptions o;
  o.cache_dir = dir;
  o.check_tolerance = 100;
  return o;
}

// Rewrites the kept calibration (rank 0 only; the others share the directory) with `edit`.
void edit_file(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  if (test::world_rank() == 0) {
    nlohmann::json j = nlohmann::json::parse(slurp(path));
    edit(j);
    std::ofstream(path) << j.dump(2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Calibrate, MeasuresOnceThenReusesAndEveryRankAgrees) {
  const test::SharedTempDir temp("cofuse-calibrate-reuse");
  const std::string& dir = temp.path();
  CalibrateOptions o = reusing(dir);
  const Calibration first = calibrate(MPI_COMM_WORLD, o);
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(first.warning.empty()) << first.warning;
  EXPECT_TRUE(first.profile.validate().ok());
  EXPECT_TRUE(first.profile.validated);
  EXPECT_EQ(first.profile.name.rfind("calibrated-", 0), 0u);
  EXPECT_FALSE(first.cache_file.empty());
  EXPECT_TRUE(fs::exists(first.cache_file));
  EXPECT_NE(first.signature.find("ranks=" + std::to_string(test::world_size())), std::string::npos) << first.signature;
  // Kept per CPU too: a host name can outlive its hardware.
  EXPECT_NE(first.signature.find(" cpu="), std::string::npos) << first.signature;
  // What the measurement's time went on.
  EXPECT_NE(first.summary().find("the GEMM table"), std::string::npos) << first.summary();
  EXPECT_FALSE(first.profile.compute.measured.empty());
  expect_same_everywhere(first);

  const Calibration second = calibrate(MPI_COMM_WORLD, o);
  EXPECT_TRUE(second.from_cache) << second.warning;
  EXPECT_EQ(second.profile, first.profile);
  EXPECT_EQ(second.measured_at, first.measured_at);
  // Reusing costs the quick check, not a measurement.
  EXPECT_LT(second.this_call_s, first.this_call_s);
  expect_same_everywhere(second);
  // The explanation names what was measured and where it is kept.
  EXPECT_NE(second.summary().find("reused from " + second.cache_file), std::string::npos) << second.summary();
  EXPECT_NE(second.summary().find("GFLOP/s"), std::string::npos);

  // Without a communicator, `cofuse plan` finds it.
  const std::optional<Calibration> offline = cached_calibration(test::world_size(), dir);
  ASSERT_TRUE(offline);
  EXPECT_EQ(offline->profile, first.profile);

  // --force measures again.
  o.use_cache = false;
  const Calibration forced = calibrate(MPI_COMM_WORLD, o);
  EXPECT_FALSE(forced.from_cache);
  expect_same_everywhere(forced);
}

// Every rank of these tests runs on this one machine (netlab's hosts too: namespaces of one
// kernel), so every rank counts all of them, and every rank holds the same answer.
TEST(Calibrate, CoreSharingCountsEveryRankOfThisMachine) {
  const measure::CoreSharing s = measure::core_sharing(MPI_COMM_WORLD);
  EXPECT_EQ(s.ranks, test::world_size());
  EXPECT_GE(s.cpus, 1);
  EXPECT_GE(s.blas_threads, 1);
  const std::vector<std::string> all = test::allgather_strings(s.text());
  for (const std::string& text : all) EXPECT_EQ(text, s.text());
}

// The timing loop's bystanders: a rank that sits a call out never makes it, and every rank
// still takes part in every barrier (no hang), and agrees on the times.
TEST(Calibrate, TimingLeavesOutTheRanksThatSitACallOut) {
  const int rank = test::world_rank();
  int pair_calls = 0, all_calls = 0;
  const std::vector<measure::Timed> timed = {
      {"pair", [&] { ++pair_calls; }, 1e-4, rank >= 2},
      {"everyone", [&] { ++all_calls; }, 0, false},
  };
  const std::vector<measure::Sampled> s =
      measure::time_interleaved(MPI_COMM_WORLD, timed, 3, [](double, const std::string&) {});
  ASSERT_EQ(s.size(), 2u);
  if (rank >= 2) {
    EXPECT_EQ(pair_calls, 0);
  } else {
    EXPECT_GE(pair_calls, 2 + 3);  // the warm-up and the estimate, then a batch of at least one a pass
  }
  EXPECT_EQ(all_calls, 2 + 3);
  EXPECT_GT(s[0].median, 0);
  const std::vector<std::string> all =
      test::allgather_strings(std::to_string(s[0].median) + " " + std::to_string(s[1].median));
  for (const std::string& text : all) EXPECT_EQ(text, all[0]);
}

// A primed call runs once untimed right before each timed sample (what a link sustains after
// the burst it lets through on idling), and its fastest sample is never above its median.
TEST(Calibrate, APrimedCallRunsOnceUntimedBeforeEachSample) {
  int primed_calls = 0, plain_calls = 0;
  const std::vector<measure::Timed> timed = {
      {"primed", [&] { ++primed_calls; }, 0, false, true},
      {"plain", [&] { ++plain_calls; }, 0, false, false},
  };
  const int passes = 5;
  const std::vector<measure::Sampled> s =
      measure::time_interleaved(MPI_COMM_WORLD, timed, passes, [](double, const std::string&) {});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(plain_calls, 2 + passes);  // the warm-up and the estimate, then one a pass
  EXPECT_EQ(primed_calls, 2 * (2 + passes));
  for (const measure::Sampled& one : s) {
    EXPECT_GE(one.fastest, 0);
    EXPECT_LE(one.fastest, one.median);
  }
}

TEST(Calibrate, ACorruptForeignOrStaleFileIsMeasuredAgainWithAWarning) {
  // A dozen calibrations: at 1 and 2 ranks only (the agreement at more is the next test's).
  if (test::world_size() > 2) GTEST_SKIP() << "runs at 1 and 2 ranks";
  const test::SharedTempDir temp("cofuse-calibrate-bad");
  const std::string& dir = temp.path();
  CalibrateOptions o = reusing(dir);
  const Calibration good = calibrate(MPI_COMM_WORLD, o);
  const std::string path = good.cache_file;
  ASSERT_FALSE(path.empty());

  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {"not JSON", {}, "corrupt"},
      {"another schema", [](nlohmann::json& j) { j["schema"] = "cofuse.profile/1"; }, "foreign"},
      {"another job's signature", [](nlohmann::json& j) { j["signature"] = "hosts=elsewhere ranks=64"; }, "foreign"},
      {"measured long ago", [](nlohmann::json& j) { j["measured_at"] = "2020-01-01T00:00:00Z"; }, "stale"},
      // Only with a link: one rank has no quick check to disagree.
      {"another link", [](nlohmann::json& j) { j["check_GBps"] = j["check_GBps"].get<double>() * 1e6; },
       "stale"},
  };
  for (const Case& c : cases) {
    if (std::string(c.name) == "another link" && test::world_size() < 2) continue;
    SCOPED_TRACE(c.name);
    if (c.edit) {
      edit_file(path, c.edit);
    } else {
      if (test::world_rank() == 0) std::ofstream(path) << "{\"schema\": \"" << measure::kCalibrationSchema << "\", \"signature\": ";
      MPI_Barrier(MPI_COMM_WORLD);
    }
    const Calibration again = calibrate(MPI_COMM_WORLD, o);
    EXPECT_FALSE(again.from_cache);
    EXPECT_NE(again.warning.find(c.problem), std::string::npos) << again.warning;
    EXPECT_TRUE(again.profile.validate().ok());
    expect_same_everywhere(again);
    // The file was replaced by a good one: the next call reuses it.
    const Calibration next = calibrate(MPI_COMM_WORLD, o);
    EXPECT_TRUE(next.from_cache) << next.warning;
  }
}

TEST(Calibrate, RanksHoldingDifferentCalibrationsStillAgree) {
  if (test::world_size() < 2 || test::world_size() > 3) GTEST_SKIP() << "runs at 2 and 3 ranks";
  // Each rank its own directory, as ranks on different hosts have; rank 1's holds another
  // (valid) calibration than the others'.
  const test::SharedTempDir temp("cofuse-calibrate-per-rank");
  const std::string& base = temp.path();
  CalibrateOptions o = reusing(base + "/rank" + std::to_string(test::world_rank()));
  const Calibration first = calibrate(MPI_COMM_WORLD, o);
  if (test::world_rank() == 1) {
    nlohmann::json j = nlohmann::json::parse(slurp(first.cache_file));
    j["measured_at"] = "2026-01-01T00:00:00Z";  // valid, but not what rank 0 holds
    j["profile"]["compute"]["peak_gflops_f64"] = 1.0;
    std::ofstream(first.cache_file) << j.dump(2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Calibration again = calibrate(MPI_COMM_WORLD, o);
  EXPECT_FALSE(again.from_cache);
  EXPECT_NE(again.warning.find("different calibrations"), std::string::npos) << again.warning;
  expect_same_everywhere(again);
  // Every rank now holds the agreed one: reused by all.
  const Calibration third = calibrate(MPI_COMM_WORLD, o);
  EXPECT_TRUE(third.from_cache) << third.warning;
  expect_same_everywhere(third);
}

TEST(Calibrate, AnUnwritableCacheIsAWarningNotAFailure) {
  // A path below a regular file cannot be a directory.
  const test::SharedTempDir temp("cofuse-calibrate-unwritable");
  const std::string& dir = temp.path();
  if (test::world_rank() == 0) std::ofstream(dir + "/file") << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  CalibrateOptions o;
  o.cache_dir = dir + "/file/below";
  const Calibration c = calibrate(MPI_COMM_WORLD, o);
  EXPECT_TRUE(c.cache_file.empty());
  EXPECT_NE(c.warning.find("could not be kept"), std::string::npos) << c.warning;
  EXPECT_TRUE(c.profile.validate().ok());
  expect_same_everywhere(c);
}

TEST(Calibrate, AutoPlansWithTheCalibrationAndSaysSo) {
  const test::SharedTempDir temp("cofuse-calibrate-auto");
  const std::string& dir = temp.path();
  CalibrateOptions o;
  o.cache_dir = dir;
  const PlanningProfile p = planning_profile(MPI_COMM_WORLD, "", o);
  ASSERT_TRUE(p.calibration);
  EXPECT_EQ(p.profile, p.calibration->profile);
  EXPECT_NE(p.source.find("Calibrated on this communicator"), std::string::npos) << p.source;
  // A named profile is loaded, not measured.
  const PlanningProfile named = planning_profile(MPI_COMM_WORLD, "8xH100-SXM", o);
  EXPECT_FALSE(named.calibration);
  EXPECT_EQ(named.profile.name, "8xH100-SXM");
  // The planner takes it like any profile.
  const OpDesc d{OpKind::gemm_rs, 64 * test::world_size(), 96, 48 * test::world_size(), DType::f32, false, false, Axis::m, test::world_size()};
  const PlanChoice choice = choose_schedule(d, p.profile);
  EXPECT_EQ(choice.profile, p.profile.name);
}

}  // namespace
}  // namespace cofuse
