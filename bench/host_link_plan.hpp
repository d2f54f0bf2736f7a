// The arithmetic of the host-link benchmark (bench/gpu_link_bench.cpp), apart from CUDA so that
// a CPU unit test checks it (tests/unit/test_host_link_plan.cpp): the bytes an op moves over
// the host link, the time those bytes take at measured rates, the shapes with a chosen ratio of
// GEMM time to communication time, the losses of a run, and one-line JSON records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/cuda_link.hpp"
#include "cofuse/op_desc.hpp"

namespace cofuse::bench {

/// Bytes that cross the host link in one call of `d`, all ranks together, in each direction.
/// Every message crosses device->host once and host->device once per reader; copies within a
/// rank stay on the device.
///   ag_gemm (axis m)  each shard [M/P, K] goes up once, down to P-1 readers:
///                     d2h = M*K*e, h2d = (P-1)*M*K*e
///   gemm_rs (axis m)  each rank's P-1 partial blocks [M/P, N] to their owners:
///                     d2h = h2d = (P-1)*M*N*e
///   gemm_ar           a reduce-scatter then an all-gather of [M, N] (or, equally, a sum at one
///                     rank and a broadcast of the result): d2h = P*M*N*e, h2d = 2(P-1)*M*N*e
/// e = dtype_size(d.dtype). Other axes: Error(invalid_argument).
struct LinkBytes {
  double d2h = 0;
  double h2d = 0;
};
LinkBytes host_link_bytes(const OpDesc& d);

/// The time `bytes` take on `link`: max(d2h / d2h_GBps, h2d / h2d_GBps,
/// (d2h + h2d) / (d2h_both_GBps + h2d_both_GBps)): neither direction beats its rate alone, and
/// both together share what the link carries when both stream. Seconds; rates must be > 0.
double host_link_seconds(const LinkBytes& bytes, const cuda::HostLinkRates& link);

/// The three balances of the table: G/M = 1, 4 (compute-dominated), 1/4 (communication-dominated).
enum class Balance { even, compute, comm };
const char* to_string(Balance balance);
double target_ratio(Balance balance);  // G / M: 1, 4 or 0.25

/// A shape chosen for a balance, and why.
struct ShapeChoice {
  OpDesc desc;            // bf16, no transposes; m, n, k multiples of 256
  Balance balance = Balance::even;
  double gemm_s = 0;      // the estimated G: 2*M*N*K / tflops
  double comm_s = 0;      // the estimated M: host_link_seconds(host_link_bytes(desc), link)
  double tflops = 0;      // the GEMM rate the estimate used (10^12 FLOP/s)
  std::string rule;       // one line: which dimension sets the ratio, which the size
};

/// The shape of `op` at P = `ranks` whose estimated G / M is target_ratio(balance) and whose
/// larger term is about `big_s` seconds, for a GEMM rate `tflops` (10^12 FLOP/s, > 0) and the
/// measured link. G / M depends on one dimension only (ag_gemm: N, as M moves M*K; gemm_rs and
/// gemm_ar: K, as M moves M*N): that one is set for the ratio, the other two (equal) for the
/// size; each is rounded to a multiple of 256 within [512, 524288] (ratio) or [512, 65536]
/// (size), so the achieved ratio is printed, not assumed. Axis: m for ag_gemm and gemm_rs.
ShapeChoice choose_shape(OpKind op, int ranks, Balance balance, double tflops, const cuda::HostLinkRates& link,
                         double big_s);

/// The same choice again with the GEMM rate that `measured_gemm_s` (the measured G of
/// `previous.desc`) implies: a bench calls it once after timing the first choice, because
/// cuBLASLt's rate depends on the shape.
ShapeChoice refine_shape(const ShapeChoice& previous, double measured_gemm_s, const cuda::HostLinkRates& link,
                         double big_s);

/// A run's losses (docs/benchmarks.md), seconds. Inputs: t the run's median time; serial the
/// serial schedule's; g, m serial's GEMM and communication phases; gemm_alone every rank's whole
/// GEMM with nothing beside it; pieces_alone the run's own GEMM pieces with nothing beside them;
/// gemm_in_run the wall time with any GEMM running inside the run (negative: unknown).
struct Losses {
  double x_serial = 0;  // serial / t
  double eff = 0;       // max(g, m) / t
  double dil = 0;       // pieces_alone - gemm_alone
  double cil = 0;       // gemm_in_run - pieces_alone (0 when gemm_in_run is unknown)
  double exposed = 0;   // t - gemm_in_run (t - pieces_alone when unknown)
};
Losses losses(double t, double serial, double g, double m, double gemm_alone, double pieces_alone, double gemm_in_run);

/// A one-line JSON object written by hand, fields in the order added. Numbers go through
/// cuda::detail::json_number (NaN and infinity become null).
class JsonLine {
 public:
  JsonLine& text(const std::string& key, const std::string& value);
  JsonLine& number(const std::string& key, double value);
  JsonLine& integer(const std::string& key, int64_t value);
  JsonLine& boolean(const std::string& key, bool value);
  JsonLine& object(const std::string& key, const JsonLine& value);
  /// A value that is JSON already (e.g. cuda::to_json's line).
  JsonLine& raw(const std::string& key, const std::string& json);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// The median of `v` (the mean of the two middle values for an even count); 0 when empty.
double median(std::vector<double> v);

}  // namespace cofuse::bench
