#include "op_options.hpp"

#include <charconv>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"

namespace cofuse::cli {

namespace {

// The dtypes `which` accepts, asked of can_run with the serial schedule of a one-rank op.
std::vector<std::string> dtype_names(Dtypes which) {
  std::vector<std::string> names;
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    OpDesc probe;
    probe.m = probe.n = probe.k = probe.ranks = 1;
    probe.dtype = t;
    const Status st = which == Dtypes::cpu_executor ? can_run(Backend::cpu_mpi, probe, serial_schedule())
                                                    : can_run_anywhere(probe, serial_schedule());
    if (st.ok()) names.push_back(to_string(t));
  }
  return names;
}

}  // namespace

void add_op_options(CLI::App* app, OpArgs& args, Dtypes dtypes) {
  const std::vector<std::string> names = dtype_names(dtypes);
  std::string help;
  for (const std::string& n : names) help += (help.empty() ? "" : " | ") + n;
  if (dtypes == Dtypes::any_backend) help += " (bf16, f16: the profile's 16-bit rate)";
  app->add_option("--op", args.op, "ag_gemm | gemm_rs | gemm_ar")
      ->check(CLI::IsMember({"ag_gemm", "gemm_rs", "gemm_ar"}))
      ->capture_default_str();
  app->add_option("--m", args.m, "Global M: rows of op(A) and C")->check(CLI::PositiveNumber)->capture_default_str();
  app->add_option("--n", args.n, "Global N: columns of op(B) and C")->check(CLI::PositiveNumber)->capture_default_str();
  app->add_option("--k", args.k, "Global K: the contraction size")->check(CLI::PositiveNumber)->capture_default_str();
  app->add_option("--dtype", args.dtype, help)->check(CLI::IsMember(names))->capture_default_str();
  app->add_flag("--trans-a", args.trans_a, "A is stored transposed (op(A) = A^T)");
  app->add_flag("--trans-b", args.trans_b, "B is stored transposed (op(B) = B^T)");
  app->add_option("--axis", args.axis,
                  "Sharded axis: m | k for ag_gemm, m | n for gemm_rs, none for gemm_ar; auto = m, m, none")
      ->check(CLI::IsMember({"auto", "none", "m", "n", "k"}))
      ->capture_default_str();
}

void add_list_options(CLI::App* app, ListArgs& args, const std::string& m_note) {
  app->add_option("--op", args.ops, "Ops: ag_gemm, gemm_rs, gemm_ar (a list)")->capture_default_str();
  app->add_option("--m", args.m, "Global M values (a list)" + m_note)->capture_default_str();
  app->add_option("--n", args.n, "Global N values (a list)")->capture_default_str();
  app->add_option("--k", args.k, "Global K values (a list)")->capture_default_str();
  app->add_option("--dtype", args.dtypes, "f32, f64, bf16 (a list)")->capture_default_str();
  app->add_option("--axis", args.axes, "Sharded axes (a list): auto, m, n, k, none; combinations an op cannot take are skipped")
      ->capture_default_str();
  app->add_flag("--trans-a", args.trans_a, "A is stored transposed");
  app->add_flag("--trans-b", args.trans_b, "B is stored transposed");
}

measure::SweepSpec sweep_of(const ListArgs& args) {
  measure::SweepSpec spec;
  spec.ops = measure::split_list(args.ops);
  spec.axes = measure::split_list(args.axes);
  spec.dtypes = measure::split_list(args.dtypes);
  spec.m = measure::parse_size_list(args.m, "--m");
  spec.n = measure::parse_size_list(args.n, "--n");
  spec.k = measure::parse_size_list(args.k, "--k");
  spec.trans_a = args.trans_a;
  spec.trans_b = args.trans_b;
  return spec;
}

OpDesc make_desc(const OpArgs& args, int ranks) {
  OpDesc d;
  d.op = *parse_op(args.op);
  d.m = args.m;
  d.n = args.n;
  d.k = args.k;
  d.dtype = *parse_dtype(args.dtype);
  d.trans_a = args.trans_a;
  d.trans_b = args.trans_b;
  d.axis = args.axis == "auto" ? default_axis(d.op) : *parse_axis(args.axis);
  d.ranks = ranks;
  return d;
}

CLI::Validator schedule_validator(bool allow_auto) {
  return CLI::Validator(
      [allow_auto](std::string& text) {
        if (allow_auto && text == "auto") return std::string();
        Status error;
        if (Schedule::parse(text, &error)) return std::string();
        return error.message();
      },
      "SCHEDULE");
}

CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& text) {
        uint64_t value = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return std::string("--seed: '" + text + "' is not an integer in 0..18446744073709551615");
        return std::string();
      },
      "UINT64");
}

}  // namespace cofuse::cli
