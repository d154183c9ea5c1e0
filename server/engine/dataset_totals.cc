#include "server/engine/dataset_totals.h"

namespace stoker {

void AddSession(const v1::SessionStatus& s, v1::DatasetTotals* t) {
  t->set_sessions(t->sessions() + 1);
  t->set_samples_delivered(t->samples_delivered() + s.samples_produced());
  t->set_samples_replaced(t->samples_replaced() + s.samples_replaced());
  t->set_samples_failed(t->samples_failed() + s.samples_failed());
  t->set_batches_delivered(t->batches_delivered() + s.batches_produced());
  t->set_bytes_read(t->bytes_read() + s.bytes_read());
  t->set_decode_seconds(t->decode_seconds() + s.decode().count() * s.decode().mean_ms() / 1e3);
  auto& by = *t->mutable_failed_by_reason();
  for (const auto& [reason, n] : s.failed_by_reason()) by[reason] += n;
}

std::string DatasetTotals::KeyFor(const std::string& dataset) const {
  if (retired_.count(dataset) != 0 || retired_.size() < kMaxDatasets) return dataset;
  return kOtherDatasets;
}

void DatasetTotals::Retire(const v1::SessionStatus& s) {
  const std::string key = KeyFor(s.dataset());
  v1::DatasetTotals& t = retired_[key];
  t.set_dataset(key);
  AddSession(s, &t);
}

void DatasetTotals::Export(const google::protobuf::RepeatedPtrField<v1::SessionStatus>& live,
                           google::protobuf::RepeatedPtrField<v1::DatasetTotals>* out) const {
  std::map<std::string, v1::DatasetTotals> all = retired_;
  for (const v1::SessionStatus& s : live) {
    // A live session of a dataset past the bound is counted under the
    // bound's name too (it stays there once it ends).
    const std::string key = KeyFor(s.dataset());
    v1::DatasetTotals& t = all[key];
    t.set_dataset(key);
    AddSession(s, &t);
  }
  for (auto& [name, t] : all) *out->Add() = std::move(t);
}

}  // namespace stoker
