// stoker-relay: see relay.h. Started by stokerd's remote pool with the
// channel as fd 3 and the data root as fd 4; the flags are the launcher's.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/remote/relay.h"
#include "server/worker/worker_protocol.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  stoker::remote::RelayOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "stoker-relay: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--node") {
      o.node = value();
    } else if (a == "--id") {
      o.id = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    } else if (a == "--parent") {
      value();  // the channel closing tells the relay its daemon is gone
    } else if (a == "--tls-name") {
      o.tls_name = value();
    } else if (a == "--tls-ca") {
      o.tls_ca = value();
    } else if (a == "--tls-cert") {
      o.tls_cert = value();
    } else if (a == "--tls-key") {
      o.tls_key = value();
    } else if (a == "--token-file") {
      o.token_file = value();
    } else if (a == "--timeout-ms") {
      o.timeout_ms = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    } else if (a == "--shared-root") {
      o.shared_root = true;
    } else if (a == "--sandbox" || a == "--no-sandbox") {
      // a relay needs the network: never under the workers' filter
    } else {
      std::fprintf(stderr, "stoker-relay: unknown flag %s (it is started by stokerd)\n", argv[i]);
      return 2;
    }
  }
  if (o.node.empty()) {
    std::fprintf(stderr, "stoker-relay: --node is required (it is started by stokerd)\n");
    return 2;
  }
  return stoker::remote::RunRelay(o, stoker::worker::kChannelFd, stoker::worker::kDataRootFd);
}
