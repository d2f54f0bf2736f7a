// bf16 on any CPU: blocks of the operands widened to f32 (exact: a bf16 is the top half of an
// f32), multiplied by OpenBLAS's sgemm, C rounded once. The products are those of the bf16
// values and their sums f32's, so this keeps oneDNN's contract; only the order of the f32
// additions differs, as between any two GEMM libraries.
//
// Why blocks, and these: the f32 copies cost memory and time, so each operand is widened once
// where it fits a fixed budget (WidenedBlocks: a B panel of at most 16 MiB, an A panel of at most
// 8 MiB), and only the largest shapes widen again (A once per panel of B's columns, B once per
// block of C's rows where k passes 4096). A bf16 C is accumulated in an f32 block of at most
// 4 MiB, rounded while it is still in cache. The widening is a vector loop
// (view_ops: convert_view), a few percent of the GEMM at layer shapes (docs/benchmarks.md).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "cofuse/status.hpp"
#include "core/stream/view_ops.hpp"
#include "cpu/compute/gemm_bf16.hpp"

namespace cofuse::detail {

namespace {

// One thread's f32 copies; which block each holds, so that one is not widened twice in a row.
struct Scratch {
  std::vector<float> a, b, c;
  const void* a_src = nullptr;
  const void* b_src = nullptr;
  int64_t a_key[4] = {-1, -1, -1, -1}, b_key[4] = {-1, -1, -1, -1};
};

float* sized(std::vector<float>& v, int64_t floats) {
  if (v.size() < std::size_t(floats + 16)) v.resize(std::size_t(floats + 16));
  return first_cache_line(v.data());
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw Error(ErrorCode::invalid_argument,
                std::string("gemm: ") + what + "=" + std::to_string(v) + " does not fit BLAS's 32-bit int");
  return int(v);
}

// The stored block of rows x cols at (row, col) of a bf16 matrix, widened into `to` (ld = cols).
void widen(const void* from, int64_t ld, int64_t row, int64_t col, int64_t rows, int64_t cols, float* to) {
  const auto* src = static_cast<const uint16_t*>(from) + row * ld + col;
  convert_view(DType::bf16, src, View{Buf::a, 0, rows, cols, ld}, DType::f32, to, View{Buf::work, 0, rows, cols, cols});
}

// Widens op(X)'s block [r0, r0 + rows) x [c0, c0 + cols) as stored (a transposed operand's block
// is stored cols x rows), unless `key` says the scratch holds it already. Returns its ld.
int64_t widen_operand(ConstView x, int64_t r0, int64_t c0, int64_t rows, int64_t cols, std::vector<float>& buf,
                      const void*& src, int64_t (&key)[4], float*& out) {
  const int64_t stored_rows = x.trans ? cols : rows, stored_cols = x.trans ? rows : cols;
  out = sized(buf, rows * cols);
  const int64_t want[4] = {r0, c0, rows, cols};
  if (src != x.data || !std::equal(want, want + 4, key)) {
    widen(x.data, x.ld, x.trans ? c0 : r0, x.trans ? r0 : c0, stored_rows, stored_cols, out);
    src = x.data;
    std::copy(want, want + 4, key);
  }
  return stored_cols;
}

int64_t round_down(int64_t v, int64_t step) { return std::max(step, v / step * step); }

}  // namespace

int64_t widened_scratch_bytes() {
  const WidenedBlocks d;
  return (d.b_panel + d.a_panel + d.c_block + 3 * 16) * 4;
}

void gemm_bf16_widened(int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
                       bool accumulate, bool c4, const WidenedBlocks& blocks) {
  const std::pair<int64_t, const char*> sizes[] = {{m, "m"}, {n, "n"}, {k, "k"}, {ldc, "ldc"}, {a.ld, "lda"}, {b.ld, "ldb"}};
  for (const auto& [value, what] : sizes) to_int(value, what);
  if (m == 0 || n == 0) return;
  thread_local Scratch s;
  // The caller's operands change between calls even at one address: nothing is kept across calls.
  s.a_src = s.b_src = nullptr;
  const int64_t kc = std::max<int64_t>(1, std::min(k, blocks.k_block)), step = blocks.min_block;
  const int64_t nc = std::min(n, round_down(blocks.b_panel / kc, step));
  int64_t mc = std::min(m, round_down(blocks.a_panel / kc, step));
  if (!c4) mc = std::min(mc, round_down(blocks.c_block / nc, step));
  for (int64_t j0 = 0; j0 < n; j0 += nc) {
    const int64_t nb = std::min(nc, n - j0);
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
      const int64_t mb = std::min(mc, m - i0);
      // Where the f32 sums go: C itself when it is f32, else an f32 block rounded at the end.
      float* sums = c4 ? static_cast<float*>(c) + i0 * ldc + j0 : sized(s.c, mb * nb);
      const int64_t ld_sums = c4 ? ldc : nb;
      const View c_block{Buf::c, 0, mb, nb, ldc}, sums_block{Buf::work, 0, mb, nb, ld_sums};
      uint16_t* c16 = c4 ? nullptr : static_cast<uint16_t*>(c) + i0 * ldc + j0;
      if (!c4 && accumulate) convert_view(DType::bf16, c16, c_block, DType::f32, sums, sums_block);
      if (k == 0 && !accumulate)
        for (int64_t i = 0; i < mb; ++i) std::fill(sums + i * ld_sums, sums + i * ld_sums + nb, 0.0f);
      for (int64_t p0 = 0; p0 < k; p0 += kc) {
        const int64_t kb = std::min(kc, k - p0);
        float *wa = nullptr, *wb = nullptr;
        const int64_t lda = widen_operand(a, i0, p0, mb, kb, s.a, s.a_src, s.a_key, wa);
        const int64_t ldb = widen_operand(b, p0, j0, kb, nb, s.b, s.b_src, s.b_key, wb);
        const float beta = accumulate || p0 > 0 ? 1.0f : 0.0f;
        cblas_sgemm(CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans, b.trans ? CblasTrans : CblasNoTrans, int(mb),
                    int(nb), int(kb), 1.0f, wa, int(lda), wb, int(ldb), beta, sums, int(ld_sums));
      }
      if (!c4) convert_view(DType::f32, sums, sums_block, DType::bf16, c16, c_block);
    }
  }
}

}  // namespace cofuse::detail
