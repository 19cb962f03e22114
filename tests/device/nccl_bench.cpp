// NCCL all-reduce and all-gather bus bandwidth on every visible GPU of this host, one process
// (ncclCommInitAll), at decode sizes (4 KB - 1 MB) and large sizes (up to 256 MB): the ceilings
// that tensor-parallel figures in docs/PERF.md are reported next to. NVLink multicast stays off.
// usage: nccl_bench [max_mib]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    auto e = (x);                                                                      \
    if (e != 0) {                                                                      \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(e)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const size_t max_bytes = size_t(argc > 1 ? std::atoi(argv[1]) : 256) << 20;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  CK(ncclCommInitAll(comms.data(), n, nullptr));
  std::vector<void*> buf(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&buf[size_t(d)], max_bytes));
    CK(cudaMalloc(&out[size_t(d)], max_bytes * size_t(n)));
    CK(cudaMemset(buf[size_t(d)], 0, max_bytes));
    CK(cudaStreamCreate(&streams[size_t(d)]));
  }
  std::printf("nccl bench: %d GPUs, bf16; busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (all-gather)\n", n);
  std::printf("%10s %14s %14s %14s %14s\n", "bytes", "allreduce us", "AR busbw GB/s", "allgather us",
              "AG busbw GB/s");
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const size_t count = bytes / 2;
    auto sync_all = [&] {
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamSynchronize(streams[size_t(d)]));
      }
    };
    double us[2];
    for (int op = 0; op < 2; ++op) {
      auto run = [&] {
        CK(ncclGroupStart());
        for (int d = 0; d < n; ++d) {
          if (op == 0)
            CK(ncclAllReduce(buf[size_t(d)], buf[size_t(d)], count, ncclBfloat16, ncclSum, comms[size_t(d)],
                             streams[size_t(d)]));
          else
            CK(ncclAllGather(buf[size_t(d)], out[size_t(d)], count / size_t(n), ncclBfloat16, comms[size_t(d)],
                             streams[size_t(d)]));
        }
        CK(ncclGroupEnd());
      };
      for (int i = 0; i < 5; ++i) run();
      sync_all();
      const int iters = bytes < (1 << 20) ? 200 : 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run();
      sync_all();
      us[op] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    }
    const double ar = double(bytes) / us[0] / 1e3 * 2.0 * (n - 1) / n;
    const double ag = double(bytes) / us[1] / 1e3 * double(n - 1) / n;
    std::printf("%10zu %14.1f %14.1f %14.1f %14.1f\n", bytes, us[0], ar, us[1], ag);
  }
  for (auto c : comms) ncclCommDestroy(c);
  return 0;
}
