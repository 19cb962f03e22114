#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "backends/cuda/peer_all_reduce.h"
#include "common/error.h"

namespace pagellm::parallel {

namespace {

void check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw_error(ErrorKind::kInternal, "nccl: " + what + ": " + ncclGetErrorString(r) +
                                        (r == ncclSystemError || r == ncclRemoteError
                                             ? " (a peer failed or is unreachable)"
                                             : ""));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    default:
      break;
  }
  throw_error(ErrorKind::kInternal, "nccl: no collective for dtype " + std::string(dtype_name(dtype)));
}

// Multicast stays off on the shared machines (it can take the GPUs out of service).
void disable_nvls() { ::setenv("NCCL_NVLS_ENABLE", "0", 1); }

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::shared_ptr<cuda::PeerAllReduce> peer)
      : comm_(comm), rank_(rank), size_(size), peer_(std::move(peer)) {}
  ~NcclCommunicator() override {
    if (!aborted_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(void* data, size_t count, DType dtype, void* stream) override {
    check_live();
    if (peer_ && peer_->fits(data, count, dtype)) {
      const cudaError_t e = peer_->run(rank_, data, count, dtype, cuda_stream(stream));
      if (e != cudaSuccess)
        throw_error(ErrorKind::kInternal, std::string("peer all-reduce: ") + cudaGetErrorString(e));
      return;
    }
    check(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_, cuda_stream(stream)),
          "all-reduce");
  }
  bool all_reduce_add_rms_norm(const void* x, void* residual, const void* weight, void* out, int rows,
                               int hidden, float eps, DType dtype, void* stream) override {
    check_live();
    if (!peer_ || !peer_->fits_norm(x, rows, hidden, dtype)) return false;
    const cudaError_t e = peer_->run_add_rms_norm(rank_, x, residual, weight, out, rows, hidden, eps,
                                                  dtype, cuda_stream(stream));
    if (e != cudaSuccess)
      throw_error(ErrorKind::kInternal, std::string("peer all-reduce + rms norm: ") + cudaGetErrorString(e));
    return true;
  }
  void all_gather(const void* in, void* out, size_t count, DType dtype, void* stream) override {
    check_live();
    if (peer_ && peer_->fits(in, count, dtype)) {
      const cudaError_t e = peer_->all_gather(rank_, in, out, count, dtype, cuda_stream(stream));
      if (e != cudaSuccess)
        throw_error(ErrorKind::kInternal, std::string("peer all-gather: ") + cudaGetErrorString(e));
      return;
    }
    check(ncclAllGather(in, out, count, nccl_type(dtype), comm_, cuda_stream(stream)), "all-gather");
  }
  int64_t all_reduce_min(int64_t value) override {
    check_live();
    void* dev = nullptr;
    int64_t out = value;
    if (cudaMalloc(&dev, sizeof value) != cudaSuccess)
      throw_error(ErrorKind::kResourceExhausted, "nccl: cannot allocate 8 bytes for an agreement");
    cudaMemcpy(dev, &value, sizeof value, cudaMemcpyHostToDevice);
    const ncclResult_t r = ncclAllReduce(dev, dev, 1, ncclInt64, ncclMin, comm_, nullptr);
    const cudaError_t e = r == ncclSuccess ? cudaMemcpy(&out, dev, sizeof out, cudaMemcpyDeviceToHost)
                                           : cudaSuccess;
    cudaFree(dev);
    check(r, "agreeing on a value");
    if (e != cudaSuccess) throw_error(ErrorKind::kInternal, std::string("nccl: ") + cudaGetErrorString(e));
    return out;
  }

  void send(const void* data, size_t count, DType dtype, int peer, void* stream) override {
    check_live();
    check(ncclSend(data, count, nccl_type(dtype), peer, comm_, cuda_stream(stream)), "send");
  }
  void recv(void* data, size_t count, DType dtype, int peer, void* stream) override {
    check_live();
    check(ncclRecv(data, count, nccl_type(dtype), peer, comm_, cuda_stream(stream)), "recv");
  }
  // Unblocks this rank's pending operations; the communicator is unusable afterwards.
  void abort(const std::string& why) override {
    {
      std::lock_guard lock(why_mutex_);
      if (why_.empty()) why_ = why;
    }
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  static cudaStream_t cuda_stream(void* s) { return static_cast<cudaStream_t>(s); }
  // After an abort NCCL has freed the communicator: no call may reach it.
  void check_live() {
    if (!aborted_) return;
    std::lock_guard lock(why_mutex_);
    throw_error(ErrorKind::kInternal, "nccl: the group was aborted: " + why_);
  }
  ncclComm_t comm_;
  int rank_, size_;
  std::shared_ptr<cuda::PeerAllReduce> peer_;
  std::atomic<bool> aborted_{false};
  std::mutex why_mutex_;
  std::string why_;
};

}  // namespace

NcclId make_nccl_id() {
  disable_nvls();
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId::bytes));
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "making a unique id");
  NcclId out;
  std::memcpy(out.bytes, &id, sizeof id);
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int size, int rank,
                                                     std::shared_ptr<cuda::PeerAllReduce> peer) {
  disable_nvls();
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes, sizeof nid);
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, nid, rank), "joining a communicator of " +
                                                      std::to_string(size) + " ranks as rank " +
                                                      std::to_string(rank));
  return std::make_unique<NcclCommunicator>(comm, rank, size, std::move(peer));
}

}  // namespace pagellm::parallel
