// The sweep of `cofuse bench`: ranges, lists, expansion and sweep files (no MPI).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "measure/bench_sweep.hpp"
#include "cofuse/status.hpp"

namespace cofuse::measure {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class SweepFile : public ::testing::Test {
 protected:
  std::string path = ::testing::TempDir() + "cofuse_sweep_test.json";
  void write(const std::string& text) { std::ofstream(path) << text; }
  void TearDown() override { std::remove(path.c_str()); }
};

TEST(SizeRange, GeometricLikeNcclTests) {
  EXPECT_EQ(size_range(128, 1024, 2, 0), (std::vector<int64_t>{128, 256, 512, 1024}));
  EXPECT_EQ(size_range(100, 1000, 3, 0), (std::vector<int64_t>{100, 300, 900}));  // end not reached exactly
  EXPECT_EQ(size_range(64, 64, 2, 0), (std::vector<int64_t>{64}));
}

TEST(SizeRange, ArithmeticWithStep) {
  EXPECT_EQ(size_range(10, 40, 2, 15), (std::vector<int64_t>{10, 25, 40}));
}

TEST(SizeRange, RejectsNonsense) {
  EXPECT_NE(message_of([] { size_range(100, 10, 2, 0); }).find("end 10 is below its begin 100"), std::string::npos);
  EXPECT_NE(message_of([] { size_range(0, 10, 2, 0); }).find("begin 0 is below 1"), std::string::npos);
  EXPECT_NE(message_of([] { size_range(1, 10, 1.0, 0); }).find("factor > 1"), std::string::npos);
  EXPECT_NE(message_of([] { size_range(1, int64_t(1) << 40, 1.0001, 0); }).find("more than 10000"), std::string::npos);
}

TEST(SizeList, ParsesAndRejects) {
  EXPECT_EQ(parse_size_list("128,256,,1024", "--m"), (std::vector<int64_t>{128, 256, 1024}));
  EXPECT_NE(message_of([] { parse_size_list("128,abc", "--m"); }).find("--m: 'abc' is not a size"), std::string::npos);
  EXPECT_NE(message_of([] { parse_size_list("0", "--n"); }).find("--n: '0'"), std::string::npos);
  EXPECT_NE(message_of([] { parse_size_list("", "--k"); }).find("--k: no size given"), std::string::npos);
}

TEST(Expand, CrossProductAndAxesThatSuit) {
  SweepSpec spec;
  spec.ops = {"ag_gemm", "gemm_rs", "gemm_ar"};
  spec.axes = {"auto", "m", "n"};  // ag_gemm: m; gemm_rs: m, n; gemm_ar: none (auto)
  spec.dtypes = {"f32", "f64"};
  spec.m = {64, 128};
  const std::vector<BenchCase> cases = expand(spec);
  EXPECT_EQ(cases.size(), (1u + 2u + 1u) * 2u * 2u);
  EXPECT_EQ(cases.front().op, OpKind::ag_gemm);
  EXPECT_EQ(cases.front().axis, Axis::m);
  EXPECT_EQ(cases.front().m, 64);
  EXPECT_EQ(cases.back().op, OpKind::gemm_ar);
  EXPECT_EQ(cases.back().axis, Axis::none);
  EXPECT_EQ(cases.back().dtype, DType::f64);
}

TEST(Expand, RejectsUnknownNamesAndAxesNoOpTakes) {
  SweepSpec spec;
  spec.ops = {"gemm_xx"};
  EXPECT_NE(message_of([&] { expand(spec); }).find("unknown op 'gemm_xx'"), std::string::npos);
  spec.ops = {"gemm_ar"};
  spec.axes = {"k"};
  EXPECT_NE(message_of([&] { expand(spec); }).find("gemm_ar: none of the axes given suits it"), std::string::npos);
  spec.axes = {"auto"};
  spec.dtypes = {"f8"};
  EXPECT_NE(message_of([&] { expand(spec); }).find("unknown dtype 'f8'"), std::string::npos);
  spec.dtypes = {"f16"};
  EXPECT_NE(message_of([&] { expand(spec); }).find("measures the CPU executor: dtype f16 runs on the CUDA executor"),
            std::string::npos);
  spec.dtypes = {"bf16"};
  EXPECT_EQ(expand(spec).front().dtype, DType::bf16) << "bf16 runs on the CPU executor (oneDNN)";
  spec.dtypes = {"f32"};
  spec.schedules = "hetero-unfused-1d;fastest";
  EXPECT_NE(message_of([&] { expand(spec); }).find("unknown preset 'fastest'"), std::string::npos);
}

TEST_F(SweepFile, CasesRangesAndDefaults) {
  write(R"({"comment": "two layers",
            "cases": [
              {"label": "seed", "op": "gemm_ar", "m": 128, "n": 2048, "k": 2048},
              {"op": ["gemm_rs"], "m": {"begin": 512, "end": 2048, "factor": 2}, "dtype": ["f32", "f64"],
               "schedules": "serial;hetero-unfused-1d", "trans_b": true}
            ]})");
  SweepSpec defaults;
  defaults.n = {4096};
  defaults.k = {256};
  const std::vector<BenchCase> cases = load_sweep_file(path, defaults);
  ASSERT_EQ(cases.size(), 1u + 3u * 2u);
  EXPECT_EQ(cases[0].label, "seed");
  EXPECT_EQ(cases[0].n, 2048);
  EXPECT_EQ(cases[0].schedules, "presets");
  EXPECT_EQ(cases[1].op, OpKind::gemm_rs);
  EXPECT_EQ(cases[1].n, 4096);  // from the defaults
  EXPECT_EQ(cases[1].k, 256);
  EXPECT_TRUE(cases[1].trans_b);
  EXPECT_EQ(cases[1].schedules, "serial;hetero-unfused-1d");
  EXPECT_EQ(cases.back().m, 2048);
  EXPECT_EQ(cases.back().dtype, DType::f64);
}

TEST_F(SweepFile, MalformedFilesNameTheProblem) {
  const SweepSpec defaults;
  write("{\"cases\": [ {\"op\": \"gemm_ar\"} ");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("not valid JSON"), std::string::npos);
  write(R"({"cases": []})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("at least one case"), std::string::npos);
  write(R"({"cases": [{"op": "gemm_ar", "mm": 128}]})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("cases[0]: unknown key 'mm'"), std::string::npos);
  write(R"({"cases": [{"op": "gemm_ar"}, {"m": -4}]})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("cases[1].m: -4 is not a size"), std::string::npos);
  write(R"({"cases": [{"m": {"begin": 8, "end": 64, "ratio": 2}}]})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("unknown key 'ratio' in a range"), std::string::npos);
  write(R"({"cases": [{"trans_a": "yes"}]})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("cases[0].trans_a: \"yes\" is not true or false"),
            std::string::npos);
  write(R"({"cases": [{"op": "gemm_ar", "axis": "m"}]})");
  EXPECT_NE(message_of([&] { load_sweep_file(path, defaults); }).find("cases[0]: gemm_ar: none of the axes"),
            std::string::npos);
  EXPECT_NE(message_of([&] { load_sweep_file(path + ".missing", defaults); }).find("cannot be read"), std::string::npos);
}

// What a file says is echoed with its control bytes escaped, so a refusal stays one line and
// shows the stray byte (found by fuzz_sweep: a "\n" in an op name split the message).
TEST_F(SweepFile, RefusalsEscapeControlBytesTheyEcho) {
  const SweepSpec defaults;
  auto refusal = [&](const std::string& text) {
    write(text);
    return message_of([&] { load_sweep_file(path, defaults); });
  };
  EXPECT_NE(refusal(R"({"cases": [{"op": "gemm\nar"}]})").find("cases[0]: unknown op 'gemm\\nar'"), std::string::npos);
  EXPECT_NE(refusal(R"({"a\tb": 1, "cases": [{}]})").find("unknown top-level key 'a\\tb'"), std::string::npos);
  EXPECT_NE(refusal(R"({"cases": [{"m\u0001": 1}]})").find("cases[0]: unknown key 'm\\x01'"), std::string::npos);
  const std::string schedule = refusal(R"({"cases": [{"schedules": "shard\r"}]})");
  EXPECT_NE(schedule.find("cases[0]: schedules: schedule 'shard\\r': unknown preset 'shard\\r'"), std::string::npos)
      << schedule;
  for (const std::string& message : {schedule, refusal(R"({"cases": [{"dtype": "f\n32"}]})")})
    EXPECT_EQ(message.find_first_of("\n\r"), std::string::npos) << message;
}

}  // namespace
}  // namespace cofuse::measure
