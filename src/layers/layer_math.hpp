// Elementwise pieces of the layers, on row-major buffers of f32, f64 or bf16 (computed in double,
// each result rounded once to the buffer's type): bias, bias gradient, GeLU and its derivative, SGD.
#pragma once

#include <cstdint>

#include "cofuse/op_desc.hpp"

namespace cofuse::detail {

/// y[i, j] += b[j] for a rows x cols y.
void add_bias(DType t, void* y, int64_t rows, int64_t cols, const void* b);
/// db[j] = Σ_i dy[i, j].
void column_sums(DType t, const void* dy, int64_t rows, int64_t cols, void* db);
/// a = gelu(h), tanh form: 0.5·h·(1 + tanh(√(2/π)·(h + 0.044715·h³))).
void gelu(DType t, const void* h, void* a, int64_t n);
/// dh = da · gelu'(h).
void gelu_backward(DType t, const void* h, const void* da, void* dh, int64_t n);
/// w -= lr · dw.
void sgd(DType t, void* w, const void* dw, int64_t n, double lr);

}  // namespace cofuse::detail
