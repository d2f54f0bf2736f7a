// The structure of every plan, checked without MPI: a topological order, the op's full GEMM
// work done exactly once, every send matched by one receive of the same size on its peer, the
// same collectives in the same order on every rank, views inside their buffers.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "cofuse/plan.hpp"

namespace cofuse {
namespace {

std::vector<OpDesc> descs(int p) {
  std::vector<OpDesc> out;
  const std::pair<OpKind, Axis> ops[] = {{OpKind::ag_gemm, Axis::m}, {OpKind::ag_gemm, Axis::k}, {OpKind::gemm_rs, Axis::m},
                                         {OpKind::gemm_rs, Axis::n}, {OpKind::gemm_ar, Axis::none}};
  for (auto [kind, axis] : ops)
    for (bool t : {false, true}) out.push_back(OpDesc{kind, 5 * p, 3 * p, 7 * p, DType::f32, t, !t, axis, p});
  out.push_back(OpDesc{OpKind::gemm_ar, 3, 4, 2 * p, DType::f64, false, false, Axis::none, p});  // M < P for p = 4
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
  }
  return 0;
}

void expect_inside(const OpDesc& d, const Plan& plan, const View& v, const std::string& what) {
  if (v.empty()) return;
  EXPECT_GE(v.offset, 0) << what;
  EXPECT_GE(v.ld, v.cols) << what;
  EXPECT_LE(v.offset + (v.rows - 1) * v.ld + v.cols, buffer_elements(d, plan, v.buf)) << what << " past its buffer";
}

TEST(Lower, EveryPlanIsSound) {
  for (int p : {1, 2, 3, 4})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {1, 2, 3, 8})) {
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
            if (t.kind == TaskKind::send) EXPECT_TRUE(sends.emplace(std::make_tuple(r, t.peer, t.tag), t.x.elements()).second) << "duplicate tag";
            if (t.kind == TaskKind::recv) EXPECT_TRUE(recvs.emplace(std::make_tuple(t.peer, r, t.tag), t.z.elements()).second) << "duplicate tag";
            if (t.kind == TaskKind::collective)
              collectives[r].emplace_back(static_cast<int>(t.collective), t.x.elements(), t.z.elements());
            if (t.kind == TaskKind::pack || t.kind == TaskKind::unpack || t.kind == TaskKind::reduce) {
              EXPECT_EQ(t.x.rows, t.z.rows) << t.label;
              EXPECT_EQ(t.x.cols, t.z.cols) << t.label;
            }
          }
          // Each rank does exactly its share of the layer's multiply-adds, whatever the cut.
          EXPECT_DOUBLE_EQ(gemm_flops, d.flops() / p) << "rank " << r;
          if (s.overlap == Overlap::none) EXPECT_EQ(collectives[r].size(), 1u);
        }
        EXPECT_EQ(sends, recvs) << "every send needs one receive of the same size";
        for (int r = 1; r < p; ++r) EXPECT_EQ(collectives[r], collectives[0]) << "collectives must match on every rank";
      }
}

// ---- memory hazards: two tasks that touch the same element, one of them writing, must be
// ordered: by a chain of dependencies, or by both running in plan order on the compute engine
// (the communication engine starts tasks in any order once their dependencies are met).

struct Access {
  View view;
  bool writes;
};

std::vector<Access> accesses(const Task& t, int ranks) {
  std::vector<Access> out;
  auto slots = [&](View v, int64_t stride, bool writes) {
    for (int r = 0; r < ranks; ++r) {
      View slot = v;
      slot.offset += r * stride;
      out.push_back({slot, writes});
    }
  };
  switch (t.kind) {
    case TaskKind::gemm:
      out = {{t.x, false}, {t.y, false}, {t.z, true}};
      break;
    case TaskKind::send: out = {{t.x, false}}; break;
    case TaskKind::recv: out = {{t.z, true}}; break;
    case TaskKind::reduce: out = {{t.x, false}, {t.z, true}}; break;
    case TaskKind::pack:
    case TaskKind::unpack: out = {{t.x, false}, {t.z, true}}; break;
    case TaskKind::collective:
      if (t.collective == Collective::allgather) {
        out = {{t.x, false}};
        slots(t.z, t.stride, true);
      } else if (t.collective == Collective::reduce_scatter) {
        slots(t.x, t.stride, false);
        out.push_back({t.z, true});
      } else {
        out = {{t.z, true}};
      }
      break;
  }
  return out;
}

// Where the caller passes no gathered buffer, G is a region of the workspace: check it there.
View resolve(View v, const Plan& plan) {
  if (v.buf == Buf::gathered && plan.gathered_offset >= 0) {
    v.buf = Buf::work;
    v.offset += plan.gathered_offset;
  }
  return v;
}

bool views_overlap(const View& a, const View& b) {
  if (a.buf != b.buf || a.empty() || b.empty()) return false;
  const int64_t a_end = a.offset + (a.rows - 1) * a.ld + a.cols, b_end = b.offset + (b.rows - 1) * b.ld + b.cols;
  if (a_end <= b.offset || b_end <= a.offset) return false;
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t lo = a.offset + i * a.ld, hi = lo + a.cols;  // row i of a: [lo, hi)
    // rows j of b that can reach [lo, hi)
    int64_t j0 = (lo - b.offset - b.cols + 1);
    j0 = j0 <= 0 ? 0 : (j0 + b.ld - 1) / b.ld;
    for (int64_t j = j0; j < b.rows; ++j) {
      const int64_t blo = b.offset + j * b.ld;
      if (blo >= hi) break;
      if (blo + b.cols > lo) return true;
    }
  }
  return false;
}

TEST(Lower, NoUnorderedMemoryHazards) {
  int plans = 0;
  for (int p : {1, 2, 3, 4})
    for (const OpDesc& d : descs(p))
      for (const Schedule& s : enumerate_schedules(d, {2, 3})) {
        for (int r = 0; r < p; ++r) {
          const Plan plan = lower(d, s, r);
          ++plans;
          const std::size_t n = plan.tasks.size();
          // before[j][i]: task i is known to finish before task j starts.
          std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));
          int last_compute = -1;
          for (std::size_t j = 0; j < n; ++j) {
            const Task& t = plan.tasks[j];
            std::vector<int> preds = t.deps;
            if (t.engine == EngineId::compute && last_compute >= 0) preds.push_back(last_compute);
            for (int i : preds) {
              before[j][i] = true;
              for (std::size_t k = 0; k < n; ++k)
                if (before[i][k]) before[j][k] = true;
            }
            if (t.engine == EngineId::compute) last_compute = static_cast<int>(j);
          }
          std::vector<std::vector<Access>> acc(n);
          for (std::size_t i = 0; i < n; ++i) {
            acc[i] = accesses(plan.tasks[i], p);
            for (Access& a : acc[i]) a.view = resolve(a.view, plan);
          }
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t i = 0; i < j; ++i) {
              if (before[j][i]) continue;
              for (const Access& x : acc[i])
                for (const Access& y : acc[j])
                  if ((x.writes || y.writes) && views_overlap(x.view, y.view))
                    ADD_FAILURE() << d.to_string() << " | " << s.to_string() << " rank " << r << ": '"
                                  << plan.tasks[i].label << "' and '" << plan.tasks[j].label
                                  << "' touch the same memory without an order";
            }
        }
      }
  EXPECT_GT(plans, 1000);
}

TEST(Lower, GatheredOperandIsTheLastWorkspaceRegion) {
  const OpDesc d{OpKind::ag_gemm, 8, 4, 6, DType::f32, true, false, Axis::m, 2};
  for (const Schedule& s : enumerate_schedules(d)) {
    const Plan plan = lower(d, s, 1);
    EXPECT_EQ(plan.gathered_offset + d.m * d.k, plan.work_elements) << s.to_string();
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
