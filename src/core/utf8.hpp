// Text that a reader (a JSON document, a tokenizer, an agent's context) can
// take as it is. valid_utf8: bytes that do not form a valid UTF-8 sequence
// (truncated, overlong, surrogates, > U+10FFFF) become U+FFFD, one per byte;
// valid sequences are kept. printable_text: the same, and control characters
// other than newline and tab (NUL, escape sequences, DEL, the C1 controls
// U+0080 to U+009F) become U+FFFD too, one per character, for program output
// shown to an agent. utf8_char_start: where to cut text to a byte budget.
#pragma once
#include <string>
#include <string_view>

namespace forge {

std::string valid_utf8(std::string_view bytes);
std::string printable_text(std::string_view bytes);
// `s` with its control characters (other than newline and tab; C1 ones,
// U+0080 to U+009F, among them) and the bytes of invalid UTF-8 written as
// \xNN, byte by byte: a message that quotes a value or line, or a model's
// text, shown on a terminal.
std::string escape_controls(std::string_view s);
// Where a cut at byte `i` of `s` splits no character: i, or the start of
// the character whose continuation byte i is (at most 3 bytes back).
size_t utf8_char_start(std::string_view s, size_t i);
// Appends code point `cp` (<= U+10FFFF) as UTF-8.
void append_utf8(char32_t cp, std::string* out);

}  // namespace forge
