#include "common/memory_available.h"

#include <catch2/catch.hpp>

namespace stoker {
namespace {

constexpr char kMeminfo[] =
    "MemTotal:       24576000 kB\nMemFree:         1000000 kB\n"
    "MemAvailable:   20000000 kB\nBuffers:          100 kB\n";

TEST_CASE("MemoryAvailableBytes: MemAvailable, less what a cgroup limit leaves") {
  MemoryTexts t;
  t.meminfo = kMeminfo;
  CHECK(MemoryAvailableBytes(t) == 20000000ull * 1024);
  t.cgroup_limit = "max\n";  // cgroup v2 without a limit
  t.cgroup_usage = "123456\n";
  CHECK(MemoryAvailableBytes(t) == 20000000ull * 1024);
  t.cgroup_limit = "1073741824\n";  // a 1 GiB container, 256 MiB used
  t.cgroup_usage = "268435456\n";
  CHECK(MemoryAvailableBytes(t) == 805306368ull);
  t.cgroup_usage = "2147483648\n";  // over its limit (reclaimable cache): none left
  CHECK(MemoryAvailableBytes(t) == 0);
  t.cgroup_limit = "9223372036854771712\n";  // cgroup v1's "no limit"
  CHECK(MemoryAvailableBytes(t) == 20000000ull * 1024);
}

TEST_CASE("MemoryAvailableBytes: unknown without MemAvailable") {
  MemoryTexts t;
  CHECK(!MemoryAvailableBytes(t).has_value());
  t.meminfo = "MemTotal: 100 kB\n";
  CHECK(!MemoryAvailableBytes(t).has_value());
  t.meminfo = "MemAvailable: lots\n";
  CHECK(!MemoryAvailableBytes(t).has_value());
}

TEST_CASE("SystemMemoryTexts reads this machine's MemAvailable") {
  CHECK(MemoryAvailableBytes(SystemMemoryTexts()).value_or(0) > 0);
}

}  // namespace
}  // namespace stoker
