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
#include "pipeline/op_defaults.h"
#include "pipeline/op_table.h"
#include "pipeline/spec_text.h"
#include "stoker/ring_layout.h"

namespace stoker::pipeline {
namespace {

// The contract's own helpers (spec_text.h, op_defaults.h).
using namespace internal;  // NOLINT(build/namespaces)
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

std::string NameList(const Named* table, size_t n) {
  std::vector<absl::string_view> names;
  for (size_t i = 0; i < n; ++i) names.push_back(table[i].name);
  return absl::StrJoin(names, ", ");
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
