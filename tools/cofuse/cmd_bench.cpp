// `cofuse bench`: a sweep of cases (ops x shapes x dtypes x schedules), each measured against
// the baselines a user would otherwise pick (measure/bench_measure.hpp), printed as a table, written
// as JSON Lines records (and CSV) that say what ran, where and on what.
//
// Flow: parse and expand the sweep (no MPI: usage errors never need mpirun) -> MPI -> ranks
// agree on the whole sweep -> every case and schedule validated before anything runs -> link
// probe -> cases, each recorded as soon as it finishes (an interrupted sweep keeps its data).
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cofuse/cofuse.hpp"
#include "cofuse/model/calibrate.hpp"
#include "commands.hpp"
#include "cpu/comm/mpi_util.hpp"
#include "measure/bench_measure.hpp"
#include "measure/bench_record.hpp"
#include "measure/bench_sweep.hpp"
#include "measure/op_data.hpp"
#include "measure/text.hpp"
#include "mpi_command.hpp"
#include "op_options.hpp"
#include "progress.hpp"
#include "tune/winner.hpp"

namespace cofuse::cli {

namespace {

struct BenchArgs {
  ListArgs lists;
  int64_t m_begin = 0, m_end = 0, m_step = 0;
  double m_factor = 2;
  std::string schedules = "presets";
  std::string sweep_file, label, link;
  std::string seed;
  int iters = 10, warmup = 2, naive_chunks = 4;
  std::string records, csv, trace_dir;
  bool quiet = false, json = false;
  bool evidence = false;  // add every measured schedule to the tuning database's corrections
  std::string profile;    // --evidence: the profile whose predictions the runs correct ("" = the rule)
  ExecSettings settings;
  std::string command_line;
};

std::vector<BenchCase> cases_of(const BenchArgs& args) {
  SweepSpec spec = sweep_of(args.lists);
  spec.label = args.label;
  if (args.m_begin > 0)  // a range of M replaces the --m list
    spec.m = size_range(args.m_begin, args.m_end > 0 ? args.m_end : args.m_begin, args.m_factor, args.m_step);
  spec.schedules = args.schedules;
  return args.sweep_file.empty() ? expand(spec) : load_sweep_file(args.sweep_file, spec);
}

void print_case(std::ostream& o, const BenchCase& c, int index, int count, const CaseResult& r, const LinkProbe& link) {
  const OpDesc& d = r.desc;
  const CommSize cs = comm_size(d);
  const double G = r.gemm_alone.median, M = r.comm_alone.median;
  const double algbw = M > 0 ? cs.bytes / M * 1e-9 : 0;
  o << "\ncase " << index + 1 << "/" << count << "  " << d.to_string();
  if (!c.label.empty()) o << "  [" << c.label << "]";
  o << "\n  G  GEMM alone " << fixed(G * 1e3, 3) << " ms (" << fixed(d.flops() / d.ranks / G * 1e-9, 1)
    << " GFLOP/s per rank)\n  M  " << cs.collective << " alone " << fixed(M * 1e3, 3) << " ms: "
    << fixed(cs.bytes / 1e6, 2) << " MB, algbw " << fixed(algbw, 3) << " GB/s, busbw " << fixed(algbw * cs.busbw_factor, 3)
    << " GB/s (busbw = algbw * " << cs.factor_text << ");\n     it costs a rank " << fixed(r.comm_alone_cpu_s * 1e3, 2)
    << " ms of CPU (user + system; a blocking MPI collective spins while it waits, so this bounds the cost from above)";
  o << "\n  M' cofuse's ring alone (serial-ring's communication, no GEMM) " << fixed(r.comm_alone_p2p.median * 1e3, 3)
    << " ms; the fastest of M, M' (and an unfused schedule's own) is the honest communication time\n  link " << link.description;
  if (link.measured) o << ", measured " << fixed(link.gbit_per_s, 2) << " Gbit/s, " << fixed(link.latency_us, 1) << " us";
  o << "\n";
  std::size_t width = 8;
  for (const VariantResult& v : r.variants) width = std::max(width, v.name.size());
  const double Mbest = r.best_unfused_comm_s(), unfused = r.best_unfused().total.median;
  o << "  " << std::left << std::setw(int(width)) << "variant" << std::right << std::setw(9) << "T ms" << std::setw(9)
    << "min" << std::setw(9) << "max" << std::setw(7) << "x unf" << std::setw(7) << "eff" << std::setw(10) << "x serial"
    << std::setw(9) << "x naive" << std::setw(8) << "DIL ms" << std::setw(8) << "CIL ms" << std::setw(9) << "Mown ms" << std::setw(8)
    << "effown" << std::setw(9) << "work MB" << std::setw(10) << "error" << "\n";
  for (const VariantResult& v : r.variants) {
    const double T = v.total.median;
    o << "  " << std::left << std::setw(int(width)) << v.name << std::right << std::setw(9) << fixed(T * 1e3, 3)
      << std::setw(9) << fixed(v.total.min * 1e3, 3) << std::setw(9) << fixed(v.total.max * 1e3, 3) << std::setw(7)
      << fixed(unfused / T, 2) << std::setw(7) << fixed(std::max(G, Mbest) / T, 2) << std::setw(10)
      << fixed(r.serial().total.median / T, 2) << std::setw(9) << fixed(r.naive().total.median / T, 2);
    if (v.chunks_alone_s)
      o << std::setw(8) << fixed((*v.chunks_alone_s - r.gemm_alone_dil_s) * 1e3, 2) << std::setw(8)
        << fixed((v.gemm.median - *v.chunks_alone_s) * 1e3, 2);
    else
      o << std::setw(8) << "-" << std::setw(8) << "-";
    if (v.comm_alone_s)
      o << std::setw(9) << fixed(*v.comm_alone_s * 1e3, 2) << std::setw(8) << fixed(std::max(G, *v.comm_alone_s) / T, 2);
    else
      o << std::setw(9) << "-" << std::setw(8) << "-";
    std::ostringstream err;
    err << std::scientific << std::setprecision(1) << v.check.rel_error;
    o << std::setw(9) << fixed(double(v.workspace_bytes) / 1e6, 2) << std::setw(10) << err.str()
      << (v.check.passed() ? "" : "  FAIL") << "\n";
  }
  const VariantResult& best = r.best();
  if (best.kind == "cofuse")
    o << "  best " << best.name << ": " << fixed(unfused / best.total.median, 2) << "x over the best unfused ("
      << r.best_unfused().name << "), overlap efficiency " << fixed(std::max(G, Mbest) / best.total.median, 2)
      << " = max(G, fastest unfused communication) / T; " << fixed(r.serial().total.median / best.total.median, 2)
      << "x over serial (library collective), " << fixed(r.naive().total.median / best.total.median, 2) << "x over naive\n";
  o << std::flush;
}

int bench(const BenchArgs& args, const std::vector<BenchCase>& cases) {
  const int rank = detail::comm_rank(MPI_COMM_WORLD), size = detail::comm_size(MPI_COMM_WORLD);

  // The whole sweep must be the same on every rank, or the ranks would run different collectives.
  std::ostringstream digest;
  for (const BenchCase& c : cases)
    digest << c.desc(size).to_string() << c.schedules << ";";
  agree_values(MPI_COMM_WORLD, "cofuse bench options",
               {{"cases", int64_t(cases.size())}, {"sweep digest", int64_t(std::hash<std::string>{}(digest.str()) >> 1)},
                {"iters", args.iters}, {"warmup", args.warmup}, {"naive chunks", args.naive_chunks},
                {"traces", !args.trace_dir.empty()}, {"seed given", !args.seed.empty()},
                {"poll us", args.settings.poll_us}, {"tile rows", args.settings.tile_rows}},
               Status::Ok(), args.settings.deadline_s);

  const std::vector<PreparedCase> prepared = prepare_cases(cases, size);

  // Output files: opened (and so checked) before the first case; every rank learns the outcome.
  std::ofstream records;
  bool opened = true;
  if (rank == 0) {
    try {
      if (!args.trace_dir.empty()) std::filesystem::create_directories(args.trace_dir);
      if (!args.records.empty()) {
        records.open(args.records, std::ios::app);
        if (!records) throw Error(ErrorCode::io, "cannot open " + args.records + " for appending");
      }
      if (!args.csv.empty() && !std::ofstream(args.csv)) throw Error(ErrorCode::io, "cannot write " + args.csv);
    } catch (const std::exception& e) {
      std::cerr << "cofuse bench: error: " << e.what() << std::endl;
      opened = false;
    }
  }
  if (!ok_everywhere(opened)) return 1;

  // --evidence: the profile the planner plans with here (collective: a calibration where none is
  // named), whose predictions every measured schedule then corrects (rank 0 keeps the evidence).
  std::optional<PlanningProfile> planning;
  if (args.evidence) planning = planning_profile(MPI_COMM_WORLD, args.profile);
  TuningDb evidence_db;
  int evidence = 0;

  const uint64_t seed = agree_seed(args.seed);
  const LinkProbe link = probe_link(MPI_COMM_WORLD, args.link);
  RecordContext ctx{machine_json(MPI_COMM_WORLD, link), versions_json(),
                 {{"started", utc_now()}, {"command", args.command_line}, {"seed", seed}, {"iters", args.iters},
                  {"warmup", args.warmup}, {"naive_chunks", args.naive_chunks}, {"poll_us", args.settings.poll_us},
                  {"tile_rows", args.settings.tile_rows},
                  {"timing", "per call: total and gemm of the slowest rank, comm of the rank that waited least; "
                             "variants interleaved, order shuffled every iteration by the case's seed"}}};
  if (rank == 0 && !args.json) {
    std::cout << "cofuse bench  " << cases.size() << " case" << (cases.size() == 1 ? "" : "s") << " on " << size
              << " rank" << (size == 1 ? "" : "s") << ", " << args.iters << " iterations after " << args.warmup
              << " warm-up, interleaved; seed " << seed << "\n"
              << "  T: median of the slowest rank; x unf = T of the faster unfused baseline (serial: library\n"
              << "  collective; serial-ring: cofuse's ring) / T; eff = max(G, fastest unfused communication) / T;\n"
              << "  x serial = serial T / T; x naive = naive T / T; DIL = GEMM time of the schedule's pieces alone - G; CIL = GEMM time\n"
              << "  in the run - pieces alone (contention); Mown = the schedule's own communication alone (no\n"
              << "  GEMM); effown = max(G, Mown) / T; work = workspace beside the caller's buffers\n";
  }

  Progress progress(int(cases.size()), rank != 0 || args.quiet);
  std::vector<nlohmann::ordered_json> all;
  bool all_passed = true;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    MeasureSettings settings;
    settings.iters = args.iters;
    settings.warmup = args.warmup;
    settings.naive_chunks = args.naive_chunks;
    settings.exec = args.settings;
    if (!args.trace_dir.empty()) settings.trace_prefix = args.trace_dir + "/case" + std::to_string(i + 1);
    const std::string what = prepared[i].desc.to_string();
    progress.update(int(i), 0, what);
    const CaseResult r = measure_case(prepared[i].desc, prepared[i].schedules, seed + i, settings,
                                      [&](double fraction) { progress.update(int(i), fraction, what); });
    progress.update(int(i) + 1, 0, what);
    for (const VariantResult& v : r.variants) all_passed = all_passed && v.check.passed();
    if (rank != 0) continue;
    progress.finish();
    for (const VariantResult& v : r.variants) {
      all.push_back(case_record(ctx, cases[i], int(i), r, v));
      // Invalid UTF-8 (in a label, say) is replaced rather than allowed to abort the sweep.
      const std::string line = all.back().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      if (records.is_open()) records << line << "\n";
      if (args.json) std::cout << line << "\n";
    }
    if (records.is_open()) records.flush();
    if (!args.json) print_case(std::cout, cases[i], int(i), int(cases.size()), r, link);
    if (planning) {
      std::vector<std::pair<Schedule, double>> measured;
      for (const VariantResult& v : r.variants)
        if (v.kind != "naive" && v.check.passed())
          if (const std::optional<Schedule> s = Schedule::parse(v.schedule)) measured.push_back({*s, v.total.median});
      evidence += detail::add_measured_evidence(evidence_db, prepared[i].desc, planning->profile, measured, "cofuse bench");
    }
  }
  progress.finish();
  if (rank == 0 && planning) {
    // A failed write is a warning: the measurements are in the records either way.
    const std::string path = tuning_db_path();
    try {
      if (evidence > 0) evidence_db.save(path);
      std::cerr << "cofuse bench: " << evidence << " measured schedules added as evidence of the model ("
                << planning->profile.name << ") to " << path << "\n";
    } catch (const std::exception& e) {
      std::cerr << "cofuse bench: warning: the evidence was not recorded in " << path << ": " << e.what() << "\n";
    }
  }
  if (rank == 0) {
    if (!args.csv.empty()) {
      std::ofstream csv(args.csv);
      write_csv(csv, all);
    }
    if (!args.json) {
      if (!args.records.empty()) std::cout << "\nrecords  " << args.records << " (JSON Lines, appended)\n";
      if (!args.csv.empty()) std::cout << "csv      " << args.csv << "\n";
      if (!args.trace_dir.empty()) std::cout << "traces   " << args.trace_dir << "/case<i>-{serial,best}.json\n";
      if (!all_passed) std::cout << "FAIL: an output differs from the reference (see the error column)\n";
    }
  }
  return all_passed ? 0 : 1;
}

int bench_command(const BenchArgs& args) {
  // The sweep is expanded before MPI starts, so a malformed sweep is a usage error on every rank.
  std::vector<BenchCase> cases;
  try {
    cases = cases_of(args);
  } catch (const Error& e) {
    std::cerr << "cofuse bench: error: " << e.what() << std::endl;
    return 2;
  }
  return run_with_mpi("bench", [&] { return bench(args, cases); });
}

}  // namespace

std::function<int()> add_bench_command(CLI::App& app, int argc, char** argv) {
  auto args = std::make_shared<BenchArgs>();
  for (int i = 0; i < argc; ++i) {
    if (i > 0) args->command_line += ' ';
    args->command_line += argv[i];
  }
  CLI::App* b = app.add_subcommand(
      "bench",
      "Measure a sweep of cases under mpirun: GEMM alone, communication alone, the serial baseline, a naive\n"
      "overlap (non-blocking MPI per piece + BLAS) and cofuse schedules, interleaved; table + records.\n"
      "Sizes are GLOBAL M, N, K (docs/ops.md). Lists are comma-separated. See docs/benchmarks.md.");
  add_list_options(b, args->lists, "; or a range with -b/-e/-f");
  b->add_option("-b,--m-begin", args->m_begin, "Range of M: first value (nccl-tests style)")->check(CLI::PositiveNumber);
  b->add_option("-e,--m-end", args->m_end, "Range of M: last value (inclusive)")->check(CLI::PositiveNumber);
  b->add_option("-f,--m-factor", args->m_factor, "Range of M: multiply by this each step")
      ->check(CLI::Range(1.0001, 1e6))
      ->capture_default_str();
  b->add_option("-i,--m-step", args->m_step, "Range of M: add this each step instead of -f")->check(CLI::PositiveNumber);
  b->add_option("--schedules", args->schedules,
                "cofuse schedules beside the baselines: presets, all, or a ';'-separated list (docs/schedules.md)")
      ->capture_default_str();
  b->add_option("--sweep", args->sweep_file,
                "A sweep file (JSON, docs/benchmarks.md): its cases replace the size and op options, which "
                "become defaults for fields a case leaves out")
      ->check(CLI::ExistingFile);
  b->add_option("--label", args->label, "Name of the layer, kept in every record");
  b->add_option("--link", args->link,
                "What the link between ranks is, kept in every record next to its measured bandwidth "
                "(default: $COFUSE_LINK, else 'not described')");
  b->add_option("--iters", args->iters, "Timed iterations of every variant")->check(CLI::PositiveNumber)->capture_default_str();
  b->add_option("--warmup", args->warmup, "Untimed iterations first")->check(CLI::NonNegativeNumber)->capture_default_str();
  b->add_option("--naive-chunks", args->naive_chunks, "Pieces of the naive overlap baseline")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  b->add_option("--seed", args->seed, "Seed of the random inputs (case i uses seed + i; default: fresh, recorded)")
      ->check(seed_validator());
  b->add_option("--records", args->records, "Append one JSON record per variant and case to this JSON Lines file");
  b->add_option("--csv", args->csv, "Also write this run's records as CSV");
  b->add_option("--trace-dir", args->trace_dir, "Write Chrome traces of serial and the best schedule of every case here");
  b->add_option("--poll-us", args->settings.poll_us, "Progress thread polling interval (see cofuse run --help)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  b->add_option("--tile-rows", args->settings.tile_rows, "Fused schedules: GEMM rows between MPI progress calls")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))
      ->capture_default_str();
  b->add_flag("--evidence", args->evidence,
              "Every measured schedule is evidence of the model's error here: its median over the model's\n"
              "prediction (on --profile) joins the tuning database's corrections ($COFUSE_TUNING_DB, else the\n"
              "cache's), so the next plan on this machine is closer (docs/planner.md)");
  b->add_option("--profile", args->profile,
                "With --evidence: the profile whose predictions are corrected (default $COFUSE_PROFILE, else a\n"
                "calibration of this communicator, as --schedule auto plans)");
  b->add_flag("--quiet", args->quiet, "No progress on stderr");
  b->add_flag("--json", args->json, "Print the records (JSON Lines) on stdout instead of tables");
  return [args] {
    args->link = config::link(args->link).value;
    return bench_command(*args);
  };
}

}  // namespace cofuse::cli
