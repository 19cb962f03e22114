// The collectives a tensor- or pipeline-parallel group of ranks runs: one interface with an
// in-process implementation (threads of one process, for the CPU backend and CI) and an NCCL one
// for GPUs (the CUDA runner). Every rank of a group calls each collective in the same order with
// the same sizes. A collective that cannot complete (a peer stopped, timed out, or the group was
// aborted) throws pagellm::Error (kInternal) on every rank instead of hanging.
#pragma once

#include <cstddef>
#include <string>

#include "common/dtype.h"

namespace pagellm::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data [count] of dtype, summed over the group in place; every rank gets the same values.
  // `stream` is the CUDA stream for device buffers (null for host buffers).
  virtual void all_reduce_sum(void* data, size_t count, DType dtype, void* stream) = 0;
  // The all-reduce of x [rows, hidden] fused with the residual add and RMSNorm after it (see
  // cuda::PeerAllReduce::run_add_rms_norm): true when done; false (nothing done) when this
  // communicator has no fused path for these arguments, and the caller all-reduces and normalizes.
  virtual bool all_reduce_add_rms_norm(const void* x, void* residual, const void* weight, void* out,
                                       int rows, int hidden, float eps, DType dtype, void* stream) {
    return false;
  }
  // out [size() * count]: rank r's in [count] lands at out + r * count.
  virtual void all_gather(const void* in, void* out, size_t count, DType dtype, void* stream) = 0;
  // The minimum of one host value per rank, returned on every rank (blocking; startup only).
  virtual int64_t all_reduce_min(int64_t value) = 0;
  // Point to point (pipeline stages): the receiver's count and dtype must equal the sender's.
  virtual void send(const void* data, size_t count, DType dtype, int peer, void* stream) = 0;
  virtual void recv(void* data, size_t count, DType dtype, int peer, void* stream) = 0;
  // Fails every pending and later collective of the group on all ranks with `reason` (one rank's
  // error must not leave the others waiting).
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace pagellm::parallel
