#include "engine/dp_router.h"

#include <algorithm>

#include "common/error.h"
#include "kv/kv_cache_manager.h"

namespace pagellm::engine {

int least_loaded_replica(std::span<const ReplicaLoad> loads) {
  int best = -1;
  for (int r = 0; r < static_cast<int>(loads.size()); ++r) {
    const ReplicaLoad& l = loads[size_t(r)];
    if (!l.healthy) continue;
    if (best < 0) {
      best = r;
      continue;
    }
    const ReplicaLoad& b = loads[size_t(best)];
    if (l.outstanding_tokens < b.outstanding_tokens ||
        (l.outstanding_tokens == b.outstanding_tokens && l.num_routed < b.num_routed))
      best = r;
  }
  return best;
}

int choose_replica(std::span<const ReplicaLoad> loads, int affinity_replica, int64_t slack_tokens) {
  const int least = least_loaded_replica(loads);
  if (least < 0 || affinity_replica < 0 || affinity_replica >= static_cast<int>(loads.size()))
    return least;
  const ReplicaLoad& a = loads[size_t(affinity_replica)];
  // Reusing cached blocks saves prefill, but never at the price of an unbounded imbalance.
  if (a.healthy && a.outstanding_tokens - loads[size_t(least)].outstanding_tokens <= slack_tokens)
    return affinity_replica;
  return least;
}

std::vector<uint64_t> prefix_block_hashes(std::span<const int32_t> prompt, int block_size,
                                          int max_blocks, std::string_view cache_salt) {
  std::vector<uint64_t> hashes;
  if (block_size < 1 || max_blocks < 1) return hashes;
  const uint64_t salt = kv::KVCacheManager::hash_salt(cache_salt);
  const size_t num_full = std::min(prompt.size() / size_t(block_size), size_t(max_blocks));
  uint64_t parent = 0;
  for (size_t b = 0; b < num_full; ++b) {
    parent = kv::KVCacheManager::hash_block(
        parent, prompt.subspan(b * size_t(block_size), size_t(block_size)), salt);
    hashes.push_back(parent);
  }
  return hashes;
}

int64_t request_cost(int64_t num_prompt_tokens, const SamplingParams& params, int max_model_len) {
  int64_t per_seq = std::max<int64_t>(params.max_tokens, 0);
  if (max_model_len > 0)
    per_seq = std::clamp<int64_t>(max_model_len - num_prompt_tokens, 0, per_seq);
  const int64_t num_seqs = std::max<int64_t>(params.best_of.value_or(params.n), 1);
  return std::max<int64_t>(num_prompt_tokens, 0) + num_seqs * per_seq;
}

DpRouter::DpRouter(int num_replicas, RouterConfig config) : config_(config) {
  if (num_replicas < 1) invalid_argument("data parallel router: needs at least one replica");
  loads_.resize(size_t(num_replicas));
}

int DpRouter::affinity_replica(std::span<const uint64_t> hashes) const {
  // The longest remembered prefix wins: it is the one most likely still cached.
  for (size_t i = hashes.size(); i-- > 0;) {
    const auto it = prefixes_.find(hashes[i]);
    if (it != prefixes_.end()) return it->second.replica;
  }
  return -1;
}

void DpRouter::remember(std::span<const uint64_t> hashes, int replica) {
  for (uint64_t h : hashes) {
    auto it = prefixes_.find(h);
    if (it != prefixes_.end()) {
      lru_.erase(it->second.lru);
      prefixes_.erase(it);
    }
    lru_.push_front(h);
    prefixes_.emplace(h, Prefix{replica, lru_.begin()});
  }
  while (prefixes_.size() > config_.max_affinity_entries && !lru_.empty()) {
    prefixes_.erase(lru_.back());
    lru_.pop_back();
  }
}

int DpRouter::route(const std::string& request_id, std::span<const int32_t> prompt,
                    std::string_view cache_salt, int64_t cost) {
  if (in_flight_.count(request_id) != 0)
    invalid_argument("request_id: duplicate '" + request_id + "'");
  const std::vector<uint64_t> hashes =
      prefix_block_hashes(prompt, config_.block_size, config_.max_affinity_blocks, cache_salt);
  const int replica =
      choose_replica(loads_, affinity_replica(hashes), config_.affinity_slack_tokens);
  if (replica < 0) return -1;
  cost = std::max<int64_t>(cost, 0);
  in_flight_.emplace(request_id, InFlight{replica, cost});
  loads_[size_t(replica)].outstanding_tokens += cost;
  ++loads_[size_t(replica)].num_routed;
  remember(hashes, replica);
  return replica;
}

int DpRouter::owner(const std::string& request_id) const {
  const auto it = in_flight_.find(request_id);
  return it == in_flight_.end() ? -1 : it->second.replica;
}

void DpRouter::on_progress(const std::string& request_id, int64_t num_tokens) {
  const auto it = in_flight_.find(request_id);
  if (it == in_flight_.end() || num_tokens <= 0) return;
  // Clamped: a request never releases more than it was charged, so loads never go negative.
  const int64_t delta = std::min(num_tokens, it->second.outstanding);
  it->second.outstanding -= delta;
  loads_[size_t(it->second.replica)].outstanding_tokens -= delta;
}

void DpRouter::finish(const std::string& request_id) {
  const auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  loads_[size_t(it->second.replica)].outstanding_tokens -= it->second.outstanding;
  in_flight_.erase(it);
}

void DpRouter::set_healthy(int replica, bool healthy) {
  if (replica < 0 || replica >= static_cast<int>(loads_.size())) return;
  ReplicaLoad& l = loads_[size_t(replica)];
  if (l.healthy == healthy) return;
  l.healthy = healthy;
  if (healthy) return;
  for (auto it = lru_.begin(); it != lru_.end();) {
    const auto p = prefixes_.find(*it);
    if (p != prefixes_.end() && p->second.replica == replica) {
      prefixes_.erase(p);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace pagellm::engine
