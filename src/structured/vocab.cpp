#include "structured/vocab.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace pagellm::structured {

Vocab::Vocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids, size_t vocab_size)
    : bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_ids)) {
  // Tokenizer ids past the model's vocabulary can never be sampled: they are left out.
  if (vocab_size > 0 && bytes_.size() > vocab_size) bytes_.resize(vocab_size);
  vocab_size_ = std::max(vocab_size, bytes_.size());
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty() && !is_eos(int32_t(id))) order.push_back(int32_t(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // Preorder construction from the sorted strings: `path` holds the node index at each depth of the
  // previous string; a node's subtree ends when it is popped.
  nodes_.push_back(Node{});
  std::vector<uint32_t> path{0};
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    if (prev) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    while (path.size() > common + 1) {
      nodes_[path.back()].subtree_end = uint32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      Node n;
      n.byte = uint8_t(s[d]);
      n.depth = uint32_t(d + 1);
      n.tokens_begin = n.tokens_end = uint32_t(token_ids_.size());
      path.push_back(uint32_t(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.tokens_end != token_ids_.size()) leaf.tokens_begin = uint32_t(token_ids_.size());
    token_ids_.push_back(id);
    leaf.tokens_end = uint32_t(token_ids_.size());
    max_depth_ = std::max(max_depth_, uint32_t(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].subtree_end = uint32_t(nodes_.size());
    path.pop_back();
  }
  index_lengths();
}

void Vocab::index_lengths() {
  // In preorder a node's parent is the last node seen one level up; children come after their
  // parent, so a reverse pass sees every subtree before its root.
  std::vector<uint32_t> parent(nodes_.size()), last_at_depth(max_depth_ + 1, 0);
  for (size_t i = 1; i < nodes_.size(); ++i) {
    parent[i] = last_at_depth[nodes_[i].depth - 1];
    last_at_depth[nodes_[i].depth] = uint32_t(i);
  }
  for (size_t i = nodes_.size(); i-- > 1;) {
    Node& n = nodes_[i];
    if (n.tokens_begin < n.tokens_end) n.max_len = std::max(n.max_len, n.depth);
    Node& up = nodes_[parent[i]];
    up.max_len = std::max(up.max_len, n.max_len);
  }
  by_length_ = token_ids_;
  std::stable_sort(by_length_.begin(), by_length_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)].size() > bytes_[size_t(b)].size();
  });
  num_longer_than_.assign(max_depth_ + 1, 0);
  for (int32_t id : by_length_) {
    for (size_t len = 0; len < bytes_[size_t(id)].size(); ++len) ++num_longer_than_[len];
  }
}

std::span<const int32_t> Vocab::tokens_longer_than(uint32_t len) const {
  if (len >= num_longer_than_.size()) return {};
  return std::span<const int32_t>(by_length_).first(num_longer_than_[len]);
}

const std::string& Vocab::bytes(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && size_t(id) < bytes_.size() ? bytes_[size_t(id)] : kNone;
}

bool Vocab::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

namespace {

// "<0xHH>" (a byte-fallback token) -> HH, else -1.
int byte_token(const std::string& t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::shared_ptr<const Vocab> Vocab::from_tokenizer(const tok::Tokenizer& tokenizer,
                                                   std::vector<int32_t> eos_ids,
                                                   size_t vocab_size) {
  const int32_t n = tokenizer.vocab_size();
  // Decoders may treat a sequence's first token specially (SentencePiece strips its leading
  // space): decode each token after an anchor token and keep what it added.
  const std::vector<int32_t> anchor_ids = tokenizer.encode("a", false);
  const int32_t anchor = anchor_ids.empty() ? -1 : anchor_ids.front();
  const std::string anchor_text =
      anchor >= 0 ? tokenizer.decode_bytes(std::span(&anchor, 1)) : std::string();
  std::vector<std::string> bytes(size_t(std::max(n, 0)));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) continue;
    const std::optional<std::string> piece = tokenizer.id_to_token(id);
    if (!piece) continue;
    const int b = byte_token(*piece);
    const std::string alone = tokenizer.decode_bytes(std::span(&id, 1));
    if (b >= 0 && alone != *piece) {
      bytes[size_t(id)] = std::string(1, char(b));
      continue;
    }
    if (anchor >= 0) {
      const int32_t pair[2] = {anchor, id};
      const std::string both = tokenizer.decode_bytes(pair);
      if (both.size() >= anchor_text.size() &&
          both.compare(0, anchor_text.size(), anchor_text) == 0) {
        bytes[size_t(id)] = both.substr(anchor_text.size());
        continue;
      }
    }
    bytes[size_t(id)] = alone;
  }
  return std::make_shared<const Vocab>(std::move(bytes), std::move(eos_ids), vocab_size);
}

}  // namespace pagellm::structured
