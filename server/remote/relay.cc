#include "server/remote/relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/posix.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/remote/wire.h"
#include "server/worker/worker_input.h"
#include "server/worker/worker_protocol.h"
#include "stoker/v1/decode.grpc.pb.h"

namespace stoker::remote {
namespace {

struct Held {
  std::unique_ptr<worker::TaskMsg> task;
  bool local = false;  // answered here (its input could not be read)
  worker::ResultMsg result;
  // A shipped clip's or volume's files: (store key, path) for the node's
  // reasons, which name the keys.
  std::vector<std::pair<std::string, std::string>> shipped;
};

// A shipped file's pieces on the stream.
constexpr size_t kPieceBytes = size_t{4} << 20;
// Whether the node still has a file this relay sent or was told of is asked
// again after this long; the node keeps a file a minute from each question
// (file_store.h), so a task never names one it dropped.
constexpr int64_t kRecheckNs = int64_t{30} * 1'000'000'000;

// Ends the relay; a non-zero `status` says why on stderr (the daemon's log).
[[noreturn]] void Quit(const RelayOptions& o, int status, const std::string& why) {
  if (status != 0) {
    std::fprintf(stderr, "stoker-relay %u (%s): %s\n", o.id, o.node.c_str(), why.c_str());
    std::fflush(stderr);
  }
  ::_exit(status);
}

absl::Status ReadPart(int root, std::string_view path, bool has_range, uint64_t offset,
                      uint64_t length, uint64_t max_bytes, std::string* out) {
  worker::Input in;
  if (absl::Status st = worker::OpenChecked(root, path, has_range, offset, length, max_bytes, &in);
      !st.ok()) {
    return st;
  }
  return worker::ReadWhole(in, [out](size_t n) {
    out->resize(n);
    return reinterpret_cast<uint8_t*>(out->data());
  });
}

// The task's encoded input, as the worker would read it (a raw record made
// the PNM image of its pixels).
absl::Status ReadInputs(const worker::TaskMsg& t, int root, v1::DecodeTask* req) {
  worker::Input in;
  if (absl::Status st = worker::OpenChecked(root, std::string_view(t.path, t.path_bytes),
                                            t.has_range != 0, t.file_offset, t.file_length,
                                            t.max_file_bytes, &in);
      !st.ok()) {
    return st;
  }
  std::string* input = req->mutable_input();
  if (absl::Status st = worker::ReadTaskInput(t, in, [input](size_t n) {
        input->resize(n);
        return reinterpret_cast<uint8_t*>(input->data());
      });
      !st.ok()) {
    return st;
  }
  if (t.mask_path_bytes != 0) {
    std::string_view mask(t.path + t.path_bytes, t.mask_path_bytes);
    absl::Status st = ReadPart(root, mask, t.mask_has_range != 0, t.mask_file_offset,
                               t.mask_file_length, t.max_file_bytes, req->mutable_mask());
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("mask ", std::string(mask), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

class Relay {
 public:
  Relay(const RelayOptions& o, int channel, int root) : o_(o), channel_(channel), root_(root) {}

  int Run() {
    auto creds = RelayChannelCredentials(o_.tls_ca, o_.tls_cert, o_.tls_key);
    if (!creds.ok()) Quit(o_, kRelayExitNodeLost, std::string(creds.status().message()));
    if (!o_.token_file.empty()) {
      auto t = ReadToken(o_.token_file);
      if (!t.ok()) Quit(o_, kRelayExitNodeLost, std::string(t.status().message()));
      token_ = *t;
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(o_.timeout_ms));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetMaxReceiveMessageSize(512 << 20);
    args.SetMaxSendMessageSize(512 << 20);
    if (!o_.tls_name.empty()) args.SetSslTargetNameOverride(o_.tls_name);
    auto channel = grpc::CreateCustomChannel(NodeTarget(o_.node), *creds, args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::milliseconds(o_.timeout_ms))) {
      Quit(o_, kRelayExitNodeLost, "cannot connect");
    }
    stub_ = v1::DecodeNode::NewStub(channel);
    Sign(&ctx_);
    stream_ = stub_->Decode(&ctx_);
    worker::HelloMsg hello;
    hello.pid = ::getpid();
    if (!worker::SendMessage(channel_, &hello, sizeof(hello))) return 0;
    std::thread([this] { ReadAnswers(); }).detach();
    std::thread([this] { Watch(); }).detach();
    return ReadChannel();
  }

 private:
  void Sign(grpc::ClientContext* ctx) const {
    ctx->AddMetadata(kFingerprintKey, ProtocolFingerprint());
    if (!token_.empty()) ctx->AddMetadata(kTokenKey, token_);
  }

  // A clip's or a volume's files, sent whole to the node unless it has them
  // (decode.proto, Has and FileChunk); `out` becomes the task naming them by
  // store key. Errors are the sample's (a file that cannot be read, one
  // larger than the node takes); a node that cannot be asked ends the relay.
  absl::Status ShipFiles(const worker::TaskMsg& t, worker::TaskMsg* out, size_t* out_bytes,
                         Held* h) {
    struct File {
      std::string_view path;
      worker::Input in;
      std::string key;
    };
    std::vector<File> files;
    const bool clip = t.clip.params.frames != 0;
    for (std::string_view path : TaskFiles(t)) {
      File f;
      f.path = path;
      // A clip's video may be a range of a shard; a volume's files are whole.
      const bool range = clip && t.has_range != 0;
      if (absl::Status st = worker::OpenChecked(root_, path, range, t.file_offset, t.file_length,
                                                0, &f.in);
          !st.ok()) {
        return st;
      }
      f.key = ShippedFileKey(path, f.in.st, range, f.in.begin, f.in.length);
      files.push_back(std::move(f));
    }
    const int64_t now = MonotonicNs();
    v1::HasFilesRequest ask;
    for (const File& f : files) {
      auto it = confirmed_.find(f.key);
      if (it == confirmed_.end() || now - it->second > kRecheckNs) ask.add_keys(f.key);
    }
    if (ask.keys_size() != 0) {
      grpc::ClientContext ctx;
      Sign(&ctx);
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(o_.timeout_ms));
      v1::HasFilesReply have;
      const grpc::Status st = stub_->Has(&ctx, ask, &have);
      if (!st.ok()) {
        Quit(o_, kRelayExitNodeLost, absl::StrCat("asking for shipped files: ", st.error_message()));
      }
      if (have.have_size() != ask.keys_size()) Quit(o_, kRelayExitNodeBad, "a wrong Has answer");
      for (int k = 0; k < ask.keys_size(); ++k) {
        if (have.have(k)) {
          confirmed_[ask.keys(k)] = now;
          continue;
        }
        const File& f = *std::find_if(files.begin(), files.end(),
                                      [&](const File& x) { return x.key == ask.keys(k); });
        if (f.in.length > have.max_bytes()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              std::string(f.path), ": ", f.in.length, " bytes, more than the decode node ",
              o_.node, " keeps (", have.max_bytes(), ": its --decode-files-mb)"));
        }
        if (absl::Status sent = Send(f.path, f.in, f.key); !sent.ok()) return sent;
        confirmed_[f.key] = MonotonicNs();
      }
    }
    // The task as the node reads it: the same, its files named by key.
    const size_t header = worker::TaskHeaderBytes();
    std::memcpy(static_cast<void*>(out), &t, header);
    std::string image, mask;
    const size_t image_files = files.size() - (t.mask_path_bytes != 0 ? 1 : 0);
    for (size_t i = 0; i < files.size(); ++i) {
      std::string& part = i < image_files ? image : mask;
      if (!part.empty()) part.push_back('\0');
      part += files[i].key;
      h->shipped.emplace_back(files[i].key, std::string(files[i].path));
    }
    if (image.size() + mask.size() > worker::kMaxPathBytes) {
      return absl::InvalidArgumentError("too many files for one task");
    }
    out->path_bytes = static_cast<uint32_t>(image.size());
    out->mask_path_bytes = static_cast<uint32_t>(mask.size());
    std::memcpy(out->path, image.data(), image.size());
    std::memcpy(out->path + image.size(), mask.data(), mask.size());
    out->has_range = 0;
    out->file_offset = 0;
    out->file_length = 0;
    out->shipped_files = 1;
    *out_bytes = header + image.size() + mask.size();
    return absl::OkStatus();
  }

  // One file's pieces, on the stream (only this thread writes to it).
  absl::Status Send(std::string_view path, const worker::Input& in, const std::string& key) {
    v1::DecodeTask piece;
    v1::FileChunk* c = piece.mutable_file();
    c->set_key(key);
    c->set_size(in.length);
    std::string* data = c->mutable_data();
    for (uint64_t at = 0; at < in.length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, in.length - at));
      data->resize(n);
      size_t got = 0;
      while (got < n) {
        const ssize_t r = ::pread(in.fd.get(), data->data() + got, n - got,
                                  static_cast<off_t>(in.begin + at + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return PosixError(absl::StrCat("read ", std::string(path)), errno);
        if (r == 0) {
          return absl::DataLossError(absl::StrCat(std::string(path), ": shrank while read"));
        }
        got += static_cast<size_t>(r);
      }
      c->set_offset(at);
      if (!stream_->Write(piece)) Quit(o_, kRelayExitNodeLost, "the stream to the node broke");
      at += n;
      std::lock_guard<std::mutex> l(mu_);
      progress_ns_ = MonotonicNs();  // a long upload is progress, not silence
    }
    return absl::OkStatus();
  }

  int ReadChannel() {
    auto buf = std::make_unique<worker::TaskMsg>();
    char* raw = reinterpret_cast<char*>(buf.get());
    for (;;) {
      UniqueFd fd;
      const ssize_t n = ReceiveWithFd(channel_, raw, sizeof(worker::TaskMsg), &fd);
      if (n <= 0) Quit(o_, 0, "the daemon is gone");
      uint32_t type;
      if (static_cast<size_t>(n) < sizeof(type)) return 2;
      std::memcpy(&type, raw, sizeof(type));
      if (type == worker::kMapRing) {
        if (static_cast<size_t>(n) != sizeof(worker::MapRingMsg) || !fd.valid()) return 2;
        worker::MapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        Mapping map;
        if (!MapShared(fd.get(), m.data_offset, m.data_bytes, &map).ok()) return 3;
        std::lock_guard<std::mutex> l(mu_);
        rings_[m.ring_id] = std::move(map);
      } else if (type == worker::kUnmapRing) {
        if (static_cast<size_t>(n) != sizeof(worker::UnmapRingMsg)) return 2;
        worker::UnmapRingMsg m;
        std::memcpy(&m, raw, sizeof(m));
        std::lock_guard<std::mutex> l(mu_);
        rings_.erase(m.ring_id);
      } else if (type == worker::kShutdown) {
        ctx_.TryCancel();
        Quit(o_, 0, "asked to exit");
      } else if (type == worker::kTask) {
        if (!worker::TaskBytesAddUp(*buf, static_cast<size_t>(n))) return 2;
        Submit(*buf, static_cast<size_t>(n));
      } else {
        return 2;
      }
    }
  }

  void Submit(const worker::TaskMsg& t, size_t bytes) {
    Held h;
    h.task = std::make_unique<worker::TaskMsg>();
    std::memcpy(h.task.get(), &t, bytes);
    v1::DecodeTask req;
    absl::Status st;
    if (o_.shared_root) {
      req.set_task(PackTask(t, bytes));
    } else if (t.clip.params.frames != 0 || t.has_volume != 0) {
      size_t shipped_bytes = 0;
      st = ShipFiles(t, shipped_.get(), &shipped_bytes, &h);
      if (st.ok()) req.set_task(PackTask(*shipped_, shipped_bytes));
    } else {
      req.set_task(PackTask(t, bytes));
      st = ReadInputs(t, root_, &req);
    }
    if (st.ok() && t.has_boxes != 0) {
      std::lock_guard<std::mutex> l(mu_);
      const Mapping* ring = Ring(t);
      if (ring == nullptr) {
        st = absl::InternalError("task names memory outside its ring");
      } else {
        AppendBoxes(t, static_cast<const uint8_t*>(ring->addr()), req.mutable_boxes());
      }
    }
    if (!st.ok()) {
      h.local = true;
      h.result = worker::ResultMsg{};
      h.result.task_id = t.task_id;
      h.result.code = static_cast<uint32_t>(st.code());
      worker::CopyText(std::string(st.message()), h.result.reason);
      std::lock_guard<std::mutex> l(mu_);
      if (held_.empty()) progress_ns_ = MonotonicNs();
      held_.push_back(std::move(h));
      FlushLocalLocked();
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (held_.empty()) progress_ns_ = MonotonicNs();
      held_.push_back(std::move(h));
    }
    if (!stream_->Write(req)) Quit(o_, kRelayExitNodeLost, "the stream to the node broke");
  }

  // A ring the task's rooms lie in, all of them (as the worker checks
  // them); null if none.
  const Mapping* Ring(const worker::TaskMsg& t) const {
    auto it = rings_.find(t.ring_id);
    if (it == rings_.end() || !worker::TaskFitsRing(t, it->second.bytes())) return nullptr;
    return &it->second;
  }

  // Sends the answers made here that are now due.
  void FlushLocalLocked() {
    while (!held_.empty() && held_.front().local) {
      if (!worker::SendMessage(channel_, &held_.front().result, sizeof(worker::ResultMsg))) {
        Quit(o_, 0, "the daemon is gone");
      }
      held_.pop_front();
      progress_ns_ = MonotonicNs();
    }
  }

  void ReadAnswers() {
    v1::DecodeResult res;
    while (stream_->Read(&res)) {
      std::lock_guard<std::mutex> l(mu_);
      if (held_.empty() || held_.front().local) {
        Quit(o_, kRelayExitNodeBad, "an answer to no task");
      }
      const worker::TaskMsg& t = *held_.front().task;
      worker::ResultMsg r;
      if (absl::Status st = CheckResult(t, res, &r); !st.ok()) {
        Quit(o_, kRelayExitNodeBad, absl::StrCat("cut off: ", st.message()));
      }
      if (r.code != 0 && !held_.front().shipped.empty()) {
        // The node's reason names the files by key: name them by path.
        std::string why(r.reason);
        for (const auto& [key, path] : held_.front().shipped) {
          for (size_t at = why.find(key); at != std::string::npos; at = why.find(key, at)) {
            why.replace(at, key.size(), path);
            at += path.size();
          }
        }
        worker::CopyText(why, r.reason);
      }
      if (r.code == 0) {
        const Mapping* ring = Ring(t);
        if (ring == nullptr) {
          // The session went while the node worked; the pool drops the answer.
          r.code = static_cast<uint32_t>(absl::StatusCode::kInternal);
          worker::CopyText("task names memory outside its ring", r.reason);
        } else {
          uint8_t* base = static_cast<uint8_t*>(ring->addr());
          const std::string& out = res.output();
          if (t.params.view_count != 0) {
            uint64_t at = 0;
            for (uint32_t k = 0; k < image::OutputCount(t.params); ++k) {
              std::memcpy(base + t.view_out_offset[k], out.data() + at, t.view_out_capacity[k]);
              at += t.view_out_capacity[k];
            }
          } else {
            std::memcpy(base + t.out_offset, out.data(), out.size());
          }
          std::memcpy(base + t.mask_out_offset, res.mask().data(), res.mask().size());
          if (t.has_boxes != 0) PlaceBoxes(t, res.boxes(), base);
        }
      }
      if (!worker::SendMessage(channel_, &r, sizeof(r))) Quit(o_, 0, "the daemon is gone");
      held_.pop_front();
      progress_ns_ = MonotonicNs();
      FlushLocalLocked();
    }
    const grpc::Status st = stream_->Finish();
    Quit(o_, kRelayExitNodeLost,
         absl::StrCat("the node ended the stream: ", st.error_message(), " (code ",
                      static_cast<int>(st.error_code()), ")"));
  }

  void Watch() {
    const int64_t limit = int64_t{o_.timeout_ms} * 1'000'000;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> l(mu_);
      if (!held_.empty() && MonotonicNs() - progress_ns_ > limit) {
        Quit(o_, kRelayExitNodeLost,
             absl::StrCat("no answer for ", o_.timeout_ms, " ms while holding ", held_.size(),
                          " task(s)"));
      }
    }
  }

  const RelayOptions o_;
  const int channel_;
  const int root_;
  std::string token_;
  std::unique_ptr<v1::DecodeNode::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::DecodeTask, v1::DecodeResult>> stream_;
  // The reader thread's: shipped files the node has (key -> when it said so
  // or they were sent), and the task rewritten to name them.
  std::unordered_map<std::string, int64_t> confirmed_;
  std::unique_ptr<worker::TaskMsg> shipped_ = std::make_unique<worker::TaskMsg>();
  std::mutex mu_;
  std::unordered_map<uint64_t, Mapping> rings_;
  std::deque<Held> held_;
  int64_t progress_ns_ = 0;
};

}  // namespace

int RunRelay(const RelayOptions& o, int channel, int data_root) {
  Relay relay(o, channel, data_root);
  return relay.Run();
}

}  // namespace stoker::remote
