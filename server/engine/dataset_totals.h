// Daemon-wide counters per dataset that only grow (stokerd's /metrics
// stoker_dataset_*_total and Status.dataset_totals): what every session of
// a dataset delivered, ended sessions included, so that a day of short jobs
// can be rated (per-session series vanish when their session ends).
//
// A total is what the ended sessions of the dataset left (Retire, when a
// session ends) plus what its attached ones have done so far: session
// counters only grow, so the sum only grows. The first kMaxDatasets
// datasets are named; later ones are counted under kOtherDatasets, so the
// label's values stay bounded.
//
// Thread safety: none; the engine calls it under its lock.

#ifndef STOKER_SERVER_ENGINE_DATASET_TOTALS_H_
#define STOKER_SERVER_ENGINE_DATASET_TOTALS_H_

#include <cstddef>
#include <map>
#include <string>

#include "google/protobuf/repeated_ptr_field.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker {

class DatasetTotals {
 public:
  static constexpr size_t kMaxDatasets = 64;
  static constexpr char kOtherDatasets[] = "(other datasets)";

  // Adds an ended session's counters (its final SessionStatus).
  void Retire(const v1::SessionStatus& s);

  // The totals per dataset: the retired counters plus those of `live` (the
  // attached sessions' statuses), the datasets in name order, into `out`.
  void Export(const google::protobuf::RepeatedPtrField<v1::SessionStatus>& live,
              google::protobuf::RepeatedPtrField<v1::DatasetTotals>* out) const;

 private:
  // The name a dataset is counted under (kOtherDatasets past the bound).
  std::string KeyFor(const std::string& dataset) const;

  std::map<std::string, v1::DatasetTotals> retired_;
};

// Adds the counters of session `s` to `t` (its dataset is not set).
void AddSession(const v1::SessionStatus& s, v1::DatasetTotals* t);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_DATASET_TOTALS_H_
