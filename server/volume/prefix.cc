#include "server/volume/prefix.h"

#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hash64.h"
#include "server/volume/orientation.h"
#include "server/volume/spacing.h"

namespace stoker::volume {
namespace {

absl::Status BadOp(const std::string& text, const char* takes) {
  return absl::InvalidArgumentError(absl::StrCat("prefix op '", text, "': ", takes));
}

void AppendDouble(std::string* s, double v) {
  char b[8];
  std::memcpy(b, &v, 8);
  s->append(b, 8);
}

// The volumes of an image as one FloatVolume, their channels in order.
absl::StatusOr<FloatVolume> Channels(const std::vector<Volume>& image, const std::string& name) {
  if (image.empty()) return absl::InvalidArgumentError(name + ": a sample without an image");
  absl::StatusOr<FloatVolume> out = ToFloatVolume(image[0]);
  if (!out.ok()) return out.status();
  for (size_t n = 1; n < image.size(); ++n) {
    const Volume& v = image[n];
    if (v.shape != image[0].shape) {
      return absl::DataLossError(absl::StrCat(name, ": channel file ", n, " is ", v.shape[0], " x ",
                                              v.shape[1], " x ", v.shape[2], ", the first ",
                                              image[0].shape[0], " x ", image[0].shape[1], " x ",
                                              image[0].shape[2]));
    }
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(v.affine[i] - image[0].affine[i]) > 1e-3) {
        return absl::DataLossError(
            absl::StrCat(name, ": channel file ", n, "'s affine is not the first's"));
      }
    }
    absl::StatusOr<FloatVolume> more = ToFloatVolume(v);
    if (!more.ok()) return more.status();
    out->values.insert(out->values.end(), more->values.begin(), more->values.end());
    out->channels += more->channels;
  }
  return out;
}

}  // namespace

absl::StatusOr<PrefixOp> ParsePrefixOp(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 1));
  std::vector<std::string> args;
  if (parts.size() > 1 && !parts[1].empty()) args = absl::StrSplit(parts[1], ',');
  auto number = [&](size_t i, double* out) {
    return i < args.size() && absl::SimpleAtod(args[i], out) && std::isfinite(*out);
  };
  PrefixOp op;
  const std::string& kind = parts[0];
  if (kind == "Orientation") {
    op.kind = PrefixOp::Kind::kOrientation;
    if (!args.empty()) op.axcodes = args[0];
    return op;
  }
  if (kind == "Spacing") {
    op.kind = PrefixOp::Kind::kSpacing;
    if (args.size() != 3 || !number(0, &op.pixdim[0]) || !number(1, &op.pixdim[1]) ||
        !number(2, &op.pixdim[2])) {
      return BadOp(text, "Spacing:X,Y,Z (millimetres)");
    }
    return op;
  }
  if (kind == "ScaleIntensityRange") {
    op.kind = PrefixOp::Kind::kScaleIntensityRange;
    double b_min = 0, b_max = 0;
    if ((args.size() != 2 && args.size() != 4 && args.size() != 5) ||
        !number(0, &op.scale.a_min) || !number(1, &op.scale.a_max) ||
        (args.size() >= 4 && (!number(2, &b_min) || !number(3, &b_max))) ||
        (args.size() == 5 && args[4] != "clip")) {
      return BadOp(text, "ScaleIntensityRange:A_MIN,A_MAX[,B_MIN,B_MAX[,clip]]");
    }
    if (args.size() >= 4) {
      op.scale.b_min = b_min;
      op.scale.b_max = b_max;
    }
    op.scale.clip = args.size() == 5;
    return op;
  }
  if (kind == "NormalizeIntensity") {
    op.kind = PrefixOp::Kind::kNormalizeIntensity;
    for (const std::string& a : args) {
      if (a == "nonzero") {
        op.normalize.nonzero = true;
      } else if (a == "channel_wise") {
        op.normalize.channel_wise = true;
      } else {
        return BadOp(text, "NormalizeIntensity[:nonzero][,channel_wise]");
      }
    }
    return op;
  }
  if (kind == "CropForeground") {
    op.kind = PrefixOp::Kind::kCropForeground;
    for (size_t i = 0; i < args.size(); ++i) {
      int64_t n = 0;
      if (args[i] == "allow_smaller") {
        op.crop.allow_smaller = true;
      } else if (args[i].rfind("k=", 0) == 0 && absl::SimpleAtoi(args[i].substr(2), &n) && n > 0) {
        op.crop.k_divisible = {n, n, n};
      } else if (absl::SimpleAtoi(args[i], &n) && n >= 0) {
        op.crop.margin = {n, n, n};
      } else {
        return BadOp(text, "CropForeground[:MARGIN][,allow_smaller][,k=K]");
      }
    }
    return op;
  }
  return BadOp(text, "one of Orientation, Spacing, ScaleIntensityRange, NormalizeIntensity, "
                     "CropForeground");
}

uint64_t RecipeHash(const PrefixRecipe& r) {
  std::string s = "stoker volume prefix v1";
  AppendDouble(&s, r.image_threshold);
  for (const PrefixOp& op : r.ops) {
    s.push_back(static_cast<char>('A' + static_cast<int>(op.kind)));
    switch (op.kind) {
      case PrefixOp::Kind::kOrientation:
        s += op.axcodes;
        break;
      case PrefixOp::Kind::kSpacing:
        for (double d : op.pixdim) AppendDouble(&s, d);
        break;
      case PrefixOp::Kind::kScaleIntensityRange:
        AppendDouble(&s, op.scale.a_min);
        AppendDouble(&s, op.scale.a_max);
        AppendDouble(&s, op.scale.b_min.value_or(NAN));
        AppendDouble(&s, op.scale.b_max.value_or(NAN));
        s.push_back(op.scale.clip ? '1' : '0');
        break;
      case PrefixOp::Kind::kNormalizeIntensity:
        s.push_back(op.normalize.nonzero ? '1' : '0');
        s.push_back(op.normalize.channel_wise ? '1' : '0');
        for (double d : op.normalize.subtrahend) AppendDouble(&s, d);
        s.push_back('/');
        for (double d : op.normalize.divisor) AppendDouble(&s, d);
        break;
      case PrefixOp::Kind::kCropForeground:
        for (int a = 0; a < 3; ++a) {
          AppendDouble(&s, static_cast<double>(op.crop.margin[a]));
          AppendDouble(&s, static_cast<double>(op.crop.k_divisible[a]));
        }
        s.push_back(op.crop.allow_smaller ? '1' : '0');
        for (int64_t c : op.crop.channel_indices) AppendDouble(&s, static_cast<double>(c));
        break;
    }
    s.push_back(';');
  }
  return Hash64(s.data(), s.size(), 0x564f4c50ull);
}

absl::StatusOr<PreparedVolume> Prepare(const std::vector<Volume>& image,
                                       const std::optional<Volume>& label,
                                       const PrefixRecipe& recipe, const std::string& name) {
  absl::StatusOr<FloatVolume> img = Channels(image, name);
  if (!img.ok()) return img.status();
  std::optional<FloatVolume> lab;
  if (label.has_value()) {
    if (label->channels != 1) {
      return absl::DataLossError(absl::StrCat(name, ": its label has ", label->channels,
                                              " channels: one class volume is read"));
    }
    if (label->shape != img->shape) {
      return absl::DataLossError(absl::StrCat(
          name, ": its label is ", label->shape[0], " x ", label->shape[1], " x ",
          label->shape[2], " and its image ", img->shape[0], " x ", img->shape[1], " x ",
          img->shape[2]));
    }
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(label->affine[i] - img->affine[i]) > 1e-3) {
        return absl::DataLossError(
            absl::StrCat(name, ": its label's affine is not its image's (element ", i, ": ",
                         label->affine[i], " and ", img->affine[i], ")"));
      }
    }
    absl::StatusOr<FloatVolume> l = ToFloatVolume(*label);
    if (!l.ok()) return l.status();
    lab = *std::move(l);
  }
  for (const PrefixOp& op : recipe.ops) {
    absl::Status st;
    switch (op.kind) {
      case PrefixOp::Kind::kOrientation:
        st = Reorient(op.axcodes, &*img);
        if (st.ok() && lab) st = Reorient(op.axcodes, &*lab);
        break;
      case PrefixOp::Kind::kSpacing: {
        absl::StatusOr<SpacingPlan> plan = PlanSpacing(img->affine, img->shape, op.pixdim);
        if (!plan.ok()) return plan.status();
        st = Resample(*plan, Interpolation::kTrilinear, &*img);
        if (st.ok() && lab) st = Resample(*plan, Interpolation::kNearest, &*lab);
        break;
      }
      case PrefixOp::Kind::kScaleIntensityRange:
        ScaleIntensityRange(op.scale, &*img);
        break;
      case PrefixOp::Kind::kNormalizeIntensity:
        st = NormalizeIntensity(op.normalize, &*img);
        break;
      case PrefixOp::Kind::kCropForeground: {
        absl::StatusOr<Box> box = ForegroundBox(*img, op.crop, name);
        if (!box.ok()) return box.status();
        CropToBox(*box, &*img);
        if (lab) CropToBox(*box, &*lab);
        break;
      }
    }
    if (!st.ok()) return st;
  }
  PreparedVolume out;
  out.image = *std::move(img);
  if (lab) {
    out.has_label = true;
    out.label.resize(lab->values.size());
    for (size_t n = 0; n < lab->values.size(); ++n) {
      const float x = lab->values[n];
      if (!(x >= 0 && x <= 255) || x != std::floor(x)) {
        return absl::DataLossError(absl::StrCat(name, ": its label holds ", x,
                                                ": classes 0..255 are read"));
      }
      out.label[n] = static_cast<uint8_t>(x);
    }
    absl::Status st = ForegroundBackground(out.image, out.label, recipe.image_threshold,
                                           &out.foreground, &out.background);
    if (!st.ok()) return st;
  }
  return out;
}

}  // namespace stoker::volume
