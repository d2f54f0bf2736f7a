// Which host each rank runs on (cpu/comm/host_layout.hpp), on real ranks: one machine is one
// host; COFUSE_RANKS_PER_HOST makes consecutive groups of ranks stand for hosts, and a value
// that cannot be is refused on every rank by name.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// The layout logic on made-up machines (pure: layout_of takes each rank's host by its first
// rank), and the refusal of a layout a two-level schedule cannot take its hosts from.
TEST(HostLayout, UnevenOrInterleavedHostsAreIrregular) {
  const detail::HostLayout even = detail::layout_of({0, 0, 2, 2, 4, 4}, "made up");
  EXPECT_TRUE(even.regular);
  EXPECT_EQ(even.hosts, 3);
  EXPECT_EQ(even.ranks_per_host, 2);
  const detail::HostLayout uneven = detail::layout_of({0, 0, 0, 3, 3}, "made up");  // 3 ranks, then 2
  EXPECT_FALSE(uneven.regular);
  EXPECT_EQ(uneven.hosts, 2);
  EXPECT_EQ(uneven.ranks_per_host, 3);  // the most any host has
  const detail::HostLayout dealt = detail::layout_of({0, 1, 0, 1}, "made up");  // round-robin: 2 and 2
  EXPECT_FALSE(dealt.regular);
  EXPECT_EQ(dealt.host_of, (std::vector<int>{0, 1, 0, 1}));
}

TEST(HostLayout, ATwoLevelScheduleRefusesAnIrregularLayoutByName) {
  const Schedule two_level = *Schedule::parse("hetero-unfused-1d,topo=2level");
  ASSERT_EQ(two_level.host_ranks, 0);  // "the machine's"
  const auto refusal = [&](const detail::HostLayout& layout) {
    try {
      detail::with_layout_hosts(two_level, layout);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  const std::string uneven = refusal(detail::layout_of({0, 0, 0, 3, 3}, "MPI_COMM_TYPE_SHARED"));
  for (const char* part : {"topo=2level", "MPI_COMM_TYPE_SHARED", "2 hosts are not equal runs of consecutive ranks",
                           "host 0: ranks 0-2; host 1: ranks 3-4", "give host_ranks=R"})
    EXPECT_NE(uneven.find(part), std::string::npos) << part << " not in: " << uneven;
  const std::string dealt = refusal(detail::layout_of({0, 1, 0, 1}, "made up"));
  EXPECT_NE(dealt.find("host 0: ranks 0,2; host 1: ranks 1,3"), std::string::npos) << dealt;
  // A regular layout fills in host_ranks; a schedule with its own host_ranks, or a flat one, needs none.
  EXPECT_EQ(detail::with_layout_hosts(two_level, detail::layout_of({0, 0, 2, 2}, "made up")).host_ranks, 2);
  Schedule given = two_level;
  given.host_ranks = 1;
  EXPECT_EQ(detail::with_layout_hosts(given, detail::layout_of({0, 1, 0, 1}, "made up")).host_ranks, 1);
  EXPECT_NO_THROW(detail::with_layout_hosts(*Schedule::parse("hetero-unfused-1d"), detail::layout_of({0, 1, 0}, "x")));
}

}  // namespace
}  // namespace cofuse
