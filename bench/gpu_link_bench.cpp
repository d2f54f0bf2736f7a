// GPU benchmark over a real link on one GPU (issue 32): P ranks as streams on one GPU whose
// messages cross the host link (device -> pinned host -> device on the copy engines,
// cuda::Settings::link = Link::host), serial against cofuse's overlapped schedules and against
// the overlap a skilled user writes by hand (bench/hand_overlap.hpp). It measures; it asserts
// nothing (tests/cuda asserts).
//
//   gpu_link_bench [--out DIR] [--iters N] [--quick] [--link host|device] [--piece-bytes B]
//                  [--big-ms T] [--ranks 2,4] [--ops ag_gemm,gemm_rs,gemm_ar] [--budget-s S]
//
// 1. The link: measure_host_link (cofuse/cuda_link.hpp), written as the first record.
// 2. Cases: each op at each P in bf16 at three shapes chosen from the measured link and a
//    cuBLASLt timing (bench/host_link_plan.hpp): G ~ M, G ~ 4 M, M ~ 4 G, max(G, M) ~ --big-ms.
// 3. Per case, interleaved (the order rotating each iteration), --iters runs of: serial, every
//    overlapped schedule LocalGroup accepts (bench/gpu_bench_common.hpp), and the hand-written
//    overlap with 1 and 4 chunks per block (host link only); medians.
// 4. G, M: serial's GEMM and communication phases (wall time with any rank's GEMM, resp. anything
//    else, running; one timed run). Per variant: DIL = its GEMM pieces alone - every rank's whole
//    GEMM alone, both timed the same way here (each rank's GEMMs in order on its own stream, all
//    ranks at once, bench's own cuBLASLt; the pieces' shapes from the plans' gemm tasks); CIL =
//    GEMM time inside its run (wall time with any GEMM running, one run with settings.timing, or
//    the hand-written run's GEMM events) - pieces alone. The hand-written overlap also times its
//    communication alone (own_comm_alone_ms).
// 5. Every output is compared with serial's on the device (relative Frobenius difference).
// Writes DIR/gpu-link.jsonl (the link record, then cofuse.gpu.record/2 lines), DIR/link.jsonl,
// and traces DIR/trace-link-<case>-{serial,best}.json.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cofuse/backend.hpp"
#include "cofuse/cuda.hpp"
#include "cofuse/cuda_link.hpp"
#include "cofuse/model/plan.hpp"
#include "gpu_bench_common.hpp"
#include "hand_kernels.hpp"
#include "hand_overlap.hpp"
#include "host_link_plan.hpp"

namespace {

using namespace cofuse;
using namespace cofuse::bench;

struct Args {
  std::string out = "out/gpu";
  int iters = 15;
  bool quick = false;
  cuda::Link link = cuda::Link::host;
  std::size_t piece_bytes = std::size_t(1) << 20;
  double big_ms = 1.0;
  std::vector<int> ranks = {2, 4};
  std::vector<OpKind> ops = {OpKind::ag_gemm, OpKind::gemm_rs, OpKind::gemm_ar};
  double budget_s = 0;  // stop starting cases after this many seconds (0: no limit)
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Device memory freed on every way out.
struct DeviceMemory {
  std::vector<void*> owned;
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)), "cudaMalloc");
    owned.push_back(p);
    return p;
  }
  ~DeviceMemory() {
    for (void* p : owned) cudaFree(p);
  }
};

void fill(void* p, int64_t elements, uint64_t seed) {
  cuda_ok(fill_uniform_bf16(static_cast<uint16_t*>(p), std::size_t(elements), seed, nullptr), "fill_uniform_bf16");
}

// Each rank's GEMMs in order on its own stream, all ranks at once from one start event; the
// median of `reps` runs after one warm-up. Operands are scratch of the right sizes, random.
double time_rank_gemms(LtGemm& lt, const std::vector<std::vector<GemmShape>>& per_rank, int reps) {
  DeviceMemory mem;
  struct Lane {
    void *x = nullptr, *y = nullptr, *z = nullptr, *ws = nullptr;
    cudaStream_t s = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::vector<Lane> lanes(per_rank.size());
  struct Cleanup {
    std::vector<Lane>& l;
    cudaStream_t origin = nullptr;
    cudaEvent_t a = nullptr, b = nullptr;
    ~Cleanup() {
      for (Lane& x : l) {
        if (x.s) cudaStreamDestroy(x.s);
        if (x.done) cudaEventDestroy(x.done);
      }
      if (origin) cudaStreamDestroy(origin);
      if (a) cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
  } cleanup{lanes};
  cuda_ok(cudaStreamCreateWithFlags(&cleanup.origin, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_ok(cudaEventCreate(&cleanup.a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&cleanup.b), "cudaEventCreate");
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    int64_t nx = 0, ny = 0, nz = 0;
    for (const GemmShape& g : per_rank[r]) {
      nx = std::max(nx, (g.trans_x ? g.k : g.m) * g.ldx);
      ny = std::max(ny, (g.trans_y ? g.n : g.k) * g.ldy);
      nz = std::max(nz, g.m * g.ldz);
    }
    Lane& l = lanes[r];
    l.x = mem.alloc(std::size_t(nx) * 2);
    l.y = mem.alloc(std::size_t(ny) * 2);
    l.z = mem.alloc(std::size_t(nz) * 2);
    l.ws = mem.alloc(lt.workspace_bytes());
    fill(l.x, nx, 11 + 3 * r);
    fill(l.y, ny, 12 + 3 * r);
    fill(l.z, nz, 13 + 3 * r);
    cuda_ok(cudaStreamCreateWithFlags(&l.s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_ok(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<double> t;
  for (int it = 0; it <= reps; ++it) {
    cuda_ok(cudaEventRecord(cleanup.a, cleanup.origin), "cudaEventRecord");
    for (std::size_t r = 0; r < lanes.size(); ++r) {
      Lane& l = lanes[r];
      cuda_ok(cudaStreamWaitEvent(l.s, cleanup.a, 0), "cudaStreamWaitEvent");
      for (const GemmShape& g : per_rank[r]) lt.run(g, l.x, l.y, l.z, l.ws, l.s);
      cuda_ok(cudaEventRecord(l.done, l.s), "cudaEventRecord");
      cuda_ok(cudaStreamWaitEvent(cleanup.origin, l.done, 0), "cudaStreamWaitEvent");
    }
    cuda_ok(cudaEventRecord(cleanup.b, cleanup.origin), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(cleanup.b), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, cleanup.a, cleanup.b), "cudaEventElapsedTime");
    if (it > 0) t.push_back(double(ms) * 1e-3);
  }
  return median(t);
}

// Every rank's whole local GEMM (the op's GEMM with nothing cut).
std::vector<std::vector<GemmShape>> whole_gemms(const OpDesc& d) {
  const int64_t p = d.ranks;
  const GemmShape g = d.op == OpKind::ag_gemm ? GemmShape{d.m, d.n / p, d.k, d.k, d.n / p, d.n / p}
                                              : GemmShape{d.m, d.n, d.k / p, d.k / p, d.n, d.n};
  return std::vector<std::vector<GemmShape>>(std::size_t(p), {g});
}

// The GEMM pieces of every rank's plan, as the plan cuts them.
std::vector<std::vector<GemmShape>> plan_gemms(const std::vector<Plan>& plans) {
  std::vector<std::vector<GemmShape>> out;
  for (const Plan& plan : plans) {
    std::vector<GemmShape> pieces;
    for (const Task& t : plan.tasks)
      if (t.kind == TaskKind::gemm && !t.z.empty() && (t.trans_x ? t.x.rows : t.x.cols) > 0)
        pieces.push_back(GemmShape{t.z.rows, t.z.cols, t.trans_x ? t.x.rows : t.x.cols, t.x.ld, t.y.ld, t.z.ld, t.trans_x,
                                   t.trans_y, t.accumulate});
    out.push_back(pieces);
  }
  return out;
}

// One case's buffers on the device: every rank's A, B (random), C, gathered A, and a copy of
// serial's C to compare with.
struct CaseBuffers {
  DeviceMemory mem;
  std::vector<OpBuffers> buffers;
  std::vector<void*> reference;
  double* sums = nullptr;
  int64_t c_elements = 0;
  explicit CaseBuffers(const OpDesc& d) {
    const LocalShapes s = d.local_shapes();
    c_elements = s.c.elements();
    for (int r = 0; r < d.ranks; ++r) {
      OpBuffers b;
      void* a = mem.alloc(std::size_t(s.a.elements()) * 2);
      void* bb = mem.alloc(std::size_t(s.b.elements()) * 2);
      fill(a, s.a.elements(), 1000 + 2 * uint64_t(r));
      fill(bb, s.b.elements(), 1001 + 2 * uint64_t(r));
      b.a = a;
      b.b = bb;
      b.c = mem.alloc(std::size_t(c_elements) * 2);
      b.gathered = d.op == OpKind::ag_gemm ? mem.alloc(std::size_t(s.gathered.elements()) * 2) : nullptr;
      buffers.push_back(b);
      reference.push_back(mem.alloc(std::size_t(c_elements) * 2));
    }
    sums = static_cast<double*>(mem.alloc(2 * sizeof(double)));
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void poison() {
    for (const OpBuffers& b : buffers) cuda_ok(cudaMemset(b.c, 0xFF, std::size_t(c_elements) * 2), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void keep_reference() {
    for (std::size_t r = 0; r < buffers.size(); ++r)
      cuda_ok(cudaMemcpy(reference[r], buffers[r].c, std::size_t(c_elements) * 2, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  }
  // Relative Frobenius difference of every rank's C from the reference.
  double difference() {
    cuda_ok(cudaMemset(sums, 0, 2 * sizeof(double)), "cudaMemset");
    for (std::size_t r = 0; r < buffers.size(); ++r)
      cuda_ok(diff_bf16(static_cast<const uint16_t*>(buffers[r].c), static_cast<const uint16_t*>(reference[r]),
                        std::size_t(c_elements), sums, nullptr),
              "diff_bf16");
    double host[2] = {0, 0};
    cuda_ok(cudaMemcpy(host, sums, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return std::sqrt(host[0] / std::max(host[1], 1e-300));
  }
};

struct Variant {
  std::string name, kind;  // kind: serial | cofuse | hand
  std::unique_ptr<cuda::LocalGroup> group;
  std::unique_ptr<HandOverlap> hand;
  std::vector<double> t;
  double run(const std::vector<OpBuffers>& b) { return group ? group->run(b).total_s : hand->run(b); }
};

struct Row {
  std::string op, shape, balance, best, best_hand;
  int ranks = 0;
  double g = 0, m = 0, serial = 0, best_t = 0, best_eff = 0, hand_t = 0, hand_eff = 0;
};

std::string link_json(const cuda::HostLinkRates& r, const std::string& id, cuda::Link link) {
  return JsonLine()
      .text("id", id)
      .text("kind", cuda::to_string(link))
      .number("d2h_GBps", r.d2h_GBps)
      .number("h2d_GBps", r.h2d_GBps)
      .number("d2h_both_GBps", r.d2h_both_GBps)
      .number("h2d_both_GBps", r.h2d_both_GBps)
      .number("latency_us", r.latency_us)
      .integer("piece_bytes", int64_t(r.piece_bytes))
      .str();
}

Row run_case(const ShapeChoice& choice, double measured_g, const cuda::HostLinkRates& rates, const std::string& link_id,
             const Args& args, LtGemm& lt, std::ofstream& records) {
  const OpDesc& d = choice.desc;
  CaseBuffers bufs(d);
  cuda::Settings settings;
  settings.link = args.link;
  settings.link_piece_bytes = args.piece_bytes;
  std::vector<Variant> variants;
  for (const std::string& text : gpu_schedules()) {
    const Schedule s = *Schedule::parse(text);
    const Status can = can_run(Backend::cuda_local, d, s);
    if (!can.ok()) continue;
    try {
      Variant v{text, text == "serial" ? "serial" : "cofuse", std::make_unique<cuda::LocalGroup>(d, s, settings), nullptr, {}};
      v.run(bufs.buffers);  // warm-up: cuBLASLt's heuristics, first launches
      variants.push_back(std::move(v));
    } catch (const std::exception& e) {
      std::cout << "  skipped " << text << ": " << e.what() << "\n";
    }
  }
  if (variants.empty() || variants[0].kind != "serial") throw Error(ErrorCode::internal, "serial did not run");
  if (args.link == cuda::Link::host)
    for (int chunks : {1, 4}) {
      try {
        Variant v{"", "hand", nullptr, std::make_unique<HandOverlap>(d, chunks, args.piece_bytes), {}};
        v.name = v.hand->name();
        v.run(bufs.buffers);
        variants.push_back(std::move(v));
      } catch (const std::exception& e) {
        std::cout << "  skipped hand,chunks=" << chunks << ": " << e.what() << "\n";
      }
    }
  for (int it = 0; it < args.iters; ++it)
    for (std::size_t j = 0; j < variants.size(); ++j) {
      Variant& v = variants[(j + std::size_t(it)) % variants.size()];
      v.t.push_back(v.run(bufs.buffers));
    }
  // Outputs: serial's kept, every variant's compared with it (poisoned first: an element left
  // unwritten shows as NaN).
  bufs.poison();
  variants[0].run(bufs.buffers);
  bufs.keep_reference();
  std::vector<double> diff(variants.size(), 0);
  for (std::size_t j = 0; j < variants.size(); ++j) {
    bufs.poison();
    variants[j].run(bufs.buffers);
    diff[j] = bufs.difference();
  }
  const std::string tag = std::string(to_string(d.op)) + "-p" + std::to_string(d.ranks) + "-" + to_string(choice.balance);
  cuda::Settings timed = settings;
  timed.timing = true;
  // Serial's phases.
  double g = 0, m = 0;
  {
    cuda::LocalGroup serial(d, variants[0].group->schedule(), timed);
    serial.run(bufs.buffers);
    serial.run(bufs.buffers);
    g = covered(serial.op_times(), [](const cuda::OpTime& o) { return o.kind == "gemm"; });
    m = covered(serial.op_times(), [](const cuda::OpTime& o) { return o.kind != "gemm"; });
    write_trace(args.out + "/trace-link-" + tag + "-serial.json", serial.op_times());
  }
  const double gemm_alone = time_rank_gemms(lt, whole_gemms(d), 3);
  const double serial_t = median(variants[0].t);
  std::size_t best = 0, best_hand = variants.size();
  for (std::size_t j = 1; j < variants.size(); ++j) {
    if (variants[j].kind == "cofuse" && (best == 0 || median(variants[j].t) < median(variants[best].t))) best = j;
    if (variants[j].kind == "hand" && (best_hand == variants.size() || median(variants[j].t) < median(variants[best_hand].t)))
      best_hand = j;
  }
  std::cout << "\n" << d.to_string() << "  [" << to_string(choice.balance) << ": target G/M " << target_ratio(choice.balance)
            << "]  G " << g * 1e3 << " ms  M " << m * 1e3 << " ms  (estimated G " << measured_g * 1e3 << ", M "
            << choice.comm_s * 1e3 << ")\n";
  std::printf("  %-48s %8s %8s %8s %6s %8s %8s %9s\n", "variant", "T ms", "x ser", "eff", "", "DIL ms", "CIL ms", "vs serial");
  const std::string link = link_json(rates, link_id, args.link);
  for (std::size_t j = 0; j < variants.size(); ++j) {
    Variant& v = variants[j];
    double pieces = 0, in_run = -1, comm_in_run = -1, own_comm = -1;
    if (v.group) {
      pieces = time_rank_gemms(lt, plan_gemms(v.group->plans()), 3);
      cuda::LocalGroup tg(d, v.group->schedule(), timed);
      tg.run(bufs.buffers);
      tg.run(bufs.buffers);
      in_run = covered(tg.op_times(), [](const cuda::OpTime& o) { return o.kind == "gemm"; });
      comm_in_run = covered(tg.op_times(), [](const cuda::OpTime& o) { return o.kind != "gemm"; });
      if (j == best && best > 0) write_trace(args.out + "/trace-link-" + tag + "-best.json", tg.op_times());
    } else {
      std::vector<double> ga, ca;
      for (int i = 0; i < 3; ++i) {
        ga.push_back(v.hand->run(bufs.buffers, HandOverlap::Part::gemm_only));
        ca.push_back(v.hand->run(bufs.buffers, HandOverlap::Part::comm_only));
      }
      pieces = median(ga);
      own_comm = median(ca);
      v.hand->run(bufs.buffers, HandOverlap::Part::all, true);
      std::vector<std::pair<double, double>> spans = v.hand->gemm_spans();
      in_run = cofuse::detail::covered_seconds(spans);
    }
    const double t = median(v.t);
    const Losses l = losses(t, serial_t, g, m, gemm_alone, pieces, in_run);
    const double lo = *std::min_element(v.t.begin(), v.t.end()), hi = *std::max_element(v.t.begin(), v.t.end());
    std::printf("  %-48s %8.3f %8.2f %8.2f %6s %8.3f %8.3f %9.1e%s\n", v.name.c_str(), t * 1e3, l.x_serial, l.eff, "",
                l.dil * 1e3, l.cil * 1e3, diff[j], j == best ? "  <- best cofuse" : (j == best_hand ? "  <- best hand" : ""));
    JsonLine c;
    c.text("op", to_string(d.op)).integer("m", d.m).integer("n", d.n).integer("k", d.k).text("dtype", to_string(d.dtype));
    c.text("axis", to_string(d.axis)).integer("ranks", d.ranks).text("balance", to_string(choice.balance));
    c.number("target_ratio", target_ratio(choice.balance)).number("est_gemm_ms", measured_g * 1e3);
    c.number("est_comm_ms", choice.comm_s * 1e3).text("rule", choice.rule);
    JsonLine times;
    times.number("median", t * 1e3).number("min", lo * 1e3).number("max", hi * 1e3);
    JsonLine rec;
    rec.text("schema", "cofuse.gpu.record/2").raw("link", link).text("device", rates.device_name).object("case", c);
    rec.text("variant", v.kind).text("schedule", v.group ? v.group->schedule().to_string() : v.name);
    rec.integer("iters", args.iters).object("times_ms", times).number("serial_ms", serial_t * 1e3);
    rec.number("x_serial", l.x_serial).number("gemm_phase_ms", g * 1e3).number("comm_phase_ms", m * 1e3).number("eff", l.eff);
    rec.number("gemm_alone_ms", gemm_alone * 1e3).number("pieces_alone_ms", pieces * 1e3);
    rec.number("gemm_in_run_ms", in_run * 1e3).number("dil_ms", l.dil * 1e3).number("cil_ms", l.cil * 1e3);
    rec.number("exposed_ms", l.exposed * 1e3);
    if (comm_in_run >= 0) rec.number("comm_in_run_ms", comm_in_run * 1e3);
    else rec.raw("comm_in_run_ms", "null");
    if (own_comm >= 0) rec.number("own_comm_alone_ms", own_comm * 1e3);
    else rec.raw("own_comm_alone_ms", "null");
    rec.number("diff_vs_serial", diff[j]).number("tflops", d.flops() / t * 1e-12);
    records << rec.str() << "\n";
  }
  records.flush();
  Row row;
  row.op = to_string(d.op);
  row.ranks = d.ranks;
  row.shape = std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k);
  row.balance = to_string(choice.balance);
  row.g = g;
  row.m = m;
  row.serial = serial_t;
  row.best = best > 0 ? variants[best].name : "-";
  row.best_t = best > 0 ? median(variants[best].t) : 0;
  row.best_eff = row.best_t > 0 ? std::max(g, m) / row.best_t : 0;
  row.best_hand = best_hand < variants.size() ? variants[best_hand].name : "-";
  row.hand_t = best_hand < variants.size() ? median(variants[best_hand].t) : 0;
  row.hand_eff = row.hand_t > 0 ? std::max(g, m) / row.hand_t : 0;
  return row;
}

int usage() {
  std::cerr << "usage: gpu_link_bench [--out DIR] [--iters N] [--quick] [--link host|device] [--piece-bytes B]\n"
               "                      [--big-ms T] [--ranks 2,4] [--ops ag_gemm,gemm_rs,gemm_ar] [--budget-s S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  bool iters_given = false, big_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--out" && more) args.out = argv[++i];
    else if (a == "--iters" && more) args.iters = std::max(1, std::atoi(argv[++i])), iters_given = true;
    else if (a == "--quick") args.quick = true;
    else if (a == "--link" && more) {
      const auto l = cuda::parse_link(argv[++i]);
      if (!l) return usage();
      args.link = *l;
    } else if (a == "--piece-bytes" && more) args.piece_bytes = std::size_t(std::max(1LL, std::atoll(argv[++i])));
    else if (a == "--big-ms" && more) args.big_ms = std::max(0.01, std::atof(argv[++i])), big_given = true;
    else if (a == "--budget-s" && more) args.budget_s = std::atof(argv[++i]);
    else if (a == "--ranks" && more) {
      args.ranks.clear();
      for (const std::string& r : split(argv[++i])) args.ranks.push_back(std::max(1, std::atoi(r.c_str())));
    } else if (a == "--ops" && more) {
      args.ops.clear();
      for (const std::string& o : split(argv[++i])) {
        const auto op = parse_op(o);
        if (!op) return usage();
        args.ops.push_back(*op);
      }
    } else return usage();
  }
  if (args.quick) {
    if (!iters_given) args.iters = 5;
    if (!big_given) args.big_ms = 0.4;
  }
  std::string why;
  if (!cuda::available(&why)) {
    std::cerr << "gpu_link_bench: no GPU (" << why << ")\n";
    return 77;
  }
  const auto began = std::chrono::steady_clock::now();
  try {
    std::system(("mkdir -p '" + args.out + "'").c_str());
    std::ofstream records(args.out + "/gpu-link.jsonl");
    const cuda::HostLinkRates rates =
        cuda::measure_host_link(0, args.quick ? std::size_t(16) << 20 : std::size_t(64) << 20, args.piece_bytes, args.quick ? 5 : 10);
    const std::string link_id = "host-link-" + std::to_string(std::time(nullptr));
    records << cuda::to_json(rates, link_id) << "\n";
    std::ofstream(args.out + "/link.jsonl") << cuda::to_json(rates, link_id) << "\n";
    std::printf("gpu_link_bench on %s, messages over the %s link; host link (%s): d2h %.1f GB/s, h2d %.1f GB/s alone; "
                "%.1f / %.1f GB/s both at once; latency %.2f us (events), %.2f us (host clock); pieces of %zu bytes\n",
                rates.device_name.c_str(), cuda::to_string(args.link), link_id.c_str(), rates.d2h_GBps, rates.h2d_GBps,
                rates.d2h_both_GBps, rates.h2d_both_GBps, rates.latency_us, rates.host_latency_us, args.piece_bytes);
    LtGemm lt;
    OpDesc probe;  // fields by name: OpDesc may grow
    probe.op = OpKind::gemm_ar;
    probe.m = probe.n = probe.k = 4096;
    probe.dtype = DType::bf16;
    probe.ranks = 1;
    const double probe_s = time_rank_gemms(lt, whole_gemms(probe), 3);
    const double tflops = probe.flops() / probe_s * 1e-12;
    std::printf("cuBLASLt bf16 4096^3: %.3f ms, %.0f TFLOP/s (the first shape estimate)\n", probe_s * 1e3, tflops);
    std::vector<Row> rows;
    for (OpKind op : args.ops)
      for (int p : args.ranks)
        for (Balance b : {Balance::even, Balance::compute, Balance::comm}) {
          const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
          if (args.budget_s > 0 && elapsed > args.budget_s) {
            std::printf("\nbudget of %.0f s spent: %s P=%d %s not run\n", args.budget_s, to_string(op), p, to_string(b));
            continue;
          }
          ShapeChoice c = choose_shape(op, p, b, tflops, rates, args.big_ms * 1e-3);
          const double g1 = time_rank_gemms(lt, whole_gemms(c.desc), 2);
          c = refine_shape(c, g1, rates, args.big_ms * 1e-3);
          const double g2 = time_rank_gemms(lt, whole_gemms(c.desc), 2);
          std::printf("\ncase %s P=%d %s: %s -> M=%lld N=%lld K=%lld: G %.3f ms (timed), M %.3f ms (link model), G/M %.2f\n",
                      to_string(op), p, to_string(b), c.rule.c_str(), (long long)c.desc.m, (long long)c.desc.n,
                      (long long)c.desc.k, g2 * 1e3, c.comm_s * 1e3, g2 / c.comm_s);
          try {
            rows.push_back(run_case(c, g2, rates, link_id, args, lt, records));
          } catch (const std::exception& e) {
            std::cout << "  case failed: " << e.what() << "\n";
            cudaGetLastError();  // a sticky error would fail every later case anyway; try on
          }
        }
    std::printf("\nSummary (%s link; medians of %d interleaved iterations; eff = max(G, M) / T)\n", cuda::to_string(args.link),
                args.iters);
    std::printf("| op | P | balance | M x N x K | G ms | M ms | serial ms | best cofuse schedule | T ms | eff | hand | T ms | eff |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
      std::printf("| %s | %d | %s | %s | %.3f | %.3f | %.3f | %s | %.3f | %.2f | %s | %.3f | %.2f |\n", r.op.c_str(), r.ranks,
                  r.balance.c_str(), r.shape.c_str(), r.g * 1e3, r.m * 1e3, r.serial * 1e3, r.best.c_str(), r.best_t * 1e3,
                  r.best_eff, r.best_hand.c_str(), r.hand_t * 1e3, r.hand_eff);
    std::cout << "\nrecords " << args.out << "/gpu-link.jsonl, traces " << args.out << "/trace-link-*.json\n";
  } catch (const std::exception& e) {
    std::cerr << "gpu_link_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
