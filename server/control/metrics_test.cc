// The Prometheus text from a made-up Status, and the HTTP server on a real
// loopback socket (port 0): what a scrape gets, 404 and 405.

#include "server/control/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/str_cat.h"

namespace stoker {
namespace {

v1::StatusResponse Example() {
  v1::StatusResponse st;
  st.set_version("0.1.0");
  st.set_state("serving");
  st.set_sessions_total(3);
  st.set_worker_restarts_total(2);
  st.mutable_autotune()->set_workers(4);
  st.mutable_autotune()->set_max_workers(6);
  st.mutable_autotune()->set_cpu_budget(7.5);
  auto* s = st.add_sessions();
  s->set_session_id("ab-1");
  s->set_client_name("train \"v2\"\nrun");
  s->set_rank(3);
  s->set_samples_produced(1000);
  s->set_samples_replaced(5);
  s->set_client_wait_seconds(1.25);
  s->set_bytes_read(123456789);
  (*s->mutable_failed_by_reason())["data_loss"] = 4;
  (*s->mutable_failed_by_reason())["worker_crash"] = 1;
  auto* wait = s->mutable_client_wait();
  wait->set_count(10);
  wait->set_mean_ms(2.0);
  for (uint64_t b : {0, 0, 3, 0, 7}) wait->add_buckets(b);
  return st;
}

TEST_CASE("metrics: decode nodes, one series per node") {
  v1::StatusResponse st = Example();
  CHECK(RenderMetrics(st).find("decode_node") == std::string::npos);  // none configured
  st.set_decode_nodes_open(true);
  auto* d = st.add_decode_nodes();
  d->set_address("10.0.0.7:7070");
  d->set_connected(3);
  d->set_samples_done(420);
  d->set_bytes_sent(9000);
  d->set_lost(2);
  d->set_stolen(1);
  const std::string m = RenderMetrics(st);
  CHECK(m.find("stoker_decode_node_stolen_total{node=\"10.0.0.7:7070\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("stoker_decode_nodes_open 1\n") != std::string::npos);
  CHECK(m.find("stoker_decode_node_samples_total{node=\"10.0.0.7:7070\"} 420\n") !=
        std::string::npos);
  CHECK(m.find("stoker_decode_node_connected{node=\"10.0.0.7:7070\"} 3\n") != std::string::npos);
  CHECK(m.find("stoker_decode_node_sent_bytes_total{node=\"10.0.0.7:7070\"} 9000\n") !=
        std::string::npos);
  CHECK(m.find("stoker_decode_node_lost_total{node=\"10.0.0.7:7070\"} 2\n") != std::string::npos);
  CHECK(m.find("# TYPE stoker_decode_node_lost_total counter\n") != std::string::npos);
}

TEST_CASE("metrics: the text format of a status") {
  const std::string m = RenderMetrics(Example());
  const std::string who = R"(session="ab-1",client="train \"v2\"\nrun",rank="3")";
  CHECK(m.find("# TYPE stoker_samples_delivered_total counter\n") != std::string::npos);
  CHECK(m.find("stoker_samples_delivered_total{" + who + "} 1000\n") != std::string::npos);
  CHECK(m.find("stoker_samples_replaced_total{" + who + "} 5\n") != std::string::npos);
  CHECK(m.find("stoker_samples_failed_total{" + who + ",reason=\"data_loss\"} 4\n") !=
        std::string::npos);
  CHECK(m.find("stoker_samples_failed_total{" + who + ",reason=\"worker_crash\"} 1\n") !=
        std::string::npos);
  CHECK(m.find("stoker_bytes_read_total{" + who + "} 123456789\n") != std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_total{" + who + "} 1.25\n") != std::string::npos);
  CHECK(m.find("stoker_workers 4\n") != std::string::npos);
  CHECK(m.find("stoker_workers_max 6\n") != std::string::npos);
  CHECK(m.find("stoker_cpu_budget 7.5\n") != std::string::npos);
  CHECK(m.find("stoker_worker_restarts_total 2\n") != std::string::npos);
  CHECK(m.find("stoker_info{version=\"0.1.0\",state=\"serving\"} 1\n") != std::string::npos);
  CHECK(m.find("prepared_cache") == std::string::npos);  // off
  v1::StatusResponse with_cache = Example();
  with_cache.mutable_prepared_cache()->set_entries(8);
  with_cache.mutable_prepared_cache()->set_volume_hits(24);
  with_cache.mutable_prepared_cache()->set_image_writes(3);
  const std::string pm = RenderMetrics(with_cache);
  CHECK(pm.find("# TYPE stoker_prepared_cache_hits_total counter\n") != std::string::npos);
  CHECK(pm.find("stoker_prepared_cache_entries 8\n") != std::string::npos);
  CHECK(pm.find("stoker_prepared_cache_hits_total{kind=\"volume\"} 24\n") != std::string::npos);
  CHECK(pm.find("stoker_prepared_cache_writes_total{kind=\"image\"} 3\n") != std::string::npos);
  // The histogram: cumulative, le in seconds (2^(b+1) us), +Inf = count.
  CHECK(m.find("# TYPE stoker_trainer_wait_seconds histogram\n") != std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_bucket{" + who + ",le=\"2e-06\"} 0\n") !=
        std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_bucket{" + who + ",le=\"8e-06\"} 3\n") !=
        std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_bucket{" + who + ",le=\"3.2e-05\"} 10\n") !=
        std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_bucket{" + who + ",le=\"+Inf\"} 10\n") !=
        std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_sum{" + who + "} 0.02\n") != std::string::npos);
  CHECK(m.find("stoker_trainer_wait_seconds_count{" + who + "} 10\n") != std::string::npos);
  CHECK(m.find("stoker_stage_seconds_count{" + who + ",stage=\"decode\"} 0\n") !=
        std::string::npos);
  // Every line is a comment or "name{labels} value".
  size_t start = 0;
  while (start < m.size()) {
    const size_t end = m.find('\n', start);
    REQUIRE(end != std::string::npos);
    const std::string line = m.substr(start, end - start);
    CHECK((line.rfind("# HELP stoker_", 0) == 0 || line.rfind("# TYPE stoker_", 0) == 0 ||
           line.rfind("stoker_", 0) == 0));
    start = end + 1;
  }
}

// One HTTP/1.0 request to 127.0.0.1:port; the whole answer.
std::string Request(uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  REQUIRE(::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST_CASE("metrics: served over HTTP") {
  int scrapes = 0;
  auto server = MetricsServer::Start("127.0.0.1:0", [&] {
    ++scrapes;
    return RenderMetrics(Example());
  });
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();
  REQUIRE(port != 0);
  const std::string ok = Request(port, "GET /metrics HTTP/1.0\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("stoker_samples_delivered_total{") != std::string::npos);
  CHECK(scrapes == 1);
  CHECK(Request(port, "GET / HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(Request(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
            .rfind("HTTP/1.1 405", 0) == 0);
  CHECK(scrapes == 1);
}

TEST_CASE("metrics: bad addresses are refused with the fix") {
  auto bad = MetricsServer::Start("9464", [] { return std::string(); });
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("HOST:PORT") != std::string_view::npos);
  CHECK(MetricsServer::Start("example.com:9464", [] { return std::string(); }).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // A port in use.
  auto first = MetricsServer::Start("127.0.0.1:0", [] { return std::string(); });
  REQUIRE(first.ok());
  auto second = MetricsServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()),
                                     [] { return std::string(); });
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace stoker
