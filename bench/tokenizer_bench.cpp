// Tokenizer load and encode speed (CPU time of this thread, so that other work on the machine does not
// inflate the numbers). Usage: tokenizer_bench DIR [FILE]
//   DIR   tokenizer folder (tokenizer.json + tokenizer_config.json)
//   FILE  text to encode as one string (e.g. the 10 MB corpus from bench/make_tokenizer_corpus.sh)
// Prints: parse ms, build ms, total load ms (best of 5), and encode MB/s: the first pass (cold word
// cache) and the best of 3 more.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tokenizer_bench DIR [FILE]\n");
    return 2;
  }
  using namespace pagellm::tok;
  const std::string dir = argv[1];
  const std::string json_text = read_all(dir + "/tokenizer.json");
  const std::string config_text = read_all(dir + "/tokenizer_config.json");
  double best_parse = 1e9, best_build = 1e9, best_load = 1e9;
  for (int i = 0; i < 5; ++i) {
    double t0 = cpu_seconds();
    TokenizerJson file = parse_tokenizer_json(json_text, dir);
    double t1 = cpu_seconds();
    TokenizerImpl impl(file, nlohmann::json::parse(config_text), dir);
    double t2 = cpu_seconds();
    auto full = Tokenizer::from_dir(dir);
    double t3 = cpu_seconds();
    best_parse = std::min(best_parse, t1 - t0);
    best_build = std::min(best_build, t2 - t1);
    best_load = std::min(best_load, t3 - t2);
  }
  std::printf("load %s: parse %.1f ms, build %.1f ms, from_dir (read + parse + build) %.1f ms\n", dir.c_str(),
              best_parse * 1e3, best_build * 1e3, best_load * 1e3);
  if (argc < 3) return 0;
  const std::string text = read_all(argv[2]);
  const auto tokenizer = Tokenizer::from_dir(dir);
  // The first pass runs with an empty word cache (what one-off encodes of new text see).
  const double cold_start = cpu_seconds();
  size_t num_tokens = tokenizer->encode(text, false).size();
  const double cold = cpu_seconds() - cold_start;
  std::printf("encode %s (cold word cache): %.3f s, %.2f MB/s\n", argv[2], cold,
              static_cast<double>(text.size()) / 1e6 / cold);
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const double t0 = cpu_seconds();
    num_tokens = tokenizer->encode(text, false).size();
    best = std::min(best, cpu_seconds() - t0);
  }
  std::printf("encode %s: %zu bytes -> %zu tokens, %.3f s, %.2f MB/s\n", argv[2], text.size(), num_tokens, best,
              static_cast<double>(text.size()) / 1e6 / best);
  return 0;
}
