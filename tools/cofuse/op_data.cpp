#include "op_data.hpp"

#include <charconv>
#include <random>

#include "cofuse/random.hpp"
#include "cofuse/reference.hpp"

namespace cofuse::cli {

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
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return seed;
}

CommSize comm_size(const OpDesc& d) {
  const double elem = static_cast<double>(dtype_size(d.dtype));
  const double p = d.ranks;
  switch (d.op) {
    case OpKind::ag_gemm: return {"allgather", double(d.m) * double(d.k) * elem, (p - 1) / p, "(P-1)/P"};
    case OpKind::gemm_rs: return {"reduce-scatter", double(d.m) * double(d.n) * elem, (p - 1) / p, "(P-1)/P"};
    case OpKind::gemm_ar: return {"all-reduce", double(d.m) * double(d.n) * elem, 2 * (p - 1) / p, "2(P-1)/P"};
  }
  return {"", 0, 0, ""};
}

std::string shape_text(MatrixShape s) { return "[" + std::to_string(s.rows) + " x " + std::to_string(s.cols) + "]"; }

}  // namespace cofuse::cli
