#pragma once
// Quoting what a user wrote inside an error message.
#include <string>
#include <string_view>

namespace cofuse {

// `text` between single quotes, with every control byte written as an escape (\n, \r, \t, or
// \xNN) and a backslash doubled, so a message that echoes a user's key, name or value stays on
// one line and shows exactly what was read: a stray "\r" in a file is visible, not a cursor
// jump. Printable ASCII and bytes >= 0x80 (UTF-8) pass through unchanged.
std::string in_quotes(std::string_view text);

// The same escapes without the quotes, for text that a message already sets apart (key=value).
std::string escape_controls(std::string_view text);

}  // namespace cofuse
