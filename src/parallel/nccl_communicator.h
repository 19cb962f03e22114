// The NCCL implementation of parallel::Communicator for the CUDA runner: collectives on device
// buffers, enqueued on the caller's stream (so they are captured into CUDA graphs with the rest of
// a step). NVLink multicast (NVLS) is never enabled: NCCL_NVLS_ENABLE=0 is set before any
// communicator is made.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagellm::cuda {
class PeerAllReduce;
}

namespace pagellm::parallel {

// NCCL's opaque id that every rank of one communicator must share (made by rank 0, handed to the
// others by the launcher: in-process, or over the rendezvous).
struct NcclId {
  unsigned char bytes[128] = {};
};
NcclId make_nccl_id();

// Joins the communicator of `size` ranks identified by `id` as `rank` on the current CUDA device.
// Blocks until every rank has joined; throws pagellm::Error (kInternal) naming NCCL's error.
// `peer`: the group's one-shot NVLink all-reduce (its rank r = this communicator's rank r), taken
// for the all-reduces it fits (decode sizes); null = NCCL for everything.
std::unique_ptr<Communicator> make_nccl_communicator(
    const NcclId& id, int size, int rank, std::shared_ptr<cuda::PeerAllReduce> peer = nullptr);

}  // namespace pagellm::parallel
