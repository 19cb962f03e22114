// libFuzzer target: the safetensors header parser must reject any input with pagellm::Error, never
// crash, hang or allocate without bound. Every accepted tensor must lie inside the data section.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tensors = pagellm::io::parse_safetensors_header(data, size, "fuzz.safetensors");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    const uint64_t data_len = size - 8 - header_len;
    for (const auto& t : tensors) {
      const auto begin = reinterpret_cast<uintptr_t>(t.data);
      if (begin > data_len || t.num_bytes > data_len - begin)
        std::abort();  // validation let a bad range through
    }
  } catch (const pagellm::Error&) {
  }
  return 0;
}
