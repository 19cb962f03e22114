// The TCP rendezvous of a multi-process parallel group (torchrun style: --nnodes, --node-rank,
// --master-addr, --master-port; also used under mpirun, which only launches the processes). The
// leader process (0) listens; every other process connects, says who it is and which flags it runs
// with; the leader checks that the group is complete, without duplicates and with matching flags,
// and answers each with the NCCL ids (or with the error, so every process exits with the same
// one-line message). Everything happens within a deadline: a missing peer is an error, never a
// hang. The connections stay open afterwards as the leader's control channel (each step's
// SchedulerOutput goes to the workers over it) and as the liveness signal: a process that dies
// closes its connection.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/wire.h"

namespace pagellm::parallel {

// One TCP connection carrying length-prefixed messages.
class Channel {
 public:
  virtual ~Channel() = default;
  virtual void send(const std::vector<unsigned char>& message) = 0;
  // Blocks for the next message; throws pagellm::Error (kInternal) when the peer has gone.
  virtual std::vector<unsigned char> recv() = 0;
  // Blocks until the peer closes the connection or fails (never returns while it lives); for a
  // watcher thread next to a reader that owns recv().
  virtual void wait_closed() = 0;
  // Closes the connection (unblocks wait_closed / recv on both ends).
  virtual void close() = 0;
};

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int num_procs = 1;
  int proc_rank = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  Hello hello;  // this process's (the leader's: the reference fingerprint)
};

// Leader: waits for num_procs - 1 workers, checks them, and welcomes each with make_ids()'s ids
// (made only once everyone checked in). Returns the channels to processes 1 .. num_procs - 1, in
// rank order. Throws pagellm::Error naming the missing, duplicate or mismatched process.
std::vector<std::unique_ptr<Channel>> rendezvous_leader(
    const RendezvousOptions& options,
    const std::function<std::vector<std::vector<unsigned char>>()>& make_ids);

// Worker: connects (retrying until the deadline), introduces itself and returns the leader's
// channel and the welcome's ids; throws with the leader's error when it was refused.
std::unique_ptr<Channel> rendezvous_worker(const RendezvousOptions& options,
                                           std::vector<std::vector<unsigned char>>* ids);

// 64-bit FNV-1a of a flag summary (the fingerprint in Hello).
uint64_t fingerprint(const std::string& summary);

}  // namespace pagellm::parallel
