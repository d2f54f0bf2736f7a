#include "host_link_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cofuse/status.hpp"

namespace cofuse::bench {
namespace {

int64_t round_256(double v, int64_t lo, int64_t hi) {
  const int64_t r = int64_t(std::llround(v / 256.0)) * 256;
  return std::clamp(r, lo, hi);
}

double gemm_seconds(const OpDesc& d, double tflops) { return d.flops() / (tflops * 1e12); }

}  // namespace

LinkBytes host_link_bytes(const OpDesc& d) {
  const double e = double(dtype_size(d.dtype)), p = double(d.ranks);
  switch (d.op) {
    case OpKind::ag_gemm:
      if (d.axis != Axis::m) break;
      return {double(d.m) * double(d.k) * e, (p - 1) * double(d.m) * double(d.k) * e};
    case OpKind::gemm_rs:
      if (d.axis != Axis::m) break;
      return {(p - 1) * double(d.m) * double(d.n) * e, (p - 1) * double(d.m) * double(d.n) * e};
    case OpKind::gemm_ar:
      return {p * double(d.m) * double(d.n) * e, 2 * (p - 1) * double(d.m) * double(d.n) * e};
  }
  throw Error(ErrorCode::invalid_argument,
              std::string("host_link_bytes: ") + to_string(d.op) + " axis " + to_string(d.axis) + " is not modelled");
}

double host_link_seconds(const LinkBytes& bytes, const cuda::HostLinkRates& link) {
  if (!(link.d2h_GBps > 0 && link.h2d_GBps > 0 && link.d2h_both_GBps > 0 && link.h2d_both_GBps > 0))
    throw Error(ErrorCode::invalid_argument, "host_link_seconds: every link rate must be > 0");
  const double up = bytes.d2h / (link.d2h_GBps * 1e9), down = bytes.h2d / (link.h2d_GBps * 1e9);
  const double shared = (bytes.d2h + bytes.h2d) / ((link.d2h_both_GBps + link.h2d_both_GBps) * 1e9);
  return std::max({up, down, shared});
}

const char* to_string(Balance balance) {
  switch (balance) {
    case Balance::even: return "even";
    case Balance::compute: return "compute";
    case Balance::comm: return "comm";
  }
  return "?";
}

double target_ratio(Balance balance) {
  switch (balance) {
    case Balance::even: return 1.0;
    case Balance::compute: return 4.0;
    case Balance::comm: return 0.25;
  }
  return 1.0;
}

ShapeChoice choose_shape(OpKind op, int ranks, Balance balance, double tflops, const cuda::HostLinkRates& link,
                         double big_s) {
  if (!(tflops > 0) || !(big_s > 0) || ranks < 1)
    throw Error(ErrorCode::invalid_argument, "choose_shape: tflops and big_s must be > 0 and ranks >= 1");
  OpDesc d;  // fields by name: OpDesc may grow
  d.op = op;
  d.m = d.n = d.k = 4096;
  d.dtype = DType::bf16;
  d.axis = op == OpKind::gemm_ar ? Axis::none : Axis::m;
  d.ranks = ranks;
  // The dimension that sets G / M (M is independent of it, G proportional to it).
  int64_t OpDesc::*ratio_dim = op == OpKind::ag_gemm ? &OpDesc::n : &OpDesc::k;
  int64_t OpDesc::*size_a = &OpDesc::m;
  int64_t OpDesc::*size_b = op == OpKind::ag_gemm ? &OpDesc::k : &OpDesc::n;
  const double ratio0 = gemm_seconds(d, tflops) / host_link_seconds(host_link_bytes(d), link);
  d.*ratio_dim = round_256(double(d.*ratio_dim) * target_ratio(balance) / ratio0, 512, 524288);
  // Both terms are proportional to the product of the two size dimensions.
  const double t = std::max(gemm_seconds(d, tflops), host_link_seconds(host_link_bytes(d), link));
  const double scale = std::sqrt(big_s / t);
  d.*size_a = round_256(double(d.*size_a) * scale, 512, 65536);
  d.*size_b = round_256(double(d.*size_b) * scale, 512, 65536);
  ShapeChoice c;
  c.desc = d;
  c.balance = balance;
  c.tflops = tflops;
  c.gemm_s = gemm_seconds(d, tflops);
  c.comm_s = host_link_seconds(host_link_bytes(d), link);
  char rule[160];
  std::snprintf(rule, sizeof rule, "%s sets G/M (target %.2f), %s so that max(G, M) ~ %.2f ms, at %.0f TFLOP/s",
                op == OpKind::ag_gemm ? "N" : "K", target_ratio(balance), op == OpKind::ag_gemm ? "M = K" : "M = N",
                big_s * 1e3, tflops);
  c.rule = rule;
  return c;
}

ShapeChoice refine_shape(const ShapeChoice& previous, double measured_gemm_s, const cuda::HostLinkRates& link,
                         double big_s) {
  if (!(measured_gemm_s > 0)) throw Error(ErrorCode::invalid_argument, "refine_shape: measured_gemm_s must be > 0");
  const double tflops = previous.desc.flops() / measured_gemm_s * 1e-12;
  return choose_shape(previous.desc.op, previous.desc.ranks, previous.balance, tflops, link, big_s);
}

Losses losses(double t, double serial, double g, double m, double gemm_alone, double pieces_alone, double gemm_in_run) {
  Losses l;
  l.x_serial = t > 0 ? serial / t : 0;
  l.eff = t > 0 ? std::max(g, m) / t : 0;
  l.dil = pieces_alone - gemm_alone;
  const bool known = gemm_in_run >= 0;
  l.cil = known ? gemm_in_run - pieces_alone : 0;
  l.exposed = t - (known ? gemm_in_run : pieces_alone);
  return l;
}

JsonLine& JsonLine::text(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, cuda::detail::json_string(value));
  return *this;
}
JsonLine& JsonLine::number(const std::string& key, double value) {
  fields_.emplace_back(key, cuda::detail::json_number(value));
  return *this;
}
JsonLine& JsonLine::integer(const std::string& key, int64_t value) {
  fields_.emplace_back(key, std::to_string(value));
  return *this;
}
JsonLine& JsonLine::boolean(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
  return *this;
}
JsonLine& JsonLine::object(const std::string& key, const JsonLine& value) { return raw(key, value.str()); }
JsonLine& JsonLine::raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}
std::string JsonLine::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(cuda::detail::json_string(fields_[i].first));
    out.push_back(':');
    out.append(fields_[i].second);
  }
  return out + "}";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace cofuse::bench
