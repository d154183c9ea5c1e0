// OpKindName: each op's name, torchvision's, from op_list.h, for the
// workers' messages and the op table (pipeline/op_table.cc). Its own library,
// stoker_op_names, so that the op table (linked by the client) needs no
// image code.

#include "server/image/pipeline_params.h"

namespace stoker::image {

const char* OpKindName(OpKind kind) {
  switch (kind) {
#define STOKER_OP_NAME(k, number, name, ...) \
  case OpKind::k:                             \
    return name;
    STOKER_OP_LIST(STOKER_OP_NAME)
#undef STOKER_OP_NAME
    case OpKind::kNone:
      break;
  }
  return "unknown";
}

}  // namespace stoker::image
