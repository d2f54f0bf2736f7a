// The model learns from what it measured (ModelCorrection, cofuse/model/tuning.hpp): measured /
// predicted ratios kept in the tuning database correct the planner's predictions of that kind
// of schedule on that machine; the rule is a shrunk median, so one run moves a prediction part
// of the way, several move it most of the way, and a noisy outlier does not drag it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cofuse/model/planner.hpp"
#include "cofuse/model/profile.hpp"
#include "cofuse/model/tuning.hpp"

namespace cofuse {
namespace {

const OpDesc kDesc{OpKind::gemm_rs, 2048, 1024, 256, DType::f32, false, false, Axis::m, 2};

ModelCorrection with(std::vector<double> ratios) {
  ModelCorrection c;
  c.ratios = std::move(ratios);
  return c;
}

TEST(ModelCorrection, ShrunkMedianOfTheRatios) {
  EXPECT_DOUBLE_EQ(with({}).factor(), 1.0);
  // One run of 1.5x: a third of the way in log terms (w = 1 / 3).
  EXPECT_NEAR(with({1.5}).factor(), std::pow(1.5, 1.0 / 3), 1e-12);
  // Eight runs agreeing: most of the way (w = 0.8).
  EXPECT_NEAR(with(std::vector<double>(8, 1.5)).factor(), std::pow(1.5, 0.8), 1e-12);
  // Bounded: a broken measurement cannot make the model say anything.
  EXPECT_DOUBLE_EQ(with(std::vector<double>(16, 50.0)).factor(), ModelCorrection::kMax);
  EXPECT_DOUBLE_EQ(with(std::vector<double>(16, 0.01)).factor(), ModelCorrection::kMin);
}

TEST(ModelCorrection, ANoisyOutlierDoesNotDragIt) {
  std::vector<double> ratios(6, 1.1);
  const double steady = with(ratios).factor();
  ratios.push_back(5.0);  // one run that a neighbour's job slowed five-fold
  const double with_outlier = with(ratios).factor();
  EXPECT_LT(std::abs(std::log(with_outlier / steady)), 0.03) << steady << " -> " << with_outlier;
  EXPECT_LT(with_outlier, 1.1);
}

// A calibration measured again is the same machine for its corrections (not for its winners).
TEST(ModelCorrection, ACalibrationMeasuredAgainKeepsItsCorrections) {
  EXPECT_EQ(correction_machine("calibrated-193ba172-8c46"), "calibrated-193ba172");
  EXPECT_EQ(correction_machine("this-host-shm"), "this-host-shm");
  TuningDb db;
  db.add_evidence(kDesc, "calibrated-193ba172-8c46", "unfused coll", 1.2, "test");
  ASSERT_NE(db.correction(kDesc, "calibrated-193ba172-0b4f", "unfused coll"), nullptr);
  EXPECT_EQ(db.correction(kDesc, "calibrated-aaaaaaaa-8c46", "unfused coll"), nullptr);
}

// Evidence is kept by M bucket: a shape takes its own bucket's correction, else one bucket away,
// else none (the model errs differently at decode sizes).
TEST(ModelCorrection, OnlyNearShapesShareACorrection) {
  TuningDb db;
  db.add_evidence(kDesc, "m1", "unfused coll", 1.2, "test");  // M = 2048: bucket 11
  OpDesc near = kDesc, far = kDesc;
  near.m = 4096;  // bucket 12
  far.m = 64;     // bucket 6
  EXPECT_NE(db.correction(kDesc, "m1", "unfused coll"), nullptr);
  EXPECT_NE(db.correction(near, "m1", "unfused coll"), nullptr);
  EXPECT_EQ(db.correction(far, "m1", "unfused coll"), nullptr);
  OpDesc other_axis = kDesc;
  other_axis.axis = Axis::n;
  EXPECT_EQ(db.correction(other_axis, "m1", "unfused coll"), nullptr);  // another layout errs otherwise
  db.add_evidence(near, "m1", "unfused coll", 0.8, "test");
  EXPECT_EQ(db.correction(near, "m1", "unfused coll")->ratios, std::vector<double>{0.8});  // its own first
}

TEST(ModelCorrection, FamiliesByWayOfMovingTheData) {
  EXPECT_EQ(correction_family(serial_schedule()), "unfused coll");
  EXPECT_EQ(correction_family(serial_ring_schedule()), "unfused ring");
  EXPECT_EQ(correction_family(*Schedule::parse("shard")), "overlapped ring");
  EXPECT_EQ(correction_family(*Schedule::parse("shard,topo=2level")), "overlapped ring 2level");
}

// The evidence is kept by key, the newest kKept ratios, and save() appends this process's
// evidence to the file's: two processes that measured at once both count.
TEST(ModelCorrection, EvidenceIsAppendedUnderTheLock) {
  const std::string path = ::testing::TempDir() + "cofuse_corrections_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  TuningDb a = TuningDb::load(path), b = TuningDb::load(path);
  a.add_evidence(kDesc, "m1", "overlapped ring", 1.2, "online tuning in test a", "rev");
  b.add_evidence(kDesc, "m1", "overlapped ring", 1.4, "online tuning in test b", "rev");
  b.add_evidence(kDesc, "m1", "overlapped ring", -1, "ignored", "rev");  // not a ratio
  a.save(path);
  b.save(path);
  const TuningDb read = TuningDb::load(path);
  const ModelCorrection* c = read.correction(kDesc, "m1", "overlapped ring");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->ratios, (std::vector<double>{1.2, 1.4}));
  EXPECT_EQ(c->measured_by, "online tuning in test b");
  EXPECT_EQ(read.correction(kDesc, "m2", "overlapped ring"), nullptr);  // another machine's is not ours
  TuningDb many = TuningDb::load(path);
  for (int i = 0; i < 40; ++i) many.add_evidence(kDesc, "m1", "overlapped ring", 1.0 + i, "loop", "rev");
  many.save(path);
  EXPECT_EQ(TuningDb::load(path).correction(kDesc, "m1", "overlapped ring")->ratios.size(), ModelCorrection::kKept);
  EXPECT_DOUBLE_EQ(TuningDb::load(path).correction(kDesc, "m1", "overlapped ring")->ratios.back(), 40.0);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

// A malformed correction makes the file malformed: ignored with a warning, as any bad entry.
TEST(ModelCorrection, AMalformedCorrectionIsAMalformedFile) {
  const std::string path = ::testing::TempDir() + "cofuse_corrections_bad_" + std::to_string(::getpid()) + ".json";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(R"({"schema": "cofuse.tuning/1", "entries": [], "corrections": [{"machine": "m", "ranks": 2, "op": "gemm_rs", "axis": "m",
      "dtype": "f32", "family": "unfused coll", "m_bucket": 11, "ratios": [1.0, "x"], "provenance": {}}]})", f);
    std::fclose(f);
  }
  std::string warning;
  const TuningDb db = TuningDb::load(path, &warning);
  EXPECT_TRUE(db.corrections().empty());
  EXPECT_NE(warning.find("correction 0: a ratio is not a finite number > 0"), std::string::npos) << warning;
  std::remove(path.c_str());
}

// The planner: a run measured slower than predicted moves the next prediction of its kind toward
// the measurement (and says so), and only that kind.
TEST(ModelCorrection, AMeasuredRunMovesThePlannersPredictionTowardIt) {
  const std::string path = ::testing::TempDir() + "cofuse_corrections_plan_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  const MachineProfile profile = load_profile("this-host-shm");
  PlannerOptions options;
  options.tuning_db = path;
  const PlanChoice before = choose_schedule(kDesc, profile, options);
  auto find = [](const PlanChoice& c, const Schedule& s) {
    for (const PlanCandidate& k : c.candidates)
      if (k.schedule == s) return k;
    ADD_FAILURE() << "no candidate " << s.to_string();
    return PlanCandidate{};
  };
  const Schedule shard = *Schedule::parse("shard");
  const PlanCandidate ring0 = find(before, shard), serial0 = find(before, serial_schedule());
  EXPECT_DOUBLE_EQ(ring0.correction, 1.0);
  EXPECT_DOUBLE_EQ(ring0.predicted_s, ring0.model_s);
  const double measured = 1.6 * ring0.model_s;
  TuningDb db = TuningDb::load(path);
  for (int i = 0; i < 4; ++i) db.add_evidence(kDesc, profile.name, correction_family(shard), measured / ring0.model_s, "test");
  db.save(path);
  const PlanChoice after = choose_schedule(kDesc, profile, options);
  const PlanCandidate ring1 = find(after, shard), serial1 = find(after, serial_schedule());
  EXPECT_DOUBLE_EQ(ring1.model_s, ring0.model_s);
  EXPECT_GT(ring1.predicted_s, ring0.predicted_s);
  EXPECT_LT(ring1.predicted_s, measured);
  EXPECT_LT(std::abs(ring1.predicted_s - measured), 0.5 * std::abs(ring0.predicted_s - measured));
  EXPECT_DOUBLE_EQ(serial1.predicted_s, serial0.predicted_s);  // another kind: untouched
  EXPECT_NE(after.why.find("overlapped ring x"), std::string::npos) << after.why;
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

}  // namespace
}  // namespace cofuse
