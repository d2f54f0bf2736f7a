// The structure of every plan, checked without MPI: a topological order, every send matched by
// one receive of the same size on its peer, the same collectives in the same order on every
// rank, views inside their buffers, and every element of C the sum of exactly its products,
// each once (the plans run on symbols, below). Unordered memory hazards: find_race, in
// test_race_check.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "cofuse/model/plan.hpp"
#include "support/sweep_sample.hpp"

namespace cofuse {
namespace {

std::vector<OpDesc> descs(int p) {
  std::vector<OpDesc> out;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops)
    for (bool t : {false, true}) out.push_back(OpDesc{kind, 5 * p, 3 * p, 7 * p, DType::f32, t, !t, axis, p});
  out.push_back(OpDesc{OpKind::gemm_ar, 3, 4, 2 * p, DType::f64, false, false, Axis::none, p});  // M < P for p = 4
  // bf16 reductions, whose schedules come in both wires (schedules_of)
  out.push_back(OpDesc{OpKind::gemm_rs, 5 * p, 3 * p, 7 * p, DType::bf16, true, false, Axis::n, p});
  out.push_back(OpDesc{OpKind::gemm_ar, 5 * p + 1, 3 * p, 7 * p, DType::bf16, false, true, Axis::none, p});
  return out;
}

// enumerate_schedules' schedules, each followed by its wire=f32 twin where d has one (a bf16
// reduction): the planner never picks a wire, a caller does.
std::vector<Schedule> schedules_of(const OpDesc& d, const std::vector<int>& chunks, int per_host) {
  std::vector<Schedule> out;
  for (const Schedule& s : enumerate_schedules(d, chunks, per_host)) {
    out.push_back(s);
    Schedule wide = s;
    wide.wire = Wire::f32;
    if (wide.validate_for(d).ok()) out.push_back(wide);
  }
  return out;
}

int64_t buffer_elements(const OpDesc& d, const Plan& plan, Buf buf) {
  const LocalShapes s = d.local_shapes();
  switch (buf) {
    case Buf::a: return s.a.elements();
    case Buf::b: return s.b.elements();
    case Buf::c: return s.c.elements();
    case Buf::gathered: return s.gathered.elements();
    case Buf::work: return plan.work_elements;
    case Buf::wide: return plan.wide_elements;
  }
  return 0;
}

void expect_inside(const OpDesc& d, const Plan& plan, const View& v, const std::string& what) {
  if (v.empty()) return;
  EXPECT_GE(v.offset, 0) << what;
  EXPECT_GE(v.ld, v.cols) << what;
  EXPECT_LE(v.offset + (v.rows - 1) * v.ld + v.cols, buffer_elements(d, plan, v.buf)) << what << " past its buffer";
}

// (P, ranks per host): flat schedules at every P, and their two-level twins at 4 and 6 ranks in
// hosts of 2 and 3 (enumerate_schedules adds them).
const std::pair<int, int> kLayouts[] = {{1, 0}, {2, 0}, {3, 0}, {4, 2}, {6, 2}, {6, 3}};

TEST(Lower, EveryPlanIsSound) {
  int seen = 0;
  for (auto [p, per_host] : kLayouts)
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : schedules_of(d, {1, 2, 3, 8}, per_host)) {
        if (p == 6 && per_host == 3 && s.topo == Topo::flat) continue;  // seen at (6, 2)
        if (!test::in_sweep_sample(seen)) continue;
        SCOPED_TRACE(d.to_string() + " | " + s.to_string());
        // (from, to, tag) -> elements, for sends and receives across all ranks.
        std::map<std::tuple<int, int, int>, int64_t> sends, recvs;
        std::vector<std::vector<std::tuple<int, int64_t, int64_t>>> collectives(p);
        for (int r = 0; r < p; ++r) {
          const Plan plan = lower(d, s, r);
          double gemm_flops = 0;
          for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
            const Task& t = plan.tasks[i];
            for (int dep : t.deps) EXPECT_LT(dep, static_cast<int>(i)) << "not a topological order: " << t.label;
            expect_inside(d, plan, t.x, t.label + " x");
            expect_inside(d, plan, t.y, t.label + " y");
            expect_inside(d, plan, t.z, t.label + " z");
            if (t.kind == TaskKind::gemm) {
              gemm_flops += t.flops;
              EXPECT_EQ(t.engine, EngineId::compute);
            }
            if (t.kind == TaskKind::send) {
              EXPECT_TRUE(sends.emplace(std::make_tuple(r, t.peer, t.tag), t.x.elements()).second) << "duplicate tag";
            }
            if (t.kind == TaskKind::recv) {
              EXPECT_TRUE(recvs.emplace(std::make_tuple(t.peer, r, t.tag), t.z.elements()).second) << "duplicate tag";
            }
            if (t.kind == TaskKind::collective)
              collectives[r].emplace_back(static_cast<int>(t.collective), t.x.elements(), t.z.elements());
            if (t.kind == TaskKind::pack || t.kind == TaskKind::unpack || t.kind == TaskKind::reduce) {
              EXPECT_EQ(t.x.rows, t.z.rows) << t.label;
              EXPECT_EQ(t.x.cols, t.z.cols) << t.label;
            }
            // wire=f32: partial sums move and add in f32, and C is written once per element, by
            // the unpack that rounds a finished f32 sum (no addition lands in C, no GEMM writes it).
            const bool wide = s.wire == Wire::f32;
            EXPECT_EQ(plan.wide_elements > 0, wide) << "a wide workspace exactly where wire=f32";
            if (wide && (t.kind == TaskKind::reduce || t.kind == TaskKind::gemm)) { EXPECT_NE(t.z.buf, Buf::c) << t.label; }
            if (wide && t.kind == TaskKind::reduce) { EXPECT_EQ(t.x.buf, Buf::wide) << t.label; }
            if (wide && t.kind == TaskKind::gemm) { EXPECT_EQ(t.z.buf, Buf::wide) << t.label; }
            if (t.kind == TaskKind::send && t.x.buf == Buf::wide) { EXPECT_EQ(t.bytes, t.x.elements() * 4) << t.label; }
            if (t.kind == TaskKind::send && t.x.buf != Buf::wide) {
              EXPECT_EQ(t.bytes, t.x.elements() * int64_t(dtype_size(d.dtype))) << t.label;
            }
          }
          // Each rank does its share of the layer's multiply-adds (that the right ones, each
          // once, reach the right element is Lower.EveryOutputElementGetsEveryProductOnce).
          EXPECT_DOUBLE_EQ(gemm_flops, d.flops() / p) << "rank " << r;
          if (s.overlap == Overlap::none && s.algo == Algo::coll) {
            EXPECT_EQ(collectives[r].size(), 1u);
          }
          if (s.overlap == Overlap::none && s.algo != Algo::coll) {
            // The unfused baselines by messages: no collective, and the GEMMs never interleave
            // with communication (gather: every message before the GEMMs, and every GEMM waits
            // for all of G; reduce: every GEMM before any message).
            EXPECT_TRUE(collectives[r].empty());
            bool seen_gemm = false, message_after_gemm = false;
            for (const Task& t : plan.tasks) {
              if (t.kind == TaskKind::gemm) {
                EXPECT_FALSE(message_after_gemm) << t.label << ": a GEMM after a message after a GEMM";
                seen_gemm = true;
              }
              if (t.kind == TaskKind::send || t.kind == TaskKind::recv) {
                EXPECT_FALSE(d.op == OpKind::ag_gemm && seen_gemm) << t.label << ": a message after a GEMM";
                message_after_gemm = seen_gemm;
              }
            }
            // ag_gemm: one GEMM over G along m, one per shard along k (the hand-written split).
            if (d.op == OpKind::ag_gemm) {
              EXPECT_EQ(std::count_if(plan.tasks.begin(), plan.tasks.end(), [](const Task& t) { return t.kind == TaskKind::gemm; }),
                        d.axis == Axis::k ? p : 1);
            }
          }
        }
        EXPECT_EQ(sends, recvs) << "every send needs one receive of the same size";
        for (int r = 1; r < p; ++r) EXPECT_EQ(collectives[r], collectives[0]) << "collectives must match on every rank";
      }
}

// ---- every element of C is the sum of exactly its products, each once: all ranks' plans run on
// SYMBOLS instead of numbers. An element of A_r holds its label A(i, kk) in op(A) coordinates of
// the whole layer, an element of B_r its label B(kk, j) (from the op table in op_desc.hpp, not
// from lower()); a GEMM writes into z the list of kk it multiplied, and fails unless every
// product pairs A(i, kk) with B(kk, j) of one kk, the i and j of that element; receives, copies,
// reductions and collectives move and add such lists as the executor moves and adds numbers.
// At the end every element (i, j) of every rank's C must hold each kk of 0..K-1 exactly once,
// and a caller's G must hold op(A). So a piece computed twice or never, a wrong row or K block
// of B, a partial added twice or sent to the wrong rank all fail, FLOP totals intact or not.

struct Cell {
  enum Kind : uint8_t { unset, a, b, c } kind = unset;
  int32_t row = 0, col = 0;  // a: (i, kk) of op(A); b: (kk, j) of op(B); c: (i, j) of C
  std::vector<int32_t> ks;   // c: the kk multiplied into it so far
};

class SymbolicRun {
 public:
  // own_gathered: the caller passes G; otherwise G is the plans' workspace region.
  SymbolicRun(const OpDesc& d, std::vector<Plan> plans, bool own_gathered)
      : d_(d), plans_(std::move(plans)), own_gathered_(own_gathered), mem_(plans_.size()) {
    const LocalShapes s = d.local_shapes();
    const int p = d.ranks;
    for (int r = 0; r < p; ++r) {
      auto& m = mem_[std::size_t(r)];
      m[int(Buf::a)].resize(std::size_t(s.a.elements()));
      m[int(Buf::b)].resize(std::size_t(s.b.elements()));
      m[int(Buf::c)].resize(std::size_t(s.c.elements()));
      m[int(Buf::gathered)].resize(std::size_t(s.gathered.elements()));
      m[int(Buf::work)].resize(std::size_t(plans_[std::size_t(r)].work_elements));
      m[int(Buf::wide)].resize(std::size_t(plans_[std::size_t(r)].wide_elements));
      for (int64_t e = 0; e < s.a.elements(); ++e) {  // stored -> op(A_r) -> op(A)
        const int64_t sr = e / s.a.cols, sc = e % s.a.cols, i = d.trans_a ? sc : sr, kk = d.trans_a ? sr : sc;
        const bool rows = d.op == OpKind::ag_gemm && d.axis == Axis::m;
        m[int(Buf::a)][std::size_t(e)] = {Cell::a, int32_t(rows ? r * d.m / p + i : i), int32_t(rows ? kk : r * d.k / p + kk), {}};
      }
      for (int64_t e = 0; e < s.b.elements(); ++e) {  // stored -> op(B_r) -> op(B)
        const int64_t sr = e / s.b.cols, sc = e % s.b.cols, kk = d.trans_b ? sc : sr, j = d.trans_b ? sr : sc;
        const bool ag = d.op == OpKind::ag_gemm;
        m[int(Buf::b)][std::size_t(e)] = {Cell::b, int32_t(ag ? kk : r * d.k / p + kk), int32_t(ag ? r * d.n / p + j : j), {}};
      }
    }
  }

  // Runs every task of every rank (compute tasks in plan order, as the executors do); returns
  // what went wrong first, or "".
  std::string run() {
    const int p = d_.ranks;
    std::vector<std::vector<char>> done(static_cast<std::size_t>(p));
    std::vector<std::vector<int>> collectives(static_cast<std::size_t>(p));
    std::vector<int> next_compute(std::size_t(p), 0);
    std::size_t left = 0;
    for (int r = 0; r < p; ++r) {
      const auto& tasks = plans_[std::size_t(r)].tasks;
      done[std::size_t(r)].assign(tasks.size(), 0);
      left += tasks.size();
      for (std::size_t t = 0; t < tasks.size(); ++t)
        if (tasks[t].kind == TaskKind::collective) collectives[std::size_t(r)].push_back(int(t));
    }
    auto deps_done = [&](int r, int t) {
      for (int dep : task(r, t).deps)
        if (!done[std::size_t(r)][std::size_t(dep)]) return false;
      return true;
    };
    std::size_t next_collective = 0;
    for (bool progress = true; progress && error_.empty();) {
      progress = false;
      for (int r = 0; r < p; ++r)
        for (int t = 0; t < int(done[std::size_t(r)].size()) && error_.empty(); ++t) {
          const Task& k = task(r, t);
          if (done[std::size_t(r)][std::size_t(t)] || k.kind == TaskKind::collective || !deps_done(r, t)) continue;
          if (k.engine == EngineId::compute) {  // plan order: every earlier compute task done
            bool first = true;
            for (int u = next_compute[std::size_t(r)]; u < t && first; ++u)
              first = done[std::size_t(r)][std::size_t(u)] || task(r, u).engine != EngineId::compute;
            if (!first) continue;
            next_compute[std::size_t(r)] = t;
          }
          if (k.kind == TaskKind::recv && !mailbox_.count({k.peer, r, k.tag})) continue;
          if (!k.hand_back || own_gathered_) run_task(r, k);  // as the executors skip them
          done[std::size_t(r)][std::size_t(t)] = 1;
          --left;
          progress = true;
        }
      // The next collective runs once every rank has posted it.
      if (next_collective < collectives[0].size()) {
        bool posted = true;
        for (int r = 0; r < p; ++r) posted = posted && deps_done(r, collectives[std::size_t(r)][next_collective]);
        if (posted) {
          run_collective(collectives, next_collective);
          for (int r = 0; r < p; ++r) done[std::size_t(r)][std::size_t(collectives[std::size_t(r)][next_collective])] = 1;
          left -= std::size_t(p);
          ++next_collective;
          progress = true;
        }
      }
    }
    if (error_.empty() && left > 0) error_ = std::to_string(left) + " tasks never ran (deadlock, or a receive nobody sends)";
    return error_;
  }

  // After run(): every element of C holds each of its K products once; a caller's G holds op(A).
  std::string check_outputs() {
    const LocalShapes s = d_.local_shapes();
    const int p = d_.ranks;
    // C_r is rows block r (gemm_rs axis m), column block r (ag_gemm, gemm_rs axis n) or all of C.
    const bool m_block = d_.op == OpKind::gemm_rs && d_.axis == Axis::m;
    const bool n_block = d_.op == OpKind::ag_gemm || (d_.op == OpKind::gemm_rs && d_.axis == Axis::n);
    std::vector<int32_t> want(std::size_t(d_.k));
    for (int64_t kk = 0; kk < d_.k; ++kk) want[std::size_t(kk)] = int32_t(kk);
    for (int r = 0; r < p && error_.empty(); ++r) {
      for (int64_t e = 0; e < s.c.elements() && error_.empty(); ++e) {
        const int64_t ci = e / s.c.cols, cj = e % s.c.cols;
        const int64_t i = m_block ? r * s.c.rows + ci : ci, j = n_block ? r * s.c.cols + cj : cj;
        const Cell& cell = mem_[std::size_t(r)][int(Buf::c)][std::size_t(e)];
        std::vector<int32_t> ks = cell.ks;
        std::sort(ks.begin(), ks.end());
        if (cell.kind != Cell::c || cell.row != i || cell.col != j || ks != want) {
          std::ostringstream o;
          o << "rank " << r << " C[" << ci << ", " << cj << "] (C(" << i << ", " << j << ") of the layer) holds "
            << describe(cell) << ", not each of k = 0.." << d_.k - 1 << " once";
          error_ = o.str();
        }
      }
      if (!own_gathered_ || s.gathered.elements() == 0) continue;
      for (int64_t e = 0; e < s.gathered.elements() && error_.empty(); ++e) {
        const int64_t sr = e / s.gathered.cols, sc = e % s.gathered.cols;
        const Cell& cell = mem_[std::size_t(r)][int(Buf::gathered)][std::size_t(e)];
        if (cell.kind != Cell::a || cell.row != (d_.trans_a ? sc : sr) || cell.col != (d_.trans_a ? sr : sc))
          error_ = "rank " + std::to_string(r) + " G[" + std::to_string(e) + "] holds " + describe(cell);
      }
    }
    return error_;
  }

 private:
  const Task& task(int r, int t) const { return plans_[std::size_t(r)].tasks[std::size_t(t)]; }

  Cell& at(int r, const View& v, int64_t row, int64_t col) {
    Buf buf = v.buf;
    int64_t offset = v.offset;
    if (buf == Buf::gathered && !own_gathered_) {
      // A plan without a G region writes G only in hand-backs, which run only with a caller's G.
      if (plans_[std::size_t(r)].gathered_offset < 0) throw std::logic_error("G touched without a home in the workspace");
      buf = Buf::work;
      offset += plans_[std::size_t(r)].gathered_offset;
    }
    return mem_[std::size_t(r)][int(buf)].at(std::size_t(offset + row * v.ld + col));
  }

  static std::string describe(const Cell& c) {
    std::ostringstream o;
    if (c.kind == Cell::unset) return "nothing";
    o << (c.kind == Cell::a ? "A(" : c.kind == Cell::b ? "B(" : "C(") << c.row << ", " << c.col << ")";
    if (c.kind == Cell::c) {
      std::vector<int32_t> ks = c.ks;
      std::sort(ks.begin(), ks.end());
      o << " with k =";
      for (int32_t k : ks) o << " " << k;
    }
    return o.str();
  }

  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  // z += x, both partial sums of the same element of C.
  void add(Cell& z, const Cell& x, const std::string& label) {
    if (z.kind != Cell::c || x.kind != Cell::c || z.row != x.row || z.col != x.col)
      return fail("'" + label + "' adds " + describe(x) + " to " + describe(z));
    z.ks.insert(z.ks.end(), x.ks.begin(), x.ks.end());
  }

  // The cells of a view in row-major order, and back (a message's two ends may differ in shape
  // but not in element count).
  std::vector<Cell> read(int r, const View& v) {
    std::vector<Cell> out;
    for (int64_t i = 0; i < v.rows; ++i)
      for (int64_t j = 0; j < v.cols; ++j) out.push_back(at(r, v, i, j));
    return out;
  }
  void write(int r, const View& v, const std::vector<Cell>& cells, const std::string& label) {
    if (int64_t(cells.size()) != v.elements()) return fail("'" + label + "': sizes differ");
    for (int64_t i = 0; i < v.rows; ++i)
      for (int64_t j = 0; j < v.cols; ++j) at(r, v, i, j) = cells[std::size_t(i * v.cols + j)];
  }

  void gemm(int r, const Task& t) {
    const int64_t kn = t.trans_x ? t.x.rows : t.x.cols;
    for (int64_t i = 0; i < t.z.rows; ++i)
      for (int64_t j = 0; j < t.z.cols; ++j) {
        Cell& z = at(r, t.z, i, j);
        if (!t.accumulate) z = Cell{};
        else if (z.kind != Cell::c) return fail("'" + t.label + "' accumulates into " + describe(z));
        for (int64_t k = 0; k < kn; ++k) {
          const Cell& x = t.trans_x ? at(r, t.x, k, i) : at(r, t.x, i, k);
          const Cell& y = t.trans_y ? at(r, t.y, j, k) : at(r, t.y, k, j);
          if (x.kind != Cell::a || y.kind != Cell::b || x.col != y.row)
            return fail("'" + t.label + "' multiplies " + describe(x) + " by " + describe(y));
          if (z.kind == Cell::unset) z = Cell{Cell::c, x.row, y.col, {}};
          if (z.row != x.row || z.col != y.col)
            return fail("'" + t.label + "' adds A(" + std::to_string(x.row) + ", k) B(k, " + std::to_string(y.col) + ") into " + describe(z));
          z.ks.push_back(x.col);
        }
      }
  }

  void run_task(int r, const Task& t) {
    switch (t.kind) {
      case TaskKind::gemm: return gemm(r, t);
      case TaskKind::send: mailbox_[{r, t.peer, t.tag}] = read(r, t.x); return;
      case TaskKind::recv: {
        const auto key = std::make_tuple(t.peer, r, t.tag);
        write(r, t.z, mailbox_[key], t.label);
        mailbox_.erase(key);
        return;
      }
      case TaskKind::reduce:
        for (int64_t i = 0; i < t.z.rows; ++i)
          for (int64_t j = 0; j < t.z.cols; ++j) add(at(r, t.z, i, j), at(r, t.x, i, j), t.label);
        return;
      case TaskKind::pack:
      case TaskKind::unpack: write(r, t.z, read(r, t.x), t.label); return;
      case TaskKind::collective: return;  // run_collective
    }
  }

  void run_collective(const std::vector<std::vector<int>>& collectives, std::size_t c) {
    const int p = d_.ranks;
    auto of = [&](int r) -> const Task& { return task(r, collectives[std::size_t(r)][c]); };
    auto shifted = [](View v, int64_t by) {
      v.offset += by;
      return v;
    };
    // Everything is read before anything is written, as the collective's inputs are.
    std::vector<std::vector<Cell>> result(static_cast<std::size_t>(p)), pieces(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      const Task& t = of(r);
      if (t.collective != of(0).collective) return fail("collective " + std::to_string(c) + " differs between ranks");
      switch (t.collective) {
        case Collective::allgather: pieces[std::size_t(r)] = read(r, t.x); break;
        case Collective::reduce_scatter:  // rank r gets the sum of every rank's block r
        case Collective::allreduce:
          for (int j = 0; j < p; ++j) {
            const View from = t.collective == Collective::allreduce ? of(j).x : shifted(of(j).x, r * of(j).stride);
            const std::vector<Cell> part = read(j, from);
            if (j == 0) result[std::size_t(r)] = part;
            else if (part.size() != result[std::size_t(r)].size()) return fail("'" + t.label + "': sizes differ");
            else
              for (std::size_t e = 0; e < part.size(); ++e) add(result[std::size_t(r)][e], part[e], t.label);
          }
          break;
      }
    }
    for (int r = 0; r < p; ++r) {
      const Task& t = of(r);
      if (t.collective == Collective::allgather)
        for (int j = 0; j < p; ++j) write(r, shifted(t.z, j * t.stride), pieces[std::size_t(j)], t.label);
      else
        write(r, t.z, result[std::size_t(r)], t.label);
    }
  }

  OpDesc d_;
  std::vector<Plan> plans_;
  bool own_gathered_;
  std::vector<std::array<std::vector<Cell>, kBufCount>> mem_;  // per rank, per Buf
  std::map<std::tuple<int, int, int>, std::vector<Cell>> mailbox_;  // (from, to, tag) -> the sent cells
  std::string error_;  // the first thing that went wrong
};

// A sanitizer build runs a sample (support/sweep_sample.hpp): all cases took 416 s under ASan on
// 2 cores, past the unit stage's limit.
TEST(Lower, EveryOutputElementGetsEveryProductOnce) {
  int cases = 0, seen = 0;
  for (auto [p, per_host] : kLayouts)
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : schedules_of(d, {1, 2, 3, 8}, per_host)) {
        if (p == 6 && per_host == 3 && s.topo == Topo::flat) continue;  // seen at (6, 2)
        if (!test::in_sweep_sample(seen)) continue;
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        // G in the caller's buffer and in the workspace, alternately.
        SymbolicRun run(d, std::move(plans), cases++ % 2 == 0);
        std::string error = run.run();
        if (error.empty()) error = run.check_outputs();
        if (!error.empty()) ADD_FAILURE() << d.to_string() << " | " << s.to_string() << ": " << error;
      }
  EXPECT_GT(cases, 3000 / test::kSweepStride);
}

// MPI guarantees tags up to 32767 only, and the executor refuses a plan past the library's bound:
// a two-level plan's tags stay within 1.5 times its flat twin's (steps inside a host; one message
// per host offset and piece between hosts), so it runs wherever the flat plan runs at P >= 2H.
TEST(Lower, TwoLevelTagsStayNearTheFlatRings) {
  int seen = 0;
  for (auto [p, per_host] : {std::pair{4, 2}, {6, 3}, {8, 4}, {8, 2}})
    for (const OpDesc& d : descs(p))
      for (const Schedule& two : enumerate_schedules(d, {1, 3, 8}, per_host)) {
        if (two.topo != Topo::two_level || !test::in_sweep_sample(seen)) continue;
        Schedule flat = two;
        flat.topo = Topo::flat;
        flat.host_ranks = 0;
        int flat_max = 0, two_max = 0;
        for (int r = 0; r < p; ++r) {
          for (const Task& t : lower(d, flat, r).tasks) flat_max = std::max(flat_max, t.tag);
          for (const Task& t : lower(d, two, r).tasks) two_max = std::max(two_max, t.tag);
        }
        EXPECT_LE(two_max, flat_max * 3 / 2 + 1) << d.to_string() << " | " << two.to_string();
      }
}

TEST(Lower, GatheredOperandIsTheLastWorkspaceRegion) {
  const OpDesc d{OpKind::ag_gemm, 8, 4, 6, DType::f32, true, false, Axis::m, 2};
  for (const Schedule& s : enumerate_schedules(d)) {
    const Plan plan = lower(d, s, 1);
    EXPECT_EQ(plan.gathered_offset + d.m * d.k, plan.work_elements) << s.to_string();
  }
}

// Along k (A not transposed) a shard is a column block of G, strided in it: the unfused
// baselines receive whole shards contiguously into the workspace, as the hand-written allgather
// does, multiply from there, and copy into G only what a caller's gathered buffer needs.
TEST(Lower, UnfusedGatherAlongKReceivesWholeShardsContiguously) {
  for (bool trans_a : {false, true})
    for (int p : {2, 3})
      for (const Schedule& s : enumerate_schedules(OpDesc{OpKind::ag_gemm, 6, 6, 12, DType::f32, trans_a, false, Axis::k, p})) {
        if (s.overlap != Overlap::none) continue;
        const OpDesc d{OpKind::ag_gemm, 6, 6, 12, DType::f32, trans_a, false, Axis::k, p};
        const Plan plan = lower(d, s, 1);
        int hand_backs = 0;
        for (const Task& t : plan.tasks) {
          if (t.kind == TaskKind::recv || t.kind == TaskKind::send || t.kind == TaskKind::collective) {
            EXPECT_TRUE(t.x.contiguous() && t.z.contiguous()) << t.label << " | " << s.to_string();
            if (!trans_a) { EXPECT_NE(t.z.buf, Buf::gathered) << t.label << ": G is strided along k | " << s.to_string(); }
          }
          if (t.kind == TaskKind::gemm) { EXPECT_TRUE(t.x.contiguous()) << t.label << " | " << s.to_string(); }
          if (t.hand_back) {
            ++hand_backs;
            EXPECT_EQ(t.z.buf, Buf::gathered) << t.label;
          } else if (!trans_a) {
            EXPECT_NE(t.z.buf, Buf::gathered) << t.label << ": only hand-backs write G | " << s.to_string();
          }
        }
        // Transposed, a shard is a row block of stored G, contiguous: received into G as before.
        EXPECT_EQ(hand_backs, trans_a ? 0 : p) << s.to_string();
        EXPECT_EQ(plan.gathered_offset < 0, !trans_a) << s.to_string();
        if (!trans_a) { EXPECT_EQ(plan.workspace_bytes(false), plan.workspace_bytes(true)) << "S is needed with a caller's G too"; }
        EXPECT_EQ(find_race(plan), "") << s.to_string();
        // Every product once, and a caller's G whole, with a caller's G and without one.
        std::vector<Plan> plans;
        for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
        for (bool own_gathered : {false, true}) {
          SymbolicRun run(d, plans, own_gathered);
          EXPECT_EQ(run.run(), "") << s.to_string() << " own G " << own_gathered;
          EXPECT_EQ(run.check_outputs(), "") << s.to_string() << " own G " << own_gathered;
        }
      }
}

TEST(Lower, SerialIsTheBaseline) {
  const OpDesc d{OpKind::gemm_ar, 128, 2048, 2048, DType::f32, false, false, Axis::none, 2};
  const Plan plan = lower(d, serial_schedule(), 0);
  ASSERT_EQ(plan.tasks.size(), 2u);
  EXPECT_EQ(plan.tasks[0].kind, TaskKind::gemm);
  EXPECT_EQ(plan.tasks[1].kind, TaskKind::collective);
  EXPECT_EQ(plan.tasks[1].collective, Collective::allreduce);
  EXPECT_EQ(plan.work_elements, 0);
  EXPECT_NE(plan.dump().find("2 tasks: 1 gemm, 1 communication"), std::string::npos) << plan.dump();
}

TEST(Lower, OverlappedAllReducesSumOutOfPlaceTheBaselineInPlace) {
  // Open MPI's non-blocking all-reduce takes a binomial tree for any call in place (2.5x slower
  // on the 2x2 netlab hosts), so an overlapped piece is computed into the workspace and summed
  // from there into C; the baseline's one blocking call sums C in place and needs no workspace.
  const OpDesc d{OpKind::gemm_ar, 96, 64, 128, DType::f32, false, false, Axis::none, 4};
  for (const char* text : {"overlap=chunk,chunks=3,split=1d,algo=coll", "overlap=chunk,chunks=4,split=2d,data=uniform,algo=coll",
                           "overlap=chunk,chunks=2,split=1d,fusion=fused,engine=inline,algo=coll"}) {
    const Plan plan = lower(d, *Schedule::parse(text), 1);
    int collectives = 0;
    for (const Task& t : plan.tasks) {
      if (t.kind != TaskKind::collective) continue;
      ++collectives;
      EXPECT_EQ(t.x.buf, Buf::work) << text << ": " << t.label;
      EXPECT_FALSE(t.x == t.z) << text << ": " << t.label;
      EXPECT_TRUE(t.x.contiguous() && t.z.contiguous()) << text << ": " << t.label;
    }
    EXPECT_GT(collectives, 1) << text;
    EXPECT_GE(plan.work_elements, d.m * d.n) << text;
  }
  const Plan serial = lower(d, serial_schedule(), 1);
  EXPECT_TRUE(serial.tasks[1].x == serial.tasks[1].z);
  EXPECT_EQ(serial.tasks[1].z.buf, Buf::c);
}

TEST(Lower, PackedColumnBlocksAreOneGemmAndAPackPerRank) {
  // gemm_rs along n, data=uniform: one GEMM over every block's rows, each block packed into its
  // slot, then the library collective; hetero makes one GEMM per block into its slot.
  for (int p : {1, 2, 3})
    for (const char* text : {"serial-packed", "overlap=chunk,chunks=2,data=uniform,algo=coll"}) {
      const OpDesc d{OpKind::gemm_rs, 7, 6 * p, 4 * p, DType::f32, false, true, Axis::n, p};
      const Schedule s = *Schedule::parse(text);
      ASSERT_TRUE(s.validate_for(d).ok()) << s.validate_for(d).message();
      std::vector<Plan> plans;
      for (int r = 0; r < p; ++r) plans.push_back(lower(d, s, r));
      const int pieces = s.overlap == Overlap::none ? 1 : 2;
      int gemms = 0, packs = 0;
      for (const Task& t : plans[0].tasks) {
        if (t.kind == TaskKind::gemm) {
          ++gemms;
          EXPECT_EQ(t.z.cols, d.n) << t.label;
        }
        packs += t.kind == TaskKind::pack;
      }
      EXPECT_EQ(gemms, pieces) << text;
      EXPECT_EQ(packs, pieces * p) << text;
      EXPECT_EQ(find_race(plans[0]), "") << text;
      SymbolicRun run(d, plans, false);
      EXPECT_EQ(run.run(), "") << text;
      EXPECT_EQ(run.check_outputs(), "") << text;
      // The same schedule with data=hetero: a GEMM per block, nothing packed.
      Schedule hetero = s;
      hetero.data = DataMode::hetero;
      int hetero_gemms = 0;
      for (const Task& t : lower(d, hetero, 0).tasks) {
        hetero_gemms += t.kind == TaskKind::gemm;
        EXPECT_NE(t.kind, TaskKind::pack) << t.label;
      }
      EXPECT_EQ(hetero_gemms, pieces * p) << text;
    }
  // Only gemm_rs along n by the library collective packs blocks in its baseline.
  for (const OpDesc& d : {OpDesc{OpKind::gemm_rs, 8, 8, 8, DType::f32, false, false, Axis::m, 2},
                          OpDesc{OpKind::gemm_ar, 8, 8, 8, DType::f32, false, false, Axis::none, 2},
                          OpDesc{OpKind::ag_gemm, 8, 8, 8, DType::f32, false, false, Axis::m, 2}})
    EXPECT_NE(Schedule::parse("serial-packed")->validate_for(d).message().find("preset 'serial-packed'"),
              std::string::npos)
        << d.to_string();
  const OpDesc n{OpKind::gemm_rs, 8, 8, 8, DType::f32, false, false, Axis::n, 2};
  EXPECT_FALSE(Schedule::parse("serial-packed,algo=ring")->validate_for(n).ok());
  EXPECT_EQ(schedule_name(*Schedule::parse("overlap=none,data=uniform")), "serial-packed");
}

TEST(Lower, ChunksLargerThanAShardAreClamped) {
  const OpDesc d{OpKind::ag_gemm, 4, 4, 4, DType::f32, false, false, Axis::m, 4};  // one row per shard
  const Plan plan = lower(d, *Schedule::parse("hetero-unfused-1d,chunks=64"), 1);
  int gemms = 0;
  for (const Task& t : plan.tasks) gemms += t.kind == TaskKind::gemm;
  EXPECT_EQ(gemms, 4) << "one piece per shard";
}

TEST(Lower, RejectsInvalidInput) {
  const OpDesc d{OpKind::gemm_ar, 8, 8, 8, DType::f32, false, false, Axis::none, 2};
  EXPECT_THROW(lower(d, serial_schedule(), 2), Error);
  EXPECT_THROW(lower(d, *Schedule::parse("overlap=shard,algo=coll"), 0), Error);
  OpDesc bad = d;
  bad.k = 7;
  EXPECT_THROW(lower(bad, serial_schedule(), 0), Error);
}

}  // namespace
}  // namespace cofuse
