// `cofuse config`: every entry of the configuration registry (include/cofuse/config.hpp) with
// its effective value and where that value came from (default, environment, flag). No MPI.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cofuse/build_info.hpp"
#include "cofuse/config.hpp"
#include "cofuse/status.hpp"
#include "commands.hpp"

namespace cofuse::cli {

namespace {

struct ConfigArgs {
  std::string profile;  // shows how a --profile flag would resolve
  bool json = false;
};

// One entry's row; a variable that does not parse becomes the row's error (the others still print).
struct Row {
  const config::Entry* entry;
  config::Setting<std::string> value;
  std::string error;
};

// What the process actually runs for an entry whose value is a request (auto, a cap), or "".
std::string in_use(const config::Entry& e) {
  if (e.name == "cpu_bf16") return build_info().bf16_gemm;
  if (e.name == "max_vector_level") return build_info().vector_level;
  return "";
}

int config_command(const ConfigArgs& args) {
  std::vector<Row> rows;
  for (const config::Entry& e : config::entries()) {
    Row row{&e, {}, {}};
    try {
      row.value = e.effective(e.name == "profile" ? std::string_view(args.profile) : std::string_view());
    } catch (const Error& error) {
      row.error = error.what();
    }
    rows.push_back(row);
  }
  bool failed = false;
  if (args.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      nlohmann::ordered_json j{{"name", r.entry->name},
                               {"variable", r.entry->variable},
                               {"type", r.entry->type},
                               {"default", r.entry->default_text},
                               {"description", r.entry->description}};
      if (r.error.empty()) {
        j["value"] = r.value.value;
        j["source"] = config::to_string(r.value.source);
        if (const std::string used = in_use(*r.entry); !used.empty()) j["in_use"] = used;
      } else {
        j["error"] = r.error;
      }
      out.push_back(j);
    }
    std::cout << out.dump() << "\n";
  } else {
    // Columns as wide as their longest entry and two spaces, so long names stay apart.
    std::size_t name_w = 7, variable_w = 8;
    for (const Row& r : rows) {
      name_w = std::max(name_w, r.entry->name.size());
      variable_w = std::max(variable_w, r.entry->variable.size());
    }
    const int nw = int(name_w + 2), vw = int(variable_w + 2), sw = 13;
    std::cout << std::left << std::setw(nw) << "setting" << std::setw(vw) << "variable" << std::setw(sw) << "source"
              << "value\n";
    for (const Row& r : rows) {
      const std::string variable = r.entry->variable.empty() ? "-" : std::string(r.entry->variable);
      std::cout << std::setw(nw) << r.entry->name << std::setw(vw) << variable << std::setw(sw)
                << (r.error.empty() ? config::to_string(r.value.source) : "INVALID")
                << (r.error.empty() ? (r.value.value.empty() ? "(none)" : r.value.value) : r.error) << "\n"
                << std::setw(nw) << "" << r.entry->description << "\n";
      if (const std::string used = in_use(*r.entry); r.error.empty() && !used.empty())
        std::cout << std::setw(nw) << "" << "in use: " << used << "\n";
    }
  }
  for (const Row& r : rows) {
    if (r.error.empty()) continue;
    std::cerr << "cofuse config: error: " << r.error << std::endl;
    failed = true;
  }
  return failed ? 1 : 0;
}

}  // namespace

std::function<int()> add_config_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* c = app.add_subcommand(
      "config", "Print every setting cofuse reads (COFUSE_* variables and defaults): its effective value and where it\n"
                "came from (default, environment, flag). Exit 1 when a variable holds a value that does not parse.");
  c->add_option("--profile", args->profile, "Show how this --profile flag resolves (as run/plan/sim/tune would take it)");
  c->add_flag("--json", args->json, "Print one JSON array, one object per setting");
  return [args] { return config_command(*args); };
}

}  // namespace cofuse::cli
