#include "measure/report_predict.hpp"

#include "cofuse/config.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/model/simulate.hpp"

namespace cofuse::measure {

namespace {

using json = nlohmann::ordered_json;

OpDesc desc_of(const json& c) {
  OpDesc d;
  d.op = *parse_op(c.at("op").get<std::string>());
  d.axis = *parse_axis(c.at("axis").get<std::string>());
  d.dtype = *parse_dtype(c.at("dtype").get<std::string>());
  d.m = c.at("m").get<int64_t>();
  d.n = c.at("n").get<int64_t>();
  d.k = c.at("k").get<int64_t>();
  d.trans_a = c.at("trans_a").get<bool>();
  d.trans_b = c.at("trans_b").get<bool>();
  d.ranks = c.at("ranks").get<int>();
  return d;
}

}  // namespace

std::vector<Prediction> predict_records(const std::vector<json>& records, const MachineProfile& profile) {
  std::vector<Prediction> out;
  for (const json& r : records) {
    if (r.at("variant").get<std::string>() == "naive") continue;  // not a cofuse plan: nothing to simulate
    const OpDesc d = desc_of(r.at("case"));
    const auto schedule = Schedule::parse(r.at("schedule").get<std::string>());
    if (!schedule) continue;
    SimOptions options;
    options.tile_rows = r.at("run").value("tile_rows", config::kTileRows);  // the settings the run used
    options.poll_us = r.at("run").value("poll_us", config::kPollUs);
    const SimResult sim = simulate(d, *schedule, profile, options);
    out.push_back({d, r.at("schedule_name").get<std::string>(), r.at("machine").at("link").value("description", "?"),
                   r.at("times_ms").at("total").at("median").get<double>(), sim.makespan_s * 1e3,
                   r.at("metrics").at("exposed_ms").get<double>(), sim.losses.exposed_comm_s * 1e3});
  }
  return out;
}

}  // namespace cofuse::measure
