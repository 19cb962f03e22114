// Streams checkpoint tensors from their memory mapping into device memory. Each tensor's raw bytes
// are copied (by the host thread pool, which also realigns data at odd offsets) into one of a few
// reused pinned staging buffers and sent to the device with cudaMemcpyAsync; an event per buffer
// lets the host fill the next buffer while the previous ones are in flight, so reading the
// mapping and the DMA overlap. A tensor whose dtype differs from the runner's goes to a device
// staging buffer first and is converted there (cuda::convert_dtype, bit-exact with the host).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <optional>

#include "common/dtype.h"
#include "io/safetensors.h"
#include "models/weight_plan.h"
#include "runner/cuda_runner_impl.h"

namespace pagellm::runner {

class WeightUploader {
 public:
  // max_tensor_bytes: the largest checkpoint tensor to come (small models get small buffers).
  WeightUploader(cudaStream_t stream, DType device_dtype, size_t max_tensor_bytes);
  ~WeightUploader();
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;

  // Enqueues the slice `part` (models/weight_plan.h) of tensor -> dst, where dst holds
  // part.num_elements() elements of the device dtype: only the slice's bytes are read from the
  // mapping (a column slice is gathered row by row into the pinned buffer). The tensor's mapping
  // must stay valid until finish() returns.
  // `as` overrides the destination dtype (an FP8 weight uploaded as its e4m3 bytes).
  void upload(const io::TensorView& tensor, const models::HfTensorSpec& part, void* dst,
              std::optional<DType> as = std::nullopt);
  // Waits until every enqueued copy and conversion has completed.
  void finish();
  // Checkpoint bytes read so far.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  static constexpr int kNumBuffers = 3;
  cudaStream_t stream_;
  DType dtype_;
  size_t buffer_bytes_ = 0;                      // a multiple of 4: chunks hold whole elements
  std::array<void*, kNumBuffers> pinned_{};      // [buffer_bytes_] raw checkpoint bytes each
  std::array<cudaEvent_t, kNumBuffers> done_{};  // recorded after the copy reading pinned_[i]
  DevMem convert_staging_;                       // [buffer_bytes_], made on first conversion
  int next_ = 0;
  uint64_t bytes_read_ = 0;
};

}  // namespace pagellm::runner
