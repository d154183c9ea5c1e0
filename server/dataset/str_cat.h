// Internal to server/dataset: absl::StrCat that also takes std::string_view.
//
// Debian 12's abseil is built with its own absl::string_view class (not an
// alias of std::string_view), so std::string_view does not convert to it.

#ifndef STOKER_SERVER_DATASET_STR_CAT_H_
#define STOKER_SERVER_DATASET_STR_CAT_H_

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker::dataset_internal {

inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

template <typename T>
decltype(auto) AlphaNumArg(const T& value) {
  if constexpr (std::is_same_v<T, std::string_view>) {
    return ToAbsl(value);
  } else {
    return (value);  // a reference: arguments outlive the StrCat call
  }
}

template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(AlphaNumArg(args)...);
}

}  // namespace stoker::dataset_internal

#endif  // STOKER_SERVER_DATASET_STR_CAT_H_
