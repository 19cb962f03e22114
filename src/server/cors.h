// Cross-origin resource sharing for the HTTP server (vLLM's --allowed-origins / --allowed-methods /
// --allowed-headers / --allow-credentials; like vLLM, every origin is allowed by default). The HTTP
// layer answers preflights (OPTIONS with Origin and Access-Control-Request-Method) itself and adds
// the Access-Control-Allow-* headers to every response to an allowed Origin.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace pagellm::server {

struct CorsPolicy {
  std::vector<std::string> allowed_origins{"*"};
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;

  bool origin_allowed(const std::string& origin) const;
  // Headers ("Name: value\r\n" lines) for a simple (non-preflight) response to `origin`; empty when
  // the request has no Origin or it is not allowed (the browser then blocks the response).
  std::string response_headers(const std::string& origin) const;

  struct Preflight {
    int status = 200;
    std::string headers;  // "Name: value\r\n" lines
    std::string body;     // why it was refused (status 400)
  };
  // The answer to a preflight for `method` with the comma-separated `request_headers`.
  Preflight preflight(const std::string& origin, const std::string& method,
                      const std::string& request_headers) const;
};

// Parses a flag value: a JSON list of strings ('["https://a.example", "https://b.example"]', as vLLM
// takes it) or a comma-separated list. Throws pagellm::Error naming `flag` for anything else.
std::vector<std::string> parse_cors_list(const std::string& value, const std::string& flag);

}  // namespace pagellm::server
