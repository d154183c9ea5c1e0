#include "server/engine/dataset_totals.h"

#include <catch2/catch.hpp>

namespace stoker {
namespace {

v1::SessionStatus Session(const std::string& dataset, uint64_t samples) {
  v1::SessionStatus s;
  s.set_dataset(dataset);
  s.set_samples_produced(samples);
  s.set_samples_replaced(samples / 10);
  s.set_samples_failed(samples / 5);
  s.set_batches_produced(samples / 4);
  s.set_bytes_read(samples * 1000);
  s.mutable_decode()->set_count(samples);
  s.mutable_decode()->set_mean_ms(2.0);
  (*s.mutable_failed_by_reason())["data_loss"] = samples / 5;
  return s;
}

std::map<std::string, v1::DatasetTotals> Totals(const DatasetTotals& t,
                                                const std::vector<v1::SessionStatus>& live) {
  google::protobuf::RepeatedPtrField<v1::SessionStatus> l(live.begin(), live.end());
  google::protobuf::RepeatedPtrField<v1::DatasetTotals> out;
  t.Export(l, &out);
  std::map<std::string, v1::DatasetTotals> m;
  for (const auto& x : out) m[x.dataset()] = x;
  return m;
}

TEST_CASE("dataset totals add the ended sessions and the attached ones, and only grow") {
  DatasetTotals t;
  CHECK(Totals(t, {}).empty());
  // One session of "a" attached, 40 samples in.
  auto m = Totals(t, {Session("a", 40)});
  CHECK(m["a"].samples_delivered() == 40);
  CHECK(m["a"].sessions() == 1);
  // It ends with 100 samples; another starts and has done 20.
  t.Retire(Session("a", 100));
  m = Totals(t, {Session("a", 20), Session("b", 8)});
  CHECK(m["a"].samples_delivered() == 120);
  CHECK(m["a"].samples_replaced() == 12);
  CHECK(m["a"].samples_failed() == 24);
  CHECK(m["a"].failed_by_reason().at("data_loss") == 24);
  CHECK(m["a"].batches_delivered() == 30);
  CHECK(m["a"].bytes_read() == 120000);
  CHECK(m["a"].decode_seconds() == Approx(0.24));
  CHECK(m["a"].sessions() == 2);
  CHECK(m["b"].samples_delivered() == 8);
  // Every session gone: the totals stay.
  t.Retire(Session("a", 20));
  t.Retire(Session("b", 8));
  m = Totals(t, {});
  CHECK(m["a"].samples_delivered() == 120);
  CHECK(m["b"].samples_delivered() == 8);
}

TEST_CASE("dataset totals name at most kMaxDatasets datasets, the rest under one label") {
  DatasetTotals t;
  for (size_t i = 0; i < DatasetTotals::kMaxDatasets + 10; ++i) {
    t.Retire(Session("ds" + std::to_string(i), 1));
  }
  auto m = Totals(t, {Session("new", 5), Session("ds0", 1)});
  CHECK(m.size() == DatasetTotals::kMaxDatasets + 1);
  CHECK(m[DatasetTotals::kOtherDatasets].samples_delivered() == 10 + 5);
  CHECK(m["ds0"].samples_delivered() == 2);
}

}  // namespace
}  // namespace stoker
