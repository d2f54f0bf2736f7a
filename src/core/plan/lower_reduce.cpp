// Lowering of gemm_rs (scatter axis m or n) and gemm_ar: partial products move and are summed.
//
// The full product S = Σ_j op(A_j)·op(B_j) [M, N] is cut into P blocks: rows blocks
// (gemm_rs axis m, and gemm_ar), or column blocks (gemm_rs axis n). Rank b owns the sum of
// block b; gemm_ar then also gathers every block onto every rank. Each block is cut into pieces
// by the schedule. Partials live in the plan's workspace in whatever layout suits the message,
// so only the caller's C can be strided (2d tiles, or column blocks of gemm_ar's C).
//
// wire=f32 (a 16-bit op): every partial and running sum lives in the wide workspace in f32,
// GEMMs write f32 there and messages carry f32; this rank's block is summed there too, and one
// unpack rounds the finished sum into C. So a block is rounded once, not once per addition.
#include <map>
#include <tuple>

#include "core/plan/builder.hpp"

namespace cofuse::detail {

namespace {

// "send block 2 piece 1": the labels a plan dump and a trace show.
std::string name(const char* what, int index, int piece) { return task_label(what, "block", index, piece); }

}  // namespace

Plan lower_reduce(PlanBuilder& pb) {
  const OpDesc& d = pb.desc();
  const Schedule& s = pb.schedule();
  const int P = d.ranks, r = pb.rank();
  const bool all_reduce = d.op == OpKind::gemm_ar;
  const bool col_blocks = d.op == OpKind::gemm_rs && d.axis == Axis::n;
  const int64_t k_loc = d.k / P;
  const int64_t ldA = d.trans_a ? d.m : k_loc;
  const int64_t ldB = d.trans_b ? k_loc : d.n;
  const bool uniform = s.data == DataMode::uniform;

  // Block b of S in S's coordinates. gemm_ar's blocks may be uneven (M need not divide P).
  auto block_rows = [&](int b) { return col_blocks ? Range{0, d.m} : split_range(d.m, P, b); };
  auto block_cols = [&](int b) { return col_blocks ? split_range(d.n, P, b) : Range{0, d.n}; };
  auto pieces_of = [&](int b) { return cut(block_rows(b).size, block_cols(b).size, s); };

  // Where piece q of block b ends up in the caller's C: C_r is just block r (gemm_rs), or all of S (gemm_ar).
  const int64_t ldC = all_reduce ? d.n : (col_blocks ? d.n / P : d.n);
  auto c_view = [&](int b, const Piece& q) {
    const int64_t row0 = all_reduce ? block_rows(b).begin : 0;
    const int64_t col0 = all_reduce ? block_cols(b).begin : 0;
    return dense_view(Buf::c, (row0 + q.rows.begin) * ldC + col0 + q.cols.begin, q.rows.size, q.cols.size, ldC);
  };
  auto slot = [&](int64_t rows, int64_t cols) { return dense_view(Buf::work, pb.alloc(rows * cols), rows, cols, cols); };
  // Where partial sums are kept: the workspace in the op's dtype, or the wide one in f32.
  const bool wide = s.wire == Wire::f32;
  auto partial_slot = [&](int64_t rows, int64_t cols) {
    return wide ? dense_view(Buf::wide, pb.alloc_wide(rows * cols), rows, cols, cols) : slot(rows, cols);
  };

  // The local partial of region (rows, cols) of S into z.
  auto partial = [&](const std::string& label, View z, Range rows, Range cols, std::vector<int> deps, int step, int qi) {
    const View x = op_view(Buf::a, 0, ldA, d.trans_a, rows, {0, k_loc});
    const View y = op_view(Buf::b, 0, ldB, d.trans_b, {0, k_loc}, cols);
    return pb.gemm(label, z, x, d.trans_a, y, d.trans_b, false, std::move(deps), step, qi);
  };
  auto partial_of = [&](const std::string& label, View z, int b, const Piece& q, std::vector<int> deps, int step, int qi) {
    return partial(label, z, {block_rows(b).begin + q.rows.begin, q.rows.size},
                   {block_cols(b).begin + q.cols.begin, q.cols.size}, std::move(deps), step, qi);
  };

  // ---- algo=coll (and overlap=none, the baseline): one library collective per piece ----
  if (s.algo == Algo::coll) {
    if (all_reduce) {
      // Pieces of the whole C, each computed, then all-reduced. Overlapped, a piece is computed
      // into the workspace and reduced from there into C, out of place: Open MPI 4.1's
      // non-blocking all-reduce (libnbc) takes a binomial tree (the whole piece up to rank 0 and
      // back down, hop by hop) for every call in place, and reduce-scatter + all-gather for one
      // out of place from 4 ranks up. On the 2x2 netlab hosts (2 Gbit/s) 4 MiB in two pieces took
      // 47-51 ms in place against 19.6 out of place. The baseline's one blocking call stays in
      // place: Open MPI's blocking algorithms take it as fast (19.3 ms against 19.4), and it
      // needs no workspace.
      const bool out_of_place = s.overlap != Overlap::none;
      const std::vector<Piece> pieces = cut(d.m, d.n, s);
      for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
        const Piece& q = pieces[qi];
        const View c = dense_view(Buf::c, q.rows.begin * ldC + q.cols.begin, q.rows.size, q.cols.size, ldC);
        // Where the sum can land in C itself; else (uniform 2d tiles: can_run refuses hetero here
        // on every backend; or f32 sums) it lands in staging and is unpacked into C.
        const bool into_c = c.contiguous() && !wide;
        const View part = into_c && !out_of_place ? c : partial_slot(q.rows.size, q.cols.size);
        const View sum = into_c ? c : out_of_place ? partial_slot(q.rows.size, q.cols.size) : part;
        const int g = partial("gemm piece " + std::to_string(qi), part, q.rows, q.cols, {}, 0, qi);
        const int a = pb.collective("allreduce piece " + std::to_string(qi), Collective::allreduce, part, sum, 0, {g}, qi);
        if (!into_c) pb.copy(TaskKind::unpack, "unpack piece " + std::to_string(qi), sum, c, {a}, 0, qi);
      }
      return pb.finish(s.overlap == Overlap::none ? "one GEMM, then one all-reduce"
                                                  : "one all-reduce per piece, in the same piece order on every rank");
    }
    // gemm_rs: for piece q, every block's piece goes into P adjacent slots, so one
    // reduce-scatter hands rank b the sum of its own block's piece.
    const std::vector<Piece> pieces = pieces_of(0);  // all blocks have the same shape here
    for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
      const Piece& q = pieces[qi];
      const int64_t e = q.rows.size * q.cols.size;
      const View slots = partial_slot(q.rows.size * P, q.cols.size);
      std::vector<int> gemms;
      const bool one_gemm = !col_blocks && pieces.size() == 1;  // rows blocks of S stacked = S itself
      // Column blocks with data=uniform, each piece as wide as its block: one GEMM over every
      // block's piece at once, then each block packed into its slot (the hand-written code's
      // shape). hetero computes each block straight into its slot: P narrower GEMMs and no copy.
      // Which is faster is the BLAS's (and M's) business, so both are candidates.
      const bool packed = col_blocks && s.data == DataMode::uniform && q.cols.size == d.n / P;
      if (one_gemm) {
        gemms.push_back(partial("gemm all blocks", slots, {0, d.m}, {0, d.n}, {}, 0, qi));
      } else if (packed) {
        const View whole = partial_slot(q.rows.size, d.n);
        const std::string piece = pieces.size() > 1 ? " piece " + std::to_string(qi) : "";
        const int g = partial("gemm all blocks" + piece, whole, q.rows, {0, d.n}, {}, 0, qi);
        for (int b = 0; b < P; ++b) {
          const View from = dense_view(whole.buf, whole.offset + b * q.cols.size, q.rows.size, q.cols.size, d.n);
          const View z = dense_view(slots.buf, slots.offset + b * e, q.rows.size, q.cols.size, q.cols.size);
          gemms.push_back(pb.copy(TaskKind::pack, name("pack", b, qi), from, z, {g}, 0, qi));
        }
      } else {
        for (int b = 0; b < P; ++b) {
          View z = dense_view(slots.buf, slots.offset + b * e, q.rows.size, q.cols.size, q.cols.size);
          gemms.push_back(partial_of(name("gemm", b, qi), z, b, q, {}, 0, qi));
        }
      }
      const View c = c_view(r, q);
      View first = dense_view(slots.buf, slots.offset, q.rows.size, q.cols.size, q.cols.size);
      if (c.contiguous() && !wide) {
        pb.collective("reduce-scatter piece " + std::to_string(qi), Collective::reduce_scatter, first, c, e, gemms, qi);
      } else {
        const View st = partial_slot(q.rows.size, q.cols.size);
        const int rs = pb.collective("reduce-scatter piece " + std::to_string(qi), Collective::reduce_scatter, first, st,
                                     e, gemms, qi);
        pb.copy(TaskKind::unpack, "unpack piece " + std::to_string(qi), st, c, {rs}, 0, qi);
      }
    }
    return pb.finish(s.overlap == Overlap::none ? "GEMM, then one reduce-scatter"
                                                : "one reduce-scatter per piece, in the same piece order on every rank");
  }

  // ---- reduce phase by point-to-point: ring or direct. final[b][q]: task after which piece q
  // of this rank's block holds the complete sum (only b == r is filled). ----
  const int np_max = [&] {
    int most = 0;
    for (int b = 0; b < P; ++b) most = std::max(most, static_cast<int>(pieces_of(b).size()));
    return most;
  }();
  // Hosts (topo=2level): H hosts of R consecutive ranks, this rank the l-th of host h. A flat
  // ring is the case of one host (R = P); the code below is one for both.
  const int R = s.topo == Topo::two_level ? s.host_ranks : P, H = P / R, h = r / R, l = r % R;
  // Messages, each with its own tag, in blocks of `pieces`: phase 0 the reduce ring inside a host
  // (host offset t, ring step), 2 the host sums between hosts (one per offset t >= 1), 1 the
  // all-gather ring inside a host, 3 the all-gather between hosts. Packed in that order, a
  // two-level plan's tags stay below (2P + 2H)·pieces (gemm_rs: (P + H)·pieces), within 1.5x of
  // a flat plan's, under MPI_TAG_UB. A flat ring (H = 1) has only phases 0 and 1, tagged
  // (phase·P + step)·pieces + piece, as before hosts existed.
  auto tag = [&](int phase, int t, int step, int qi) {
    const int block = phase == 0   ? t * R + step
                      : phase == 2 ? P + t - 1
                      : phase == 1 ? P + H - 1 + t * R + step
                                   : 2 * P + H - 1 + t - 1;
    return block * np_max + qi;
  };
  const std::vector<Piece> own_pieces = pieces_of(r);
  std::vector<int> final_task(own_pieces.size(), -1);
  // Where piece q of this rank's block is summed: straight in C, or in f32 (wire=f32), from
  // where `land` rounds the finished sum into C.
  std::vector<View> own_sum;
  for (const Piece& q : own_pieces) own_sum.push_back(wide ? partial_slot(q.rows.size, q.cols.size) : c_view(r, q));
  auto land = [&](int step) {
    if (wide)
      for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi)
        final_task[qi] = pb.copy(TaskKind::unpack, name("round sum", r, qi), own_sum[qi], c_view(r, own_pieces[qi]),
                                 {final_task[qi]}, step, qi);
  };

  // A partial of block b into `target`, tagged with the host offset, step and piece that send
  // it. Overlapped schedules compute each partial just before its message. The unfused baselines
  // (overlap=none, algo ring/direct) compute every partial first, in the order the messages need
  // them, and only then communicate: `early` holds those GEMM tasks, keyed by (t, step, piece).
  const bool unfused = s.overlap == Overlap::none;
  std::map<std::tuple<int, int, int>, int> early;
  auto finish = [&](const std::string& order) {
    return pb.finish(unfused ? "unfused: every partial first, then the messages; " + order : order);
  };
  auto partial_for = [&](int t, int step, int b, int qi, const Piece& q, View target) {
    if (const auto it = early.find({t, step, qi}); it != early.end()) return it->second;
    return partial_of(name("gemm", b, qi), target, b, q, {}, step, qi);
  };

  if (s.algo == Algo::ring) {
    // For each target host g = h+t (other hosts first, t = 1..H-1, this host last, t = 0): a
    // reduce-scatter ring inside this host over g's R blocks. At step s the rank works on block
    // (g, l-s-1): it computes its partial just in time, adds the running sum arriving from its
    // left, and passes it right. At step R-1 the block is (g, l): the sum over this host, which
    // goes to rank (g, l) between hosts; for g = h the sum lands in C and the other hosts' sums
    // of it are added, in host order. One host (flat): the classic ring, at step P-1 block r.
    const int left = h * R + (l - 1 + R) % R, right = h * R + (l + 1) % R;
    auto host_at = [&](int t) { return (h + t) % H; };
    auto block_at = [&](int t, int step) { return host_at(t) * R + ((l - step - 1) % R + 2 * R) % R; };
    std::vector<int> t_order;
    for (int t = 1; t < H; ++t) t_order.push_back(t);
    t_order.push_back(0);
    std::map<std::tuple<int, int, int>, View> targets;  // where the partial of (t, step, piece) goes
    for (int t : t_order)
      for (int step = 0; step < R; ++step) {
        const std::vector<Piece> pieces = pieces_of(block_at(t, step));
        for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
          const Piece& q = pieces[qi];
          const View target = t == 0 && step == R - 1 ? own_sum[qi] : partial_slot(q.rows.size, q.cols.size);
          targets[{t, step, qi}] = target;
          if (unfused) early[{t, step, qi}] = partial_for(t, step, block_at(t, step), qi, q, target);
        }
      }
    // The other hosts' sums of this rank's block, added once this host's is done. Rank (h-t, l)'s
    // is received where this rank sends its own to (h+t, l): every rank's i-th send then meets
    // its peer's i-th receive, the pairing NCCL's grouped calls need (build_rank_program).
    std::vector<std::vector<std::pair<View, int>>> host_sums(own_pieces.size());
    for (int t : t_order)
      for (int step = 0; step < R; ++step) {
        const int b = block_at(t, step);
        const std::vector<Piece> pieces = pieces_of(b);
        for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
          const Piece& q = pieces[qi];
          const bool last = step == R - 1;
          const View target = targets.at({t, step, qi});
          std::vector<int> ready = {partial_for(t, step, b, qi, q, target)};
          if (step > 0) {
            const View incoming = partial_slot(q.rows.size, q.cols.size);
            const int rv = pb.recv(name("recv", b, qi), incoming, left, tag(0, t, step, qi), {}, step, qi);
            ready = {pb.reduce(name("reduce", b, qi), target, incoming, {ready[0], rv}, step, qi)};
          }
          if (!last) pb.send(name("send", b, qi), target, right, tag(0, t, step + 1, qi), ready, step, qi);
          else if (t != 0) pb.send(name("send host sum", b, qi), target, b, tag(2, t, 0, qi), ready, step, qi);
          else final_task[qi] = ready[0];
        }
        if (step == R - 1 && t != 0)
          for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi) {
            const View in = partial_slot(own_pieces[qi].rows.size, own_pieces[qi].cols.size);
            const int from = (h - t + H) % H * R + l;
            host_sums[qi].push_back({in, pb.recv(name("recv host sum", r, qi), in, from, tag(2, t, 0, qi), {}, step, qi)});
          }
      }
    for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi)
      for (const auto& [in, rv] : host_sums[qi])
        final_task[qi] = pb.reduce(name("reduce host sum", r, qi), own_sum[qi], in, {final_task[qi], rv}, R, qi);
    land(R);
  } else {
    // direct: partials of every other block go straight to their owner, staggered by rank;
    // the owner adds the P-1 arrivals into its own partial in step order (deterministic).
    std::vector<std::vector<int>> arrivals(own_pieces.size());
    std::vector<std::vector<View>> incoming(own_pieces.size());
    std::map<std::pair<int, int>, View> outs;  // where the partial sent at (step, piece) goes
    for (int step = 1; step < P; ++step) {
      const int to = (r + step) % P;
      const std::vector<Piece> pieces = pieces_of(to);
      for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
        const View out = outs[{step, qi}] = partial_slot(pieces[qi].rows.size, pieces[qi].cols.size);
        if (unfused) early[{0, step, qi}] = partial_for(0, step, to, qi, pieces[qi], out);
      }
    }
    if (unfused)  // the own block's partial too, straight into C, before any message
      for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi)
        early[{0, 0, qi}] = partial_for(0, 0, r, qi, own_pieces[qi], own_sum[qi]);
    for (int step = 1; step < P; ++step) {
      const int to = (r + step) % P, from = (r - step + P) % P;
      const std::vector<Piece> pieces = pieces_of(to);
      for (int qi = 0; qi < static_cast<int>(pieces.size()); ++qi) {
        const View out = outs.at({step, qi});
        const int g = partial_for(0, step, to, qi, pieces[qi], out);
        pb.send(name("send", to, qi), out, to, tag(0, 0, step, qi), {g}, step, qi);
      }
      for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi) {
        incoming[qi].push_back(partial_slot(own_pieces[qi].rows.size, own_pieces[qi].cols.size));
        arrivals[qi].push_back(pb.recv(name("recv", r, qi), incoming[qi].back(), from, tag(0, 0, step, qi), {}, step, qi));
      }
    }
    for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi) {
      int last = partial_for(0, 0, r, qi, own_pieces[qi], own_sum[qi]);
      for (std::size_t i = 0; i < arrivals[qi].size(); ++i)
        last = pb.reduce(name("reduce", r, qi), own_sum[qi], incoming[qi][i], {last, arrivals[qi][i]},
                         static_cast<int>(i) + 1, qi);
      final_task[qi] = last;
    }
    land(P);
  }
  if (!all_reduce)
    return finish(s.algo == Algo::ring && H > 1
                      ? "reduce-scatter in two levels: for each other host g, then this one, a ring inside the host "
                        "sums its partials of g's blocks; rank (h, l) sends its host's sum of block (g, l) to rank "
                        "(g, l), which adds the hosts' sums in host order; tags (phase, host offset, step, piece) make "
                        "posting order irrelevant"
                  : s.algo == Algo::ring
                         ? "reduce-scatter ring: at step s rank r sums block (r-s-1) mod P and passes it to r+1; "
                           "tags (step, piece) make posting order irrelevant"
                         : "direct, staggered: at step s rank r sends its partial of block r+s to rank r+s and "
                           "receives one of its own block from rank r-s; arrivals are added in step order");

  // ---- gemm_ar: gather the summed blocks onto every rank, straight into C ----
  // A piece of C is strided for 2d tiles: hetero moves it with a datatype, uniform packs it.
  auto sendable = [&](int b, int qi, const Piece& q, std::vector<int> deps, int step) {
    const View c = c_view(b, q);
    if (!uniform || c.contiguous()) return std::make_pair(c, deps);
    const View st = slot(c.rows, c.cols);
    return std::make_pair(st, std::vector<int>{pb.copy(TaskKind::pack, name("pack", b, qi), c, st, deps, step, qi)});
  };
  auto receive = [&](int b, int qi, const Piece& q, int peer, int tg, int step) {
    const View c = c_view(b, q);
    if (!uniform || c.contiguous()) {
      const int rv = pb.recv(name("recv sum", b, qi), c, peer, tg, {}, step, qi);
      return std::make_pair(c, rv);
    }
    const View st = slot(c.rows, c.cols);
    const int rv = pb.recv(name("recv sum", b, qi), st, peer, tg, {}, step, qi);
    pb.copy(TaskKind::unpack, name("unpack", b, qi), st, c, {rv}, step, qi);
    return std::make_pair(st, rv);
  };
  if (s.algo == Algo::ring) {
    // Between hosts first: this rank's sums go to rank (h+t, l) of every other host, and rank
    // (h-t, l)'s arrive. Then an all-gather ring inside the host for each host offset t (this
    // host's blocks first): at step s the rank receives block (h-t, l-s) from its left and
    // forwards what it received the step before (its own, or the host's arrival, at step 1).
    // One host (flat): the classic all-gather ring.
    const int left = h * R + (l - 1 + R) % R, right = h * R + (l + 1) % R;
    auto own_ready = [&] {
      std::vector<std::pair<View, std::vector<int>>> out;
      for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi)
        out.push_back(sendable(r, qi, own_pieces[qi], {final_task[qi]}, 0));
      return out;
    }();
    for (int t = 1; t < H; ++t)
      for (int qi = 0; qi < static_cast<int>(own_ready.size()); ++qi)
        pb.send(name("send sum", r, qi), own_ready[qi].first, (h + t) % H * R + l, tag(3, t, 0, qi), own_ready[qi].second,
                0, qi);
    // fwd[t]: what this rank forwards next in host offset t's ring.
    std::vector<std::vector<std::pair<View, std::vector<int>>>> fwd(H);
    fwd[0] = own_ready;
    for (int t = 1; t < H; ++t) {
      const int b = (h - t + H) % H * R + l;
      const std::vector<Piece> in = pieces_of(b);
      for (int qi = 0; qi < static_cast<int>(in.size()); ++qi) {
        auto [where, rv] = receive(b, qi, in[qi], b, tag(3, t, 0, qi), 0);
        fwd[t].push_back({where, {rv}});
      }
    }
    for (int t = 0; t < H; ++t)
      for (int step = 1; step < R; ++step) {
        const int g = (h - t + H) % H;
        const int b = g * R + (l - step + R) % R, sent = g * R + (l - step + 1 + R) % R;
        const std::vector<Piece> in = pieces_of(b);
        for (int qi = 0; qi < static_cast<int>(fwd[t].size()); ++qi)
          pb.send(name("send sum", sent, qi), fwd[t][qi].first, right, tag(1, t, step, qi), fwd[t][qi].second, step, qi);
        fwd[t].clear();
        for (int qi = 0; qi < static_cast<int>(in.size()); ++qi) {
          auto [where, rv] = receive(b, qi, in[qi], left, tag(1, t, step, qi), step);
          fwd[t].push_back({where, {rv}});
        }
      }
    return finish(H == 1 ? "all-reduce as a reduce-scatter ring then an all-gather ring over row blocks of C; "
                           "tags (phase, step, piece) make posting order irrelevant"
                         : "all-reduce in two levels: the two-level reduce-scatter, then every rank's sum to its "
                           "counterpart on each other host, then an all-gather ring inside each host per host; "
                           "tags (phase, host offset, step, piece) make posting order irrelevant");
  }
  std::vector<std::pair<View, std::vector<int>>> own;
  for (int qi = 0; qi < static_cast<int>(own_pieces.size()); ++qi)
    own.push_back(sendable(r, qi, own_pieces[qi], {final_task[qi]}, 0));
  for (int step = 1; step < P; ++step) {
    const int to = (r + step) % P, from = (r - step + P) % P;
    for (int qi = 0; qi < static_cast<int>(own.size()); ++qi)
      pb.send(name("send sum", r, qi), own[qi].first, to, tag(1, 0, step, qi), own[qi].second, step, qi);
    const std::vector<Piece> in = pieces_of(from);
    for (int qi = 0; qi < static_cast<int>(in.size()); ++qi) receive(from, qi, in[qi], from, tag(1, 0, step, qi), step);
  }
  return finish("all-reduce as a direct reduce-scatter then a direct all-gather, staggered by rank; "
                   "tags (phase, step, piece) make posting order irrelevant");
}

}  // namespace cofuse::detail
