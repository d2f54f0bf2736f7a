// `cofuse plan`: print what lower() makes of an op and a schedule, for any rank count, without
// MPI; or list the valid schedules of an op.
#include <iostream>

#include "cofuse/cofuse.hpp"
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
};

int plan_command(const PlanArgs& args) {
  const OpDesc d = make_desc(args.op, args.ranks);
  try {
    throw_if_error(d.validate());
    if (args.list) {
      std::cout << "valid schedules for " << d.to_string() << " (presets named):\n";
      for (const Schedule& s : enumerate_schedules(d)) std::cout << "  " << schedule_name(s) << "\n";
      return 0;
    }
    const Schedule schedule = *Schedule::parse(args.schedule);
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
              "valid schedules. Needs no MPI: plan for any rank count.");
  add_op_options(plan, args->op);
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
  plan->add_option("--schedule", args->schedule, "A schedule or preset")->check(schedule_validator())->capture_default_str();
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
