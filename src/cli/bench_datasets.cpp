#include "cli/bench_datasets.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_config.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {

namespace {

using nlohmann::json;

int sample_len(std::mt19937_64& rng, int len, double ratio) {
  if (ratio <= 0) return len;
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<server::BenchPrompt> random_dataset(const DatasetFlags& f) {
  if (f.vocab_size <= 3) invalid_argument("--random-vocab-size must be > 3");
  if (f.chat) invalid_argument("the random dataset sends token ids: use /v1/completions");
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<int32_t> token(3, f.vocab_size - 1);
  std::vector<int32_t> prefix(static_cast<size_t>(std::max(f.prefix_len, 0)));
  for (auto& id : prefix) id = token(rng);
  std::vector<server::BenchPrompt> prompts;
  for (int i = 0; i < f.num_prompts; ++i) {
    server::BenchPrompt p;
    const int own = sample_len(rng, f.input_len, f.range_ratio);
    p.output_len = sample_len(rng, f.output_len, f.range_ratio);
    std::vector<int32_t> ids = prefix;
    for (int t = 0; t < own; ++t) ids.push_back(token(rng));
    p.prompt_len = static_cast<int>(ids.size());
    p.prompt = ids;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// JSONL rows {"prompt": ..., "output_len" | "max_tokens": N}, cycled to num_prompts.
std::vector<server::BenchPrompt> jsonl_dataset(const DatasetFlags& f, int default_output_len) {
  std::ifstream in(f.path);
  if (!in) throw_error(ErrorKind::kNotFound, "--dataset-path: cannot read '" + f.path + "'");
  std::vector<server::BenchPrompt> rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json row = json::parse(line, nullptr, false);
    const std::string where = f.path + ":" + std::to_string(line_no);
    if (!row.is_object() || !row.contains("prompt") ||
        !(row["prompt"].is_string() || row["prompt"].is_array()))
      invalid_argument(where + ": expected an object with a string 'prompt'");
    server::BenchPrompt p;
    p.prompt = row["prompt"];
    p.output_len = default_output_len;
    for (const char* key : {"output_len", "max_tokens", "output_tokens"})
      if (row.contains(key) && row[key].is_number_integer()) p.output_len = row[key].get<int>();
    if (p.output_len < 1) invalid_argument(where + ": output_len must be >= 1");
    rows.push_back(std::move(p));
  }
  if (rows.empty()) invalid_argument("--dataset-path: '" + f.path + "' holds no prompts");
  std::vector<server::BenchPrompt> prompts;
  for (int i = 0; i < f.num_prompts; ++i) prompts.push_back(rows[static_cast<size_t>(i) % rows.size()]);
  return prompts;
}

std::shared_ptr<const tok::Tokenizer> dataset_tokenizer(const DatasetFlags& f) {
  if (f.tokenizer.empty())
    invalid_argument("--dataset-name " + f.name + " counts tokens: pass --tokenizer DIR (or --model DIR)");
  return tok::Tokenizer::from_dir(f.tokenizer);
}

int count_tokens(const tok::Tokenizer& t, const std::string& text) {
  return static_cast<int>(t.encode(text, true).size());
}

std::vector<server::BenchPrompt> sonnet_dataset(const DatasetFlags& f) {
  const auto tokenizer = dataset_tokenizer(f);
  std::ifstream in(f.path);
  if (!in) throw_error(ErrorKind::kNotFound, "--dataset-path: cannot read '" + f.path + "'");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l + "\n");
  if (lines.empty()) invalid_argument("--dataset-path: '" + f.path + "' holds no lines");
  const tok::ChatTemplateConfig config = tok::load_chat_template_config(f.tokenizer);
  if (config.chat_template.empty())
    invalid_argument(f.tokenizer + ": the sonnet dataset formats prompts with the chat template, and "
                     "this tokenizer has none");
  const tok::ChatTemplate chat(config.chat_template);
  auto format = [&](const std::string& text) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", text}});
    return chat.render(tok::build_chat_context(config, messages, nullptr, true));
  };
  const std::string base = "Pick as many lines as you can from these poem lines:\n";
  const int base_offset = count_tokens(*tokenizer, format(base));
  double total = 0;
  for (const std::string& l : lines) total += tokenizer->encode(l, false).size();
  const double avg = std::max(total / double(lines.size()), 1e-9);
  const int num_input = int(std::lround((f.sonnet_input_len - base_offset) / avg));
  const int num_prefix = std::max(int(std::lround((f.sonnet_prefix_len - base_offset) / avg)), 0);
  if (f.sonnet_input_len <= base_offset || num_input <= num_prefix)
    invalid_argument("--sonnet-input-len " + std::to_string(f.sonnet_input_len) + " must exceed the "
                     "prompt header (" + std::to_string(base_offset) + " tokens) and the prefix");
  std::string prefix;
  for (int i = 0; i < num_prefix; ++i) prefix += lines[size_t(i) % lines.size()];
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<size_t> pick(0, lines.size() - 1);
  std::vector<server::BenchPrompt> prompts;
  for (int i = 0; i < f.num_prompts; ++i) {
    std::string text = base + prefix;
    for (int k = num_prefix; k < num_input; ++k) text += lines[pick(rng)];
    server::BenchPrompt p;
    const std::string formatted = format(text);
    p.prompt = f.chat ? text : formatted;
    p.prompt_len = count_tokens(*tokenizer, formatted);
    p.output_len = f.sonnet_output_len;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

std::vector<server::BenchPrompt> sharegpt_dataset(const DatasetFlags& f) {
  const auto tokenizer = dataset_tokenizer(f);
  std::ifstream in(f.path);
  if (!in) throw_error(ErrorKind::kNotFound, "--dataset-path: cannot read '" + f.path + "'");
  const json data = json::parse(in, nullptr, false);
  if (!data.is_array()) invalid_argument(f.path + ": expected the ShareGPT JSON array");
  std::vector<const json*> rows;
  for (const json& row : data)
    if (row.is_object() && row.contains("conversations") && row["conversations"].is_array() &&
        row["conversations"].size() >= 2 && row["conversations"][0].contains("value") &&
        row["conversations"][1].contains("value") && row["conversations"][0]["value"].is_string() &&
        row["conversations"][1]["value"].is_string())
      rows.push_back(&row);
  std::mt19937_64 rng(f.seed);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<server::BenchPrompt> prompts;
  for (const json* row : rows) {
    if (int(prompts.size()) >= f.num_prompts) break;
    const std::string prompt = (*row)["conversations"][0]["value"].get<std::string>();
    const std::string reply = (*row)["conversations"][1]["value"].get<std::string>();
    server::BenchPrompt p;
    p.prompt_len = count_tokens(*tokenizer, prompt);
    p.output_len = f.sharegpt_output_len > 0 ? f.sharegpt_output_len
                                             : count_tokens(*tokenizer, reply);
    if (p.prompt_len < 4 || (f.sharegpt_output_len <= 0 && p.output_len < 4) ||
        p.prompt_len > 1024 || p.prompt_len + p.output_len > 2048)
      continue;
    p.prompt = prompt;
    prompts.push_back(std::move(p));
  }
  if (int(prompts.size()) < f.num_prompts)
    invalid_argument(f.path + ": only " + std::to_string(prompts.size()) +
                     " usable conversations for --num-prompts " + std::to_string(f.num_prompts));
  return prompts;
}

}  // namespace

std::vector<server::BenchPrompt> load_dataset(const DatasetFlags& f) {
  if (f.name != "random" && f.path.empty())
    invalid_argument("--dataset-name " + f.name + " needs --dataset-path");
  if (f.name == "random") return random_dataset(f);
  if (f.name == "sonnet") return sonnet_dataset(f);
  if (f.name == "sharegpt") return sharegpt_dataset(f);
  if (f.name == "custom") return jsonl_dataset(f, f.custom_output_len);
  if (f.name == "jsonl") return jsonl_dataset(f, f.output_len);
  invalid_argument("--dataset-name " + f.name + ": expected random, sonnet, sharegpt, custom or jsonl");
}

std::vector<PromptInput> random_token_prompts(int count, int len, int32_t lo, int32_t hi,
                                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<PromptInput> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(len));
    for (int32_t& id : ids) id = dist(rng);
    prompts.push_back(PromptInput::from_ids(std::move(ids)));
  }
  return prompts;
}

}  // namespace pagellm::cli
