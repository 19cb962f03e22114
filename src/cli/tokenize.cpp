// `pagellm tokenize` and `pagellm detokenize`: the tokenizer from the command line, one text (or id
// list) per call or a JSON-lines batch (--jsonl), which is how the e2e tests and benchmarks drive it.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {

namespace {

using nlohmann::json;

struct TokenizerFlags {
  std::string tokenizer_dir;
  std::string model_dir;
  void add(CLI::App& app) {
    app.add_option("--tokenizer", tokenizer_dir, "folder with tokenizer.json (+ tokenizer_config.json)");
    app.add_option("--model", model_dir, "model folder; its tokenizer is used when --tokenizer is not given");
  }
  std::shared_ptr<const tok::Tokenizer> load() const {
    const std::string dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
    if (dir.empty()) invalid_argument("--tokenizer (or --model) is required");
    return tok::Tokenizer::from_dir(dir);
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU time of this process: on a shared machine it measures our work without the waiting.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::ifstream open_input(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kNotFound, path + ": cannot open");
  return in;
}

// Reads one JSON value per non-empty line; `what` names the expected value in errors.
template <typename Fn>
void for_each_jsonl(const std::string& path, const char* what, Fn&& fn) {
  std::ifstream in = open_input(path);
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    json value = json::parse(line, nullptr, false);
    if (value.is_discarded()) invalid_argument(path + ":" + std::to_string(line_number) + ": not JSON (" + what + ")");
    fn(value, path + ":" + std::to_string(line_number));
  }
}

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Encode text to token ids; prints {\"ids\": [...]}"};
  TokenizerFlags flags;
  flags.add(app);
  bool add_special_tokens = false;
  std::string text, jsonl, input_file;
  bool stats = false;
  app.add_flag("--add-special-tokens", add_special_tokens, "apply the post-processor (BOS etc.)");
  app.add_option("--jsonl", jsonl, "encode each line of FILE (a JSON string); prints one {\"ids\"} per line");
  app.add_option("--input-file", input_file, "encode the whole content of FILE as one text");
  app.add_flag("--stats", stats, "print load time and encoding speed to stderr (with --input-file, no ids printed)");
  app.add_option("text", text, "text to encode");
  PAGELLM_PARSE(app, argc, argv);

  const auto load_start = std::chrono::steady_clock::now();
  const double load_cpu_start = cpu_seconds();
  const auto tokenizer = flags.load();
  if (stats) {
    std::fprintf(stderr, "load: %.1f ms wall, %.1f ms CPU\n", seconds_since(load_start) * 1e3,
                 (cpu_seconds() - load_cpu_start) * 1e3);
  }

  if (!jsonl.empty()) {
    for_each_jsonl(jsonl, "a JSON string", [&](const json& value, const std::string& where) {
      if (!value.is_string()) invalid_argument(where + ": expected a JSON string");
      std::cout << dump(json{{"ids", tokenizer->encode(value.get<std::string>(), add_special_tokens)}}) << '\n';
    });
    return 0;
  }
  if (!input_file.empty()) {
    std::ifstream in = open_input(input_file);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    const std::string content = buffer.str();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    const auto ids = tokenizer->encode(content, add_special_tokens);
    const double encode_s = seconds_since(start), encode_cpu_s = cpu_seconds() - cpu_start;
    if (stats) {
      std::fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.3f s wall (%.2f MB/s), %.3f s CPU (%.2f MB/s)\n",
                   content.size(), ids.size(), encode_s, static_cast<double>(content.size()) / 1e6 / encode_s,
                   encode_cpu_s, static_cast<double>(content.size()) / 1e6 / encode_cpu_s);
      return 0;
    }
    std::cout << dump(json{{"ids", ids}}) << '\n';
    return 0;
  }
  std::cout << dump(json{{"ids", tokenizer->encode(text, add_special_tokens)}}) << '\n';
  return 0;
}

std::vector<int32_t> ids_from_json(const json& value, const std::string& where) {
  if (!value.is_array()) invalid_argument(where + ": expected an array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : value) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 0x7FFFFFFF) {
      invalid_argument(where + ": token ids must be non-negative integers");
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

int run_detokenize(int argc, char** argv) {
  CLI::App app{"Decode token ids to text; prints {\"text\": \"...\"}"};
  TokenizerFlags flags;
  flags.add(app);
  bool skip_special_tokens = false, incremental = false;
  std::string jsonl;
  std::vector<int64_t> id_args;
  app.add_flag("--skip-special-tokens", skip_special_tokens, "leave special tokens out of the text");
  app.add_flag("--incremental", incremental, "also stream the ids through the incremental detokenizer (\"deltas\")");
  app.add_option("--jsonl", jsonl,
                 "decode each line of FILE: an id array, or {\"prompt_ids\": [...], \"ids\": [...]}");
  app.add_option("ids", id_args, "token ids");
  PAGELLM_PARSE(app, argc, argv);
  const auto tokenizer = flags.load();

  auto decode_one = [&](const std::vector<int32_t>& prompt_ids, const std::vector<int32_t>& ids) {
    json out{{"text", tokenizer->decode(ids, skip_special_tokens)}};
    if (incremental) {
      tok::IncrementalDetokenizer detok(tokenizer, prompt_ids, skip_special_tokens);
      json deltas = json::array();
      for (int32_t id : ids) deltas.push_back(detok.push(id));
      out["deltas"] = std::move(deltas);
    }
    std::cout << dump(out) << '\n';
  };
  if (!jsonl.empty()) {
    for_each_jsonl(jsonl, "token ids", [&](const json& value, const std::string& where) {
      if (value.is_object()) {
        decode_one(ids_from_json(value.value("prompt_ids", json::array()), where),
                   ids_from_json(value.value("ids", json::array()), where));
      } else {
        decode_one({}, ids_from_json(value, where));
      }
    });
    return 0;
  }
  std::vector<int32_t> ids;
  for (int64_t v : id_args) {
    if (v < 0 || v > 0x7FFFFFFF) invalid_argument("token ids must be non-negative 32-bit integers");
    ids.push_back(static_cast<int32_t>(v));
  }
  decode_one({}, ids);
  return 0;
}

}  // namespace

PAGELLM_COMMAND("tokenize", "encode text with a model's tokenizer", run_tokenize);
PAGELLM_COMMAND("detokenize", "decode token ids with a model's tokenizer", run_detokenize);

}  // namespace pagellm::cli
