#include "py_buffers.hpp"

#include <pybind11/numpy.h>

#include <sstream>

namespace cofuse::py {

namespace {

std::string shape_text(const pybind11::buffer_info& info) {
  std::ostringstream out;
  out << "(";
  for (std::size_t i = 0; i < info.shape.size(); ++i) out << (i ? ", " : "") << info.shape[i];
  out << (info.shape.size() == 1 ? ",)" : ")");
  return out.str();
}

}  // namespace

const char* numpy_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::e4m3: return "float8_e4m3fn";  // torch's name; the CPU executor refuses e4m3
  }
  return "?";
}

Status read_matrix(pybind11::handle object, const char* name, bool writable, Matrix& out) {
  const std::string who = name;
  if (pybind11::isinstance<pybind11::str>(object)) return {ErrorCode::invalid_argument, object.cast<std::string>()};
  if (!PyObject_CheckBuffer(object.ptr()))
    return {ErrorCode::invalid_argument, who + " must be a numpy array or a torch CPU tensor, not " +
                                             std::string(Py_TYPE(object.ptr())->tp_name)};
  try {
    out.info = pybind11::reinterpret_borrow<pybind11::buffer>(object).request();
  } catch (const pybind11::error_already_set& e) {
    return {ErrorCode::invalid_argument, who + ": its buffer cannot be read: " + e.what()};
  }
  const pybind11::buffer_info& info = out.info;
  // The format's last character is the type; a leading '<', '=' or '@' is native byte order here.
  const std::string& format = info.format;
  const char type = format.empty() ? '?' : format.back();
  const bool native = format.size() == 1 || format[0] == '<' || format[0] == '=' || format[0] == '@';
  if (native && type == 'f' && info.itemsize == 4) out.dtype = DType::f32;
  else if (native && type == 'd' && info.itemsize == 8) out.dtype = DType::f64;
  // numpy has no bfloat16: a 2-byte integer array holds bf16's raw bits (a torch.bfloat16
  // tensor arrives as such a view, and .npy files hold bf16 as uint16).
  else if (native && (type == 'h' || type == 'H') && info.itemsize == 2) out.dtype = DType::bf16;
  else
    return {ErrorCode::invalid_argument,
            who + " has element format '" + format +
                "': cofuse's CPU ops take float32, float64 or bfloat16 (torch.bfloat16, or its raw bits as a numpy "
                "int16/uint16 array); float16 runs on GPUs"};
  if (info.ndim != 2)
    return {ErrorCode::invalid_argument, who + " must be 2-D (a matrix), but its shape is " + shape_text(info)};
  out.rows = info.shape[0];
  out.cols = info.shape[1];
  // C-contiguous: rows of cols elements, one after another (a dimension of size 1 may have any stride).
  const bool contiguous = (info.shape[1] <= 1 || info.strides[1] == info.itemsize) &&
                          (info.shape[0] <= 1 || info.strides[0] == info.shape[1] * info.itemsize);
  if (!contiguous)
    return {ErrorCode::invalid_argument,
            who + " is not C-contiguous (shape " + shape_text(info) + ", strides " + std::to_string(info.strides[0]) +
                ", " + std::to_string(info.strides[1]) +
                " bytes): pass numpy.ascontiguousarray(x) or x.contiguous(); cofuse reads rows in place and never copies"};
  out.readonly = info.readonly;
  if (writable && out.readonly) return {ErrorCode::invalid_argument, who + " is read-only, and cofuse writes it"};
  out.data = info.ptr;
  return {};
}

pybind11::object new_array(DType dtype, int64_t rows, int64_t cols) {
  const std::vector<pybind11::ssize_t> shape{rows, cols};
  if (dtype == DType::f64) return pybind11::array_t<double>(shape);
  if (dtype == DType::bf16) return pybind11::array_t<int16_t>(shape);  // bf16's raw bits (torch views them as bfloat16)
  return pybind11::array_t<float>(shape);
}

}  // namespace cofuse::py
