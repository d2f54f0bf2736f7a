#include "core/plan/builder.hpp"

#include <algorithm>
#include <cmath>

#include "cofuse/status.hpp"

namespace cofuse::detail {

Range split_range(int64_t total, int64_t parts, int64_t i) {
  const int64_t base = total / parts, extra = total % parts;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

std::vector<Piece> cut(int64_t rows, int64_t cols, const Schedule& s) {
  if (rows == 0 || cols == 0) return {};
  int64_t row_parts = 1, col_parts = 1;
  if (s.overlap == Overlap::chunk) {
    if (s.split == Split::d1) {
      row_parts = s.chunks;
    } else {
      for (int64_t d = 1; d * d <= s.chunks; ++d)
        if (s.chunks % d == 0) row_parts = d;
      col_parts = s.chunks / row_parts;
    }
  }
  row_parts = std::min(row_parts, rows);
  col_parts = std::min(col_parts, cols);
  std::vector<Piece> pieces;
  for (int64_t i = 0; i < row_parts; ++i)
    for (int64_t j = 0; j < col_parts; ++j) pieces.push_back({split_range(rows, row_parts, i), split_range(cols, col_parts, j)});
  return pieces;
}

View op_view(Buf buf, int64_t offset, int64_t ld, bool trans, Range rows, Range cols) {
  if (trans) return View{buf, offset + cols.begin * ld + rows.begin, cols.size, rows.size, ld};
  return View{buf, offset + rows.begin * ld + cols.begin, rows.size, cols.size, ld};
}

std::string task_label(const char* what, const char* unit, int index, int piece) {
  return std::string(what) + " " + unit + " " + std::to_string(index) + " piece " + std::to_string(piece);
}

View dense_view(Buf buf, int64_t offset, int64_t rows, int64_t cols, int64_t ld) {
  return View{buf, offset, rows, cols, ld};
}

PlanBuilder::PlanBuilder(const OpDesc& desc, const Schedule& schedule, int rank) {
  plan_.desc = desc;
  plan_.schedule = schedule;
  plan_.rank = rank;
}

int PlanBuilder::add(Task task) {
  const int index = static_cast<int>(plan_.tasks.size());
  for (int dep : task.deps)
    if (dep < 0 || dep >= index) throw Error(ErrorCode::internal, "lower: task '" + task.label + "' depends on a later task");
  plan_.tasks.push_back(std::move(task));
  return index;
}

namespace {

// Reserves `elements` at the end of a workspace of `used` elements of `elem` bytes, 64-byte aligned.
int64_t reserve(int64_t& used, int64_t elements, std::size_t elem) {
  const int64_t align = 64 / static_cast<int64_t>(elem);
  const int64_t offset = (used + align - 1) / align * align;
  used = offset + elements;
  return offset;
}

}  // namespace

int64_t PlanBuilder::alloc(int64_t elements) {
  return reserve(plan_.work_elements, elements, dtype_size(buffer_dtype(plan_.desc, Buf::work)));
}

int64_t PlanBuilder::alloc_wide(int64_t elements) { return reserve(plan_.wide_elements, elements, 4); }

int64_t PlanBuilder::bytes_of(const View& v) const {
  return v.elements() * static_cast<int64_t>(dtype_size(buffer_dtype(plan_.desc, v.buf)));
}

namespace {

// The fields every task has; each builder method then fills in what its kind needs.
Task base_task(TaskKind kind, EngineId engine, const std::string& label, std::vector<int> deps, int step, int chunk) {
  Task t;
  t.kind = kind;
  t.engine = engine;
  t.label = label;
  t.deps = std::move(deps);
  t.step = step;
  t.chunk = chunk;
  return t;
}

}  // namespace

int PlanBuilder::gemm(const std::string& label, View z, View x, bool trans_x, View y, bool trans_y, bool accumulate,
                      std::vector<int> deps, int step, int chunk) {
  Task t = base_task(TaskKind::gemm, EngineId::compute, label, std::move(deps), step, chunk);
  t.x = x;
  t.y = y;
  t.z = z;
  t.trans_x = trans_x;
  t.trans_y = trans_y;
  t.accumulate = accumulate;
  const int64_t k = trans_x ? x.rows : x.cols;
  t.flops = 2.0 * double(z.rows) * double(z.cols) * double(k);
  return add(std::move(t));
}

int PlanBuilder::copy(TaskKind kind, const std::string& label, View from, View to, std::vector<int> deps, int step,
                      int chunk) {
  // Moving bytes is the communication engine's job (the CPU analogue of a DMA engine).
  Task t = base_task(kind, EngineId::comm, label, std::move(deps), step, chunk);
  t.x = from;
  t.z = to;
  t.bytes = std::max(bytes_of(from), bytes_of(to));
  return add(std::move(t));
}

int PlanBuilder::reduce(const std::string& label, View into, View from, std::vector<int> deps, int step, int chunk) {
  if (buffer_dtype(plan_.desc, into.buf) != buffer_dtype(plan_.desc, from.buf))
    throw Error(ErrorCode::internal, "lower: reduce '" + label + "' adds views of two element types");
  Task t = base_task(TaskKind::reduce, EngineId::compute, label, std::move(deps), step, chunk);  // arithmetic: cores
  t.x = from;
  t.z = into;
  t.flops = double(into.elements());
  t.bytes = bytes_of(from);
  return add(std::move(t));
}

int PlanBuilder::send(const std::string& label, View from, int peer, int tag, std::vector<int> deps, int step,
                      int chunk) {
  if (const auto previous = last_send_to_.find(peer); previous != last_send_to_.end()) deps.push_back(previous->second);
  Task t = base_task(TaskKind::send, EngineId::comm, label, std::move(deps), step, chunk);
  t.x = from;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes_of(from);
  return last_send_to_[peer] = add(std::move(t));
}

int PlanBuilder::recv(const std::string& label, View into, int peer, int tag, std::vector<int> deps, int step,
                      int chunk) {
  Task t = base_task(TaskKind::recv, EngineId::comm, label, std::move(deps), step, chunk);
  t.z = into;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes_of(into);
  return add(std::move(t));
}

int PlanBuilder::collective(const std::string& label, Collective kind, View x, View z, int64_t stride,
                            std::vector<int> deps, int chunk) {
  Task t = base_task(TaskKind::collective, EngineId::comm, label, std::move(deps), 0, chunk);
  t.collective = kind;
  t.x = x;
  t.z = z;
  t.stride = stride;
  // nccl-tests' sizes: the whole gathered / reduced data.
  const int64_t piece = kind == Collective::allgather ? bytes_of(x) : bytes_of(z);
  t.bytes = kind == Collective::allreduce ? piece : piece * ranks();
  return add(std::move(t));
}

Plan PlanBuilder::finish(std::string order) {
  plan_.order = std::move(order);
  return std::move(plan_);
}

}  // namespace cofuse::detail
