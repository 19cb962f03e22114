// Request routing for --data-parallel-size N: N engine replicas behind one server. Each new request
// goes to the replica with the fewest outstanding tokens (prompt tokens plus the tokens its
// in-flight requests may still generate), unless a replica recently received the same prompt
// prefix (the same chain of full KV blocks, hashed like the prefix cache) and is not much busier
// than the least loaded one: then it goes there and reuses that replica's cached blocks.
//
// The decision itself is a pure function of the loads and the affinity hit (choose_replica);
// DpRouter keeps the state (loads, owners of in-flight requests, the affinity map) and is not
// thread-safe: its user serializes calls.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagellm/sampling_params.h"

namespace pagellm::engine {

struct ReplicaLoad {
  int64_t outstanding_tokens = 0;  // prompt + remaining max_tokens of its in-flight requests
  uint64_t num_routed = 0;         // requests routed to it so far (tie-break: spread idle traffic)
  bool healthy = true;
};

struct RouterConfig {
  int block_size = 16;          // tokens per KV block (prefixes are matched in whole blocks)
  int max_affinity_blocks = 8;  // leading full blocks of a prompt that are remembered
  int64_t affinity_slack_tokens = 2048;   // an affinity replica may carry this much more load
  size_t max_affinity_entries = 1 << 16;  // remembered prefixes (least recently used go first)
};

// The healthy replica with the fewest outstanding tokens; ties go to the one that has received
// fewer requests, then to the lowest index. -1 when none is healthy.
int least_loaded_replica(std::span<const ReplicaLoad> loads);

// The routing decision: `affinity_replica` (or -1) when it is healthy and its load is at most
// `slack_tokens` above the least loaded replica's, else the least loaded replica. -1 when no
// replica is healthy.
int choose_replica(std::span<const ReplicaLoad> loads, int affinity_replica, int64_t slack_tokens);

// Chain hashes of the prompt's leading full blocks (at most max_blocks), as the prefix cache
// computes them (kv::KVCacheManager::hash_block, salted by the cache salt).
std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> prompt, int block_size,
                                          int max_blocks, std::string_view cache_salt);

// Tokens a request may occupy: its prompt plus max_tokens for every sequence it generates
// (best_of or n), the generation capped by the context left after the prompt.
int64_t request_cost(int64_t num_prompt_tokens, const SamplingParams& params, int max_model_len);

class DpRouter {
 public:
  DpRouter(int num_replicas, RouterConfig config);

  // Picks the replica for a new request, charges it `cost` tokens and remembers the prompt's prefix
  // there. Returns -1 (changing nothing) when no replica is healthy. Throws pagellm::Error
  // (kInvalidArgument) for a request id that is still in flight.
  int route(const std::string& request_id, std::span<const int32_t> prompt,
            std::string_view cache_salt, int64_t cost);
  // The replica serving an in-flight request, or -1 (unknown or finished).
  int owner(const std::string& request_id) const;
  // The request generated `num_tokens` more tokens: that much less is outstanding.
  void on_progress(const std::string& request_id, int64_t num_tokens);
  // The request has ended (or was never queued): its remaining tokens are released. Unknown ids are
  // ignored.
  void finish(const std::string& request_id);
  // A dead replica receives nothing more; its remembered prefixes are forgotten.
  void set_healthy(int replica, bool healthy);

  const std::vector<ReplicaLoad>& loads() const { return loads_; }
  int num_in_flight() const { return static_cast<int>(in_flight_.size()); }
  // The replica that most recently received the longest of these chain hashes, or -1.
  int affinity_replica(std::span<const uint64_t> hashes) const;

 private:
  struct InFlight {
    int replica = 0;
    int64_t outstanding = 0;
  };
  struct Prefix {
    int replica = 0;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front = most recent)
  };
  void remember(std::span<const uint64_t> hashes, int replica);

  RouterConfig config_;
  std::vector<ReplicaLoad> loads_;  // [num_replicas]
  std::unordered_map<std::string, InFlight> in_flight_;
  std::unordered_map<uint64_t, Prefix> prefixes_;  // chain hash → replica that last got it
  std::list<uint64_t> lru_;
};

}  // namespace pagellm::engine
