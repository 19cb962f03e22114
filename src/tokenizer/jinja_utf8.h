// UTF-8 helpers for the Jinja engine. Strings stay UTF-8 bytes end to end; these helpers give the
// code-point views that string methods, slicing and whitespace control need. Invalid bytes are treated
// as single code points (U+FFFD) so hostile input can never make a loop stall or read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::tok::jinja {

// Decodes the code point starting at s[i]; sets *len to its byte length (>= 1).
char32_t decode_utf8(std::string_view s, size_t i, size_t* len);

// Start of the code point that ends right before s[end] (end > 0).
size_t previous_code_point_start(std::string_view s, size_t end);

void append_utf8(std::string& out, char32_t cp);

// The whitespace set of JavaScript's String.prototype.trim / \s, which @huggingface/jinja uses for
// trim, strip, whitespace control and split(): ASCII \t\n\v\f\r and space plus the Unicode spaces.
bool is_js_whitespace(char32_t cp);

// Trims JS whitespace from the left and/or right.
std::string_view trim_whitespace(std::string_view s, bool left, bool right);

// Python's str.strip(chars): removes any code point that occurs in `chars`.
std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

// Byte offsets of each code point, plus s.size() at the end: [num_code_points + 1].
std::vector<size_t> code_point_offsets(std::string_view s);

size_t count_code_points(std::string_view s);

// Simple (one-to-one) case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
char32_t to_upper_cp(char32_t cp);
char32_t to_lower_cp(char32_t cp);
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);

}  // namespace pagellm::tok::jinja
