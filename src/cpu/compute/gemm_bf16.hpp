// The two ways the CPU multiplies bf16, behind gemm() (gemm.hpp), which picks one per process.
// Both keep one contract: bf16 products summed in f32, C rounded to bf16 once (with accumulate,
// C's old value is added in f32 before that rounding); c4: C holds f32 (wire=f32) and nothing is
// rounded. Declared here so that tests can run each path on any machine that has it.
#pragma once

#include <cstdint>
#include <string>

#include "cpu/compute/gemm.hpp"

namespace cofuse::detail {

/// oneDNN's bf16 matmul (gemm_onednn.cpp): no operand copied; a primitive per shape and thread.
/// Error(internal) where oneDNN has no bf16 matmul for this CPU (onednn_bf16_problem()).
void gemm_bf16_onednn(int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
                      bool accumulate, bool c4);

/// "" where oneDNN has a bf16 matmul for this CPU; otherwise oneDNN's reason. Probed once.
std::string onednn_bf16_problem();

/// The widened path's block bounds, in elements (gemm_widened.cpp says why these).
struct WidenedBlocks {
  int64_t k_block = 4096;          // k per block
  int64_t b_panel = 4 << 20;       // kc x nc of B widened at once (16 MiB)
  int64_t a_panel = 2 << 20;       // mc x kc of A (8 MiB)
  int64_t c_block = 1 << 20;       // mc x nc of a bf16 C's f32 sums (4 MiB)
  int64_t min_block = 16;          // rows or columns of a block at the least
};

/// The widened path (gemm_widened.cpp): blocks of the operands widened to f32 (exact) and
/// multiplied by OpenBLAS's sgemm; runs on every CPU. Sizes must fit BLAS's int, as for f32.
/// blocks: the default bounds; tests pass small ones to cut every dimension into blocks.
void gemm_bf16_widened(int64_t m, int64_t n, int64_t k, ConstView a, ConstView b, void* c, int64_t ldc,
                       bool accumulate, bool c4, const WidenedBlocks& blocks = {});

/// The most f32 scratch the widened path keeps per thread, in bytes (its blocks' bound).
int64_t widened_scratch_bytes();

}  // namespace cofuse::detail
