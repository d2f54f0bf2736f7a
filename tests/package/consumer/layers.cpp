// The training layers through the installed library (cofuse::cofuse_layers): a column-parallel
// layer whose data gradient (gemm_ar) is auto and tunes online over its first calls; every
// call's dX = dY·W is checked against plain loops. Exits non-zero unless every call is right.
#include <cofuse/cofuse.hpp>
#include <cofuse/layers.hpp>
#include <cofuse/tools/random.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);  // the progress thread's level
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t t = 16, in = 24, out = 8 * size, out_r = 8;
  std::vector<float> w(std::size_t(out * in)), dy(std::size_t(t * out)), x(std::size_t(t * in));
  cofuse::fill_random(cofuse::DType::f32, w.data(), out * in, 7, 0);  // the whole W [out, in] and dY [T, out]
  cofuse::fill_random(cofuse::DType::f32, dy.data(), t * out, 7, 1);
  cofuse::fill_random(cofuse::DType::f32, x.data(), t * in, 7, 2);
  std::vector<float> w_r(std::size_t(out_r * in)), dy_r(std::size_t(t * out_r));
  for (int64_t i = 0; i < out_r; ++i)
    for (int64_t j = 0; j < in; ++j) w_r[std::size_t(i * in + j)] = w[std::size_t((rank * out_r + i) * in + j)];
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < out_r; ++j) dy_r[std::size_t(i * out_r + j)] = dy[std::size_t(i * out + rank * out_r + j)];
  double norm = 0;
  std::vector<double> want(std::size_t(t * in), 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < in; ++j) {
      for (int64_t l = 0; l < out; ++l) want[std::size_t(i * in + j)] += double(dy[std::size_t(i * out + l)]) * w[std::size_t(l * in + j)];
      norm += want[std::size_t(i * in + j)] * want[std::size_t(i * in + j)];
    }
  cofuse::LinearConfig cfg;
  cfg.tokens = t;
  cfg.in_features = in;
  cfg.out_features = out;
  cfg.profile = "this-host-shm";
  cfg.autotune_calls = 4;  // the database is $COFUSE_TUNING_DB (run.sh: a temporary file)
  int ok = 1;
  try {
    cofuse::ColumnParallelLinear layer(cfg, MPI_COMM_WORLD);
    std::vector<float> y(std::size_t(t * out_r)), dx(std::size_t(t * in)), dw(std::size_t(out_r * in));
    for (int call = 0; call < 6; ++call) {
      layer.forward(x.data(), w_r.data(), nullptr, y.data());
      layer.backward(dy_r.data(), dx.data(), dw.data(), nullptr);
      double diff = 0;
      for (std::size_t i = 0; i < want.size(); ++i) diff += (dx[i] - want[i]) * (dx[i] - want[i]);
      const double error = std::sqrt(diff / std::max(norm, 1e-30));
      if (!(error < 1e-5)) ok = 0;
      if (rank == 0)
        std::printf("layers consumer: call %d %s (%s): dX error %.1e\n", call, layer.report()[1].schedule.c_str(),
                    layer.report()[1].decided_by.c_str(), error);
    }
    if (!layer.settled()) ok = 0;
  } catch (const cofuse::Error& e) {
    std::fprintf(stderr, "layers consumer: %s\n", e.what());
    ok = 0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) std::printf("layers consumer: %s\n", ok ? "PASS" : "FAIL");
  MPI_Finalize();
  return ok ? 0 : 1;
}
