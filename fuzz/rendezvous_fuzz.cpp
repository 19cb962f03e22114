// libFuzzer target for the messages of a multi-process parallel group (parallel/wire.h): arbitrary
// bytes are decoded as a rendezvous hello, a welcome and a step. A decoded step must re-encode to
// the same bytes. Any outcome but success or pagellm::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "parallel/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<unsigned char> message(data, data + size);
  using namespace pagellm;
  try {
    (void)parallel::message_type(message);
  } catch (const Error&) {
  }
  try {
    (void)parallel::decode_hello(message);
  } catch (const Error&) {
  }
  try {
    (void)parallel::decode_welcome(message);
  } catch (const Error&) {
  }
  try {
    const auto step = parallel::decode_step(message);
    if (parallel::encode_step(step->output) != message) std::abort();  // a lossless round trip
  } catch (const Error&) {
  }
  return 0;
}
