// The decode node's service without a network or a process: an in-process
// gRPC channel, fake workers (threads, testing/fake_launcher.h) scripted to
// answer, crash or hang.

#include "server/remote/decode_node.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fcntl.h>

#include <cstring>
#include <mutex>
#include <string>

#include "grpcpp/server_builder.h"
#include "server/remote/wire.h"
#include "stoker/ring_layout.h"
#include "testing/dataset_test_util.h"
#include "testing/fake_launcher.h"

namespace stoker::remote {
namespace {

using testing::FakeLauncher;

constexpr uint32_t kSide = 8;
constexpr uint64_t kOut = kSide * kSide * 3;

v1::DecodeTask Task(uint64_t id, uint64_t index, uint64_t out_capacity = kOut) {
  worker::TaskMsg t{};
  t.type = worker::kTask;
  t.task_id = id;
  t.key.dataset_index = index;
  t.params.out_height = kSide;
  t.params.out_width = kSide;
  t.params.dtype = ring::kUint8;
  t.out_offset = 1 << 20;  // the trainer's offsets: the node replaces them
  t.out_capacity = out_capacity;
  const std::string path = "train/img_" + std::to_string(index) + ".jpg";
  t.path_bytes = static_cast<uint32_t>(path.size());
  std::memcpy(t.path, path.data(), path.size());
  v1::DecodeTask req;
  req.set_task(PackTask(t, worker::TaskHeaderBytes() + t.path_bytes));
  req.set_input(std::string(5000, 'j'));  // the encoded bytes, shipped
  return req;
}

struct Node {
  explicit Node(FakeLauncher::Script script, uint32_t task_timeout_ms = 30000)
      : launcher(std::move(script)) {
    DecodeNodeOptions o;
    o.workers = 2;
    o.arena_bytes = 8 << 20;
    o.task_timeout_ms = task_timeout_ms;
    auto f = FileStore::Create(tmp.path(), 1 << 20, &clock, 1'000'000'000);
    REQUIRE(f.ok());
    files = *std::move(f);
    DecodeNodeEnv env;
    env.launcher = &launcher;
    env.clock = SystemClock();
    env.files = files.get();
    node = std::make_unique<DecodeNode>(env, o);
    REQUIRE(node->Start().ok());
    grpc::ServerBuilder b;
    b.RegisterService(node.get());
    server = b.BuildAndStart();
    REQUIRE(server != nullptr);
    stub = v1::DecodeNode::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  }
  ~Node() {
    node->Stop();
    server->Shutdown();
    server->Wait();
  }
  void Sign(grpc::ClientContext* ctx) { ctx->AddMetadata(kFingerprintKey, ProtocolFingerprint()); }
  bool WaitFor(const std::function<bool(const DecodeNodeStats&)>& cond) {
    for (int i = 0; i < 500; ++i) {
      if (cond(node->stats())) return true;
      ::usleep(10000);
    }
    return false;
  }

  FakeLauncher launcher;
  testing::TempDir tmp;
  FakeClock clock;
  std::unique_ptr<FileStore> files;
  std::unique_ptr<DecodeNode> node;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::DecodeNode::Stub> stub;
};

worker::ResultMsg ResultOf(const v1::DecodeResult& res) {
  worker::ResultMsg r;
  REQUIRE(res.result().size() == sizeof(r));
  std::memcpy(&r, res.result().data(), sizeof(r));
  return r;
}

TEST_CASE("decode node: answers in the order sent, the outputs from its workers, nothing kept") {
  Node n(nullptr);
  grpc::ClientContext ctx;
  n.Sign(&ctx);
  auto stream = n.stub->Decode(&ctx);
  for (uint64_t i = 0; i < 20; ++i) REQUIRE(stream->Write(Task(100 + i, i)));
  stream->WritesDone();
  v1::DecodeResult res;
  for (uint64_t i = 0; i < 20; ++i) {
    REQUIRE(stream->Read(&res));
    const worker::ResultMsg r = ResultOf(res);
    CHECK(r.task_id == 100 + i);  // the trainer's id, in its order
    CHECK(r.code == 0);
    CHECK(res.output() == std::string(kOut, static_cast<char>(FakeLauncher::PatternByte(i))));
  }
  CHECK_FALSE(stream->Read(&res));
  CHECK(stream->Finish().ok());
  const DecodeNodeStats s = n.node->stats();
  CHECK(s.tasks_done == 20);
  CHECK(s.bytes_in == 20 * 5000);
  CHECK(s.bytes_out == 20 * kOut);
  CHECK(s.arena_used == 0);
  CHECK(n.WaitFor([](const DecodeNodeStats& x) { return x.streams_open == 0; }));
}

TEST_CASE("decode node: a sample that crashes its workers is answered failed, the rest decoded") {
  Node n([](uint32_t, const worker::TaskMsg& t, const std::string&) {
    FakeLauncher::Reply r;
    if (t.key.dataset_index == 3) r.act = FakeLauncher::Act::kCrash;
    return r;
  });
  grpc::ClientContext ctx;
  n.Sign(&ctx);
  auto stream = n.stub->Decode(&ctx);
  for (uint64_t i = 0; i < 6; ++i) REQUIRE(stream->Write(Task(i, i)));
  stream->WritesDone();
  v1::DecodeResult res;
  for (uint64_t i = 0; i < 6; ++i) {
    REQUIRE(stream->Read(&res));
    const worker::ResultMsg r = ResultOf(res);
    CHECK(r.task_id == i);
    if (i == 3) {
      CHECK(r.code == static_cast<uint32_t>(absl::StatusCode::kInternal));
      CHECK(std::string(r.reason).find("a decode node worker died 2 times") == 0);
      CHECK(res.output().empty());
    } else {
      CHECK(r.code == 0);
    }
  }
  CHECK(stream->Finish().ok());
  CHECK(n.node->stats().worker_restarts >= 2);
}

TEST_CASE("decode node: a stream cut with work on its workers leaves no task memory behind") {
  Node n(
      [](uint32_t, const worker::TaskMsg& t, const std::string&) {
        FakeLauncher::Reply r;
        if (t.key.dataset_index == 1) r.act = FakeLauncher::Act::kHang;
        return r;
      },
      /*task_timeout_ms=*/300);
  {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    for (uint64_t i = 0; i < 4; ++i) REQUIRE(stream->Write(Task(i, i)));
    REQUIRE(n.WaitFor([](const DecodeNodeStats& x) { return x.arena_used > 0; }));
    ctx.TryCancel();  // the trainer went away
    v1::DecodeResult res;
    while (stream->Read(&res)) {
    }
    stream->Finish();
  }
  CHECK(n.WaitFor([](const DecodeNodeStats& x) { return x.streams_open == 0; }));
  // The hung worker is replaced (task timeout); its orphaned task's memory
  // goes with it.
  CHECK(n.WaitFor([](const DecodeNodeStats& x) { return x.arena_used == 0; }));
  // And the node serves the next stream.
  grpc::ClientContext ctx;
  n.Sign(&ctx);
  auto stream = n.stub->Decode(&ctx);
  REQUIRE(stream->Write(Task(9, 7)));
  stream->WritesDone();
  v1::DecodeResult res;
  REQUIRE(stream->Read(&res));
  CHECK(ResultOf(res).code == 0);
  CHECK(stream->Finish().ok());
}

TEST_CASE("decode node: malformed tasks, another build and oversized tasks") {
  Node n(nullptr);
  {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    v1::DecodeTask bad;
    bad.set_task("not a task");
    stream->Write(bad);
    stream->WritesDone();
    v1::DecodeResult res;
    CHECK_FALSE(stream->Read(&res));
    const grpc::Status st = stream->Finish();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kFingerprintKey, "stoker-0.0.1/elsewhere");
    auto stream = n.stub->Decode(&ctx);
    v1::DecodeResult res;
    CHECK_FALSE(stream->Read(&res));
    CHECK(stream->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    // A video clip with its file as the task's input: refused (a clip's
    // files are shipped whole, DecodeTask.file).
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    v1::DecodeTask clip = Task(4, 4);
    worker::TaskMsg t;
    size_t n = 0;
    REQUIRE(ParseTask(clip.task(), 1 << 30, &t, &n).ok());
    t.clip.params.frames = 8;
    clip.set_task(PackTask(t, n));
    stream->Write(clip);
    stream->WritesDone();
    v1::DecodeResult res;
    CHECK_FALSE(stream->Read(&res));
    const grpc::Status st = stream->Finish();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(st.error_message().find("shipped whole") != std::string::npos);
  }
  {
    // Bigger than the node's whole task memory: answered failed at once.
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    REQUIRE(stream->Write(Task(5, 5, /*out_capacity=*/9 << 20)));
    REQUIRE(stream->Write(Task(6, 6)));
    stream->WritesDone();
    v1::DecodeResult res;
    REQUIRE(stream->Read(&res));
    CHECK(ResultOf(res).code == static_cast<uint32_t>(absl::StatusCode::kResourceExhausted));
    REQUIRE(stream->Read(&res));
    CHECK(ResultOf(res).code == 0);
    CHECK(stream->Finish().ok());
  }
  CHECK(n.node->stats().arena_used == 0);
}

// A clip task whose video was shipped: its path is the store key.
v1::DecodeTask ShippedClip(uint64_t id, const std::string& key) {
  v1::DecodeTask req = Task(id, id);
  worker::TaskMsg t;
  size_t bytes = 0;
  REQUIRE(ParseTask(req.task(), 1 << 30, &t, &bytes).ok());
  t.clip.params.frames = 4;
  t.shipped_files = 1;
  t.path_bytes = static_cast<uint32_t>(key.size());
  std::memcpy(t.path, key.data(), key.size());
  req.set_task(PackTask(t, worker::TaskHeaderBytes() + t.path_bytes));
  req.clear_input();
  return req;
}

v1::DecodeTask Piece(const std::string& key, uint64_t size, uint64_t offset, std::string data) {
  v1::DecodeTask req;
  v1::FileChunk* c = req.mutable_file();
  c->set_key(key);
  c->set_size(size);
  c->set_offset(offset);
  c->set_data(std::move(data));
  return req;
}

TEST_CASE("decode node: shipped files come in pieces, are read by key, and are pinned while used") {
  const std::string key(32, 'c');
  std::string seen_path;
  uint32_t seen_shipped = 0;
  std::mutex mu;
  Node n([&](uint32_t, const worker::TaskMsg& t, const std::string& path) {
    std::lock_guard<std::mutex> l(mu);
    seen_path = path;
    seen_shipped = t.shipped_files;
    return FakeLauncher::Reply{};
  });
  {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    v1::HasFilesRequest q;
    q.add_keys(key);
    v1::HasFilesReply a;
    REQUIRE(n.stub->Has(&ctx, q, &a).ok());
    REQUIRE(a.have_size() == 1);
    CHECK_FALSE(a.have(0));
  }
  {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    REQUIRE(stream->Write(Piece(key, 10, 0, "01234")));
    REQUIRE(stream->Write(Piece(key, 10, 5, "56789")));
    REQUIRE(stream->Write(ShippedClip(41, key)));
    stream->WritesDone();
    v1::DecodeResult res;
    REQUIRE(stream->Read(&res));
    CHECK(ResultOf(res).task_id == 41);
    CHECK(ResultOf(res).code == 0);
    CHECK(stream->Finish().ok());
  }
  {
    std::lock_guard<std::mutex> l(mu);
    CHECK(seen_path == key);
    CHECK(seen_shipped == 1);
  }
  {
    UniqueFd fd(::openat(n.files->dir_fd(), key.c_str(), O_RDONLY | O_CLOEXEC));
    char buf[16] = {};
    REQUIRE(fd.valid());
    CHECK(::read(fd.get(), buf, sizeof(buf)) == 10);
    CHECK(std::string(buf) == "0123456789");
  }
  CHECK(n.node->stats().files.received == 1);
  {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    v1::HasFilesRequest q;
    q.add_keys(key);
    q.add_keys(std::string(32, 'd'));
    v1::HasFilesReply a;
    REQUIRE(n.stub->Has(&ctx, q, &a).ok());
    REQUIRE(a.have_size() == 2);
    CHECK(a.have(0));
    CHECK_FALSE(a.have(1));
  }
  // The answered task left no pin: past the keep window, a file that takes
  // the whole budget pushes it out.
  n.clock.AdvanceMs(2000);
  {
    auto up = n.files->Begin(std::string(32, 'a'), 1 << 20);
    REQUIRE(up.ok());
    REQUIRE((*up)->Append(std::string(1 << 20, 'v')).ok());
    REQUIRE(n.files->Commit(*std::move(up)).ok());
  }
  CHECK(n.files->Has({key}) == std::vector<bool>{false});
  const auto refused = [&](std::vector<v1::DecodeTask> reqs, const char* why) {
    grpc::ClientContext ctx;
    n.Sign(&ctx);
    auto stream = n.stub->Decode(&ctx);
    for (const auto& r : reqs) stream->Write(r);
    stream->WritesDone();
    v1::DecodeResult res;
    CHECK_FALSE(stream->Read(&res));
    const grpc::Status st = stream->Finish();
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains(why));
  };
  // A task naming a file the node does not hold ends the stream (its relay
  // goes, its tasks are redone: no blame on the sample).
  refused({ShippedClip(42, std::string(32, 'e'))}, "is not on the decode node");
  // Pieces out of order, keys that are paths, files over the node's limit.
  refused({Piece(std::string(32, 'f'), 10, 5, "56789")}, "out of order");
  refused({Piece("../../etc/passwd", 10, 0, "0123456789")}, "32 lowercase hex");
  refused({Piece(std::string(32, 'f'), uint64_t{1} << 40, 0, "01")}, "the node takes 1 to");
  refused({ShippedClip(43, "../../../../../../../etc/passwd0")}, "by no key");
  CHECK(n.node->stats().arena_used == 0);
}

}  // namespace
}  // namespace stoker::remote
