// Writing and reading NumPy .npy files (format version 1.0, little-endian, C order),
// so anyone can load a run's buffers with numpy.load and check them independently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cofuse/op_desc.hpp"

namespace cofuse {

/// Writes a rows × cols row-major matrix of dtype: f32 '<f4', f64 '<f8', f16 '<f2', and bf16,
/// which numpy has no type for, as its raw bits '<u2' (uint16; as float32 in numpy:
/// (x.astype(np.uint32) << 16).view(np.float32)). Throws Error(io) when the file cannot be written.
void write_npy(const std::string& path, DType dtype, const void* data, int64_t rows, int64_t cols);

/// A matrix read back from a .npy file.
struct NpyArray {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // raw little-endian elements, C order
};

/// Reads a file written by write_npy (or numpy: '<f4'/'<f8'/'<f2', or '<u2' read as bf16's bits;
/// C order, 1 or 2 dimensions).
/// Throws Error(io) for a missing file and Error(invalid_argument) for a malformed one.
NpyArray read_npy(const std::string& path);

}  // namespace cofuse
