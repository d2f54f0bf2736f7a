// Which host each rank runs on (cpu/comm/host_layout.hpp), on real ranks: one machine is one
// host; COFUSE_RANKS_PER_HOST makes consecutive groups of ranks stand for hosts, and a value
// that cannot be is refused on every rank by name.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "cofuse/status.hpp"
#include "cpu/comm/host_layout.hpp"

namespace cofuse {
namespace {

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

struct UnsetAfter {
  ~UnsetAfter() { unsetenv("COFUSE_RANKS_PER_HOST"); }
};

TEST(HostLayout, OneMachineIsOneHost) {
  unsetenv("COFUSE_RANKS_PER_HOST");
  const detail::HostLayout l = detail::host_layout(MPI_COMM_WORLD);
  EXPECT_EQ(l.hosts, 1);
  EXPECT_EQ(l.ranks_per_host, world_size());
  EXPECT_TRUE(l.regular);
  EXPECT_EQ(l.source, "MPI_COMM_TYPE_SHARED");
  for (int host : l.host_of) EXPECT_EQ(host, 0);
}

TEST(HostLayout, TheOverrideGroupsConsecutiveRanks) {
  UnsetAfter unset;
  setenv("COFUSE_RANKS_PER_HOST", "1", 1);
  detail::HostLayout l = detail::host_layout(MPI_COMM_WORLD);
  EXPECT_EQ(l.hosts, world_size());
  EXPECT_EQ(l.ranks_per_host, 1);
  EXPECT_TRUE(l.regular);
  if (world_size() % 2 == 0) {
    setenv("COFUSE_RANKS_PER_HOST", "2", 1);
    l = detail::host_layout(MPI_COMM_WORLD);
    EXPECT_EQ(l.hosts, world_size() / 2);
    EXPECT_EQ(l.ranks_per_host, 2);
    for (int r = 0; r < world_size(); ++r) EXPECT_EQ(l.host_of[std::size_t(r)], r / 2);
  }
}

TEST(HostLayout, AnOverrideThatCannotBeIsRefusedByName) {
  UnsetAfter unset;
  for (const char* bad : {"0", "-2", "two", "2x"}) {
    setenv("COFUSE_RANKS_PER_HOST", bad, 1);
    try {
      detail::host_layout(MPI_COMM_WORLD);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(std::string("COFUSE_RANKS_PER_HOST=") + bad), std::string::npos) << e.what();
    }
  }
  if (world_size() > 1) {
    setenv("COFUSE_RANKS_PER_HOST", std::to_string(world_size() + 1).c_str(), 1);
    EXPECT_THROW(detail::host_layout(MPI_COMM_WORLD), Error);
  }
}

// Set on one rank only: every rank refuses (none hangs in a collective the others skip).
TEST(HostLayout, AnOverrideOnSomeRanksOnlyIsRefusedEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  UnsetAfter unset;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) setenv("COFUSE_RANKS_PER_HOST", "1", 1);
  else unsetenv("COFUSE_RANKS_PER_HOST");
  try {
    detail::host_layout(MPI_COMM_WORLD);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("COFUSE_RANKS_PER_HOST differs between ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cofuse
