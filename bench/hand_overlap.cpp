#include "hand_overlap.hpp"

#include <cublasLt.h>

#include <algorithm>
#include <string>

#include "cofuse/status.hpp"
#include "hand_kernels.hpp"

namespace cofuse::bench {
namespace {

void lt_ok(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::device, std::string(what) + " failed: " + cublasLtGetStatusName(rc) + " (" +
                                       cublasLtGetStatusString(rc) + ")");
}

// The largest power of two (<= 256) that divides the address.
int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 1;
  while (align < 256 && a % (2 * align) == 0) align *= 2;
  return align;
}

char* at(const void* base, int64_t elements) {
  return static_cast<char*>(const_cast<void*>(base)) + elements * 2;  // bf16: 2 bytes
}

void cuda_check(cudaError_t rc, const char* what);

// Records `e` on `from` and makes `to` wait for it.
void order(cudaEvent_t e, cudaStream_t from, cudaStream_t to) {
  cuda_check(cudaEventRecord(e, from), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(to, e, 0), "cudaStreamWaitEvent");
}

}  // namespace

namespace {
void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw Error(ErrorCode::device, std::string(what) + " failed: " + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")");
}
}  // namespace

void cuda_ok(cudaError_t rc, const char* what) { cuda_check(rc, what); }

// ---- LtGemm ----

struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtGemm::LtGemm(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  lt_ok(cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

// Row-major z[m, n] = op(x) op(y) is column-major z^T[n, m] = op(y)^T op(x)^T: y is cuBLASLt's
// A, x its B. A row-major y[k, n] (ld ldy) read column-major is [n, k]: op(y)^T as it stands;
// a stored-transposed y[n, k] reads as [k, n] and needs TRANSA. Likewise x as B.
const LtGemm::Plan& LtGemm::plan(const GemmShape& s, int align_x, int align_y, int align_z) {
  const Key key{s.m, s.n, s.k, s.ldx, s.ldy, s.ldz, int(s.trans_x) | int(s.trans_y) << 1 | int(s.accumulate) << 2,
                align_x | align_y << 10 | align_z << 20};
  auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;
  auto p = std::make_unique<Plan>();
  lt_ok(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = s.trans_y ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_x ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_ok(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute");
  lt_ok(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute");
  lt_ok(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, s.trans_y ? s.k : s.n, s.trans_y ? s.n : s.k, s.ldy),
        "cublasLtMatrixLayoutCreate");
  lt_ok(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, s.trans_x ? s.m : s.k, s.trans_x ? s.k : s.m, s.ldx),
        "cublasLtMatrixLayoutCreate");
  lt_ok(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, s.n, s.m, s.ldz), "cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t pref = nullptr;
  lt_ok(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws = workspace_bytes_;
  lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "cublasLtMatmulPreferenceSetAttribute");
  const uint32_t ax = uint32_t(align_y), bx = uint32_t(align_x), cx = uint32_t(align_z);
  lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ax, sizeof ax),
        "cublasLtMatmulPreferenceSetAttribute");
  lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &bx, sizeof bx),
        "cublasLtMatmulPreferenceSetAttribute");
  lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &cx, sizeof cx),
        "cublasLtMatmulPreferenceSetAttribute");
  lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &cx, sizeof cx),
        "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  lt_ok(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c, pref, 1,
                                       &result, &found_count),
        "cublasLtMatmulAlgoGetHeuristic");
  if (found_count < 1)
    throw Error(ErrorCode::device, "cuBLASLt has no bf16 algorithm for m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                                       " k=" + std::to_string(s.k));
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void LtGemm::run(const GemmShape& s, const void* x, const void* y, void* z, void* workspace, cudaStream_t stream) {
  if (s.m == 0 || s.n == 0 || s.k == 0) return;  // nothing to compute (and cuBLASLt refuses empty layouts)
  const Plan& p = plan(s, alignment(x), alignment(y), alignment(z));
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  lt_ok(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, y, p.a, x, p.b, &beta, z, p.c, z, p.c, &p.algo,
                       workspace, workspace_bytes_, stream),
        "cublasLtMatmul");
}

// ---- HandOverlap ----

struct HandOverlap::Rank {
  cudaStream_t compute = nullptr, d2h = nullptr, h2d = nullptr, reduce = nullptr;
  void* workspace = nullptr;  // cuBLASLt's, compute stream only
  void* scratch = nullptr;    // ag_gemm: gathered A when the caller has none; gemm_rs: send then
                              // receive blocks; gemm_ar: received partials
  ~Rank() {
    for (cudaStream_t s : {compute, d2h, h2d, reduce})
      if (s) cudaStreamDestroy(s);
    if (workspace) cudaFree(workspace);
    if (scratch) cudaFree(scratch);
  }
};

HandOverlap::HandOverlap(const OpDesc& d, int chunks, std::size_t piece_bytes)
    : desc_(d), chunks_(chunks), piece_bytes_(piece_bytes) {
  const Status valid = d.validate();
  if (!valid.ok()) throw Error(valid);
  const int p = d.ranks;
  if (d.dtype != DType::bf16 || d.trans_a || d.trans_b)
    throw Error(ErrorCode::invalid_argument, "HandOverlap: bf16 without transposes only");
  if ((d.op != OpKind::gemm_ar && d.axis != Axis::m) || chunks < 1 || piece_bytes == 0 || p > kMaxSumInputs + 1)
    throw Error(ErrorCode::invalid_argument, "HandOverlap: axis m (or gemm_ar), chunks >= 1, piece_bytes > 0, P <= 9");
  const int64_t pieces = int64_t(p) * chunks;  // every rank's block (gemm_ar: C) in chunks
  if (d.m % pieces != 0)
    throw Error(ErrorCode::invalid_argument, "HandOverlap: M=" + std::to_string(d.m) + " does not split into " +
                                                 std::to_string(pieces) + " row chunks");
  const int64_t m = d.m, n = d.n, k = d.k;
  int64_t scratch_elements = 0;
  if (d.op == OpKind::ag_gemm) {
    scratch_elements = m * k;
    host_bytes_ = std::size_t(m * k) * 2;
  } else if (d.op == OpKind::gemm_rs) {
    scratch_elements = 2 * (p - 1) * (m / p) * n;
    host_bytes_ = std::size_t(p) * p * std::size_t(m / p * n) * 2;
  } else {
    scratch_elements = (p - 1) * (m / p) * n;
    host_bytes_ = std::size_t(p) * std::size_t(m * n) * 2;
  }
  cuda_ok(cudaStreamCreateWithFlags(&origin_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_ok(cudaEventCreate(&start_), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&end_), "cudaEventCreate");
  cuda_ok(cudaHostAlloc(&host_, host_bytes_, cudaHostAllocDefault), "cudaHostAlloc");
  for (int r = 0; r < p; ++r) {
    auto rank = std::make_unique<Rank>();
    for (cudaStream_t* s : {&rank->compute, &rank->d2h, &rank->h2d, &rank->reduce})
      cuda_ok(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda_ok(cudaMalloc(&rank->workspace, lt_.workspace_bytes()), "cudaMalloc");
    if (scratch_elements > 0) cuda_ok(cudaMalloc(&rank->scratch, std::size_t(scratch_elements) * 2), "cudaMalloc");
    ranks_.push_back(std::move(rank));
  }
}

HandOverlap::~HandOverlap() {
  if (origin_) cudaStreamSynchronize(origin_);
  ranks_.clear();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timers_) cudaEventDestroy(e);
  if (start_) cudaEventDestroy(start_);
  if (end_) cudaEventDestroy(end_);
  if (origin_) cudaStreamDestroy(origin_);
  if (host_) cudaFreeHost(host_);
}

std::string HandOverlap::name() const { return "hand,chunks=" + std::to_string(chunks_); }

cudaEvent_t HandOverlap::event() {
  if (next_event_ == events_.size()) {
    cudaEvent_t e = nullptr;
    cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    events_.push_back(e);
  }
  return events_[next_event_++];
}

void HandOverlap::start_gemm_timer(int r) {
  if (!time_gemms_) return;
  if (next_timer_ + 2 > timers_.size())
    for (int i = 0; i < 2; ++i) {
      cudaEvent_t e = nullptr;
      cuda_ok(cudaEventCreate(&e), "cudaEventCreate");
      timers_.push_back(e);
    }
  timed_.push_back({timers_[next_timer_], timers_[next_timer_ + 1]});
  next_timer_ += 2;
  cuda_ok(cudaEventRecord(timed_.back().first, ranks_[r]->compute), "cudaEventRecord");
}

void HandOverlap::stop_gemm_timer(int r) {
  if (time_gemms_) cuda_ok(cudaEventRecord(timed_.back().second, ranks_[r]->compute), "cudaEventRecord");
}

void HandOverlap::gemm(int r, const GemmShape& s, const void* x, const void* y, void* z) {
  if (part_ == Part::comm_only) return;
  start_gemm_timer(r);
  lt_.run(s, x, y, z, ranks_[r]->workspace, ranks_[r]->compute);
  stop_gemm_timer(r);
}

std::size_t HandOverlap::upload(int r, const void* src, void* host, std::size_t bytes) {
  const std::size_t first = next_event_;
  if (part_ == Part::gemm_only) return first;
  for (std::size_t done = 0; done < bytes; done += piece_bytes_) {
    const std::size_t len = std::min(piece_bytes_, bytes - done);
    cuda_ok(cudaMemcpyAsync(static_cast<char*>(host) + done, static_cast<const char*>(src) + done, len,
                            cudaMemcpyDeviceToHost, ranks_[r]->d2h),
            "cudaMemcpyAsync (device to host)");
    cuda_ok(cudaEventRecord(event(), ranks_[r]->d2h), "cudaEventRecord");
  }
  return first;
}

void HandOverlap::download(int r, const void* host, void* dst, std::size_t bytes, std::size_t first) {
  if (part_ == Part::gemm_only) return;
  std::size_t i = first;
  for (std::size_t done = 0; done < bytes; done += piece_bytes_, ++i) {
    const std::size_t len = std::min(piece_bytes_, bytes - done);
    cuda_ok(cudaStreamWaitEvent(ranks_[r]->h2d, events_[i], 0), "cudaStreamWaitEvent");
    cuda_ok(cudaMemcpyAsync(static_cast<char*>(dst) + done, static_cast<const char*>(host) + done, len,
                            cudaMemcpyHostToDevice, ranks_[r]->h2d),
            "cudaMemcpyAsync (host to device)");
  }
}

void HandOverlap::ag_gemm(const std::vector<OpBuffers>& buffers) {
  const int p = desc_.ranks;
  const int64_t k = desc_.k, nl = desc_.n / p, shard = desc_.m / p, rows = shard / chunks_;
  const std::size_t chunk_bytes = std::size_t(rows * k) * 2;
  auto gathered = [&](int r) { return buffers[r].gathered ? buffers[r].gathered : ranks_[r]->scratch; };
  // Every shard to the host once, chunk by chunk: first[j][c] is its first piece event.
  std::vector<std::vector<std::size_t>> first(p, std::vector<std::size_t>(chunks_));
  for (int c = 0; c < chunks_; ++c)
    for (int j = 0; j < p; ++j)
      first[j][c] = upload(j, at(buffers[j].a, c * rows * k), at(host_, (j * shard + c * rows) * k), chunk_bytes);
  const GemmShape piece{rows, nl, k, k, nl, nl};
  for (int r = 0; r < p; ++r) {
    Rank& me = *ranks_[r];
    // Its own shard into its gathered A (a copy within the rank, on the device).
    if (part_ != Part::gemm_only)
      cuda_ok(cudaMemcpyAsync(at(gathered(r), r * shard * k), buffers[r].a, std::size_t(shard * k) * 2,
                              cudaMemcpyDeviceToDevice, me.h2d),
              "cudaMemcpyAsync (device to device)");
    for (int c = 0; c < chunks_; ++c)
      gemm(r, piece, at(buffers[r].a, c * rows * k), buffers[r].b, at(buffers[r].c, (r * shard + c * rows) * nl));
    for (int s = 1; s < p; ++s) {
      const int j = (r + s) % p;
      for (int c = 0; c < chunks_; ++c) {
        const int64_t row0 = j * shard + c * rows;
        download(r, at(host_, row0 * k), at(gathered(r), row0 * k), chunk_bytes, first[j][c]);
        if (part_ == Part::all) order(event(), me.h2d, me.compute);
        gemm(r, piece, at(gathered(r), row0 * k), buffers[r].b, at(buffers[r].c, row0 * nl));
      }
    }
  }
}

void HandOverlap::gemm_rs(const std::vector<OpBuffers>& buffers) {
  const int p = desc_.ranks;
  const int64_t n = desc_.n, kl = desc_.k / p, block = desc_.m / p, rows = block / chunks_;
  const std::size_t chunk_bytes = std::size_t(rows * n) * 2;
  // Rank r's scratch: P-1 send blocks, then P-1 receive blocks (slot i: from rank r + 1 + i).
  auto send = [&](int r, int j) { return at(ranks_[r]->scratch, ((j - r - 1 + p) % p) * block * n); };
  auto recv = [&](int r, int from) { return at(ranks_[r]->scratch, ((p - 1) + (from - r - 1 + p) % p) * block * n); };
  const GemmShape piece{rows, n, kl, kl, n, n};
  std::vector<std::vector<cudaEvent_t>> arrived(p);
  for (int s = 1; s < p; ++s)
    for (int r = 0; r < p; ++r) {
      const int j = (r + s) % p;  // the block for rank r + s
      Rank& me = *ranks_[r];
      for (int c = 0; c < chunks_; ++c) {
        gemm(r, piece, at(buffers[r].a, (j * block + c * rows) * kl), buffers[r].b, send(r, j) + c * rows * n * 2);
        if (part_ == Part::all) order(event(), me.compute, me.d2h);
        void* host = at(host_, ((r * p + j) * block + c * rows) * n);
        const std::size_t first = upload(r, send(r, j) + c * rows * n * 2, host, chunk_bytes);
        download(j, host, recv(j, r) + c * rows * n * 2, chunk_bytes, first);
        if (part_ != Part::gemm_only) {
          cudaEvent_t e = event();
          cuda_ok(cudaEventRecord(e, ranks_[j]->h2d), "cudaEventRecord");
          arrived[j].push_back(e);
        }
      }
    }
  for (int r = 0; r < p; ++r) {
    Rank& me = *ranks_[r];
    for (int c = 0; c < chunks_; ++c)
      gemm(r, piece, at(buffers[r].a, (r * block + c * rows) * kl), buffers[r].b, at(buffers[r].c, c * rows * n));
    if (part_ == Part::gemm_only) continue;
    for (cudaEvent_t e : arrived[r]) cuda_ok(cudaStreamWaitEvent(me.compute, e, 0), "cudaStreamWaitEvent");
    std::vector<const uint16_t*> in;
    for (int i = 1; i < p; ++i) in.push_back(reinterpret_cast<const uint16_t*>(recv(r, (r + i) % p)));
    cuda_ok(hand_sum_bf16(static_cast<uint16_t*>(buffers[r].c), in.data(), int(in.size()), std::size_t(block * n), me.compute),
            "hand_sum_bf16");
  }
}

void HandOverlap::gemm_ar(const std::vector<OpBuffers>& buffers) {
  const int p = desc_.ranks;
  const int q_count = p * chunks_;
  const int64_t n = desc_.n, kl = desc_.k / p, rows = desc_.m / q_count;
  const std::size_t chunk_bytes = std::size_t(rows * n) * 2;
  const GemmShape piece{rows, n, kl, kl, n, n};
  // Root r's receive slot for chunk q (q = r mod P) from rank j.
  auto recv = [&](int r, int q, int j) { return at(ranks_[r]->scratch, ((q / p) * (p - 1) + (j - r - 1 + p) % p) * rows * n); };
  auto host = [&](int q, int j) { return at(host_, (int64_t(q) * p + j) * rows * n); };
  std::vector<cudaEvent_t> summed(q_count, nullptr);
  auto broadcast = [&](int q) {
    const int root = q % p;
    Rank& rt = *ranks_[root];
    if (part_ == Part::gemm_only) return;
    cuda_ok(cudaStreamWaitEvent(rt.d2h, summed[q], 0), "cudaStreamWaitEvent");
    const std::size_t first = upload(root, at(buffers[root].c, q * rows * n), host(q, root), chunk_bytes);
    for (int j = 0; j < p; ++j)
      if (j != root) download(j, host(q, root), at(buffers[j].c, q * rows * n), chunk_bytes, first);
  };
  for (int q = 0; q < q_count; ++q) {
    const int root = q % p;
    Rank& rt = *ranks_[root];
    for (int r = 0; r < p; ++r) gemm(r, piece, at(buffers[r].a, q * rows * kl), buffers[r].b, at(buffers[r].c, q * rows * n));
    if (part_ != Part::gemm_only) {
      if (part_ == Part::all) order(event(), rt.compute, rt.reduce);
      std::vector<const uint16_t*> in;
      for (int j = 0; j < p; ++j) {
        if (j == root) continue;
        if (part_ == Part::all) order(event(), ranks_[j]->compute, ranks_[j]->d2h);
        const std::size_t first = upload(j, at(buffers[j].c, q * rows * n), host(q, j), chunk_bytes);
        download(root, host(q, j), recv(root, q, j), chunk_bytes, first);
        order(event(), rt.h2d, rt.reduce);
        in.push_back(reinterpret_cast<const uint16_t*>(recv(root, q, j)));
      }
      cuda_ok(hand_sum_bf16(reinterpret_cast<uint16_t*>(at(buffers[root].c, q * rows * n)), in.data(), int(in.size()),
                            std::size_t(rows * n), rt.reduce),
              "hand_sum_bf16");
      summed[q] = event();
      cuda_ok(cudaEventRecord(summed[q], rt.reduce), "cudaEventRecord");
    }
    // The previous chunk's result goes out after this chunk's partials (a broadcast queued
    // first would hold this rank's next partials behind a sum that waits for its peers).
    if (q > 0) broadcast(q - 1);
  }
  broadcast(q_count - 1);
}

double HandOverlap::run(const std::vector<OpBuffers>& buffers, Part part, bool time_gemms) {
  const int p = desc_.ranks;
  if (int(buffers.size()) != p)
    throw Error(ErrorCode::invalid_argument, "HandOverlap::run: " + std::to_string(buffers.size()) + " buffers for " +
                                                 std::to_string(p) + " ranks");
  for (const OpBuffers& b : buffers)
    if (!b.a || !b.b || !b.c) throw Error(ErrorCode::invalid_argument, "HandOverlap::run: a null buffer");
  part_ = part;
  time_gemms_ = time_gemms;
  next_event_ = 0;
  next_timer_ = 0;
  timed_.clear();
  // Work the caller queued on the legacy stream (uploads, poisoning) finishes first.
  cuda_ok(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  cuda_ok(cudaEventRecord(start_, origin_), "cudaEventRecord");
  for (auto& rank : ranks_)
    for (cudaStream_t s : {rank->compute, rank->d2h, rank->h2d, rank->reduce})
      cuda_ok(cudaStreamWaitEvent(s, start_, 0), "cudaStreamWaitEvent");
  if (desc_.op == OpKind::ag_gemm) ag_gemm(buffers);
  else if (desc_.op == OpKind::gemm_rs) gemm_rs(buffers);
  else gemm_ar(buffers);
  for (auto& rank : ranks_)
    for (cudaStream_t s : {rank->compute, rank->d2h, rank->h2d, rank->reduce}) order(event(), s, origin_);
  cuda_ok(cudaEventRecord(end_, origin_), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(end_), "cudaEventSynchronize");
  cuda_ok(cudaGetLastError(), "cudaGetLastError");
  float ms = 0;
  cuda_ok(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime");
  spans_.clear();
  for (const auto& [a, b] : timed_) {
    float t0 = 0, t1 = 0;
    cuda_ok(cudaEventElapsedTime(&t0, start_, a), "cudaEventElapsedTime");
    cuda_ok(cudaEventElapsedTime(&t1, start_, b), "cudaEventElapsedTime");
    spans_.push_back({double(t0) * 1e-3, double(t1) * 1e-3});
  }
  return double(ms) * 1e-3;
}

}  // namespace cofuse::bench
