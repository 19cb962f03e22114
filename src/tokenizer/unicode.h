// UTF-8 and Unicode helpers for the tokenizer: decoding/encoding code points, lossy repair of invalid
// UTF-8 (maximal-subpart replacement, as Rust's from_utf8_lossy and the WHATWG decoder do), character
// classes (from ICU, so they follow one Unicode version everywhere), normalization forms, and GPT-2's
// byte-level alphabet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagellm::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point at text[pos] (which must be valid UTF-8) and advances pos.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  auto cont = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]) & 0x3Fu; };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = ((b0 & 0x1Fu) << 6) | cont(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    cp = ((b0 & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    pos += 3;
  } else {
    cp = ((b0 & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    pos += 4;
  }
  return cp;
}

// Length in bytes of the UTF-8 sequence starting with lead byte b (1 for invalid lead bytes).
inline size_t utf8_sequence_length(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t cp);

// Returns true when `text` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool is_valid_utf8(std::string_view text);
// Appends `bytes` to out, replacing each maximal invalid subpart with U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes);
inline std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  append_utf8_lossy(out, bytes);
  return out;
}

// Unicode character classes (ICU).
bool is_white_space(char32_t cp);  // the White_Space property (\s of Oniguruma and Rust)
bool is_numeric(char32_t cp);      // general category N (Nd, Nl, No)
bool is_word_char(char32_t cp);    // Unicode \w: Alphabetic, M, Nd, Pc, Join_Control

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Normalizes valid UTF-8 text; returns it unchanged (no copy made by the caller) when already normal.
void normalize(NormalForm form, std::string& text);

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its alphabet character
  std::array<int16_t, 324> char_to_byte;      // code point (< 324) -> byte, or -1
};
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace pagellm::tok
