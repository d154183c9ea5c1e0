#include "tools/image_tool_steps.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "pipeline/pipeline_spec.h"
#include "server/image/ops/policy.h"
#include "stoker/v1/stoker.pb.h"

namespace stoker::image {

namespace pb = google::protobuf;

std::string InterpolationName(Interpolation i) {
  return i == Interpolation::kBilinear  ? "bilinear"
         : i == Interpolation::kNearest ? "nearest"
         : i == Interpolation::kBicubic ? "bicubic"
                                        : "antialias";
}

// ColorJitter's adjustment names: the fields of stoker.v1.ColorJitter, whose
// numbers are JitterIndex + 1.
std::string JitterName(uint32_t j) {
  const pb::FieldDescriptor* f =
      v1::ColorJitter::descriptor()->FindFieldByNumber(static_cast<int>(j) + 1);
  return f != nullptr ? f->name() : "unknown";
}

std::string StepsJson(const SampleSteps& steps) {
  std::string out = "[";
  for (uint32_t i = 0; i < steps.count; ++i) {
    const Step& s = steps.steps[i];
    absl::StrAppend(&out, i > 0 ? "," : "", "{\"kind\":", JsonString(StepKindName(s.kind)),
                    ",\"op\":", s.op);
    switch (s.kind) {
      case StepKind::kCrop:
        absl::StrAppend(&out, ",\"top\":", s.top, ",\"left\":", s.left, ",\"height\":", s.height,
                        ",\"width\":", s.width);
        if (s.box_centers != 0) {
          absl::StrAppend(&out, ",\"box_centers\":true,\"min_iou\":", FloatJson(s.min_iou));
        }
        break;
      case StepKind::kChannelPermute:
        absl::StrAppend(&out, ",\"permutation\":[", s.permutation[0], ",", s.permutation[1], ",",
                        s.permutation[2], "]");
        break;
      case StepKind::kResize:
        absl::StrAppend(&out, ",\"height\":", s.height, ",\"width\":", s.width, ",\"antialias\":",
                        s.interpolation == Interpolation::kBilinear ? "false" : "true");
        if (s.interpolation == Interpolation::kBicubic) {
          absl::StrAppend(&out, ",\"interpolation\":\"bicubic\"");
        }
        break;
      case StepKind::kPad: {
        const auto mode = static_cast<uint32_t>(s.padding_mode);
        absl::StrAppend(
            &out, ",\"padding\":[", s.pad[0], ",", s.pad[1], ",", s.pad[2], ",", s.pad[3],
            "],\"padding_mode\":",
            JsonString(mode < std::size(pipeline::kPaddingModes) ? pipeline::kPaddingModes[mode]
                                                                 : "unknown"),
            ",\"fill\":[", s.fill[0], ",", s.fill[1], ",", s.fill[2], "]");
        break;
      }
      case StepKind::kColorJitter: {
        absl::StrAppend(&out, ",\"order\":[");
        for (uint32_t k = 0; k < s.jitter_count; ++k) {
          absl::StrAppend(&out, k > 0 ? "," : "", JsonString(JitterName(s.jitter_order[k])));
        }
        absl::StrAppend(&out, "]");
        for (uint32_t k = 0; k < s.jitter_count; ++k) {
          const uint32_t j = s.jitter_order[k];
          absl::StrAppend(&out, ",", JsonString(JitterName(j)), ":", FloatJson(s.factor[j]));
        }
        break;
      }
      case StepKind::kGaussianBlur:
        absl::StrAppend(&out, ",\"kernel_size\":[", s.kernel_x, ",", s.kernel_y,
                        "],\"sigma\":", FloatJson(s.sigma));
        break;
      case StepKind::kAffine:
      case StepKind::kRotate:
        absl::StrAppend(&out, ",\"angle\":", FloatJson(s.angle));
        if (s.kind == StepKind::kAffine) {
          absl::StrAppend(&out, ",\"translate\":[", s.translate[0], ",", s.translate[1],
                          "],\"scale\":", FloatJson(s.affine_scale), ",\"shear\":[",
                          DoubleJson(s.shear[0]), ",", DoubleJson(s.shear[1]), "]");
        }
        if (s.has_center != 0) {
          absl::StrAppend(&out, ",\"center\":[", DoubleJson(s.center[0]), ",",
                          DoubleJson(s.center[1]), "]");
        }
        absl::StrAppend(&out, ",\"interpolation\":", JsonString(InterpolationName(s.interpolation)),
                        ",\"fill\":[", s.fill[0], ",", s.fill[1], ",", s.fill[2], "]");
        break;
      case StepKind::kBoxBlur:
        absl::StrAppend(&out, ",\"radius\":", FloatJson(s.sigma));
        break;
      case StepKind::kElastic:
        absl::StrAppend(&out, ",\"alpha\":[", FloatJson(s.elastic[0]), ",", FloatJson(s.elastic[1]),
                        "],\"sigma\":[", FloatJson(s.elastic[2]), ",", FloatJson(s.elastic[3]),
                        "],\"noise_seed\":\"", s.noise_seed, "\",\"interpolation\":",
                        JsonString(InterpolationName(s.interpolation)), ",\"fill\":[", s.fill[0],
                        ",", s.fill[1], ",", s.fill[2], "]");
        break;
      case StepKind::kPerspective:
        absl::StrAppend(&out, ",\"corners\":[", absl::StrJoin(s.corners, ","),
                        "],\"interpolation\":", JsonString(InterpolationName(s.interpolation)),
                        ",\"fill\":[", s.fill[0], ",", s.fill[1], ",", s.fill[2], "]");
        break;
      case StepKind::kPosterize:
        absl::StrAppend(&out, ",\"bits\":", s.bits);
        break;
      case StepKind::kSolarize:
        absl::StrAppend(&out, ",\"threshold\":", DoubleJson(s.threshold));
        break;
      case StepKind::kSharpness:
        absl::StrAppend(&out, ",\"factor\":", FloatJson(s.factor[0]));
        break;
      case StepKind::kMixBegin:
      case StepKind::kMixChain:
        absl::StrAppend(&out, ",\"weight\":", FloatJson(s.mix_weight));
        break;
      case StepKind::kErase:
        absl::StrAppend(&out, ",\"top\":", s.top, ",\"left\":", s.left, ",\"height\":", s.height,
                        ",\"width\":", s.width);
        if (s.erase_random != 0) {
          absl::StrAppend(&out, ",\"random\":true,\"noise_seed\":\"", s.noise_seed, "\"");
        } else {
          absl::StrAppend(&out, ",\"value\":[", FloatJson(s.erase_value[0]), ",",
                          FloatJson(s.erase_value[1]), ",", FloatJson(s.erase_value[2]), "]");
        }
        break;
      default:
        break;
    }
    if (s.from_policy != 0) {
      absl::StrAppend(&out, ",\"aug\":", JsonString(AugOpName(s.aug)), ",\"bin\":", s.aug_bin,
                      ",\"magnitude\":", FloatJson(s.aug_magnitude));
    }
    if (s.tensor_kernels != 0) absl::StrAppend(&out, ",\"tensor\":true");
    if (s.tensor_fill != 0) absl::StrAppend(&out, ",\"tensor_fill\":true");
    out += "}";
  }
  return out + "]";
}

// --steps: the JSON StepsJson writes, back to steps.
bool ParseSteps(const std::string& json, SampleSteps* steps) {
  pb::Value list;
  if (!pb::util::JsonStringToMessage(json, &list).ok() || !list.has_list_value()) {
    std::cerr << "--steps is not a JSON list\n";
    return false;
  }
  const auto& values = list.list_value().values();
  if (values.size() > static_cast<int>(kMaxSteps)) {
    std::cerr << "--steps: at most " << kMaxSteps << " steps\n";
    return false;
  }
  steps->count = 0;
  for (int i = 0; i < values.size(); ++i) {
    const std::string at = absl::StrCat("--steps[", i, "]");
    if (!values[i].has_struct_value()) {
      std::cerr << at << " is not an object\n";
      return false;
    }
    const auto& f = values[i].struct_value().fields();
    bool ok = true;
    auto get = [&](const std::string& name) -> const pb::Value* {
      auto it = f.find(name);
      if (it == f.end()) {
        std::cerr << at << ": no \"" << name << "\"\n";
        ok = false;
        return nullptr;
      }
      return &it->second;
    };
    auto number = [&](const std::string& name) -> double {
      const pb::Value* v = get(name);
      return v != nullptr ? v->number_value() : 0;
    };
    auto uint = [&](double d) { return static_cast<uint32_t>(std::clamp(d, 0.0, 4294967295.0)); };
    // A JSON number past float's range is refused (the cast would be undefined).
    auto f32 = [&](double d) -> float {
      if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
        std::cerr << at << ": " << d << " is beyond float's range\n";
        ok = false;
        return 0.0f;
      }
      return static_cast<float>(d);
    };
    auto numbers = [&](const std::string& name, size_t n, double* out) {
      const pb::Value* v = get(name);
      if (v == nullptr) return;
      if (!v->has_list_value() || static_cast<size_t>(v->list_value().values_size()) != n) {
        std::cerr << at << ": \"" << name << "\" must be a list of " << n << "\n";
        ok = false;
        return;
      }
      for (size_t k = 0; k < n; ++k)
        out[k] = v->list_value().values(static_cast<int>(k)).number_value();
    };
    Step& s = steps->steps[steps->count++];
    s = Step();
    // The geometric steps' "interpolation" (nearest or bilinear; `def` when
    // absent) and "fill" (3 values, default 0).
    auto resampling_and_fill = [&](const char* def) {
      const std::string interp =
          f.count("interpolation") != 0 ? f.at("interpolation").string_value() : def;
      if (interp != "nearest" && interp != "bilinear") {
        std::cerr << at << ": interpolation must be nearest or bilinear\n";
        return false;
      }
      s.interpolation = interp == "nearest" ? Interpolation::kNearest : Interpolation::kBilinear;
      double fill[3] = {0, 0, 0};
      if (f.count("fill") != 0) numbers("fill", 3, fill);
      for (int k = 0; k < 3; ++k) s.fill[k] = static_cast<uint8_t>(std::clamp(fill[k], 0.0, 255.0));
      return true;
    };
    // A 64-bit seed, as a decimal string (a JSON number would lose bits).
    auto noise_seed = [&]() {
      const pb::Value* seed = get("noise_seed");
      if (seed == nullptr) return false;
      const std::string& text = seed->string_value();
      char* end = nullptr;
      errno = 0;
      s.noise_seed = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0' ||
          errno != 0) {
        std::cerr << at << ": \"noise_seed\" must be a decimal string\n";
        return false;
      }
      return true;
    };
    const pb::Value* kind = get("kind");
    if (kind == nullptr) return false;
    bool known = false;
    for (uint32_t k = 1; k <= static_cast<uint32_t>(kLastStepKind); ++k) {
      if (kind->string_value() == StepKindName(static_cast<StepKind>(k))) {
        s.kind = static_cast<StepKind>(k);
        known = true;
      }
    }
    if (!known) {
      std::cerr << at << ": unknown kind " << kind->string_value() << "\n";
      return false;
    }
    if (f.count("op") != 0) s.op = uint(f.at("op").number_value());
    switch (s.kind) {
      case StepKind::kCrop:
        s.top = uint(number("top")), s.left = uint(number("left"));
        s.height = uint(number("height")), s.width = uint(number("width"));
        if (f.count("box_centers") != 0 && f.at("box_centers").bool_value()) {
          s.box_centers = 1;
          s.min_iou = f.count("min_iou") != 0 ? f32(f.at("min_iou").number_value()) : 0.0f;
        }
        break;
      case StepKind::kChannelPermute: {
        double q[3] = {0, 1, 2};
        numbers("permutation", 3, q);
        for (int k = 0; k < 3; ++k) s.permutation[k] = uint(q[k]);
        break;
      }
      case StepKind::kResize: {
        s.height = uint(number("height")), s.width = uint(number("width"));
        const pb::Value* aa = f.count("antialias") != 0 ? &f.at("antialias") : nullptr;
        s.interpolation = aa == nullptr || aa->bool_value() ? Interpolation::kAntialias
                                                            : Interpolation::kBilinear;
        if (f.count("interpolation") != 0 && f.at("interpolation").string_value() == "bicubic") {
          s.interpolation = Interpolation::kBicubic;
        }
        break;
      }
      case StepKind::kPad: {
        double pad[4] = {0, 0, 0, 0}, fill[3] = {0, 0, 0};
        numbers("padding", 4, pad);
        if (f.count("fill") != 0) numbers("fill", 3, fill);
        for (int k = 0; k < 4; ++k) s.pad[k] = uint(pad[k]);
        for (int k = 0; k < 3; ++k)
          s.fill[k] = static_cast<uint8_t>(std::clamp(fill[k], 0.0, 255.0));
        const std::string mode =
            f.count("padding_mode") != 0 ? f.at("padding_mode").string_value() : "constant";
        const auto it =
            std::find(std::begin(pipeline::kPaddingModes), std::end(pipeline::kPaddingModes), mode);
        if (it == std::end(pipeline::kPaddingModes)) {
          std::cerr << at << ": unknown padding_mode " << mode << "\n";
          return false;
        }
        s.padding_mode = static_cast<PadMode>(it - std::begin(pipeline::kPaddingModes));
        break;
      }
      case StepKind::kColorJitter: {
        const pb::Value* order = get("order");
        if (order == nullptr || !order->has_list_value() || order->list_value().values_size() > 4) {
          std::cerr << at << ": \"order\" must be a list of at most 4 names\n";
          return false;
        }
        for (const pb::Value& name : order->list_value().values()) {
          uint32_t j = 0;
          while (j < 4 && JitterName(j) != name.string_value()) ++j;
          if (j == 4) {
            std::cerr << at << ": unknown adjustment " << name.string_value() << "\n";
            return false;
          }
          s.jitter_order[s.jitter_count++] = j;
          s.factor[j] = f32(number(JitterName(j)));
        }
        break;
      }
      case StepKind::kGaussianBlur: {
        double k[2] = {0, 0};
        numbers("kernel_size", 2, k);
        s.kernel_x = uint(k[0]), s.kernel_y = uint(k[1]);
        s.sigma = f32(number("sigma"));
        break;
      }
      case StepKind::kAffine:
      case StepKind::kRotate: {
        s.angle = f32(number("angle"));
        if (s.kind == StepKind::kAffine) {
          double t[2] = {0, 0};
          if (f.count("translate") != 0) numbers("translate", 2, t);
          for (int k = 0; k < 2; ++k) {
            s.translate[k] = static_cast<int32_t>(std::clamp(t[k], -2147483648.0, 2147483647.0));
          }
          s.affine_scale = f.count("scale") != 0 ? f32(number("scale")) : 1.0f;
          if (f.count("shear") != 0) numbers("shear", 2, s.shear);
        }
        if (f.count("center") != 0) {
          double c[2] = {0, 0};
          numbers("center", 2, c);
          s.has_center = 1;
          s.center[0] = c[0], s.center[1] = c[1];
        }
        if (!resampling_and_fill("nearest")) return false;
        break;
      }
      case StepKind::kBoxBlur:
        s.sigma = f32(number("radius"));
        break;
      case StepKind::kElastic: {
        double alpha[2] = {0, 0}, sigma[2] = {0, 0};
        numbers("alpha", 2, alpha);
        numbers("sigma", 2, sigma);
        for (int k = 0; k < 2; ++k) s.elastic[k] = f32(alpha[k]), s.elastic[2 + k] = f32(sigma[k]);
        if (!noise_seed()) return false;
        if (!resampling_and_fill("bilinear")) return false;
        break;
      }
      case StepKind::kPerspective: {
        double c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        numbers("corners", 8, c);
        for (int k = 0; k < 8; ++k) {
          s.corners[k] = static_cast<int32_t>(std::clamp(c[k], -2147483648.0, 2147483647.0));
        }
        if (!resampling_and_fill("bilinear")) return false;
        break;
      }
      case StepKind::kPosterize:
        s.bits = uint(number("bits"));
        break;
      case StepKind::kSolarize:
        s.threshold = number("threshold");
        break;
      case StepKind::kSharpness:
        s.factor[0] = f32(number("factor"));
        break;
      case StepKind::kMixBegin:
      case StepKind::kMixChain:
        s.mix_weight = f32(number("weight"));
        break;
      case StepKind::kErase: {
        s.top = uint(number("top")), s.left = uint(number("left"));
        s.height = uint(number("height")), s.width = uint(number("width"));
        if (f.count("random") != 0 && f.at("random").bool_value()) {
          s.erase_random = 1;
          if (!noise_seed()) return false;
        } else {
          double v[3] = {0, 0, 0};
          numbers("value", 3, v);
          for (int k = 0; k < 3; ++k) s.erase_value[k] = f32(v[k]);
        }
        break;
      }
      default:
        break;
    }
    if (f.count("aug") != 0) {
      const std::string name = f.at("aug").string_value();
      uint32_t a = 0;
      while (a <= static_cast<uint32_t>(AugOp::kInvert) &&
             name != AugOpName(static_cast<AugOp>(a))) {
        ++a;
      }
      if (a > static_cast<uint32_t>(AugOp::kInvert)) {
        std::cerr << at << ": unknown aug " << name << "\n";
        return false;
      }
      s.from_policy = 1;
      s.aug = static_cast<AugOp>(a);
      s.aug_bin =
          f.count("bin") != 0
              ? static_cast<int32_t>(std::clamp(f.at("bin").number_value(), -1.0, 2147483647.0))
              : -1;
      s.aug_magnitude = f.count("magnitude") != 0 ? f32(f.at("magnitude").number_value()) : 0.0f;
    }
    auto flag = [&](const char* name) {
      return f.count(name) != 0 && f.at(name).bool_value() ? 1u : 0u;
    };
    s.tensor_kernels = flag("tensor");
    s.tensor_fill = flag("tensor_fill");
    if (!ok) return false;
  }
  return true;
}

}  // namespace stoker::image
