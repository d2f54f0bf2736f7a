// `cofuse plan`: print what lower() makes of an op and a schedule, for any rank count, without
// MPI; or list the valid schedules of an op.
#include <iomanip>
#include <iostream>

#include "cofuse/cofuse.hpp"
#include "cofuse/model/calibrate.hpp"
#include "cofuse/tools/reports.hpp"
#include "commands.hpp"
#include "op_options.hpp"

namespace cofuse::cli {

namespace {

struct PlanArgs {
  OpArgs op;
  int ranks = 2;
  std::string rank = "0";
  std::string schedule = "serial";
  bool list = false;
  std::string profile;  // "" = config::profile()'s rule
  std::string db;
  int top = 12;
  bool json = false;
};

// --schedule auto: the planner's cost table, its choice, why; and seed 001's heuristic pick.
int auto_plan(const PlanArgs& args, const OpDesc& d) {
  const PlanReport report = plan_report(d, args.profile, args.db);
  if (args.json) {
    std::cout << report.json() << "\n";
    return 0;
  }
  const PlanChoice& c = report.choice;
  const HeuristicChoice& h = report.heuristic;
  const double heuristic_s = report.heuristic_s;
  std::size_t width = 8;
  for (const PlanCandidate& k : c.candidates) width = std::max(width, k.name.size());
  std::cout << "cofuse plan  " << d.to_string() << "  on " << c.profile
            << (c.profile_validated ? " (measured)" : " (datasheet, NOT validated)") << "\n"
            << "  profile: " << report.planning.source << "\n"
            << "  " << std::left << std::setw(int(width)) << "candidate" << std::right << std::setw(12) << "predicted"
            << std::setw(10) << "vs serial" << std::setw(9) << "DIL" << std::setw(9) << "CIL" << std::setw(10) << "exposed"
            << std::setw(12) << "workspace" << "\n";
  const std::vector<const PlanCandidate*> listed = report.shown(args.top);
  const int shown = static_cast<int>(listed.size());
  for (const PlanCandidate* candidate : listed) {
    const PlanCandidate& k = *candidate;
    const bool chosen = k.schedule == c.schedule;
    std::cout << (chosen ? "* " : "  ") << std::left << std::setw(int(width)) << k.name << std::right << std::fixed
              << std::setprecision(3) << std::setw(9) << k.predicted_s * 1e3 << " ms" << std::setprecision(2)
              << std::setw(9) << c.serial_s / k.predicted_s << "x" << std::setprecision(3) << std::setw(9)
              << k.losses.dil_s * 1e3 << std::setw(9) << k.losses.cil_s * 1e3 << std::setw(10)
              << k.losses.exposed_comm_s * 1e3 << std::setprecision(2) << std::setw(9) << double(k.workspace_bytes) / 1e6
              << " MB\n";
  }
  if (shown < int(c.candidates.size()))
    std::cout << "  (" << c.candidates.size() - shown << " more; --top N shows more)\n";
  if (!c.warning.empty()) std::cerr << c.warning << "\n";
  std::cout << "choice       " << c.name << (c.measured ? " (measured, not predicted: see why)" : "") << ", predicted "
            << std::setprecision(3) << c.predicted_s * 1e3 << " ms\n"
            << "why          " << c.why << "\n"
            << "seed 001     " << h.name << ", predicted " << heuristic_s * 1e3 << " ms (" << h.why << ")\n";
  return 0;
}

int plan_command(const PlanArgs& args) {
  const OpDesc d = make_desc(args.op, args.ranks);
  try {
    throw_if_error(d.validate());
    if (args.list) {
      std::cout << "valid schedules for " << d.to_string() << " (presets named):\n";
      // With a profile named, the machine it describes: its hosts add the two-level twins (as the
      // planner's candidates do), so a sweep over this list measures them too.
      const int per_host = args.profile.empty() ? 0 : planning_profile_offline(args.ranks, args.profile).profile.ranks_per_host(args.ranks);
      for (const Schedule& s : enumerate_schedules(d, {2, 4, 8}, per_host)) std::cout << "  " << schedule_name(s) << "\n";
      return 0;
    }
    if (args.schedule == "auto") return auto_plan(args, d);
    const Schedule schedule = *Schedule::parse(args.schedule);
    throw_if_error(can_run_anywhere(d, schedule));  // a plan no backend would run is an error, not a dump
    int first = 0, last = args.ranks - 1;
    if (args.rank != "all") first = last = std::stoi(args.rank);
    for (int r = first; r <= last; ++r) std::cout << lower(d, schedule, r).dump() << (r < last ? "\n" : "");
  } catch (const Error& e) {
    std::cerr << "cofuse plan: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

std::function<int()> add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Print the task plan of an op under a schedule (tasks, engines, views, dependencies), or --list the\n"
              "valid schedules, or (--schedule auto) let the planner choose on a machine profile and say why.\n"
              "Needs no MPI: plan for any rank count and any machine.");
  add_op_options(plan, args->op, Dtypes::any_backend);
  plan->add_option("--ranks", args->ranks, "P, the number of ranks to plan for")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  plan->add_option("--rank", args->rank, "Which rank's plan to print, or 'all'")
      ->check(CLI::Validator(
          [](std::string& text) {
            if (text == "all") return std::string();
            return text.find_first_not_of("0123456789") == std::string::npos && !text.empty() && text.size() < 8
                       ? std::string()
                       : std::string("--rank: '" + text + "' is not a rank number or 'all'");
          },
          "RANK|all"))
      ->capture_default_str();
  plan->add_option("--schedule", args->schedule,
                   "A schedule or preset, or 'auto': the planner's cost table, choice and reasons on --profile")
      ->check(schedule_validator(true))
      ->capture_default_str();
  plan->add_option("--profile", args->profile,
                   "With --schedule auto: the machine profile to plan for (a name or a file; default $COFUSE_PROFILE, "
                   "else " + std::string(config::kProfile) + "; cofuse config shows it)");
  plan->add_option("--top", args->top, "With --schedule auto: candidates to list (the unfused baselines and the choice always)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan->add_flag("--json", args->json, "With --schedule auto: one JSON object");
  plan->add_option("--tuning-db", args->db, "With --schedule auto: a tuning database to consult first (default $COFUSE_TUNING_DB, else the one\n"
                   "online tuning writes: $COFUSE_CACHE_DIR/tuning.json)");
  plan->add_flag("--list", args->list, "List every valid schedule for the op instead");
  return [args] {
    if (args->rank != "all" && std::stoi(args->rank) >= args->ranks) {
      std::cerr << "cofuse plan: error: --rank " << args->rank << " is outside 0.." << args->ranks - 1 << std::endl;
      return 2;
    }
    return plan_command(*args);
  };
}

}  // namespace cofuse::cli
