#include "common/memory_available.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoker {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> ParseBytes(absl::string_view text) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<uint64_t> MemoryAvailableBytes(const MemoryTexts& t) {
  std::optional<uint64_t> available;
  for (absl::string_view line : absl::StrSplit(t.meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) break;
    if (auto kb = ParseBytes(line)) available = *kb * 1024;
    break;
  }
  if (!available) return std::nullopt;
  const auto limit = ParseBytes(t.cgroup_limit);  // "max": no limit
  const auto usage = ParseBytes(t.cgroup_usage);
  if (limit && usage) {
    const uint64_t left = *usage >= *limit ? 0 : *limit - *usage;
    if (left < *available) return left;
  }
  return available;
}

MemoryTexts SystemMemoryTexts() {
  MemoryTexts t;
  t.meminfo = ReadText("/proc/meminfo");
  for (absl::string_view line : absl::StrSplit(ReadText("/proc/self/cgroup"), '\n')) {
    // v2: "0::/path"; v1's memory controller: "N:memory:/path".
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::string path(f[2].data(), f[2].size());
    if (f[1].empty()) {
      std::string limit = ReadText("/sys/fs/cgroup" + path + "/memory.max");
      if (!limit.empty()) {
        t.cgroup_limit = std::move(limit);
        t.cgroup_usage = ReadText("/sys/fs/cgroup" + path + "/memory.current");
      }
    } else if (f[1] == "memory" && t.cgroup_limit.empty()) {
      t.cgroup_limit = ReadText("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      t.cgroup_usage = ReadText("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
    }
  }
  return t;
}

}  // namespace stoker
