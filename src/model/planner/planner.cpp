#include "cofuse/model/planner.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>

#include "cofuse/backend.hpp"
#include "cofuse/model/plan.hpp"
#include "core/exec_model/times.hpp"

namespace cofuse {

namespace {

// schedule_name, and a preset driven by a GPU engine named after it: "shard,engine=sm" (a
// two-level one: "shard,topo=2level,host_ranks=8,engine=sm").
std::string name_of(const Schedule& s) {
  const bool gpu_engine = s.driver == CommDriver::ce || s.driver == CommDriver::sm;
  if (!gpu_engine) return schedule_name(s);
  Schedule on_cpu = s;
  on_cpu.driver = CommDriver::thread;
  const std::string name = schedule_name(on_cpu);
  return name == on_cpu.to_string() ? s.to_string() : name + ",engine=" + to_string(s.driver);
}

std::string ms(double seconds) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << seconds * 1e3 << " ms";
  return o.str();
}

std::string percent(double fraction) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << fraction * 100 << "%";
  return o.str();
}

// What identifies a planning question: the description, the profile (its JSON is its whole
// content) and the options.
std::string cache_key(const OpDesc& d, const MachineProfile& p, const PlannerOptions& o, const std::string& db) {
  std::ostringstream key;
  key << d.to_string() << "|" << to_json(p) << "|" << to_string(planning_backend(p, o)) << "|" << o.margin << "|"
      << o.sim.tile_rows << "|" << o.sim.poll_us << "|" << o.runtime.progress_thread << "|" << o.runtime.no_bf16 << "|" << db;
  // A database that `cofuse tune` rewrote is a new question.
  std::error_code ec;
  if (!db.empty()) key << "@" << std::filesystem::last_write_time(db, ec).time_since_epoch().count();
  for (int c : o.chunk_counts) key << "," << c;
  return key.str();
}

// A backend in words, for explanations.
std::string described(Backend b) {
  switch (b) {
    case Backend::cpu_mpi: return "the CPU executor (cpu_mpi)";
    case Backend::cuda_local: return "the CUDA backend on one GPU (cuda_local)";
    case Backend::cuda_nccl: return "the CUDA backend over NCCL (cuda_nccl)";
  }
  return to_string(b);
}

// serial_refused: can_run(c.backend, d, serial)'s answer when it is not ok (the backend does not
// run the op at all: a 16-bit dtype on the CPU executor, say), else empty.
std::string explain(const OpDesc& d, const MachineProfile& p, const PlanChoice& c, const PlannerOptions& o,
                    const std::string& serial_refused) {
  const PlanCandidate& best = c.candidates.front();
  const SimLosses& l = best.losses;
  std::ostringstream why;
  why << "On " << c.profile << (c.profile_validated ? " (a measured profile)" : " (datasheet numbers, not validated)")
      << " for " << described(c.backend) << ", the unfused baseline for " << d.to_string() << " is predicted at "
      << ms(c.serial_s) << ": GEMM " << ms(l.gemm_alone_s) << ", " << gemm_rate_basis(p, d.dtype)
      << ", then the collective " << ms(l.comm_alone_s) << ". ";
  if (c.candidates.size() == 1) {
    if (!serial_refused.empty())
      why << "But " << described(c.backend) << " does not run this op at all (" << serial_refused
          << "): serial is only the baseline's prediction, not a schedule to run there.";
    else
      why << "No overlapped schedule of this op runs on " << described(c.backend)
          << " (can_run refuses them all), so serial it is.";
    return why.str();
  }
  if (!serial_refused.empty())
    why << "Serial itself does not run on " << described(c.backend) << " (" << serial_refused
        << "): it is the baseline's prediction only. ";
  if (best.schedule.overlap == Overlap::none) {
    why << "No overlapped schedule is predicted to be faster than the unfused baseline " << best.name
        << ", so it is the choice.";
    return why.str();
  }
  const double gain = 1 - best.predicted_s / c.serial_s;
  why << "The fastest of " << c.candidates.size() << " candidates, " << best.name << ", is predicted at "
      << ms(best.predicted_s) << " (" << percent(gain) << " faster; its pieces cost " << ms(l.dil_s)
      << " of GEMM efficiency (DIL), contention " << ms(l.cil_s) << " (CIL), and " << ms(l.exposed_comm_s)
      << " of communication stays exposed). ";
  if (c.schedule.overlap == Overlap::none)
    why << "That is less than the " << percent(o.margin)
        << " margin the planner demands before it trusts a prediction over the plain baseline, so it chooses serial.";
  else
    why << "That beats the " << percent(o.margin) << " margin, so it is chosen. "
        << (l.gemm_alone_s >= l.comm_alone_s ? "The GEMM is the longer part: the best it can do is hide the collective."
                                            : "The collective is the longer part: the best it can do is hide the GEMM.");
  return why.str();
}

}  // namespace

Backend planning_backend(const MachineProfile& profile, const PlannerOptions& options) {
  return options.backend.value_or(profile.backend);
}

std::vector<Schedule> candidate_schedules(const OpDesc& desc, Backend backend, const std::vector<int>& chunk_counts,
                                          int ranks_per_host) {
  std::vector<Schedule> out = {serial_schedule()};
  // The design space's grid is enumerate_schedules' (CPU engines). Asked for f32, which every
  // backend runs, it holds every combination of overlap, chunks, split, data and algo whose
  // pieces a library can move (no backend reduces strided pieces); a GPU backend runs the
  // unfused ones with its own engine driving communication (fusion=fused is a CPU technique).
  OpDesc grid = desc;
  if (backend != Backend::cpu_mpi) grid.dtype = DType::f32;
  for (const Schedule& s : enumerate_schedules(grid, chunk_counts, ranks_per_host)) {
    if (s == serial_schedule()) continue;
    if (backend == Backend::cpu_mpi) {
      out.push_back(s);  // enumerate_schedules kept what can_run(cpu_mpi, desc, ...) accepts
      continue;
    }
    if (s.fusion == Fusion::fused) continue;
    for (CommDriver engine : {CommDriver::ce, CommDriver::sm}) {
      // cuda_nccl's engine=ce is CUDA IPC: one node only, and the profiles do not describe its
      // copies between processes, so the planner offers NCCL there (a user may still ask for it).
      if (backend == Backend::cuda_nccl && engine == CommDriver::ce) continue;
      Schedule g = s;
      g.driver = engine;
      if (can_run(backend, desc, g).ok()) out.push_back(g);
    }
  }
  return out;
}

double overlap_headroom_s(const PlanChoice& choice, const MachineProfile& profile) {
  for (const PlanCandidate& c : choice.candidates)
    if (c.schedule == serial_schedule()) {
      const double latency = std::max(profile.network.alpha_s, profile.network.inter_alpha_s);
      return std::min(c.losses.gemm_alone_s, c.losses.comm_alone_s) - latency;
    }
  return 0;  // no serial among them: nothing to overlap against
}

PlanChoice choose_schedule(const OpDesc& desc, const MachineProfile& profile, const PlannerOptions& options,
                           PlannerCache* cache) {
  throw_if_error(desc.validate());
  throw_if_error(profile.validate());
  const std::string db_path =
      !options.consult_tuning_db ? std::string() : tuning_db_path(options.tuning_db);
  const std::string key = cache ? cache_key(desc, profile, options, db_path) : std::string();
  if (cache)
    if (std::optional<PlanChoice> answer = cache->find(key)) return std::move(*answer);
  PlanChoice c;
  c.profile = profile.name;
  c.profile_validated = profile.validated;
  c.backend = planning_backend(profile, options);
  // Every candidate's losses compare against the serial baseline: simulated once, here.
  const SimResult serial = simulate(desc, serial_schedule(), profile, options.sim);
  const TuningDb db = db_path.empty() ? TuningDb() : TuningDb::load(db_path, &c.warning);
  std::map<std::string, const ModelCorrection*> used;  // the corrections applied, by family
  for (const Schedule& s :
       candidate_schedules(desc, c.backend, options.chunk_counts, profile.ranks_per_host(desc.ranks))) {
    // Serial stays: where the runtime refuses even it (no bf16 GEMM), building it says why.
    if (s != serial_schedule() && !runtime_allows(c.backend, desc, s, options.runtime).ok()) continue;
    const SimResult r = simulate(desc, s, profile, options.sim, serial);
    const Plan& plan = r.plans.front();
    // What this machine measured of this kind of schedule corrects the model's prediction.
    const std::string family = correction_family(s);
    const ModelCorrection* correction = db.correction(desc, profile.name, family);
    const double factor = correction ? correction->factor() : 1.0;
    if (correction) used[family] = correction;
    c.candidates.push_back({s, name_of(s), r.makespan_s * factor, r.losses, plan.workspace_bytes(), r.makespan_s, factor});
    if (s == serial_schedule()) c.serial_s = r.makespan_s * factor;
  }
  // Fastest first; among predictions equal to 0.1%, the simpler schedule: a named preset, then
  // fewer pieces (less per-piece overhead the model may have missed), then less workspace.
  auto simpler = [](const PlanCandidate& a, const PlanCandidate& b) {
    const bool pa = a.name != a.schedule.to_string(), pb = b.name != b.schedule.to_string();
    if (pa != pb) return pa;
    if (a.schedule.chunks != b.schedule.chunks) return a.schedule.chunks < b.schedule.chunks;
    return a.workspace_bytes < b.workspace_bytes;
  };
  std::stable_sort(c.candidates.begin(), c.candidates.end(), [&](const PlanCandidate& a, const PlanCandidate& b) {
    const double tie = 1e-3 * std::max(a.predicted_s, b.predicted_s);
    if (std::abs(a.predicted_s - b.predicted_s) > tie) return a.predicted_s < b.predicted_s;
    return simpler(a, b);
  });
  const PlanCandidate& best = c.candidates.front();
  const bool worth_it = best.predicted_s < c.serial_s * (1 - options.margin);
  c.schedule = worth_it ? best.schedule : serial_schedule();
  c.name = name_of(c.schedule);
  c.predicted_s = worth_it ? best.predicted_s : c.serial_s;
  const Status serial_runs = can_run(c.backend, desc, serial_schedule());
  c.why = explain(desc, profile, c, options, serial_runs.ok() ? std::string() : serial_runs.message());
  if (!options.runtime.progress_thread)
    c.why += " Left out: the schedules a progress thread drives, since MPI was initialised below "
             "MPI_THREAD_SERIALIZED here.";
  if (!used.empty()) {
    std::ostringstream why;
    why << " Predictions corrected by what this machine measured (the shrunk median of measured / predicted, "
        << db_path << "):";
    bool first = true;
    for (const auto& [family, k] : used) {
      why << (first ? " " : "; ") << family << " x" << std::fixed << std::setprecision(3) << k->factor() << " ("
          << k->ratios.size() << (k->ratios.size() == 1 ? " run" : " runs") << ", newest " << k->updated_at << " by "
          << k->measured_by << ")";
      first = false;
    }
    c.why += why.str() + ".";
  }
  if (!db_path.empty()) {
    const auto entry = db.lookup(desc, profile.name);
    // A winner measured on another backend (cofuse tune runs the CPU executor) is not an answer here.
    if (entry && can_run(c.backend, desc, entry->schedule, options.runtime).ok()) {
      double predicted = 0;
      for (const PlanCandidate& k : c.candidates)
        if (k.schedule == entry->schedule) predicted = k.predicted_s;
      c.schedule = entry->schedule;
      c.name = name_of(entry->schedule);
      c.predicted_s = predicted;
      c.measured = true;
      c.measured_nearby = !(entry->m == desc.m && entry->n == desc.n && entry->k == desc.k);
      std::ostringstream why;
      why << "Measured on this machine: " << entry->measured_by << " (" << entry->measured_at << ", cofuse " << entry->revision << ") ran "
          << entry->op << " " << entry->m << "x" << entry->n << "x" << entry->k
          << (entry->m == desc.m && entry->n == desc.n && entry->k == desc.k ? "" : " (the nearest tuned shape)") << " and "
          << c.name << " took " << std::fixed << std::setprecision(3) << entry->winner_ms << " ms against serial "
          << entry->serial_ms << " ms; a measurement outranks the model, which predicted " << ms(predicted)
          << " for it. The model alone would say: " << c.why;
      c.why = why.str();
    }
  }
  if (cache) return cache->store(key, std::move(c));
  return c;
}

HeuristicChoice ficco_heuristic_schedule(const OpDesc& d, const MachineProfile& profile) {
  throw_if_error(d.validate());
  const double elem = double(dtype_size(d.dtype)), p = d.ranks;
  const double flops = d.flops() / p;  // per rank
  // Bytes a rank communicates: its share of the whole gathered or reduced matrix, one pass over
  // it for every op (the all-gather factor; an all-reduce's bus traffic, twice that, is not
  // what these ratios have always been computed on).
  const double whole = d.op == OpKind::ag_gemm ? double(d.m) * double(d.k) * elem : double(d.m) * double(d.n) * elem;
  const double comm = std::max(whole * detail::bus_factor(Collective::allgather, d.ranks), 1.0);
  const LocalShapes s = d.local_shapes();
  const double traffic = elem * double(s.a.elements() + s.b.elements() + s.c.elements());
  const double otb = flops / comm, mt = traffic / comm;
  const double ts = profile.compute.peak_gflops_f32 * 1e9 / (profile.network.bandwidth_GBps * 1e9);
  HeuristicChoice h;
  std::ostringstream why;
  why << std::setprecision(3) << "select_schedule: otb = " << otb << " FLOP/B, mt = " << mt << ", otb*mt = " << otb * mt
      << " against ts = " << ts << " (peak / link bandwidth): ";
  Schedule s1;
  s1.overlap = Overlap::chunk;
  s1.chunks = 4;
  if (otb * mt < 0.5 * ts) {
    s1.data = DataMode::uniform;
    s1.fusion = Fusion::fused;
    why << "< 0.5 ts -> uniform-fused-1d";
  } else if (otb * mt > 5 * ts) {
    s1.data = DataMode::hetero;
    s1.fusion = Fusion::unfused;
    why << "> 5 ts -> hetero-unfused-1d";
  } else {
    s1.data = DataMode::hetero;
    s1.fusion = Fusion::fused;
    why << "between -> hetero-fused-1d";
  }
  // auto_tune(M, K) overrides split and fusion, as the seed's two rules compose.
  const double ratio = double(d.m) / double(d.k);
  why << "; auto_tune: M/K = " << ratio << " ";
  if (ratio > 4) {
    s1.split = Split::d1;
    s1.fusion = Fusion::fused;
    why << "> 4 -> 1d fused";
  } else if (ratio < 0.25) {
    s1.split = Split::d2;
    s1.fusion = Fusion::unfused;
    why << "< 0.25 -> 2d unfused";
  } else {
    s1.split = Split::d1;
    s1.fusion = Fusion::unfused;
    why << "between -> 1d unfused";
  }
  s1.driver = s1.fusion == Fusion::fused ? CommDriver::inline_ : CommDriver::thread;
  s1.algo = Algo::ring;
  const Backend backend = planning_backend(profile);
  if (backend != Backend::cpu_mpi) {
    // The seed's engines are CPU threads; a GPU backend drives communication with its own
    // engine, and fusion=fused is a CPU technique there.
    if (s1.fusion == Fusion::fused) why << " (fused is a CPU technique: unfused on " << to_string(backend) << ")";
    s1.fusion = Fusion::unfused;
    s1.driver = CommDriver::sm;
  }
  if (s1.split == Split::d2 && !can_run(backend, d, s1).ok()) {
    // The rules name combinations the op cannot take (a 2d split where rows are not cut, say):
    // fall back to the nearest one that it can.
    s1.split = Split::d1;
    why << " (2d does not suit " << to_string(d.op) << ": 1d)";
  }
  if (!can_run(backend, d, s1).ok()) {
    s1 = serial_schedule();
    why << " (no valid combination: serial)";
  }
  h.schedule = s1;
  h.name = name_of(s1);
  h.why = why.str();
  return h;
}

}  // namespace cofuse
