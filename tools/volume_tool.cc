// stoker-volume-tool: volumes without a daemon, for tests and looking at a
// file.
//
//   read FILE [--out RAW] [--spacing X,Y,Z]  reads FILE (a NIfTI or a .npy,
//        server/volume/reader.h; --spacing for a .npy) and prints one
//        JSON line {"type", "shape": [ni, nj, nk], "channels", "spacing",
//        "affine": 16 numbers row-major, "scaled", "slope", "inter"}; with
//        --out, writes its values as float32 (volume.h's ToFloat32) in
//        voxel order (i fastest, then j, k, channel).
//
//   prefix FILE --op OP... [--out RAW]  reads FILE and runs the deterministic
//        prefix's ops in the order given (server/volume/orientation.h,
//        intensity.h, crop_foreground.h), then prints and writes as read:
//          Orientation:CODES                    (RAS, LPS, ...)
//          ScaleIntensityRange:A_MIN,A_MAX[,B_MIN,B_MAX[,clip]]
//          NormalizeIntensity[:nonzero][,channel_wise]
//          CropForeground[:MARGIN[,allow_smaller][,k=K]]
//          Spacing:X,Y,Z[,nearest]              (trilinear unless nearest)
//
// A file that does not read, or an op that fails on it, prints {"error",
// "code"} and exits 2; bad usage exits 1.

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_text.h"
#include "common/posix.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/volume/crop_foreground.h"
#include "server/volume/intensity.h"
#include "server/volume/orientation.h"
#include "server/volume/reader.h"
#include "server/volume/spacing.h"

namespace {

std::string Number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

int Fail(const absl::Status& s) {
  std::printf("{\"error\":%s,\"code\":%s}\n", stoker::JsonString(std::string(s.message())).c_str(),
              stoker::JsonString(absl::StatusCodeToString(s.code())).c_str());
  return 2;
}

// One --op: applies it to `v`, or says why not.
absl::Status RunOp(const std::string& op, stoker::volume::FloatVolume* v, const std::string& name) {
  namespace vol = stoker::volume;
  const std::vector<std::string> parts = absl::StrSplit(op, absl::MaxSplits(':', 1));
  const std::string& kind = parts[0];
  std::vector<std::string> args;
  if (parts.size() > 1 && !parts[1].empty()) args = absl::StrSplit(parts[1], ',');
  auto number = [&](size_t i) {
    double d = 0;
    if (i >= args.size() || !absl::SimpleAtod(args[i], &d)) {
      std::fprintf(stderr, "--op %s: argument %zu is not a number\n", op.c_str(), i);
      std::exit(1);
    }
    return d;
  };
  if (kind == "Orientation") return vol::Reorient(args.empty() ? "RAS" : args[0], v);
  if (kind == "ScaleIntensityRange") {
    vol::ScaleIntensityRangeParams p;
    p.a_min = number(0);
    p.a_max = number(1);
    if (args.size() >= 4) {
      p.b_min = number(2);
      p.b_max = number(3);
    }
    p.clip = args.size() >= 5 && args[4] == "clip";
    vol::ScaleIntensityRange(p, v);
    return absl::OkStatus();
  }
  if (kind == "NormalizeIntensity") {
    vol::NormalizeIntensityParams p;
    for (const std::string& a : args) {
      if (a == "nonzero") p.nonzero = true;
      if (a == "channel_wise") p.channel_wise = true;
    }
    return vol::NormalizeIntensity(p, v);
  }
  if (kind == "CropForeground") {
    vol::CropForegroundParams p;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "allow_smaller") {
        p.allow_smaller = true;
      } else if (args[i].rfind("k=", 0) == 0) {
        int64_t k = 1;
        if (!absl::SimpleAtoi(args[i].substr(2), &k)) std::exit(1);
        p.k_divisible = {k, k, k};
      } else {
        const auto m = static_cast<int64_t>(number(i));
        p.margin = {m, m, m};
      }
    }
    absl::StatusOr<vol::Box> box = vol::ForegroundBox(*v, p, name);
    if (!box.ok()) return box.status();
    vol::CropToBox(*box, v);
    return absl::OkStatus();
  }
  if (kind == "Spacing") {
    absl::StatusOr<vol::SpacingPlan> plan =
        vol::PlanSpacing(v->affine, v->shape, {number(0), number(1), number(2)});
    if (!plan.ok()) return plan.status();
    const bool nearest = args.size() > 3 && args[3] == "nearest";
    return vol::Resample(*plan, nearest ? vol::Interpolation::kNearest
                                        : vol::Interpolation::kTrilinear, v);
  }
  std::fprintf(stderr, "--op %s: no such op\n", op.c_str());
  std::exit(1);
}

int Prefix(const std::string& path, const std::vector<std::string>& ops, const std::string& out) {
  stoker::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    return 1;
  }
  absl::StatusOr<stoker::volume::Volume> read =
      stoker::volume::ReadVolume(fd.get(), 0, 0, path, {});
  if (!read.ok()) return Fail(read.status());
  absl::StatusOr<stoker::volume::FloatVolume> v = stoker::volume::ToFloatVolume(*read);
  if (!v.ok()) return Fail(v.status());
  for (const std::string& op : ops) {
    absl::Status st = RunOp(op, &*v, path);
    if (!st.ok()) return Fail(st);
  }
  std::vector<std::string> affine;
  for (double a : v->affine) affine.push_back(Number(a));
  std::printf("{\"shape\":[%ld,%ld,%ld],\"channels\":%ld,\"affine\":[%s]}\n",
              static_cast<long>(v->shape[0]), static_cast<long>(v->shape[1]),
              static_cast<long>(v->shape[2]), static_cast<long>(v->channels),
              absl::StrJoin(affine, ",").c_str());
  if (!out.empty()) {
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v->values.data()),
            static_cast<std::streamsize>(v->values.size() * sizeof(float)));
    if (!f) return 1;
  }
  return 0;
}

int Read(const std::string& path, const std::string& out, const std::array<double, 3>& spacing) {
  using stoker::volume::Volume;
  stoker::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    return 1;
  }
  absl::StatusOr<Volume> v = stoker::volume::ReadVolume(fd.get(), 0, 0, path, {}, spacing);
  if (!v.ok()) {
    std::printf("{\"error\":%s,\"code\":%s}\n",
                stoker::JsonString(std::string(v.status().message())).c_str(),
                stoker::JsonString(absl::StatusCodeToString(v.status().code())).c_str());
    return 2;
  }
  std::vector<std::string> affine;
  for (double a : v->affine) affine.push_back(Number(a));
  std::printf(
      "{\"type\":\"%s\",\"shape\":[%ld,%ld,%ld],\"channels\":%ld,\"spacing\":[%s,%s,%s],"
      "\"affine\":[%s],\"scaled\":%s,\"slope\":%s,\"inter\":%s}\n",
      stoker::volume::VoxelTypeName(v->type), static_cast<long>(v->shape[0]),
      static_cast<long>(v->shape[1]), static_cast<long>(v->shape[2]),
      static_cast<long>(v->channels), Number(v->spacing[0]).c_str(),
      Number(v->spacing[1]).c_str(), Number(v->spacing[2]).c_str(),
      absl::StrJoin(affine, ",").c_str(), v->scaled ? "true" : "false", Number(v->slope).c_str(),
      Number(v->inter).c_str());
  if (!out.empty()) {
    std::vector<float> values(static_cast<size_t>(v->Voxels()));
    absl::Status st = stoker::volume::ToFloat32(*v, values.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::ofstream f(out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
    if (!f) {
      std::fprintf(stderr, "%s: cannot write\n", out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker-volume-tool: volumes without a daemon"};
  app.require_subcommand(1);
  std::string path, out;
  CLI::App* read = app.add_subcommand("read", "a volume's header and values");
  read->add_option("file", path, "a .nii or .nii.gz")->required();
  read->add_option("--out", out, "write the values here as float32, voxel order");
  std::vector<double> spacing;
  read->add_option("--spacing", spacing, "a .npy's voxel sizes")->delimiter(',')->expected(3);
  CLI::App* prefix = app.add_subcommand("prefix", "a volume through the deterministic prefix");
  std::string prefix_path, prefix_out;
  std::vector<std::string> ops;
  prefix->add_option("file", prefix_path, "a .nii, .nii.gz or .npy")->required();
  prefix->add_option("--op", ops, "an op, in order (see the header)");
  prefix->add_option("--out", prefix_out, "write the values here as float32, voxel order");
  CLI11_PARSE(app, argc, argv);
  if (prefix->parsed()) return Prefix(prefix_path, ops, prefix_out);
  std::array<double, 3> s = {0, 0, 0};
  if (spacing.size() == 3) s = {spacing[0], spacing[1], spacing[2]};
  return Read(path, out, s);
}
