// The tokenizer's vocabulary as the structured-output matcher sees it: each token id's bytes, the
// EOS ids, and a byte trie of all tokens in preorder (shared by every grammar of one engine), so a
// mask walks each common prefix once and skips a whole subtree at the first byte the grammar
// rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pagellm::tok {
class Tokenizer;
}

namespace pagellm::structured {

class Vocab {
 public:
  struct Node {
    uint8_t byte = 0;           // the byte that leads here from the parent
    uint32_t depth = 0;         // root: 0
    uint32_t subtree_end = 0;   // preorder index just past this node's subtree
    uint32_t tokens_begin = 0;  // tokens whose bytes end here: token_ids()[begin, end)
    uint32_t tokens_end = 0;
    uint32_t max_len = 0;  // bytes of the longest token in this subtree
  };

  // token_bytes[id]: the token's bytes; empty for ids never allowed (special, unused). The mask
  // covers vocab_size ids (a model may pad its vocabulary; tokenizer ids past it are dropped; 0:
  // token_bytes.size()).
  Vocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids, size_t vocab_size);
  // From a tokenizer: special tokens are excluded (except through eos_ids).
  static std::shared_ptr<const Vocab> from_tokenizer(const tok::Tokenizer& tokenizer,
                                                     std::vector<int32_t> eos_ids,
                                                     size_t vocab_size);

  size_t size() const { return vocab_size_; }
  size_t num_words() const { return (vocab_size_ + 31) / 32; }  // uint32 mask words
  const std::string& bytes(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  uint32_t max_depth() const { return max_depth_; }
  // The tokens (of the trie) more than `len` bytes long, in no particular order.
  std::span<const int32_t> tokens_longer_than(uint32_t len) const;

 private:
  // Fills Node::max_len and the by-length index (after the trie is built).
  void index_lengths();

  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_ids_;
  size_t vocab_size_;
  std::vector<Node> nodes_;                // preorder; nodes_[0] is the root (empty prefix)
  std::vector<int32_t> token_ids_;         // grouped by trie node
  std::vector<int32_t> by_length_;         // the trie's tokens, longest first
  std::vector<uint32_t> num_longer_than_;  // [max_depth_ + 1] tokens longer than each length
  uint32_t max_depth_ = 0;
};

}  // namespace pagellm::structured
