// Server-sent events framing as the OpenAI API streams it: one `data: <json>\n\n` event per chunk,
// then `data: [DONE]\n\n`.
#pragma once

#include <string>
#include <string_view>

namespace pagellm::server {

// Frames one event. `payload` must not contain a newline (compact JSON never does).
std::string sse_event(std::string_view payload);
// The terminating event.
std::string sse_done();

}  // namespace pagellm::server
