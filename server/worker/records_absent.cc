// The images-only worker's record indexing (stoker-worker-images carries
// neither libhdf5 nor liblmdb): record files are refused, saying why.

#include "server/dataset/records.h"

namespace stoker {

absl::StatusOr<RecordIndex> IndexRecordFile(int, const RecordTarget&) {
  return absl::UnimplementedError(
      "this worker (stoker-worker-images) was built without HDF5 and LMDB: run stoker-worker");
}

}  // namespace stoker
