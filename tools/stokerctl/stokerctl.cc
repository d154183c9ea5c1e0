// stokerctl: look inside a running stokerd, and feed from it.
//
//   stokerctl consume --socket PATH --dataset PATH [--pipeline train|eval|decode]
//                     [--ops JSON] [--size N [N]] [--dtype uint8|float32|float16]
//                     [--layout nhwc|nchw] [--apply-exif-orientation] [--exact-decode]
//                     [--batch-size N] [--epochs N] [--seed N]
//                     [--allow-empty] [--skip-unsupported-formats] [--json] [--hold]
//   stokerctl status  --socket PATH|HOST:PORT [--json] [--failures]
//   stokerctl top     --socket PATH|HOST:PORT [--interval-ms N] [--iterations N]
//   stokerctl health  --socket PATH|HOST:PORT   (a decode node: its --status-addr)
//   stokerctl doctor  --socket PATH|HOST:PORT [--window-s S] [--json]

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "stoker/client.h"
#include "stoker/v1/stoker.pb.h"
#include "tools/stokerctl/doctor.h"
#include "tools/stokerctl/status_view.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "stokerctl: %s\n", s.ToString().c_str());
  return s.code() == absl::StatusCode::kUnavailable ? 3 : 1;
}

struct ConsumeArgs {
  std::string socket;
  std::string dataset;
  // The pipeline keywords (pipeline/pipeline_spec.h), each passed on
  // only when its flag is given: the defaults and checks are the module's.
  std::optional<std::string> pipeline;
  std::optional<std::string> ops;  // JSON
  std::vector<uint32_t> size;
  std::optional<std::string> dtype;
  std::optional<std::string> layout;
  bool apply_exif_orientation = false;
  bool exact_decode = false;
  uint32_t batch_size = 0;  // the contract's default (AttachOptions::batch_size)
  uint32_t epochs = 1;
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::string policy = "skip";
  bool no_shuffle = false;
  bool json = false;
  bool list_indices = false;
  bool allow_empty = false;
  bool skip_unsupported_formats = false;
  bool hold = false;
};

// The flags' pipeline keywords as one JSON object.
absl::StatusOr<std::string> PipelineKeywords(const ConsumeArgs& a) {
  google::protobuf::Struct kw;
  auto& f = *kw.mutable_fields();
  if (a.pipeline) f["pipeline"].set_string_value(*a.pipeline);
  if (a.ops) {
    auto st = google::protobuf::util::JsonStringToMessage(*a.ops, &f["ops"]);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ops is not JSON: ", st.message().ToString()));
    }
  }
  if (!a.size.empty()) {
    auto* list = f["size"].mutable_list_value();
    for (uint32_t v : a.size) list->add_values()->set_number_value(v);
  }
  if (a.dtype) f["dtype"].set_string_value(*a.dtype);
  if (a.layout) f["layout"].set_string_value(*a.layout);
  if (a.exact_decode) f["exact_decode"].set_bool_value(true);
  if (a.apply_exif_orientation) f["apply_exif_orientation"].set_bool_value(true);
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(kw, &json);
  return json;
}

// The line `consume --hold` prints once attached (and stoker-attach-probe).
void PrintAttached(const stoker::SessionInfo& info) {
  // Session ids are "<tag>-<number>": nothing to escape.
  std::printf("{\"session_id\": \"%s\", \"effective_pipeline\": %s}\n", info.session_id.c_str(),
              info.effective_pipeline_json.c_str());
  std::fflush(stdout);
}

int Consume(const ConsumeArgs& a) {
  auto client = stoker::Client::Connect(a.socket);
  if (!client.ok()) return Fail(client.status());
  stoker::AttachOptions o;
  o.dataset = a.dataset;
  o.batch_size = a.batch_size;
  o.epochs = a.epochs;
  o.seed = a.seed;
  o.rank = a.rank;
  o.world_size = a.world_size;
  o.shuffle = !a.no_shuffle;
  o.client_name = "stokerctl consume";
  auto keywords = PipelineKeywords(a);
  if (!keywords.ok()) return Fail(keywords.status());
  o.pipeline = *keywords;
  o.allow_empty = a.allow_empty;
  o.skip_unsupported_formats = a.skip_unsupported_formats;
  o.failure_policy = a.policy == "error" ? stoker::FailurePolicy::kError
                                         : stoker::FailurePolicy::kSkip;
  auto session = (*client)->Attach(o);
  if (!session.ok()) return Fail(session.status());
  if (a.hold) {
    PrintAttached((*session)->info());
    for (char buf[256]; std::fread(buf, 1, sizeof(buf), stdin) > 0;) {
    }
    absl::Status st = (*session)->Detach();
    return st.ok() ? 0 : Fail(st);
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t batches = 0, samples = 0, failed = 0, replaced = 0, errors = 0;
  std::string first_error;
  std::vector<int64_t> indices;
  for (;;) {
    auto b = (*session)->Next();
    if (absl::IsOutOfRange(b.status())) break;
    if (absl::IsAborted(b.status())) {
      ++errors;
      if (first_error.empty()) first_error = std::string(b.status().message());
      continue;
    }
    if (!b.ok()) return Fail(b.status());
    ++batches;
    samples += b->size();
    for (uint32_t i = 0; i < b->size(); ++i) {
      if (b->status(i) == stoker::SampleStatus::kFailed) ++failed;
      if (b->status(i) == stoker::SampleStatus::kReplaced) ++replaced;
      if (a.list_indices) indices.push_back(b->indices()[i]);
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ips = secs > 0 ? samples / secs : 0;
  if (a.json) {
    std::string idx;
    if (a.list_indices) {
      idx = ",\"indices\":[";
      for (size_t i = 0; i < indices.size(); ++i) {
        idx += (i ? "," : "") + std::to_string(indices[i]);
      }
      idx += "]";
    }
    std::printf(
        "{\"images_per_s\":%.1f,\"seconds\":%.3f,\"batches\":%lu,\"samples\":%lu,"
        "\"failed\":%lu,\"replaced\":%lu,\"failed_batches\":%lu,\"batches_per_epoch\":%lu%s}\n",
        ips, secs, batches, samples, failed, replaced, errors,
        (*session)->info().batches_per_epoch, idx.c_str());
  } else {
    std::printf("%lu batches, %lu samples in %.2f s: %.1f images/s (%lu failed, %lu replaced)\n",
                batches, samples, secs, ips, failed, replaced);
    if (errors) std::printf("%lu failed batches; first: %s\n", errors, first_error.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stokerctl: inspect and exercise a running stokerd"};
  app.require_subcommand(1);
  std::string socket = "/run/stoker/stoker.sock";
  if (const char* env = std::getenv("STOKER_SOCKET")) socket = env;

  ConsumeArgs ca;
  ca.socket = socket;
  auto* consume = app.add_subcommand("consume", "attach, consume every batch, print throughput");
  consume->add_option("--socket", ca.socket, "daemon socket (env STOKER_SOCKET)");
  consume->add_option("--dataset", ca.dataset, "dataset path under the data root")->required();
  consume->add_option("--pipeline", ca.pipeline, "the preset: train, eval or decode");
  consume->add_option("--ops", ca.ops,
                      "an op list as JSON, e.g. '[{\"CenterCrop\": {\"size\": 32}}]'");
  consume->add_option("--batch-size", ca.batch_size,
                      absl::StrCat("samples per batch (default ",
                                   stoker::v1::ATTACH_DEFAULT_BATCH_SIZE, ")"));
  consume->add_option("--epochs", ca.epochs);
  consume->add_option("--seed", ca.seed);
  consume->add_option("--rank", ca.rank);
  consume->add_option("--world-size", ca.world_size);
  consume->add_option("--size", ca.size, "the output size: N, or HEIGHT WIDTH")->expected(1, 2);
  consume->add_option("--dtype", ca.dtype, "uint8, float32 or float16");
  consume->add_option("--layout", ca.layout, "nhwc or nchw");
  consume->add_option("--failure-policy", ca.policy, "skip or error");
  consume->add_flag("--no-shuffle", ca.no_shuffle);
  consume->add_flag("--json", ca.json, "one JSON object");
  consume->add_flag("--list-indices", ca.list_indices, "with --json: every delivered index");
  consume->add_flag("--allow-empty", ca.allow_empty, "ImageFolder: allow classes with no image");
  consume->add_flag("--skip-unsupported-formats", ca.skip_unsupported_formats,
                    "ignored (every IMG_EXTENSIONS format is read)");
  consume->add_flag("--apply-exif-orientation", ca.apply_exif_orientation,
                    "rotate images as their EXIF orientation says");
  consume->add_flag("--exact-decode", ca.exact_decode, "no DCT-domain downscaling");
  consume->add_flag("--hold", ca.hold,
                    "attach, print {\"session_id\", \"effective_pipeline\"} as one JSON line, "
                    "consume nothing, detach when stdin closes");

  std::string status_socket = socket;
  bool status_json = false, failures = false;
  auto* status = app.add_subcommand("status", "the daemon's status");
  status->add_option("--socket", status_socket, "daemon socket or HOST:PORT");
  status->add_flag("--json", status_json, "the raw status as JSON");
  status->add_flag("--failures", failures,
                   "include failed samples: each session's, and each dataset's (ended sessions "
                   "included)");

  std::string top_socket = socket;
  uint32_t top_interval_ms = 1000, top_iterations = 0;
  auto* top = app.add_subcommand("top", "a live view of the daemon, refreshed like top");
  top->add_option("--socket", top_socket, "daemon socket or HOST:PORT");
  top->add_option("--interval-ms", top_interval_ms, "refresh period");
  top->add_option("--iterations", top_iterations, "stop after N refreshes (0: never)");

  std::string health_socket = socket;
  auto* health = app.add_subcommand("health", "exit 0 when the daemon is SERVING");
  health->add_option("--socket", health_socket, "daemon socket or HOST:PORT");

  std::string doctor_socket = socket;
  double doctor_window_s = 3;
  bool doctor_json = false;
  auto* doctor = app.add_subcommand(
      "doctor",
      "read the daemon twice and say, per session, whether the trainer is data-bound, what "
      "bounds it and what would help; exit 0 healthy, 1 partly data-bound, 2 data-bound, 3 "
      "unreachable");
  doctor->add_option("--socket", doctor_socket, "daemon socket or HOST:PORT");
  doctor->add_option("--window-s", doctor_window_s, "seconds between the two reads")
      ->check(CLI::Range(0.2, 600.0))
      ->capture_default_str();
  doctor->add_flag("--json", doctor_json, "one JSON object, for scripts");

  CLI11_PARSE(app, argc, argv);

  if (consume->parsed()) return Consume(ca);
  if (doctor->parsed()) {
    stoker::v1::StatusResponse before, after;
    // Exit 3 whatever the error: 1 and 2 are verdicts here.
    absl::Status st = stoker::ctl::FetchStatus(doctor_socket, false, false, &before);
    if (!st.ok()) return Fail(st), 3;
    std::this_thread::sleep_for(std::chrono::duration<double>(doctor_window_s));
    st = stoker::ctl::FetchStatus(doctor_socket, false, false, &after);
    if (!st.ok()) return Fail(st), 3;
    const stoker::ctl::Diagnosis d = stoker::ctl::Diagnose(before, after, doctor_window_s);
    if (doctor_json) {
      std::printf("%s\n", stoker::ctl::DiagnosisJson(d).c_str());
    } else {
      std::fputs(stoker::ctl::RenderDiagnosis(d, stoker::ctl::TerminalWidth()).c_str(), stdout);
    }
    return static_cast<int>(d.verdict);
  }
  if (status->parsed()) {
    stoker::v1::StatusResponse s;
    // Text: each session's failures always; --failures adds the daemon's
    // memory of them per dataset (ended sessions' too).
    absl::Status st =
        stoker::ctl::FetchStatus(status_socket, failures || !status_json, failures, &s);
    if (!st.ok()) return Fail(st);
    if (status_json) {
      std::string json;
      google::protobuf::util::JsonPrintOptions jo;
      jo.preserve_proto_field_names = true;
      jo.always_print_primitive_fields = true;
      (void)google::protobuf::util::MessageToJsonString(s, &json, jo);
      std::printf("%s\n", json.c_str());
    } else {
      std::fputs(stoker::ctl::RenderStatus(s, stoker::ctl::TerminalWidth()).c_str(), stdout);
    }
    return 0;
  }
  if (top->parsed()) {
    absl::Status st = stoker::ctl::RunTop(top_socket, top_interval_ms, top_iterations);
    return st.ok() ? 0 : Fail(st);
  }
  if (health->parsed()) {
    auto c = stoker::Client::Connect(health_socket);
    if (!c.ok()) return Fail(c.status());
    absl::Status st = (*c)->Health();
    if (st.code() == absl::StatusCode::kNotFound) {
      // A decode node (stokerd --decode-node on its --status-addr) serves
      // no sessions: its own service is what is healthy or not.
      if ((*c)->Health("stoker.v1.DecodeNode").ok()) {
        std::printf("SERVING (decode node)\n");
        return 0;
      }
    }
    if (!st.ok()) return Fail(st);
    std::printf("SERVING\n");
    return 0;
  }
  return 0;
}
