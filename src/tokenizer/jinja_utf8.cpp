#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  *len = 1;
  if (b0 < 0x80) return b0;
  size_t need = 0;
  char32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3;
    cp = b0 & 0x07;
  } else {
    return 0xFFFD;
  }
  if (i + need >= s.size()) return 0xFFFD;  // truncated sequence
  for (size_t k = 1; k <= need; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms and surrogates are invalid: one replacement code point per lead byte.
  if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0xFFFD;
  }
  *len = need + 1;
  return cp;
}

size_t previous_code_point_start(std::string_view s, size_t end) {
  // Walk back over at most three continuation bytes, then confirm that the lead byte decodes to
  // exactly [start, end); otherwise the last byte stands alone (as decode_utf8 would treat it).
  size_t start = end - 1;
  size_t steps = 0;
  while (start > 0 && steps < 3 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
    --start;
    ++steps;
  }
  size_t len = 0;
  decode_utf8(s, start, &len);
  return start + len == end ? start : end - 1;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    append_utf8(out, 0xFFFD);
  }
}

bool is_js_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

namespace {

template <typename Pred>
std::string_view strip_if(std::string_view s, bool left, bool right, Pred pred) {
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t len = 0;
      if (!pred(decode_utf8(s, begin, &len))) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      const size_t start = previous_code_point_start(s, end);
      size_t len = 0;
      if (!pred(decode_utf8(s, start, &len))) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

}  // namespace

std::string_view trim_whitespace(std::string_view s, bool left, bool right) {
  return strip_if(s, left, right, is_js_whitespace);
}

std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<char32_t> set;
  for (size_t i = 0, len = 0; i < chars.size(); i += len) set.push_back(decode_utf8(chars, i, &len));
  return strip_if(s, left, right, [&](char32_t cp) {
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  });
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    offsets.push_back(i);
    decode_utf8(s, i, &len);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) decode_utf8(s, i, &len);
  return n;
}

char32_t to_upper_cp(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp == 0xB5) return 0x39C;
  if (cp == 0xFF) return 0x178;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149) {
    // Latin Extended-A pairs: even upper / odd lower, except 0x139-0x148 and 0x179-0x17E (odd upper).
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_upper) return (cp % 2 == 0) ? cp - 1 : cp;
    if (cp == 0x17F) return 'S';
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;  // Greek
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;  // Cyrillic
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

char32_t to_lower_cp(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149) {
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_upper) return (cp % 2 == 1) ? cp + 1 : cp;
    if (cp == 0x17F) return cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

namespace {

template <typename Map>
std::string map_code_points(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t cp = decode_utf8(s, i, &len);
    // Keep invalid bytes as they were: only valid code points are case-mapped.
    if (cp == 0xFFFD && len == 1 && static_cast<unsigned char>(s[i]) >= 0x80) {
      out += s[i];
    } else {
      append_utf8(out, map(cp));
    }
  }
  return out;
}

}  // namespace

std::string to_upper(std::string_view s) { return map_code_points(s, to_upper_cp); }
std::string to_lower(std::string_view s) { return map_code_points(s, to_lower_cp); }

}  // namespace pagellm::tok::jinja
