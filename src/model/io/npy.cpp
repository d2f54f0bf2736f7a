// NumPy .npy format 1.0: magic "\x93NUMPY", version 1.0, a little-endian uint16 header length,
// then an ASCII dict {'descr': '<f4', 'fortran_order': False, 'shape': (r, c), } padded with
// spaces and a final newline so the data starts on a 64-byte boundary; then the raw data.
#include "cofuse/tools/npy.hpp"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "cofuse/status.hpp"
#include "core/common/quote.hpp"

namespace cofuse {

namespace {

const char kMagic[] = "\x93NUMPY";

Error malformed(const std::string& path, const std::string& why) {
  return Error(ErrorCode::invalid_argument, "read_npy: " + path + " is not a supported .npy file: " + why);
}

// numpy's name of dtype's elements. numpy has no bfloat16: bf16 is saved as its raw bits, '<u2'
// (uint16), and read back as bf16 (docs/cli.md: `(x.astype(np.uint32) << 16).view(np.float32)`).
const char* descr(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::bf16: return "<u2";
    case DType::f16: return "<f2";
    case DType::e4m3:  // no CPU path makes an fp8 matrix to save (C is bf16 or f32)
      throw Error(ErrorCode::invalid_argument, "write_npy: e4m3 matrices are not written (numpy has no fp8)");
  }
  return "<f4";
}

}  // namespace

void write_npy(const std::string& path, DType dtype, const void* data, int64_t rows, int64_t cols) {
  std::ostringstream dict;
  dict << "{'descr': '" << descr(dtype) << "', 'fortran_order': False, 'shape': (" << rows << ", " << cols << "), }";
  std::string header = dict.str();
  const std::size_t unpadded = 6 + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');

  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(ErrorCode::io, "write_npy: cannot open " + path + " for writing: " + std::strerror(errno));
  const unsigned char version[2] = {1, 0};
  const uint16_t length = static_cast<uint16_t>(header.size());
  const unsigned char length_le[2] = {static_cast<unsigned char>(length & 0xff), static_cast<unsigned char>(length >> 8)};
  out.write(kMagic, 6);
  out.write(reinterpret_cast<const char*>(version), 2);
  out.write(reinterpret_cast<const char*>(length_le), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(rows * cols * int64_t(dtype_size(dtype))));
  if (!out) throw Error(ErrorCode::io, "write_npy: writing " + path + " failed");
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, "read_npy: cannot open " + path + ": " + std::strerror(errno));
  char magic[6] = {};
  unsigned char version[2] = {}, length_le[2] = {};
  in.read(magic, 6);
  in.read(reinterpret_cast<char*>(version), 2);
  in.read(reinterpret_cast<char*>(length_le), 2);
  if (!in || std::memcmp(magic, kMagic, 6) != 0) throw malformed(path, "bad magic");
  if (version[0] != 1) throw malformed(path, "format version " + std::to_string(version[0]) + " (only 1.x)");
  const std::size_t length = length_le[0] | (std::size_t(length_le[1]) << 8);
  std::string header(length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(length));
  if (!in) throw malformed(path, "truncated header");

  NpyArray array;
  std::smatch match;
  if (!std::regex_search(header, match, std::regex("'descr':\\s*'([<|=]?)(f4|f8|f2|u2)'")))
    throw malformed(path, "dtype is not little-endian f4, f8, f2 or u2 (bf16's bits)");
  array.dtype = match[2] == "f8" ? DType::f64 : match[2] == "f2" ? DType::f16 : match[2] == "u2" ? DType::bf16 : DType::f32;
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True"))) throw malformed(path, "Fortran order");
  if (!std::regex_search(header, match, std::regex("'shape':\\s*\\(([^)]*)\\)"))) throw malformed(path, "no shape");
  std::istringstream dims(match[1].str());
  std::string token;
  int64_t elements = 1;
  while (std::getline(dims, token, ',')) {
    if (token.find_first_not_of(" ") == std::string::npos) continue;
    int64_t dim = 0;
    try {
      dim = std::stoll(token);
    } catch (const std::exception&) {
      throw malformed(path, "shape entry " + in_quotes(token) + " is not a number");
    }
    if (dim < 0 || (dim > 0 && elements > INT64_MAX / 8 / dim)) throw malformed(path, "shape out of range");
    array.shape.push_back(dim);
    elements *= dim;
  }
  if (array.shape.empty() || array.shape.size() > 2) throw malformed(path, "only 1-D and 2-D arrays are supported");
  array.bytes.resize(static_cast<std::size_t>(elements * int64_t(dtype_size(array.dtype))));
  in.read(reinterpret_cast<char*>(array.bytes.data()), static_cast<std::streamsize>(array.bytes.size()));
  if (!in) throw malformed(path, "data shorter than its shape says");
  return array;
}

}  // namespace cofuse
