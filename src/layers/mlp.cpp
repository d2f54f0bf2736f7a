// The MLP block: column-parallel -> GeLU -> row-parallel, holding its weights and gradients.
#include <cmath>

#include "cofuse/layers.hpp"
#include "cofuse/tools/random.hpp"
#include "core/common/half.hpp"
#include "layers/layer_math.hpp"

namespace cofuse {

namespace {

// The rows [r0, r0 + rows) and columns [c0, c0 + cols) of a row-major matrix with `ld` columns,
// scaled, as bytes of t.
std::vector<char> block(DType t, const std::vector<double>& full, int64_t ld, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                        double scale) {
  std::vector<char> out(std::size_t(rows * cols) * dtype_size(t));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      detail::store_element(t, out.data(), i * cols + j, full[std::size_t((r0 + i) * ld + c0 + j)] * scale);
    }
  return out;
}

std::vector<double> random_matrix(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<double> v(static_cast<std::size_t>(n));
  fill_random(DType::f64, v.data(), n, seed, stream);
  return v;
}

LinearConfig linear(const MlpConfig& c, bool column) {
  LinearConfig l;
  l.tokens = c.tokens;
  l.in_features = column ? c.hidden : c.ffn;
  l.out_features = column ? c.ffn : c.hidden;
  l.dtype = c.dtype;
  l.sequence_parallel = c.sequence_parallel;
  l.bias = c.bias;
  l.keep_gathered_input = c.keep_gathered_input;
  l.overlap_wgrad = c.overlap_wgrad;
  const int first = column ? 0 : 3;
  l.fprop = c.schedules[first];
  l.dgrad = c.schedules[first + 1];
  l.wgrad = c.schedules[first + 2];
  l.profile = c.profile;
  l.planner_cache = c.planner_cache;
  l.autotune_calls = c.autotune_calls;
  l.tuning_db = c.tuning_db;
  l.exec = c.exec;
  return l;
}

}  // namespace

struct MlpBlock::Impl {
  MlpConfig cfg;
  int rank = 0, ranks = 1;
  ColumnParallelLinear column;
  RowParallelLinear row;
  std::vector<char> params[4], grads[4];
  std::vector<char> h, a, da, dh;  // [T, ffn/P]

  Impl(const MlpConfig& c, MPI_Comm comm, uint64_t seed) : cfg(c), column(linear(c, true), comm), row(linear(c, false), comm) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    const int64_t f_r = c.ffn / ranks;
    const double s1 = 1 / std::sqrt(double(c.hidden)), s2 = 1 / std::sqrt(double(c.ffn));
    params[0] = block(c.dtype, random_matrix(c.ffn * c.hidden, seed, 0), c.hidden, rank * f_r, f_r, 0, c.hidden, s1);
    params[1] = block(c.dtype, random_matrix(c.ffn, seed, 1), c.ffn, 0, 1, rank * f_r, f_r, 0.1);
    params[2] = block(c.dtype, random_matrix(c.hidden * c.ffn, seed, 2), c.ffn, 0, c.hidden, rank * f_r, f_r, s2);
    params[3] = block(c.dtype, random_matrix(c.hidden, seed, 3), c.hidden, 0, 1, 0, c.hidden, 0.1);
    for (int i = 0; i < 4; ++i) grads[i].assign(params[i].size(), 0);
    const std::size_t act = std::size_t(c.tokens * f_r) * dtype_size(c.dtype);
    h.resize(act);
    a.resize(act);
    da.resize(act);
    dh.resize(act);
  }

  void forward(const void* x, void* y) {
    column.forward(x, params[0].data(), cfg.bias ? params[1].data() : nullptr, h.data());
    detail::gelu(cfg.dtype, h.data(), a.data(), int64_t(h.size() / dtype_size(cfg.dtype)));
    row.forward(a.data(), params[2].data(), cfg.bias ? params[3].data() : nullptr, y);
  }

  void backward(const void* dy, void* dx) {
    row.backward(dy, da.data(), grads[2].data(), cfg.bias ? grads[3].data() : nullptr);
    detail::gelu_backward(cfg.dtype, h.data(), da.data(), dh.data(), int64_t(h.size() / dtype_size(cfg.dtype)));
    column.backward(dh.data(), dx, grads[0].data(), cfg.bias ? grads[1].data() : nullptr);
  }
};

MlpBlock::MlpBlock(const MlpConfig& c, MPI_Comm comm, uint64_t seed) : impl_(std::make_unique<Impl>(c, comm, seed)) {}
MlpBlock::~MlpBlock() = default;
void MlpBlock::forward(const void* x, void* y) { impl_->forward(x, y); }
void MlpBlock::backward(const void* dy, void* dx) { impl_->backward(dy, dx); }
void MlpBlock::sgd_step(double lr) {
  for (int i = 0; i < 4; ++i)
    if (impl_->cfg.bias || i % 2 == 0)
      detail::sgd(impl_->cfg.dtype, impl_->params[i].data(), impl_->grads[i].data(),
                  int64_t(impl_->params[i].size() / dtype_size(impl_->cfg.dtype)), lr);
}
std::vector<char>& MlpBlock::parameter(int index) { return impl_->params[index]; }
std::vector<char>& MlpBlock::gradient(int index) { return impl_->grads[index]; }
std::vector<GemmReport> MlpBlock::report() const {
  std::vector<GemmReport> r = impl_->column.report();
  for (const GemmReport& g : impl_->row.report()) r.push_back(g);
  return r;
}
bool MlpBlock::settled() const { return impl_->column.settled() && impl_->row.settled(); }
std::string MlpBlock::explain() const {
  const std::string column = impl_->column.explain(), row = impl_->row.explain();
  return column + (column.empty() || row.empty() ? "" : "\n") + row;
}

}  // namespace cofuse
