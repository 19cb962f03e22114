// NCCL all-reduce and all-gather bus bandwidth on every visible GPU of this host, one process
// (ncclCommInitAll), at decode sizes (4 KB - 1 MB) and large sizes (up to 256 MB): the ceilings
// that tensor-parallel figures in docs/PERF.md are reported next to. NVLink multicast stays off.
// usage: nccl_bench [max_mib]
#include <cuda_runtime.h>
#include <nccl.h>

#include "backends/cuda/peer_all_reduce.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    auto e = (x);                                                                      \
    if (e != 0) {                                                                      \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(e)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// pagellm's one-shot NVLink all-reduce (the kernel tensor parallelism uses at decode sizes) at the
// same sizes, after checking its sums: every rank's buffer holds small integers, so the bf16 sum
// is exact and must be equal on every rank.
bool peer_all_reduce_bench(int n, const std::vector<cudaStream_t>& streams) {
  using pagellm::cuda::PeerAllReduce;
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  const size_t max_bytes = 512 * 1024;
  std::string why;
  auto peer = PeerAllReduce::create(devices, max_bytes, &why);
  if (!peer) {
    std::printf("peer all-reduce: not available (%s)\n", why.c_str());
    return n < 2;
  }
  std::vector<void*> data(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&data[size_t(d)], max_bytes));
  }
  auto bf16 = [](float f) {  // exact for small integers
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t(u >> 16);
  };
  bool ok = true;
  std::printf("%10s %14s %s\n", "bytes", "peer AR us", "check");
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / 2;
    for (int d = 0; d < n; ++d) {
      std::vector<uint16_t> h(count);
      for (size_t i = 0; i < count; ++i) h[i] = bf16(float(i % 7 + d));
      CK(cudaSetDevice(d));
      CK(cudaMemcpy(data[size_t(d)], h.data(), bytes, cudaMemcpyHostToDevice));
    }
    auto run = [&] {
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(peer->run(d, data[size_t(d)], count, pagellm::DType::kBF16, streams[size_t(d)]));
      }
    };
    auto sync_all = [&] {
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamSynchronize(streams[size_t(d)]));
      }
    };
    run();
    sync_all();
    int bad = 0;
    for (int d = 0; d < n; ++d) {
      std::vector<uint16_t> h(count);
      CK(cudaSetDevice(d));
      CK(cudaMemcpy(h.data(), data[size_t(d)], bytes, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i)
        bad += h[i] != bf16(float(n * (i % 7) + n * (n - 1) / 2));
    }
    ok &= bad == 0;
    const int iters = 500;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) run();
    sync_all();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    std::printf("%10zu %14.1f %s\n", bytes, us, bad == 0 ? "ok" : "WRONG SUMS");
  }
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(data[size_t(d)]));
  }
  return ok;
}

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
  return peer_all_reduce_bench(n, streams) ? 0 : 1;
}
