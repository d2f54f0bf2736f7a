// The tuning database as a file several processes write (tuning.hpp, TuningDb::save): ranks of
// one job, or two jobs tuning at once, each record their winners in the same file, and none may
// lose another's entry.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cofuse/model/tuning.hpp"
#include "tune/winner.hpp"

namespace cofuse {
namespace {

// An entry whose key is its own: (writer, i) differ in machine and M bucket.
TuningEntry entry(int writer, int i, const char* schedule = "serial") {
  TuningEntry e;
  e.machine = "writer " + std::to_string(writer);
  e.ranks = 2;
  e.op = "gemm_rs";
  e.dtype = "f32";
  e.axis = "m";
  e.m_bucket = i;
  e.n_bucket = e.k_bucket = 10;
  e.schedule = *Schedule::parse(schedule);
  e.m = int64_t(1) << i;
  e.measured_by = "test writer " + std::to_string(writer);
  return e;
}

const TuningEntry* find(const TuningDb& db, const TuningEntry& key) {
  for (const TuningEntry& e : db.entries())
    if (e.machine == key.machine && e.m_bucket == key.m_bucket) return &e;
  return nullptr;
}

struct RemoveAfter {
  std::string path;
  ~RemoveAfter() {
    std::remove(path.c_str());
    std::remove((path + ".lock").c_str());
  }
};

// Processes that each record entries of their own in one file, one save per entry, all at once:
// every entry of every writer must be in the file at the end. (Before saves merged under a lock,
// the last rename won and the entries another writer saved since this one read the file were lost.)
TEST(TuningDb, ConcurrentWritersKeepEveryEntry) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_concurrent_" + std::to_string(::getpid()) + ".json";
  const RemoveAfter cleanup{path};
  std::remove(path.c_str());
  constexpr int kWriters = 3, kEntries = 30;
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a writer: wait for the start, then load, put, save, as online tuning records
      ::close(start[1]);
      char go = 0;
      const bool started = ::read(start[0], &go, 1) == 0;  // EOF: the parent closed its end
      int status = started ? 0 : 2;
      try {
        for (int i = 0; i < kEntries && status == 0; ++i) {
          TuningDb db = TuningDb::load(path);
          db.put(entry(w, i));
          db.save(path);
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  ::close(start[0]);
  ::close(start[1]);  // every writer starts now
  for (const pid_t pid : children) {
    int status = -1;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed (status " << status << ")";
  }
  std::string warning;
  const TuningDb db = TuningDb::load(path, &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_EQ(db.entries().size(), std::size_t(kWriters * kEntries));
  for (int w = 0; w < kWriters; ++w)
    for (int i = 0; i < kEntries; ++i) {
      const TuningEntry* e = find(db, entry(w, i));
      ASSERT_NE(e, nullptr) << "writer " << w << "'s entry " << i << " was lost";
      EXPECT_EQ(e->m, int64_t(1) << i);
      EXPECT_EQ(e->measured_by, "test writer " + std::to_string(w));
    }
}

// A database read long ago (cofuse tune reads it before measuring for minutes) saves what was put
// into it since, not its stale copies of the rest: an entry another process replaced meanwhile
// keeps the newer schedule, and one put here replaces the file's.
TEST(TuningDb, ASaveMergesOnlyWhatWasPutSinceTheLoad) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_merge_" + std::to_string(::getpid()) + ".json";
  const RemoveAfter cleanup{path};
  std::remove(path.c_str());
  {
    TuningDb first;
    first.put(entry(0, 1, "serial"));
    first.put(entry(0, 2, "serial"));
    first.save(path);
  }
  TuningDb old = TuningDb::load(path);  // holds (0, 1) and (0, 2) as serial
  {
    TuningDb other = TuningDb::load(path);
    other.put(entry(0, 1, "hetero-unfused-1d"));  // another process's newer verdict
    other.save(path);
  }
  old.put(entry(0, 2, "uniform-fused-1d"));  // this one's own
  old.put(entry(1, 3));
  old.save(path);
  const TuningDb back = TuningDb::load(path);
  ASSERT_EQ(back.entries().size(), 3u);
  ASSERT_NE(find(back, entry(0, 1)), nullptr);
  EXPECT_EQ(find(back, entry(0, 1))->schedule, *Schedule::parse("hetero-unfused-1d")) << "a stale copy won";
  ASSERT_NE(find(back, entry(0, 2)), nullptr);
  EXPECT_EQ(find(back, entry(0, 2))->schedule, *Schedule::parse("uniform-fused-1d"));
  EXPECT_NE(find(back, entry(1, 3)), nullptr);
}

// A file that is not a database (corrupt, foreign) is replaced by what this one saves, as load
// ignores it: a bad file never stops a run.
TEST(TuningDb, ASaveOverACorruptFileReplacesIt) {
  const std::string path = ::testing::TempDir() + "cofuse_tuning_corrupt_" + std::to_string(::getpid()) + ".json";
  const RemoveAfter cleanup{path};
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs("{ not json", f);
    std::fclose(f);
  }
  TuningDb db;
  db.put(entry(2, 5));
  db.save(path);
  std::string warning;
  const TuningDb back = TuningDb::load(path, &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  ASSERT_EQ(back.entries().size(), 1u);
  EXPECT_NE(find(back, entry(2, 5)), nullptr);
}

// The one winner rule (online tuning and cofuse tune): the fastest eligible candidate, unless it
// does not beat serial (index 0) by the noise guard; an ineligible one (no counted call, or a
// failed check) never wins, however fast it measured.
TEST(WinnerRule, TheFastestEligibleBeatsSerialByTheGuardOrSerialStays) {
  using detail::MeasuredCandidate;
  const Schedule a = *Schedule::parse("hetero-unfused-1d"), b = *Schedule::parse("uniform-fused-1d");
  std::vector<MeasuredCandidate> m = {{serial_schedule(), "serial", 1.00}, {a, "A", 0.90}, {b, "B", 0.95}};
  EXPECT_EQ(detail::pick_winner(m, 0.03), 1u);
  EXPECT_EQ(detail::pick_winner(m, 0.15), 0u);  // a 10% lead is not the 15% asked for
  m[1].eligible = false;                        // A failed its check
  EXPECT_EQ(detail::pick_winner(m, 0.03), 2u);
  m[2].median_s = 0.98;
  EXPECT_EQ(detail::pick_winner(m, 0.03), 0u);  // 2% is noise
  m[1].median_s = 0.0;                          // an ineligible zero (no call counted) is no win
  EXPECT_EQ(detail::pick_winner(m, 0.0), 2u);
  const OpDesc d{OpKind::gemm_rs, 64, 64, 64, DType::f32, false, false, Axis::m, 2};
  const TuningEntry e = detail::winner_entry(d, "this-host-shm", m, 2, "cofuse tune");
  EXPECT_EQ(e.schedule, b);
  EXPECT_EQ(e.measured_by, "cofuse tune");
  EXPECT_DOUBLE_EQ(e.serial_ms, 1000.0);
  EXPECT_EQ(e.candidates, "serial=1000.000; A=0.000; B=980.000");
}

}  // namespace
}  // namespace cofuse
