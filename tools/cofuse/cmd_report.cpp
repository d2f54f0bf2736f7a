// `cofuse report FILE...`: bench records (JSON Lines) as a comparison table: one row per
// measured case with its baselines and best schedule, or (--all) one row per variant.
// Needs no MPI.
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "cofuse/model/profile.hpp"
#include "cofuse/status.hpp"
#include "commands.hpp"
#include "measure/bench_record.hpp"
#include "measure/report_predict.hpp"
#include "measure/text.hpp"
#include "measure/timing.hpp"

namespace cofuse::cli {

namespace {

using json = nlohmann::ordered_json;

struct ReportArgs {
  std::vector<std::string> files;
  bool all = false;
  std::string csv;
  std::string predict;  // a profile: print the simulator's predictions instead
};

double number(const json& r, const json::json_pointer& at) {
  const json* v = &r;
  try {
    v = &r.at(at);
  } catch (const json::exception&) {
    return std::nan("");
  }
  return v->is_number() ? v->get<double>() : std::nan("");
}

// A table cell: a number, or "-" where a record has none.
std::string cell(double value, int digits) { return std::isnan(value) ? "-" : fixed(value, digits); }

std::string case_text(const json& r) {
  const json& c = r.at("case");
  std::ostringstream o;
  o << c.at("op").get<std::string>() << " " << c.at("m") << "x" << c.at("n") << "x" << c.at("k") << " "
    << c.at("dtype").get<std::string>() << " " << c.at("axis").get<std::string>() << (c.at("trans_a").get<bool>() ? " tA" : "")
    << (c.at("trans_b").get<bool>() ? " tB" : "") << " P=" << c.at("ranks");
  return o.str();
}

std::string link_text(const json& r) {
  const json& link = r.at("machine").at("link");
  std::string text = link.value("description", "?");
  if (text.size() > 40) text = text.substr(0, 39) + "~";
  if (link.value("measured", false)) text += " (" + cell(link.value("gbit_per_s", 0.0), 2) + " Gb/s)";
  return text;
}

// Rows of a table, padded to the widest cell of each column.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::ostringstream line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      // Text columns left-aligned, numbers right-aligned.
      const bool text = i < 3;
      line << (i ? "  " : "") << (text ? std::left : std::right) << std::setw(int(width[i])) << row[i];
    }
    std::string s = line.str();
    s.erase(s.find_last_not_of(' ') + 1);
    std::cout << s << "\n";
  }
}

// --predict: the table and the median absolute error; 1 when no record could be predicted.
int print_predictions(const std::vector<json>& records, const std::string& profile_name) {
  const MachineProfile profile = load_profile(profile_name);
  std::cout << "predicted with profile " << profile.name << (profile.validated ? " (measured)" : " (datasheet, not validated)")
            << "; error = predicted / measured - 1 (medians of the slowest rank); exposed = total - GEMM time in\n"
            << "the run, measured and predicted alike\n";
  std::cout << std::left << std::setw(38) << "case" << std::setw(22) << "schedule" << std::right << std::setw(12)
            << "measured ms" << std::setw(13) << "predicted ms" << std::setw(9) << "error" << std::setw(14)
            << "exposed meas" << std::setw(11) << "predicted" << "\n";
  std::map<std::string, std::vector<double>> errors;  // by link
  std::vector<double> all;
  for (const Prediction& p : predict_records(records, profile)) {
    errors[p.link].push_back(std::abs(p.error()));
    all.push_back(std::abs(p.error()));
    const std::string text = p.desc.to_string();
    std::string name = p.schedule_name;
    if (name.size() > 21) name = name.substr(0, 20) + "~";
    std::cout << std::left << std::setw(38) << text.substr(0, text.find(" trans_a")).substr(0, 37) << std::setw(22) << name
              << std::right << std::setw(12) << fixed(p.measured_ms, 3) << std::setw(13) << fixed(p.predicted_ms, 3)
              << std::setw(8) << fixed(p.error() * 100, 1) << "%" << std::setw(14) << fixed(p.measured_exposed_ms, 3)
              << std::setw(11) << fixed(p.predicted_exposed_ms, 3) << "\n";
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

int report(const ReportArgs& args) {
  std::vector<json> records;
  try {
    for (const std::string& f : args.files)
      for (json& r : read_records(f)) records.push_back(std::move(r));
  } catch (const Error& e) {
    std::cerr << "cofuse report: error: " << e.what() << std::endl;
    return 1;
  }
  if (records.empty()) {
    std::cerr << "cofuse report: error: no records in " << args.files.size() << " file(s)" << std::endl;
    return 1;
  }
  if (!args.predict.empty()) {
    try {
      return print_predictions(records, args.predict);
    } catch (const std::exception& e) {
      std::cerr << "cofuse report: error: " << e.what() << std::endl;
      return 1;
    }
  }
  using P = json::json_pointer;
  std::vector<std::vector<std::string>> rows;
  try {
    if (args.all) {
      rows.push_back({"case", "link", "variant", "T ms", "x unf", "eff", "x serial", "x naive", "DIL ms", "CIL ms", "error", "ok"});
      for (const json& r : records)
        rows.push_back({case_text(r), link_text(r), r.at("schedule_name").get<std::string>(),
                        cell(number(r, P("/times_ms/total/median")), 3),
                        cell(number(r, P("/metrics/speedup_vs_best_unfused")), 2),
                        cell(number(r, P("/metrics/efficiency_vs_best_unfused")), 2),
                        cell(number(r, P("/metrics/speedup_vs_serial")), 2), cell(number(r, P("/metrics/speedup_vs_naive")), 2),
                        cell(number(r, P("/metrics/dil_ms")), 2), cell(number(r, P("/metrics/cil_ms")), 2),
                        [&] {
                          std::ostringstream o;
                          o << std::scientific << std::setprecision(1) << number(r, P("/error/rel_error"));
                          return o.str();
                        }(),
                        r.at("error").at("passed").get<bool>() ? "yes" : "FAIL"});
    } else {
      // One row per measured case (a run's case index), its best cofuse schedule by median time.
      std::map<std::pair<std::string, int>, std::vector<const json*>> cases;
      std::vector<std::pair<std::string, int>> order;
      for (const json& r : records) {
        const auto key = std::make_pair(r.at("run").at("started").get<std::string>() + r.at("machine").dump(),
                                        r.at("case").at("index").get<int>());
        if (!cases.count(key)) order.push_back(key);
        cases[key].push_back(&r);
      }
      rows.push_back({"case", "link", "best schedule", "G ms", "M ms", "M' ms", "serial ms", "serial-ring ms",
                      "naive ms", "best ms", "x unf", "eff", "x serial", "x naive", "effown", "all ok"});
      for (const auto& key : order) {
        const json* best = nullptr;
        bool ok = true;
        for (const json* r : cases[key]) {
          ok = ok && r->at("error").at("passed").get<bool>();
          if (r->at("variant") == "cofuse" &&
              (!best || number(*r, P("/times_ms/total/median")) < number(*best, P("/times_ms/total/median"))))
            best = r;
        }
        const json& any = *cases[key].front();
        const json& shown = best ? *best : any;
        rows.push_back({case_text(any), link_text(any), best ? best->at("schedule_name").get<std::string>() : "(none)",
                        cell(number(any, P("/baselines_ms/gemm_alone/median")), 3),
                        cell(number(any, P("/baselines_ms/comm_alone/median")), 3),
                        cell(number(any, P("/baselines_ms/comm_alone_p2p/median")), 3),
                        cell(number(any, P("/baselines_ms/serial/median")), 3),
                        cell(number(any, P("/baselines_ms/serial_ring/median")), 3),
                        cell(number(any, P("/baselines_ms/naive/median")), 3),
                        best ? cell(number(shown, P("/times_ms/total/median")), 3) : "-",
                        best ? cell(number(shown, P("/metrics/speedup_vs_best_unfused")), 2) : "-",
                        best ? cell(number(shown, P("/metrics/efficiency_vs_best_unfused")), 2) : "-",
                        best ? cell(number(shown, P("/metrics/speedup_vs_serial")), 2) : "-",
                        best ? cell(number(shown, P("/metrics/speedup_vs_naive")), 2) : "-",
                        best ? cell(number(shown, P("/metrics/own_overlap_efficiency")), 2) : "-", ok ? "yes" : "FAIL"});
      }
    }
  } catch (const json::exception& e) {
    std::cerr << "cofuse report: error: a record lacks a field the report needs (" << e.what() << ")" << std::endl;
    return 1;
  }
  print_table(rows);
  std::cout << "(" << records.size() << " records; T = median time of the slowest rank; M' = cofuse's ring alone; "
            << "x unf = the fastest unfused call / T; eff = max(G, the fastest unfused communication) / T; x serial / "
            << "x naive = baseline T / T; effown = max(G, the schedule's own communication alone) / T; records "
            << "older than serial-ring show '-' for what they lack)\n";
  if (!args.csv.empty()) {
    std::ofstream out(args.csv);
    write_csv(out, records);
    if (!out) {
      std::cerr << "cofuse report: error: cannot write " << args.csv << std::endl;
      return 1;
    }
    std::cout << "csv " << args.csv << "\n";
  }
  return 0;
}

}  // namespace

std::function<int()> add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* r = app.add_subcommand("report", "Turn `cofuse bench` records (JSON Lines files) into a comparison table");
  r->add_option("files", args->files, "Record files written by cofuse bench --records")->required();
  r->add_flag("--all", args->all, "One row per variant instead of one per case");
  r->add_option("--csv", args->csv, "Also write the records as CSV to this file");
  r->add_option("--predict", args->predict,
                "Instead: the simulator's prediction for every serial and cofuse record with this profile (a name "
                "or a file), beside the measurement, with the error and its median");
  return [args] { return report(*args); };
}

}  // namespace cofuse::cli
