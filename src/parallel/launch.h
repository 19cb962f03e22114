// How the processes of a parallel group are laid out: one process holding every rank (the
// default), torchrun-style nodes (--nnodes / --node-rank, each process holding world / nnodes ranks
// on its local GPUs), or one process per rank started by mpirun (Open MPI's OMPI_COMM_WORLD_*
// environment; mpirun only launches, the group meets at the TCP rendezvous). Process 0 runs the
// engine and serves; the others are workers that execute the steps it sends them.
#pragma once

#include <map>
#include <string>

#include "pagellm/engine_args.h"
#include "parallel/rendezvous.h"

namespace pagellm::parallel {

struct LaunchPlan {
  int num_procs = 1;
  int proc_rank = 0;
  int first_rank = 0;       // world rank of this process's first rank (rank_block_of_process)
  int num_local_ranks = 1;  // ranks (GPUs) this process hosts
  int first_device = 0;     // local GPU of its first rank
  std::string launcher;     // "single", "nodes" or "mpirun", for messages
  RendezvousOptions rendezvous;
  bool multi_process() const { return num_procs > 1; }
  bool leader() const { return proc_rank == 0; }
};

// Which block of num_local_ranks consecutive world ranks a process hosts. Process 0 runs the engine,
// which reads the sampled tokens from the rank that samples (the last stage's first tensor-parallel
// rank, world rank world - tp, in block sampling_block), so it hosts that block; the other processes
// take the remaining blocks in order. With one stage the sampling rank is rank 0 and process p hosts
// block p.
int rank_block_of_process(int proc_rank, int sampling_block);

// env: the variables to read (the process environment in production, a map in tests). Throws
// pagellm::Error (kInvalidArgument) for a layout that cannot work: ranks not divisible among the
// processes, --nnodes together with mpirun, a bad port.
LaunchPlan plan_launch(const EngineArgs& args, const std::map<std::string, std::string>& env);
LaunchPlan plan_launch(const EngineArgs& args);  // from the process environment

// The flags every process of a group must share, in words (the rendezvous fingerprints them).
std::string shared_flags_summary(const EngineArgs& args);

}  // namespace pagellm::parallel
