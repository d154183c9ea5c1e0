// Decode nodes without a network or a process: the arena's bookkeeping,
// the checks each side applies to the other's messages, the flags.

#include <catch2/catch.hpp>
#include <cstring>

#include "server/remote/arena.h"
#include "server/remote/wire.h"
#include "server/remote/wire.h"

namespace stoker::remote {
namespace {

TEST_CASE("the arena gives first fit from the bottom and merges what is freed") {
  Arena a(64 * Arena::kAlign);
  auto x = a.Allocate(1);
  auto y = a.Allocate(3 * Arena::kAlign);
  auto z = a.Allocate(Arena::kAlign + 1);
  REQUIRE((x && y && z));
  CHECK(*x == 0);
  CHECK(*y == Arena::kAlign);
  CHECK(*z == 4 * Arena::kAlign);
  CHECK(a.used() == 6 * Arena::kAlign);
  a.Free(*y);
  // A smaller range reuses the hole.
  auto w = a.Allocate(2 * Arena::kAlign);
  REQUIRE(w);
  CHECK(*w == Arena::kAlign);
  a.Free(*x);
  a.Free(*w);
  a.Free(*z);
  CHECK(a.used() == 0);
  // All merged back: the whole arena is one range again.
  auto all = a.Allocate(64 * Arena::kAlign);
  REQUIRE(all);
  CHECK(*all == 0);
  CHECK_FALSE(a.Allocate(1));
  a.Free(*all);
  CHECK_FALSE(a.Allocate(65 * Arena::kAlign));
  a.Free(12345);  // not a range it gave: ignored
  CHECK(a.used() == 0);
}

TEST_CASE("the arena merges a freed range with both neighbours") {
  Arena a(8 * Arena::kAlign);
  auto p = a.Allocate(Arena::kAlign), q = a.Allocate(Arena::kAlign), r = a.Allocate(Arena::kAlign);
  REQUIRE((p && q && r));
  a.Free(*p);
  a.Free(*r);
  a.Free(*q);  // joins p's range and r's (and the rest)
  auto big = a.Allocate(8 * Arena::kAlign);
  REQUIRE(big);
  CHECK(*big == 0);
}

worker::TaskMsg ImageTask(const char* path) {
  worker::TaskMsg t{};
  t.type = worker::kTask;
  t.task_id = 7;
  t.path_bytes = static_cast<uint32_t>(std::strlen(path));
  std::memcpy(t.path, path, t.path_bytes);
  t.out_offset = 4096;
  t.out_capacity = 224 * 224 * 3;
  return t;
}

std::string Bytes(const worker::TaskMsg& t) {
  return PackTask(t, worker::TaskHeaderBytes() + t.path_bytes + t.mask_path_bytes);
}

TEST_CASE("a node refuses tasks that do not add up") {
  worker::TaskMsg t = ImageTask("train/a.jpg");
  t.params.out_height = 224;
  t.key.seed = 0x0102030405060708ull;
  worker::TaskMsg out;
  size_t n = 0;
  const std::string packed = Bytes(t);
  REQUIRE(ParseTask(packed, 1 << 30, &out, &n).ok());
  CHECK(n == worker::TaskHeaderBytes() + t.path_bytes);
  CHECK(std::memcmp(&out, &t, n) == 0);  // byte for byte
  CHECK(packed.size() < n / 10);         // the zeros left out
  CHECK(std::string_view(out.path, out.path_bytes) == "train/a.jpg");
  // Cut short, a literal past the end, runs past a TaskMsg, wrong path lengths.
  CHECK(ParseTask(packed.substr(0, packed.size() - 3), 1 << 30, &out, &n).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK_FALSE(ParseTask(packed + "x", 1 << 30, &out, &n).ok());
  std::string huge(8, '\0');
  const uint32_t big = sizeof(worker::TaskMsg) + 1;
  std::memcpy(huge.data(), &big, 4);
  CHECK(ParseTask(huge, 1 << 30, &out, &n).message().find("larger than a task") !=
        std::string::npos);
  CHECK_FALSE(ParseTask("not a task", 1 << 30, &out, &n).ok());
  CHECK_FALSE(ParseTask("", 1 << 30, &out, &n).ok());
  worker::TaskMsg bad = t;
  bad.mask_path_bytes = worker::kMaxPathBytes;
  CHECK_FALSE(
      ParseTask(PackTask(bad, worker::TaskHeaderBytes() + t.path_bytes), 1 << 30, &out, &n).ok());
  // Over the node's output limit.
  CHECK(ParseTask(Bytes(t), 1000, &out, &n).message().find("limit") != std::string::npos);
  // A video clip, a volume: read from the node's data root (its Submit
  // refuses them shipped: decode_node_test).
  worker::TaskMsg clip = t;
  clip.clip.params.frames = 8;
  CHECK(ParseTask(Bytes(clip), 1 << 30, &out, &n).ok());
}

v1::DecodeResult Answer(const worker::ResultMsg& r, std::string output) {
  v1::DecodeResult res;
  res.set_result(std::string(reinterpret_cast<const char*>(&r), sizeof(r)));
  res.set_output(std::move(output));
  return res;
}

TEST_CASE("a relay accepts only answers that fit the task it sent") {
  const worker::TaskMsg t = ImageTask("a.jpg");
  worker::ResultMsg r{};
  r.type = worker::kResult;
  r.task_id = 7;
  r.bytes = 100;
  r.reason[0] = '\0';
  worker::ResultMsg got;
  CHECK(CheckResult(t, Answer(r, std::string(100, 'x')), &got).ok());
  CHECK(got.bytes == 100);
  // The output is not the size stated.
  CHECK(CheckResult(t, Answer(r, std::string(99, 'x')), &got).code() ==
        absl::StatusCode::kDataLoss);
  // More than the room in the ring.
  worker::ResultMsg huge = r;
  huge.bytes = t.out_capacity + 1;
  CHECK_FALSE(CheckResult(t, Answer(huge, std::string(huge.bytes, 'x')), &got).ok());
  // Another task's answer.
  worker::ResultMsg other = r;
  other.task_id = 8;
  CHECK_FALSE(CheckResult(t, Answer(other, std::string(100, 'x')), &got).ok());
  // A mask the task has no room for.
  v1::DecodeResult with_mask = Answer(r, std::string(100, 'x'));
  worker::ResultMsg masked = r;
  masked.mask_bytes = 10;
  with_mask.set_result(std::string(reinterpret_cast<const char*>(&masked), sizeof(masked)));
  with_mask.set_mask(std::string(10, 'm'));
  CHECK_FALSE(CheckResult(t, with_mask, &got).ok());
  // An unterminated reason; a truncated result.
  worker::ResultMsg noisy = r;
  std::memset(noisy.reason, 'a', sizeof(noisy.reason));
  CHECK_FALSE(CheckResult(t, Answer(noisy, std::string(100, 'x')), &got).ok());
  v1::DecodeResult cut = Answer(r, std::string(100, 'x'));
  cut.mutable_result()->resize(10);
  CHECK_FALSE(CheckResult(t, cut, &got).ok());
  // A failure carries no output.
  worker::ResultMsg failed = r;
  failed.code = 3;
  failed.bytes = 0;
  CHECK(CheckResult(t, Answer(failed, ""), &got).ok());
  CHECK_FALSE(CheckResult(t, Answer(failed, "x"), &got).ok());
}

TEST_CASE("decode flags go together or are refused naming the fix") {
  v1::DaemonConfig c;
  CHECK(CheckDecodeFlags(c).ok());
  c.set_decode_node(true);
  CHECK(CheckDecodeFlags(c).message().find("--listen") != std::string::npos);
  c.set_listen("0.0.0.0:7070");
  CHECK(CheckDecodeFlags(c).message().find("authenticated") != std::string::npos);
  c.set_tls_ca("ca.pem");
  CHECK(CheckDecodeFlags(c).message().find("all of") != std::string::npos);
  c.set_tls_cert("c.pem");
  c.set_tls_key("k.pem");
  CHECK(CheckDecodeFlags(c).ok());
  c.set_decode_token_file("t");
  CHECK(CheckDecodeFlags(c).message().find("not both") != std::string::npos);
  c.set_decode_nodes("a:1");
  CHECK(CheckDecodeFlags(c).message().find("not both") != std::string::npos);
  v1::DaemonConfig t;
  t.set_decode_nodes("a:1,b:2");
  t.set_decode_token_file("t");
  CHECK(CheckDecodeFlags(t).ok());
  t.set_listen("x:1");
  CHECK(CheckDecodeFlags(t).message().find("--decode-node") != std::string::npos);
  v1::DaemonConfig loose;
  loose.set_tls_ca("ca.pem");
  CHECK_FALSE(CheckDecodeFlags(loose).ok());
}

TEST_CASE("a --decode-nodes entry becomes a gRPC target") {
  CHECK(NodeTarget("10.0.0.5:7070") == "dns:///10.0.0.5:7070");
  CHECK(NodeTarget("stoker-decode.default.svc:7070") == "dns:///stoker-decode.default.svc:7070");
  CHECK(NodeTarget("ipv4:127.0.0.1:7070") == "ipv4:127.0.0.1:7070");
  CHECK(NodeTarget("dns:///x:1") == "dns:///x:1");
}

}  // namespace
}  // namespace stoker::remote
