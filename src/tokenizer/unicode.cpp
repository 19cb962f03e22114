#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include "common/error.h"

namespace pagellm::tok {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed sequence at text[pos], or 0 when invalid. `*subpart` receives the length
// of the maximal invalid subpart (>= 1) for the invalid case (Unicode §3.9, "U+FFFD substitution of
// maximal subparts").
size_t valid_sequence_at(std::string_view text, size_t pos, size_t* subpart) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *subpart = 1;
    return 0;
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= text.size()) {
      *subpart = i;
      return 0;
    }
    const auto b = static_cast<unsigned char>(text[pos + i]);
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *subpart = i;
      return 0;
    }
  }
  return need;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= text.size()) {
      uint64_t word;
      __builtin_memcpy(&word, text.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= text.size()) break;
    size_t subpart = 0;
    const size_t n = valid_sequence_at(text, pos, &subpart);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  size_t pos = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes
  while (pos < bytes.size()) {
    size_t subpart = 0;
    const size_t n = valid_sequence_at(bytes, pos, &subpart);
    if (n > 0) {
      pos += n;
      continue;
    }
    out.append(bytes.substr(run_start, pos - run_start));
    append_utf8(out, kReplacementChar);
    pos += subpart;
    run_start = pos;
  }
  out.append(bytes.substr(run_start));
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const int32_t mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  return (mask & U_GC_N_MASK) != 0;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  }
  const auto c = static_cast<UChar32>(cp);
  const int32_t mask = U_GET_GC_MASK(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

void normalize(NormalForm form, std::string& text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalForm::kNfc: normalizer = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNfd: normalizer = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNfkc: normalizer = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNfkd: normalizer = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status)) throw_error(ErrorKind::kInternal, "ICU normalizer unavailable");
  // ASCII text is invariant under every normalization form.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return;
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return;
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + 16);
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) throw_error(ErrorKind::kInternal, "ICU normalization failed");
  text.swap(out);
}

namespace {

ByteLevelAlphabet build_byte_level_alphabet() {
  ByteLevelAlphabet alphabet;
  alphabet.char_to_byte.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the other 68 bytes get code points 256, 257, ...
  int next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next_extra++);
    append_utf8(alphabet.byte_to_utf8[b], cp);
    alphabet.char_to_byte[cp] = static_cast<int16_t>(b);
  }
  return alphabet;
}

}  // namespace

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet = build_byte_level_alphabet();
  return alphabet;
}

}  // namespace pagellm::tok
