// lower(): checks its inputs and hands them to the lowering of the op's family.
#include <sstream>

#include "cofuse/status.hpp"
#include "core/plan/builder.hpp"

namespace cofuse {

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::gemm: return "gemm";
    case TaskKind::send: return "send";
    case TaskKind::recv: return "recv";
    case TaskKind::reduce: return "reduce";
    case TaskKind::pack: return "pack";
    case TaskKind::unpack: return "unpack";
    case TaskKind::collective: return "collective";
  }
  return "?";
}

const char* to_string(EngineId engine) { return engine == EngineId::compute ? "compute" : "comm"; }

const char* to_string(Buf buf) {
  switch (buf) {
    case Buf::a: return "A";
    case Buf::b: return "B";
    case Buf::c: return "C";
    case Buf::gathered: return "G";
    case Buf::work: return "W";
    case Buf::wide: return "F";
  }
  return "?";
}

int64_t Plan::wide_offset_bytes() const {
  const int64_t bytes = work_elements * int64_t(dtype_size(buffer_dtype(desc, Buf::work)));
  return (bytes + 63) / 64 * 64;
}

int64_t Plan::workspace_bytes(bool caller_gathered) const {
  const int64_t elem = int64_t(dtype_size(buffer_dtype(desc, Buf::work)));
  if (caller_gathered && gathered_offset >= 0 && wide_elements == 0) return gathered_offset * elem;
  return wide_elements > 0 ? wide_offset_bytes() + wide_elements * 4 : work_elements * elem;
}

Plan lower(const OpDesc& desc, const Schedule& schedule, int rank) {
  throw_if_error(desc.validate());
  throw_if_error(schedule.validate_for(desc));
  if (schedule.topo == Topo::two_level && schedule.host_ranks == 0)
    throw Error(ErrorCode::invalid_argument,
                "lower: schedule " + schedule.to_string() +
                    " leaves its ranks per host to the machine (host_ranks=0); a plan needs the number: give "
                    "host_ranks=R, or let Operation (MPI), the simulator or the planner (the profile) fill it in");
  if (rank < 0 || rank >= desc.ranks)
    throw Error(ErrorCode::invalid_argument,
                "lower: rank " + std::to_string(rank) + " is outside 0.." + std::to_string(desc.ranks - 1));
  detail::PlanBuilder builder(desc, schedule, rank);
  return desc.op == OpKind::ag_gemm ? detail::lower_gather(builder) : detail::lower_reduce(builder);
}

namespace {

std::string show(const View& v) {
  std::ostringstream out;
  out << to_string(v.buf) << "+" << v.offset << "[" << v.rows << "x" << v.cols;
  if (!v.contiguous()) out << " ld " << v.ld;
  out << "]";
  return out.str();
}

const char* show(Collective c) {
  return c == Collective::allgather ? "allgather" : c == Collective::reduce_scatter ? "reduce_scatter" : "allreduce";
}

}  // namespace

std::string Plan::dump() const {
  std::ostringstream out;
  out << "plan for rank " << rank << " of " << desc.ranks << ": " << desc.to_string() << "\n";
  out << "schedule " << schedule.to_string() << "\n";
  out << "order    " << order << "\n";
  out << "work     " << work_elements << " elements (" << work_elements * int64_t(dtype_size(buffer_dtype(desc, Buf::work)))
      << " bytes)";
  if (gathered_offset >= 0) out << "; G is the caller's gathered buffer, or W+" << gathered_offset;
  else if (desc.op == OpKind::ag_gemm) out << "; G is the caller's gathered buffer, written (hand back) only when passed";
  if (wide_elements > 0) out << "; F: " << wide_elements << " f32 partial sums from byte " << wide_offset_bytes();
  out << "\n";
  out << "buffers  A, B, C: the caller's; G: gathered A; W: workspace";
  if (wide_elements > 0) out << "; F: wide workspace (f32)";
  out << ". Views are BUF+offset[rows x cols ld]\n";
  int gemms = 0, messages = 0;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    out << "  #" << i << " [" << to_string(t.engine) << "] " << t.label << ": ";
    switch (t.kind) {
      case TaskKind::gemm:
        ++gemms;
        out << show(t.z) << (t.accumulate ? " += " : " = ") << (t.trans_x ? "T " : "") << show(t.x) << " * "
            << (t.trans_y ? "T " : "") << show(t.y);
        break;
      case TaskKind::send:
        ++messages;
        out << "send " << show(t.x) << " to rank " << t.peer << " tag " << t.tag;
        break;
      case TaskKind::recv:
        ++messages;
        out << "recv " << show(t.z) << " from rank " << t.peer << " tag " << t.tag;
        break;
      case TaskKind::reduce: out << show(t.z) << " += " << show(t.x); break;
      case TaskKind::pack:
      case TaskKind::unpack: out << to_string(t.kind) << " " << show(t.x) << " -> " << show(t.z); break;
      case TaskKind::collective:
        ++messages;
        out << show(t.collective) << " " << show(t.x) << " -> " << show(t.z);
        if (t.stride) out << " stride " << t.stride;
        break;
    }
    if (!t.deps.empty()) {
      out << "  after";
      for (int dep : t.deps) out << " #" << dep;
    }
    out << "\n";
  }
  out << tasks.size() << " tasks: " << gemms << " gemm, " << messages << " communication\n";
  return out.str();
}

}  // namespace cofuse
