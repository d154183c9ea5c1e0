// What a trainer node's relays and a decode node agree on
// (proto/stoker/v1/decode.proto carries it): the build fingerprint both must
// share, the credentials of decode traffic, the checks each side applies to
// what the other sent, and the exit codes by which a relay tells the pool
// why it ended.
//
// Thread safety: every function is pure or reads only the files it is
// given.

#ifndef STOKER_SERVER_REMOTE_WIRE_H_
#define STOKER_SERVER_REMOTE_WIRE_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "server/worker/worker_protocol.h"
#include "stoker/v1/config.pb.h"
#include "stoker/v1/decode.pb.h"

namespace stoker::remote {

// A relay's exit statuses (worker_protocol.h): its node lost (unreachable,
// its stream ended, silent past --decode-node-timeout-ms while it held
// tasks), or cut off for a malformed or oversized answer. Neither is the
// sample's fault: the pool redoes the tasks (worker_pool.h, ClassifyDeath).
inline constexpr int kRelayExitNodeLost = worker::kExitNodeLost;
inline constexpr int kRelayExitNodeBad = worker::kExitNodeBad;

// Metadata keys of every decode call.
inline constexpr char kFingerprintKey[] = "stoker-protocol";
inline constexpr char kTokenKey[] = "stoker-token";

// Names this build's task and result layout; a node and a trainer whose
// fingerprints differ cannot exchange tasks.
std::string ProtocolFingerprint();

// Refuses a configuration whose decode flags do not go together: a decode
// node needs --listen and credentials (all three --tls-* files, or
// --decode-token-file), a trainer with --decode-nodes needs credentials
// too, and no daemon is both. INVALID_ARGUMENT naming the fix.
absl::Status CheckDecodeFlags(const v1::DaemonConfig& c);

// The token of --decode-token-file: its first line, at least 16 bytes.
absl::StatusOr<std::string> ReadToken(const std::string& path);

// The gRPC target for a --decode-nodes entry: as given when it has a
// scheme ("dns:///", "ipv4:", "unix:"), else dns:///ENTRY.
std::string NodeTarget(const std::string& entry);

// A decode node's listening credentials: TLS requiring and verifying a
// client certificate signed by --tls-ca, or (token mode) clear text.
// Errors: a file that cannot be read, named.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> NodeServerCredentials(
    const v1::DaemonConfig& c);

// A relay's channel credentials for the same choice: the files' paths (all
// three, or none and a token).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> RelayChannelCredentials(
    const std::string& ca, const std::string& cert, const std::string& key);

// A node's check of a call: the token when `token` is not empty
// (UNAUTHENTICATED; checked first, so that a peer without it learns
// nothing), then the fingerprint (FAILED_PRECONDITION naming both builds).
grpc::Status CheckCall(const grpc::ServerContext& ctx, const std::string& token);

// A detection task's boxes as they cross: box_count x (16 + 8 + 1) bytes,
// the XYXY floats, then the int64 labels, then the uint8 flags.
inline uint64_t BoxBytes(uint32_t count) { return uint64_t{count} * 25; }
// Appends `t`'s boxes, read at its box offsets from `base` (a ring's data
// area, or the node's arena), in that layout.
void AppendBoxes(const worker::TaskMsg& t, const uint8_t* base, std::string* out);
// Writes `boxes` (BoxBytes(t.box_count) of them, checked by the caller) to
// `t`'s box offsets from `base`.
void PlaceBoxes(const worker::TaskMsg& t, std::string_view boxes, uint8_t* base);

// A task as DecodeTask.task carries it: the TaskMsg's first `bytes` bytes
// (header and paths) with runs of zeros left out, since the op lists and
// their parameters are mostly zeros (a 20 KB header crosses as a few
// hundred bytes). Pairs of little-endian uint32 (zeros, literal bytes), each
// followed by its literal bytes.
std::string PackTask(const worker::TaskMsg& t, size_t bytes);

// The node's reading of a packed task: it unpacks to at most a TaskMsg, a
// whole header, paths whose lengths add up, capacities under `max_bytes`
// each. INVALID_ARGUMENT saying what is wrong.
absl::Status ParseTask(std::string_view packed, uint64_t max_bytes, worker::TaskMsg* out,
                       size_t* bytes);

// The output bytes a result answers for `t`: its views' rooms in full, one
// after another, or result.bytes of the sample.
uint64_t OutputBytes(const worker::TaskMsg& t, const worker::ResultMsg& r);

// The relay's check of a node's answer to `t`: a whole ResultMsg for this
// task with a terminated reason; output, mask and boxes of exactly the sizes
// it states, each inside its room in the ring. `r` gets the result.
// DATA_LOSS naming what is wrong (the relay then cuts the node off).
absl::Status CheckResult(const worker::TaskMsg& t, const v1::DecodeResult& res,
                         worker::ResultMsg* r);

// A shipped file's store key (file_store.h): 32 lowercase hex digits of the
// file's identity on the trainer node (transcode_cache.h, IdentityOf: its
// path, byte range, size, mtime and inode), so a changed file is sent anew.
std::string ShippedFileKey(std::string_view path, const struct stat& st, bool has_range,
                           uint64_t offset, uint64_t length);

// The files a clip or volume task reads, in the order a shipped task names
// them by key: the image's (worker::SplitPathFiles: a volume's channels)
// then the mask's (a volume's label), if it has one.
std::vector<std::string_view> TaskFiles(const worker::TaskMsg& t);

}  // namespace stoker::remote

#endif  // STOKER_SERVER_REMOTE_WIRE_H_
