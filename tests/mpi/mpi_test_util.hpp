// Helpers for tests under mpirun: ranks, one seed per test run shared by all ranks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cofuse/config.hpp"

namespace cofuse::test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// A fresh seed per test run (or COFUSE_TEST_SEED), chosen by rank 0 and shared by all ranks.
/// Collective on first call. Printed at start-up and in every failure's trace.
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    // Every rank reads the variable, so a malformed one fails on every rank (not only on rank
    // 0, which would leave the others in the broadcast).
    const auto fixed = cofuse::config::test_seed().value;
    uint64_t value = 0;
    if (world_rank() == 0) value = fixed ? *fixed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return value;
  }();
  return seed;
}

/// Every rank's string, gathered on every rank (to assert that all ranks saw the same error).
inline std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), offsets(size);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return out;
}

/// A fresh directory every rank names alike (rank 0 makes it, the others get its name),
/// removed with everything in it when the object goes (after a barrier: nobody reads it then).
/// Collective to make and to destroy.
class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& prefix = "cofuse-test") {
    std::string path;
    if (world_rank() == 0) {
      std::string name = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
      if (mkdtemp(name.data())) path = name;
    }
    int length = static_cast<int>(path.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(static_cast<std::size_t>(length));
    MPI_Bcast(path.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cofuse::test
