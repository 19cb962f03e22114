// Reading quantization_config fields: the typed accessors every format's parser shares, each
// throwing a one-line "SOURCE: quantization_config: ..." error that names the field.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagellm::quant::fields {

using nlohmann::json;

[[noreturn]] inline void bad(const std::string& source, const std::string& what) {
  invalid_argument(source + ": quantization_config: " + what);
}

[[noreturn]] inline void refuse(const std::string& source, const std::string& what) {
  unsupported(source + ": quantization_config: " + what);
}

inline bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

inline std::string str_field(const json& j, const char* key, const std::string& source,
                             const std::string& where, const std::string& fallback = "") {
  if (!present(j, key)) return fallback;
  if (!j[key].is_string()) bad(source, where + "'" + key + "' must be a string");
  return j[key].get<std::string>();
}

inline std::vector<std::string> string_list(const json& j, const char* key,
                                            const std::string& source) {
  std::vector<std::string> out;
  if (!present(j, key)) return out;
  if (!j[key].is_array()) bad(source, std::string("'") + key + "' must be a list of strings");
  for (const json& e : j[key]) {
    if (!e.is_string()) bad(source, std::string("'") + key + "' must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// The first of `keys` present (vLLM's get_from_keys: formats renamed their fields) as an integer;
// `fallback` when none is, or an error when `required`.
inline int64_t int_field(const json& j, std::initializer_list<const char*> keys,
                         const std::string& source, const std::string& where, int64_t fallback,
                         bool required = false) {
  for (const char* key : keys) {
    if (!present(j, key)) continue;
    if (!j[key].is_number_integer()) bad(source, where + "'" + key + "' must be an integer");
    return j[key].get<int64_t>();
  }
  if (required) bad(source, where + "missing integer field '" + *keys.begin() + "'");
  return fallback;
}

inline bool bool_field(const json& j, const char* key, const std::string& source,
                       const std::string& where, bool fallback) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean()) bad(source, where + "'" + key + "' must be true or false");
  return j[key].get<bool>();
}

}  // namespace pagellm::quant::fields
