// OpDesc: names, parsing, validation and the per-rank shapes of each op.
#include "cofuse/op_desc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace cofuse {

const char* to_string(OpKind op) {
  switch (op) {
    case OpKind::ag_gemm: return "ag_gemm";
    case OpKind::gemm_rs: return "gemm_rs";
    case OpKind::gemm_ar: return "gemm_ar";
  }
  return "unknown_op";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
  }
  return "unknown_dtype";
}

const char* to_string(Axis axis) {
  switch (axis) {
    case Axis::none: return "none";
    case Axis::m: return "m";
    case Axis::n: return "n";
    case Axis::k: return "k";
  }
  return "unknown_axis";
}

std::optional<OpKind> parse_op(std::string_view text) {
  for (OpKind op : {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar})
    if (text == to_string(op)) return op;
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view text) {
  if (text == "f32" || text == "float") return DType::f32;
  if (text == "f64" || text == "double") return DType::f64;
  if (text == "bf16") return DType::bf16;
  if (text == "f16" || text == "fp16" || text == "half") return DType::f16;
  if (text == "e4m3" || text == "fp8" || text == "e4m3fn") return DType::e4m3;
  return std::nullopt;
}

std::optional<Axis> parse_axis(std::string_view text) {
  for (Axis axis : {Axis::none, Axis::m, Axis::n, Axis::k})
    if (text == to_string(axis)) return axis;
  return std::nullopt;
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::e4m3: return 1;
  }
  return 4;
}

Axis default_axis(OpKind op) { return op == OpKind::gemm_ar ? Axis::none : Axis::m; }

namespace {

// The sizes an op shards, with the reason a reader sees when one does not divide P.
struct ShardedDim {
  const char* name;
  int64_t value;
  const char* why;
};

int sharded_dims(const OpDesc& d, ShardedDim out[2]) {
  switch (d.op) {
    case OpKind::ag_gemm:
      out[0] = d.axis == Axis::m ? ShardedDim{"M", d.m, "each rank holds M/P rows of op(A)"}
                                 : ShardedDim{"K", d.k, "each rank holds K/P columns of op(A)"};
      out[1] = {"N", d.n, "each rank holds N/P columns of op(B) and C"};
      return 2;
    case OpKind::gemm_rs:
      out[0] = {"K", d.k, "each rank holds K/P columns of op(A) and rows of op(B)"};
      out[1] = d.axis == Axis::m ? ShardedDim{"M", d.m, "each rank receives M/P rows of C"}
                                 : ShardedDim{"N", d.n, "each rank receives N/P columns of C"};
      return 2;
    case OpKind::gemm_ar:
      out[0] = {"K", d.k, "each rank holds K/P columns of op(A) and rows of op(B)"};
      return 1;
  }
  return 0;
}

bool valid_axis(OpKind op, Axis axis) {
  switch (op) {
    case OpKind::ag_gemm: return axis == Axis::m || axis == Axis::k;
    case OpKind::gemm_rs: return axis == Axis::m || axis == Axis::n;
    case OpKind::gemm_ar: return axis == Axis::none;
  }
  return false;
}

const char* valid_axes(OpKind op) {
  switch (op) {
    case OpKind::ag_gemm: return "m or k";
    case OpKind::gemm_rs: return "m or n";
    case OpKind::gemm_ar: return "none";
  }
  return "";
}

// rows*cols*elem_bytes without overflow; false when it would not fit in int64.
bool byte_count(int64_t rows, int64_t cols, std::size_t elem, int64_t* bytes) {
  int64_t elements = 0;
  return !__builtin_mul_overflow(rows, cols, &elements) &&
         !__builtin_mul_overflow(elements, static_cast<int64_t>(elem), bytes);
}

std::string op_label(const OpDesc& d) {
  std::string label = to_string(d.op);
  if (d.op != OpKind::gemm_ar) label += std::string(" (axis ") + to_string(d.axis) + ")";
  return label;
}

// The output type and the scales, which only e4m3 varies: ok, or what is wrong (no op label).
Status check_element_types(const OpDesc& d) {
  auto bad = [](const std::string& what) { return Status(ErrorCode::invalid_argument, what); };
  const bool fp8 = d.dtype == DType::e4m3;
  const DType out = d.output_dtype();
  if (fp8 && out != DType::bf16 && out != DType::f32)
    return bad(std::string("out_dtype ") + to_string(out) +
               " is not an output of e4m3 GEMMs; C and the partial sums of an e4m3 op are bf16 (the default) or f32");
  if (!fp8 && out != d.dtype)
    return bad(std::string("out_dtype ") + to_string(out) + " differs from dtype " + to_string(d.dtype) +
               "; only e4m3 ops have an output type of their own (bf16 or f32)");
  const std::pair<const char*, double> scales[] = {{"scale_a", d.scale_a}, {"scale_b", d.scale_b}};
  for (auto [name, value] : scales) {
    std::ostringstream v;
    v << value;
    if (!std::isfinite(value) || value <= 0)
      return bad(std::string(name) + "=" + v.str() + " must be finite and > 0 (a per-tensor scale of e4m3 data)");
    if (!fp8 && value != 1)
      return bad(std::string(name) + "=" + v.str() + " applies to e4m3 ops only; " + to_string(d.dtype) +
                 " data is unscaled (scale 1)");
  }
  return Status::Ok();
}

}  // namespace

DType OpDesc::output_dtype() const {
  if (out_dtype) return *out_dtype;
  return dtype == DType::e4m3 ? DType::bf16 : dtype;
}

Status OpDesc::validate() const {
  const std::string name = op_label(*this);
  auto fail = [&](const std::string& what) {
    return Status(ErrorCode::invalid_argument, name + ": " + what);
  };
  if (ranks < 1) return fail("ranks must be >= 1, got " + std::to_string(ranks));
  const std::pair<const char*, int64_t> sizes[] = {{"M", m}, {"N", n}, {"K", k}};
  for (auto [label, value] : sizes)
    if (value < 1) return fail(std::string(label) + " must be >= 1, got " + std::to_string(value));
  if (!valid_axis(op, axis))
    return fail(std::string("axis ") + cofuse::to_string(axis) + " is not valid; " + cofuse::to_string(op) +
                " shards axis " + valid_axes(op));

  ShardedDim dims[2];
  const int count = sharded_dims(*this, dims);
  for (int i = 0; i < count; ++i) {
    if (dims[i].value % ranks != 0) {
      std::ostringstream msg;
      msg << dims[i].name << "=" << dims[i].value << " is not divisible by ranks=" << ranks << " ("
          << dims[i].value << " % " << ranks << " = " << dims[i].value % ranks << "): " << dims[i].why;
      return fail(msg.str());
    }
  }

  if (Status st = check_element_types(*this); !st.ok()) return fail(st.message());

  // Every buffer any rank or the reference touches must have a byte count that fits in 64 bits
  // (counted at the wider of the input and output types: both bound every buffer).
  const std::size_t elem = std::max(dtype_size(dtype), dtype_size(output_dtype()));
  const std::pair<const char*, std::pair<int64_t, int64_t>> whole[] = {
      {"op(A) = M*K", {m, k}}, {"op(B) = K*N", {k, n}}, {"C = M*N", {m, n}}};
  for (const auto& [label, dims2] : whole) {
    int64_t bytes = 0;
    if (!byte_count(dims2.first, dims2.second, elem, &bytes)) {
      std::ostringstream msg;
      msg << label << " = " << dims2.first << "*" << dims2.second << " elements of " << cofuse::to_string(dtype)
          << " overflows a 64-bit byte count";
      return fail(msg.str());
    }
  }
  return Status::Ok();
}

LocalShapes OpDesc::local_shapes() const {
  const int64_t p = ranks;
  // Shapes of op(A_r), op(B_r) and C_r first; the stored shape of a transposed operand swaps.
  MatrixShape op_a, op_b, c, gathered;
  switch (op) {
    case OpKind::ag_gemm:
      op_a = axis == Axis::m ? MatrixShape{m / p, k} : MatrixShape{m, k / p};
      op_b = {k, n / p};
      c = {m, n / p};
      gathered = {m, k};
      break;
    case OpKind::gemm_rs:
      op_a = {m, k / p};
      op_b = {k / p, n};
      c = axis == Axis::m ? MatrixShape{m / p, n} : MatrixShape{m, n / p};
      break;
    case OpKind::gemm_ar:
      op_a = {m, k / p};
      op_b = {k / p, n};
      c = {m, n};
      break;
  }
  auto stored = [](MatrixShape s, bool transposed) { return transposed ? MatrixShape{s.cols, s.rows} : s; };
  return {stored(op_a, trans_a), stored(op_b, trans_b), c, stored(gathered, trans_a)};
}

std::string OpDesc::to_string() const {
  std::ostringstream out;
  out << cofuse::to_string(op) << " M=" << m << " N=" << n << " K=" << k << " " << cofuse::to_string(dtype)
      << " axis=" << cofuse::to_string(axis) << " trans_a=" << trans_a << " trans_b=" << trans_b
      << " ranks=" << ranks;
  // Only e4m3 has these; the other dtypes print as they always did (logs, records, traces).
  if (dtype == DType::e4m3)
    out << " out=" << cofuse::to_string(output_dtype()) << " scale_a=" << scale_a << " scale_b=" << scale_b;
  return out.str();
}

double tolerance(DType dtype, int64_t k) {
  return tolerance(dtype, k, dtype == DType::e4m3 ? DType::bf16 : dtype);
}

double tolerance(DType dtype, int64_t k, DType out) {
  // The rounding of a length-k dot product in the accumulation type grows like sqrt(k).
  auto accumulation = [k](double eps) { return 8.0 * eps * (std::sqrt(double(k)) + 4.0); };
  const double eps32 = std::numeric_limits<float>::epsilon();
  if (dtype == DType::e4m3) {
    // Two e4m3 values have 4-bit significands, so their product (8 bits) is exact in fp32 and
    // the only rounding inside the GEMM is that of the sums: the f32 accumulation term. Hopper's
    // fp8 tensor cores keep a narrower accumulator between cuBLASLt's promotions to fp32
    // (CUBLASLT_MATMUL_DESC_FAST_ACCUM off, the default): DeepSeek-V3 (arXiv 2412.19437, 3.3.2)
    // measured about 14 bits, and a relative error of up to 2% at K = 4096 with no promotion;
    // with a promotion every 128 elements that bias shrinks about 32-fold, to 6e-4, which 2^-10
    // (9.8e-4) bounds. Then the output rounded once to `out` and the partial sums that travel in
    // it: 1 epsilon of `out`, as for the 16-bit types. A wrong result is far above: inputs
    // quantized twice err by about 4e-2 (e4m3's epsilon is 2^-3), a scale left out by |1 - s|.
    const double eps_out = out == DType::bf16 ? 0x1.0p-7 : (out == DType::f16 ? 0x1.0p-10 : eps32);
    return accumulation(eps32) + 0x1.0p-10 + eps_out;
  }
  if (dtype == DType::f64) return accumulation(std::numeric_limits<double>::epsilon());
  if (dtype == DType::f32) return accumulation(eps32);
  // 16-bit types: products summed in fp32 (the accumulation term), then the output rounded
  // once to the dtype, plus the partial sums rounded to it where they travel in it. One
  // rounding costs 0.2 epsilon of relative Frobenius error (measured: 1.6e-3 for bf16); a
  // reduce-scatter ring adds P-1 roundings of partials smaller than the result, in quadrature:
  // under 0.5 epsilon at P <= 8. One epsilon bounds both with room. A kernel that summed in
  // the 16-bit type instead errs by about 0.15 epsilon·sqrt(k): it passes this bound up to
  // k = 32 and fails it from k = 64 on (4096: 9 times over), so the tests use k = 4096
  // (tests/unit/test_op_desc.cpp measures both sides of the bound).
  const double eps16 = dtype == DType::bf16 ? 0x1.0p-7 : 0x1.0p-10;
  return eps16 + accumulation(eps32);
}

}  // namespace cofuse
