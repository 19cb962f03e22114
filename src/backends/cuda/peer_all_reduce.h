// A one-shot all-reduce over NVLink peer access for the tensor-parallel ranks that one process
// drives (one GPU per rank). At decode sizes (a few KB to a few hundred KB) NCCL's all-reduce costs
// 15-20 us of latency on two H100s. Here each rank writes its input straight into its slot of every
// peer's receive buffer, which starts out filled with a value no rank sends; a rank sums the slots
// of its own buffer in rank order (so every rank gets bit-identical results) as soon as they are
// no longer empty. The data is its own signal: no flag and no barrier round trip, one crossing of
// NVLink per call, in one kernel that CUDA graphs capture. This is the "Lamport" scheme of
// TensorRT-LLM's low-latency all-reduce; vLLM's custom all-reduce is the two-crossing variant
// (flags, then reads). The code is pagellm's own.
//
// Safety of the buffers across calls: three buffers, used in turn (call number mod 3, the same on
// every rank: all launch the same grid each call). A call empties the buffer of the call before,
// which its peers finished writing; they write it again only two calls later, which needs this
// rank's input of the next call. So the buffer a call receives in is always empty when it starts.
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

  // One rank per device in `devices` (rank r on devices[r]); receive buffers of 3 x ranks x
  // max_bytes per rank. Returns null, with the reason in *why_not, when a pair of devices has no
  // peer access or an allocation fails. Changes the current device.
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

  // out [ranks][count] = every rank's `in` [count], in rank order (the tensor-parallel LM head's
  // logits); the same conditions as run().
  cudaError_t all_gather(int rank, const void* in, void* out, size_t count, DType dtype,
                         cudaStream_t stream);

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
    void* slots = nullptr;  // [3 buffers][ranks][max_bytes]: what each rank sent in a call
    uint32_t* state =
        nullptr;  // [kBlocks] calls made so far, per block; [3] bytes last sent per buffer
  };
  PeerAllReduce() = default;
  OneShotParams params(int rank, void* data, size_t count, DType dtype) const;
  std::vector<Rank> ranks_;
  size_t max_bytes_ = 0;
};

}  // namespace pagellm::cuda
