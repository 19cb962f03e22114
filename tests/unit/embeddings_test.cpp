// Pooling requests (embeddings) on the CPU engine (issue 19): last-token and mean pooling give the
// final-normed hidden states the model itself computes for the prompt (mean pooling also across
// chunked prefill, which splits the prompt over steps), L2-normalized or not; engines take only the
// requests of their --runner; base64 of the server's float encoding.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "pagellm/llm.h"
#include "server/embeddings.h"

namespace pagellm {
namespace {

const std::filesystem::path kStories =
    std::filesystem::path(PAGELLM_SHARED_DIR) / "models" / "stories260K";

// The final-normed hidden states [ids.size(), hidden] of one prefill, straight from the model.
std::vector<float> model_hidden(const std::vector<int32_t>& ids) {
  const io::ModelConfig c = io::load_model_config(kStories);
  models::LlamaModel model(c, models::load_llama_weights(c, io::WeightStore::open(kStories)));
  const int64_t n = int64_t(ids.size()), bs = 16, blocks = (n + bs - 1) / bs;
  models::KvCache cache(c.num_hidden_layers, blocks, bs, c.num_key_value_heads, c.head_dim);
  std::vector<int32_t> pos(ids.size()), table(static_cast<size_t>(blocks));
  std::vector<int64_t> slots(ids.size()), rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) pos[i] = int32_t(i), slots[i] = int64_t(i), rows[i] = int64_t(i);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  const cpu::AttentionSeq seq{0, n, 0, table};
  const auto hidden = model.forward(models::ForwardBatch{ids, pos, slots, std::span(&seq, 1)}, cache);
  std::vector<float> out(ids.size() * size_t(c.hidden_size));
  model.final_norm_rows(hidden, rows, out.data());
  return out;
}

std::vector<float> embed(LLMEngine& engine, const std::vector<int32_t>& ids, PoolingType pooling,
                         bool normalize) {
  RequestOptions o;
  o.pooling = pooling;
  o.normalize = normalize;
  engine.add_request("e", PromptInput::from_ids(ids), SamplingParams{}, o);
  std::vector<float> out;
  while (engine.has_unfinished_requests())
    for (RequestOutput& r : engine.step())
      if (r.finished) {
        EXPECT_TRUE(r.outputs.empty() || r.outputs[0].token_ids.empty()) << "nothing generated";
        out = r.embedding;
      }
  return out;
}

TEST(Embeddings, PoolingMatchesTheModelsHiddenStates) {
  if (!std::filesystem::exists(kStories / "config.json")) GTEST_SKIP();
  std::vector<int32_t> ids;
  for (int i = 0; i < 37; ++i) ids.push_back(int32_t(1 + (i * 37) % 500));
  const std::vector<float> h = model_hidden(ids);
  const size_t dim = h.size() / ids.size();
  std::vector<double> last(h.end() - ptrdiff_t(dim), h.end()), mean(dim, 0.0);
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t d = 0; d < dim; ++d) mean[d] += h[t * dim + d] / double(ids.size());
  auto normalized = [](std::vector<double> v) {
    double n = 0;
    for (double x : v) n += x * x;
    for (double& x : v) x /= std::sqrt(n);
    return v;
  };
  EngineArgs args;
  args.model = kStories.string();
  args.runner = "pooling";
  args.max_num_batched_tokens = 8;  // the 37-token prompt runs in 5 chunks
  LLMEngine engine(args);
  const auto expect_near = [&](const std::vector<float>& got, const std::vector<double>& want,
                               const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t d = 0; d < want.size(); ++d) EXPECT_NEAR(got[d], want[d], 2e-5) << what << " " << d;
  };
  expect_near(embed(engine, ids, PoolingType::kLast, false), last, "last");
  expect_near(embed(engine, ids, PoolingType::kLast, true), normalized(last), "last normalized");
  expect_near(embed(engine, ids, PoolingType::kMean, true), normalized(mean), "mean normalized");
  // A generating request is refused by a pooling engine, and the other way round.
  EXPECT_THROW(engine.add_request("g", PromptInput::from_ids(ids), SamplingParams{}), Error);
  EngineArgs gen = args;
  gen.runner = "generate";
  LLMEngine generating(gen);
  RequestOptions o;
  o.pooling = PoolingType::kLast;
  EXPECT_THROW(generating.add_request("p", PromptInput::from_ids(ids), SamplingParams{}, o), Error);
}

TEST(Embeddings, Base64OfFloats) {
  EXPECT_EQ(server::base64_encode("foo", 3), "Zm9v");
  EXPECT_EQ(server::base64_encode("fo", 2), "Zm8=");
  EXPECT_EQ(server::base64_encode("f", 1), "Zg==");
  const float one = 1.0f;  // 00 00 80 3f little-endian
  EXPECT_EQ(server::base64_encode(&one, 4), "AACAPw==");
}

}  // namespace
}  // namespace pagellm
