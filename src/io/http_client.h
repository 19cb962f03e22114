// A minimal HTTP(S) client for model downloads (io/hf_hub.h), on libcurl. libcurl is loaded when
// the first request is made (dlopen of libcurl.so.4), not linked: pagellm starts, and serves local
// model folders, on machines without it; a download there fails with one line saying what to
// install. Redirects are not followed here: the caller decides (the Hub drops its token when a
// redirect leaves its host).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace pagellm::io {

struct HttpResponse {
  long status = 0;                            // 0: no response (error says why)
  std::map<std::string, std::string> headers;  // names lowercased; the last value of each
  std::string error;                          // transport error (connection, timeout, ...)
  uint64_t bytes = 0;                         // body bytes delivered to the sink
};

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool head = false;                 // HEAD instead of GET
  int64_t range_from = -1;           // >= 0: "Range: bytes=N-"
  long connect_timeout_s = 30;
  long low_speed_timeout_s = 60;     // abort when under 1 KB/s for this long
  // Body bytes as they arrive; returning false aborts the transfer (error "aborted").
  std::function<bool(const char* data, size_t size)> sink;
};

// Performs one request. Throws pagellm::Error (kUnsupported) when libcurl cannot be loaded.
HttpResponse http_request(const HttpRequest& request);

// "https://host:port/path" -> "host:port" (lowercased), for same-host checks; "" if malformed.
std::string url_authority(const std::string& url);

}  // namespace pagellm::io
