#include "server/remote/wire.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/server_credentials.h"
#include "server/engine/transcode_cache.h"

namespace stoker::remote {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("--", flag, " ", path, ": cannot be read"));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": not a PEM file"));
  }
  return text;
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string ProtocolFingerprint() {
  return absl::StrCat("stoker-", STOKER_VERSION, "/task", sizeof(worker::TaskMsg), "-",
                      worker::TaskHeaderBytes(), "/result", sizeof(worker::ResultMsg), "/params",
                      sizeof(image::PipelineParams), "/volume",
                      sizeof(volume::VolumeTaskParams));
}

absl::Status CheckDecodeFlags(const v1::DaemonConfig& c) {
  const int tls = !c.tls_ca().empty() + !c.tls_cert().empty() + !c.tls_key().empty();
  const bool token = !c.decode_token_file().empty();
  const bool uses = c.decode_node() || !c.decode_nodes().empty();
  if (c.decode_node() && !c.decode_nodes().empty()) {
    return absl::InvalidArgumentError(
        "--decode-node and --decode-nodes: a daemon is a decode node or sends work to them, not "
        "both");
  }
  if (c.decode_node() && c.listen().empty()) {
    return absl::InvalidArgumentError(
        "--decode-node needs --listen HOST:PORT (e.g. 0.0.0.0:7070), where trainer nodes connect");
  }
  if (!c.decode_node() && !c.listen().empty()) {
    return absl::InvalidArgumentError("--listen is a decode node's: add --decode-node");
  }
  if (!uses) {
    if (tls != 0 || token) {
      return absl::InvalidArgumentError(
          "--tls-* and --decode-token-file secure decode traffic: add --decode-node or "
          "--decode-nodes");
    }
    return absl::OkStatus();
  }
  if (tls != 0 && tls != 3) {
    return absl::InvalidArgumentError(
        "decode traffic over TLS needs all of --tls-ca, --tls-cert and --tls-key");
  }
  if (tls == 3 && token) {
    return absl::InvalidArgumentError(
        "--decode-token-file is the development mode without TLS: give it or the --tls-* files, "
        "not both");
  }
  if (tls == 0 && !token) {
    return absl::InvalidArgumentError(
        "decode traffic must be authenticated: give --tls-ca, --tls-cert and --tls-key (mutual "
        "TLS), or for development only --decode-token-file");
  }
  return absl::OkStatus();
}

std::string NodeTarget(const std::string& entry) {
  if (absl::StrContains(entry, ":///") || absl::StartsWith(entry, "ipv4:") ||
      absl::StartsWith(entry, "ipv6:") || absl::StartsWith(entry, "unix:")) {
    return entry;
  }
  return "dns:///" + entry;
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) {
    return absl::NotFoundError(absl::StrCat("--decode-token-file ", path, ": cannot be read"));
  }
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--decode-token-file ", path, ": the token must be at least 16 characters (e.g. "
        "`openssl rand -hex 32 > ", path, "`)"));
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> NodeServerCredentials(
    const v1::DaemonConfig& c) {
  if (c.tls_ca().empty()) return grpc::InsecureServerCredentials();
  auto ca = ReadPem("tls-ca", c.tls_ca());
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem("tls-cert", c.tls_cert());
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("tls-key", c.tls_key());
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = *ca;
  o.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(o);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RelayChannelCredentials(
    const std::string& ca, const std::string& cert, const std::string& key) {
  if (ca.empty()) return grpc::InsecureChannelCredentials();
  auto ca_pem = ReadPem("tls-ca", ca);
  if (!ca_pem.ok()) return ca_pem.status();
  auto cert_pem = ReadPem("tls-cert", cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem("tls-key", key);
  if (!key_pem.ok()) return key_pem.status();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = *ca_pem;
  o.pem_cert_chain = *cert_pem;
  o.pem_private_key = *key_pem;
  return grpc::SslCredentials(o);
}

grpc::Status CheckCall(const grpc::ServerContext& ctx, const std::string& token) {
  const auto& md = ctx.client_metadata();
  // The token first: a peer without it learns nothing, not even the build.
  if (!token.empty()) {
    auto t = md.find(kTokenKey);
    if (t == md.end() ||
        !ConstantTimeEqual(std::string_view(t->second.data(), t->second.size()), token)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the decode token is missing or wrong (--decode-token-file)");
    }
  }
  auto fp = md.find(kFingerprintKey);
  const std::string ours = ProtocolFingerprint();
  if (fp == md.end() || std::string_view(fp->second.data(), fp->second.size()) != ours) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("this decode node runs ", ours, ", the trainer node ",
                     fp == md.end() ? std::string("an unknown build")
                                    : std::string(fp->second.data(), fp->second.size()),
                     ": run the same stoker version on both"));
  }
  return grpc::Status::OK;
}

std::string PackTask(const worker::TaskMsg& t, size_t bytes) {
  // Runs of fewer zeros than this stay in the literal: a pair costs 8 bytes.
  constexpr size_t kMinRun = 16;
  const auto* p = reinterpret_cast<const uint8_t*>(&t);
  std::string out;
  out.reserve(bytes / 8 + 64);
  const auto put32 = [&out](uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);  // little-endian hosts only (x86-64, aarch64)
    out.append(b, 4);
  };
  size_t at = 0;
  while (at < bytes) {
    size_t zeros = 0;
    while (at + zeros < bytes && p[at + zeros] == 0) ++zeros;
    size_t lit = 0;
    for (size_t run = 0; at + zeros + lit < bytes; ++lit) {
      run = p[at + zeros + lit] == 0 ? run + 1 : 0;
      if (run == kMinRun) {
        lit -= kMinRun - 1;
        break;
      }
    }
    put32(static_cast<uint32_t>(zeros));
    put32(static_cast<uint32_t>(lit));
    out.append(reinterpret_cast<const char*>(p + at + zeros), lit);
    at += zeros + lit;
  }
  return out;
}

absl::Status ParseTask(std::string_view packed, uint64_t max_bytes, worker::TaskMsg* t,
                       size_t* out_bytes) {
  auto* p = reinterpret_cast<uint8_t*>(t);
  size_t bytes = 0, at = 0;
  while (at < packed.size()) {
    uint32_t zeros, lit;
    if (packed.size() - at < 8) return absl::InvalidArgumentError("a task cut short");
    std::memcpy(&zeros, packed.data() + at, 4);
    std::memcpy(&lit, packed.data() + at + 4, 4);
    at += 8;
    if (zeros > sizeof(worker::TaskMsg) - bytes ||
        lit > sizeof(worker::TaskMsg) - bytes - zeros || lit > packed.size() - at) {
      return absl::InvalidArgumentError("a task larger than a task");
    }
    std::memset(p + bytes, 0, zeros);
    std::memcpy(p + bytes + zeros, packed.data() + at, lit);
    bytes += zeros + lit;
    at += lit;
  }
  if (bytes < worker::TaskHeaderBytes()) {
    return absl::InvalidArgumentError(absl::StrCat("a task of ", bytes, " bytes"));
  }
  *out_bytes = bytes;
  if (t->type != worker::kTask || !worker::TaskBytesAddUp(*t, bytes)) {
    return absl::InvalidArgumentError("a task whose paths do not add up");
  }
  if (t->params.view_count > image::kMaxViews) {
    return absl::InvalidArgumentError("a task with too many views");
  }
  if (t->out_capacity > max_bytes || t->mask_out_capacity > max_bytes ||
      (t->has_boxes != 0 && BoxBytes(t->box_count) > max_bytes)) {
    return absl::InvalidArgumentError("a task whose output is over the node's limit");
  }
  for (uint32_t k = 0; t->params.view_count != 0 && k < image::OutputCount(t->params); ++k) {
    if (t->view_out_capacity[k] > max_bytes) {
      return absl::InvalidArgumentError("a task whose output is over the node's limit");
    }
  }
  return absl::OkStatus();
}

void AppendBoxes(const worker::TaskMsg& t, const uint8_t* base, std::string* out) {
  const size_t n = t.box_count;
  out->append(reinterpret_cast<const char*>(base + t.box_out_offset), n * 16);
  out->append(reinterpret_cast<const char*>(base + t.box_label_out_offset), n * 8);
  out->append(reinterpret_cast<const char*>(base + t.box_flag_out_offset), n);
}

void PlaceBoxes(const worker::TaskMsg& t, std::string_view boxes, uint8_t* base) {
  const size_t n = t.box_count;
  std::memcpy(base + t.box_out_offset, boxes.data(), n * 16);
  std::memcpy(base + t.box_label_out_offset, boxes.data() + n * 16, n * 8);
  std::memcpy(base + t.box_flag_out_offset, boxes.data() + n * 24, n);
}

uint64_t OutputBytes(const worker::TaskMsg& t, const worker::ResultMsg& r) {
  if (t.params.view_count == 0) return r.bytes;
  uint64_t n = 0;
  for (uint32_t k = 0; k < image::OutputCount(t.params); ++k) n += t.view_out_capacity[k];
  return n;
}

absl::Status CheckResult(const worker::TaskMsg& t, const v1::DecodeResult& res,
                         worker::ResultMsg* r) {
  if (res.result().size() != sizeof(worker::ResultMsg)) {
    return absl::DataLossError(absl::StrCat("a result of ", res.result().size(), " bytes"));
  }
  std::memcpy(r, res.result().data(), sizeof(*r));
  if (r->type != worker::kResult || r->task_id != t.task_id) {
    return absl::DataLossError("a result for another task");
  }
  if (std::memchr(r->reason, '\0', sizeof(r->reason)) == nullptr) {
    return absl::DataLossError("a result whose reason is not terminated");
  }
  if (r->code != 0) {
    if (!res.output().empty() || !res.mask().empty() || !res.boxes().empty()) {
      return absl::DataLossError("a failed result with output");
    }
    return absl::OkStatus();
  }
  const uint64_t out = OutputBytes(t, *r);
  const uint64_t out_room = t.params.view_count != 0 ? out : t.out_capacity;
  if (res.output().size() != out || out > out_room) {
    return absl::DataLossError(absl::StrCat("an output of ", res.output().size(),
                                            " bytes where ", out, " (room ", out_room,
                                            ") were due"));
  }
  if (res.mask().size() != r->mask_bytes || r->mask_bytes > t.mask_out_capacity ||
      (t.mask_path_bytes == 0 && r->mask_bytes != 0)) {
    return absl::DataLossError("a mask of the wrong size");
  }
  const uint64_t boxes = t.has_boxes != 0 ? BoxBytes(t.box_count) : 0;
  if (res.boxes().size() != boxes || r->boxes_kept > t.box_count) {
    return absl::DataLossError("boxes of the wrong size");
  }
  return absl::OkStatus();
}

std::string ShippedFileKey(std::string_view path, const struct stat& st, bool has_range,
                           uint64_t offset, uint64_t length) {
  return CacheEntryName(CacheKeyFor(IdentityOf(path, st, has_range, offset, length))).substr(0, 32);
}

std::vector<std::string_view> TaskFiles(const worker::TaskMsg& t) {
  std::vector<std::string_view> files =
      worker::SplitPathFiles(std::string_view(t.path, t.path_bytes));
  if (t.mask_path_bytes != 0) {
    files.push_back(std::string_view(t.path + t.path_bytes, t.mask_path_bytes));
  }
  return files;
}

}  // namespace stoker::remote
