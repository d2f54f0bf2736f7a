// PlannerCache (include/cofuse/model/planner.hpp): the planner's answers, owned by the caller.
#include "cofuse/model/planner.hpp"

namespace cofuse {

std::size_t PlannerCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return answers_.size();
}

void PlannerCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  answers_.clear();
}

std::optional<PlanChoice> PlannerCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = answers_.find(key);
  if (it == answers_.end()) return std::nullopt;
  PlanChoice answer = it->second;
  answer.from_cache = true;
  return answer;
}

PlanChoice PlannerCache::store(const std::string& key, PlanChoice choice) {
  std::lock_guard<std::mutex> lock(mutex_);
  return answers_.emplace(key, std::move(choice)).first->second;
}

}  // namespace cofuse
