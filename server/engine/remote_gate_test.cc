#include "server/engine/remote_gate.h"

#include <catch2/catch.hpp>

namespace stoker {
namespace {

TEST_CASE("the remote gate opens on a stall and stays open while the local workers are saturated") {
  RemoteGate g(false);
  CHECK_FALSE(g.open());
  CHECK_FALSE(g.Observe(0.0, 1.0));   // busy but nobody waits: local is enough
  CHECK_FALSE(g.Observe(0.01, 1.0));  // under the stall share
  CHECK(g.Observe(0.30, 1.0));        // the trainer waited 30% of the tick
  CHECK(g.reason().find("waited 30%") != std::string::npos);
  // The remote workers carry the load: no waiting, the local ones saturated.
  for (int i = 0; i < 20; ++i) CHECK(g.Observe(0.0, 0.99));
}

TEST_CASE("the remote gate closes after calm ticks with room on the local workers") {
  RemoteGate g(false);
  REQUIRE(g.Observe(0.5, 1.0));
  CHECK(g.Observe(0.0, 0.5));
  CHECK(g.Observe(0.0, 0.5));
  CHECK(g.Observe(0.0, 0.9));  // saturated again: the count starts over
  CHECK(g.Observe(0.0, 0.5));
  CHECK(g.Observe(0.0, 0.5));
  CHECK_FALSE(g.Observe(0.0, 0.5));  // third calm tick in a row
  CHECK(g.reason().find("closed") == 0);
  CHECK(g.Observe(0.1, 0.5));  // a stall opens it again at once
}

TEST_CASE("the remote gate stays open with decode-when always") {
  RemoteGate g(true);
  CHECK(g.open());
  for (int i = 0; i < 10; ++i) CHECK(g.Observe(0.0, 0.0));
}

}  // namespace
}  // namespace stoker
