#include "engine/token_controls.h"

#include <algorithm>

#include "common/error.h"

namespace pagellm::engine {

std::vector<uint32_t> allowed_token_mask(const std::vector<int32_t>& ids, int32_t vocab) {
  std::vector<uint32_t> words((static_cast<size_t>(std::max(vocab, 0)) + 31) / 32, 0u);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      invalid_argument("allowed_token_ids: token id " + std::to_string(id) +
                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    words[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
  }
  return words;
}

std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words,
                                                     const tok::Tokenizer& tokenizer,
                                                     int32_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = word.substr(std::min(word.find_first_not_of(' '), word.size()));
    std::vector<int32_t> plain = tokenizer.encode(bare, /*add_special_tokens=*/false);
    std::vector<int32_t> spaced = tokenizer.encode(" " + bare, /*add_special_tokens=*/false);
    for (const auto* ids : {&plain, &spaced}) {
      for (int32_t id : *ids) {
        if (id < 0 || id >= vocab) {
          invalid_argument("bad_words: '" + word + "' tokenizes to id " + std::to_string(id) +
                           ", outside the vocabulary");
        }
      }
    }
    if (plain.empty()) continue;  // a word of spaces only
    const bool spaced_differs =
        !spaced.empty() && spaced.size() == plain.size() && spaced.front() != plain.front();
    out.push_back(std::move(plain));
    if (spaced_differs) out.push_back(std::move(spaced));
  }
  return out;
}

void add_bad_word_bans(const std::vector<std::vector<int32_t>>& words,
                       std::span<const int32_t> output, std::vector<int32_t>& banned) {
  for (const std::vector<int32_t>& word : words) {
    const size_t num_prefix = word.size() - 1;
    if (num_prefix > output.size()) continue;
    if (!std::equal(word.begin(), word.end() - 1,
                    output.end() - static_cast<std::ptrdiff_t>(num_prefix)))
      continue;
    if (std::find(banned.begin(), banned.end(), word.back()) == banned.end())
      banned.push_back(word.back());
  }
}

}  // namespace pagellm::engine
