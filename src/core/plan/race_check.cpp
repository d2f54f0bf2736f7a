// find_race: the happens-before check on a plan's buffer views. It reasons about the plan as
// the executors run it, not about a run: two tasks that touch the same element, one of them
// writing, must be ordered, or a GEMM may write a block while MPI still sends it (or a receive
// lands in a block a GEMM is reading). ThreadSanitizer cannot see these races on the CPU:
// MPI's library is not instrumented, so its reads and writes of user buffers are invisible.
//
// What orders two tasks (the executors' contract, docs/architecture.md):
//   - a dependency, followed transitively: a task starts only after its deps have completed;
//   - the compute engine runs its tasks one at a time in plan order, so an earlier compute
//     task has completed before a later one starts.
// Nothing else does. Communication tasks are posted whenever their deps are met, in any order,
// and a send, receive or collective uses its buffers from its post until its completion.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/race_check.hpp"

namespace cofuse {

namespace {

// A view with its offset in one address space: the workspace and the gathered operand are one
// space when the gathered operand lives in the workspace (its last region); a plan without that
// region writes G only into a caller's buffer, a space of its own.
struct Footprint {
  int space = 0;
  View view;
  bool writes = false;
};

Footprint footprint(const Plan& plan, View v, bool writes) {
  const bool in_work = v.buf == Buf::gathered && plan.gathered_offset >= 0;
  const int space = in_work ? int(Buf::work) : int(v.buf);
  if (in_work) v.offset += plan.gathered_offset;
  if (v.contiguous()) v = View{v.buf, v.offset, 1, v.elements(), std::max<int64_t>(v.elements(), 1)};  // one span
  return {space, v, writes};
}

int64_t end_of(const View& v) { return v.offset + (v.rows - 1) * v.ld + v.cols; }

// Does row span [lo, hi) meet any row of v?
bool span_meets(int64_t lo, int64_t hi, const View& v) {
  // Rows j of v start at v.offset + j*ld; the first that can reach lo ends after lo.
  int64_t j = lo - v.offset - v.cols + 1;
  j = j <= 0 ? 0 : (j + v.ld - 1) / v.ld;
  for (; j < v.rows; ++j) {
    const int64_t start = v.offset + j * v.ld;
    if (start >= hi) return false;
    if (start + v.cols > lo) return true;
  }
  return false;
}

bool intersect(const View& a, const View& b) {
  if (a.empty() || b.empty()) return false;
  if (end_of(a) <= b.offset || end_of(b) <= a.offset) return false;
  if (a.rows == 1 && b.rows == 1) return true;  // two spans whose ranges meet
  // Two row-blocks of one matrix (same leading dimension, neither wrapping a row): rectangles.
  if (a.ld == b.ld && a.offset % a.ld + a.cols <= a.ld && b.offset % b.ld + b.cols <= b.ld) {
    const int64_t ar = a.offset / a.ld, ac = a.offset % a.ld, br = b.offset / b.ld, bc = b.offset % b.ld;
    return ar < br + b.rows && br < ar + a.rows && ac < bc + b.cols && bc < ac + a.cols;
  }
  const View& few = a.rows <= b.rows ? a : b;
  const View& many = a.rows <= b.rows ? b : a;
  for (int64_t r = 0; r < few.rows; ++r)
    if (span_meets(few.offset + r * few.ld, few.offset + r * few.ld + few.cols, many)) return true;
  return false;
}

// The view shifted by each rank's stride: a collective's per-rank slots.
std::vector<View> slots(const View& v, int64_t stride, int ranks) {
  std::vector<View> out;
  for (int j = 0; j < ranks; ++j) {
    View s = v;
    s.offset += j * stride;
    out.push_back(s);
  }
  return out;
}

// What a task reads and writes.
std::vector<Footprint> footprints(const Plan& plan, const Task& t) {
  std::vector<Footprint> out;
  auto add = [&](const View& v, bool writes) { out.push_back(footprint(plan, v, writes)); };
  switch (t.kind) {
    case TaskKind::gemm:
      add(t.x, false);
      add(t.y, false);
      add(t.z, true);  // an accumulating GEMM also reads z: a write covers that
      break;
    case TaskKind::send: add(t.x, false); break;
    case TaskKind::recv: add(t.z, true); break;
    case TaskKind::reduce:
    case TaskKind::pack:
    case TaskKind::unpack:
      add(t.x, false);
      add(t.z, true);
      break;
    case TaskKind::collective:
      switch (t.collective) {
        case Collective::allgather:
          add(t.x, false);
          for (const View& s : slots(t.z, t.stride, plan.desc.ranks)) add(s, true);
          break;
        case Collective::reduce_scatter:
          for (const View& s : slots(t.x, t.stride, plan.desc.ranks)) add(s, false);
          add(t.z, true);
          break;
        case Collective::allreduce:
          if (t.x != t.z) add(t.x, false);
          add(t.z, true);
          break;
      }
      break;
  }
  return out;
}

bool conflict(const std::vector<Footprint>& a, const std::vector<Footprint>& b) {
  for (const Footprint& p : a)
    for (const Footprint& q : b)
      if ((p.writes || q.writes) && p.space == q.space && intersect(p.view, q.view)) return true;
  return false;
}

}  // namespace

bool tasks_conflict(const Plan& plan, int a, int b) {
  return a != b && conflict(footprints(plan, plan.tasks[std::size_t(a)]), footprints(plan, plan.tasks[std::size_t(b)]));
}

std::vector<std::vector<int>> conflicting_predecessors(const Plan& plan) {
  // A sweep over each address space in order of first element: only footprints whose element
  // ranges [offset, end) overlap are compared exactly. Comparing every pair was quadratic in the
  // plan's tasks: a 1,024-rank ring plan has ~4,000 tasks per rank, and building the NCCL
  // programs of all its ranks took 77 s (cofuse sim, 2026-12-01).
  struct Span {
    int64_t lo, hi;
    int task;
    Footprint f;
  };
  std::vector<Span> spans;
  for (std::size_t i = 0; i < plan.tasks.size(); ++i)
    for (const Footprint& f : footprints(plan, plan.tasks[i]))
      if (!f.view.empty()) spans.push_back({f.view.offset, end_of(f.view), int(i), f});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.f.space != b.f.space ? a.f.space < b.f.space : a.lo < b.lo;
  });
  std::vector<std::vector<int>> out(plan.tasks.size());
  std::vector<const Span*> open;  // spans of the current space that may still meet the next one
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const Span& s = spans[k];
    if (k > 0 && spans[k - 1].f.space != s.f.space) open.clear();
    std::size_t kept = 0;
    for (const Span* o : open) {
      if (o->hi <= s.lo) continue;  // ends before this one starts, and so before every later one
      open[kept++] = o;
      if (o->task != s.task && (o->f.writes || s.f.writes) && intersect(o->f.view, s.f.view))
        out[std::size_t(std::max(o->task, s.task))].push_back(std::min(o->task, s.task));
    }
    open.resize(kept);
    open.push_back(&s);
  }
  for (std::vector<int>& before : out) {
    std::sort(before.begin(), before.end());
    before.erase(std::unique(before.begin(), before.end()), before.end());
  }
  return out;
}

std::string find_race(const Plan& plan) {
  const std::size_t n = plan.tasks.size(), words = (n + 63) / 64;
  // before[j]: a bit set of the tasks that have completed before task j starts. Deps precede
  // their task (a plan is in topological order), so one pass in plan order closes the relation
  // transitively: j's set is the union of its direct predecessors' sets and themselves.
  std::vector<uint64_t> before(n * words, 0);
  auto row = [&](std::size_t j) { return before.data() + j * words; };
  int last_compute = -1;
  for (std::size_t j = 0; j < n; ++j) {
    const Task& t = plan.tasks[j];
    std::vector<int> direct = t.deps;
    if (t.engine == EngineId::compute) {
      if (last_compute >= 0) direct.push_back(last_compute);
      last_compute = int(j);
    }
    for (int d : direct) {
      if (d < 0 || std::size_t(d) >= j) return "task " + std::to_string(j) + " (" + t.label + ") depends on a task that does not precede it";
      row(j)[std::size_t(d) / 64] |= uint64_t(1) << (std::size_t(d) % 64);
      for (std::size_t w = 0; w < words; ++w) row(j)[w] |= row(std::size_t(d))[w];
    }
  }
  const std::vector<std::vector<int>> conflicts = conflicting_predecessors(plan);
  for (std::size_t j = 0; j < n; ++j)
    for (int i : conflicts[j])
      if (!(row(j)[std::size_t(i) / 64] >> (std::size_t(i) % 64) & 1))
        return "tasks " + std::to_string(i) + " (" + plan.tasks[std::size_t(i)].label + ") and " + std::to_string(j) + " (" +
               plan.tasks[j].label + ") touch the same elements, one writing, and nothing orders them";
  return "";
}

}  // namespace cofuse
