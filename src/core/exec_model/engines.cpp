#include "core/exec_model/engines.hpp"

#include "core/plan/race_check.hpp"

namespace cofuse::detail {

EngineRules engine_rules(const Schedule& s) {
  const bool overlapped = s.overlap != Overlap::none;
  EngineRules r;
  r.driver = s.driver;
  r.separate_comm_driver = overlapped && s.fusion == Fusion::unfused;
  r.tiled_gemm = overlapped && s.fusion == Fusion::fused;
  r.blocking_collectives = !overlapped;
  r.cpu_driver = s.driver == CommDriver::thread || s.driver == CommDriver::inline_;
  r.gpu_driver = !r.cpu_driver;
  return r;
}

const char* EngineRules::cpu_engine_name(EngineId engine) const {
  if (engine == EngineId::compute) return "compute (calling thread)";
  return separate_comm_driver ? "comm (progress thread)" : "comm (driven by the calling thread)";
}

bool crosses_ranks(TaskKind kind) {
  return kind == TaskKind::send || kind == TaskKind::recv || kind == TaskKind::collective;
}

std::vector<int> compute_order(const Plan& plan) {
  std::vector<int> order;
  for (std::size_t i = 0; i < plan.tasks.size(); ++i)
    if (plan.tasks[i].engine == EngineId::compute) order.push_back(static_cast<int>(i));
  return order;
}

std::vector<uint8_t> needed_by_communication(const Plan& plan) {
  const std::vector<Task>& tasks = plan.tasks;
  std::vector<uint8_t> needed(tasks.size(), 0);
  // Tasks are in a topological order, so every task's dependents come after it.
  for (std::size_t i = tasks.size(); i-- > 0;) {
    if (tasks[i].engine != EngineId::compute || crosses_ranks(tasks[i].kind)) needed[i] = 1;
    if (needed[i])
      for (int d : tasks[i].deps) needed[static_cast<std::size_t>(d)] = 1;
  }
  return needed;
}

std::vector<std::vector<int>> compute_predecessors(const Plan& plan) {
  const std::vector<Task>& tasks = plan.tasks;
  auto local_compute = [&](std::size_t i) { return tasks[i].engine == EngineId::compute && !crosses_ranks(tasks[i].kind); };
  std::vector<std::vector<int>> out(tasks.size());
  const std::vector<std::vector<int>> conflicting = conflicting_predecessors(plan);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (!local_compute(i)) continue;
    for (int j : conflicting[i])
      if (local_compute(std::size_t(j))) out[i].push_back(j);
  }
  return out;
}

}  // namespace cofuse::detail
