// File-system names in messages. A name on Linux is bytes, not always UTF-8
// (a Latin-1 folder, a tar member from another system), and torchvision
// reads such names; a protobuf `string` must be UTF-8, or the message fails
// to parse on the other side. So names travel exactly as `bytes` fields,
// and the `string` fields beside them that people read (status, logs,
// events) hold DisplayName: the name itself when it is UTF-8, else the name
// with each byte of an invalid sequence written as \xNN.

#ifndef STOKER_COMMON_DISPLAY_NAME_H_
#define STOKER_COMMON_DISPLAY_NAME_H_

#include <string>
#include <string_view>

namespace stoker {

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), as protobuf requires of a string.
bool IsUtf8(std::string_view s);

// `s` when it is UTF-8; else each byte that begins no well-formed sequence
// as "\xNN" (lower-case hex), the rest as it is. Always UTF-8.
std::string DisplayName(std::string_view s);

}  // namespace stoker

#endif  // STOKER_COMMON_DISPLAY_NAME_H_
