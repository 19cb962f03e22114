// `pagellm embed`: embeddings of texts from the command line (vLLM's LLM.embed offline), one JSON
// line per input: {"index": i, "embedding": [...]}. The engine runs with --runner pooling.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "common/error.h"
#include "pagellm/llm.h"

namespace pagellm::cli {

namespace {

int run_embed(int argc, char** argv) {
  CLI::App app{"Embeddings of texts (the final-normed hidden state of each text's last token)"};
  EngineArgs args;
  add_engine_flags(app, args);
  std::vector<std::string> inputs;
  std::string inputs_file;
  app.add_option("--input", inputs, "a text to embed (repeatable)");
  app.add_option("--inputs-file", inputs_file, "a file of texts, one per line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!inputs_file.empty()) {
    std::ifstream in(inputs_file);
    if (!in) throw_error(ErrorKind::kNotFound, "--inputs-file: cannot read '" + inputs_file + "'");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) inputs.push_back(line);
  }
  if (inputs.empty()) invalid_argument("embed: give --input TEXT or --inputs-file FILE");
  args.runner = "pooling";
  args.resolve();
  LLM llm(args);
  std::vector<PromptInput> prompts;
  for (const std::string& text : inputs) prompts.push_back(PromptInput::from_text(text));
  const std::vector<std::vector<float>> vectors = llm.embed(prompts);
  for (size_t i = 0; i < vectors.size(); ++i) {
    const nlohmann::json line = {{"index", i}, {"embedding", vectors[i]}};
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
}

}  // namespace

PAGELLM_COMMAND("embed", "embeddings of texts (like vLLM's LLM.embed)", run_embed);

}  // namespace pagellm::cli
