// Bearer-token authentication for --api-key.
#pragma once

#include <string_view>

namespace pagellm::server {

// Compares in time that depends only on the lengths, never on where the bytes first differ.
bool constant_time_equals(std::string_view a, std::string_view b);

// True when `authorization` is "Bearer <key>" (scheme case-insensitive) with the right key. An empty
// `api_key` disables authentication.
bool authorized(std::string_view authorization, std::string_view api_key);

}  // namespace pagellm::server
