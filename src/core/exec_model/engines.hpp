// The engine rules of the execution model, written once: how a schedule's plan runs on its two
// engines (EngineId::compute, EngineId::comm). The CPU executor, the simulator, the trace writer
// and the CUDA backend's stream programs take these facts from here, so a predicted run and a
// measured one follow the same rules:
//
//   - the compute engine runs its tasks one at a time, in plan order (compute_order); an engine
//     with several in-order queues (a GPU's compute streams) keeps only the orderings that
//     matter (compute_predecessors);
//   - the communication engine posts each task as soon as its dependencies are met; messages
//     may be posted in any order (unique tags), collectives only in plan order, the same on
//     every rank (matching.hpp pairs them across ranks);
//   - what drives the communication engine (EngineRules): a thread of its own beside the
//     compute thread (overlapped, fusion=unfused), or the compute thread itself between GEMM
//     tiles (fusion=fused) or between tasks (the serial baseline, whose collectives are the
//     blocking calls because there is nothing to overlap them with).
//
// Which backend may run which driver is can_run's answer (cofuse/backend.hpp); the facts it
// needs (cpu_driver, gpu_driver) are here.
#pragma once

#include <vector>

#include "cofuse/model/plan.hpp"
#include "cofuse/schedule.hpp"

namespace cofuse::detail {

struct EngineRules {
  CommDriver driver = CommDriver::thread;  // the schedule's field, as given
  /// Communication has a driver of its own running beside the compute engine (CPU: a progress
  /// thread that posts and polls while GEMMs run): an overlapped, unfused schedule.
  bool separate_comm_driver = false;
  /// The compute thread cuts each GEMM into tiles (ExecSettings::tile_rows rows) and drives
  /// communication between them: an overlapped, fused schedule.
  bool tiled_gemm = false;
  /// Collectives are the blocking library calls (the serial baseline: nothing to overlap them
  /// with, and the blocking algorithms are faster); otherwise non-blocking, completed later.
  bool blocking_collectives = false;
  /// The driver is a CPU thread (thread, inline) or GPU hardware (ce, sm).
  bool cpu_driver = true;
  bool gpu_driver = false;

  /// How the CPU executor realises `engine`, in words, for trace timelines:
  /// "compute (calling thread)", "comm (progress thread)" or "comm (driven by the calling thread)".
  const char* cpu_engine_name(EngineId engine) const;
};

/// The engine rules of plans of `schedule`.
EngineRules engine_rules(const Schedule& schedule);

/// Whether a task of this kind moves data between ranks (send, receive, collective), as opposed
/// to work a rank does alone (GEMM, reduce, pack, unpack), on whichever engine.
bool crosses_ranks(TaskKind kind);

/// The compute engine's tasks in the order it runs them: plan order.
std::vector<int> compute_order(const Plan& plan);

/// Per task: whether the communication needs it, i.e. it is a communication-engine task itself
/// (a message, a collective, a pack or unpack) or one waits for it, directly or through others.
/// The compute tasks it does not need only consume what arrives (an ag_gemm's GEMM pieces, a
/// gemm_rs's last reduction): a started call may run them after handing the calling thread
/// back, and its communication still completes without them.
std::vector<uint8_t> needed_by_communication(const Plan& plan);

/// For an engine with several in-order queues (a GPU's compute streams), which run compute tasks
/// concurrently: per task, the earlier local compute-engine tasks it must still follow, i.e.
/// those that touch an element it touches, one of the two writing (plan/race_check's rule).
/// GEMM pieces that accumulate into one output rely on it. Empty for every other task.
std::vector<std::vector<int>> compute_predecessors(const Plan& plan);

}  // namespace cofuse::detail
