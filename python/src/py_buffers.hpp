// Python arrays as cofuse buffers: any object with the buffer protocol (a numpy array; the
// package hands torch CPU tensors over as their numpy views, which share memory), checked to be
// what an op needs. Nothing here throws for a bad argument: the problem comes back as a
// Status, so that the ranks can agree on it and all raise instead of one raising and the others
// waiting for it in a collective.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "cofuse/op_desc.hpp"
#include "cofuse/status.hpp"

namespace cofuse::py {

/// One 2-D argument, as the buffer protocol shows it. Holds the buffer view, so the memory
/// stays valid (and the exporter keeps it in place) while the Matrix lives.
struct Matrix {
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  void* data = nullptr;
  bool readonly = false;
  pybind11::buffer_info info;
};

/// Reads `object` (named `name` in messages) as a C-contiguous 2-D float32, float64 or bf16 matrix
/// (bf16: a 2-byte integer buffer of its raw bits, numpy having no bfloat16).
/// A str in its place is a problem the caller already found on this rank (a tensor on a GPU,
/// say): its text comes back as the Status. writable: the argument is written (out=).
Status read_matrix(pybind11::handle object, const char* name, bool writable, Matrix& out);

/// "float32" / "float64": the numpy name of a dtype, as messages to Python users say it.
const char* numpy_name(DType dtype);

/// A new C-contiguous numpy array of `dtype` and shape rows x cols (uninitialised).
pybind11::object new_array(DType dtype, int64_t rows, int64_t cols);

}  // namespace cofuse::py
