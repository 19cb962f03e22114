#include "parallel/wire.h"

#include <cstring>

#include "common/error.h"

namespace pagellm::parallel {

namespace {

[[noreturn]] void bad(const std::string& what) { invalid_argument("parallel message: " + what); }

class Writer {
 public:
  explicit Writer(MessageType type) {
    u32(kWireMagic);
    u32(kWireVersion);
    bytes_.push_back(static_cast<unsigned char>(type));
  }
  void u32(uint32_t v) { raw(&v, 4); }
  void i32(int32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void u8(uint8_t v) { bytes_.push_back(v); }
  void blob(const void* p, size_t n) {
    u64(n);
    raw(p, n);
  }
  void str(const std::string& s) { blob(s.data(), s.size()); }
  void ints(std::span<const int32_t> v) { blob(v.data(), v.size() * 4); }
  void pairs(const std::vector<std::pair<int32_t, int32_t>>& v) {
    u64(v.size());
    for (const auto& [a, b] : v) i32(a), i32(b);
  }
  std::vector<unsigned char> take() { return std::move(bytes_); }

 private:
  void raw(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    std::memcpy(bytes_.data() + at, p, n);
  }
  std::vector<unsigned char> bytes_;
};

class Reader {
 public:
  Reader(const std::vector<unsigned char>& m, MessageType expected) : m_(m) {
    if (u32() != kWireMagic) bad("not a pagellm message");
    if (u32() != kWireVersion) bad("protocol version differs (mixed pagellm builds?)");
    if (u8() != static_cast<uint8_t>(expected)) bad("unexpected message type");
  }
  uint32_t u32() { return get<uint32_t>(); }
  int32_t i32() { return get<int32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  int64_t i64() { return get<int64_t>(); }
  uint8_t u8() { return get<uint8_t>(); }
  // A length-prefixed byte run, checked against what is left.
  std::pair<const unsigned char*, size_t> blob() {
    const uint64_t n = u64();
    if (n > m_.size() - pos_) bad("a field's length runs past the end of the message");
    const unsigned char* p = m_.data() + pos_;
    pos_ += size_t(n);
    return {p, size_t(n)};
  }
  std::string str() {
    auto [p, n] = blob();
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::vector<int32_t> ints() {
    auto [p, n] = blob();
    if (n % 4 != 0) bad("an id list is not a whole number of int32");
    std::vector<int32_t> v(static_cast<size_t>(n / 4));
    if (n) std::memcpy(v.data(), p, n);
    return v;
  }
  std::vector<std::pair<int32_t, int32_t>> pairs() {
    const uint64_t n = u64();
    if (n > (m_.size() - pos_) / 8) bad("a block list runs past the end of the message");
    std::vector<std::pair<int32_t, int32_t>> v(static_cast<size_t>(n));
    for (auto& [a, b] : v) a = i32(), b = i32();
    return v;
  }
  void done() const {
    if (pos_ != m_.size()) bad("trailing bytes");
  }
  // Counts are bounded by the bytes that remain (each item takes at least `min_bytes`).
  uint64_t count(size_t min_bytes) {
    const uint64_t n = u64();
    if (n > (m_.size() - pos_) / min_bytes) bad("a count exceeds what the message can hold");
    return n;
  }

 private:
  template <typename T>
  T get() {
    if (sizeof(T) > m_.size() - pos_) bad("truncated");
    T v;
    std::memcpy(&v, m_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::vector<unsigned char>& m_;
  size_t pos_ = 0;
};

}  // namespace

MessageType message_type(const std::vector<unsigned char>& message) {
  if (message.size() < 9) bad("truncated");
  const uint8_t t = message[8];
  if (t < 1 || t > 4) bad("unknown message type " + std::to_string(t));
  return static_cast<MessageType>(t);
}

std::vector<unsigned char> encode_hello(const Hello& h) {
  Writer w(MessageType::kHello);
  w.i32(h.proc_rank);
  w.i32(h.num_procs);
  w.u64(h.fingerprint);
  w.str(h.summary);
  return w.take();
}

Hello decode_hello(const std::vector<unsigned char>& message) {
  Reader r(message, MessageType::kHello);
  Hello h;
  h.proc_rank = r.i32();
  h.num_procs = r.i32();
  h.fingerprint = r.u64();
  h.summary = r.str();
  r.done();
  return h;
}

std::vector<unsigned char> encode_welcome(const Welcome& welcome) {
  Writer w(MessageType::kWelcome);
  w.str(welcome.error);
  w.u64(welcome.ids.size());
  for (const auto& id : welcome.ids) w.blob(id.data(), id.size());
  return w.take();
}

Welcome decode_welcome(const std::vector<unsigned char>& message) {
  Reader r(message, MessageType::kWelcome);
  Welcome w;
  w.error = r.str();
  const uint64_t n = r.count(8);
  for (uint64_t i = 0; i < n; ++i) {
    auto [p, len] = r.blob();
    w.ids.emplace_back(p, p + len);
  }
  r.done();
  return w;
}

std::vector<unsigned char> encode_shutdown() { return Writer(MessageType::kShutdown).take(); }

std::vector<unsigned char> encode_step(const engine::SchedulerOutput& step) {
  Writer w(MessageType::kStep);
  w.i32(step.num_scheduled_tokens);
  w.pairs(step.blocks_to_copy);
  w.pairs(step.blocks_to_swap_out);
  w.pairs(step.blocks_to_swap_in);
  w.u64(step.seqs.size());
  for (const engine::ScheduledSeq& s : step.seqs) {
    w.i64(s.seq_id);
    w.i32(s.num_computed_tokens);
    w.u8(s.needs_sample ? 1 : 0);
    w.u8(static_cast<uint8_t>(s.pooling));  // every rank takes the same (non-graph) path for it
    w.i32(s.prompt_logprobs);
    w.i32(s.num_spec_tokens);  // every rank computes the logits of the same rows
    w.ints(s.token_ids);
    size_t num_groups = 0;
    while (num_groups < s.block_tables.size() && !s.block_tables[num_groups].empty()) ++num_groups;
    w.u8(static_cast<uint8_t>(num_groups));
    for (size_t g = 0; g < num_groups; ++g) w.ints(s.block_tables[g]);
    w.ints(s.prompt_token_ids);
  }
  return w.take();
}

std::unique_ptr<DecodedStep> decode_step(const std::vector<unsigned char>& message) {
  Reader r(message, MessageType::kStep);
  auto d = std::make_unique<DecodedStep>();
  engine::SchedulerOutput& out = d->output;
  out.num_scheduled_tokens = r.i32();
  out.blocks_to_copy = r.pairs();
  out.blocks_to_swap_out = r.pairs();
  out.blocks_to_swap_in = r.pairs();
  // Each seq takes at least 8 + 4 + 1 + 1 + 4 + 4 + 1 + 2 * 8 bytes.
  const uint64_t num_seqs = r.count(39);
  for (uint64_t i = 0; i < num_seqs; ++i) {
    engine::ScheduledSeq s;
    s.seq_id = r.i64();
    s.num_computed_tokens = r.i32();
    const uint8_t sample = r.u8();
    if (sample > 1) bad("needs_sample is not 0 or 1");
    s.needs_sample = sample == 1;
    const uint8_t pooling = r.u8();
    if (pooling > static_cast<uint8_t>(PoolingType::kMean)) bad("unknown pooling type");
    s.pooling = static_cast<PoolingType>(pooling);
    s.prompt_logprobs = r.i32();
    s.num_spec_tokens = r.i32();
    if (s.num_computed_tokens < 0 || s.prompt_logprobs < 0 || s.num_spec_tokens < 0)
      bad("negative position or count");
    s.token_ids = d->storage.emplace_back(r.ints());
    if (s.num_spec_tokens > 0 && (!s.needs_sample || size_t(s.num_spec_tokens) >= s.token_ids.size()))
      bad("draft tokens outside a sampled row");
    const uint8_t num_groups = r.u8();
    if (num_groups > s.block_tables.size()) bad("more KV cache groups than a sequence can have");
    for (size_t g = 0; g < num_groups; ++g) {
      s.block_tables[g] = d->storage.emplace_back(r.ints());
      if (s.block_tables[g].empty())
        bad("an empty block table");  // the groups sent are the non-empty ones
    }
    s.prompt_token_ids = d->storage.emplace_back(r.ints());
    s.params = &d->params;
    out.seqs.push_back(s);
  }
  r.done();
  return d;
}

}  // namespace pagellm::parallel
