// Human views of a daemon's status for stokerctl: a table (`status`) and a
// refreshing screen (`top`), from the Stoker service directly.

#ifndef STOKER_CLIENT_STOKERCTL_STATUS_VIEW_H_
#define STOKER_CLIENT_STOKERCTL_STATUS_VIEW_H_

#include <string>

#include "absl/status/status.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::ctl {

// The status as a few aligned tables (daemon, workers, sessions, failures).
std::string RenderStatus(const v1::StatusResponse& s);

// The address as gRPC wants it: a path becomes "unix:PATH".
std::string GrpcTarget(const std::string& address);

// One Status call.
absl::Status FetchStatus(const std::string& address, bool include_failures,
                         v1::StatusResponse* out);

// `stokerctl top`: clears the screen and redraws on each Watch update,
// `iterations` times (0: until interrupted or the daemon stops).
absl::Status RunTop(const std::string& address, uint32_t interval_ms, uint32_t iterations);

}  // namespace stoker::ctl

#endif  // STOKER_CLIENT_STOKERCTL_STATUS_VIEW_H_
