// The host-link benchmark's arithmetic (bench/host_link_plan.hpp) and the link record
// (cofuse/cuda_link.hpp's to_json): link bytes per op, the link time model, the shape choice for
// a G/M ratio, the losses, the JSON lines. No GPU: the rates are made up.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "host_link_plan.hpp"

namespace cofuse::bench {
namespace {

cuda::HostLinkRates rates(double d2h, double h2d, double d2h_both, double h2d_both) {
  cuda::HostLinkRates r;
  r.device_name = "Test \"GPU\"\\1";
  r.bytes = 64 << 20;
  r.piece_bytes = 1 << 20;
  r.iters = 10;
  r.d2h_GBps = d2h;
  r.h2d_GBps = h2d;
  r.d2h_both_GBps = d2h_both;
  r.h2d_both_GBps = h2d_both;
  r.latency_us = 2.5;
  r.host_latency_us = 9.25;
  return r;
}

// Fields by name: OpDesc may grow.
OpDesc op_desc(OpKind op, int64_t m, int64_t n, int64_t k, Axis axis, int ranks) {
  OpDesc d;
  d.op = op;
  d.m = m;
  d.n = n;
  d.k = k;
  d.dtype = DType::bf16;
  d.axis = axis;
  d.ranks = ranks;
  return d;
}

TEST(HostLinkBytes, EveryOpCountsWhatCrossesEachDirection) {
  const double e = 2;  // bf16
  const OpDesc ag = op_desc(OpKind::ag_gemm, 1024, 512, 256, Axis::m, 4);
  EXPECT_DOUBLE_EQ(host_link_bytes(ag).d2h, 1024.0 * 256 * e);      // each shard up once
  EXPECT_DOUBLE_EQ(host_link_bytes(ag).h2d, 3 * 1024.0 * 256 * e);  // down to 3 readers
  const OpDesc rs = op_desc(OpKind::gemm_rs, 1024, 512, 256, Axis::m, 4);
  EXPECT_DOUBLE_EQ(host_link_bytes(rs).d2h, 3 * 1024.0 * 512 * e);
  EXPECT_DOUBLE_EQ(host_link_bytes(rs).h2d, 3 * 1024.0 * 512 * e);
  const OpDesc ar = op_desc(OpKind::gemm_ar, 1024, 512, 256, Axis::none, 2);
  EXPECT_DOUBLE_EQ(host_link_bytes(ar).d2h, 2 * 1024.0 * 512 * e);
  EXPECT_DOUBLE_EQ(host_link_bytes(ar).h2d, 2 * 1024.0 * 512 * e);
  const OpDesc rs_n = op_desc(OpKind::gemm_rs, 1024, 512, 256, Axis::n, 2);
  EXPECT_THROW(host_link_bytes(rs_n), Error);
}

TEST(HostLinkSeconds, NoDirectionBeatsItsRateAloneAndBothShareTheLink) {
  const cuda::HostLinkRates r = rates(50, 40, 30, 30);
  // One direction only: its rate alone.
  EXPECT_DOUBLE_EQ(host_link_seconds({50e9, 0}, r), 1.0);
  EXPECT_DOUBLE_EQ(host_link_seconds({0, 40e9}, r), 1.0);
  // Both full: the shared rate (60 GB/s together) binds: 120 GB / 60 GB/s.
  EXPECT_DOUBLE_EQ(host_link_seconds({60e9, 60e9}, r), 2.0);
  cuda::HostLinkRates bad = r;
  bad.h2d_both_GBps = 0;
  EXPECT_THROW(host_link_seconds({1, 1}, bad), Error);
}

TEST(ChooseShape, HitsEachRatioAndSizeWithinRounding) {
  const cuda::HostLinkRates r = rates(55, 55, 50, 50);
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar})
    for (int p : {2, 4})
      for (Balance b : {Balance::even, Balance::compute, Balance::comm}) {
        const ShapeChoice c = choose_shape(op, p, b, 600, r, 1e-3);
        SCOPED_TRACE(c.desc.to_string() + " " + to_string(b));
        EXPECT_TRUE(c.desc.validate().ok());
        EXPECT_EQ(c.desc.m % 256, 0);
        EXPECT_EQ(c.desc.n % 256, 0);
        EXPECT_EQ(c.desc.k % 256, 0);
        EXPECT_EQ(c.desc.dtype, DType::bf16);
        // The estimates are of the shape returned, and their ratio is the target within the
        // rounding to 256 (a few percent at these sizes).
        EXPECT_NEAR(c.gemm_s, c.desc.flops() / 600e12, 1e-12);
        EXPECT_NEAR(c.comm_s, host_link_seconds(host_link_bytes(c.desc), r), 1e-12);
        EXPECT_NEAR(std::log(c.gemm_s / c.comm_s), std::log(target_ratio(b)), 0.1);
        EXPECT_NEAR(std::max(c.gemm_s, c.comm_s), 1e-3, 0.25e-3);
        EXPECT_FALSE(c.rule.empty());
      }
}

TEST(ChooseShape, RefiningWithTheMeasuredRateMovesTheRatioDimension) {
  const cuda::HostLinkRates r = rates(55, 55, 50, 50);
  const ShapeChoice c = choose_shape(OpKind::gemm_rs, 2, Balance::even, 600, r, 1e-3);
  // The GEMM ran at half the assumed rate: K halves to keep G = M.
  const ShapeChoice d = refine_shape(c, 2 * c.gemm_s, r, 1e-3);
  EXPECT_NEAR(d.tflops, 300, 1e-6);
  EXPECT_NEAR(double(d.desc.k) / double(c.desc.k), 0.5, 0.05);
  EXPECT_THROW(refine_shape(c, 0, r, 1e-3), Error);
  EXPECT_THROW(choose_shape(OpKind::gemm_rs, 2, Balance::even, 0, r, 1e-3), Error);
}

TEST(Losses, FollowTheBenchmarkDefinitions) {
  // T 10, serial 16, G 8, M 6, whole GEMM alone 8, pieces alone 8.5, GEMM inside the run 9.
  const Losses l = losses(10, 16, 8, 6, 8, 8.5, 9);
  EXPECT_DOUBLE_EQ(l.x_serial, 1.6);
  EXPECT_DOUBLE_EQ(l.eff, 0.8);
  EXPECT_DOUBLE_EQ(l.dil, 0.5);
  EXPECT_DOUBLE_EQ(l.cil, 0.5);
  EXPECT_DOUBLE_EQ(l.exposed, 1.0);
  const Losses unknown = losses(10, 16, 8, 6, 8, 8.5, -1);
  EXPECT_DOUBLE_EQ(unknown.cil, 0);
  EXPECT_DOUBLE_EQ(unknown.exposed, 1.5);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(Records, LinkAndResultLinesAreJson) {
  const cuda::HostLinkRates r = rates(55, 54, 50, 49);
  const auto link = nlohmann::json::parse(cuda::to_json(r, "host-link-1"));
  EXPECT_EQ(link["schema"], "cofuse.gpu.link/1");
  EXPECT_EQ(link["id"], "host-link-1");
  EXPECT_EQ(link["device_name"], "Test \"GPU\"\\1");
  EXPECT_DOUBLE_EQ(link["h2d_GBps"].get<double>(), 54);
  EXPECT_DOUBLE_EQ(link["h2d_both_GBps"].get<double>(), 49);
  EXPECT_DOUBLE_EQ(link["latency_us"].get<double>(), 2.5);
  EXPECT_EQ(link["piece_bytes"], 1 << 20);
  EXPECT_FALSE(nlohmann::json::parse(cuda::to_json(r)).contains("id"));

  JsonLine inner;
  inner.integer("m", 4096).text("op", "gemm_rs\n");
  JsonLine rec;
  rec.text("schema", "cofuse.gpu.record/2").object("case", inner).number("eff", 0.75).number("bad", std::nan(""));
  rec.boolean("ok", true).raw("link", cuda::to_json(r, "x"));
  const auto j = nlohmann::json::parse(rec.str());
  EXPECT_EQ(j["case"]["m"], 4096);
  EXPECT_EQ(j["case"]["op"], "gemm_rs\n");
  EXPECT_DOUBLE_EQ(j["eff"].get<double>(), 0.75);
  EXPECT_TRUE(j["bad"].is_null());
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["link"]["id"], "x");
  EXPECT_EQ(rec.str().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace cofuse::bench
