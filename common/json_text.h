// Values as JSON text, for the tools' one-line JSON output.

#ifndef STOKER_COMMON_JSON_TEXT_H_
#define STOKER_COMMON_JSON_TEXT_H_

#include <string>
#include <string_view>

namespace stoker {

// `s` as a JSON string, quoted and escaped (bytes >= 0x80 pass as they are).
std::string JsonString(std::string_view s);
// The shortest text that reads back as the same float (double).
std::string FloatJson(float v);
std::string DoubleJson(double v);

}  // namespace stoker

#endif  // STOKER_COMMON_JSON_TEXT_H_
