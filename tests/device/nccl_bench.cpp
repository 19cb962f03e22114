// NCCL all-reduce and all-gather bus bandwidth on every visible GPU of this host, one process
// (ncclCommInitAll), at decode sizes (4 KB - 1 MB) and large sizes (up to 256 MB): the ceilings
// that tensor-parallel figures in docs/PERF.md are reported next to. NVLink multicast stays off.
// usage: nccl_bench [max_mib]
#include <cuda_runtime.h>
#include <nccl.h>

#include "backends/cuda/kernels.h"
#include "backends/cuda/peer_all_reduce.h"

#include <chrono>
#include <cmath>
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
// Waits for every GPU's stream (stream d on device d).
void sync_all(const std::vector<cudaStream_t>& streams) {
  for (size_t d = 0; d < streams.size(); ++d) {
    CK(cudaSetDevice(int(d)));
    CK(cudaStreamSynchronize(streams[d]));
  }
}

// The all-reduce fused with the residual add and RMSNorm (decode rows of 4096 and 8192): checked
// against a host reference of the same roundings (within 1 bf16 ulp for the rsqrt) and equal on
// every rank, then timed beside the one-shot all-reduce followed by pagellm's rms_norm kernel.
bool fused_norm_bench(pagellm::cuda::PeerAllReduce& peer, int n, const std::vector<cudaStream_t>& streams) {
  bool ok = true;
  std::printf("%6s %6s %16s %22s %s\n", "rows", "hidden", "fused us", "all-reduce + norm us", "check");
  for (int hidden : {4096, 8192})
    for (int rows : {1, 16, 64}) {
      const size_t count = size_t(rows) * hidden, bytes = count * 2;
      if (!peer.fits_norm(nullptr, rows, hidden, pagellm::DType::kBF16) && bytes > 512 * 1024) continue;
      std::vector<std::vector<uint16_t>> x(static_cast<size_t>(n), std::vector<uint16_t>(count));
      std::vector<uint16_t> res0(count), w(static_cast<size_t>(hidden));
      for (size_t i = 0; i < count; ++i) {
        res0[i] = pagellm::f32_to_bf16(float(int(i % 13) - 6) * 0.125f);
        for (int d = 0; d < n; ++d) x[size_t(d)][i] = pagellm::f32_to_bf16(float(int((i * 7 + d) % 11) - 5) * 0.25f);
      }
      for (int h = 0; h < hidden; ++h) w[size_t(h)] = pagellm::f32_to_bf16(0.5f + float(h % 5) * 0.25f);
      const size_t nr = static_cast<size_t>(n);
      std::vector<void*> dx(nr), dres(nr), dw(nr), dout(nr);
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        for (void** p : {&dx[size_t(d)], &dres[size_t(d)], &dout[size_t(d)]}) CK(cudaMalloc(p, bytes));
        CK(cudaMalloc(&dw[size_t(d)], size_t(hidden) * 2));
        CK(cudaMemcpy(dx[size_t(d)], x[size_t(d)].data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dres[size_t(d)], res0.data(), bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dw[size_t(d)], w.data(), size_t(hidden) * 2, cudaMemcpyHostToDevice));
      }
      auto fused = [&] {
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          CK(peer.run_add_rms_norm(d, dx[size_t(d)], dres[size_t(d)], dw[size_t(d)], dout[size_t(d)], rows,
                                   hidden, 1e-5f, pagellm::DType::kBF16, streams[size_t(d)]));
        }
      };
      auto unfused = [&] {
        for (int d = 0; d < n; ++d) {
          CK(cudaSetDevice(d));
          CK(peer.run(d, dx[size_t(d)], count, pagellm::DType::kBF16, streams[size_t(d)]));
          pagellm::cuda::RmsNormParams p{pagellm::DType::kBF16, dx[size_t(d)], dres[size_t(d)], dw[size_t(d)],
                                         dout[size_t(d)], rows, hidden, 1e-5f};
          CK(pagellm::cuda::rms_norm(p, streams[size_t(d)]));
        }
      };
      std::printf("  rows %d hidden %d: first call\n", rows, hidden);
      fused();
      sync_all(streams);
      // Host reference.
      int bad = 0;
      std::vector<uint16_t> want_res(count), want_out(count);
      for (int r = 0; r < rows; ++r) {
        double sumsq = 0;
        for (int h = 0; h < hidden; ++h) {
          const size_t i = size_t(r) * hidden + size_t(h);
          float s = 0;
          for (int d = 0; d < n; ++d) s += pagellm::bf16_to_f32(x[size_t(d)][i]);
          const float v = pagellm::bf16_to_f32(pagellm::f32_to_bf16(pagellm::bf16_to_f32(pagellm::f32_to_bf16(s)) + pagellm::bf16_to_f32(res0[i])));
          want_res[i] = pagellm::f32_to_bf16(v);
          sumsq += double(v) * v;
        }
        const float inv = float(1.0 / std::sqrt(sumsq / hidden + 1e-5));
        for (int h = 0; h < hidden; ++h) {
          const size_t i = size_t(r) * hidden + size_t(h);
          want_out[i] = pagellm::f32_to_bf16(pagellm::bf16_to_f32(w[size_t(h)]) *
                                      pagellm::bf16_to_f32(pagellm::f32_to_bf16(pagellm::bf16_to_f32(want_res[i]) * inv)));
        }
      }
      std::vector<uint16_t> out0;
      for (int d = 0; d < n; ++d) {
        std::vector<uint16_t> got_res(count), got_out(count);
        CK(cudaSetDevice(d));
        CK(cudaMemcpy(got_res.data(), dres[size_t(d)], bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got_out.data(), dout[size_t(d)], bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; ++i) {
          bad += got_res[i] != want_res[i];
          const float a = pagellm::bf16_to_f32(got_out[i]), b = pagellm::bf16_to_f32(want_out[i]);
          bad += std::fabs(a - b) > std::fabs(b) * (1.f / 64) + 1e-6f;
        }
        if (d == 0) out0 = got_out;
        bad += got_out != out0;  // every rank the same bits
      }
      ok &= bad == 0;
      const int iters = 300;
      double us[2];
      for (int k = 0; k < 2; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) k == 0 ? fused() : unfused();
        sync_all(streams);
        us[k] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      }
      std::printf("%6d %6d %16.1f %22.1f %s\n", rows, hidden, us[0], us[1], bad == 0 ? "ok" : "WRONG");
      for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        for (void* p : {dx[size_t(d)], dres[size_t(d)], dw[size_t(d)], dout[size_t(d)]}) CK(cudaFree(p));
      }
    }
  return ok;
}

// Calls of changing sizes, each checked on every rank: a call empties the receive buffer of the
// call before with the size that one had, so sizes that grow and shrink must all come out exact,
// and every third call is an all-gather, which shares the buffers. One all-reduce sends the
// all-ones NaN (the value that marks an empty slot): it must come back as a NaN, not hang.
bool churn_check(pagellm::cuda::PeerAllReduce& peer, int n,
                 const std::vector<cudaStream_t>& streams, const std::vector<void*>& data,
                 size_t max_bytes) {
  int bad = 0;
  uint32_t seed = 12345;
  std::vector<void*> gathered(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&gathered[size_t(d)], max_bytes * size_t(n)));
  }
  for (int call = 0; call < 300; ++call) {
    seed = seed * 1664525u + 1013904223u;
    const size_t count = (size_t(seed >> 8) % (max_bytes / 16) + 1) * 8;  // 16 bytes to max_bytes
    const bool gather = call % 3 == 2, nan_call = call == 151;
    std::vector<std::vector<uint16_t>> h(static_cast<size_t>(n), std::vector<uint16_t>(count));
    for (int d = 0; d < n; ++d) {
      for (size_t i = 0; i < count; ++i)
        h[size_t(d)][i] = pagellm::f32_to_bf16(float(int((i + call) % 9) - d));
      if (nan_call) h[size_t(d)][count / 2] = 0xffff;
      CK(cudaSetDevice(d));
      CK(cudaMemcpy(data[size_t(d)], h[size_t(d)].data(), count * 2, cudaMemcpyHostToDevice));
    }
    for (int d = 0; d < n; ++d) {
      CK(cudaSetDevice(d));
      if (gather)
        CK(peer.all_gather(d, data[size_t(d)], gathered[size_t(d)], count, pagellm::DType::kBF16,
                           streams[size_t(d)]));
      else
        CK(peer.run(d, data[size_t(d)], count, pagellm::DType::kBF16, streams[size_t(d)]));
    }
    sync_all(streams);
    for (int d = 0; d < n; ++d) {
      std::vector<uint16_t> got(gather ? count * size_t(n) : count);
      CK(cudaSetDevice(d));
      CK(cudaMemcpy(got.data(), gather ? gathered[size_t(d)] : data[size_t(d)], got.size() * 2,
                    cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) {
        if (gather) {
          for (int r = 0; r < n; ++r) bad += got[size_t(r) * count + i] != h[size_t(r)][i];
          continue;
        }
        float want = 0;
        for (int r = 0; r < n; ++r) want += pagellm::bf16_to_f32(h[size_t(r)][i]);
        const float g = pagellm::bf16_to_f32(got[i]);
        bad += std::isnan(want) ? !std::isnan(g) : g != want;
      }
    }
  }
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(gathered[size_t(d)]));
  }
  std::printf(
      "peer all-reduce and all-gather, 300 calls of random sizes (one sending the empty-slot "
      "NaN): %s\n",
      bad == 0 ? "ok" : "WRONG");
  return bad == 0;
}

// Microseconds per all-reduce of `count` bf16 inside CUDA graphs (100 calls per graph, one graph
// per GPU), as the decode step runs it: no host launch cost.
double graph_us(pagellm::cuda::PeerAllReduce& peer, int n, const std::vector<cudaStream_t>& streams,
                const std::vector<void*>& data, size_t count) {
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(streams[size_t(d)], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; ++i)
      CK(peer.run(d, data[size_t(d)], count, pagellm::DType::kBF16, streams[size_t(d)]));
    CK(cudaStreamEndCapture(streams[size_t(d)], &g));
    CK(cudaGraphInstantiate(&execs[size_t(d)], g, 0));
    CK(cudaGraphDestroy(g));
  }
  auto launch = [&] {
    for (int d = 0; d < n; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaGraphLaunch(execs[size_t(d)], streams[size_t(d)]));
    }
  };
  launch();
  sync_all(streams);
  const int reps = 10;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) launch();
  sync_all(streams);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      (reps * 100);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaGraphExecDestroy(execs[size_t(d)]));
  }
  return us;
}

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
  std::printf("%10s %14s %16s %s\n", "bytes", "peer AR us", "in a graph us", "check");
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
    run();
    sync_all(streams);
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
    sync_all(streams);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    std::printf("%10zu %14.1f %16.2f %s\n", bytes, us, graph_us(*peer, n, streams, data, count),
                bad == 0 ? "ok" : "WRONG SUMS");
  }
  ok &= churn_check(*peer, n, streams, data, max_bytes);
  for (int d = 0; d < n; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(data[size_t(d)]));
  }
  return ok && fused_norm_bench(*peer, n, streams);
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each line survives a timeout
  // One host thread drives every GPU here: a kernel loaded lazily behind a one-shot all-reduce that
  // is waiting for its peers would wait for that device to go idle, and the peers' kernels are
  // launched by this same thread afterwards (a deadlock; pagellm gives each rank its own thread).
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
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
      sync_all(streams);
      const int iters = bytes < (1 << 20) ? 200 : 20;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run();
      sync_all(streams);
      us[op] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    }
    const double ar = double(bytes) / us[0] / 1e3 * 2.0 * (n - 1) / n;
    const double ag = double(bytes) / us[1] / 1e3 * double(n - 1) / n;
    std::printf("%10zu %14.1f %14.1f %14.1f %14.1f\n", bytes, us[0], ar, us[1], ag);
  }
  for (auto c : comms) ncclCommDestroy(c);
  return peer_all_reduce_bench(n, streams) ? 0 : 1;
}
