#include "runner/cuda_weight_loader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/kernels.h"
#include "common/thread_pool.h"

namespace pagellm::runner {

namespace {

// 64 MiB chunks keep per-copy overheads negligible while three buffers pin only 192 MiB.
constexpr size_t kMaxBufferBytes = size_t(64) << 20;

// Starts the kernel's readahead of a tensor's pages so that a cold page cache is read at disk
// speed instead of one page fault at a time. Advice only: failure changes nothing.
void advise_willneed(const uint8_t* data, size_t bytes) {
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (page <= 0 || bytes == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(uintptr_t(page) - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

// memcpy by the thread pool: a single thread cannot fault in and copy a mapping fast enough to
// keep a PCIe 5 link busy.
void parallel_copy(void* dst, const uint8_t* src, size_t bytes) {
  ThreadPool::global().parallel_for(
      bytes,
      [&](size_t begin, size_t end) {
        std::memcpy(static_cast<uint8_t*>(dst) + begin, src + begin, end - begin);
      },
      size_t(2) << 20);
}

}  // namespace

WeightUploader::WeightUploader(cudaStream_t stream, DType device_dtype, size_t max_tensor_bytes)
    : stream_(stream), dtype_(device_dtype) {
  buffer_bytes_ =
      std::min(kMaxBufferBytes, std::max<size_t>((max_tensor_bytes + 4095) / 4096, 1) * 4096);
  for (int i = 0; i < kNumBuffers; ++i) {
    check(cudaMallocHost(&pinned_[size_t(i)], buffer_bytes_), "allocating pinned weight staging");
    check(cudaEventCreateWithFlags(&done_[size_t(i)], cudaEventDisableTiming),
          "creating a staging event");
  }
}

WeightUploader::~WeightUploader() {
  // Copies still in flight (after an error) read the pinned buffers: wait before freeing them.
  cudaStreamSynchronize(stream_);
  for (int i = 0; i < kNumBuffers; ++i) {
    if (done_[size_t(i)]) cudaEventDestroy(done_[size_t(i)]);
    if (pinned_[size_t(i)]) cudaFreeHost(pinned_[size_t(i)]);
  }
}

void WeightUploader::upload(const io::TensorView& tensor, void* dst) {
  const size_t src_size = dtype_size(tensor.dtype), dst_size = dtype_size(dtype_);
  const bool convert = tensor.dtype != dtype_;
  if (convert && !convert_staging_.get())
    convert_staging_ = DevMem(buffer_bytes_, "weight conversion staging");
  advise_willneed(tensor.data, tensor.num_bytes);
  for (size_t offset = 0; offset < tensor.num_bytes; offset += buffer_bytes_) {
    const size_t n = std::min(buffer_bytes_, tensor.num_bytes - offset);
    const size_t b = size_t(next_);
    next_ = (next_ + 1) % kNumBuffers;
    // The copy that last read this buffer must be done before it is overwritten.
    check(cudaEventSynchronize(done_[b]), "waiting for a weight upload");
    parallel_copy(pinned_[b], tensor.data + offset, n);
    // Chunks hold whole elements (buffer_bytes_ % 4 == 0), so the output offset is exact.
    unsigned char* out = static_cast<unsigned char*>(dst) + offset / src_size * dst_size;
    if (!convert) {
      check(cudaMemcpyAsync(out, pinned_[b], n, cudaMemcpyHostToDevice, stream_),
            "uploading " + tensor.name);
    } else {
      // One device staging buffer suffices: the stream orders each chunk's upload after the
      // previous chunk's conversion.
      check(cudaMemcpyAsync(convert_staging_.get(), pinned_[b], n, cudaMemcpyHostToDevice, stream_),
            "uploading " + tensor.name);
      check(cuda::convert_dtype(tensor.dtype, convert_staging_.get(), dtype_, out,
                                int64_t(n / src_size), stream_),
            "converting " + tensor.name + " from " + std::string(dtype_name(tensor.dtype)) +
                " to " + std::string(dtype_name(dtype_)));
    }
    check(cudaEventRecord(done_[b], stream_), "recording a weight upload");
    bytes_read_ += n;
  }
}

void WeightUploader::finish() { check(cudaStreamSynchronize(stream_), "uploading weights"); }

}  // namespace pagellm::runner
