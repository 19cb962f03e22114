#include "server/sse.h"

namespace pagellm::server {

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out.append("data: ").append(payload).append("\n\n");
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace pagellm::server
