#include "parallel/launch.h"

#include <cstdlib>
#include <filesystem>

#include "common/error.h"

namespace pagellm::parallel {

namespace {

const std::string* find(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int env_int(const std::map<std::string, std::string>& env, const char* name, int fallback) {
  const std::string* v = find(env, name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const int x = std::stoi(*v, &used);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  invalid_argument(std::string("$") + name + "='" + *v + "' is not an integer");
}

}  // namespace

std::string shared_flags_summary(const EngineArgs& a) {
  // Paths by folder name: nodes may mount the model at different places, but not another model.
  const std::string model = std::filesystem::path(a.model).filename().string();
  return "model=" + model + " load_format=" + a.load_format + " dtype=" + a.dtype +
         " seed=" + std::to_string(a.seed) + " max_model_len=" + std::to_string(a.max_model_len) +
         " block_size=" + std::to_string(a.block_size) + " max_num_seqs=" +
         std::to_string(a.max_num_seqs) + " max_num_batched_tokens=" +
         std::to_string(a.max_num_batched_tokens) + " tp=" + std::to_string(a.tensor_parallel_size) +
         " pp=" + std::to_string(a.pipeline_parallel_size) + " enforce_eager=" +
         std::to_string(a.enforce_eager) + " swap_space=" + std::to_string(a.swap_space_gib) +
         " gpu_memory_utilization=" + std::to_string(a.gpu_memory_utilization) +
         " num_kv_blocks=" + std::to_string(a.num_kv_blocks);
}

int rank_block_of_process(int proc_rank, int sampling_block) {
  if (proc_rank == 0) return sampling_block;
  return proc_rank <= sampling_block ? proc_rank - 1 : proc_rank;
}

LaunchPlan plan_launch(const EngineArgs& args, const std::map<std::string, std::string>& env) {
  LaunchPlan p;
  const int world = args.tensor_parallel_size * args.pipeline_parallel_size;
  p.num_local_ranks = world;
  p.launcher = "single";
  const int mpi_size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
  if (mpi_size > 1) {
    if (args.data_parallel_size > 1)
      invalid_argument("--data-parallel-size: replicas run in one process; not under mpirun");
    if (args.nnodes > 1)
      invalid_argument("--nnodes: not with mpirun (mpirun -np already says how many processes)");
    p.launcher = "mpirun";
    p.num_procs = mpi_size;
    p.proc_rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0);
    const int local = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", p.proc_rank);
    if (p.proc_rank < 0 || p.proc_rank >= mpi_size || local < 0)
      invalid_argument("mpirun: OMPI_COMM_WORLD_RANK / LOCAL_RANK out of range");
    if (world % mpi_size != 0)
      invalid_argument("mpirun -np " + std::to_string(mpi_size) + ": the " + std::to_string(world) +
                       " ranks of --tensor-parallel-size x --pipeline-parallel-size do not split "
                       "evenly over the processes");
    p.num_local_ranks = world / mpi_size;
    p.first_device = local * p.num_local_ranks;
  } else if (args.nnodes > 1) {
    p.launcher = "nodes";
    p.num_procs = args.nnodes;
    p.proc_rank = args.node_rank;
    if (world % args.nnodes != 0)
      invalid_argument("--nnodes " + std::to_string(args.nnodes) + ": the " + std::to_string(world) +
                       " ranks of --tensor-parallel-size x --pipeline-parallel-size do not split "
                       "evenly over the nodes");
    p.num_local_ranks = world / args.nnodes;
  }
  p.first_rank = rank_block_of_process(p.proc_rank, (world - args.tensor_parallel_size) / p.num_local_ranks) *
                 p.num_local_ranks;
  RendezvousOptions& r = p.rendezvous;
  r.num_procs = p.num_procs;
  r.proc_rank = p.proc_rank;
  r.master_addr = !args.master_addr.empty()           ? args.master_addr
                  : find(env, "MASTER_ADDR") != nullptr ? *find(env, "MASTER_ADDR")
                                                        : "127.0.0.1";
  r.master_port = args.master_port > 0 ? args.master_port : env_int(env, "MASTER_PORT", 29500);
  if (r.master_port < 1 || r.master_port > 65535)
    invalid_argument("--master-port / $MASTER_PORT must be in [1, 65535]");
  const std::string summary = shared_flags_summary(args);
  r.hello = {p.proc_rank, p.num_procs, fingerprint(summary), summary};
  return p;
}

LaunchPlan plan_launch(const EngineArgs& args) {
  std::map<std::string, std::string> env;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "MASTER_ADDR", "MASTER_PORT"})
    if (const char* v = std::getenv(name)) env[name] = v;
  return plan_launch(args, env);
}

}  // namespace pagellm::parallel
