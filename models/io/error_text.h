// Text from a file that goes into an error message: the one sanitizer for every parser
// (safetensors, IDX, checkpoint meta.json).
//
// A corrupt or hostile file must not be able to put raw bytes on the user's terminal (escape
// sequences, invalid UTF-8, NULs, newlines that split a one-line error) nor make a message
// arbitrarily long. So anything taken from a file (tensor names, dtype strings, JSON values,
// nlohmann's parse errors, which quote the bytes they stopped at) passes through printable():
// printable ASCII is kept, every other byte is escaped, and the result is length-capped.
// Header-only so that the small fuzz targets (tests/fuzz) need no extra library.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace jacond::models {

/// Default cap on the characters of file-derived text in a message.
inline constexpr std::size_t kErrorTextMax = 64;

/// `s` with printable ASCII (0x20..0x7e) kept, \n \r \t written as those escapes and every
/// other byte (controls, DEL, anything >= 0x80) as \xNN. At most `max_chars` characters of
/// escaped text are kept; a cut is marked by a trailing "...". The result is one line of
/// printable ASCII, never longer than max_chars + 3.
inline std::string printable(std::string_view s, std::size_t max_chars = kErrorTextMax) {
  std::string out;
  out.reserve(s.size() < max_chars ? s.size() : max_chars);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    char esc[8];
    if (c == '\n') {
      std::snprintf(esc, sizeof esc, "\\n");
    } else if (c == '\r') {
      std::snprintf(esc, sizeof esc, "\\r");
    } else if (c == '\t') {
      std::snprintf(esc, sizeof esc, "\\t");
    } else if (c < 0x20 || c >= 0x7f) {
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
    } else {
      esc[0] = ch;
      esc[1] = '\0';
    }
    const std::string_view piece(esc);
    if (out.size() + piece.size() > max_chars) return out + "...";
    out += piece;
  }
  return out;
}

namespace detail {

/// Appends a compact JSON rendering of j to out, stopping once out holds more than `limit`
/// bytes. Unlike json::dump() this is safe on hostile input: its recursion depth is bounded by
/// `limit` (every level first appends '[' or '{'), where dump() recurses once per nesting
/// level and a 100 MB header of '[' overflows the stack. Raw bytes; the caller sanitizes.
inline void append_bounded_json(std::string& out, const nlohmann::json& j, std::size_t limit) {
  if (out.size() > limit) return;
  auto append_text = [&](const std::string& s) {
    const std::size_t room = limit + 1 - out.size();
    out.append(s, 0, s.size() < room ? s.size() : room);
  };
  switch (j.type()) {
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : j) {
        if (out.size() > limit) return;
        if (!first) out += ", ";
        first = false;
        append_bounded_json(out, e, limit);
      }
      out += ']';
      return;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (out.size() > limit) return;
        if (!first) out += ", ";
        first = false;
        out += '"';
        append_text(it.key());
        out += "\": ";
        append_bounded_json(out, it.value(), limit);
      }
      out += '}';
      return;
    }
    case nlohmann::json::value_t::string:
      out += '"';
      append_text(j.get_ref<const std::string&>());
      out += '"';
      return;
    case nlohmann::json::value_t::binary:  // never produced by json::parse
      out += "<binary>";
      return;
    default:  // null, boolean, numbers: short, and dump() cannot recurse on them
      out += j.dump();
      return;
  }
}

}  // namespace detail

/// A JSON value from a file, for a message: compact, sanitized by printable(), capped.
inline std::string json_snippet(const nlohmann::json& j, std::size_t max_chars = kErrorTextMax) {
  std::string raw;
  detail::append_bounded_json(raw, j, max_chars);
  return printable(raw, max_chars);
}

/// nlohmann's exception text, for a message. Its parse errors read
///   "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while
///    parsing value - invalid string: ill-formed UTF-8 byte; last read: '"ab<raw bytes>'"
/// where the quoted token is copied from the file, any length. The id prefix is dropped,
/// nlohmann's own words are kept (sanitized, they hold no file bytes), and everything from
/// "last read:" on is capped at kErrorTextMax like other file-derived text.
inline std::string json_error_text(const std::exception& e) {
  std::string w = e.what();
  if (w.rfind("[json.exception.", 0) == 0) {
    const auto close = w.find("] ");
    if (close != std::string::npos) w.erase(0, close + 2);
  }
  static constexpr std::string_view kToken = "; last read: ";
  const auto at = w.find(kToken);
  if (at == std::string::npos) return printable(w, 4 * kErrorTextMax);
  return printable(std::string_view(w).substr(0, at), 4 * kErrorTextMax) + std::string(kToken) +
         printable(std::string_view(w).substr(at + kToken.size()), kErrorTextMax);
}

/// Parses `text` as one JSON document, as the strict readers of the same files do (Python's
/// json.loads of decoded text, HF's serde_json reader). nlohmann's lexer takes a NUL byte for the
/// end of the input and ignores the rest, so "{..}\0garbage" would parse; a NUL is never valid
/// JSON outside a string nor raw inside one, so it is refused first. So is a UTF-8 byte-order
/// mark, which nlohmann skips (RFC 8259 §8.1 lets a parser ignore one) and those readers refuse:
/// one file, one verdict. Throws std::invalid_argument with a one-line printable reason ("NUL byte
/// at offset 12", or nlohmann's words through json_error_text, e.g. for 1e400 beyond double); the
/// caller puts the file in front.
inline nlohmann::json parse_json_strict(std::string_view text) {
  const std::size_t nul = text.find('\0');
  if (nul != std::string_view::npos) throw std::invalid_argument("NUL byte at offset " + std::to_string(nul));
  if (text.substr(0, 3) == "\xef\xbb\xbf") throw std::invalid_argument("a UTF-8 byte-order mark at offset 0");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(json_error_text(e));
  }
}

}  // namespace jacond::models
