#include "cuda/lt_gemm.hpp"

#include <algorithm>
#include <string>

#include "cuda/check.hpp"

namespace cofuse::cuda::detail {

namespace {

cudaDataType_t data_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::e4m3: return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

DType z_type(const GemmCall& c) { return c.z_dtype.value_or(c.dtype); }

// The largest power of two (up to 256) dividing every address: cuBLASLt picks kernels that
// assume at least this alignment, so a view at an odd offset must not get a 16-byte kernel.
unsigned alignment_of(const GemmCall& c) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(c.x) | reinterpret_cast<uintptr_t>(c.y) | reinterpret_cast<uintptr_t>(c.z);
  unsigned a = 256;
  while (a > 1 && (bits & (a - 1)) != 0) a /= 2;
  return a;
}

}  // namespace

LtGemm::LtGemm(bool tf32) : tf32_(tf32) { check(cublasLtCreate(&handle_), "cublasLtCreate"); }

LtGemm::~LtGemm() {
  for (auto& [key, p] : cache_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_) cublasLtDestroy(handle_);
}

const LtGemm::Prepared& LtGemm::prepare(const GemmCall& g, unsigned alignment, std::size_t workspace_bytes) {
  const Key key{int(g.dtype), int(z_type(g)), g.m, g.n, g.k, g.ldx, g.ldy, g.ldz, g.trans_x, g.trans_y, alignment, workspace_bytes};
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second;

  Prepared p;
  // Whatever was created is destroyed if a later step fails.
  struct Release {
    Prepared& p;
    bool keep = false;
    ~Release() {
      if (keep) return;
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    }
  } release{p};
  const bool f64 = g.dtype == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (g.dtype == DType::f32 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  check(cublasLtMatmulDescCreate(&p.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
  if (g.dtype == DType::e4m3) {
    // Off is cuBLASLt's default, said here because the tolerance counts on it: the tensor cores'
    // fp8 sums are promoted to fp32 periodically (op_desc.cpp, tolerance()).
    const int8_t fast_accumulation = 0;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                         sizeof(fast_accumulation)),
          "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
  }
  // cuBLASLt's A is Y: its stored column-major form is op(Y)ᵀ when Y is not transposed.
  const cublasOperation_t op_a = g.trans_y ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  const cudaDataType_t t = data_type(g.dtype);
  // Column-major shapes of the stored matrices: Y stored [k,n] row-major is [n,k] column-major.
  check(cublasLtMatrixLayoutCreate(&p.a, t, g.trans_y ? g.k : g.n, g.trans_y ? g.n : g.k, g.ldy), "cublasLtMatrixLayoutCreate(A)");
  check(cublasLtMatrixLayoutCreate(&p.b, t, g.trans_x ? g.m : g.k, g.trans_x ? g.k : g.m, g.ldx), "cublasLtMatrixLayoutCreate(B)");
  check(cublasLtMatrixLayoutCreate(&p.c, data_type(z_type(g)), g.n, g.m, g.ldz), "cublasLtMatrixLayoutCreate(C)");

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = workspace_bytes;
  const uint32_t align = alignment;
  cublasStatus_t rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (rc == CUBLAS_STATUS_SUCCESS) rc = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found_count);
  cublasLtMatmulPreferenceDestroy(pref);
  check(rc, "cublasLtMatmulAlgoGetHeuristic");
  if (found_count == 0)
    throw Error(ErrorCode::device, "cublasLtMatmulAlgoGetHeuristic found no algorithm for " + std::string(to_string(g.dtype)) +
                                       (z_type(g) != g.dtype ? std::string(" -> ") + to_string(z_type(g)) : std::string()) +
                                       (g.trans_x ? " trans_x" : "") + (g.trans_y ? " trans_y" : "") + " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
                                       " (alignment " + std::to_string(alignment) + " bytes)");
  p.algo = result.algo;
  release.keep = true;
  return cache_.emplace(key, p).first->second;
}

void LtGemm::run(const GemmCall& g, cudaStream_t stream, void* workspace, std::size_t workspace_bytes) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // an empty sum: Z = 0, or unchanged when accumulating
    if (!g.accumulate)
      check(cudaMemset2DAsync(g.z, std::size_t(g.ldz) * dtype_size(z_type(g)), 0, std::size_t(g.n) * dtype_size(z_type(g)),
                              std::size_t(g.m), stream),
            "cudaMemset2DAsync");
    return;
  }
  const Prepared& p = prepare(g, alignment_of(g), workspace_bytes);
  const double alpha64 = g.alpha, beta64 = g.accumulate ? 1.0 : 0.0;
  const float alpha32 = g.alpha, beta32 = g.accumulate ? 1.0f : 0.0f;
  const bool f64 = g.dtype == DType::f64;
  check(cublasLtMatmul(handle_, p.desc, f64 ? static_cast<const void*>(&alpha64) : &alpha32, g.y, p.a, g.x, p.b,
                       f64 ? static_cast<const void*>(&beta64) : &beta32, g.z, p.c, g.z, p.c, &p.algo, workspace,
                       workspace_bytes, stream),
        "cublasLtMatmul");
}

}  // namespace cofuse::cuda::detail
