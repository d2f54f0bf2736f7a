// Lowering of ag_gemm (gather axis m or k): the shards of A move, C is computed from them.
//
//   axis m: shard j is rows block j of op(A);   C[rows of shard j] = op(A_j) · op(B_r)
//   axis k: shard j is column block j of op(A); C += op(A_j) · op(B_r)[rows block j]
//
// Every rank first computes with its own shard (no communication needed), then with each
// arriving piece. The gathered operand G (stored like A) receives every shard: the caller's
// buffer or the plan's workspace; the unfused baselines along k stage whole shards instead and
// hand them back to a caller's G only (`staged`, below).
#include <set>

#include "core/plan/builder.hpp"

namespace cofuse::detail {

namespace {

// "send shard 2 piece 1": the labels a plan dump and a trace show.
std::string name(const char* what, int index, int piece) { return task_label(what, "shard", index, piece); }

}  // namespace

Plan lower_gather(PlanBuilder& pb) {
  const OpDesc& d = pb.desc();
  const Schedule& s = pb.schedule();
  const int P = d.ranks, r = pb.rank();
  const bool axis_m = d.axis == Axis::m;
  const int64_t a_rows = axis_m ? d.m / P : d.m, a_cols = axis_m ? d.k : d.k / P;  // op(A_j)
  const int64_t n_loc = d.n / P;
  const int64_t ldA = d.trans_a ? a_rows : a_cols;
  const int64_t ldG = d.trans_a ? d.m : d.k;
  const int64_t ldB = d.trans_b ? d.k : n_loc;
  const int64_t ldC = n_loc;
  // G goes at the end of the workspace, so a caller who passes its own gathered buffer needs
  // only the part before it (Plan::gathered_offset); a staged plan gives it no region at all.
  const std::string multiply_all = axis_m ? "one GEMM" : "one GEMM per shard";  // the unfused baselines'
  const bool unfused = s.overlap == Overlap::none;
  bool staged = false;  // see `staged` below
  auto finish = [&](const std::string& order) {
    if (!staged) pb.plan().gathered_offset = pb.alloc(d.m * d.k);
    return pb.finish(s.overlap == Overlap::none && s.algo != Algo::coll
                         ? std::string(staged ? "unfused: every shard staged first" : "unfused: G complete first") +
                               ", then " + multiply_all + "; " + order
                         : order);
  };

  // Shard j in op(G) coordinates, and the distance between consecutive shards in stored G.
  auto shard_row0 = [&](int j) { return axis_m ? j * a_rows : int64_t(0); };
  auto shard_col0 = [&](int j) { return axis_m ? int64_t(0) : j * a_cols; };
  const int64_t shard_stride = axis_m ? (d.trans_a ? a_rows : a_rows * ldG) : (d.trans_a ? a_cols * ldG : a_cols);
  auto g_view = [&](int j, const Piece& q) {
    return op_view(Buf::gathered, 0, ldG, d.trans_a, {shard_row0(j) + q.rows.begin, q.rows.size},
                   {shard_col0(j) + q.cols.begin, q.cols.size});
  };
  auto a_view = [&](const Piece& q) { return op_view(Buf::a, 0, ldA, d.trans_a, q.rows, q.cols); };
  auto staging = [&](const View& like) {
    return dense_view(Buf::work, pb.alloc(like.elements()), like.rows, like.cols, like.cols);
  };

  // The first GEMM into a row range of C overwrites it; later ones (more shards along k, more
  // tiles along k in 2d) accumulate. Row ranges are keyed by their first row of C.
  std::set<int64_t> written;
  auto gemm = [&](int j, int qi, const Piece& q, View x, std::vector<int> deps, int step) {
    const int64_t c_row0 = axis_m ? shard_row0(j) + q.rows.begin : q.rows.begin;
    const Range k_range = axis_m ? q.cols : Range{shard_col0(j) + q.cols.begin, q.cols.size};
    const View z = dense_view(Buf::c, c_row0 * ldC, q.rows.size, n_loc, ldC);
    const View y = op_view(Buf::b, 0, ldB, d.trans_b, k_range, {0, n_loc});
    const bool accumulate = !written.insert(c_row0).second;
    return pb.gemm(name("gemm", j, qi), z, x, d.trans_a, y, d.trans_b, accumulate, std::move(deps), step, qi);
  };

  // Staged (the unfused baselines along k, A not transposed): shards are column blocks of G, so
  // a shard is strided in G. These baselines then receive whole shards into S, a workspace region
  // of shards one after another (what the hand-written allgather receives), multiply from S (the
  // own shard from A), and copy them into G only for a caller who passes a gathered buffer (the
  // hand_back tasks, after every GEMM). Receiving into G's strided layout cost Open MPI 1.15-1.8x
  // the contiguous allgather (2 ranks, shared memory, M = 4-256, K = 512, Intel Xeon model 167),
  // and the serial call 4-11% over the hand-written one.
  const Piece whole{{0, a_rows}, {0, a_cols}};
  staged = unfused && !axis_m && !g_view(0, whole).contiguous();
  const int64_t shard_elements = a_rows * a_cols;
  const int64_t s_offset = staged ? pb.alloc(d.m * d.k) : 0;
  auto s_view = [&](int j) { return op_view(Buf::work, s_offset + j * shard_elements, ldA, d.trans_a, whole.rows, whole.cols); };
  auto staged_shard = [&](int j) { return j == r ? a_view(whole) : s_view(j); };  // where shard j is multiplied from

  // The unfused baselines (overlap=none) gather whole shards first, then multiply all of G: along
  // m one GEMM; along k one GEMM per shard (C += G's column block j · B's row block j), as the
  // hand-written gather-then-multiply does. OpenBLAS 0.3.21 ran the single GEMM over all of K
  // 1.10-1.18x slower at M <= 4 (N = K = 512 and 2048) and 2.1x at M = 8 (K = 512), and never
  // faster where M >= 16 (bench_baseline_vs_plain, 2 ranks, Intel Xeon model 167).
  auto gemm_all = [&](std::vector<int> gathered) {
    if (axis_m) {
      const View g = op_view(Buf::gathered, 0, ldG, d.trans_a, {0, d.m}, {0, d.k});
      pb.gemm("gemm all", dense_view(Buf::c, 0, d.m, n_loc, ldC), g, d.trans_a,
              op_view(Buf::b, 0, ldB, d.trans_b, {0, d.k}, {0, n_loc}), d.trans_b, false, std::move(gathered), 0, 0);
      return;
    }
    if (!staged) {
      for (int j = 0; j < P; ++j) gemm(j, 0, whole, g_view(j, whole), gathered, 0);
      return;
    }
    std::vector<int> gemms;
    for (int j = 0; j < P; ++j) gemms.push_back(gemm(j, 0, whole, staged_shard(j), gathered, 0));
    for (int j = 0; j < P; ++j) {
      const int copy = pb.copy(TaskKind::unpack, name("hand back", j, 0), staged_shard(j), g_view(j, whole), gemms, 0, 0);
      pb.plan().tasks[std::size_t(copy)].hand_back = true;
    }
  };
  if (unfused && s.algo == Algo::coll) {
    // One allgather of whole shards straight into G, or into S where they are strided in G.
    gemm_all({pb.collective("allgather", Collective::allgather, a_view(whole), staged ? s_view(0) : g_view(0, whole),
                            staged ? shard_elements : shard_stride, {}, 0)});
    return finish("one collective, then " + multiply_all);
  }

  const std::vector<Piece> pieces = cut(a_rows, a_cols, s);
  const int np = static_cast<int>(pieces.size());
  const bool uniform = s.data == DataMode::uniform;

  // Own shard first: its GEMMs need no communication at all. The unfused baselines multiply
  // only once G is complete: `gathered` collects the tasks that complete it.
  std::vector<int> gathered;
  auto use = [&](int j, int qi, int in_g, int step) {
    if (unfused) gathered.push_back(in_g);
    else gemm(j, qi, pieces[qi], g_view(j, pieces[qi]), {in_g}, step);
  };
  if (!unfused)
    for (int qi = 0; qi < np; ++qi) gemm(r, qi, pieces[qi], a_view(pieces[qi]), {}, 0);

  // Where each own piece is sent from: A itself, or (uniform, strided) a packed copy.
  std::vector<View> own_src(np);
  std::vector<std::vector<int>> own_dep(np);
  for (int qi = 0; qi < np; ++qi) {
    own_src[qi] = a_view(pieces[qi]);
    if (uniform && !own_src[qi].contiguous()) {
      const View packed = staging(own_src[qi]);
      own_dep[qi] = {pb.copy(TaskKind::pack, name("pack", r, qi), own_src[qi], packed, {}, 0, qi)};
      own_src[qi] = packed;
    }
  }

  // Receives piece qi of shard j into G: directly (hetero, or contiguous), or into staging and
  // then unpacked (uniform). Returns where the piece can be forwarded from, the task that makes
  // it available there, and the task after which it sits in G.
  struct Arrival {
    View forward_from;
    int forward_ready;
    int in_g;
  };
  auto receive = [&](int j, int qi, int peer, int tag, int step) {
    if (staged) {  // a whole shard (overlap=none), contiguous in S
      const int rv = pb.recv(name("recv", j, qi), s_view(j), peer, tag, {}, step, qi);
      return Arrival{s_view(j), rv, rv};
    }
    const View g = g_view(j, pieces[qi]);
    if (uniform && !g.contiguous()) {
      const View slot = staging(g);
      const int rv = pb.recv(name("recv", j, qi), slot, peer, tag, {}, step, qi);
      const int up = pb.copy(TaskKind::unpack, name("unpack", j, qi), slot, g, {rv}, step, qi);
      return Arrival{slot, rv, up};
    }
    const int rv = pb.recv(name("recv", j, qi), g, peer, tag, {}, step, qi);
    return Arrival{g, rv, rv};
  };
  auto place_own_shard = [&] {
    if (!staged)  // staged: multiplied from A, and handed back with the others
      gathered.push_back(pb.copy(TaskKind::unpack, "place own shard in G", a_view(whole), g_view(r, whole), {}, 0, 0));
    if (unfused) gemm_all(gathered);
  };
  auto tag = [&](int step, int qi) { return step * np + qi; };

  if (s.algo == Algo::coll) {
    for (int qi = 0; qi < np; ++qi) {
      const View g0 = g_view(0, pieces[qi]);
      std::vector<int> ready(P);
      if (uniform && !g0.contiguous()) {
        const int64_t e = g0.elements();
        const View slots = dense_view(Buf::work, pb.alloc(e * P), g0.rows, g0.cols, g0.cols);
        const int coll = pb.collective("allgather piece " + std::to_string(qi), Collective::allgather, own_src[qi], slots,
                                       e, own_dep[qi], qi);
        for (int j = 0; j < P; ++j) {
          View slot = slots;
          slot.offset += j * e;
          ready[j] = pb.copy(TaskKind::unpack, name("unpack", j, qi), slot, g_view(j, pieces[qi]), {coll}, 0, qi);
        }
      } else {
        const int coll = pb.collective("allgather piece " + std::to_string(qi), Collective::allgather, own_src[qi], g0,
                                       shard_stride, own_dep[qi], qi);
        ready.assign(P, coll);
      }
      for (int j = 0; j < P; ++j)
        if (j != r) gemm(j, qi, pieces[qi], g_view(j, pieces[qi]), {ready[j]}, 0);
    }
    return finish("one collective per piece, posted in the same piece order on every rank");
  }

  if (s.algo == Algo::ring) {
    // Hosts (topo=2level): H hosts of R consecutive ranks, this rank the l-th of host h; a flat
    // ring is one host (R = P). Between hosts, this rank's shard goes to rank (h+t, l) of every
    // other host and rank (h-t, l)'s arrives. Inside the host, one ring per host offset t (this
    // host's shards first, whose GEMMs need no network): at step s the rank receives shard
    // (h-t, l-s) from its left and forwards what it received the step before (its own shard,
    // or the host's arrival, at step 1). GEMMs run in that order: the own host's shards, then
    // each other host's as it arrives and travels the ring.
    const int R = s.topo == Topo::two_level ? s.host_ranks : P, H = P / R, h = r / R, l = r % R;
    const int left = h * R + (l - 1 + R) % R, right = h * R + (l + 1) % R;
    // Tags: inside a host (phase 0) (t·R + step)·pieces + piece, a flat ring's step·pieces + piece;
    // between hosts (phase 1, one message per offset t >= 1 and piece) past all of those, below
    // (P + H)·pieces.
    auto host_tag = [&](int phase, int t, int step, int qi) {
      return phase == 0 ? (t * R + step) * np + qi : (P + t - 1) * np + qi;
    };
    for (int t = 1; t < H; ++t)
      for (int qi = 0; qi < np; ++qi)
        pb.send(name("send", r, qi), own_src[qi], (h + t) % H * R + l, host_tag(1, t, 0, qi), own_dep[qi], 0, qi);
    std::vector<std::vector<Arrival>> from_host(H);
    for (int t = 1; t < H; ++t) {
      const int j = (h - t + H) % H * R + l;
      for (int qi = 0; qi < np; ++qi) from_host[t].push_back(receive(j, qi, j, host_tag(1, t, 0, qi), 0));
    }
    for (int t = 0; t < H; ++t) {
      const int g = (h - t + H) % H;
      std::vector<View> src = own_src;
      std::vector<std::vector<int>> src_dep = own_dep;
      if (t > 0)
        for (int qi = 0; qi < np; ++qi) {
          src[qi] = from_host[t][qi].forward_from;
          src_dep[qi] = {from_host[t][qi].forward_ready};
          use(g * R + l, qi, from_host[t][qi].in_g, 0);
        }
      for (int step = 1; step < R; ++step) {
        const int j = g * R + (l - step + R) % R;  // the shard arriving from the left at this step
        std::vector<Arrival> arrived;
        for (int qi = 0; qi < np; ++qi) arrived.push_back(receive(j, qi, left, host_tag(0, t, step, qi), step));
        for (int qi = 0; qi < np; ++qi)
          pb.send(name("send", g * R + (l - step + 1 + R) % R, qi), src[qi], right, host_tag(0, t, step, qi),
                  src_dep[qi], step, qi);
        for (int qi = 0; qi < np; ++qi) {
          src[qi] = arrived[qi].forward_from;
          src_dep[qi] = {arrived[qi].forward_ready};
          use(j, qi, arrived[qi].in_g, step);
        }
      }
    }
    place_own_shard();
    if (H > 1)
      return finish("two levels: every rank sends its shard to its counterpart (same local index) on each other "
                    "host, then a ring inside each host per host offset, this host's shards first; tags (phase, "
                    "host offset, step, piece) make posting order irrelevant");
    return finish("ring: at step s rank r receives shard (r-s) mod P from rank r-1 and forwards shard "
                     "(r-s+1) mod P to rank r+1; each message has its own tag (step, piece), so the "
                     "order in which non-blocking operations are posted cannot deadlock");
  }

  // direct: every rank sends its own pieces straight to every peer, staggered by rank.
  for (int step = 1; step < P; ++step) {
    const int to = (r + step) % P, from = (r - step + P) % P;
    for (int qi = 0; qi < np; ++qi) pb.send(name("send", r, qi), own_src[qi], to, tag(step, qi), own_dep[qi], step, qi);
    std::vector<Arrival> arrived;
    for (int qi = 0; qi < np; ++qi) arrived.push_back(receive(from, qi, from, tag(step, qi), step));
    for (int qi = 0; qi < np; ++qi) use(from, qi, arrived[qi].in_g, step);
  }
  place_own_shard();
  return finish("direct, staggered: at step s rank r sends to rank r+s and receives from rank r-s, so "
                   "no link carries two shards at once; tags (step, piece) make posting order irrelevant");
}

}  // namespace cofuse::detail
