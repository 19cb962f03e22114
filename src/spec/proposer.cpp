#include "spec/proposer.h"

#include "spec/draft_proposer.h"
#include "spec/ngram_proposer.h"

namespace pagellm::spec {

std::unique_ptr<Proposer> make_proposer(const EngineArgs& args, const runner::ModelRunner& target,
                                        const tok::Tokenizer& tokenizer) {
  const SpeculativeConfig& sc = args.speculative;
  if (!sc.enabled()) return nullptr;
  sc.validate();
  if (sc.method == "ngram") {
    return std::make_unique<NgramProposer>(sc.num_speculative_tokens, sc.prompt_lookup_min,
                                           sc.prompt_lookup_max);
  }
  return load_draft_proposer(args, target, tokenizer);
}

}  // namespace pagellm::spec
