#include "report_predict.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "cofuse/cofuse.hpp"
#include "text.hpp"
#include "timing.hpp"
#include "text.hpp"

namespace cofuse::cli {

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

int print_predictions(const std::vector<json>& records, const std::string& profile_name) {
  const MachineProfile profile = load_profile(profile_name);
  std::cout << "predicted with profile " << profile.name << (profile.validated ? " (measured)" : " (datasheet, not validated)")
            << "; error = predicted / measured - 1 (medians of the slowest rank)\n";
  std::cout << std::left << std::setw(38) << "case" << std::setw(22) << "schedule" << std::right << std::setw(12)
            << "measured ms" << std::setw(13) << "predicted ms" << std::setw(9) << "error" << "\n";
  std::map<std::string, std::vector<double>> errors;  // by link
  std::vector<double> all;
  for (const json& r : records) {
    const std::string variant = r.at("variant").get<std::string>();
    if (variant == "naive") continue;  // not a cofuse plan: nothing to simulate
    const OpDesc d = desc_of(r.at("case"));
    const auto schedule = Schedule::parse(r.at("schedule").get<std::string>());
    if (!schedule) continue;
    SimOptions options;
    options.tile_rows = r.at("run").value("tile_rows", int64_t(64));
    const SimResult sim = simulate(d, *schedule, profile, options);
    const double measured = r.at("times_ms").at("total").at("median").get<double>();
    const double predicted = sim.makespan_s * 1e3;
    const double error = predicted / measured - 1;
    const std::string link = r.at("machine").at("link").value("description", "?");
    errors[link].push_back(std::abs(error));
    all.push_back(std::abs(error));
    std::ostringstream what;
    what << d.to_string().substr(0, d.to_string().find(" trans_a"));
    std::string name = r.at("schedule_name").get<std::string>();
    if (name.size() > 21) name = name.substr(0, 20) + "~";
    std::cout << std::left << std::setw(38) << what.str().substr(0, 37) << std::setw(22) << name << std::right
              << std::setw(12) << fixed(measured, 3) << std::setw(13) << fixed(predicted, 3) << std::setw(8)
              << fixed(error * 100, 1) << "%\n";
  }
  if (all.empty()) {
    std::cerr << "cofuse report: error: no record to predict (only naive baselines?)\n";
    return 1;
  }
  for (const auto& [link, e] : errors)
    std::cout << "median |error| " << fixed(summarize(e).median * 100, 1) << "% over " << e.size() << " runs on: " << link << "\n";
  std::cout << "median |error| " << fixed(summarize(all).median * 100, 1) << "% over all " << all.size() << " runs\n";
  return 0;
}

}  // namespace cofuse::cli
