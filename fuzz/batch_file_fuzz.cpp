// libFuzzer target: an OpenAI batch file (`pagellm run-batch -i FILE`) must be parsed or rejected
// with pagellm::Error, never crash or hang; every parsed request has a custom_id unique in the
// file, an object body, a positive line number in increasing order, and gets a refusal or none and
// output lines that serialize.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "common/error.h"
#include "server/batch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace pagellm::server;
  try {
    const auto requests = parse_batch_file(text, "fuzz/batch.jsonl");
    if (requests.empty()) std::abort();
    std::set<std::string> ids;
    int last_line = 0;
    for (const BatchRequestLine& r : requests) {
      if (!ids.insert(r.custom_id).second || !r.body.is_object() || r.line <= last_line)
        std::abort();
      last_line = r.line;
      const std::string refusal = batch_request_refusal(r);
      const nlohmann::json out =
          refusal.empty() ? batch_output(r, 200, r.body) : batch_error_output(r, refusal);
      if (out.at("custom_id") != r.custom_id) std::abort();
      (void)out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  } catch (const pagellm::Error&) {
  }
  return 0;
}
