// Human views of a daemon's status for stokerctl: tables (`status`) and a
// refreshing screen (`top`), from the Stoker service directly, laid out for
// the terminal's width.

#ifndef STOKER_TOOLS_STOKERCTL_STATUS_VIEW_H_
#define STOKER_TOOLS_STOKERCTL_STATUS_VIEW_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::ctl {

// The width the views are laid out for: the terminal's (TIOCGWINSZ on
// stdout), else $COLUMNS (a positive number), else 80.
size_t TerminalWidth();

// How a cell too long for its column is shortened, with an ellipsis ("…"):
// kTail keeps its start ("a long na…", for names), kHead its end
// ("…/class/x.jpg", for paths). kNone: never shortened.
enum class Trim { kNone, kTail, kHead };

// One column of a LayoutTable.
struct Column {
  std::string header;
  // Drop order when the table is too wide: the lowest rank goes first.
  // kAlways: never dropped.
  int rank = kAlways;
  Trim trim = Trim::kNone;
  // A trimmed column is first shortened to `soft_width`, and only once every
  // droppable column is gone down to `min_width` (both in characters).
  size_t soft_width = 0;
  size_t min_width = 0;
  static constexpr int kAlways = 1 << 30;
};

// Lays a table out in at most `width` characters per line (UTF-8 counted as
// characters), columns padded to their widest cell and two spaces apart.
// While it is too wide: trimmed columns are shortened to their soft width,
// then droppable columns go (lowest rank first), then trimmed columns are
// shortened to their min width, and as a last resort each line is cut at
// `width`. A wide terminal shows every column in full. Rows shorter than the
// header are padded with empty cells. Each line ends with '\n'.
std::string LayoutTable(const std::vector<Column>& columns,
                        const std::vector<std::vector<std::string>>& rows, size_t width);

// `head`, two spaces and `text`, broken at the spaces of `text` into lines
// of at most `width` characters (UTF-8 counted as characters), the lines
// after the first indented by `indent` spaces (a word too long is cut).
std::string WrapWords(std::string_view head, std::string_view text, size_t width, size_t indent);

// A session's ring depth for people: "4", or "8/16" while it may deepen
// further (depth/slots).
std::string RingDepth(const v1::SessionStatus& s);

// The status as a few tables (daemon, readahead, workers, sessions, and
// failed samples of each session and of the daemon's failure memory per
// dataset), no line over `width` characters.
std::string RenderStatus(const v1::StatusResponse& s, size_t width);

// The address as gRPC wants it: a path becomes "unix:PATH".
std::string GrpcTarget(const std::string& address);

// One Status call (the flags: StatusRequest's).
absl::Status FetchStatus(const std::string& address, bool include_failures,
                         bool include_dataset_failures, v1::StatusResponse* out);

// `stokerctl top`: clears the screen and redraws on each Watch update, laid
// out for TerminalWidth() (read again at each refresh), `iterations` times
// (0: until interrupted or the daemon stops).
absl::Status RunTop(const std::string& address, uint32_t interval_ms, uint32_t iterations);

}  // namespace stoker::ctl

#endif  // STOKER_TOOLS_STOKERCTL_STATUS_VIEW_H_
