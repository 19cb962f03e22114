// A one-shot all-reduce over NVLink peer access for the tensor-parallel ranks that one process
// drives (one GPU per rank). At decode sizes (a few KB to a few hundred KB) NCCL's all-reduce costs
// 15-20 us of latency on two H100s; here each rank copies its input into its own exchange buffer,
// meets the same thread block of every peer at a flag barrier, and sums every rank's buffer in rank
// order (so every rank gets bit-identical results), all in one kernel that CUDA graphs capture.
// The idea is the one of vLLM's custom all-reduce; the code is pagellm's own.
//
// Safety of the buffers across calls: each call uses the half of the exchange buffer given by the
// parity of its call number, and a call's barrier means every peer has started that call, so has
// finished the call before it: the half written now was last read two calls ago, by kernels that
// have ended. The grid is the same for every call so that all blocks count calls alike.
//
// A rank's kernel waits for its peers' kernels, so each rank must be launched from its own host
// thread (as ParallelCudaRunner does), or with every kernel loaded up front: a host thread that
// launches rank 0's all-reduce and then a kernel that CUDA loads lazily blocks until device 0 is
// idle, which it never is if that same thread has yet to launch rank 1's all-reduce.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace pagellm::cuda {

struct OneShotParams;  // the kernels' arguments (peer_all_reduce.cu)

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kBlocks = 32;
  static constexpr int kThreads = 512;
  // The fused norm keeps a row in registers: at most this many 16-byte vectors per thread (rows of
  // up to 16384 bf16 / 8192 fp32 elements).
  static constexpr int kMaxNormVecsPerThread = 4;

  // One rank per device in `devices` (rank r on devices[r]); exchange buffers of 2 x max_bytes
  // per rank. Returns null, with the reason in *why_not, when a pair of devices has no peer access
  // or an allocation fails. Changes the current device.
  static std::shared_ptr<PeerAllReduce> create(const std::vector<int>& devices, size_t max_bytes,
                                               std::string* why_not);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int size() const { return int(ranks_.size()); }
  // Whether run() takes this call: bf16 / f16 / f32, at most max_bytes, a multiple of 16 bytes,
  // 16-byte aligned.
  bool fits(const void* data, size_t count, DType dtype) const;
  // In place; every rank of the group must call it with the same count and dtype, each on its own
  // device's stream (graph capture allowed).
  cudaError_t run(int rank, void* data, size_t count, DType dtype, cudaStream_t stream);

  // The all-reduce fused with what follows it in every Llama layer: x [rows, hidden] is summed over
  // the ranks (rounded to the model dtype, as the plain all-reduce stores it), added to the residual
  // stream (residual = round(residual + sum)) and RMS-normalized into out = weight * round(residual
  // * rsqrt(mean square + eps)), the rounding of transformers' RMSNorm. x itself is left as it was.
  bool fits_norm(const void* x, int rows, int hidden, DType dtype) const;
  cudaError_t run_add_rms_norm(int rank, const void* x, void* residual, const void* weight, void* out,
                               int rows, int hidden, float eps, DType dtype, cudaStream_t stream);

 private:
  struct Rank {
    int device = 0;
    void* buffer = nullptr;      // [2][max_bytes]
    uint32_t* flags = nullptr;   // [kBlocks][kMaxRanks]: flags[b][p] = the last call peer p signalled
    uint32_t* counters = nullptr;  // [kBlocks]: calls made so far, per block
  };
  PeerAllReduce() = default;
  OneShotParams params(int rank, void* data, size_t count, DType dtype) const;
  std::vector<Rank> ranks_;
  size_t max_bytes_ = 0;
};

}  // namespace pagellm::cuda
