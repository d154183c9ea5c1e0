// stoker._native's shared parts (stoker_native.cc binds the classes and
// the module): the exceptions a status becomes, attach(**options) parsed,
// a batch's fields as numpy, and the tables the Python package reads (the
// op table, the attach defaults, stokerd's flags). Needs the GIL throughout.

#ifndef STOKER_CLIENT_PYTHON_NATIVE_COMMON_H_
#define STOKER_CLIENT_PYTHON_NATIVE_COMMON_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "stoker/client.h"

namespace stoker::native {

namespace py = pybind11;

// The exception types, created once at import (PYBIND11_MODULE); references
// are kept for the process's life (module objects are never torn down
// before the interpreter).
struct Exceptions {
  PyObject* stoker_error = nullptr;        // base, RuntimeError
  PyObject* daemon_unavailable = nullptr;  // UNAVAILABLE
  PyObject* sample_error = nullptr;        // ABORTED from Next
  PyObject* ring_exhausted = nullptr;      // FAILED_PRECONDITION from Next
  PyObject* invalid_request = nullptr;     // bad request at attach (also ValueError)
  PyObject* resource_exhausted = nullptr;  // RESOURCE_EXHAUSTED
  PyObject* timeout = nullptr;             // DEADLINE_EXCEEDED (also TimeoutError)
  PyObject* end_of_data = nullptr;         // OUT_OF_RANGE from Next
  PyObject* data_loss = nullptr;           // DATA_LOSS
  PyObject* cuda_unavailable = nullptr;    // FAILED_PRECONDITION from a device copy
};
extern Exceptions g_exc;

// Where a status came from: the same code means different things at attach
// (FAILED_PRECONDITION: an empty dataset) and at next (every slot is held).
enum class Where { kConnect, kAttach, kNext, kDetach, kStatus, kHealth, kDevice };

// Sets the Python error of `type` with `message` and `.code`, and throws so
// pybind11 lets it propagate.
[[noreturn]] void Raise(PyObject* type, const std::string& message, const std::string& code);
// The typed exception for `s` where it came from.
[[noreturn]] void RaiseStatus(const absl::Status& s, Where where);
[[noreturn]] void RaiseInvalid(const std::string& message);

// attach(**options): strict (unknown keys and values out of range are
// InvalidRequestError). `dataset` as FsName gives it.
AttachOptions ParseAttach(const std::string& dataset, const py::kwargs& kw);
// A str or os.PathLike as the file system's bytes (a name need not be UTF-8).
std::string FsName(py::handle v, const std::string& what);
// A str option, lower-cased (InvalidRequestError for another type).
std::string ToLowerStr(py::handle v, const char* key);

// A str option that must be one of `choices` (case-insensitive).
template <typename E>
inline E Choose(py::handle v, const char* key,
         std::initializer_list<std::pair<const char*, E>> choices) {
  std::string s = ToLowerStr(v, key);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (s == name) return e;
    if (!names.empty()) names += ", ";
    names += name;
  }
  RaiseInvalid("unknown " + std::string(key) + " '" + s + "': use one of " + names);
}

// Normalize's mean or std: 1 or 3 numbers, as 3.
std::vector<float> ToTriple(py::handle v, const char* key);
Layout ToLayout(py::handle v);
// The effective pipeline of the keywords (pipeline_spec.h), as JSON.
std::string EffectivePipelinePy(const std::string& keywords_json);

// A batch's field as numpy views of the slot kept alive by `owner` (one
// array when its rooms hold its bound, else a list of each sample's), and
// each sample's shape as int32 [n, rank].
py::object FieldValues(const BatchField& f, uint32_t n, const py::capsule& owner);
py::array_t<int32_t> FieldShapes(const BatchField& f, uint32_t n);

// The tables: the op table's rows, the Attach defaults, stokerd's flags.
py::list OpTablePy();
py::dict AttachDefaultsPy();
py::list DaemonFlagsPy();

}  // namespace stoker::native

#endif  // STOKER_CLIENT_PYTHON_NATIVE_COMMON_H_
