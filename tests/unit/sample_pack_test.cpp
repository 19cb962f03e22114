// Host-side packing of the GPU sampler's inputs (runner/sample_pack.h).
#include "runner/sample_pack.h"

#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "common/error.h"
#include "engine/sampler.h"

namespace pagellm::runner {
namespace {

struct Seq {
  SamplingParams params;
  std::vector<int32_t> prompt{1, 5, 5, 9};
  std::vector<int32_t> output{7, 7, -1, 3};
  std::vector<int32_t> banned{2, 100000};
  engine::ScheduledSeq view() const {
    engine::ScheduledSeq s;
    s.seq_id = 4;
    s.needs_sample = true;
    s.params = &params;
    s.seed = 99;
    s.prompt_token_ids = prompt;
    s.output_token_ids = output;
    s.banned_token_ids = banned;
    return s;
  }
};

TEST(SamplePack, PlainRowPacksOnlyBannedIdsAndTheUniform) {
  Seq seq;
  seq.params.temperature = 0.7f;
  seq.params.top_k = 40;
  seq.params.top_p = 0.9f;
  seq.params.min_p = 0.1f;
  seq.params.logprobs = 5;
  std::vector<int32_t> ids{42};  // an earlier row's lists
  const cuda::SampleRow row = pack_sample_row(seq.view(), ids);
  EXPECT_EQ(row.u, engine::sample_uniform(99, 4));  // counter = number of output tokens
  EXPECT_EQ(row.temperature, 0.7f);
  EXPECT_EQ(row.top_k, 40);
  EXPECT_EQ(row.top_p, 0.9f);
  EXPECT_EQ(row.min_p, 0.1f);
  EXPECT_EQ(row.num_top, 5);
  EXPECT_EQ(row.score_token, -1);
  EXPECT_EQ(row.ids_begin, 1);
  EXPECT_EQ(row.num_banned, 2);
  EXPECT_EQ(row.num_prompt, 0);
  EXPECT_EQ(row.num_output, 0);
  EXPECT_EQ(ids, (std::vector<int32_t>{42, 2, 100000}));
}

TEST(SamplePack, LogitBiasPairsFollowThePenaltyLists) {
  Seq seq;
  seq.params.logit_bias = {{3, 2.5f}, {0, -100.0f}};
  const std::vector<uint32_t> mask{0xFFu};
  engine::ScheduledSeq view = seq.view();
  view.allowed_token_mask = mask;
  std::vector<int32_t> ids;
  const cuda::SampleRow row = pack_sample_row(view, ids);
  EXPECT_EQ(row.num_bias, 2);
  EXPECT_EQ(row.bias_begin, 2);  // after the two banned ids
  EXPECT_EQ(ids[2], 3);
  EXPECT_EQ(std::bit_cast<float>(ids[3]), 2.5f);
  EXPECT_EQ(ids[4], 0);
  EXPECT_EQ(std::bit_cast<float>(ids[5]), -100.0f);
  EXPECT_EQ(row.mask_begin, 6);
  EXPECT_EQ(static_cast<uint32_t>(ids[6]), 0xFFu);
}

TEST(SamplePack, StructuredOutputMaskWordsFollowTheIdLists) {
  Seq seq;
  const std::vector<uint32_t> mask{0xFFFFFFFFu, 0x80000001u};
  engine::ScheduledSeq view = seq.view();
  view.allowed_token_mask = mask;
  std::vector<int32_t> ids{42};
  const cuda::SampleRow row = pack_sample_row(view, ids);
  EXPECT_EQ(row.num_banned, 2);
  EXPECT_EQ(row.mask_begin, 3);
  EXPECT_EQ(row.num_mask_words, 2);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(static_cast<uint32_t>(ids[3]), 0xFFFFFFFFu);
  EXPECT_EQ(static_cast<uint32_t>(ids[4]), 0x80000001u);
  std::vector<int32_t> none;
  EXPECT_EQ(pack_sample_row(seq.view(), none).num_mask_words, 0);
}

// The CUDA runner packs before the masks are built (they are made while the forward pass runs):
// the words are placed after every row's lists, then written there once they are ready.
TEST(SamplePack, MaskWordsArePlacedAfterTheListsAndPutInLater) {
  Seq seq;
  seq.params.logit_bias = {{3, 2.5f}};
  std::vector<uint32_t> mask{0u, 0u, 0u};
  engine::ScheduledSeq view = seq.view();
  view.allowed_token_mask = mask;
  std::vector<int32_t> ids{42};
  std::vector<cuda::SampleRow> rows{pack_sample_row(view, ids, /*copy_mask=*/false)};
  EXPECT_EQ(rows[0].mask_begin, -1);
  EXPECT_EQ(rows[0].num_mask_words, 3);
  ASSERT_EQ(ids.size(), 5u);  // 1 + 2 banned + 1 bias pair: no room taken for the mask
  rows.push_back(pack_sample_row(view, ids, /*copy_mask=*/false));  // a second masked row
  ASSERT_EQ(ids.size(), 9u);
  EXPECT_EQ(place_sample_masks(rows, ids.size()), 15u);
  EXPECT_EQ(rows[0].mask_begin, 9);
  EXPECT_EQ(rows[1].mask_begin, 12);
  std::vector<int32_t> buffer(15, 7);
  std::copy(ids.begin(), ids.end(), buffer.begin());
  mask = {0x1u, 0xFFFFFFFFu, 0x80000000u};  // the mask is built
  put_sample_mask(view, rows[1], buffer);
  EXPECT_EQ(std::vector<int32_t>(buffer.begin(), buffer.begin() + 9), ids);
  EXPECT_EQ(std::vector<int32_t>(buffer.begin() + 9, buffer.begin() + 12),
            std::vector<int32_t>(3, 7));  // row 0's place untouched
  EXPECT_EQ(static_cast<uint32_t>(buffer[12]), 0x1u);
  EXPECT_EQ(static_cast<uint32_t>(buffer[13]), 0xFFFFFFFFu);
  EXPECT_EQ(static_cast<uint32_t>(buffer[14]), 0x80000000u);
  std::vector<int32_t> short_buffer(13);  // too short for row 1's words
  EXPECT_THROW(put_sample_mask(view, rows[1], short_buffer), Error);
  cuda::SampleRow unplaced = pack_sample_row(view, ids, /*copy_mask=*/false);
  EXPECT_THROW(put_sample_mask(view, unplaced, buffer), Error);
}

TEST(SamplePack, RepetitionPenaltyPacksPromptThenOutputAsGiven) {
  Seq seq;
  seq.params.repetition_penalty = 1.2f;
  std::vector<int32_t> ids;
  const cuda::SampleRow row = pack_sample_row(seq.view(), ids);
  EXPECT_EQ(row.repetition_penalty, 1.2f);
  EXPECT_EQ(row.num_banned, 2);
  EXPECT_EQ(row.num_prompt, 4);
  EXPECT_EQ(row.num_output, 4);
  // Duplicates and out-of-vocab ids are kept: the kernel handles them like the CPU sampler.
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 100000, 1, 5, 5, 9, 7, 7, -1, 3}));
}

TEST(SamplePack, FrequencyOrPresencePacksOnlyTheOutput) {
  for (bool presence : {false, true}) {
    Seq seq;
    seq.banned.clear();
    (presence ? seq.params.presence_penalty : seq.params.frequency_penalty) = 0.5f;
    std::vector<int32_t> ids;
    const cuda::SampleRow row = pack_sample_row(seq.view(), ids);
    EXPECT_EQ(row.num_prompt, 0);
    EXPECT_EQ(row.num_output, 4);
    EXPECT_EQ(ids, seq.output);
  }
}

TEST(SamplePack, GreedyRowNeedsNoUniformAndRowsAppendInOrder) {
  Seq a, b;
  a.params.temperature = 0.0f;
  b.params.frequency_penalty = 1.0f;
  std::vector<int32_t> ids;
  const cuda::SampleRow ra = pack_sample_row(a.view(), ids);
  const cuda::SampleRow rb = pack_sample_row(b.view(), ids);
  EXPECT_EQ(ra.u, 0.0);
  EXPECT_EQ(ra.temperature, 0.0f);
  EXPECT_EQ(rb.ids_begin, ra.ids_begin + ra.num_banned + ra.num_prompt + ra.num_output);
  EXPECT_EQ(ids.size(), size_t(rb.ids_begin + rb.num_banned + rb.num_output));
}

TEST(SamplePack, ScoreRowCarriesTheTokenAndClampedTopN) {
  Seq seq;
  engine::ScheduledSeq v = seq.view();
  v.prompt_logprobs = 50;
  const cuda::SampleRow row = pack_score_row(v, 9, 32);
  EXPECT_EQ(row.score_token, 9);
  EXPECT_EQ(row.num_top, cuda::kMaxTopLogprobs);
  EXPECT_THROW(pack_score_row(v, 32, 32), Error);
  EXPECT_THROW(pack_score_row(v, -1, 32), Error);
}

TEST(SamplePack, MissingParamsIsAnInternalError) {
  engine::ScheduledSeq s;
  std::vector<int32_t> ids;
  EXPECT_THROW(pack_sample_row(s, ids), Error);
}

TEST(SamplePack, OutputsBecomeTokenLogprobs) {
  cuda::SampleOutput out;
  out.token = 7;
  out.logprob = -0.25f;
  out.num_top = 2;
  out.top_ids[0] = 7;
  out.top_logprobs[0] = -0.25f;
  out.top_ids[1] = 3;
  out.top_logprobs[1] = -2.0f;
  const TokenLogprobs lp = to_token_logprobs(out);
  EXPECT_EQ(lp.token_id, 7);
  EXPECT_EQ(lp.logprob, -0.25f);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[1], (std::pair<int32_t, float>{3, -2.0f}));
  out.num_top = 0;
  EXPECT_TRUE(to_token_logprobs(out).top.empty());
}

}  // namespace
}  // namespace pagellm::runner
