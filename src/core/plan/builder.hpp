// Shared tools of the lowering code: ranges, pieces, views of op(X), and a plan under construction.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cofuse/model/plan.hpp"

namespace cofuse::detail {

/// [begin, begin + size)
struct Range {
  int64_t begin = 0;
  int64_t size = 0;
};

/// The i-th of `parts` contiguous near-equal ranges of [0, total): the first total % parts
/// ranges are one longer. Every rank computes the same ranges, so pieces match across ranks.
Range split_range(int64_t total, int64_t parts, int64_t i);

/// A piece of a [rows, cols] region, in that region's coordinates.
struct Piece {
  Range rows, cols;
};

/// How a schedule cuts a [rows, cols] region: one piece (overlap none/shard); 1d: min(chunks,
/// rows) row ranges; 2d: a grid of rp x cp tiles with rp the largest divisor of chunks that is
/// <= sqrt(chunks) (4 -> 2x2, 6 -> 2x3, 5 -> 1x5), clamped to the region. Never an empty piece.
std::vector<Piece> cut(int64_t rows, int64_t cols, const Schedule& schedule);

/// The stored view of the op(X) region (rows, cols) of matrix X stored row-major with leading
/// dimension ld at `offset` in buf: for a transposed X the stored view is the transpose.
View op_view(Buf buf, int64_t offset, int64_t ld, bool trans, Range rows, Range cols);

/// A task's label: "<what> <unit> <index> piece <piece>", e.g. "recv shard 2 piece 0".
std::string task_label(const char* what, const char* unit, int index, int piece);

/// A plain row-major view.
View dense_view(Buf buf, int64_t offset, int64_t rows, int64_t cols, int64_t ld);

class PlanBuilder {
 public:
  PlanBuilder(const OpDesc& desc, const Schedule& schedule, int rank);

  /// Adds a task and returns its index. Dependencies must already be in the plan.
  int add(Task task);
  /// Reserves `elements` of workspace (64-byte aligned) and returns its offset in elements.
  int64_t alloc(int64_t elements);
  /// The same in the wide workspace (f32 elements).
  int64_t alloc_wide(int64_t elements);
  /// Bytes of a view's elements (of buffer_dtype(desc, view.buf)).
  int64_t bytes_of(const View& v) const;

  int gemm(const std::string& label, View z, View x, bool trans_x, View y, bool trans_y, bool accumulate,
           std::vector<int> deps, int step, int chunk);
  int copy(TaskKind kind, const std::string& label, View from, View to, std::vector<int> deps, int step, int chunk);
  int reduce(const std::string& label, View into, View from, std::vector<int> deps, int step, int chunk);
  /// A send also waits for the previous send to the same peer: see last_send_to_.
  int send(const std::string& label, View from, int peer, int tag, std::vector<int> deps, int step, int chunk);
  int recv(const std::string& label, View into, int peer, int tag, std::vector<int> deps, int step, int chunk);
  int collective(const std::string& label, Collective kind, View x, View z, int64_t stride, std::vector<int> deps,
                 int chunk);

  const OpDesc& desc() const { return plan_.desc; }
  const Schedule& schedule() const { return plan_.schedule; }
  int rank() const { return plan_.rank; }
  int ranks() const { return plan_.desc.ranks; }
  Plan& plan() { return plan_; }
  Plan finish(std::string order);

 private:
  Plan plan_;
  // A rank's messages to one peer leave one at a time, in plan order. Posted together, Open
  // MPI's TCP transport interleaves their fragments, so every piece arrives near the end and
  // the pipeline stalls: ag_gemm 2048x1024x1536 on a 2 Gbit/s link, whose first of 8 pieces
  // arrived after 32 of the 49 ms the whole shard takes; one at a time, after 5 ms (T 66 ms ->
  // 54 ms, docs/benchmarks.md). Shared memory neither gains nor loses measurably.
  std::map<int, int> last_send_to_;  // peer -> its last send task
};

/// Lowering of the two op families (the only code that knows how ops are cut).
Plan lower_gather(PlanBuilder& builder);   // ag_gemm, both axes
Plan lower_reduce(PlanBuilder& builder);   // gemm_rs (both axes) and gemm_ar

}  // namespace cofuse::detail
