#include "pipeline/volume_pipeline.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hash64.h"
#include "google/protobuf/util/json_util.h"
#include "server/volume/orientation.h"
#include "stoker/ring_layout.h"

namespace stoker {
namespace {

using volume::AugmentKind;
using volume::PrefixOp;

constexpr uint64_t kMaxPatchBytes = uint64_t{1} << 30;  // one sample's fields

class Planner {
 public:
  explicit Planner(const v1::VolumeSpec& spec) : spec_(spec), effective_(spec) {}

  absl::StatusOr<VolumePlan> Plan() {
    volume::VolumeTaskParams& p = plan_.params;
    int patch_at = -1;
    for (int i = 0; i < spec_.ops_size(); ++i) {
      at_ = i;
      v1::VolumeOp* op = effective_.mutable_ops(i);
      const bool prefix = IsPrefix(*op), patch = IsPatch(*op);
      if (op->op_case() == v1::VolumeOp::OP_NOT_SET) return Bad("an op with no name (give one of MONAI's transforms)");
      if (prefix && patch_at >= 0) {
        return Bad(absl::StrCat("a deterministic transform after the patch op (ops[", patch_at,
                                "]): the deterministic ones run once per volume, before it"));
      }
      if (!prefix && !patch && patch_at < 0) {
        return Bad("a random transform before the patch op: it runs on each patch, after "
                   "RandCropByPosNegLabel or RandSpatialCrop");
      }
      if (patch && patch_at >= 0) return Bad(absl::StrCat("a second patch op (ops[", patch_at, "] is one)"));
      absl::Status st = prefix ? Prefix(op) : patch ? Patch(op) : Augment(op);
      if (!st.ok()) return st;
      if (patch) patch_at = i;
    }
    at_ = -1;
    if (patch_at < 0) {
      return Bad("no patch op: give RandCropByPosNegLabel or RandSpatialCrop (a batch's patches "
                 "share one size)");
    }
    if (effective_.dtype().empty()) effective_.set_dtype("float32");
    if (effective_.label_dtype().empty()) effective_.set_label_dtype("uint8");
    if (effective_.channels() == 0) effective_.set_channels(1);
    const std::string& d = effective_.dtype();
    p.dtype = d == "float32" ? uint32_t{ring::kFloat32} : d == "float16" ? uint32_t{ring::kFloat16}
              : d == "bfloat16" ? uint32_t{ring::kBFloat16} : 0u;
    if (p.dtype == 0) return Bad(absl::StrCat("dtype '", d, "': \"float32\", \"float16\" or \"bfloat16\""));
    const std::string& ld = effective_.label_dtype();
    p.label_dtype = ld == "uint8" ? uint32_t{ring::kUint8} : ld == "int64" ? uint32_t{ring::kInt64} : 0u;
    if (p.label_dtype == 0) return Bad(absl::StrCat("label_dtype '", ld, "': \"uint8\" or \"int64\""));
    if (effective_.channels() > volume::kMaxVolumeChannels) {
      return Bad(absl::StrCat("channels ", effective_.channels(), ": at most ",
                              volume::kMaxVolumeChannels));
    }
    p.channels = effective_.channels();
    if (effective_.spacing_size() != 0) {
      if (effective_.spacing_size() != 3) return Bad("spacing: 3 values (mm), for .npy volumes");
      for (int a = 0; a < 3; ++a) {
        p.spacing[a] = effective_.spacing(a);
        if (!(p.spacing[a] > 0) || !std::isfinite(p.spacing[a])) return Bad("spacing: each > 0");
      }
    }
    if (volume::PatchImageBytes(p) > kMaxPatchBytes) {
      return Bad(absl::StrCat("num_samples x channels x the patch is ", volume::PatchImageBytes(p),
                              " bytes a volume, over the ", kMaxPatchBytes, " a sample may have"));
    }
    for (const auto& [keys, out, what] :
         {std::tuple{&effective_.array_keys(), &p.array_keys, "array_keys"},
          std::tuple{&effective_.label_array_keys(), &p.label_array_keys, "label_array_keys"}}) {
      std::string joined;
      for (const std::string& k : *keys) {
        if (k.empty() || k.find_first_of(std::string("\n\0", 2)) != std::string::npos) {
          return Bad(absl::StrCat(what, ": '", k, "' is not an array's name"));
        }
        joined += (joined.empty() ? "" : "\n") + k;
      }
      if (joined.size() >= sizeof(*out)) {
        return Bad(absl::StrCat(what, ": ", joined.size(), " bytes of names, at most ",
                                sizeof(*out) - 1));
      }
      std::memcpy(*out, joined.data(), joined.size());
    }
    // The entries' key: the prefix, the spacing given to .npy files and
    // the .npz arrays read.
    p.recipe_hash = volume::RecipeHash(volume::RecipeOf(p));
    if (p.spacing[0] != 0) p.recipe_hash = Hash64(p.spacing, sizeof(p.spacing), p.recipe_hash);
    if (p.array_keys[0] != 0 || p.label_array_keys[0] != 0) {
      p.recipe_hash = Hash64(p.array_keys, sizeof(p.array_keys), p.recipe_hash);
      p.recipe_hash = Hash64(p.label_array_keys, sizeof(p.label_array_keys), p.recipe_hash);
    }
    plan_.effective = effective_;
    return plan_;
  }

 private:
  static bool IsPrefix(const v1::VolumeOp& op) {
    switch (op.op_case()) {
      case v1::VolumeOp::kOrientation: case v1::VolumeOp::kSpacing:
      case v1::VolumeOp::kScaleIntensityRange: case v1::VolumeOp::kNormalizeIntensity:
      case v1::VolumeOp::kCropForeground:
        return true;
      default:
        return false;
    }
  }
  static bool IsPatch(const v1::VolumeOp& op) {
    return op.op_case() == v1::VolumeOp::kRandCropByPosNegLabel ||
           op.op_case() == v1::VolumeOp::kRandSpatialCrop;
  }

  absl::Status Bad(const std::string& why) const {
    static constexpr const char* kNames[] = {
        "", "Orientation", "Spacing", "ScaleIntensityRange", "NormalizeIntensity",
        "CropForeground", "RandCropByPosNegLabel", "RandSpatialCrop", "RandFlip",
        "RandRotate90", "RandScaleIntensity", "RandShiftIntensity", "RandGaussianNoise",
        "RandAdjustContrast", "RandAffine"};
    if (at_ < 0) return absl::InvalidArgumentError(absl::StrCat("volumes: ", why));
    const int c = static_cast<int>(spec_.ops(at_).op_case());
    return absl::InvalidArgumentError(absl::StrCat("volumes: ops[", at_, "] ",
                                                   c >= 0 && c < 15 ? kNames[c] : "?",
                                                   c == 0 ? "" : ": ", why));
  }

  // 1 or 3 values, each > 0 (or >= `least`), into out[3].
  template <typename T, typename Field>
  absl::Status Triple(const char* what, Field* f, T least, T out[3]) const {
    if (f->size() == 1) {
      const T v = f->Get(0);
      f->Add(v);
      f->Add(v);
    }
    if (f->size() != 3) return Bad(absl::StrCat(what, " takes 1 or 3 values, not ", f->size()));
    for (int a = 0; a < 3; ++a) {
      const T v = f->Get(a);
      if (!(v >= least) || !std::isfinite(static_cast<double>(v))) {
        return Bad(absl::StrCat(what, " ", static_cast<double>(v), ": each must be >= ",
                                static_cast<double>(least)));
      }
      out[a] = v;
    }
    return absl::OkStatus();
  }

  absl::Status CheckProb(double prob) const {
    if (!(prob >= 0 && prob <= 1)) return Bad(absl::StrCat("prob ", prob, " must be in [0, 1]"));
    return absl::OkStatus();
  }

  // A (min, max) range given as 1 value v (-> (-v, v), or (lo_single, v)
  // with `single_lo`) or 2.
  absl::Status Range(const char* what, google::protobuf::RepeatedField<double>* f, bool symmetric,
                     double single_lo, double* lo, double* hi) const {
    if (f->size() == 1) {
      const double v = f->Get(0);
      f->Clear();
      f->Add(symmetric ? -std::fabs(v) : single_lo);
      f->Add(symmetric ? std::fabs(v) : v);
    }
    if (f->size() != 2 || !(f->Get(0) <= f->Get(1)) || !std::isfinite(f->Get(0)) ||
        !std::isfinite(f->Get(1))) {
      return Bad(absl::StrCat(what, " takes one number or [min, max] with min <= max"));
    }
    *lo = f->Get(0);
    *hi = f->Get(1);
    return absl::OkStatus();
  }

  absl::Status Prefix(v1::VolumeOp* op) {
    volume::VolumeTaskParams& p = plan_.params;
    if (p.prefix_count == volume::kMaxPrefixOps) {
      return Bad(absl::StrCat("more than ", volume::kMaxPrefixOps, " deterministic transforms"));
    }
    PrefixOp o;
    switch (op->op_case()) {
      case v1::VolumeOp::kOrientation: {
        o.kind = PrefixOp::Kind::kOrientation;
        v1::Orientation* m = op->mutable_orientation();
        if (m->axcodes().empty()) m->set_axcodes("RAS");
        if (!volume::FromAxisCodes(m->axcodes()).ok()) {
          return Bad(absl::StrCat("axcodes '", m->axcodes(),
                                  "': three codes, one of each of R/L, A/P, S/I (\"RAS\")"));
        }
        o.axcodes = m->axcodes();
        break;
      }
      case v1::VolumeOp::kSpacing: {
        o.kind = PrefixOp::Kind::kSpacing;
        double pix[3];
        if (absl::Status s = Triple("pixdim", op->mutable_spacing()->mutable_pixdim(), 1e-6, pix);
            !s.ok()) {
          return s;
        }
        for (int a = 0; a < 3; ++a) o.pixdim[a] = pix[a];
        break;
      }
      case v1::VolumeOp::kScaleIntensityRange: {
        o.kind = PrefixOp::Kind::kScaleIntensityRange;
        const v1::ScaleIntensityRange& m = op->scale_intensity_range();
        o.scale.a_min = m.a_min();
        o.scale.a_max = m.a_max();
        if (m.has_b_min()) o.scale.b_min = m.b_min();
        if (m.has_b_max()) o.scale.b_max = m.b_max();
        o.scale.clip = m.clip();
        if (!std::isfinite(m.a_min()) || !std::isfinite(m.a_max())) return Bad("a_min and a_max must be numbers");
        break;
      }
      case v1::VolumeOp::kNormalizeIntensity: {
        o.kind = PrefixOp::Kind::kNormalizeIntensity;
        const v1::NormalizeIntensity& m = op->normalize_intensity();
        if (m.subtrahend_size() > static_cast<int>(volume::kMaxVolumeChannels) ||
            m.divisor_size() > static_cast<int>(volume::kMaxVolumeChannels)) {
          return Bad(absl::StrCat("subtrahend and divisor: at most ", volume::kMaxVolumeChannels, " values"));
        }
        if (!m.channel_wise() && (m.subtrahend_size() > 1 || m.divisor_size() > 1)) {
          return Bad("subtrahend and divisor hold one value unless channel_wise");
        }
        o.normalize.subtrahend.assign(m.subtrahend().begin(), m.subtrahend().end());
        o.normalize.divisor.assign(m.divisor().begin(), m.divisor().end());
        o.normalize.nonzero = m.nonzero();
        o.normalize.channel_wise = m.channel_wise();
        break;
      }
      case v1::VolumeOp::kCropForeground: {
        o.kind = PrefixOp::Kind::kCropForeground;
        v1::CropForeground* m = op->mutable_crop_foreground();
        if (m->margin_size() == 0) m->add_margin(0);
        if (m->k_divisible_size() == 0) m->add_k_divisible(1);
        int64_t margin[3], k[3];
        if (absl::Status s = Triple<int64_t>("margin", m->mutable_margin(), 0, margin); !s.ok()) return s;
        if (absl::Status s = Triple<int64_t>("k_divisible", m->mutable_k_divisible(), 1, k); !s.ok()) return s;
        for (int a = 0; a < 3; ++a) {
          o.crop.margin[a] = margin[a];
          o.crop.k_divisible[a] = k[a];
        }
        o.crop.allow_smaller = m->allow_smaller();
        break;
      }
      default:
        return Bad("not a deterministic transform");
    }
    p.prefix[p.prefix_count++] = volume::ParamsOf(o);
    return absl::OkStatus();
  }

  absl::Status Patch(v1::VolumeOp* op) {
    volume::VolumeTaskParams& p = plan_.params;
    if (op->has_rand_crop_by_pos_neg_label()) {
      v1::RandCropByPosNegLabel* m = op->mutable_rand_crop_by_pos_neg_label();
      p.patch_kind = static_cast<uint32_t>(volume::PatchKind::kPosNeg);
      if (absl::Status s = Triple<int64_t>("spatial_size", m->mutable_spatial_size(), 1, p.patch); !s.ok()) {
        return s;
      }
      if (!m->has_pos()) m->set_pos(1);
      if (!m->has_neg()) m->set_neg(1);
      if (!(m->pos() >= 0) || !(m->neg() >= 0) || m->pos() + m->neg() == 0 ||
          !std::isfinite(m->pos() + m->neg())) {
        return Bad("pos and neg must be >= 0 and not both 0");
      }
      if (m->num_samples() == 0) m->set_num_samples(1);
      p.pos = m->pos();
      p.neg = m->neg();
      p.num_samples = m->num_samples();
      p.image_threshold = m->image_threshold();
    } else {
      v1::RandSpatialCrop* m = op->mutable_rand_spatial_crop();
      p.patch_kind = static_cast<uint32_t>(volume::PatchKind::kSpatialCrop);
      if (absl::Status s = Triple<int64_t>("roi_size", m->mutable_roi_size(), 1, p.patch); !s.ok()) {
        return s;
      }
      if (!m->has_random_center()) m->set_random_center(true);
      p.random_center = m->random_center();
      p.num_samples = 1;
    }
    if (p.num_samples > volume::kMaxPatches) {
      return Bad(absl::StrCat("num_samples ", p.num_samples, ": at most ", volume::kMaxPatches));
    }
    if (!std::isfinite(p.image_threshold)) return Bad("image_threshold must be a number");
    return absl::OkStatus();
  }

  absl::Status Augment(v1::VolumeOp* op) {
    volume::VolumeTaskParams& p = plan_.params;
    if (p.augment_count == volume::kMaxAugmentOps) {
      return Bad(absl::StrCat("more than ", volume::kMaxAugmentOps, " random transforms"));
    }
    volume::AugmentOpParams a;
    absl::Status st;
    switch (op->op_case()) {
      case v1::VolumeOp::kRandFlip: {
        v1::RandFlip* m = op->mutable_rand_flip();
        a.kind = static_cast<uint32_t>(AugmentKind::kFlip);
        if (!m->has_prob()) m->set_prob(0.1);
        a.prob = m->prob();
        if (m->spatial_axis_size() == 0) {
          for (int x = 0; x < 3; ++x) m->add_spatial_axis(x);
        }
        for (int64_t x : m->spatial_axis()) {
          if (x < -3 || x > 2) return Bad(absl::StrCat("spatial_axis ", x, ": 0, 1 or 2"));
          a.axes |= 1u << ((x + 3) % 3);
        }
        break;
      }
      case v1::VolumeOp::kRandRotate90: {
        v1::RandRotate90* m = op->mutable_rand_rotate90();
        a.kind = static_cast<uint32_t>(AugmentKind::kRotate90);
        if (!m->has_prob()) m->set_prob(0.1);
        if (!m->has_max_k()) m->set_max_k(3);
        if (m->spatial_axes_size() == 0) {
          m->add_spatial_axes(0);
          m->add_spatial_axes(1);
        }
        a.prob = m->prob();
        if (m->max_k() < 1 || m->max_k() > 3) return Bad(absl::StrCat("max_k ", m->max_k(), ": 1, 2 or 3"));
        a.max_k = static_cast<int32_t>(m->max_k());
        if (m->spatial_axes_size() != 2) return Bad("spatial_axes: two axes");
        a.a = static_cast<int32_t>((m->spatial_axes(0) + 3) % 3);
        a.b = static_cast<int32_t>((m->spatial_axes(1) + 3) % 3);
        if (m->spatial_axes(0) < -3 || m->spatial_axes(0) > 2 || m->spatial_axes(1) < -3 ||
            m->spatial_axes(1) > 2 || a.a == a.b) {
          return Bad("spatial_axes: two different axes of 0, 1, 2");
        }
        if (p.patch[a.a] != p.patch[a.b] && a.max_k != 2) {
          return Bad(absl::StrCat("the patch is ", p.patch[a.a], " and ", p.patch[a.b],
                                  " along axes ", a.a, " and ", a.b,
                                  ": a quarter turn would change its shape (square the plane, or "
                                  "max_k 2)"));
        }
        break;
      }
      case v1::VolumeOp::kRandScaleIntensity: {
        v1::RandScaleIntensity* m = op->mutable_rand_scale_intensity();
        a.kind = static_cast<uint32_t>(AugmentKind::kScaleIntensity);
        if (!m->has_prob()) m->set_prob(0.1);
        a.prob = m->prob();
        st = Range("factors", m->mutable_factors(), true, 0, &a.lo, &a.hi);
        break;
      }
      case v1::VolumeOp::kRandShiftIntensity: {
        v1::RandShiftIntensity* m = op->mutable_rand_shift_intensity();
        a.kind = static_cast<uint32_t>(AugmentKind::kShiftIntensity);
        if (!m->has_prob()) m->set_prob(0.1);
        a.prob = m->prob();
        st = Range("offsets", m->mutable_offsets(), true, 0, &a.lo, &a.hi);
        break;
      }
      case v1::VolumeOp::kRandGaussianNoise: {
        v1::RandGaussianNoise* m = op->mutable_rand_gaussian_noise();
        a.kind = static_cast<uint32_t>(AugmentKind::kGaussianNoise);
        if (!m->has_prob()) m->set_prob(0.1);
        if (!m->has_std()) m->set_std(0.1);
        a.prob = m->prob();
        a.mean = m->mean();
        a.std = m->std();
        if (!(a.std >= 0) || !std::isfinite(a.std + a.mean)) return Bad("std must be >= 0 and mean a number");
        break;
      }
      case v1::VolumeOp::kRandAdjustContrast: {
        v1::RandAdjustContrast* m = op->mutable_rand_adjust_contrast();
        a.kind = static_cast<uint32_t>(AugmentKind::kAdjustContrast);
        if (!m->has_prob()) m->set_prob(0.1);
        if (m->gamma_size() == 0) {
          m->add_gamma(0.5);
          m->add_gamma(4.5);
        }
        a.prob = m->prob();
        // MONAI: one value g is (0.5, g), and must be > 0.5.
        if (m->gamma_size() == 1 && !(m->gamma(0) > 0.5)) return Bad("gamma: one value must be > 0.5");
        st = Range("gamma", m->mutable_gamma(), false, 0.5, &a.lo, &a.hi);
        if (st.ok() && !(a.lo > 0)) return Bad("gamma must be > 0");
        break;
      }
      case v1::VolumeOp::kRandAffine: {
        v1::RandAffine* m = op->mutable_rand_affine();
        a.kind = static_cast<uint32_t>(AugmentKind::kAffine);
        if (!m->has_prob()) m->set_prob(0.1);
        if (m->padding_mode().empty()) m->set_padding_mode("reflection");
        a.prob = m->prob();
        const std::string& pad = m->padding_mode();
        a.pad = pad == "reflection" ? 0u : pad == "border" ? 1u : pad == "zeros" ? 2u : 3u;
        if (a.pad == 3) return Bad(absl::StrCat("padding_mode '", pad, "': \"reflection\", \"border\" or \"zeros\""));
        if (m->rotate_range_size() > 3 || m->scale_range_size() > 3) {
          return Bad("rotate_range and scale_range: one number a spatial axis, at most 3");
        }
        for (int x = 0; x < m->rotate_range_size(); ++x) {
          a.rotate[x] = std::fabs(m->rotate_range(x));
          if (!std::isfinite(a.rotate[x])) return Bad("rotate_range must be numbers");
        }
        for (int x = 0; x < m->scale_range_size(); ++x) {
          a.scale[x] = std::fabs(m->scale_range(x));
          if (!(a.scale[x] < 1)) return Bad("scale_range: each below 1 (a factor 1 + uniform[-s, s) stays > 0)");
        }
        a.rotate_count = static_cast<uint32_t>(m->rotate_range_size());
        a.scale_count = static_cast<uint32_t>(m->scale_range_size());
        break;
      }
      default:
        return Bad("not a random transform");
    }
    if (!st.ok()) return st;
    if (absl::Status s = CheckProb(a.prob); !s.ok()) return s;
    p.augment[p.augment_count++] = a;
    return absl::OkStatus();
  }

  const v1::VolumeSpec& spec_;
  v1::VolumeSpec effective_;
  VolumePlan plan_;
  int at_ = -1;
};

}  // namespace

absl::StatusOr<VolumePlan> PlanVolumePipeline(const v1::VolumeSpec& spec) {
  return Planner(spec).Plan();
}

absl::StatusOr<v1::VolumeSpec> VolumeSpecFromJson(std::string_view json) {
  v1::VolumeSpec spec;
  const auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &spec);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "volumes: not a VolumeSpec: ", std::string(st.message().data(), st.message().size())));
  }
  return spec;
}

std::string DescribeVolumes(const v1::VolumeSpec& spec) {
  std::string names, patch = "?";
  uint32_t samples = 1;
  for (const v1::VolumeOp& op : spec.ops()) {
    const auto* field = op.GetDescriptor()->FindFieldByNumber(static_cast<int>(op.op_case()));
    if (field == nullptr) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ", field->json_name());
    const google::protobuf::RepeatedField<int64_t>* size =
        op.has_rand_crop_by_pos_neg_label() ? &op.rand_crop_by_pos_neg_label().spatial_size()
        : op.has_rand_spatial_crop()        ? &op.rand_spatial_crop().roi_size()
                                            : nullptr;
    if (size != nullptr) patch = absl::StrJoin(*size, ", ");
    if (op.has_rand_crop_by_pos_neg_label()) samples = std::max(1u, op.rand_crop_by_pos_neg_label().num_samples());
  }
  return absl::StrCat(names, " -> ", samples, " x [", std::max(1u, spec.channels()), ", ", patch,
                      "] ", spec.dtype().empty() ? "float32" : spec.dtype(), ", labels ",
                      spec.label_dtype().empty() ? "uint8" : spec.label_dtype());
}

std::string VolumeSpecToJson(const v1::VolumeSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = false;  // the ops' MONAI names (json_name)
  (void)google::protobuf::util::MessageToJsonString(spec, &out, o);
  return out;
}

}  // namespace stoker
