#include "measure/bench_sweep.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cofuse/backend.hpp"
#include "cofuse/schedule.hpp"
#include "cofuse/status.hpp"
#include "core/common/quote.hpp"

namespace cofuse::measure {

namespace {

[[noreturn]] void bad(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

bool axis_suits(OpKind op, Axis axis) {
  switch (op) {
    case OpKind::ag_gemm: return axis == Axis::m || axis == Axis::k;
    case OpKind::gemm_rs: return axis == Axis::m || axis == Axis::n;
    case OpKind::gemm_ar: return axis == Axis::none;
  }
  return false;
}

// The schedules field must name schedules that parse; whether they suit the op is checked
// when the case runs (identically on every rank).
void check_schedules(const std::string& text, const std::string& where) {
  if (text == "presets" || text == "all") return;
  if (split_list(text, ';').empty()) bad(where + ": no schedule given (use presets, all, or a ';'-separated list)");
  for (const std::string& item : split_list(text, ';')) {
    Status error;
    if (!Schedule::parse(item, &error)) bad(where + ": " + error.message());
  }
}

using nlohmann::json;

std::vector<int64_t> sizes_from_json(const json& value, const std::string& where) {
  auto one = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1) bad(where + ": " + v.dump() + " is not a size (an integer >= 1)");
    return v.get<int64_t>();
  };
  if (value.is_number()) return {one(value)};
  if (value.is_array()) {
    if (value.empty()) bad(where + ": the list is empty");
    std::vector<int64_t> out;
    for (const json& v : value) out.push_back(one(v));
    return out;
  }
  if (value.is_object()) {
    for (const auto& [key, v] : value.items())
      if (key != "begin" && key != "end" && key != "factor" && key != "step")
        bad(where + ": unknown key " + in_quotes(key) + " in a range (begin, end, factor or step)");
    if (!value.contains("begin") || !value.contains("end")) bad(where + ": a range needs begin and end");
    if (value.contains("factor") && !value["factor"].is_number())
      bad(where + ": factor " + value["factor"].dump() + " is not a number");
    const double factor = value.value("factor", 0.0);
    const int64_t step = value.contains("step") ? one(value["step"]) : 0;
    try {
      return size_range(one(value["begin"]), one(value["end"]), factor, step);
    } catch (const Error& e) {
      bad(where + ": " + e.what());
    }
  }
  bad(where + ": " + value.dump() + " is not a size, a list of sizes or a range");
}

std::vector<std::string> strings_from_json(const json& value, const std::string& where) {
  if (value.is_string()) return {value.get<std::string>()};
  if (value.is_array() && !value.empty()) {
    std::vector<std::string> out;
    for (const json& v : value) {
      if (!v.is_string()) bad(where + ": " + v.dump() + " is not a string");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  bad(where + ": " + value.dump() + " is not a string or a non-empty list of strings");
}

bool bool_from_json(const json& value, const std::string& where) {
  if (!value.is_boolean()) bad(where + ": " + value.dump() + " is not true or false");
  return value.get<bool>();
}

}  // namespace

OpDesc BenchCase::desc(int ranks) const {
  OpDesc d;
  d.op = op;
  d.axis = axis;
  d.dtype = dtype;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  d.ranks = ranks;
  return d;
}

std::vector<int64_t> size_range(int64_t begin, int64_t end, double factor, int64_t step) {
  if (begin < 1) bad("range begin " + std::to_string(begin) + " is below 1");
  if (end < begin) bad("range end " + std::to_string(end) + " is below its begin " + std::to_string(begin));
  if (step <= 0 && !(factor > 1.0))
    bad("a range needs a factor > 1 (-f) or a step > 0 (-i); got factor " + std::to_string(factor));
  std::vector<int64_t> out;
  for (double v = double(begin); v <= double(end) + 0.5;) {
    out.push_back(int64_t(std::llround(v)));
    v = step > 0 ? v + double(step) : v * factor;
    if (out.size() > 10000) bad("the range has more than 10000 sizes");
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, separator))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parse_size_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || end != item.data() + item.size() || value < 1)
      bad(what + ": " + in_quotes(item) + " is not a size (an integer >= 1)");
    out.push_back(value);
  }
  if (out.empty()) bad(what + ": no size given");
  return out;
}

std::vector<BenchCase> expand(const SweepSpec& spec) {
  std::vector<BenchCase> out;
  if (spec.ops.empty() || spec.dtypes.empty() || spec.axes.empty() || spec.m.empty() || spec.n.empty() || spec.k.empty())
    bad("the sweep is empty (an op, axis, dtype or size list has no item)");
  check_schedules(spec.schedules, "schedules");
  for (const std::string& op_text : spec.ops) {
    const auto op = parse_op(op_text);
    if (!op) bad("unknown op " + in_quotes(op_text) + " (ag_gemm, gemm_rs or gemm_ar)");
    std::vector<Axis> axes;
    for (const std::string& axis_text : spec.axes) {
      const auto axis = axis_text == "auto" ? std::optional<Axis>(default_axis(*op)) : parse_axis(axis_text);
      if (!axis) bad("unknown axis " + in_quotes(axis_text) + " (auto, none, m, n or k)");
      if (axis_suits(*op, *axis) && std::find(axes.begin(), axes.end(), *axis) == axes.end()) axes.push_back(*axis);
    }
    if (axes.empty()) bad(op_text + ": none of the axes given suits it (ag_gemm: m, k; gemm_rs: m, n; gemm_ar: none)");
    for (Axis axis : axes)
      for (const std::string& dtype_text : spec.dtypes) {
        const auto dtype = parse_dtype(dtype_text);
        if (!dtype) bad("unknown dtype " + in_quotes(dtype_text) + " (f32, f64 or bf16)");
        // The bench measures the CPU executor: the dtypes it runs are can_run's answer.
        const OpDesc probe{*op, 1, 1, 1, *dtype, false, false, axis, 1};
        if (const Status st = can_run(Backend::cpu_mpi, probe, serial_schedule()); !st.ok())
          bad("cofuse bench measures the CPU executor: " + st.message());
        for (int64_t m : spec.m)
          for (int64_t n : spec.n)
            for (int64_t k : spec.k)
              out.push_back({spec.label, *op, axis, *dtype, m, n, k, spec.trans_a, spec.trans_b, spec.schedules});
      }
  }
  return out;
}

std::vector<BenchCase> load_sweep_file(const std::string& path, const SweepSpec& defaults) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io, "sweep file " + path + ": cannot be read");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    bad("sweep file " + path + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array() || doc["cases"].empty())
    bad("sweep file " + path + ": expected an object {\"cases\": [ ... ]} with at least one case");
  for (const auto& [key, v] : doc.items())
    if (key != "cases" && key != "comment") bad("sweep file " + path + ": unknown top-level key " + in_quotes(key));
  std::vector<BenchCase> out;
  for (std::size_t i = 0; i < doc["cases"].size(); ++i) {
    const json& c = doc["cases"][i];
    const std::string where = "sweep file " + path + ": cases[" + std::to_string(i) + "]";
    if (!c.is_object()) bad(where + ": a case is an object");
    SweepSpec spec = defaults;
    for (const auto& [key, v] : c.items()) {
      const std::string field = where + "." + escape_controls(key);
      if (key == "label") spec.label = strings_from_json(v, field).at(0);
      else if (key == "op") spec.ops = strings_from_json(v, field);
      else if (key == "axis") spec.axes = strings_from_json(v, field);
      else if (key == "dtype") spec.dtypes = strings_from_json(v, field);
      else if (key == "m") spec.m = sizes_from_json(v, field);
      else if (key == "n") spec.n = sizes_from_json(v, field);
      else if (key == "k") spec.k = sizes_from_json(v, field);
      else if (key == "trans_a") spec.trans_a = bool_from_json(v, field);
      else if (key == "trans_b") spec.trans_b = bool_from_json(v, field);
      else if (key == "schedules") spec.schedules = strings_from_json(v, field).at(0);
      else if (key == "comment") continue;
      else
        bad(where + ": unknown key " + in_quotes(key) + " (label, op, axis, dtype, m, n, k, trans_a, trans_b, schedules, comment)");
    }
    try {
      for (BenchCase& b : expand(spec)) out.push_back(std::move(b));
    } catch (const Error& e) {
      bad(where + ": " + e.what());
    }
  }
  return out;
}

std::vector<Schedule> schedule_list(const std::string& schedules, const OpDesc& desc, const std::string& where) {
  if (schedules == "all") return enumerate_schedules(desc);
  std::vector<Schedule> out;
  if (schedules == "presets") {
    for (const Preset& p : presets())
      if (can_run(Backend::cpu_mpi, desc, p.schedule).ok()) out.push_back(p.schedule);
    return out;
  }
  for (const std::string& item : split_list(schedules, ';')) {
    Status error;
    const std::optional<Schedule> s = Schedule::parse(item, &error);
    if (!s) bad(where + ": " + error.message());  // the message quotes the schedule
    // One list serves a sweep over dtypes and ops: partial sums in f32 are a choice for bf16
    // reductions only, so the cases without any (f32, f64, ag_gemm) leave such a schedule out.
    Schedule op_wire = *s;
    op_wire.wire = Wire::op;
    if (s->wire == Wire::f32 && !s->validate_for(desc).ok() && op_wire.validate_for(desc).ok()) continue;
    // The bench runs on the CPU executor: refuse here what it would refuse mid-sweep.
    if (const Status st = can_run(Backend::cpu_mpi, desc, *s); !st.ok())
      bad(where + ": schedule " + in_quotes(item) + ": " + st.message());
    out.push_back(*s);
  }
  return out;
}

std::vector<PreparedCase> prepare_cases(const std::vector<BenchCase>& cases, int ranks) {
  std::vector<PreparedCase> out;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    PreparedCase p{cases[i].desc(ranks), {}};
    const std::string where = "case " + std::to_string(i + 1) + " (" + p.desc.to_string() + ")";
    if (const Status st = p.desc.validate(); !st.ok()) bad(where + ": " + st.message());
    // serial and serial-ring are baselines the bench always runs; other unfused schedules
    // (serial,algo=direct) are measured like any schedule.
    const Schedule serial_ring = serial_ring_schedule();
    for (const Schedule& s : schedule_list(cases[i].schedules, p.desc, where))
      if (s != serial_schedule() && s != serial_ring && std::find(p.schedules.begin(), p.schedules.end(), s) == p.schedules.end())
        p.schedules.push_back(s);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace cofuse::measure
