#include "io/http_client.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "common/error.h"

namespace pagellm::io {

namespace {

// The libcurl entry points pagellm uses, resolved from the shared library.
struct Curl {
  CURLcode (*global_init)(long);
  CURL* (*easy_init)();
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

const Curl& curl() {
  static std::once_flag once;
  static Curl c{};
  static std::string failure;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"})
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!lib) {
      failure = "downloading models needs libcurl (apt-get install libcurl4); it could not be loaded";
      return;
    }
    auto sym = [&](const char* name) {
      void* p = ::dlsym(lib, name);
      if (!p && failure.empty()) failure = std::string("libcurl lacks ") + name;
      return p;
    };
    c.global_init = reinterpret_cast<decltype(c.global_init)>(sym("curl_global_init"));
    c.easy_init = reinterpret_cast<decltype(c.easy_init)>(sym("curl_easy_init"));
    c.easy_setopt = reinterpret_cast<decltype(c.easy_setopt)>(sym("curl_easy_setopt"));
    c.easy_perform = reinterpret_cast<decltype(c.easy_perform)>(sym("curl_easy_perform"));
    c.easy_getinfo = reinterpret_cast<decltype(c.easy_getinfo)>(sym("curl_easy_getinfo"));
    c.easy_cleanup = reinterpret_cast<decltype(c.easy_cleanup)>(sym("curl_easy_cleanup"));
    c.easy_strerror = reinterpret_cast<decltype(c.easy_strerror)>(sym("curl_easy_strerror"));
    c.slist_append = reinterpret_cast<decltype(c.slist_append)>(sym("curl_slist_append"));
    c.slist_free_all = reinterpret_cast<decltype(c.slist_free_all)>(sym("curl_slist_free_all"));
    if (failure.empty()) c.global_init(CURL_GLOBAL_DEFAULT);
  });
  if (!failure.empty()) unsupported(failure);
  return c;
}

struct Transfer {
  const HttpRequest* request;
  HttpResponse* response;
  const Curl* curl;
  CURL* handle;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) t->response->headers.clear();  // a new response's headers
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return char(std::tolower(ch)); });
    std::string value = line.substr(colon + 1);
    const size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t\r\n");
    t->response->headers[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  // libcurl has parsed the status line by the time the body arrives; error bodies (4xx / 5xx) are
  // not data and never reach the sink.
  if (t->response->status == 0) t->curl->easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &t->response->status);
  if (t->response->status != 200 && t->response->status != 206) return n;
  if (t->request->sink && !t->request->sink(data, n)) return 0;  // aborts with CURLE_WRITE_ERROR
  t->response->bytes += n;
  return n;
}

}  // namespace

std::string url_authority(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t begin = scheme + 3;
  const size_t end = url.find_first_of("/?#", begin);
  std::string host = url.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  const size_t at = host.rfind('@');  // user info is not part of the host
  if (at != std::string::npos) host = host.substr(at + 1);
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  return host;
}

HttpResponse http_request(const HttpRequest& request) {
  const Curl& c = curl();
  HttpResponse response;
  CURL* h = c.easy_init();
  if (!h) {
    response.error = "libcurl could not create a handle";
    return response;
  }
  curl_slist* headers = nullptr;
  for (const std::string& line : request.headers) headers = c.slist_append(headers, line.c_str());
  Transfer t{&request, &response, &c, h};
  const std::string range =
      request.range_from >= 0 ? std::to_string(request.range_from) + "-" : std::string();
  c.easy_setopt(h, CURLOPT_URL, request.url.c_str());
  c.easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  c.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  c.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(h, CURLOPT_USERAGENT, "pagellm");
  c.easy_setopt(h, CURLOPT_CONNECTTIMEOUT, request.connect_timeout_s);
  c.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  c.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, request.low_speed_timeout_s);
  c.easy_setopt(h, CURLOPT_HEADERFUNCTION, &on_header);
  c.easy_setopt(h, CURLOPT_HEADERDATA, &t);
  if (request.head) c.easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (!range.empty()) c.easy_setopt(h, CURLOPT_RANGE, range.c_str());
  c.easy_setopt(h, CURLOPT_WRITEFUNCTION, &on_body);
  c.easy_setopt(h, CURLOPT_WRITEDATA, &t);
  c.easy_setopt(h, CURLOPT_FAILONERROR, 0L);
  const CURLcode rc = c.easy_perform(h);
  c.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  if (rc != CURLE_OK) response.error = c.easy_strerror(rc);
  c.slist_free_all(headers);
  c.easy_cleanup(h);
  return response;
}

}  // namespace pagellm::io
