#include <nlohmann/json.hpp>

#include "cofuse/tools/trace_json.hpp"

namespace cofuse {

std::string chrome_trace_json(const std::vector<const Plan*>& plans, const std::vector<std::vector<TaskTime>>& times,
                              double origin, const std::vector<std::string>& engine_names, const std::string& clock) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t r = 0; r < plans.size(); ++r) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r}, {"args", {{"sort_index", r}}}});
    for (std::size_t e = 0; e < engine_names.size(); ++e)
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", e}, {"args", {{"name", engine_names[e]}}}});
    const Plan& plan = *plans[r];
    for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
      const Task& t = plan.tasks[i];
      const TaskTime& tt = times[r][i];
      if (tt.end <= 0) continue;  // never ran
      events.push_back({{"name", t.label},
                        {"cat", to_string(t.kind)},
                        {"ph", "X"},
                        {"pid", r},
                        {"tid", static_cast<int>(t.engine)},
                        {"ts", (tt.start - origin) * 1e6},
                        {"dur", std::max(0.0, tt.end - tt.start) * 1e6},
                        {"args", {{"task", i}, {"kind", to_string(t.kind)}, {"chunk", t.chunk}, {"step", t.step},
                                  {"bytes", t.bytes}, {"flops", t.flops}, {"peer", t.peer}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  if (!plans.empty())
    doc["otherData"] = {{"op", plans[0]->desc.to_string()}, {"schedule", plans[0]->schedule.to_string()},
                        {"clock", clock}};
  return doc.dump();
}

}  // namespace cofuse
