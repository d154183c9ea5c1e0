#include "pipeline/pipeline_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/op_table.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline {
namespace {

namespace pb = google::protobuf;
using v1::Op;
using v1::PipelineSpec;
using Sizes = pb::RepeatedField<uint32_t>;
using Floats = pb::RepeatedField<float>;
using Doubles = pb::RepeatedField<double>;

// ---------------------------------------------------------------------------
// Every default and limit of the contract (stoker.proto states them).

constexpr absl::string_view kDefaultPreset = "train";
constexpr absl::string_view kNoOpPreset = "decode";
constexpr uint32_t kDefaultPresetSide = 224;
// eval: Resize(round(kEvalResizeNum * min(size) / kEvalResizeDen)).
constexpr double kEvalResizeNum = 256.0;
constexpr double kEvalResizeDen = 224.0;
// torchvision's RandomResizedCrop defaults, computed as it computes them.
constexpr float kDefaultScale[2] = {0.08f, 1.0f};
constexpr float kDefaultRatio[2] = {static_cast<float>(3.0 / 4.0), static_cast<float>(4.0 / 3.0)};
constexpr absl::string_view kBilinear = "bilinear";
constexpr bool kDefaultAntialias = true;
constexpr float kDefaultFlipP = 0.5f;
constexpr float kDefaultPerspectiveP = 0.5f;           // RandomPerspective's p
constexpr float kDefaultDistortionScale = 0.5f;        // and distortion_scale
constexpr absl::string_view kDefaultPerspectiveInterpolation = "bilinear";
constexpr float kDefaultElasticAlpha = 50.0f;  // ElasticTransform's
constexpr float kDefaultElasticSigma = 5.0f;
constexpr float kMaxElasticSigma = 1000.0f;    // a kernel of 8001 taps
constexpr float kDefaultGrayscaleP = 0.1f;
constexpr uint32_t kDefaultGrayscaleChannels = 1;  // torchvision's, which is refused
constexpr uint32_t kServedGrayscaleChannels = 3;
constexpr float kDefaultSigma[2] = {0.1f, 2.0f};
// The affine ops' and the policies' (torchvision 0.14's defaults).
constexpr absl::string_view kNearest = "nearest";
constexpr absl::string_view kDefaultAffineInterpolation = kNearest;  // AugMix's is bilinear
constexpr uint32_t kDefaultFill = 0;     // torchvision's 0 (the policies' None is 0 on PIL)
constexpr float kDefaultRandomP = 0.5f;  // RandomPosterize ... RandomInvert, RandomErasing
constexpr uint32_t kMaxPosterizeBits = 8;
constexpr uint32_t kDefaultRandAugmentOps = 2;
constexpr uint32_t kDefaultRandAugmentMagnitude = 9;
constexpr uint32_t kDefaultMagnitudeBins = 31;  // RandAugment, TrivialAugmentWide
constexpr uint32_t kMinMagnitudeBins = 2;       // Posterize's bins divide by bins - 1
constexpr uint32_t kDefaultAugMixSeverity = 3;
constexpr uint32_t kMaxAugMixSeverity = 10;  // torchvision's _PARAMETER_MAX
constexpr uint32_t kDefaultAugMixWidth = 3;
constexpr int32_t kDefaultAugMixDepth = -1;  // drawn from 1..3 per chain
constexpr float kDefaultAugMixAlpha = 1.0f;
constexpr bool kDefaultAugMixAllOps = true;
constexpr float kDefaultEraseScale[2] = {0.02f, 0.33f};
constexpr float kDefaultEraseRatio[2] = {0.3f, 3.3f};
constexpr float kDefaultEraseValue = 0;
// The detection reference's RandomZoomOut, RandomIoUCrop and
// RandomPhotometricDistort.
constexpr float kDefaultZoomOutSides[2] = {1.0f, 4.0f};
constexpr float kDefaultIoUScale[2] = {0.3f, 1.0f};
constexpr float kDefaultIoUAspect[2] = {0.5f, 2.0f};
constexpr float kDefaultIoUOptions[7] = {0.0f, 0.1f, 0.3f, 0.5f, 0.7f, 0.9f, 1.0f};
constexpr uint32_t kDefaultIoUTrials = 40;
constexpr float kDefaultDistortBrightness[2] = {0.875f, 1.125f};
constexpr float kDefaultDistortContrast[2] = {0.5f, 1.5f};
constexpr float kDefaultDistortSaturation[2] = {0.5f, 1.5f};
constexpr float kDefaultDistortHue[2] = {-0.05f, 0.05f};
constexpr absl::string_view kDefaultDType = "uint8";
constexpr absl::string_view kDefaultUint8Layout = "nhwc";
constexpr absl::string_view kDefaultFloatLayout = "nchw";
constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};
constexpr uint64_t kDefaultMaxDecodePixels = 64ull << 20;
constexpr uint64_t kDefaultAnySizeMaxDecodePixels = 16ull << 20;  // ring slots are this big
constexpr uint32_t kDefaultMaskFill = 255;  // torchvision segmentation reference: "ignore"

struct Named {
  absl::string_view name;
  uint32_t value;
};
constexpr Named kDTypes[] = {
    {"uint8", ring::kUint8}, {"float32", ring::kFloat32}, {"float16", ring::kFloat16}};
constexpr Named kLayouts[] = {{"nhwc", ring::kNHWC}, {"nchw", ring::kNCHW}};

// A preset: its op list (parameters left to the ops' defaults), the op whose
// size is the preset's `size`, and eval's Resize, whose size follows it.
struct Preset {
  absl::string_view name;
  Op::OpCase ops[2];
  int op_count;
  int crop_op;    // -1: none (the output is the image's own size)
  int resize_op;  // -1: none
};
constexpr Preset kPresets[] = {
    {"train", {Op::kRandomResizedCrop, Op::kRandomHorizontalFlip}, 2, 0, -1},
    {"eval", {Op::kResize, Op::kCenterCrop}, 2, 1, 0},
    {"decode", {}, 0, -1, -1},
};

// The keywords that change one parameter of a preset's op.
struct PresetKeyword {
  absl::string_view keyword;
  absl::string_view preset;
  Op::OpCase op;
  absl::string_view field;  // of the op's message
};
constexpr PresetKeyword kPresetKeywords[] = {
    {"resize_size", "eval", Op::kResize, "size"},
    {"scale", "train", Op::kRandomResizedCrop, "scale"},
    {"ratio", "train", Op::kRandomResizedCrop, "ratio"},
    {"flip_prob", "train", Op::kRandomHorizontalFlip, "p"},
    {"interpolation", "train", Op::kRandomResizedCrop, "interpolation"},
    {"interpolation", "eval", Op::kResize, "interpolation"},
    {"antialias", "train", Op::kRandomResizedCrop, "antialias"},
    {"antialias", "eval", Op::kResize, "antialias"},
};

// The other keywords: the preset, the op list, height/width, and fields of
// PipelineSpec and Output of the same names.
constexpr absl::string_view kPresetKeyword = "pipeline";
constexpr absl::string_view kOpsKeyword = "ops";
constexpr absl::string_view kSpecKeywords[] = {"size",         "max_decode_pixels",
                                               "exact_decode", "apply_exif_orientation",
                                               "mask_dtype",   "mask_fill",
                                               "box_min_size", "box_min_visibility",
                                               "views"};

// ---------------------------------------------------------------------------
// Text.

// The public API takes std::string_view; Debian's absl has its own.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view SV(absl::string_view s) { return std::string_view(s.data(), s.size()); }

template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

// The shortest text that reads back as the same float; JSON's mapping of
// the non-finite ones.
std::string FloatText(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  for (int prec = 1; prec < 9; ++prec) {
    std::string t = absl::StrFormat("%.*g", prec, v);
    if (std::strtof(t.c_str(), nullptr) == v) return t;
  }
  return absl::StrFormat("%.9g", v);
}

// The same for a double.
std::string DoubleText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  for (int prec = 1; prec < 17; ++prec) {
    std::string t = absl::StrFormat("%.*g", prec, v);
    if (std::strtod(t.c_str(), nullptr) == v) return t;
  }
  return absl::StrFormat("%.17g", v);
}

template <typename T>
std::string ListText(const pb::RepeatedField<T>& r) {
  std::vector<std::string> parts;
  for (T v : r) {
    if constexpr (std::is_same_v<T, float>) {
      parts.push_back(FloatText(v));
    } else if constexpr (std::is_same_v<T, double>) {
      parts.push_back(DoubleText(v));
    } else {
      parts.push_back(absl::StrCat(v));
    }
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string ValueText(const pb::Value& v) {
  switch (v.kind_case()) {
    case pb::Value::kNumberValue:
      for (int prec = 1; prec < 17; ++prec) {
        std::string t = absl::StrFormat("%.*g", prec, v.number_value());
        if (std::strtod(t.c_str(), nullptr) == v.number_value()) return t;
      }
      return absl::StrFormat("%.17g", v.number_value());
    case pb::Value::kStringValue:
      return absl::StrCat("'", v.string_value(), "'");
    case pb::Value::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case pb::Value::kNullValue:
      return "null";
    case pb::Value::kListValue:
      return "a list";
    case pb::Value::kStructValue:
      return "an object";
    default:
      return "nothing";
  }
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

std::string NameList(const Named* table, size_t n) {
  std::vector<absl::string_view> names;
  for (size_t i = 0; i < n; ++i) names.push_back(table[i].name);
  return absl::StrJoin(names, ", ");
}

std::string FieldNames(const pb::Descriptor* d, bool json_names) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) {
    names.push_back(json_names ? d->field(i)->json_name() : d->field(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// The op's torchvision name ("RandomCrop"), its oneof field's JSON name.
std::string OpName(const Op& op) {
  const pb::FieldDescriptor* f = Op::descriptor()->FindFieldByNumber(op.op_case());
  return f == nullptr ? std::string("(no op)") : f->json_name();
}

std::string OpName(Op::OpCase c) { return Op::descriptor()->FindFieldByNumber(c)->json_name(); }

// ---------------------------------------------------------------------------
// JSON (a google.protobuf.Struct) into messages, by reflection: the proto's
// JSON mapping, plus a bare value for a repeated field read as a 1-element
// list (torchvision's `32` for a size), and errors that name the op.

absl::Status ParseObject(absl::string_view json, pb::Struct* out, absl::string_view what) {
  if (json.find_first_not_of(" \t\r\n") == absl::string_view::npos) return absl::OkStatus();
  pb::util::Status st =
      pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()), out);
  if (!st.ok()) {
    return Bad(what, " are not a JSON object: ",
               absl::string_view(st.message().data(), st.message().size()));
  }
  return absl::OkStatus();
}

const pb::FieldDescriptor* FindField(const pb::Descriptor* d, absl::string_view key) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->name() == key || f->json_name() == key) return f;
  }
  return nullptr;
}

bool IsOpParams(const pb::Descriptor* d) {
  const pb::Descriptor* op = Op::descriptor();
  for (int i = 0; i < op->field_count(); ++i) {
    if (op->field(i)->message_type() == d) return true;
  }
  return false;
}

absl::Status FillMessage(pb::Message* m, const pb::Struct& s, const std::string& label);

// One value of field `f` (set, or appended to a repeated field); `label`
// names it in errors.
absl::Status AddValue(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const bool wide = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64;
      uint64_t x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        const double d = v.number_value();
        const bool fits = wide ? d < 18446744073709551616.0 : d <= 4294967295.0;
        if (!(d >= 0 && fits && d == std::floor(d))) {
          return Bad(label, " must be a whole number >= 0, not ", ValueText(v));
        }
        x = static_cast<uint64_t>(d);
      } else if (!(wide && v.kind_case() == pb::Value::kStringValue &&
                   absl::SimpleAtoi(v.string_value(), &x))) {
        // (A 64-bit integer may be a string in the JSON mapping.)
        return Bad(label, " must be a whole number >= 0, not ", ValueText(v));
      }
      if (wide) {
        rep ? r->AddUInt64(m, f, x) : r->SetUInt64(m, f, x);
      } else {
        rep ? r->AddUInt32(m, f, static_cast<uint32_t>(x))
            : r->SetUInt32(m, f, static_cast<uint32_t>(x));
      }
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      const double d = v.kind_case() == pb::Value::kNumberValue ? v.number_value() : 0.5;
      if (!(d >= -2147483648.0 && d <= 2147483647.0 && d == std::floor(d))) {
        return Bad(label, " must be a whole number, not ", ValueText(v));
      }
      rep ? r->AddInt32(m, f, static_cast<int32_t>(d)) : r->SetInt32(m, f, static_cast<int32_t>(d));
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      float x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        const double d = v.number_value();
        if (std::fabs(d) > std::numeric_limits<float>::max()) {
          return Bad(label, " is out of range: ", ValueText(v));
        }
        x = static_cast<float>(d);
      } else if (v.kind_case() == pb::Value::kStringValue && v.string_value() == "NaN") {
        x = std::numeric_limits<float>::quiet_NaN();
      } else if (v.kind_case() == pb::Value::kStringValue &&
                 (v.string_value() == "Infinity" || v.string_value() == "-Infinity")) {
        x = std::numeric_limits<float>::infinity();
        if (v.string_value()[0] == '-') x = -x;
      } else {
        return Bad(label, " must be a number, not ", ValueText(v));
      }
      rep ? r->AddFloat(m, f, x) : r->SetFloat(m, f, x);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      double x = 0;
      if (v.kind_case() == pb::Value::kNumberValue) {
        x = v.number_value();
      } else if (v.kind_case() == pb::Value::kStringValue && v.string_value() == "NaN") {
        x = std::numeric_limits<double>::quiet_NaN();
      } else if (v.kind_case() == pb::Value::kStringValue &&
                 (v.string_value() == "Infinity" || v.string_value() == "-Infinity")) {
        x = std::numeric_limits<double>::infinity();
        if (v.string_value()[0] == '-') x = -x;
      } else {
        return Bad(label, " must be a number, not ", ValueText(v));
      }
      rep ? r->AddDouble(m, f, x) : r->SetDouble(m, f, x);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (v.kind_case() != pb::Value::kBoolValue) {
        return Bad(label, " must be true or false, not ", ValueText(v));
      }
      rep ? r->AddBool(m, f, v.bool_value()) : r->SetBool(m, f, v.bool_value());
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (v.kind_case() != pb::Value::kStringValue) {
        return Bad(label, " must be a string, not ", ValueText(v));
      }
      rep ? r->AddString(m, f, v.string_value()) : r->SetString(m, f, v.string_value());
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_MESSAGE: {
      if (v.kind_case() != pb::Value::kStructValue && v.kind_case() != pb::Value::kNullValue) {
        return Bad(label, " must be an object, not ", ValueText(v));
      }
      pb::Message* child = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
      if (v.kind_case() == pb::Value::kNullValue) return absl::OkStatus();
      return FillMessage(child, v.struct_value(), label);
    }
    default:
      return absl::InternalError(absl::StrCat(label, ": a field type pipeline_spec cannot read"));
  }
}

// Field `f` of `m` from a JSON value; `label` names it in errors.
absl::Status SetField(pb::Message* m, const pb::FieldDescriptor* f, const pb::Value& v,
                      const std::string& label) {
  if (v.kind_case() == pb::Value::kNullValue &&
      f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::OkStatus();  // JSON's null: the default
  }
  if (!f->is_repeated()) {
    if (v.kind_case() == pb::Value::kListValue) {
      return Bad(label, " takes one value, not a list");
    }
    return AddValue(m, f, v, label);
  }
  m->GetReflection()->ClearField(m, f);
  if (v.kind_case() != pb::Value::kListValue) return AddValue(m, f, v, label);
  const auto& items = v.list_value().values();
  for (int i = 0; i < items.size(); ++i) {
    // Ops are named by position; values of a list by the list.
    const std::string item_label = f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE
                                       ? absl::StrCat(label, "[", i, "]")
                                       : label;
    if (items[i].kind_case() == pb::Value::kListValue) {
      return Bad(item_label, " must hold values, not lists");
    }
    if (absl::Status st = AddValue(m, f, items[i], item_label); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// `label` is the message's name in errors: "ops[2]" for an Op, "ops[2]
// ColorJitter" for an op's parameters, "output" for the output, "" for the
// spec.
absl::Status FillMessage(pb::Message* m, const pb::Struct& s, const std::string& label) {
  const pb::Descriptor* d = m->GetDescriptor();
  if (d == Op::descriptor()) {
    if (s.fields().size() != 1) {
      return Bad(label, ": an op is an object with one key, its name (",
                 FieldNames(d, /*json_names=*/true), "), not ", absl::StrCat(s.fields().size()));
    }
    const auto& [name, params] = *s.fields().begin();
    const pb::FieldDescriptor* f = FindField(d, name);
    if (f == nullptr) {
      return Bad(label, ": unknown op '", name, "'; the ops are ",
                 FieldNames(d, /*json_names=*/true));
    }
    return SetField(m, f, params, absl::StrCat(label, " ", f->json_name()));
  }
  const bool op_params = IsOpParams(d);
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.fields()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());  // the same error first, whatever the map's order
  for (const std::string& k : keys) {
    const pb::FieldDescriptor* f = FindField(d, k);
    const std::string prefix = label.empty() ? "" : absl::StrCat(label, op_params ? ": " : ".");
    // RandomErasing's value="random", torchvision's spelling of value_random.
    if (d == v1::RandomErasing::descriptor() && k == "value" &&
        s.fields().at(k).kind_case() == pb::Value::kStringValue) {
      if (s.fields().at(k).string_value() != "random") {
        return Bad(prefix, "value: If value is str, it should be 'random', not ",
                   ValueText(s.fields().at(k)));
      }
      m->GetReflection()->SetBool(m, d->FindFieldByName("value_random"), true);
      continue;
    }
    if (f == nullptr) {
      return Bad(prefix, "unknown ", op_params ? "parameter" : "field", " '", k,
                 absl::StrCat("'; ", d->name(), " takes ", FieldNames(d, /*json_names=*/false)));
    }
    if (absl::Status st = SetField(m, f, s.fields().at(k), absl::StrCat(prefix, f->name()));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Checks and defaults of the ops.

const Preset* FindPreset(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::Status UnknownPreset(absl::string_view name) {
  std::vector<absl::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return Bad("unknown pipeline '", name, "': use ", absl::StrJoin(names, ", "), ", or give ops");
}

std::string PresetOps(const Preset& p) {
  std::vector<std::string> names;
  for (int i = 0; i < p.op_count; ++i) names.push_back(OpName(p.ops[i]));
  return names.empty() ? std::string("no op") : absl::StrJoin(names, ", ");
}

absl::Status CheckInterpolation(absl::string_view value, absl::string_view what) {
  if (value == kBilinear) return absl::OkStatus();
  if (value == "antialias") {
    return Bad(what,
               " 'antialias' is stoker 0.1's name: drop it (antialiased bilinear is "
               "the default; antialias=false gives plain 2-tap bilinear)");
  }
  return Bad(what, " '", value,
             "' is not served: only 'bilinear' is (antialias=false gives "
             "the plain 2-tap kind)");
}

// A crop's (or the output's) size: [v] -> [v, v]; every side and the area
// within the output limits.
absl::Status OutputSize(Sizes* size, absl::string_view what, bool required) {
  if (size->empty()) return required ? Bad(what, " is required") : absl::OkStatus();
  if (size->size() == 1) size->Add(uint32_t{size->Get(0)});
  if (size->size() != 2) {
    return Bad(what, " must be 1 value or 2 ([height, width]), not ", absl::StrCat(size->size()),
               " values");
  }
  for (uint32_t side : *size) {
    if (side < 1 || side > kMaxOutputSide) {
      return Bad(what, " ", ListText(*size), ": each side must be within 1..",
                 absl::StrCat(kMaxOutputSide));
    }
  }
  if (uint64_t{size->Get(0)} * size->Get(1) > kMaxOutputPixels) {
    return Bad(what, " ", ListText(*size), " has more than ", absl::StrCat(kMaxOutputPixels),
               " pixels");
  }
  return absl::OkStatus();
}

// [min, max] with 0 < min <= max, both finite; empty -> the default.
absl::Status PositiveRange(Floats* r, const float (&def)[2], absl::string_view what) {
  if (r->empty()) r->Add(def, def + 2);
  if (r->size() != 2) {
    return Bad(what, " must be [min, max], not ", absl::StrCat(r->size()), " values");
  }
  const float lo = r->Get(0), hi = r->Get(1);
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo > 0) || !(lo <= hi)) {
    return Bad(what, " ", ListText(*r), " must be finite with 0 < min <= max");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Probability(T* op, float def, absl::string_view what) {
  if (!op->has_p()) op->set_p(def);
  if (!(op->p() >= 0 && op->p() <= 1)) {
    return Bad(what, "p must be within [0, 1], not ", FloatText(op->p()));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Resampling(T* op, absl::string_view at) {
  if (op->interpolation().empty()) op->set_interpolation(std::string(kBilinear));
  if (absl::Status st = CheckInterpolation(op->interpolation(), absl::StrCat(at, "interpolation"));
      !st.ok()) {
    return st;
  }
  if (!op->has_antialias()) op->set_antialias(kDefaultAntialias);
  return absl::OkStatus();
}

// ColorJitter's factor as torchvision's ColorJitter._check_input makes it: v
// -> [max(0, center - v), center + v] (hue: [-v, v]), or the range given;
// within [lo, hi]; [center, center] is "not made" and left empty.
absl::Status JitterRange(Floats* r, double center, double lo, double hi, bool clip_at_zero,
                         absl::string_view what) {
  if (r->empty()) return absl::OkStatus();
  for (float v : *r) {
    if (!std::isfinite(v)) return Bad(what, " ", ListText(*r), " must be finite");
  }
  if (r->size() == 1) {
    const double v = r->Get(0);
    if (v < 0) {
      return Bad(what, " is a single number, so it must be >= 0, not ", FloatText(r->Get(0)));
    }
    double a = center - v, b = center + v;
    if (clip_at_zero) a = std::max(a, 0.0);
    r->Clear();
    r->Add(static_cast<float>(a));
    r->Add(static_cast<float>(b));
  } else if (r->size() != 2) {
    return Bad(what, " must be 1 value or 2 ([min, max]), not ", absl::StrCat(r->size()),
               " values");
  }
  const double a = r->Get(0), b = r->Get(1);
  if (!(lo <= a && a <= b && b <= hi)) {
    return Bad(what, " ", ListText(*r), " must be a range [min, max] within [",
               FloatText(static_cast<float>(lo)), ", ",
               std::isinf(hi) ? std::string("inf") : FloatText(static_cast<float>(hi)), "]");
  }
  if (a == center && b == center) r->Clear();
  return absl::OkStatus();
}

// A constant fill: [v] -> [v, v, v]; 3 values, each 0..255.
absl::Status FillValues(Sizes* fill, absl::string_view at) {
  if (fill->empty()) fill->Add(kDefaultFill);
  if (fill->size() == 1) fill->Resize(3, uint32_t{fill->Get(0)});
  if (fill->size() != 3) {
    return Bad(at, "fill must be 1 value or 3 (R, G, B), not ", absl::StrCat(fill->size()));
  }
  for (uint32_t v : *fill) {
    if (v > 255) return Bad(at, "fill ", ListText(*fill), ": each value must be within 0..255");
  }
  return absl::OkStatus();
}

// An angle range as torchvision's _setup_angle makes it: [d] -> [-d, d]
// (d >= 0), else 2 values (or, with `four`, 2 or 4: shear's x and y ranges),
// each pair [min, max] with min <= max (torch's uniform_ refuses the other).
absl::Status AngleRange(Floats* r, absl::string_view name, bool four, absl::string_view at) {
  for (float v : *r) {
    if (!std::isfinite(v)) return Bad(at, name, " ", ListText(*r), " must be finite");
  }
  if (r->size() == 1) {
    const float d = r->Get(0);
    if (d < 0) {
      return Bad(at, "If ", name, " is a single number, it must be positive (not ", FloatText(d),
                 ")");
    }
    r->Clear();
    r->Add(-d);
    r->Add(d);
  }
  if (r->size() != 2 && !(four && r->size() == 4)) {
    return Bad(at, name, " should be a sequence of length ", four ? "2 or 4" : "2",
               " (or a single number), not ", absl::StrCat(r->size()), " values");
  }
  for (int k = 0; k < r->size(); k += 2) {
    if (!(r->Get(k) <= r->Get(k + 1))) {
      return Bad(at, name, " ", ListText(*r), " must be ranges [min, max] with min <= max");
    }
  }
  return absl::OkStatus();
}

// The affine ops' resampling: empty -> `def`; nearest or bilinear.
absl::Status AffineInterpolation(std::string* v, absl::string_view def, absl::string_view at) {
  if (v->empty()) *v = std::string(def);
  for (std::string_view name : kAffineInterpolations) {
    if (AV(name) == *v) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (std::string_view name : kAffineInterpolations)
    names.push_back(absl::StrCat("'", AV(name), "'"));
  return Bad(at, "interpolation '", *v, "' is not served: use ", absl::StrJoin(names, " or "));
}

// [x, y] or empty (the image's center).
absl::Status Center(const Doubles& c, absl::string_view at) {
  if (c.empty()) return absl::OkStatus();
  if (c.size() != 2) {
    return Bad(at, "center should be a sequence of length 2 ([x, y]), not ", absl::StrCat(c.size()),
               " values");
  }
  for (double v : c) {
    if (!std::isfinite(v)) return Bad(at, "center ", ListText(c), " must be finite");
  }
  return absl::OkStatus();
}

// A policy's magnitude bins: default 31, within 2..kMaxMagnitudeBins.
absl::Status MagnitudeBins(uint32_t bins, absl::string_view at) {
  if (bins < kMinMagnitudeBins) {
    return Bad(at, "num_magnitude_bins must be at least ", absl::StrCat(kMinMagnitudeBins),
               " (torchvision's Posterize magnitudes divide by num_magnitude_bins - 1), not ",
               absl::StrCat(bins));
  }
  if (bins > kMaxMagnitudeBins) {
    return Bad(at, "num_magnitude_bins must be at most ", absl::StrCat(kMaxMagnitudeBins),
               " (stoker's limit: its magnitudes are torch's float32 linspace values up to "
               "that many bins), not ",
               absl::StrCat(bins));
  }
  return absl::OkStatus();
}

// [min, max] within [0, 1], min <= max; empty -> the default.
absl::Status EraseScale(Floats* r, absl::string_view at) {
  if (r->empty()) r->Add(kDefaultEraseScale, kDefaultEraseScale + 2);
  if (r->size() != 2) {
    return Bad(at, "scale must be [min, max], not ", absl::StrCat(r->size()), " values");
  }
  if (!(r->Get(0) >= 0 && r->Get(1) <= 1)) {
    return Bad(at, "Scale should be between 0 and 1 (not ", ListText(*r), ")");
  }
  if (!(r->Get(0) <= r->Get(1))) {
    return Bad(at, "scale ", ListText(*r), " must be [min, max] with min <= max");
  }
  return absl::OkStatus();
}

// RandomErasing's checks that depend on the output: "random" needs a float
// dtype; a uint8 output takes whole values 0..255. `at`: "ops[i] RandomErasing: ".
absl::Status CheckEraseForOutput(const v1::RandomErasing& o, uint32_t dtype,
                                 const std::string& at) {
  if (dtype != ring::kUint8) return absl::OkStatus();
  if (o.value_random()) {
    return Bad(at,
               "value 'random' with a uint8 output: torchvision would cast normal(0, 1) noise "
               "to uint8; use a float dtype (float32 or float16), where the noise is in "
               "normalized units");
  }
  for (float v : o.value()) {
    if (!(v >= 0 && v <= 255 && v == std::floor(v))) {
      return Bad(at, "value ", ListText(o.value()),
                 " with a uint8 output: each value must be a whole number within 0..255");
    }
  }
  return absl::OkStatus();
}

absl::Status FillOp(Op* op, const std::string& at);

// RandomCrop's and Pad's padding (1, 2 or 4 values, as torchvision reads
// them, made 4: left, top, right, bottom), fill and padding_mode.
template <typename T>
absl::Status FillPadding(T* o, const std::string& at) {
  Sizes* pad = o->mutable_padding();
  if (pad->empty() || pad->size() == 3 || pad->size() > 4) {
    return Bad(at, "padding must be 1, 2 or 4 values, not ", absl::StrCat(pad->size()));
  }
  if (pad->size() == 1) pad->Resize(4, uint32_t{pad->Get(0)});  // (a copy: Resize reallocates)
  if (pad->size() == 2) {                                       // [left/right, top/bottom]
    const uint32_t lr = pad->Get(0), tb = pad->Get(1);
    pad->Clear();
    for (uint32_t v : {lr, tb, lr, tb}) pad->Add(v);
  }
  for (uint32_t v : *pad) {
    if (v > kMaxResizeSide) {
      return Bad(at, "padding ", ListText(*pad), ": each side must be at most ",
                 absl::StrCat(kMaxResizeSide));
    }
  }
  if (absl::Status st = FillValues(o->mutable_fill(), at); !st.ok()) return st;
  if (o->padding_mode().empty()) o->set_padding_mode(std::string(kPaddingModes[0]));
  if (std::find(std::begin(kPaddingModes), std::end(kPaddingModes), o->padding_mode()) ==
      std::end(kPaddingModes)) {
    std::vector<absl::string_view> modes;
    for (std::string_view m : kPaddingModes) modes.push_back(AV(m));
    return Bad(at, "padding_mode '", o->padding_mode(), "' is not one of ",
               absl::StrJoin(modes, ", "));
  }
  return absl::OkStatus();
}

// A composition's transforms (RandomApply, RandomChoice, RandomOrder): 1 to
// image::kMaxChildren ops, each of an op-table row that moves pixels only
// and holds no ops of its own, each filled in as a top-level op is.
absl::Status FillComposed(pb::RepeatedPtrField<Op>* transforms, const std::string& at) {
  if (transforms->empty() || transforms->size() > static_cast<int>(image::kMaxChildren)) {
    return Bad(at, "transforms must hold 1..", absl::StrCat(image::kMaxChildren), " ops, not ",
               absl::StrCat(transforms->size()));
  }
  for (int k = 0; k < transforms->size(); ++k) {
    Op* child = transforms->Mutable(k);
    const std::string where = absl::StrCat(at, "transforms[", k, "] ", OpName(*child), ": ");
    const OpRow* row = FindOp(static_cast<image::OpKind>(child->op_case()));
    if (row == nullptr) return Bad(where, "no op set");
    if (row->holds_ops) {
      return Bad(where, "a composition cannot hold another (give its ops to this one, or "
                        "make them separate ops)");
    }
    if (row->moves != OpMoves::kPixels) {
      return Bad(where, row->moves == OpMoves::kGeometry ? "moves the image's geometry"
                                                         : "works on the output tensor",
                 "; RandomApply, RandomChoice and RandomOrder hold only ops that change "
                 "pixels (ColorJitter, GaussianBlur, Grayscale, RandomSolarize, ...): put it "
                 "outside");
    }
    if (absl::Status st = FillOp(child, where); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status FillOp(Op* op, const std::string& at) {  // `at`: "ops[i] Name: "
  switch (op->op_case()) {
    case Op::kRandomResizedCrop: {
      v1::RandomResizedCrop* o = op->mutable_random_resized_crop();
      if (absl::Status st = OutputSize(o->mutable_size(), absl::StrCat(at, "size"), true);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = PositiveRange(o->mutable_scale(), kDefaultScale, at + "scale");
          !st.ok()) {
        return st;
      }
      if (absl::Status st = PositiveRange(o->mutable_ratio(), kDefaultRatio, at + "ratio");
          !st.ok()) {
        return st;
      }
      return Resampling(o, at);
    }
    case Op::kResize: {
      v1::Resize* o = op->mutable_resize();
      Sizes* size = o->mutable_size();
      if (size->empty()) return Bad(at, "size is required");
      if (size->size() > 2) {
        return Bad(at, "size must be [shorter side] or [height, width], not ",
                   absl::StrCat(size->size()), " values");
      }
      for (uint32_t side : *size) {
        if (side < 1 || side > kMaxResizeSide) {
          return Bad(at, "size ", ListText(*size), ": each side must be within 1..",
                     absl::StrCat(kMaxResizeSide));
        }
      }
      if (o->has_max_size()) {
        if (size->size() != 1) {
          return Bad(at,
                     "max_size should only be passed if size specifies the length of the "
                     "smaller edge, i.e. size should be one value");
        }
        if (o->max_size() <= size->Get(0)) {
          return Bad(at, "max_size = ", absl::StrCat(o->max_size()),
                     " must be strictly greater than the requested size for the smaller edge "
                     "size = ",
                     absl::StrCat(size->Get(0)));
        }
        if (o->max_size() > kMaxResizeSide) {
          return Bad(at, "max_size must be at most ", absl::StrCat(kMaxResizeSide));
        }
      }
      return Resampling(o, at);
    }
    case Op::kRandomShortestSize: {
      v1::RandomShortestSize* o = op->mutable_random_shortest_size();
      if (o->min_size().empty() || o->min_size_size() > static_cast<int>(kMaxShortestSizes)) {
        return Bad(at, "min_size must be 1 to ", absl::StrCat(kMaxShortestSizes), " sizes, not ",
                   absl::StrCat(o->min_size_size()));
      }
      for (uint32_t v : o->min_size()) {
        if (v < 1 || v > kMaxResizeSide) {
          return Bad(at, "min_size ", ListText(o->min_size()), ": each must be within 1..",
                     absl::StrCat(kMaxResizeSide));
        }
      }
      if (o->has_max_size() && (o->max_size() < 1 || o->max_size() > kMaxResizeSide)) {
        return Bad(at, "max_size must be within 1..", absl::StrCat(kMaxResizeSide));
      }
      return Resampling(o, at);
    }
    case Op::kRandomZoomOut: {
      v1::RandomZoomOut* o = op->mutable_random_zoom_out();
      if (absl::Status st = FillValues(o->mutable_fill(), at); !st.ok()) return st;
      if (o->side_range().empty()) {
        for (float v : kDefaultZoomOutSides) o->add_side_range(v);
      }
      if (o->side_range_size() != 2 || !(o->side_range(0) >= 1) ||
          !(o->side_range(0) <= o->side_range(1)) || !(o->side_range(1) <= 16)) {
        return Bad(at, "side_range ", ListText(o->side_range()),
                   " must be [min, max] with 1 <= min <= max <= 16");
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomIouCrop: {
      v1::RandomIoUCrop* o = op->mutable_random_iou_crop();
      if (!o->has_min_scale()) o->set_min_scale(kDefaultIoUScale[0]);
      if (!o->has_max_scale()) o->set_max_scale(kDefaultIoUScale[1]);
      if (!o->has_min_aspect_ratio()) o->set_min_aspect_ratio(kDefaultIoUAspect[0]);
      if (!o->has_max_aspect_ratio()) o->set_max_aspect_ratio(kDefaultIoUAspect[1]);
      if (o->sampler_options().empty()) {
        for (float v : kDefaultIoUOptions) o->add_sampler_options(v);
      }
      if (!o->has_trials()) o->set_trials(kDefaultIoUTrials);
      if (!(o->min_scale() > 0 && o->min_scale() <= o->max_scale() && o->max_scale() <= 1)) {
        return Bad(at, "need 0 < min_scale <= max_scale <= 1, not ", FloatText(o->min_scale()),
                   " and ", FloatText(o->max_scale()));
      }
      if (!(o->min_aspect_ratio() > 0 && o->min_aspect_ratio() <= o->max_aspect_ratio() &&
            std::isfinite(o->max_aspect_ratio()))) {
        return Bad(at, "need 0 < min_aspect_ratio <= max_aspect_ratio (finite)");
      }
      if (o->sampler_options_size() > 8) return Bad(at, "at most 8 sampler_options");
      for (float v : o->sampler_options()) {
        if (!(v >= 0) || !std::isfinite(v)) {
          return Bad(at, "sampler_options ", ListText(o->sampler_options()),
                     " must be finite and >= 0 (>= 1: leave the image as it is)");
        }
      }
      if (o->trials() < 1 || o->trials() > 1000) return Bad(at, "trials must be within 1..1000");
      return absl::OkStatus();
    }
    case Op::kRandomPhotometricDistort: {
      v1::RandomPhotometricDistort* o = op->mutable_random_photometric_distort();
      constexpr double kInf = std::numeric_limits<double>::infinity();
      struct Part {
        Floats* range;
        const float* def;
        double center, lo, hi;
        bool clip;
        const char* name;
      };
      const Part parts[] = {
          {o->mutable_brightness(), kDefaultDistortBrightness, 1, 0, kInf, true, "brightness"},
          {o->mutable_contrast(), kDefaultDistortContrast, 1, 0, kInf, true, "contrast"},
          {o->mutable_saturation(), kDefaultDistortSaturation, 1, 0, kInf, true, "saturation"},
          {o->mutable_hue(), kDefaultDistortHue, 0, -0.5, 0.5, false, "hue"},
      };
      for (const Part& part : parts) {
        if (part.range->empty()) part.range->Add(part.def, part.def + 2);
        if (absl::Status st = JitterRange(part.range, part.center, part.lo, part.hi, part.clip,
                                          at + part.name);
            !st.ok()) {
          return st;
        }
        // A range at its center is "not made" for ColorJitter; here it is
        // an adjustment by that factor (the identity): keep both ends.
        if (part.range->empty()) {
          part.range->Add(static_cast<float>(part.center));
          part.range->Add(static_cast<float>(part.center));
        }
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomResize: {
      v1::RandomResize* o = op->mutable_random_resize();
      if (o->min_size() < 1 || o->min_size() > kMaxResizeSide) {
        return Bad(at, "min_size must be within 1..", absl::StrCat(kMaxResizeSide), ", not ",
                   absl::StrCat(o->min_size()));
      }
      if (o->max_size() <= o->min_size() || o->max_size() > kMaxResizeSide + 1) {
        return Bad(at, "max_size must be within min_size + 1..", absl::StrCat(kMaxResizeSide + 1),
                   " (the size is drawn from [min_size, max_size)), not ",
                   absl::StrCat(o->max_size()));
      }
      return Resampling(o, at);
    }
    case Op::kCenterCrop:
      return OutputSize(op->mutable_center_crop()->mutable_size(), at + "size", true);
    case Op::kRandomCrop: {
      v1::RandomCrop* o = op->mutable_random_crop();
      if (absl::Status st = OutputSize(o->mutable_size(), at + "size", true); !st.ok()) return st;
      if (o->padding().empty()) o->add_padding(0);
      return FillPadding(o, at);
    }
    case Op::kPad: {
      v1::Pad* o = op->mutable_pad();
      if (o->padding().empty()) return Bad(at, "padding is required");
      return FillPadding(o, at);
    }
    case Op::kElasticTransform: {
      v1::ElasticTransform* o = op->mutable_elastic_transform();
      const auto pair = [&](Floats* v, float def, absl::string_view name) -> absl::Status {
        if (v->empty()) v->Add(def);
        if (v->size() == 1) v->Add(v->Get(0));
        if (v->size() != 2) {
          return Bad(at, name, " should be a number or a sequence of 2 ([x, y]), not ",
                     absl::StrCat(v->size()), " values");
        }
        for (float x : *v) {
          if (!std::isfinite(x)) return Bad(at, name, " ", ListText(*v), " must be finite");
        }
        return absl::OkStatus();
      };
      if (absl::Status st = pair(o->mutable_alpha(), kDefaultElasticAlpha, "alpha"); !st.ok()) {
        return st;
      }
      if (absl::Status st = pair(o->mutable_sigma(), kDefaultElasticSigma, "sigma"); !st.ok()) {
        return st;
      }
      const float sx = o->sigma(0), sy = o->sigma(1);
      if (sx < 0 || sy < 0 || sx > kMaxElasticSigma || sy > kMaxElasticSigma ||
          ((sx == 0) != (sy == 0))) {
        return Bad(at, "sigma ", ListText(o->sigma()), " must be within 0..",
                   absl::StrCat(static_cast<int>(kMaxElasticSigma)),
                   ", both 0 (no blur) or both > 0 (torchvision's gaussian_blur takes positive "
                   "values only)");
      }
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(),
                                                kDefaultPerspectiveInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomPerspective: {
      v1::RandomPerspective* o = op->mutable_random_perspective();
      if (!o->has_distortion_scale()) o->set_distortion_scale(kDefaultDistortionScale);
      if (!(o->distortion_scale() >= 0 && o->distortion_scale() <= 1)) {
        return Bad(at, "distortion_scale must be within [0, 1], not ",
                   FloatText(o->distortion_scale()));
      }
      if (absl::Status st = Probability(o, kDefaultPerspectiveP, at); !st.ok()) return st;
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(),
                                                kDefaultPerspectiveInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomHorizontalFlip:
      return Probability(op->mutable_random_horizontal_flip(), kDefaultFlipP, at);
    case Op::kRandomVerticalFlip:
      return Probability(op->mutable_random_vertical_flip(), kDefaultFlipP, at);
    case Op::kColorJitter: {
      v1::ColorJitter* o = op->mutable_color_jitter();
      constexpr double kInf = std::numeric_limits<double>::infinity();
      if (absl::Status st =
              JitterRange(o->mutable_brightness(), 1, 0, kInf, true, at + "brightness");
          !st.ok()) {
        return st;
      }
      if (absl::Status st = JitterRange(o->mutable_contrast(), 1, 0, kInf, true, at + "contrast");
          !st.ok()) {
        return st;
      }
      if (absl::Status st =
              JitterRange(o->mutable_saturation(), 1, 0, kInf, true, at + "saturation");
          !st.ok()) {
        return st;
      }
      return JitterRange(o->mutable_hue(), 0, -0.5, 0.5, false, at + "hue");
    }
    case Op::kGrayscale: {
      v1::Grayscale* o = op->mutable_grayscale();
      if (!o->has_num_output_channels()) o->set_num_output_channels(kDefaultGrayscaleChannels);
      if (o->num_output_channels() == kServedGrayscaleChannels) return absl::OkStatus();
      if (o->num_output_channels() == 1) {
        return Bad(at.substr(0, at.size() - 2),
                   "(num_output_channels=1): stoker's samples have 3 channels; use "
                   "Grayscale(num_output_channels=3)");
      }
      return Bad(at,
                 "num_output_channels must be 3 (torchvision takes 1 or 3; stoker's samples "
                 "have 3 channels), not ",
                 absl::StrCat(o->num_output_channels()));
    }
    case Op::kRandomGrayscale:
      return Probability(op->mutable_random_grayscale(), kDefaultGrayscaleP, at);
    case Op::kGaussianBlur: {
      v1::GaussianBlur* o = op->mutable_gaussian_blur();
      Sizes* k = o->mutable_kernel_size();
      if (k->empty()) return Bad(at, "kernel_size is required");
      if (k->size() == 1) k->Add(uint32_t{k->Get(0)});
      if (k->size() != 2) {
        return Bad(at, "kernel_size should be a single number or a list of 2 ([x, y]), not ",
                   absl::StrCat(k->size()), " values");
      }
      for (uint32_t v : *k) {
        if (v < 1 || v % 2 == 0) {
          return Bad(at, "kernel_size ", ListText(*k),
                     ": kernel size value should be an odd and positive number");
        }
      }
      Floats* sigma = o->mutable_sigma();
      if (sigma->size() == 1) {
        if (!(sigma->Get(0) > 0) || !std::isfinite(sigma->Get(0))) {
          return Bad(at, "sigma is a single number, so it must be positive and finite, not ",
                     FloatText(sigma->Get(0)));
        }
        sigma->Add(float{sigma->Get(0)});
      }
      if (sigma->size() > 2) {
        return Bad(at, "sigma should be a single number or a list of 2 ([min, max]), not ",
                   absl::StrCat(sigma->size()), " values");
      }
      return PositiveRange(sigma, kDefaultSigma, at + "sigma");
    }
    case Op::kRandomRotation: {
      v1::RandomRotation* o = op->mutable_random_rotation();
      if (o->degrees().empty()) return Bad(at, "degrees is required");
      if (absl::Status st = AngleRange(o->mutable_degrees(), "degrees", false, at); !st.ok()) {
        return st;
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      if (!o->has_expand()) o->set_expand(false);
      if (o->expand()) {
        return Bad(at,
                   "expand=true is not served: it makes the output larger than the input "
                   "(by an amount that depends on the angle drawn), which a batch of one "
                   "shape cannot hold; leave expand false");
      }
      if (absl::Status st = Center(o->center(), at); !st.ok()) return st;
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomAffine: {
      v1::RandomAffine* o = op->mutable_random_affine();
      if (o->degrees().empty()) return Bad(at, "degrees is required");
      if (absl::Status st = AngleRange(o->mutable_degrees(), "degrees", false, at); !st.ok()) {
        return st;
      }
      const Floats& t = o->translate();
      if (!t.empty()) {
        if (t.size() != 2) {
          return Bad(at, "translate should be a sequence of length 2 ([fx, fy]), not ",
                     absl::StrCat(t.size()), " values");
        }
        for (float v : t) {
          if (!(v >= 0 && v <= 1)) {
            return Bad(at, "translate ", ListText(t),
                       ": translation values should be between 0 and 1");
          }
        }
      }
      const Floats& sc = o->scale();
      if (!sc.empty()) {
        if (sc.size() != 2) {
          return Bad(at, "scale should be a sequence of length 2 ([min, max]), not ",
                     absl::StrCat(sc.size()), " values");
        }
        for (float v : sc) {
          if (!(v > 0) || !std::isfinite(v)) {
            return Bad(at, "scale ", ListText(sc),
                       ": scale values should be positive (and finite)");
          }
        }
        if (!(sc.Get(0) <= sc.Get(1))) {
          return Bad(at, "scale ", ListText(sc), " must be [min, max] with min <= max");
        }
      }
      if (!o->shear().empty()) {
        if (absl::Status st = AngleRange(o->mutable_shear(), "shear", true, at); !st.ok()) {
          return st;
        }
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = Center(o->center(), at); !st.ok()) return st;
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomPosterize: {
      v1::RandomPosterize* o = op->mutable_random_posterize();
      if (!o->has_bits()) return Bad(at, "bits is required");
      if (o->bits() > kMaxPosterizeBits) {
        return Bad(at, "The number of bits should be between 0 and 8. Got ",
                   absl::StrCat(o->bits()));
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomSolarize: {
      v1::RandomSolarize* o = op->mutable_random_solarize();
      if (!o->has_threshold()) return Bad(at, "threshold is required");
      if (!std::isfinite(o->threshold())) {
        return Bad(at, "threshold must be finite, not ", DoubleText(o->threshold()));
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomAdjustSharpness: {
      v1::RandomAdjustSharpness* o = op->mutable_random_adjust_sharpness();
      if (!o->has_sharpness_factor()) return Bad(at, "sharpness_factor is required");
      if (!(o->sharpness_factor() >= 0) || !std::isfinite(o->sharpness_factor())) {
        return Bad(at, "sharpness_factor (", FloatText(o->sharpness_factor()),
                   ") is not non-negative (and finite).");
      }
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomAutocontrast:
      return Probability(op->mutable_random_autocontrast(), kDefaultRandomP, at);
    case Op::kRandomEqualize:
      return Probability(op->mutable_random_equalize(), kDefaultRandomP, at);
    case Op::kRandomInvert:
      return Probability(op->mutable_random_invert(), kDefaultRandomP, at);
    case Op::kAutoAugment: {
      v1::AutoAugment* o = op->mutable_auto_augment();
      if (o->policy().empty()) o->set_policy(std::string(kAutoAugmentPolicies[0]));
      if (std::find(std::begin(kAutoAugmentPolicies), std::end(kAutoAugmentPolicies),
                    o->policy()) == std::end(kAutoAugmentPolicies)) {
        std::vector<absl::string_view> names;
        for (std::string_view n : kAutoAugmentPolicies) names.push_back(AV(n));
        return Bad(at, "policy '", o->policy(), "' is not a valid AutoAugmentPolicy: use ",
                   absl::StrJoin(names, ", "));
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandAugment: {
      v1::RandAugment* o = op->mutable_rand_augment();
      if (!o->has_num_ops()) o->set_num_ops(kDefaultRandAugmentOps);
      if (!o->has_magnitude()) o->set_magnitude(kDefaultRandAugmentMagnitude);
      if (!o->has_num_magnitude_bins()) o->set_num_magnitude_bins(kDefaultMagnitudeBins);
      if (o->num_ops() > kMaxPolicyOps) {
        return Bad(at, "num_ops must be at most ", absl::StrCat(kMaxPolicyOps),
                   " (stoker's limit), not ", absl::StrCat(o->num_ops()));
      }
      if (absl::Status st = MagnitudeBins(o->num_magnitude_bins(), at); !st.ok()) return st;
      if (o->magnitude() >= o->num_magnitude_bins()) {
        return Bad(at, "magnitude ", absl::StrCat(o->magnitude()),
                   " must be below num_magnitude_bins ", absl::StrCat(o->num_magnitude_bins()),
                   " (it indexes the magnitude bins)");
      }
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kTrivialAugmentWide: {
      v1::TrivialAugmentWide* o = op->mutable_trivial_augment_wide();
      if (!o->has_num_magnitude_bins()) o->set_num_magnitude_bins(kDefaultMagnitudeBins);
      if (absl::Status st = MagnitudeBins(o->num_magnitude_bins(), at); !st.ok()) return st;
      if (absl::Status st =
              AffineInterpolation(o->mutable_interpolation(), kDefaultAffineInterpolation, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kAugMix: {
      v1::AugMix* o = op->mutable_aug_mix();
      if (!o->has_severity()) o->set_severity(kDefaultAugMixSeverity);
      if (!o->has_mixture_width()) o->set_mixture_width(kDefaultAugMixWidth);
      // torchvision draws each chain's depth for any chain_depth <= 0.
      if (!o->has_chain_depth() || o->chain_depth() <= 0) o->set_chain_depth(kDefaultAugMixDepth);
      if (!o->has_alpha()) o->set_alpha(kDefaultAugMixAlpha);
      if (!o->has_all_ops()) o->set_all_ops(kDefaultAugMixAllOps);
      if (o->severity() < 1 || o->severity() > kMaxAugMixSeverity) {
        return Bad(at, "The severity must be between [1, ", absl::StrCat(kMaxAugMixSeverity),
                   "]. Got ", absl::StrCat(o->severity()), " instead.");
      }
      if (o->mixture_width() < 1 || o->mixture_width() > kMaxAugMixWidth) {
        return Bad(at, "mixture_width must be within 1..", absl::StrCat(kMaxAugMixWidth),
                   " (stoker's limit), not ", absl::StrCat(o->mixture_width()));
      }
      if (o->chain_depth() != -1 && o->chain_depth() > static_cast<int32_t>(kMaxAugMixDepth)) {
        return Bad(at, "chain_depth must be <= 0 (each chain's depth drawn from 1..3) or within 1..",
                   absl::StrCat(kMaxAugMixDepth), " (stoker's limit), not ",
                   absl::StrCat(o->chain_depth()));
      }
      if (!(o->alpha() > 0) || !std::isfinite(o->alpha())) {
        return Bad(at,
                   "alpha must be positive and finite (the Dirichlet and Beta "
                   "concentration), not ",
                   FloatText(o->alpha()));
      }
      if (absl::Status st = AffineInterpolation(o->mutable_interpolation(), kBilinear, at);
          !st.ok()) {
        return st;
      }
      return FillValues(o->mutable_fill(), at);
    }
    case Op::kRandomErasing: {
      v1::RandomErasing* o = op->mutable_random_erasing();
      if (!o->has_p()) o->set_p(kDefaultRandomP);
      if (!(o->p() >= 0 && o->p() <= 1)) {
        return Bad(at, "p ", FloatText(o->p()),
                   ": Random erasing probability should be between 0 and 1");
      }
      if (absl::Status st = EraseScale(o->mutable_scale(), at); !st.ok()) return st;
      if (absl::Status st = PositiveRange(o->mutable_ratio(), kDefaultEraseRatio, at + "ratio");
          !st.ok()) {
        return st;
      }
      Floats* value = o->mutable_value();
      if (o->value_random()) {
        if (!value->empty()) {
          return Bad(at, "value ", ListText(*value),
                     " and value_random both given: give one ('random' is normal noise)");
        }
        return absl::OkStatus();
      }
      if (value->empty()) value->Add(kDefaultEraseValue);
      if (value->size() == 1) value->Resize(3, float{value->Get(0)});
      if (value->size() != 3) {
        return Bad(at,
                   "If value is a sequence, it should have either a single value or 3 (number "
                   "of input channels), not ",
                   absl::StrCat(value->size()));
      }
      for (float v : *value) {
        if (!std::isfinite(v)) return Bad(at, "value ", ListText(*value), " must be finite");
      }
      return absl::OkStatus();
    }
    case Op::kRandomApply: {
      v1::RandomApply* o = op->mutable_random_apply();
      if (absl::Status st = FillComposed(o->mutable_transforms(), at); !st.ok()) return st;
      return Probability(o, kDefaultRandomP, at);
    }
    case Op::kRandomChoice: {
      v1::RandomChoice* o = op->mutable_random_choice();
      if (absl::Status st = FillComposed(o->mutable_transforms(), at); !st.ok()) return st;
      if (o->p().empty()) {  // torchvision's p=None: equal chances
        for (int k = 0; k < o->transforms_size(); ++k) o->add_p(1.0f);
      }
      if (o->p_size() != o->transforms_size()) {
        return Bad(at, "p has ", absl::StrCat(o->p_size()), " weights for ",
                   absl::StrCat(o->transforms_size()), " transforms: give one each, or none");
      }
      double sum = 0;
      for (float w : o->p()) {
        if (!(w >= 0) || !std::isfinite(w)) {
          return Bad(at, "p ", ListText(o->p()), ": each weight must be >= 0 (and finite)");
        }
        sum += w;
      }
      if (!(sum > 0)) return Bad(at, "p ", ListText(o->p()), ": the weights must sum to > 0");
      return absl::OkStatus();
    }
    case Op::kRandomOrder:
      return FillComposed(op->mutable_random_order()->mutable_transforms(), at);
    case Op::OP_NOT_SET:
      break;
  }
  return Bad(at.substr(0, at.find(' ')), ": no op set (an op is one of ",
             FieldNames(Op::descriptor(), /*json_names=*/true), ")");
}


// The most steps `op` makes for one sample (image's DrawSteps; kMaxSteps).
uint32_t MostSteps(const Op& op) {
  switch (op.op_case()) {
    case Op::kRandomResizedCrop:
    case Op::kCenterCrop:
      return 2;  // a crop (or pad) and a resize (or crop)
    case Op::kRandomCrop:
      return 3;  // two pads and a crop
    case Op::kRandomPhotometricDistort:
      return 5;  // four adjustments and a channel shuffle
    case Op::kAutoAugment:
      return 2;
    case Op::kRandAugment:
      return op.rand_augment().num_ops();
    case Op::kTrivialAugmentWide:
      return 1;
    case Op::kAugMix: {
      const int32_t depth = op.aug_mix().chain_depth();
      return 2 + op.aug_mix().mixture_width() * (1 + (depth > 0 ? depth : 3));
    }
    case Op::kRandomApply:
    case Op::kRandomChoice:
    case Op::kRandomOrder: {
      uint32_t steps = 0;
      for (const Op& child : *ComposedOps(op)) steps += MostSteps(child);
      return steps;
    }
    default:
      return 1;
  }
}

// The preset's ops, each with no parameter set.
void AddPresetOps(const Preset& p, PipelineSpec* s) {
  for (int i = 0; i < p.op_count; ++i) {
    Op* op = s->add_ops();
    op->GetReflection()->MutableMessage(op, Op::descriptor()->FindFieldByNumber(p.ops[i]));
  }
}

// A preset's op list given in full or to be made; its size's default.
absl::Status ExpandPreset(const Preset& p, PipelineSpec* s) {
  if (s->ops_size() == 0) {
    AddPresetOps(p, s);
  } else {
    bool same = s->ops_size() == p.op_count;
    for (int i = 0; same && i < p.op_count; ++i) same = s->ops(i).op_case() == p.ops[i];
    if (!same) {
      return Bad("pipeline '", p.name,
                 "' and ops both given: give a preset or an op list (a "
                 "spec holds both only when the ops are the preset's own, ",
                 PresetOps(p), ")");
    }
  }
  if (p.crop_op < 0) return absl::OkStatus();  // decode: no size of its own
  // The preset's size: `size`, else its crop's, else the default.
  Sizes side = s->size();
  std::string what = "size";
  if (side.empty()) {
    const Op& crop = s->ops(p.crop_op);
    side = crop.has_random_resized_crop() ? crop.random_resized_crop().size()
                                          : crop.center_crop().size();
    what = absl::StrCat("ops[", p.crop_op, "] ", OpName(crop), ": size");
  }
  if (side.empty()) side.Add(kDefaultPresetSide);
  if (absl::Status st = OutputSize(&side, what, true); !st.ok()) return st;
  Op* crop = s->mutable_ops(p.crop_op);
  Sizes* crop_size = crop->has_random_resized_crop()
                         ? crop->mutable_random_resized_crop()->mutable_size()
                         : crop->mutable_center_crop()->mutable_size();
  if (crop_size->empty()) *crop_size = side;
  if (p.resize_op >= 0) {
    Sizes* resize = s->mutable_ops(p.resize_op)->mutable_resize()->mutable_size();
    if (resize->empty()) {
      const uint32_t shorter = std::min(side.Get(0), side.Get(1));
      resize->Add(static_cast<uint32_t>(std::lround(kEvalResizeNum * shorter / kEvalResizeDen)));
    }
  }
  return absl::OkStatus();
}

absl::Status Channels(Floats* v, const float (&def)[3], absl::string_view what) {
  if (v->empty()) v->Add(def, def + 3);
  if (v->size() == 1) v->Resize(3, float{v->Get(0)});
  if (v->size() != 3) {
    return Bad(what, " must be 1 value or 3 (R, G, B), not ", absl::StrCat(v->size()), " values");
  }
  for (float x : *v) {
    if (!std::isfinite(x)) return Bad(what, " ", ListText(*v), " must be finite");
  }
  return absl::OkStatus();
}

absl::Status FillOutput(v1::Output* o) {
  if (o->dtype().empty()) o->set_dtype(std::string(kDefaultDType));
  const uint32_t dtype = DTypeFromName(o->dtype());
  if (dtype == 0) {
    return Bad("dtype '", o->dtype(), "' is unknown: use ", NameList(kDTypes, std::size(kDTypes)));
  }
  if (o->layout().empty()) {
    o->set_layout(std::string(dtype == ring::kUint8 ? kDefaultUint8Layout : kDefaultFloatLayout));
  }
  if (LayoutFromName(o->layout()) == 0) {
    return Bad("layout '", o->layout(), "' is unknown: use ",
               NameList(kLayouts, std::size(kLayouts)));
  }
  if (absl::Status st = Channels(o->mutable_mean(), kImageNetMean, "mean"); !st.ok()) return st;
  if (absl::Status st = Channels(o->mutable_std(), kImageNetStd, "std"); !st.ok()) return st;
  for (float x : o->std()) {
    if (x == 0) return Bad("std ", ListText(o->std()), " must not hold 0");
  }
  return absl::OkStatus();
}

// The output size the ops make: fixed by the last op that fixes it, or
// varying (no such op, or a Resize([s]) after it).
struct OutputShape {
  bool fixed = false;
  uint32_t height = 0, width = 0;
  int op = -1;  // the op that fixed it or made it vary; -1: the decoded image
};

OutputShape ShapeOf(const PipelineSpec& s) {
  OutputShape shape;
  for (int i = 0; i < s.ops_size(); ++i) {
    const Op& op = s.ops(i);
    const Sizes* size = nullptr;
    switch (op.op_case()) {
      case Op::kRandomResizedCrop:
        size = &op.random_resized_crop().size();
        break;
      case Op::kCenterCrop:
        size = &op.center_crop().size();
        break;
      case Op::kRandomCrop:
        size = &op.random_crop().size();
        break;
      case Op::kResize:
        size = &op.resize().size();
        if (size->size() == 1) {
          shape = OutputShape{false, 0, 0, i};
          continue;
        }
        break;
      case Op::kRandomResize:
      case Op::kRandomShortestSize:
      case Op::kRandomZoomOut:
      case Op::kRandomIouCrop:
        shape = OutputShape{false, 0, 0, i};
        continue;
      case Op::kPad:  // a fixed size grows by the padding (4 values: filled)
        if (shape.fixed && op.pad().padding_size() == 4) {
          const auto& pad = op.pad().padding();
          shape = OutputShape{true, shape.height + pad.Get(1) + pad.Get(3),
                              shape.width + pad.Get(0) + pad.Get(2), i};
        }
        continue;
      default:
        continue;
    }
    shape = OutputShape{true, size->Get(0), size->Get(1), i};
  }
  return shape;
}

}  // namespace

// ---------------------------------------------------------------------------

absl::StatusOr<PipelineSpec> SpecFromKeywordsJson(std::string_view keywords_json) {
  pb::Struct kw;
  if (absl::Status st = ParseObject(AV(keywords_json), &kw, "pipeline keywords"); !st.ok())
    return st;
  // A keyword given as null is not given (Python's None).
  std::vector<std::string> keys;
  for (const auto& [k, v] : kw.fields()) {
    if (v.kind_case() != pb::Value::kNullValue) keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end());
  const auto given = [&](absl::string_view k) {
    return std::binary_search(keys.begin(), keys.end(), std::string(k));
  };

  PipelineSpec spec;
  const pb::Descriptor* sd = PipelineSpec::descriptor();
  const pb::Descriptor* od = v1::Output::descriptor();
  const pb::Value* height = nullptr;
  const pb::Value* width = nullptr;
  std::vector<std::string> preset_keywords;
  for (const std::string& k : keys) {
    const pb::Value& v = kw.fields().at(k);
    absl::Status st;
    if (k == kPresetKeyword) {
      st = SetField(&spec, sd->FindFieldByName("preset"), v, k);
    } else if (k == kOpsKeyword) {
      st = SetField(&spec, sd->FindFieldByName("ops"), v, k);
    } else if (k == "height" || k == "width") {
      if (v.kind_case() != pb::Value::kNumberValue) {
        return Bad(k, " must be a whole number >= 0, not ", ValueText(v));
      }
      (k == "height" ? height : width) = &v;
    } else if (std::find(std::begin(kSpecKeywords), std::end(kSpecKeywords), k) !=
               std::end(kSpecKeywords)) {
      st = SetField(&spec, sd->FindFieldByName(k), v, k);
    } else if (const pb::FieldDescriptor* f = od->FindFieldByName(k); f != nullptr) {
      st = SetField(spec.mutable_output(), f, v, k);
    } else if (std::any_of(std::begin(kPresetKeywords), std::end(kPresetKeywords),
                           [&](const PresetKeyword& p) { return p.keyword == k; })) {
      preset_keywords.push_back(k);
    } else {
      std::vector<std::string> known = {std::string(kPresetKeyword), std::string(kOpsKeyword)};
      for (absl::string_view s : kSpecKeywords) known.emplace_back(s);
      known.emplace_back("height");
      known.emplace_back("width");
      for (const PresetKeyword& p : kPresetKeywords) {
        if (std::find(known.begin(), known.end(), p.keyword) == known.end()) {
          known.emplace_back(p.keyword);
        }
      }
      for (int i = 0; i < od->field_count(); ++i) known.push_back(od->field(i)->name());
      return Bad("unknown pipeline keyword '", k, "'; the keywords are ",
                 absl::StrJoin(known, ", "));
    }
    if (!st.ok()) return st;
  }
  if ((height == nullptr) != (width == nullptr)) {
    return Bad(height == nullptr ? "width" : "height", " given without ",
               height == nullptr ? "height" : "width", ": give both, or size");
  }
  if (height != nullptr) {
    if (given("size")) return Bad("height/width and size both given: give one");
    const pb::FieldDescriptor* f = sd->FindFieldByName("size");
    if (absl::Status st = AddValue(&spec, f, *height, "height"); !st.ok()) return st;
    if (absl::Status st = AddValue(&spec, f, *width, "width"); !st.ok()) return st;
  }
  const bool has_ops = given(kOpsKeyword);
  if (has_ops && given(kPresetKeyword)) {
    return Bad("pipeline and ops both given: give a preset or an op list");
  }
  // An empty op list is the image as decoded: the preset with no op (an
  // empty spec would be the default preset).
  if (has_ops && spec.ops().empty()) spec.set_preset(std::string(kNoOpPreset));
  if (preset_keywords.empty()) return spec;

  // A keyword of a preset's op: the preset expanded into its list, with
  // that parameter set (Effective fills the rest).
  if (has_ops) {
    return Bad(preset_keywords[0], " beside ops: set the parameter in the op list instead (",
               preset_keywords[0], " is a keyword of the presets)");
  }
  const std::string name = spec.preset().empty() ? std::string(kDefaultPreset) : spec.preset();
  const Preset* preset = FindPreset(name);
  if (preset == nullptr) return UnknownPreset(name);
  spec.set_preset(name);
  AddPresetOps(*preset, &spec);
  for (const std::string& k : preset_keywords) {
    const PresetKeyword* use = nullptr;
    std::vector<std::string> uses;
    for (const PresetKeyword& p : kPresetKeywords) {
      if (p.keyword != k) continue;
      if (p.preset == name) use = &p;
      uses.push_back(absl::StrCat(OpName(p.op), "'s ", p.field, " in the ", p.preset, " preset"));
    }
    if (use == nullptr) {
      return Bad(k, " does not apply to pipeline '", name, "' (it sets ", absl::StrJoin(uses, ", "),
                 ")");
    }
    int index = 0;
    while (preset->ops[index] != use->op) ++index;
    Op* op = spec.mutable_ops(index);
    pb::Message* params =
        op->GetReflection()->MutableMessage(op, Op::descriptor()->FindFieldByNumber(use->op));
    const pb::FieldDescriptor* f =
        params->GetDescriptor()->FindFieldByName(std::string(use->field));
    if (absl::Status st = SetField(params, f, kw.fields().at(k), k); !st.ok()) return st;
    if (use->field == "interpolation") {
      const pb::Value& v = kw.fields().at(k);
      if (absl::Status st = CheckInterpolation(v.string_value(), k); !st.ok()) return st;
    }
  }
  return spec;
}

namespace {

// The ops of `s` (a pipeline's, or a view's held in a PipelineSpec) filled
// in and checked, with its size: the output size its ops make, checked
// against the one given. `where` starts every message ("" or "views[1].").
// `flat` gets the ops counted as lowering flattens them.
absl::Status EffectiveOps(PipelineSpec* ps, const std::string& where, int* flat_ops) {
  PipelineSpec& s = *ps;
  int flat = s.ops_size();  // a composition's ops count too
  for (const Op& op : s.ops()) {
    if (const auto* held = ComposedOps(op)) flat += held->size();
  }
  *flat_ops = flat;
  for (int i = 0; i < s.ops_size(); ++i) {
    Op* op = s.mutable_ops(i);
    if (absl::Status st = FillOp(op, absl::StrCat(where, "ops[", i, "] ", OpName(*op), ": "));
        !st.ok()) {
      return st;
    }
  }
  uint32_t steps = 0;
  for (const Op& op : s.ops()) steps += MostSteps(op);
  if (steps > kMaxSteps) {
    return Bad(where, "ops: these ops can make up to ", absl::StrCat(steps),
               " steps per sample, more than the ", absl::StrCat(kMaxSteps),
               " a sample may have (AugMix makes 2 + mixture_width * (1 + chain_depth), "
               "RandAugment num_ops): make them fewer or smaller");
  }
  // RandomErasing works on the output tensor: nothing but RandomErasing after it.
  for (int i = 0, erasing = -1; i < s.ops_size(); ++i) {
    if (s.ops(i).has_random_erasing()) {
      if (erasing < 0) erasing = i;
    } else if (erasing >= 0) {
      return Bad(where, "ops[", i, "] ", OpName(s.ops(i)), " after ", where, "ops[", erasing,
                 "] RandomErasing: RandomErasing works on the output tensor (torchvision's runs "
                 "after ToTensor() and Normalize()), so it must come after every other op");
    }
  }
  if (absl::Status st = OutputSize(s.mutable_size(), absl::StrCat(where, "size"), false);
      !st.ok()) {
    return st;
  }
  const OutputShape shape = ShapeOf(s);
  if (shape.fixed) {
    const std::string maker = absl::StrCat(where, "ops[", shape.op, "] ", OpName(s.ops(shape.op)));
    Sizes made;
    made.Add(shape.height);
    made.Add(shape.width);
    if (!s.size().empty() && (s.size(0) != shape.height || s.size(1) != shape.width)) {
      return Bad(where, "size ", ListText(s.size()), " disagrees with the output of ", maker, ", ",
                 ListText(made), ": leave size out or make them agree");
    }
    // A Resize([h, w]) may reach 65500 a side; the output's own limits hold.
    if (absl::Status st = OutputSize(&made, absl::StrCat("the output of ", maker), true);
        !st.ok()) {
      return st;
    }
    *s.mutable_size() = made;
  }
  return absl::OkStatus();
}

// The views of a multi-view spec (PipelineSpec.views) filled in and checked.
absl::Status EffectiveViews(PipelineSpec* s) {
  if (!s->preset().empty() || !s->ops().empty() || !s->size().empty()) {
    return Bad("views and ", !s->preset().empty() ? "pipeline" : !s->ops().empty() ? "ops" : "size",
               " both given: with views, each view has its ops and size (views[i].ops, "
               "views[i].size) and the pipeline has none");
  }
  int flat = 0;
  uint32_t count = 0;
  for (int v = 0; v < s->views_size(); ++v) {
    v1::View* view = s->mutable_views(v);
    const std::string where = absl::StrCat("views[", v, "].");
    PipelineSpec one;
    *one.mutable_ops() = std::move(*view->mutable_ops());
    *one.mutable_size() = std::move(*view->mutable_size());
    int view_flat = 0;
    if (absl::Status st = EffectiveOps(&one, where, &view_flat); !st.ok()) return st;
    flat += view_flat;
    if (one.size().empty()) {
      return Bad(where, "size: this view's ops make images of varying size, and a view has one "
                 "size: end its ops with a crop or a Resize([h, w]), or give its size");
    }
    for (int i = 0; i < one.ops_size(); ++i) {
      if (one.ops(i).has_random_iou_crop()) {
        return Bad(where, "ops[", i, "] RandomIoUCrop: it crops around a sample's boxes, and "
                   "views serve datasets of images and labels");
      }
    }
    *view->mutable_ops() = std::move(*one.mutable_ops());
    *view->mutable_size() = std::move(*one.mutable_size());
    if (view->count() == 0) view->set_count(1);
    count += std::min<uint32_t>(view->count(), kMaxViews + 1);
  }
  if (count > kMaxViews) {
    return Bad("views: ", absl::StrCat(count), " views in all (counting each view's count), more "
               "than the ", absl::StrCat(kMaxViews), " a sample may have");
  }
  if (flat > static_cast<int>(kMaxOps)) {
    return Bad("views: ", absl::StrCat(flat), " ops over all views (counting those in "
               "compositions), more than the ", absl::StrCat(kMaxOps), " a pipeline may have");
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------

absl::StatusOr<PipelineSpec> Effective(const PipelineSpec& spec) {
  PipelineSpec s = spec;
  if (s.views().empty() && (!s.preset().empty() || s.ops().empty())) {
    if (s.preset().empty()) s.set_preset(std::string(kDefaultPreset));
    const Preset* p = FindPreset(s.preset());
    if (p == nullptr) return UnknownPreset(s.preset());
    if (absl::Status st = ExpandPreset(*p, &s); !st.ok()) return st;
  }
  if (s.views_size() > 0) {
    if (absl::Status st = EffectiveViews(&s); !st.ok()) return st;
  } else {
    int flat = 0;
    if (absl::Status st = EffectiveOps(&s, "", &flat); !st.ok()) return st;
    if (flat > static_cast<int>(kMaxOps)) {
      return Bad("ops: ", absl::StrCat(flat),
                 " ops (counting those in compositions), more than the ", absl::StrCat(kMaxOps),
                 " a pipeline may have");
    }
  }
  if (absl::Status st = FillOutput(s.mutable_output()); !st.ok()) return st;
  const auto check_erasing = [&s](const pb::RepeatedPtrField<Op>& ops,
                                  const std::string& where) -> absl::Status {
    for (int i = 0; i < ops.size(); ++i) {
      if (!ops.Get(i).has_random_erasing()) continue;
      if (absl::Status st =
              CheckEraseForOutput(ops.Get(i).random_erasing(), DTypeFromName(s.output().dtype()),
                                  absl::StrCat(where, "ops[", i, "] RandomErasing: "));
          !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status st = check_erasing(s.ops(), ""); !st.ok()) return st;
  for (int v = 0; v < s.views_size(); ++v) {
    if (absl::Status st = check_erasing(s.views(v).ops(), absl::StrCat("views[", v, "]."));
        !st.ok()) {
      return st;
    }
  }
  if (s.max_decode_pixels() == 0) {
    s.set_max_decode_pixels(s.size().empty() && s.views().empty() ? kDefaultAnySizeMaxDecodePixels
                                                                  : kDefaultMaxDecodePixels);
  }
  if (s.max_decode_pixels() > kMaxMaxDecodePixels) {
    return Bad("max_decode_pixels must be within 1..", absl::StrCat(kMaxMaxDecodePixels), ", not ",
               absl::StrCat(s.max_decode_pixels()));
  }
  if (!s.size().empty() && uint64_t{s.size(0)} * s.size(1) > s.max_decode_pixels()) {
    return Bad("max_decode_pixels ", absl::StrCat(s.max_decode_pixels()),
               " is below the output's ", ListText(s.size()),
               ": raise it, or make the output smaller");
  }
  for (int v = 0; v < s.views_size(); ++v) {
    const auto& size = s.views(v).size();
    if (uint64_t{size.Get(0)} * size.Get(1) > s.max_decode_pixels()) {
      return Bad("max_decode_pixels ", absl::StrCat(s.max_decode_pixels()), " is below views[", v,
                 "]'s ", ListText(size), ": raise it, or make the view smaller");
    }
  }
  if (s.mask_dtype().empty()) s.set_mask_dtype("uint8");
  if (s.mask_dtype() != "uint8" && s.mask_dtype() != "uint16") {
    return Bad("mask_dtype must be \"uint8\" or \"uint16\", not \"", s.mask_dtype(), "\"");
  }
  if (!s.has_mask_fill()) s.set_mask_fill(kDefaultMaskFill);
  const uint32_t most = s.mask_dtype() == "uint8" ? 255 : 65535;
  if (s.mask_fill() > most) {
    return Bad("mask_fill ", absl::StrCat(s.mask_fill()), " does not fit mask_dtype ",
               s.mask_dtype(), " (at most ", absl::StrCat(most), ")");
  }
  if (!(s.box_min_size() >= 0 && s.box_min_size() <= 65500)) {
    return Bad("box_min_size must be within 0..65500 pixels, not ", FloatText(s.box_min_size()));
  }
  if (!(s.box_min_visibility() >= 0 && s.box_min_visibility() <= 1)) {
    return Bad("box_min_visibility must be within 0..1, not ",
               FloatText(s.box_min_visibility()));
  }
  return s;
}

namespace {

void AppendValue(const pb::Message& m, const pb::FieldDescriptor* f, int i, std::string* out,
                 bool json);

// The set fields of `m`, as "name=value, ..." (Describe) or a JSON object.
void AppendFields(const pb::Message& m, std::string* out, bool json) {
  std::vector<const pb::FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  const bool op = m.GetDescriptor() == Op::descriptor();
  if (json) *out += '{';
  for (size_t k = 0; k < fields.size(); ++k) {
    const pb::FieldDescriptor* f = fields[k];
    if (k > 0) *out += json ? "," : ", ";
    const std::string& name = op ? f->json_name() : f->name();
    absl::StrAppend(out, json ? JsonQuote(name) : name, json ? ":" : "=");
    if (!f->is_repeated()) {
      AppendValue(m, f, -1, out, json);
      continue;
    }
    *out += '[';
    const int n = m.GetReflection()->FieldSize(m, f);
    for (int i = 0; i < n; ++i) {
      if (i > 0) *out += json ? "," : ", ";
      AppendValue(m, f, i, out, json);
    }
    *out += ']';
  }
  if (json) *out += '}';
}

void AppendValue(const pb::Message& m, const pb::FieldDescriptor* f, int i, std::string* out,
                 bool json) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(out, rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(out, rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT32:
      absl::StrAppend(out, rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      const float v = rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
      absl::StrAppend(out, json && !std::isfinite(v) ? JsonQuote(FloatText(v)) : FloatText(v));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
      absl::StrAppend(out, json && !std::isfinite(v) ? JsonQuote(DoubleText(v)) : DoubleText(v));
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      absl::StrAppend(out,
                      (rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f)) ? "true" : "false");
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING: {
      const std::string v = rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
      absl::StrAppend(out, json ? JsonQuote(v) : v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      AppendFields(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f), out, json);
      break;
    default:
      break;  // no other type in PipelineSpec
  }
}

}  // namespace

const pb::RepeatedPtrField<Op>* ComposedOps(const Op& op) {
  switch (op.op_case()) {
    case Op::kRandomApply:
      return &op.random_apply().transforms();
    case Op::kRandomChoice:
      return &op.random_choice().transforms();
    case Op::kRandomOrder:
      return &op.random_order().transforms();
    default:
      return nullptr;
  }
}

std::string Describe(const PipelineSpec& spec) {
  std::string out;
  const auto append_ops = [&out](const pb::RepeatedPtrField<Op>& ops) {
    for (int i = 0; i < ops.size(); ++i) {
      const Op& op = ops.Get(i);
      const pb::FieldDescriptor* f = Op::descriptor()->FindFieldByNumber(op.op_case());
      absl::StrAppend(&out, i > 0 ? ", " : "", OpName(op), "(");
      if (f != nullptr) AppendFields(op.GetReflection()->GetMessage(op, f), &out, false);
      out += ')';
    }
  };
  if (!spec.views().empty()) {
    // "views: 2 x [RandomResizedCrop(...), ...] -> 224x224, 8 x [...] -> 96x96 -> uint8 nhwc"
    out += "views: ";
    for (int v = 0; v < spec.views_size(); ++v) {
      const v1::View& view = spec.views(v);
      absl::StrAppend(&out, v > 0 ? ", " : "", std::max<uint32_t>(1, view.count()), " x [");
      append_ops(view.ops());
      absl::StrAppend(&out, "]", view.size().empty() ? "" : " -> ",
                      absl::StrJoin(view.size(), "x"));
    }
  } else if (!spec.preset().empty() || spec.ops().empty()) {
    absl::StrAppend(&out, spec.preset().empty() ? kDefaultPreset : spec.preset(),
                    spec.ops().empty() ? "" : ": ");
  }
  append_ops(spec.ops());
  out += " ->";
  const v1::Output& o = spec.output();
  if (!spec.views().empty()) {
  } else if (!spec.size().empty()) {
    absl::StrAppend(&out, " ", absl::StrJoin(spec.size(), "x"));
  } else if (!o.dtype().empty()) {
    out += " any size";  // an effective spec: its output is filled in
  }
  if (!o.dtype().empty()) absl::StrAppend(&out, " ", o.dtype());
  if (!o.layout().empty()) absl::StrAppend(&out, " ", o.layout());
  if (!o.dtype().empty() && DTypeFromName(o.dtype()) != ring::kUint8) {
    if (!o.mean().empty()) absl::StrAppend(&out, " mean=", ListText(o.mean()));
    if (!o.std().empty()) absl::StrAppend(&out, " std=", ListText(o.std()));
  }
  const uint64_t default_pixels = spec.size().empty() && spec.views().empty()
                                      ? kDefaultAnySizeMaxDecodePixels
                                      : kDefaultMaxDecodePixels;
  if (spec.max_decode_pixels() != 0 && spec.max_decode_pixels() != default_pixels) {
    absl::StrAppend(&out, ", max_decode_pixels=", spec.max_decode_pixels());
  }
  if (spec.exact_decode()) out += ", exact_decode";
  if (spec.apply_exif_orientation()) out += ", apply_exif_orientation";
  return out;
}

std::string ToJson(const PipelineSpec& spec) {
  std::string out;
  AppendFields(spec, &out, /*json=*/true);
  return out;
}

absl::StatusOr<PipelineSpec> SpecFromJson(std::string_view spec_json) {
  pb::Struct s;
  if (absl::Status st = ParseObject(AV(spec_json), &s, "the pipeline spec"); !st.ok()) return st;
  PipelineSpec spec;
  if (absl::Status st = FillMessage(&spec, s, ""); !st.ok()) return st;
  return spec;
}

uint32_t DTypeFromName(std::string_view name) {
  for (const Named& n : kDTypes) {
    if (n.name == AV(name)) return n.value;
  }
  return 0;
}

std::string_view DTypeName(uint32_t ring_dtype) {
  for (const Named& n : kDTypes) {
    if (n.value == ring_dtype) return SV(n.name);
  }
  return "";
}

uint32_t LayoutFromName(std::string_view name) {
  for (const Named& n : kLayouts) {
    if (n.name == AV(name)) return n.value;
  }
  return 0;
}

std::string_view LayoutName(uint32_t ring_layout) {
  for (const Named& n : kLayouts) {
    if (n.value == ring_layout) return SV(n.name);
  }
  return "";
}

}  // namespace stoker::pipeline
