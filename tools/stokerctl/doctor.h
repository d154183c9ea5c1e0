// `stokerctl doctor`: reads a running daemon twice, a few seconds apart, and
// says in plain words, per session, whether its trainer is data-bound, what
// bounds it, what the autotuner is doing and what would help.
//
// The figures, all over the window between the two reads:
//   stall share   the share of the window the trainer waited in Next for a
//                 batch (SessionStatus.client_wait_seconds): the time its
//                 GPU had nothing to do. A trainer that waits 30% of the time
//                 cannot keep its GPU busier than 70%.
//   stage         where a sample's time went in the workers (read, decode,
//                 augment: the means of the per-sample latencies); "the
//                 consumer" when the ring is full and the trainer does not
//                 wait (the trainer is the bound: nothing to fix here).
//   failure rate  failed samples over samples delivered.
//
// Verdicts, worst session first, and the exit code that goes with each:
//   0  kHealthy       no session waits more than 5% of the time (or none
//                     consumed anything in the window)
//   1  kPartly        some session waits 5-30% of the time
//   2  kDataBound     some session waits 30% of the time or more
// (3: the daemon cannot be read; stokerctl's own code for UNAVAILABLE.)
//
// Pure: Diagnose takes the two Status responses; stokerctl fetches them.

#ifndef STOKER_TOOLS_STOKERCTL_DOCTOR_H_
#define STOKER_TOOLS_STOKERCTL_DOCTOR_H_

#include <string>
#include <vector>

#include "stoker/v1/stoker.pb.h"

namespace stoker::ctl {

enum class Verdict { kHealthy = 0, kPartly = 1, kDataBound = 2 };

// "healthy", "partly data-bound", "data-bound".
const char* VerdictName(Verdict v);

struct SessionDiagnosis {
  std::string session_id;
  std::string client;
  uint32_t rank = 0;
  Verdict verdict = Verdict::kHealthy;
  bool idle = false;          // consumed nothing and waited for nothing
  double stall_share = 0;     // 0..1
  double images_per_second = 0;
  std::string bound;          // "read", "decode", "augment", "the consumer", "-"
  double read_ms = 0, decode_ms = 0, augment_ms = 0;  // per sample, in the window
  double failure_rate = 0;    // failed / (delivered + failed)
  std::vector<std::string> findings;  // plain sentences, most important first
  std::vector<std::string> advice;    // what would help
};

struct Diagnosis {
  Verdict verdict = Verdict::kHealthy;
  double window_seconds = 0;
  std::string workers;     // the pool in words: "auto, 2 of at most 2 (CPU budget 2.00 ...)"
  std::string autotuner;   // what it is doing, and its last decision
  std::vector<SessionDiagnosis> sessions;
  std::vector<std::string> daemon_findings;  // e.g. "no session attached"
};

// `before` and `after` are two Status responses of one daemon taken
// `window_seconds` apart (after is the later one).
Diagnosis Diagnose(const v1::StatusResponse& before, const v1::StatusResponse& after,
                   double window_seconds);

// For people: a few lines per session, wrapped to `width` columns.
std::string RenderDiagnosis(const Diagnosis& d, size_t width);
// For scripts: one JSON object (verdict, exit_code, sessions[...]).
std::string DiagnosisJson(const Diagnosis& d);

}  // namespace stoker::ctl

#endif  // STOKER_TOOLS_STOKERCTL_DOCTOR_H_
