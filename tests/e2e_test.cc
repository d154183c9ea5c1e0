// End to end: the real stokerd binary, real gRPC on a Unix socket, real
// shared memory, real JPEG files, through the public C++ client.

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "testing/test_jpeg.h"
#include "stoker/client.h"
#include "pipeline/pipeline_spec.h"
#include "stoker/v1/stoker.grpc.pb.h"
#include "testing/daemon_harness.h"

namespace stoker::testing {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;

constexpr int kClasses = 3;
constexpr int kPerClass = 17;  // 51 samples: batches of 8 leave a short one

struct Fixture {
  TempDir data;
  std::vector<std::string> files;
  Fixture() { files = MakeImageFolder(data.path() + "/ds", kClasses, kPerClass, 7); }
};

std::unique_ptr<Client> Connect(const Daemon& d) {
  auto c = Client::Connect(d.socket());
  REQUIRE(c.ok());
  return std::move(*c);
}

AttachOptions Train(uint32_t batch, uint32_t epochs, uint64_t seed = 1) {
  AttachOptions o;
  o.dataset = "ds";
  o.batch_size = batch;
  o.epochs = epochs;
  o.seed = seed;
  o.pipeline = R"({"size": 32})";
  o.client_name = "e2e_test";
  return o;
}

struct Delivered {
  std::vector<std::vector<int64_t>> indices_per_epoch;
  std::vector<std::vector<uint8_t>> pixels;  // per batch
  std::vector<std::vector<int64_t>> labels;  // per batch
  std::vector<uint32_t> sizes;
};

Delivered ConsumeAll(Session& s, uint32_t epochs) {
  Delivered d;
  d.indices_per_epoch.resize(epochs);
  for (;;) {
    auto b = s.Next(60000);
    if (absl::IsOutOfRange(b.status())) break;
    REQUIRE(b.ok());
    REQUIRE(b->epoch() < epochs);
    auto& idx = d.indices_per_epoch[b->epoch()];
    idx.insert(idx.end(), b->indices().begin(), b->indices().end());
    const uint8_t* p = static_cast<const uint8_t*>(b->data());
    d.pixels.emplace_back(p, p + b->data_bytes());
    d.labels.push_back(b->labels());
    d.sizes.push_back(b->size());
  }
  return d;
}

std::unique_ptr<v1::Stoker::Stub> RawStub(const Daemon& d) {
  return v1::Stoker::NewStub(
      grpc::CreateChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials()));
}

// The daemon itself, past the client's own checks: one Attach as sent,
// which must fail with `want`; its message.
std::string RawAttachError(const Daemon& d, const v1::AttachRequest& req, grpc::StatusCode want) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::AttachResponse resp;
  const grpc::Status st = RawStub(d)->Attach(&ctx, req, &resp);
  INFO(st.error_message());
  CHECK(st.error_code() == want);
  return st.error_message();
}

v1::StatusResponse DaemonStatus(const Daemon& d) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StatusResponse resp;
  const grpc::Status st = RawStub(d)->Status(&ctx, v1::StatusRequest(), &resp);
  INFO(st.error_message());
  REQUIRE(st.ok());
  return resp;
}

TEST_CASE("two epochs deliver every sample exactly once with its label") {
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  auto session = client->Attach(Train(8, 2));
  REQUIRE(session.ok());
  const SessionInfo& info = (*session)->info();
  CHECK(info.dataset_size == 51);
  CHECK(info.batches_per_epoch == 7);
  CHECK(info.total_batches == 14);
  CHECK(info.class_names == std::vector<std::string>{"class_0", "class_1", "class_2"});
  // The samples' fields (ring_layout.h): a fixed 32x32x3 uint8 image, an int64 label.
  REQUIRE(info.fields.size() == 2);
  CHECK(info.fields[0].name == "image");
  CHECK(info.fields[0].dtype == DType::kUint8);
  CHECK(info.fields[0].max_shape == std::vector<uint32_t>{32, 32, 3});
  CHECK(info.fields[0].fixed_shape);
  CHECK(info.fields[0].room_bytes == 32 * 32 * 3);
  CHECK(info.fields[1].name == "label");
  CHECK(info.fields[1].dtype == DType::kInt64);
  CHECK(info.fields[1].max_shape.empty());

  std::vector<std::vector<int64_t>> per_epoch(2);
  uint64_t expected_seq = 0;
  for (;;) {
    auto b = (*session)->Next(60000);
    if (absl::IsOutOfRange(b.status())) break;
    REQUIRE(b.ok());
    CHECK(b->sequence() == expected_seq);
    CHECK(b->batch_in_epoch() == expected_seq % 7);
    CHECK(b->size() == (b->batch_in_epoch() == 6 ? 3u : 8u));
    const BatchField* image = b->field("image");
    const BatchField* label = b->field("label");
    REQUIRE(image != nullptr);
    REQUIRE(label != nullptr);
    CHECK(b->field("mask") == nullptr);
    CHECK(b->fields().size() == 2);
    CHECK(image->data(0) == b->data());  // one [n, 32, 32, 3] array
    CHECK(image->stride() == 32 * 32 * 3);
    CHECK(b->data_bytes() == uint64_t{32} * 32 * 3 * b->size());
    for (uint32_t i = 0; i < b->size(); ++i) {
      CHECK(image->shape(i)[0] == 32);
      CHECK(image->shape(i)[1] == 32);
      CHECK(image->shape(i)[2] == 3);
      CHECK(image->bytes(i) == 32 * 32 * 3);
      int64_t value = -1;
      std::memcpy(&value, label->data(i), sizeof(value));
      CHECK(value == b->labels()[i]);
      // ImageFolder order: class k holds indices [17k, 17k + 17).
      CHECK(b->labels()[i] == b->indices()[i] / kPerClass);
      CHECK(b->status(i) == SampleStatus::kOk);
      CHECK(b->height(i) == 32);
      CHECK(b->width(i) == 32);
    }
    per_epoch[b->epoch()].insert(per_epoch[b->epoch()].end(), b->indices().begin(),
                                 b->indices().end());
    ++expected_seq;
  }
  CHECK(expected_seq == 14);
  std::vector<int64_t> all(51);
  for (int i = 0; i < 51; ++i) all[i] = i;
  for (auto& e : per_epoch) {
    std::vector<int64_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == all);  // exactly once
  }
  CHECK(per_epoch[0] != per_epoch[1]);  // reshuffled per epoch
  CHECK(per_epoch[0] != all);           // shuffled at all
}

TEST_CASE("ranks 0/2 and 1/2 are disjoint but for DistributedSampler's padding, and cover") {
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  std::vector<int64_t> got[2];
  for (uint32_t rank = 0; rank < 2; ++rank) {
    AttachOptions o = Train(5, 1, 3);
    o.rank = rank;
    o.world_size = 2;
    auto s = client->Attach(o);
    REQUIRE(s.ok());
    CHECK((*s)->info().shard_size == 26);  // ceil(51 / 2)
    got[rank] = ConsumeAll(**s, 1).indices_per_epoch[0];
    CHECK(got[rank].size() == 26);
  }
  std::set<int64_t> a(got[0].begin(), got[0].end()), b(got[1].begin(), got[1].end());
  std::set<int64_t> both, either;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::inserter(both, both.end()));
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::inserter(either, either.end()));
  CHECK(either.size() == 51);  // covering
  CHECK(both.size() == 1);     // 52 slots for 51 samples: one padded repeat
}

TEST_CASE("the same seed gives byte-identical batches with 1 and with 3 workers") {
  Fixture f;
  Delivered runs[2];
  const int workers[2] = {1, 3};
  for (int r = 0; r < 2; ++r) {
    Daemon::Options o;
    o.workers = workers[r];
    auto daemon = Daemon::Start(f.data.path(), o);
    auto client = Connect(*daemon);
    auto s = client->Attach(Train(8, 2, 42));
    REQUIRE(s.ok());
    runs[r] = ConsumeAll(**s, 2);
  }
  REQUIRE(runs[0].pixels.size() == 14);
  CHECK(runs[0].indices_per_epoch == runs[1].indices_per_epoch);
  CHECK(runs[0].labels == runs[1].labels);
  for (size_t i = 0; i < runs[0].pixels.size(); ++i) {
    INFO("batch " << i);
    CHECK(runs[0].pixels[i] == runs[1].pixels[i]);
  }
  // And a different seed is a different stream.
  Daemon::Options o;
  o.workers = 2;
  auto daemon = Daemon::Start(f.data.path(), o);
  auto client = Connect(*daemon);
  auto s = client->Attach(Train(8, 1, 43));
  REQUIRE(s.ok());
  CHECK(ConsumeAll(**s, 1).pixels[0] != runs[0].pixels[0]);
}

TEST_CASE("the decode pipeline returns libjpeg's pixels exactly") {
  TempDir data;
  fs::create_directories(data.path() + "/codings/x");
  struct Coding {
    const char* name;
    int channels;
    int subsampling;
    bool progressive;
  };
  const Coding codings[] = {{"420", 3, 420, false},  {"422", 3, 422, false},
                            {"444", 3, 444, false},  {"gray", 1, 444, false},
                            {"prog", 3, 420, true}};
  std::vector<std::vector<uint8_t>> jpegs;
  for (const Coding& c : codings) {
    image::testing::EncodeOptions eo;
    eo.subsampling = c.subsampling;
    eo.progressive = c.progressive;
    auto jpeg = image::testing::EncodeJpeg(image::testing::MakePhoto(61, 93, c.channels, 5), 61,
                                           93, c.channels, eo);
    std::ofstream(data.path() + "/codings/x/" + c.name + ".jpg", std::ios::binary)
        .write(reinterpret_cast<const char*>(jpeg.data()), jpeg.size());
    jpegs.push_back(jpeg);
  }
  // ImageFolder order is sorted by name.
  std::vector<std::string> names;
  for (const Coding& c : codings) names.push_back(c.name);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());

  auto daemon = Daemon::Start(data.path());
  auto client = Connect(*daemon);
  AttachOptions o;
  o.dataset = "codings";
  o.batch_size = 1;
  o.shuffle = false;
  o.pipeline = R"({"pipeline": "decode"})";
  auto s = client->Attach(o);
  REQUIRE(s.ok());
  for (size_t i = 0; i < sorted.size(); ++i) {
    auto b = (*s)->Next(60000);
    REQUIRE(b.ok());
    const size_t which = std::find(names.begin(), names.end(), sorted[i]) - names.begin();
    uint32_t h, w;
    int ch;
    auto ref = image::testing::ReferenceDecode(jpegs[which], &h, &w, &ch);
    INFO(sorted[i]);
    REQUIRE(b->height(0) == h);
    REQUIRE(b->width(0) == w);
    REQUIRE(b->sample_bytes(0) == ref.size());
    CHECK(std::memcmp(b->sample_data(0), ref.data(), ref.size()) == 0);
  }
}

TEST_CASE("bad requests get a clear gRPC status and the daemon keeps serving") {
  Fixture f;
  TempDir outside;
  MakeImageFolder(outside.path() + "/secret", 1, 2, 1);
  fs::create_directory_symlink(outside.path() + "/secret", f.data.path() + "/link");
  fs::create_directories(f.data.path() + "/empty");
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);

  auto expect = [&](AttachOptions o, absl::StatusCode code, const char* words) {
    auto s = client->Attach(o);
    INFO(s.status().ToString());
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == code);
    CHECK(s.status().message().find(words) != absl::string_view::npos);
  };
  AttachOptions o = Train(8, 1);
  o.dataset = "../" + fs::path(outside.path()).filename().string() + "/secret";
  expect(o, absl::StatusCode::kPermissionDenied, "");
  o.dataset = "link";
  expect(o, absl::StatusCode::kPermissionDenied, "");
  o.dataset = outside.path() + "/secret";
  expect(o, absl::StatusCode::kPermissionDenied, "");
  o.dataset = "missing";
  expect(o, absl::StatusCode::kNotFound, "");
  o.dataset = "empty";
  expect(o, absl::StatusCode::kFailedPrecondition, "");
  o = Train(52, 1);
  o.drop_last = true;
  expect(o, absl::StatusCode::kInvalidArgument, "larger than");
  o = Train(8, 1);
  o.pipeline = R"({"pipeline": "fancy"})";
  expect(o, absl::StatusCode::kInvalidArgument, "pipeline");
  o = Train(8, 1);
  o.rank = 2;
  o.world_size = 2;
  expect(o, absl::StatusCode::kInvalidArgument, "rank");
  o = Train(1000000000, 1);
  expect(o, absl::StatusCode::kInvalidArgument, "batch_size");
  o = Train(8, 1);
  o.pipeline = R"({"size": 1000000})";
  expect(o, absl::StatusCode::kInvalidArgument, "");
  // The client checks a pipeline before any RPC; the daemon checks it again.
  {
    v1::AttachRequest req;
    req.set_dataset("ds");
    req.set_batch_size(8);
    req.mutable_pipeline()->set_preset("fancy");
    CHECK_THAT(RawAttachError(*daemon, req, grpc::StatusCode::INVALID_ARGUMENT),
               Catch::Matchers::StartsWith("pipeline: unknown pipeline 'fancy'"));
    req.mutable_pipeline()->set_preset("");
    req.mutable_pipeline()->add_size(1000000);
    CHECK_THAT(RawAttachError(*daemon, req, grpc::StatusCode::INVALID_ARGUMENT),
               Catch::Matchers::StartsWith("pipeline: size"));
    // batch_size 0 on the wire is refused; the C++ client's 0 is the default.
    req.clear_pipeline();
    req.set_batch_size(0);
    CHECK_THAT(RawAttachError(*daemon, req, grpc::StatusCode::INVALID_ARGUMENT),
               Catch::Matchers::StartsWith("batch_size must be at least 1"));
  }
  {
    o = Train(8, 1);
    o.batch_size = 0;  // AttachOptions' default: stoker.proto's AttachDefaults
    auto s = client->Attach(o);
    REQUIRE(s.ok());
    CHECK((*s)->info().batch_size == 64);
  }
  // A dataset path of a megabyte: refused without echoing it back whole.
  o = Train(8, 1);
  o.dataset = std::string(1 << 20, 'a');
  expect(o, absl::StatusCode::kInvalidArgument, "over the limit");
  // A shard pattern within the count limit whose names would take 1.7 GB.
  o.dataset = "{0..99999}" + std::string(3000, 'a') + ".tar";
  expect(o, absl::StatusCode::kInvalidArgument, "MiB");
  // An unknown format is refused, also once the folder has been indexed
  // under another (the format is part of what an index is kept by).
  REQUIRE(client->Attach(Train(8, 1)).ok());
  o = Train(8, 1);
  o.format = static_cast<DatasetFormat>(99);
  expect(o, absl::StatusCode::kInvalidArgument, "format");
  o.format = DatasetFormat::kManifest;
  expect(o, absl::StatusCode::kInvalidArgument, "directory");

  // Still serving.
  auto s = client->Attach(Train(8, 1));
  REQUIRE(s.ok());
  CHECK(ConsumeAll(**s, 1).indices_per_epoch[0].size() == 51);
  CHECK(client->Health().ok());
}

TEST_CASE("an op list attaches, and Status echoes the effective and the requested pipeline") {
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  AttachOptions o = Train(8, 1);
  o.pipeline = R"({"ops": [{"RandomCrop": {"size": 24, "padding": 4, "padding_mode": "reflect"}},
                           {"RandomHorizontalFlip": {}}, {"ColorJitter": {"brightness": 0.4}}],
                   "dtype": "float32"})";
  auto s = client->Attach(o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  const SessionInfo& info = (*s)->info();
  CHECK(info.height == 24);
  CHECK(info.width == 24);
  CHECK(info.dtype == DType::kFloat32);
  CHECK(info.layout == Layout::kNCHW);  // the float default
  auto requested = pipeline::SpecFromKeywordsJson(o.pipeline);
  REQUIRE(requested.ok());
  auto effective = pipeline::Effective(*requested);
  REQUIRE(effective.ok());
  const v1::StatusResponse st = DaemonStatus(*daemon);
  REQUIRE(st.sessions_size() == 1);
  INFO(pipeline::ToJson(st.sessions(0).pipeline()));
  CHECK(MessageDifferencer::Equals(st.sessions(0).pipeline(), *effective));
  CHECK(MessageDifferencer::Equals(st.sessions(0).requested_pipeline(), *requested));
  CHECK(st.sessions(0).pipeline().ops(0).random_crop().padding_size() == 4);
  auto reported = pipeline::SpecFromJson(info.effective_pipeline_json);
  REQUIRE(reported.ok());
  CHECK(MessageDifferencer::Equals(*reported, *effective));
  const Delivered d = ConsumeAll(**s, 1);
  CHECK(d.indices_per_epoch[0].size() == 51);
  CHECK(d.pixels[0].size() == 8u * 3 * 24 * 24 * sizeof(float));

  // A bad op list is refused naming the op: by the client, and by the daemon.
  o.pipeline = R"({"ops": [{"RandomCrop": {"size": 24, "padding": [1, 2, 3]}}]})";
  auto bad = client->Attach(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Matchers::Contains("pipeline: ops[0] RandomCrop: padding"));
  o.pipeline = R"({"ops": [{"RandomFisheye": {"distortion_scale": 0.5}}]})";
  bad = client->Attach(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Matchers::Contains("ops[0]: unknown op 'RandomFisheye'"));
  v1::AttachRequest req;
  req.set_dataset("ds");
  req.set_batch_size(8);
  auto* rc = req.mutable_pipeline()->add_ops()->mutable_random_crop();
  rc->add_size(24);
  for (uint32_t p : {1, 2, 3}) rc->add_padding(p);
  CHECK_THAT(RawAttachError(*daemon, req, grpc::StatusCode::INVALID_ARGUMENT),
             Catch::Matchers::StartsWith("pipeline: ops[0] RandomCrop: padding"));
  req.mutable_pipeline()->mutable_ops(0)->mutable_grayscale();
  CHECK_THAT(RawAttachError(*daemon, req, grpc::StatusCode::INVALID_ARGUMENT),
             Catch::Matchers::StartsWith("pipeline: ops[0] Grayscale(num_output_channels=1)"));
  CHECK(DaemonStatus(*daemon).sessions_size() == 1);
  CHECK(client->Health().ok());
}

TEST_CASE("Attaches at the same time: --max-sessions holds, the dataset is indexed once") {
  Fixture f;
  // Enough files that indexing takes a while, so the Attaches overlap.
  for (int c = 0; c < 40; ++c) {
    const std::string dir = f.data.path() + "/big/c" + std::to_string(c);
    fs::create_directories(dir);
    for (int i = 0; i < 400; ++i) std::ofstream(dir + "/" + std::to_string(i) + ".jpg") << 'x';
  }
  Daemon::Options opt;
  opt.extra_args = {"--max-sessions", "2"};  // and a fresh index cache of its own
  auto daemon = Daemon::Start(f.data.path(), opt);
  constexpr int kCallers = 6;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kCallers; ++i) clients.push_back(Connect(*daemon));
  std::vector<absl::StatusOr<std::unique_ptr<Session>>> got;
  for (int i = 0; i < kCallers; ++i) got.emplace_back(absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      AttachOptions o = Train(8, 1);
      o.dataset = "big";
      got[i] = clients[i]->Attach(o);
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0;
  for (auto& g : got) {
    if (g.ok()) {
      ++ok;
    } else {
      INFO(g.status().ToString());
      CHECK(absl::IsResourceExhausted(g.status()));
    }
  }
  CHECK(ok == 2);
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
    return n;
  };
  auto js = clients[0]->StatusJson();
  REQUIRE(js.ok());
  CHECK(count(*js, "\"session_id\"") == 2);
  CHECK(count(daemon->Log(), "indexed dataset") == 1);
}

// Names in /dev/shm that a stokerd could have made ("stoker-*").
std::vector<std::string> StokerShmNames() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    const std::string n = e.path().filename();
    if (n.rfind("stoker-", 0) == 0) out.push_back(n);
  }
  return out;
}

// The ring's memfd name, from its label ("memfd:stoker-<session>").
std::string RingLabel(const Session& s) { return s.info().ring_name.substr(6); }

// Whether this process maps a file whose /proc/self/maps name starts so.
bool MappedHere(const std::string& prefix) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" /" + prefix) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("a daemon killed while the client waits gives a clear error within seconds") {
  const std::vector<std::string> shm_before = StokerShmNames();
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  auto s = client->Attach(Train(8, 0));  // without end: the ring never runs dry by itself
  REQUIRE(s.ok());
  REQUIRE((*s)->Next(60000).ok());
  daemon->Signal(SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status last;
  for (int i = 0; i < 100; ++i) {  // ready batches may still be delivered
    auto b = (*s)->Next();
    if (!b.ok()) {
      last = b.status();
      break;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(last.ToString());
  CHECK(absl::IsUnavailable(last));
  CHECK(secs < 5.0);

  // Its ring was never named anywhere: nothing is left in /dev/shm, and the
  // memory goes with our mapping. The next daemon on the same socket starts
  // over the dead one's sockets.
  REQUIRE(daemon->Wait(std::chrono::seconds(5)) != -1);  // reaped, as init would
  CHECK(StokerShmNames() == shm_before);
  CHECK(MappedHere("memfd:" + RingLabel(**s)));
  Daemon::Options o;
  o.socket_path = daemon->socket();
  auto second = Daemon::Start(f.data.path(), o);
  auto again = Connect(*second)->Attach(Train(8, 1));
  REQUIRE(again.ok());
  CHECK((*again)->Next(60000).ok());
}

TEST_CASE("SIGTERM tells the attached client and leaves no shm or socket behind") {
  const std::vector<std::string> shm_before = StokerShmNames();
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  auto s = client->Attach(Train(8, 0));
  REQUIRE(s.ok());
  // The ring is a memfd, mapped here, named in no file system; both sockets
  // are owner-only.
  CHECK(MappedHere("memfd:" + RingLabel(**s)));
  CHECK(StokerShmNames() == shm_before);
  const std::string ring_socket = daemon->socket() + ".ring";
  struct stat st;
  REQUIRE(::stat(daemon->socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(ring_socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  {
    auto b = (*s)->Next(60000);
    REQUIRE(b.ok());
    daemon->Signal(SIGTERM);
    int status = daemon->Wait(std::chrono::seconds(15));
    REQUIRE(status != -1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // The held batch stays readable after the daemon is gone.
    volatile uint8_t x = static_cast<const uint8_t*>(b->data())[b->data_bytes() - 1];
    (void)x;
  }
  absl::Status last;
  for (int i = 0; i < 100; ++i) {
    auto b = (*s)->Next(5000);
    if (!b.ok()) {
      last = b.status();
      break;
    }
  }
  CHECK(absl::IsUnavailable(last));
  CHECK(StokerShmNames() == shm_before);
  CHECK_FALSE(fs::exists(daemon->socket()));
  CHECK_FALSE(fs::exists(ring_socket));
  CHECK(daemon->Log().find("stokerd stopped") != std::string::npos);
}

TEST_CASE("a worker killed mid-epoch is replaced and nothing is lost or repeated") {
  Fixture f;
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  AttachOptions o = Train(4, 2);
  o.ring_slots = 2;
  auto s = client->Attach(o);
  REQUIRE(s.ok());
  std::vector<std::vector<int64_t>> per_epoch(2);
  int kills = 0;
  for (;;) {
    auto b = (*s)->Next(60000);
    if (absl::IsOutOfRange(b.status())) break;
    REQUIRE(b.ok());
    per_epoch[b->epoch()].insert(per_epoch[b->epoch()].end(), b->indices().begin(),
                                 b->indices().end());
    if (b->sequence() % 5 == 2) {
      // Worker 0's pid (0 while it restarts), then kill it mid-stream.
      int64_t pid = 0;
      REQUIRE(WaitFor(
          [&] {
            auto js = client->StatusJson();
            auto pids = js.ok() ? JsonInts(*js, "pid") : std::vector<int64_t>{};
            pid = pids.size() >= 2 ? pids[1] : 0;  // the daemon's, then each worker's
            return pid > 0;
          },
          std::chrono::seconds(10)));
      if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++kills;
    }
  }
  CHECK(kills >= 3);
  for (auto& e : per_epoch) {
    std::sort(e.begin(), e.end());
    std::vector<int64_t> all(51);
    for (int i = 0; i < 51; ++i) all[i] = i;
    CHECK(e == all);
  }
  auto js = client->StatusJson();
  REQUIRE(js.ok());
  CHECK(JsonInts(*js, "worker_restarts_total").at(0) >= 1);
}

TEST_CASE("ListSamples pages through the dataset in index order, as each format lists it") {
  Fixture f;
  // A manifest in a sub-folder, its entries relative to that folder.
  fs::create_directories(f.data.path() + "/lists");
  {
    std::ofstream m(f.data.path() + "/lists/train.txt");
    m << "# a comment\n../ds/class_01/img_0003.jpg\t7\n\n../ds/class_00/img_0000.jpg\t-2\n";
  }
  auto daemon = Daemon::Start(f.data.path());
  auto client = Connect(*daemon);
  auto s = client->Attach(Train(8, 1));
  REQUIRE(s.ok());

  const std::string prefix = f.data.path() + "/ds/";
  std::vector<std::string> want;
  for (const std::string& file : f.files) {
    REQUIRE(file.compare(0, prefix.size(), prefix) == 0);
    want.push_back(file.substr(prefix.size()));  // "class_00/img_0000.jpg"
  }
  // One page of everything (limit 0: up to 4096).
  auto all = (*s)->ListSamples(0, 0);
  REQUIRE(all.ok());
  CHECK(all->dataset_size == want.size());
  CHECK(all->paths == want);
  REQUIRE(all->labels.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(all->labels[i] == int64_t(i) / kPerClass);

  // Pages of 10: [0, 10), [10, 20), ... and a short last one.
  std::vector<std::string> paged;
  std::vector<int64_t> labels;
  for (uint64_t off = 0;;) {
    auto page = (*s)->ListSamples(off, 10);
    REQUIRE(page.ok());
    CHECK(page->dataset_size == want.size());
    if (page->paths.empty()) break;
    CHECK(page->paths.size() == std::min<uint64_t>(10, want.size() - off));
    paged.insert(paged.end(), page->paths.begin(), page->paths.end());
    labels.insert(labels.end(), page->labels.begin(), page->labels.end());
    off += page->paths.size();
  }
  CHECK(paged == want);
  CHECK(labels == all->labels);
  auto last = (*s)->ListSamples(want.size() - 1, 5);
  REQUIRE(last.ok());
  CHECK(last->paths == std::vector<std::string>{want.back()});
  auto past = (*s)->ListSamples(want.size() + 100, 5);
  REQUIRE(past.ok());
  CHECK(past->paths.empty());
  CHECK(past->labels.empty());
  auto huge_offset = (*s)->ListSamples(~uint64_t{0}, 65536);
  REQUIRE(huge_offset.ok());
  CHECK(huge_offset->paths.empty());

  // Bounds of a page.
  CHECK((*s)->ListSamples(0, 65536).ok());
  auto over = (*s)->ListSamples(0, 65537);
  CHECK(over.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(over.status().message().find("65536") != absl::string_view::npos);

  // A manifest lists its entries, relative to its own folder, with their labels.
  AttachOptions mo = Train(1, 1);
  mo.dataset = "lists/train.txt";
  auto ms = client->Attach(mo);
  REQUIRE(ms.ok());
  auto ml = (*ms)->ListSamples(0, 0);
  REQUIRE(ml.ok());
  CHECK(ml->paths ==
        std::vector<std::string>{"../ds/class_01/img_0003.jpg", "../ds/class_00/img_0000.jpg"});
  CHECK(ml->labels == std::vector<int64_t>{7, -2});

  // An ended session is unknown.
  REQUIRE((*s)->Detach().ok());
  auto gone = (*s)->ListSamples(0, 1);
  CHECK(gone.status().code() == absl::StatusCode::kNotFound);
  CHECK(client->Health().ok());
}

}  // namespace
}  // namespace stoker::testing
