// Seed 000's worked example through the installed library: gemm_ar on the caller's
// communicator, checked against the reference. Exits non-zero unless the result is right.
#include <cofuse/cofuse.hpp>
#include <cofuse/tools/random.hpp>
#include <cofuse/tools/reference.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);  // the caller owns MPI, not cofuse
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cofuse::OpDesc desc;
  desc.op = cofuse::OpKind::gemm_ar;
  desc.m = 128;
  desc.n = 2048;
  desc.k = 1024 * size;  // 1024 per rank
  desc.ranks = size;
  const cofuse::LocalShapes shapes = desc.local_shapes();
  std::vector<float> a(shapes.a.elements()), b(shapes.b.elements()), c(shapes.c.elements());
  cofuse::fill_random(desc.dtype, a.data(), a.size(), 2024, 2 * rank);
  cofuse::fill_random(desc.dtype, b.data(), b.size(), 2024, 2 * rank + 1);
  int ok = 0;
  try {
    cofuse::run(desc, {a.data(), b.data(), c.data(), nullptr}, MPI_COMM_WORLD);
    const cofuse::CheckResult check = cofuse::check_against_reference(desc, {a.data(), b.data(), c.data()}, MPI_COMM_WORLD);
    ok = check.passed();
    if (rank == 0) std::printf("consumer: %s error %.2e tolerance %.2e: %s\n", desc.to_string().c_str(),
                               check.rel_error, check.tolerance, ok ? "PASS" : "FAIL");
  } catch (const cofuse::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
