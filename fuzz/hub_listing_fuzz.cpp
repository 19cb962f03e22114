// libFuzzer target: the Hugging Face Hub's model listing (GET /api/models/ID/revision/REV), which
// comes from the network, must be accepted or refused with pagellm::Error, never crash; every file
// an accepted listing names must stay inside the cache (no absolute path, no "..").
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "io/hf_hub.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const pagellm::io::hub::ModelListing l =
        pagellm::io::hub::parse_model_listing(body, "fuzz/model", "main");
    if (l.commit.size() != 40 || l.files.empty()) std::abort();
    for (const std::string& f : l.files) {
      if (f.empty() || f.front() == '/' || f.back() == '/') std::abort();
      for (size_t b = 0, e; b <= f.size(); b = e + 1) {
        e = f.find('/', b);
        if (e == std::string::npos) e = f.size();
        const std::string part = f.substr(b, e - b);
        if (part.empty() || part == "." || part == "..") std::abort();
      }
    }
  } catch (const pagellm::Error&) {
  }
  return 0;
}
