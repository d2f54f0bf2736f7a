#include "model/sim/symmetry.hpp"

namespace cofuse::detail {

namespace {

bool same_shape(const View& a, const View& b) { return a.rows == b.rows && a.cols == b.cols; }

bool same_timing(const Task& a, const Task& b, int shift, int ranks) {
  const bool message = a.kind == TaskKind::send || a.kind == TaskKind::recv;
  return a.kind == b.kind && a.engine == b.engine && a.deps == b.deps && a.tag == b.tag && a.bytes == b.bytes &&
         a.flops == b.flops && a.collective == b.collective && a.trans_x == b.trans_x && a.trans_y == b.trans_y &&
         a.accumulate == b.accumulate && same_shape(a.x, b.x) && same_shape(a.y, b.y) && same_shape(a.z, b.z) &&
         (message ? (a.peer + shift) % ranks == b.peer : a.peer == b.peer);
}

std::vector<Plan> lower_range(const OpDesc& desc, const Schedule& schedule, int first, int count) {
  std::vector<Plan> plans;
  plans.reserve(std::size_t(count));
  for (int r = first; r < first + count; ++r) plans.push_back(lower(desc, schedule, r));
  return plans;
}

}  // namespace

bool repeats(const Plan& a, const Plan& b, int shift, int ranks) {
  if (a.tasks.size() != b.tasks.size()) return false;
  for (std::size_t i = 0; i < a.tasks.size(); ++i)
    if (!same_timing(a.tasks[i], b.tasks[i], shift, ranks)) return false;
  return true;
}

std::vector<Plan> plans_to_simulate(const OpDesc& desc, const Schedule& schedule, const CostModel& costs, bool fold) {
  const int p = desc.ranks;
  if (!fold) return lower_range(desc, schedule, 0, p);
  int q = 1;
  while (q <= p / 4 && !costs.foldable(q)) ++q;
  if (q > p / 4) return lower_range(desc, schedule, 0, p);  // no period, or fewer than 4 of them
  std::vector<Plan> first = lower_range(desc, schedule, 0, q);
  // The second, middle and last periods: a lowering that is not shift-invariant shows it at a
  // neighbour, at the wrap-around, or across halves (a halving or doubling pattern).
  for (const int start : {q, p / q / 2 * q, p - q}) {
    const std::vector<Plan> other = lower_range(desc, schedule, start, q);
    for (int r = 0; r < q; ++r)
      if (!repeats(first[std::size_t(r)], other[std::size_t(r)], start, p)) return lower_range(desc, schedule, 0, p);
  }
  return first;
}

}  // namespace cofuse::detail
