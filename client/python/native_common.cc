#include "native_common.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeline/op_table.h"  // the ops, one row each
#include "pipeline/pipeline_spec.h"  // the pipeline keywords' one definition
#include "pipeline/sample_fields.h"  // field dtype names
#include "server/control/daemon_flags.h"  // stokerd's flags, for the private daemon
#include "stoker/v1/stoker.pb.h"  // the Attach defaults

namespace stoker::native {

Exceptions g_exc;

PyObject* ExceptionFor(const absl::Status& s, Where where) {
  if (where == Where::kDevice && s.code() == absl::StatusCode::kFailedPrecondition) {
    return g_exc.cuda_unavailable;  // built without CUDA, no driver, no GPU
  }
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return g_exc.daemon_unavailable;
    case absl::StatusCode::kDeadlineExceeded:
      return g_exc.timeout;
    case absl::StatusCode::kAborted:
      return where == Where::kNext ? g_exc.sample_error : g_exc.stoker_error;
    case absl::StatusCode::kFailedPrecondition:
      if (where == Where::kNext) return g_exc.ring_exhausted;
      if (where == Where::kAttach) return g_exc.invalid_request;
      return g_exc.stoker_error;
    case absl::StatusCode::kOutOfRange:
      return where == Where::kNext ? g_exc.end_of_data : g_exc.invalid_request;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kAlreadyExists:
      return g_exc.invalid_request;
    case absl::StatusCode::kResourceExhausted:
      return g_exc.resource_exhausted;
    case absl::StatusCode::kDataLoss:
      return g_exc.data_loss;
    default:
      return g_exc.stoker_error;
  }
}

// Sets the Python error for `s` (with `.code`) and throws so pybind11 lets
// it propagate. Needs the GIL.
[[noreturn]] void Raise(PyObject* type, const std::string& message, const std::string& code) {
  // A message may quote a file name that is not UTF-8: its bytes as \xNN.
  py::object text = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
      message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace"));
  if (!text) throw py::error_already_set();
  py::object inst =
      py::reinterpret_steal<py::object>(PyObject_CallFunctionObjArgs(type, text.ptr(), nullptr));
  if (!inst) throw py::error_already_set();
  py::setattr(inst, "code", py::str(code));
  PyErr_SetObject(type, inst.ptr());
  throw py::error_already_set();
}

[[noreturn]] void RaiseStatus(const absl::Status& s, Where where) {
  Raise(ExceptionFor(s, where), std::string(s.message()), absl::StatusCodeToString(s.code()));
}

[[noreturn]] void RaiseInvalid(const std::string& message) {
  Raise(g_exc.invalid_request, message, "INVALID_ARGUMENT");
}

// ---------------------------------------------------------------------------
// Option parsing for attach(**options). Strict: unknown keys and values out
// of range are InvalidRequestError, so a typo is not silently ignored.

uint64_t ToUint(py::handle v, const char* key, uint64_t max) {
  if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr())) {
    RaiseInvalid(std::string(key) + " must be an int, not " +
                 std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  }
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || x < 0 || static_cast<unsigned long long>(x) > max) {
    RaiseInvalid(std::string(key) + " must be within 0.." + std::to_string(max) + ", got " +
                 std::string(py::str(v)));
  }
  return static_cast<uint64_t>(x);
}

uint32_t ToU32(py::handle v, const char* key) {
  return static_cast<uint32_t>(ToUint(v, key, std::numeric_limits<uint32_t>::max()));
}

float ToFloat(py::handle v, const char* key) {
  if (PyBool_Check(v.ptr()) || !(PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr()))) {
    RaiseInvalid(std::string(key) + " must be a number");
  }
  return static_cast<float>(PyFloat_AsDouble(v.ptr()));
}

bool ToBool(py::handle v) { return PyObject_IsTrue(v.ptr()) == 1; }

std::string ToLowerStr(py::handle v, const char* key) {
  if (!PyUnicode_Check(v.ptr())) RaiseInvalid(std::string(key) + " must be a str");
  std::string s = py::cast<std::string>(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}


std::vector<float> ToTriple(py::handle v, const char* key) {
  if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || PySequence_Size(v.ptr()) != 3) {
    RaiseInvalid(std::string(key) + " must have 3 values (RGB)");
  }
  auto seq = py::reinterpret_borrow<py::sequence>(v);
  return {ToFloat(seq[0], key), ToFloat(seq[1], key), ToFloat(seq[2], key)};
}

// A layout name ("nchw", "nhwc"), by the pipeline contract's one table.
Layout ToLayout(py::handle v) {
  const std::string name = ToLowerStr(v, "layout");
  const uint32_t l = pipeline::LayoutFromName(name);
  if (l == 0) {
    RaiseInvalid("unknown layout '" + name + "': use " +
                 std::string(pipeline::LayoutName(static_cast<uint32_t>(Layout::kNHWC))) + " or " +
                 std::string(pipeline::LayoutName(static_cast<uint32_t>(Layout::kNCHW))));
  }
  return static_cast<Layout>(l);  // client.h's values are the ring's
}

// A file-system name given as str (encoded as os.fsencode does: surrogates
// back to their bytes) or bytes.
std::string FsName(py::handle v, const std::string& what) {
  if (PyBytes_Check(v.ptr())) return py::cast<std::string>(v);
  if (!PyUnicode_Check(v.ptr())) RaiseInvalid(what + " must be a str or bytes (a path)");
  py::object b = py::reinterpret_steal<py::object>(PyUnicode_EncodeFSDefault(v.ptr()));
  if (!b) throw py::error_already_set();
  return py::cast<std::string>(b);
}

AttachOptions ParseAttach(const std::string& dataset, const py::kwargs& kw) {
  AttachOptions o;
  o.dataset = dataset;
  for (auto item : kw) {
    const std::string key = py::cast<std::string>(item.first);
    py::handle v = item.second;
    const char* k = key.c_str();
    if (v.is_none()) continue;  // None: the default
    if (key == "format") {
      o.format = Choose<DatasetFormat>(v, k,
                                       {{"auto", DatasetFormat::kAuto},
                                        {"image_folder", DatasetFormat::kImageFolder},
                                        {"imagefolder", DatasetFormat::kImageFolder},
                                        {"manifest", DatasetFormat::kManifest},
                                        {"webdataset", DatasetFormat::kWebDataset},
                                        {"coco", DatasetFormat::kCoco},
                                        {"paired_folders", DatasetFormat::kPairedFolders},
                                        {"decathlon", DatasetFormat::kDecathlon},
                                        {"hdf5", DatasetFormat::kHdf5},
                                        {"lmdb", DatasetFormat::kLmdb},
                                        {"volume_folder", DatasetFormat::kVolumeFolder}});
    } else if (key == "annotations") {
      o.annotations = FsName(v, "annotations (a COCO JSON path)");
    } else if (key == "masks" || key == "image_suffix" || key == "mask_suffix") {
      (key == "masks" ? o.masks : key == "image_suffix" ? o.image_suffix : o.mask_suffix) =
          FsName(v, key);
    } else if (key == "record_images" || key == "record_labels_key") {
      if (!PyUnicode_Check(v.ptr())) RaiseInvalid(key + " must be a str");
      (key == "record_images" ? o.record_images : o.record_labels_key) = py::cast<std::string>(v);
    } else if (key == "record_shape") {
      if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr())) {
        RaiseInvalid("record_shape must be (height, width) or (height, width, channels)");
      }
      for (auto d : py::reinterpret_borrow<py::sequence>(v)) o.record_shape.push_back(ToU32(d, k));
    } else if (key == "record_labels") {
      o.record_labels = FsName(v, "record_labels (a labels file: HDF5 or text)");
    } else if (key == "pipeline_json") {
      // The keywords go to the C++ client as they are: it (through
      // stoker/pipeline_spec.h) alone knows their defaults and checks.
      if (!PyUnicode_Check(v.ptr())) RaiseInvalid("pipeline_json must be a str");
      o.pipeline = py::cast<std::string>(v);
    } else if (key == "allow_empty") {
      o.allow_empty = ToBool(v);
    } else if (key == "extensions") {
      if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr())) {
        RaiseInvalid("extensions must be a list of str");
      }
      for (auto e : py::reinterpret_borrow<py::sequence>(v)) o.extensions.push_back(py::cast<std::string>(e));
    } else if (key == "frames_per_clip") {
      o.clips.frames_per_clip = ToU32(v, k);
    } else if (key == "step_between_clips") {
      o.clips.step_between_clips = ToU32(v, k);
    } else if (key == "frame_rate") {
      o.clips.frame_rate = ToU32(v, k);
    } else if (key == "clip_sampler") {
      o.clips.sampler = ToLowerStr(v, k);
    } else if (key == "clips_per_video") {
      o.clips.clips_per_video = ToU32(v, k);
    } else if (key == "volumes_json") {
      // stoker.volume's transforms as the VolumeSpec's JSON: the daemon
      // (pipeline/volume_pipeline.h) alone knows their defaults and checks.
      if (!PyUnicode_Check(v.ptr())) RaiseInvalid("volumes_json must be a str");
      o.volumes_json = py::cast<std::string>(v);
    } else if (key == "clip_layout") {
      o.clips.layout = py::cast<std::string>(v);
    } else if (key == "skip_unsupported_formats") {
      o.skip_unsupported_formats = ToBool(v);
    } else if (key == "batch_size") {
      o.batch_size = ToU32(v, k);
    } else if (key == "seed") {
      o.seed = ToUint(v, k, std::numeric_limits<uint64_t>::max() >> 1);
    } else if (key == "shuffle") {
      o.shuffle = ToBool(v);
    } else if (key == "epochs") {
      o.epochs = ToU32(v, k);
    } else if (key == "rank") {
      o.rank = ToU32(v, k);
    } else if (key == "world_size") {
      o.world_size = ToU32(v, k);
    } else if (key == "drop_last") {
      o.drop_last = ToBool(v);
    } else if (key == "ring_slots") {
      o.ring_slots = ToU32(v, k);
    } else if (key == "failure_policy") {
      o.failure_policy = Choose<FailurePolicy>(
          v, k, {{"skip", FailurePolicy::kSkip}, {"error", FailurePolicy::kError}});
    } else if (key == "start_epoch") {
      o.start_epoch = ToU32(v, k);
    } else if (key == "start_batch") {
      o.start_batch = ToUint(v, k, std::numeric_limits<int64_t>::max());
    } else if (key == "register_ring_with_cuda") {  // device copies
      o.register_ring_with_cuda = ToBool(v);
    } else if (key == "client_name") {
      if (!PyUnicode_Check(v.ptr())) RaiseInvalid("client_name must be a str");
      o.client_name = py::cast<std::string>(v);
    } else {
      RaiseInvalid("unknown attach option '" + key +
                   "' (pipeline keywords go in one JSON object: "
                   "stoker.Client.attach(dataset, pipeline={...}))");
    }
  }
  return o;
}

// The effective pipeline of pipeline keywords (stoker/pipeline_spec.h), as
// the daemon would run it, computed here without a daemon: Python reads the
// output a request gives (dtype, layout, mean, std, size) from this rather
// than keeping defaults of its own.
std::string EffectivePipelinePy(const std::string& keywords_json) {
  absl::StatusOr<v1::PipelineSpec> spec = pipeline::SpecFromKeywordsJson(keywords_json);
  if (spec.ok()) spec = pipeline::Effective(*spec);
  if (!spec.ok()) RaiseStatus(spec.status(), Where::kAttach);
  return pipeline::ToJson(*spec);
}

// numpy dtypes by ring DType, made once (leaked on purpose: no Python object
// may be destroyed after the interpreter is finalized). bfloat16, which
// numpy lacks, comes as its bits (uint16); the field's dtype name says so.
const py::dtype& NumpyDType(DType d) {
  static const auto* table = new std::vector<py::dtype>([] {
    std::vector<py::dtype> t;
    for (uint32_t v = 0; v <= static_cast<uint32_t>(DType::kBFloat16); ++v) {
      const std::string_view name = pipeline::FieldDTypeName(v);
      t.emplace_back(name.empty() ? "uint8" : name == "bfloat16" ? "uint16" : std::string(name));
    }
    return t;
  }());
  const auto v = static_cast<size_t>(d);
  return v < table->size() ? (*table)[v] : (*table)[1];
}

// A batch's field as numpy: views of the slot kept alive by `owner`. A
// field whose rooms hold its bound ([n, max_shape...], the rooms contiguous:
// a fixed shape, or boxes padded to the most a sample has) is one array;
// any other (an any-size image or mask) is a list of each sample's array of
// its own shape.
py::object FieldValues(const BatchField& f, uint32_t n, const py::capsule& owner) {
  const py::dtype& dt = NumpyDType(f.dtype());
  const auto item = static_cast<py::ssize_t>(DTypeBytes(f.dtype()));
  const std::vector<uint32_t>& bound = f.info().max_shape;
  uint64_t bound_bytes = static_cast<uint64_t>(item);
  bool bounded = true;
  for (uint32_t d : bound) {
    bounded = bounded && d != 0;
    bound_bytes *= d;
  }
  const auto strides_of = [item](const std::vector<py::ssize_t>& shape) {
    std::vector<py::ssize_t> st(shape.size());
    py::ssize_t step = item;
    for (size_t k = shape.size(); k-- > 0;) {
      st[k] = step;
      step *= shape[k];
    }
    return st;
  };
  if (bounded && bound_bytes == f.stride()) {
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n)};
    shape.insert(shape.end(), bound.begin(), bound.end());
    std::vector<py::ssize_t> st = strides_of(shape);
    return py::array(dt, shape, st, n > 0 ? f.data(0) : nullptr, owner);
  }
  py::list list(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<py::ssize_t> shape(f.shape(i), f.shape(i) + f.rank());
    std::vector<py::ssize_t> st = strides_of(shape);
    list[i] = py::array(dt, shape, st, f.data(i), owner);
  }
  return list;
}

// Each sample's shape of a field: int32 [n, rank].
py::array_t<int32_t> FieldShapes(const BatchField& f, uint32_t n) {
  const py::ssize_t rank = f.rank();
  py::array_t<int32_t> shapes({static_cast<py::ssize_t>(n), rank});
  int32_t* out = shapes.mutable_data();
  for (uint32_t i = 0; i < n; ++i) {
    for (py::ssize_t d = 0; d < rank; ++d) out[i * rank + d] = static_cast<int32_t>(f.shape(i)[d]);
  }
  return shapes;
}

// The op table (pipeline/op_table.h): one dict per op, in OpKind order.
py::list OpTablePy() {
  py::list out;
  for (const pipeline::OpRow& r : pipeline::OpTable()) {
    py::dict d;
    d["name"] = std::string(r.name);
    d["kind"] = static_cast<uint32_t>(r.kind);
    d["moves"] = std::string(pipeline::OpMovesName(r.moves));
    d["source"] = std::string(pipeline::OpSourceName(r.source));
    d["needs_boxes"] = r.needs_boxes;
    d["holds_ops"] = r.holds_ops;
    d["on_clips"] = r.on_clips;
    out.append(d);
  }
  return out;
}

// The Attach defaults (stoker.proto's AttachDefaults enum): {"batch_size": 64,
// "ring_depth": 4, "ring_max_depth": 16}, for the Loader's signature.
py::dict AttachDefaultsPy() {
  py::dict d;
  const google::protobuf::EnumDescriptor* e = v1::AttachDefaults_descriptor();
  constexpr std::string_view kPrefix = "ATTACH_DEFAULT_";
  for (int i = 0; i < e->value_count(); ++i) {
    const std::string& name = e->value(i)->name();
    if (name.rfind(kPrefix, 0) != 0) continue;
    std::string key = name.substr(kPrefix.size());
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    d[py::str(key)] = e->value(i)->number();
  }
  return d;
}

// stokerd's flags as DaemonConfig defines them (proto/stoker/v1/config.proto):
// the private daemon's command line is built from this table, not spelled in
// Python.
py::list DaemonFlagsPy() {
  py::list out;
  for (const DaemonFlag& f : DaemonFlags()) {
    py::dict d;
    d["field"] = f.field->name();
    d["flag"] = "--" + f.name;
    d["env"] = f.env;
    d["type"] = std::string(f.field->type_name());
    d["default"] = f.spec->default_value();
    d["help"] = f.spec->help();
    d["required"] = f.spec->required();
    d["hidden"] = f.spec->hidden();
    d["zero_word"] = f.spec->zero_word();
    out.append(d);
  }
  return out;
}

}  // namespace stoker::native
