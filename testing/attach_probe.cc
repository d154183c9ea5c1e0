// stoker-attach-probe: the C++ client's AttachOptions as a front end, for
// tests that compare what each front end sends (tests/python). Attaches with
// the given pipeline keywords, prints one JSON line
//   {"session_id": "...", "effective_pipeline": <SessionInfo::effective_pipeline_json>}
// to stdout, waits until stdin closes, then detaches. An Attach that fails
// prints the status to stderr and exits 1.
//
//   stoker-attach-probe --socket PATH --dataset PATH --batch-size N --pipeline-json JSON

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "stoker/client.h"

int main(int argc, char** argv) {
  CLI::App app{"stoker-attach-probe: attach with AttachOptions, hold until stdin closes"};
  std::string socket, pipeline_json;
  stoker::AttachOptions o;
  app.add_option("--socket", socket, "daemon socket")->required();
  app.add_option("--dataset", o.dataset, "dataset path under the data root")->required();
  app.add_option("--batch-size", o.batch_size);
  app.add_option("--pipeline-json", o.pipeline, "AttachOptions::pipeline: pipeline keywords");
  CLI11_PARSE(app, argc, argv);
  o.client_name = "stoker-attach-probe";

  auto client = stoker::Client::Connect(socket);
  if (!client.ok()) {
    std::fprintf(stderr, "stoker-attach-probe: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto session = (*client)->Attach(o);
  if (!session.ok()) {
    std::fprintf(stderr, "stoker-attach-probe: %s\n", session.status().ToString().c_str());
    return 1;
  }
  // Session ids are "<tag>-<number>": nothing to escape.
  std::printf("{\"session_id\": \"%s\", \"effective_pipeline\": %s}\n",
              (*session)->info().session_id.c_str(),
              (*session)->info().effective_pipeline_json.c_str());
  std::fflush(stdout);
  for (char buf[256]; std::fread(buf, 1, sizeof(buf), stdin) > 0;) {
  }
  const absl::Status st = (*session)->Detach();
  if (!st.ok()) {
    std::fprintf(stderr, "stoker-attach-probe: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
