#include "server/engine/video_prober.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "server/worker/worker_protocol.h"

namespace stoker {

// One probing worker and the video it is on.
struct WorkerVideoProber::Proc {
  pid_t pid = -1;
  UniqueFd channel;
  int64_t current = -1;  // the target it is on
  int64_t deadline_ns = 0;
  bool have_header = false;
  uint64_t expected = 0;  // values (pts then keyframes) still to come
  ProbeOutcome outcome;
  std::vector<int64_t> values;
};

bool WorkerVideoProber::Start(Proc& p, uint32_t id, std::string* why) {
  absl::MutexLock l(&launcher_mu_);
  absl::StatusOr<LaunchedWorker> w = launcher_->Launch(id);
  if (!w.ok()) {
    *why = w.status().ToString();
    return false;
  }
  p.pid = w->pid;
  p.channel = std::move(w->channel);
  return true;
}

void WorkerVideoProber::Stop(Proc& p, bool kill) {
  if (p.pid < 0) return;
  if (!kill) {
    worker::ShutdownMsg m;
    if (!SendWithFd(p.channel.get(), &m, sizeof(m), -1)) kill = true;
  }
  p.channel.Reset();  // a worker past its Shutdown sees the channel close
  absl::MutexLock l(&launcher_mu_);
  if (kill) launcher_->Kill(p.pid);
  launcher_->Reap(p.pid);
  p.pid = -1;
}

std::vector<ProbeOutcome> WorkerVideoProber::ProbeAll(
    const std::vector<ProbeTarget>& targets, const std::function<void(uint64_t)>& progress) {
  std::vector<ProbeOutcome> out(targets.size());
  if (targets.empty()) return out;
  const size_t n_procs =
      std::min<size_t>(std::max<uint32_t>(options_.parallelism, 1), targets.size());
  std::vector<Proc> procs(n_procs);
  size_t next = 0, done = 0;
  std::string launch_error;
  const auto finish = [&](Proc& p, ProbeOutcome outcome) {
    out[static_cast<size_t>(p.current)] = std::move(outcome);
    p.current = -1;
    p.have_header = false;
    p.values.clear();
    ++done;
    if (progress) progress(done);
  };
  // One video's failure that was the worker's (it died, hung or broke the
  // protocol): the worker goes, and is started again for the next video.
  const auto lose = [&](Proc& p, absl::Status why, bool kill) {
    if (p.current >= 0) {
      ProbeOutcome o;
      o.status = std::move(why);
      finish(p, std::move(o));
    }
    Stop(p, kill);
  };
  auto msg = std::make_unique<worker::ProbeMsg>();
  constexpr size_t kBufBytes = std::max(sizeof(worker::ProbeResultMsg), sizeof(worker::ProbePtsMsg));
  auto buf = std::make_unique<char[]>(kBufBytes);
  const int64_t timeout_ns = int64_t{options_.timeout_ms} * 1'000'000;
  const uint64_t max_values = 2 * (options_.max_frames != 0 ? options_.max_frames : (4u << 20));

  while (done < targets.size()) {
    // Give every idle worker (started now if need be) the next video.
    bool any_alive = false;
    for (size_t k = 0; k < procs.size(); ++k) {
      Proc& p = procs[k];
      if (p.current < 0 && next < targets.size() && p.pid < 0) {
        std::string why;
        if (!Start(p, static_cast<uint32_t>(1000 + k), &why)) launch_error = why;
      }
      if (p.pid < 0) continue;
      any_alive = true;
      if (p.current >= 0 || next >= targets.size()) continue;
      const ProbeTarget& t = targets[next];
      if (t.path.size() > worker::kMaxPathBytes) {
        out[next].status = absl::InvalidArgumentError("path too long");
        ++next;
        ++done;
        if (progress) progress(done);
        continue;
      }
      msg->path_bytes = static_cast<uint32_t>(t.path.size());
      msg->probe_id = next;
      msg->has_range = t.has_range ? 1 : 0;
      msg->kind = t.record_kind;
      msg->file_offset = t.offset;
      msg->file_length = t.length;
      msg->max_decode_pixels = options_.max_decode_pixels;
      msg->max_frames = options_.max_frames;
      std::memcpy(msg->path, t.path.data(), t.path.size());
      p.current = static_cast<int64_t>(next++);
      // A record file may hold millions of samples: it gets longer.
      p.deadline_ns = MonotonicNs() + (t.record_kind != 0 ? 10 * timeout_ns : timeout_ns);
      if (!SendWithFd(p.channel.get(), msg.get(), worker::ProbeHeaderBytes() + t.path.size(), -1)) {
        lose(p, absl::AbortedError("the worker indexing it could not be reached"), true);
      }
    }
    if (!any_alive) {
      // No worker starts: what is left cannot be indexed now.
      for (; next < targets.size(); ++next, ++done) {
        out[next].status = absl::UnavailableError(
            absl::StrCat("no worker could be started to index it: ", launch_error));
      }
      break;
    }
    std::vector<pollfd> fds;
    std::vector<size_t> of;
    int64_t now = MonotonicNs();
    int64_t wait_ns = 100'000'000;
    for (size_t k = 0; k < procs.size(); ++k) {
      if (procs[k].pid < 0) continue;
      fds.push_back(pollfd{procs[k].channel.get(), POLLIN, 0});
      of.push_back(k);
      if (procs[k].current >= 0) wait_ns = std::min(wait_ns, procs[k].deadline_ns - now);
    }
    const int r = ::poll(fds.data(), fds.size(),
                         static_cast<int>(std::max<int64_t>(wait_ns, 0) / 1'000'000 + 1));
    if (r < 0 && errno != EINTR) break;
    for (size_t i = 0; r > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Proc& p = procs[of[i]];
      for (;;) {  // every message waiting
        const ssize_t got = ::recv(p.channel.get(), buf.get(), kBufBytes, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got <= 0) {
          lose(p, absl::AbortedError("the worker indexing it died (a crash in its demuxer or "
                                     "decoder?)"),
               false);
          break;
        }
        uint32_t type;
        std::memcpy(&type, buf.get(), sizeof(type));
        bool bad = static_cast<size_t>(got) < sizeof(type);
        if (type == worker::kHello) continue;
        if (type == worker::kProbeResult && !bad && p.current >= 0 && !p.have_header &&
            static_cast<size_t>(got) == sizeof(worker::ProbeResultMsg)) {
          worker::ProbeResultMsg m;
          std::memcpy(&m, buf.get(), sizeof(m));
          m.reason[sizeof(m.reason) - 1] = '\0';
          m.warning[sizeof(m.warning) - 1] = '\0';
          const bool records = targets[static_cast<size_t>(p.current)].record_kind != 0;
          if (m.probe_id != static_cast<uint64_t>(p.current) || m.code > 16 ||
              (m.code == 0 && m.frames + m.keyframes > (records ? 4 * kMaxRecords : max_values))) {
            bad = true;
          } else if (m.code != 0) {
            ProbeOutcome o;
            o.status = absl::Status(static_cast<absl::StatusCode>(m.code), m.reason);
            finish(p, std::move(o));
            continue;
          } else {
            ProbeOutcome& o = p.outcome;
            o = ProbeOutcome();
            o.info = m.info;
            o.warning = m.warning;
            o.record_height = m.record_height;
            o.record_width = m.record_width;
            o.record_channels = m.record_channels;
            o.pts.reserve(m.frames);
            o.keyframes.reserve(m.keyframes);
            p.have_header = true;
            p.expected = m.frames + m.keyframes;
            p.values.clear();
            p.values.reserve(p.expected);
            // The split between pts and keyframes, kept in `pts`' capacity
            // meanwhile: frames first.
            o.pts.resize(m.frames);
            o.keyframes.resize(m.keyframes);
          }
        } else if (type == worker::kProbePts && !bad && p.have_header &&
                   static_cast<size_t>(got) >= offsetof(worker::ProbePtsMsg, values)) {
          worker::ProbePtsMsg* m = reinterpret_cast<worker::ProbePtsMsg*>(buf.get());
          uint32_t count;
          std::memcpy(&count, &m->count, sizeof(count));
          if (count > worker::kProbePtsPerMsg ||
              static_cast<size_t>(got) != offsetof(worker::ProbePtsMsg, values) + count * sizeof(int64_t) ||
              p.values.size() + count > p.expected) {
            bad = true;
          } else {
            const size_t at = p.values.size();
            p.values.resize(at + count);
            if (count != 0) std::memcpy(p.values.data() + at, buf.get() + offsetof(worker::ProbePtsMsg, values),
                        count * sizeof(int64_t));
          }
        } else {
          bad = true;
        }
        if (bad) {
          lose(p, absl::AbortedError("the worker indexing it answered out of protocol"), true);
          break;
        }
        if (p.have_header && p.values.size() == p.expected) {
          ProbeOutcome& o = p.outcome;
          const size_t frames = o.pts.size();
          std::copy(p.values.begin(), p.values.begin() + frames, o.pts.begin());
          std::copy(p.values.begin() + frames, p.values.end(), o.keyframes.begin());
          finish(p, std::move(o));
        }
      }
    }
    now = MonotonicNs();
    for (Proc& p : procs) {
      if (p.pid >= 0 && p.current >= 0 && now >= p.deadline_ns) {
        lose(p,
             absl::DeadlineExceededError(absl::StrCat(
                 "indexing it took over ",
                 (targets[static_cast<size_t>(p.current)].record_kind != 0 ? 10 : 1) *
                     options_.timeout_ms / 1000.0,
                 " s")),
             true);
      }
    }
  }
  for (Proc& p : procs) Stop(p, false);
  return out;
}

}  // namespace stoker
