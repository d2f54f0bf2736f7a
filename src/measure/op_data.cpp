#include "measure/op_data.hpp"

#include <charconv>
#include <optional>
#include <random>

#include "cofuse/tools/random.hpp"
#include "cofuse/tools/reference.hpp"
#include "core/exec_model/times.hpp"
#include "cpu/comm/failure.hpp"
#include "cpu/comm/mpi_util.hpp"

namespace cofuse::measure {

Inputs::Inputs(const OpDesc& d, uint64_t seed, int rank)
    : shapes(d.local_shapes()),
      dtype(d.dtype),
      a(shapes.a, d.dtype),
      b(shapes.b, d.dtype),
      c(shapes.c, d.dtype),
      gathered(shapes.gathered, d.dtype) {
  fill_random(d.dtype, a.data(), shapes.a.elements(), seed, 2 * uint64_t(rank));
  fill_random(d.dtype, b.data(), shapes.b.elements(), seed, 2 * uint64_t(rank) + 1);
  poison_outputs();
}

void Inputs::poison_outputs() {
  fill_nan(dtype, c.data(), shapes.c.elements());
  if (gathered.data()) fill_nan(dtype, gathered.data(), shapes.gathered.elements());
}

uint64_t agree_seed(const std::string& text) {
  uint64_t seed = 0;
  if (!text.empty()) std::from_chars(text.data(), text.data() + text.size(), seed);
  else seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  detail::mpi_check(MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return seed;
}

bool ok_everywhere(bool ok, MPI_Comm comm) {
  return !detail::failed_rank(comm, ok ? std::nullopt : std::optional(ErrorCode::io));
}

CommSize comm_size(const OpDesc& d) {
  const double elem = static_cast<double>(dtype_size(d.dtype));
  auto size = [&](const char* name, double bytes, Collective kind) {
    return CommSize{name, bytes, detail::bus_factor(kind, d.ranks), detail::bus_factor_text(kind)};
  };
  switch (d.op) {
    case OpKind::ag_gemm: return size("allgather", double(d.m) * double(d.k) * elem, Collective::allgather);
    case OpKind::gemm_rs: return size("reduce-scatter", double(d.m) * double(d.n) * elem, Collective::reduce_scatter);
    case OpKind::gemm_ar: return size("all-reduce", double(d.m) * double(d.n) * elem, Collective::allreduce);
  }
  return {"", 0, 0, ""};
}

std::string shape_text(MatrixShape s) { return "[" + std::to_string(s.rows) + " x " + std::to_string(s.cols) + "]"; }

}  // namespace cofuse::measure
