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

// Copies bytes [offset, offset + bytes) of the slice `part` of t (in the slice's row-major order)
// to dst.
void copy_slice_bytes(const io::TensorView& t, const models::HfTensorSpec& part, size_t offset,
                      size_t bytes, uint8_t* dst) {
  const size_t esz = dtype_size(t.dtype);
  if (part.slice.dim < 0) {
    parallel_copy(dst, t.data + offset, bytes);
    return;
  }
  const size_t inner = size_t(part.shape.size() > 1 ? part.shape[1] : 1);  // full row, elements
  if (part.slice.dim == 0) {
    parallel_copy(dst, t.data + size_t(part.slice.begin) * inner * esz + offset, bytes);
    return;
  }
  // Column slice of a matrix: each slice row is one run of the full row.
  const size_t run = size_t(part.slice.count) * esz;
  const size_t first = offset / run, last = (offset + bytes + run - 1) / run;
  ThreadPool::global().parallel_for(
      last - first,
      [&](size_t b, size_t e) {
        for (size_t i = first + b; i < first + e; ++i) {
          const size_t lo = std::max(offset, i * run), hi = std::min(offset + bytes, (i + 1) * run);
          const uint8_t* src = t.data + (i * inner + size_t(part.slice.begin)) * esz + (lo - i * run);
          std::memcpy(dst + (lo - offset), src, hi - lo);
        }
      },
      size_t(1) << 10);
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

void WeightUploader::upload(const io::TensorView& tensor, const models::HfTensorSpec& part,
                            void* dst, std::optional<DType> as) {
  const DType out_dtype = as.value_or(dtype_);
  const size_t src_size = dtype_size(tensor.dtype), dst_size = dtype_size(out_dtype);
  const bool convert = tensor.dtype != out_dtype;
  if (convert && !convert_staging_.get())
    convert_staging_ = DevMem(buffer_bytes_, "weight conversion staging");
  const size_t total = size_t(part.num_elements()) * src_size;  // the slice's bytes
  if (part.slice.dim != 1) {
    const size_t skip = total == tensor.num_bytes ? 0 : tensor.num_bytes / size_t(part.shape[0]) *
                                                            size_t(part.slice.begin);
    advise_willneed(tensor.data + skip, total);
  } else {
    advise_willneed(tensor.data, tensor.num_bytes);
  }
  for (size_t offset = 0; offset < total; offset += buffer_bytes_) {
    const size_t n = std::min(buffer_bytes_, total - offset);
    const size_t b = size_t(next_);
    next_ = (next_ + 1) % kNumBuffers;
    // The copy that last read this buffer must be done before it is overwritten.
    check(cudaEventSynchronize(done_[b]), "waiting for a weight upload");
    copy_slice_bytes(tensor, part, offset, n, static_cast<uint8_t*>(pinned_[b]));
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
      check(cuda::convert_dtype(tensor.dtype, convert_staging_.get(), out_dtype, out,
                                int64_t(n / src_size), stream_),
            "converting " + tensor.name + " from " + std::string(dtype_name(tensor.dtype)) +
                " to " + std::string(dtype_name(out_dtype)));
    }
    check(cudaEventRecord(done_[b], stream_), "recording a weight upload");
    bytes_read_ += n;
  }
}

void WeightUploader::finish() { check(cudaStreamSynchronize(stream_), "uploading weights"); }

}  // namespace pagellm::runner
