// The weight pipeline of the tensor-core GEMVs (gemm/fp8_weight_only_stream.cu,
// gemm/int_weight_gemv.cu): a block owns a tile of 16 weight rows and its kWarps warps split each
// row's bytes in 128-byte chunks (warp w takes chunks w, w + kWarps, ...). Each warp keeps kStages
// chunks of its own in shared memory, kStages - 1 of them in flight, filled by cp.async of whole
// 128-byte lines, so no barrier sits in the loop. Lane l copies 16-byte piece l % 8 of tile rows
// l / 8 + 4 j (j < 4); the kernel's `slot(r, q)` says where piece q of row r goes in its row of
// the stage, so that its reads hit distinct banks.
#pragma once

#include <cstdint>

#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {

constexpr int kLineRows = 16;    // weight rows per block: one m16 tile
constexpr int kLineChunk = 128;  // bytes of a row per warp per stage: one line

template <int kStages, int kWarps>
class WarpLineStream {
 public:
  static constexpr int kStageBytes = kLineRows * kLineChunk;
  static constexpr int kTileBytes = kWarps * kStages * kStageBytes;  // the block's stages

  // smem: the block's stages; row_bytes: bytes of a weight row; row(r): tile row r's first byte.
  template <typename Row, typename Slot>
  __device__ __forceinline__ WarpLineStream(uint8_t* smem, int row_bytes, Row row, Slot slot)
      : row_bytes_(row_bytes) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int num_chunks = (row_bytes + kLineChunk - 1) / kLineChunk;
    chunks_ = num_chunks > warp ? (num_chunks - warp + kWarps - 1) / kWarps : 0;
    first_ = warp * kLineChunk;
    stages_ = smem + warp * kStages * kStageBytes;
    piece_ = lane & 7;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = (lane >> 3) + 4 * j;
      src_[j] = row(r) + piece_ * 16;
      dst_[j] = r * kLineChunk + slot(r, piece_) * 16;
    }
  }

  // The warp's chunk count, and the first byte of its chunk i within a row.
  __device__ __forceinline__ int chunks() const { return chunks_; }
  __device__ __forceinline__ int offset(int i) const { return first_ + i * kWarps * kLineChunk; }

  // The copies of the warp's chunk i into stage i % kStages (bytes past the row are zeros), and a
  // commit (an empty group past the last chunk keeps the group count uniform).
  __device__ __forceinline__ void issue(int i) const {
    if (i < chunks_) {
      const int off = offset(i);
      const int bytes = off + piece_ * 16 < row_bytes_ ? 16 : 0;
      uint8_t* stage = stages_ + (i % kStages) * kStageBytes;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        attention::cp_async16(stage + dst_[j], bytes ? src_[j] + off : src_[j], bytes);
    }
    attention::cp_async_commit();
  }

  // Chunks 0 .. kStages - 2 in flight; then, before it waits for the kernel before, the caller
  // lets the next one launch when that was all (programmatic dependent launch, common.cuh).
  __device__ __forceinline__ void start() const {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(i);
  }
  __device__ __forceinline__ bool all_started() const { return chunks_ <= kStages - 1; }

  // Waits for chunk i (every lane's copies), issues chunk i + kStages - 1 into the stage chunk
  // i - 1 left, lets the next kernel launch once the last chunk is in flight; returns chunk i's
  // stage.
  __device__ __forceinline__ const uint8_t* next(int i) const {
    attention::cp_async_wait<kStages - 2>();
    __syncwarp();
    issue(i + kStages - 1);
    if (i + kStages - 1 == chunks_ - 1) pdl_launch_dependents();
    return stages_ + (i % kStages) * kStageBytes;
  }

  // Lets every copy land (before the block's shared memory is reused or the kernel ends).
  __device__ __forceinline__ void drain() const { attention::cp_async_wait<0>(); }

 private:
  const uint8_t* src_[4];
  int dst_[4];
  uint8_t* stages_;
  int row_bytes_, chunks_, first_, piece_;
};

}  // namespace pagellm::cuda
