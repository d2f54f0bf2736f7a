// .npy files: round trip through our reader, exact header bytes, and malformed input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cofuse/tools/npy.hpp"
#include "cofuse/tools/reference.hpp"

namespace cofuse {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("cofuse_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(Npy, RoundTripF32AndF64) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const int64_t rows = 3, cols = 5;
    std::vector<unsigned char> data(rows * cols * dtype_size(dtype));
    fill_random(dtype, data.data(), rows * cols, 42, 0);
    const std::string path = temp_path(std::string("rt_") + to_string(dtype) + ".npy");
    write_npy(path, dtype, data.data(), rows, cols);
    const NpyArray back = read_npy(path);
    EXPECT_EQ(back.dtype, dtype);
    EXPECT_EQ(back.shape, (std::vector<int64_t>{rows, cols}));
    EXPECT_EQ(back.bytes, data);
    // The header is padded so the data starts at a multiple of 64 bytes.
    EXPECT_EQ((std::filesystem::file_size(path) - data.size()) % 64, 0u);
    std::remove(path.c_str());
  }
}

TEST(Npy, HeaderIsWhatNumpyExpects) {
  const float one = 1.0f;
  const std::string path = temp_path("header.npy");
  write_npy(path, DType::f32, &one, 1, 1);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t data_start = bytes.size() - sizeof(float);
  ASSERT_EQ(data_start % 64, 0u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }"), std::string::npos);
  EXPECT_EQ(bytes[data_start - 1], '\n');
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]) + 256 * static_cast<unsigned char>(bytes[9]), data_start - 10);
  std::remove(path.c_str());
}

TEST(Npy, MalformedFilesGiveClearErrors) {
  const std::string path = temp_path("bad.npy");
  auto write_raw = [&](const std::string& content) { std::ofstream(path, std::ios::binary) << content; };
  auto message_of = [&] {
    try {
      read_npy(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write_raw("not a numpy file at all");
  EXPECT_NE(message_of().find("bad magic"), std::string::npos);
  write_raw(std::string("\x93NUMPY\x01\x00\x10\x00", 10) + "{'descr': '<i4'");
  EXPECT_NE(message_of().find("truncated header"), std::string::npos);
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }";
  write_raw(std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header);
  EXPECT_NE(message_of().find("dtype"), std::string::npos);
  header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  write_raw(std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header + "abc");
  EXPECT_NE(message_of().find("data shorter"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_THROW(read_npy(temp_path("missing.npy")), Error);
  EXPECT_THROW(write_npy("/nonexistent-dir/x.npy", DType::f32, &header, 1, 1), Error);
}

TEST(FillRandom, DeterministicNonZeroAndInRange) {
  std::vector<double> x(1000), y(1000), z(1000);
  fill_random(DType::f64, x.data(), 1000, 7, 1);
  fill_random(DType::f64, y.data(), 1000, 7, 1);
  fill_random(DType::f64, z.data(), 1000, 7, 2);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  double sum_abs = 0;
  for (double v : x) {
    EXPECT_GE(v, -1.0);
    EXPECT_LT(v, 1.0);
    sum_abs += std::abs(v);
  }
  EXPECT_GT(sum_abs / 1000, 0.3) << "values must be spread over [-1, 1), not near zero";
}

}  // namespace
}  // namespace cofuse
