#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagellm::server {

namespace {

bool contains(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Header values must not smuggle new header lines.
bool safe_value(const std::string& v) {
  return v.find_first_of("\r\n") == std::string::npos && v.size() <= 4096;
}

}  // namespace

bool CorsPolicy::origin_allowed(const std::string& origin) const {
  if (origin.empty() || !safe_value(origin)) return false;
  return contains(allowed_origins, "*") || contains(allowed_origins, origin);
}

std::string CorsPolicy::response_headers(const std::string& origin) const {
  if (!origin_allowed(origin)) return "";
  // With credentials a browser refuses "*": the origin is echoed (and caches must key on it).
  const bool echo = allow_credentials || !contains(allowed_origins, "*");
  std::string h = "Access-Control-Allow-Origin: " + (echo ? origin : std::string("*")) + "\r\n";
  if (allow_credentials) h += "Access-Control-Allow-Credentials: true\r\n";
  if (echo) h += "Vary: Origin\r\n";
  return h;
}

CorsPolicy::Preflight CorsPolicy::preflight(const std::string& origin, const std::string& method,
                                            const std::string& request_headers) const {
  Preflight p;
  std::vector<std::string> refused;
  if (!origin_allowed(origin)) refused.push_back("origin");
  if (!contains(allowed_methods, "*") && !contains(allowed_methods, method)) refused.push_back("method");
  if (!contains(allowed_headers, "*")) {
    std::string rest = request_headers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string h = lower(trim(rest.substr(0, comma)));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      bool ok = h.empty();
      for (const auto& a : allowed_headers) ok = ok || lower(a) == h;
      if (!ok) {
        refused.push_back("headers");
        break;
      }
    }
  }
  if (!refused.empty()) {
    p.status = 400;
    p.body = "Disallowed CORS " + join(refused);
    return p;
  }
  p.headers = response_headers(origin);
  const std::string methods = contains(allowed_methods, "*")
                                  ? std::string("DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT")
                                  : join(allowed_methods);
  p.headers += "Access-Control-Allow-Methods: " + methods + "\r\n";
  const std::string headers = contains(allowed_headers, "*") ? request_headers : join(allowed_headers);
  if (!headers.empty() && safe_value(headers))
    p.headers += "Access-Control-Allow-Headers: " + headers + "\r\n";
  p.headers += "Access-Control-Max-Age: 600\r\n";
  if (p.headers.find("Vary: Origin") == std::string::npos) p.headers += "Vary: Origin\r\n";
  return p;
}

std::vector<std::string> parse_cors_list(const std::string& value, const std::string& flag) {
  std::vector<std::string> out;
  const std::string v = trim(value);
  if (!v.empty() && v.front() == '[') {
    const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
    if (j.is_discarded() || !j.is_array())
      invalid_argument(flag + ": expected a JSON list of strings, got '" + value + "'");
    for (const auto& e : j) {
      if (!e.is_string()) invalid_argument(flag + ": expected a JSON list of strings, got '" + value + "'");
      out.push_back(e.get<std::string>());
    }
  } else {
    std::string rest = v;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string item = trim(rest.substr(0, comma));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      if (!item.empty()) out.push_back(item);
    }
  }
  for (const auto& s : out)
    if (!safe_value(s) || s.empty()) invalid_argument(flag + ": invalid entry '" + s + "'");
  return out;
}

}  // namespace pagellm::server
