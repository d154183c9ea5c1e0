// stoker-volume-tool: volumes without a daemon, for tests and looking at a
// file.
//
//   read FILE [--out RAW] [--spacing X,Y,Z] [--npz-key K]...  reads FILE (a
//        NIfTI, a .npy, an .npz or an HDF5 file, server/volume/reader.h and
//        hdf5_volume.h; --spacing for files without geometry, --npz-key for
//        an .npz's arrays or an HDF5 file's datasets) and prints one
//        JSON line {"type", "shape": [ni, nj, nk], "channels", "spacing",
//        "affine": 16 numbers row-major, "scaled", "slope", "inter"}; with
//        --out, writes its values as float32 (volume.h's ToFloat32) in
//        voxel order (i fastest, then j, k, channel).
//
//   prefix FILE [--label FILE] --op OP... [--out RAW] [--label-out RAW]
//        [--entry DIR/NAME] [--image-threshold T]: FILE (and its label)
//        through the deterministic prefix (server/volume/prefix.h, whose
//        ParsePrefixOp reads each OP):
//          Orientation:CODES                    (RAS, LPS, ...)
//          Spacing:X,Y,Z                        (the label: nearest)
//          ScaleIntensityRange:A_MIN,A_MAX[,B_MIN,B_MAX[,clip]]
//          NormalizeIntensity[:nonzero][,channel_wise]
//          CropForeground[:MARGIN][,allow_smaller][,k=K]
//        prints {"shape", "channels", "affine", "foreground", "background",
//        "recipe": the recipe's hash, hex}, writes the image (float32) and
//        label (uint8) in voxel order, and with --entry the cache entry
//        (server/volume/volume_cache.h) keyed by the recipe's hash.
//
//   patches DIR/NAME --key HEX [--spatial-size X,Y,Z] [--pos P] [--neg N]
//        [--num-samples K] [--seed S --epoch E --index I] [--allow-smaller]
//        [--out RAW] [--label-out RAW]: RandCropByPosNegLabel from the entry
//        (server/volume/patch_sampler.h): prints {"patches": [{"start",
//        "size", "drawn", "foreground"}]} and writes the patches one after
//        another (each channel-slowest voxel order).
//
//   affine FILE --matrix M0,...,M8 [--padding reflection|border|zeros]
//        [--nearest] --out RAW: RandAffine's resampling (server/volume/
//        augment.h's ApplyAffine, or ApplyAffineNearest on a uint8 volume)
//        of FILE's values by the 3x3 matrix (row-major, output -> input
//        coordinates about the centre), written in voxel order (float32, or
//        uint8 with --nearest).
//
// A file that does not read, or an op that fails on it, prints {"error",
// "code"} and exits 2; bad usage exits 1.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_text.h"
#include "common/posix.h"
#include "server/image/ops/rng.h"
#include "server/volume/augment.h"
#include "server/volume/hdf5_volume.h"
#include "server/volume/patch_sampler.h"
#include "server/volume/prefix.h"
#include "server/volume/reader.h"
#include "server/volume/volume_cache.h"

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

absl::StatusOr<stoker::volume::Volume> ReadFile(const std::string& path) {
  stoker::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(path + ": cannot open");
  return stoker::volume::ReadVolume(fd.get(), 0, 0, path, {});
}

bool WriteRaw(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(f);
}

struct PrefixArgs {
  std::string path, label, out, label_out, entry;
  std::vector<std::string> ops;
  double image_threshold = 0;
};

int Prefix(const PrefixArgs& a) {
  namespace vol = stoker::volume;
  vol::PrefixRecipe recipe;
  recipe.image_threshold = a.image_threshold;
  for (const std::string& text : a.ops) {
    absl::StatusOr<vol::PrefixOp> op = vol::ParsePrefixOp(text);
    if (!op.ok()) {
      std::fprintf(stderr, "%s\n", std::string(op.status().message()).c_str());
      return 1;
    }
    recipe.ops.push_back(*op);
  }
  absl::StatusOr<vol::Volume> image = ReadFile(a.path);
  if (!image.ok()) return Fail(image.status());
  std::optional<vol::Volume> label;
  if (!a.label.empty()) {
    absl::StatusOr<vol::Volume> l = ReadFile(a.label);
    if (!l.ok()) return Fail(l.status());
    label = *std::move(l);
  }
  absl::StatusOr<vol::PreparedVolume> v = vol::Prepare({*image}, label, recipe, a.path);
  if (!v.ok()) return Fail(v.status());
  std::vector<std::string> affine;
  for (double x : v->image.affine) affine.push_back(Number(x));
  std::printf(
      "{\"shape\":[%ld,%ld,%ld],\"channels\":%ld,\"affine\":[%s],\"foreground\":%zu,"
      "\"background\":%zu,\"recipe\":\"%016lx\"}\n",
      static_cast<long>(v->image.shape[0]), static_cast<long>(v->image.shape[1]),
      static_cast<long>(v->image.shape[2]), static_cast<long>(v->image.channels),
      absl::StrJoin(affine, ",").c_str(), v->foreground.size(), v->background.size(),
      static_cast<unsigned long>(vol::RecipeHash(recipe)));
  if (!a.out.empty() &&
      !WriteRaw(a.out, v->image.values.data(), v->image.values.size() * sizeof(float))) {
    return 1;
  }
  if (!a.label_out.empty() && !WriteRaw(a.label_out, v->label.data(), v->label.size())) return 1;
  if (!a.entry.empty()) {
    const size_t slash = a.entry.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : a.entry.substr(0, slash);
    stoker::UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd.valid()) return 1;
    absl::Status st = vol::WriteEntry(dfd.get(), a.entry.substr(slash + 1),
                                      vol::RecipeHash(recipe), *v);
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

struct PatchArgs {
  std::string entry, out, label_out;
  std::vector<int64_t> size = {96, 96, 96};
  double pos = 1, neg = 1;
  int num_samples = 1;
  uint64_t seed = 0, epoch = 0, index = 0, key = 0;
  bool allow_smaller = false;
};

int Patches(const PatchArgs& a) {
  namespace vol = stoker::volume;
  const size_t slash = a.entry.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : a.entry.substr(0, slash);
  stoker::UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return 1;
  absl::StatusOr<std::unique_ptr<vol::MappedEntry>> e =
      vol::MappedEntry::Open(dfd.get(), a.entry.substr(slash + 1), a.key, true);
  if (!e.ok()) return Fail(e.status());
  const vol::MappedEntry& m = **e;
  vol::PosNegParams p;
  if (a.size.size() != 3) return 1;
  p.spatial_size = {a.size[0], a.size[1], a.size[2]};
  p.pos = a.pos;
  p.neg = a.neg;
  p.num_samples = a.num_samples;
  p.allow_smaller = a.allow_smaller;
  stoker::KeyedRng rng(a.seed, a.epoch, a.index);
  absl::StatusOr<std::vector<vol::Patch>> patches =
      vol::PosNegPatches(p, m.shape(), m.foreground(), m.foreground_count(), m.background(),
                         m.background_count(), rng, a.entry);
  if (!patches.ok()) return Fail(patches.status());
  std::vector<float> values;
  std::vector<uint8_t> labels;
  std::vector<std::string> rows;
  for (const vol::Patch& x : *patches) {
    const int64_t n = x.size[0] * x.size[1] * x.size[2];
    const size_t at = values.size();
    values.resize(at + static_cast<size_t>(n * m.channels()));
    vol::CutPatch(m.image(), m.shape(), m.channels(), x, values.data() + at);
    if (m.label() != nullptr) {
      const size_t lat = labels.size();
      labels.resize(lat + static_cast<size_t>(n));
      vol::CutPatch(m.label(), m.shape(), 1, x, labels.data() + lat);
    }
    rows.push_back(absl::StrCat("{\"start\":[", x.start[0], ",", x.start[1], ",", x.start[2],
                                "],\"size\":[", x.size[0], ",", x.size[1], ",", x.size[2],
                                "],\"drawn\":", x.drawn,
                                ",\"foreground\":", x.foreground ? "true" : "false", "}"));
  }
  std::printf("{\"patches\":[%s]}\n", absl::StrJoin(rows, ",").c_str());
  if (!a.out.empty() && !WriteRaw(a.out, values.data(), values.size() * sizeof(float))) return 1;
  if (!a.label_out.empty() && !WriteRaw(a.label_out, labels.data(), labels.size())) return 1;
  return 0;
}

struct AffineArgs {
  std::string path, out, padding = "reflection";
  std::vector<double> matrix;
  bool nearest = false;
};

int Affine(const AffineArgs& a) {
  namespace vol = stoker::volume;
  stoker::UniqueFd fd(::open(a.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    std::fprintf(stderr, "%s: cannot open\n", a.path.c_str());
    return 1;
  }
  absl::StatusOr<vol::Volume> v = vol::ReadVolume(fd.get(), 0, 0, a.path, {});
  if (!v.ok()) return Fail(v.status());
  absl::StatusOr<vol::FloatVolume> f = vol::ToFloatVolume(*v);
  if (!f.ok()) return Fail(f.status());
  vol::AffineDraw d;
  d.apply = true;
  std::copy_n(a.matrix.begin(), 9, d.m.begin());
  const vol::AffinePad pad = a.padding == "border" ? vol::AffinePad::kBorder
                             : a.padding == "zeros" ? vol::AffinePad::kZeros
                                                    : vol::AffinePad::kReflection;
  if (a.nearest) {
    std::vector<uint8_t> in(f->values.size()), out(in.size());
    for (size_t n = 0; n < in.size(); ++n) in[n] = static_cast<uint8_t>(f->values[n]);
    vol::ApplyAffineNearest(d, f->shape, pad, in.data(), out.data());
    return WriteRaw(a.out, out.data(), out.size()) ? 0 : 1;
  }
  std::vector<float> out(f->values.size());
  vol::ApplyAffine(d, f->shape, f->channels, pad, f->values.data(), out.data());
  return WriteRaw(a.out, out.data(), out.size() * sizeof(float)) ? 0 : 1;
}

int Read(const std::string& path, const std::string& out, const std::array<double, 3>& spacing,
         const std::vector<std::string>& npz_keys) {
  using stoker::volume::Volume;
  stoker::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    return 1;
  }
  absl::StatusOr<Volume> v = stoker::volume::ReadAnyVolume(fd.get(), path, {}, spacing, npz_keys);
  if (!v.ok()) return Fail(v.status());
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
  std::vector<std::string> npz_keys;
  read->add_option("--npz-key", npz_keys, "an .npz's array to read (repeat: channels)");
  CLI::App* prefix = app.add_subcommand("prefix", "a volume through the deterministic prefix");
  PrefixArgs pa;
  prefix->add_option("file", pa.path, "a .nii, .nii.gz or .npy")->required();
  prefix->add_option("--op", pa.ops, "an op, in order (see the header)");
  prefix->add_option("--label", pa.label, "its label volume (geometry ops apply to both)");
  prefix->add_option("--image-threshold", pa.image_threshold, "the background list's");
  prefix->add_option("--out", pa.out, "write the image's values here as float32, voxel order");
  prefix->add_option("--label-out", pa.label_out, "write the label here as uint8, voxel order");
  prefix->add_option("--entry", pa.entry, "write the prepared sample as this cache entry");
  CLI::App* patches = app.add_subcommand("patches", "RandCropByPosNegLabel from a cache entry");
  PatchArgs ca;
  patches->add_option("entry", ca.entry, "an entry `prefix --entry` wrote")->required();
  std::string key_hex;
  patches->add_option("--key", key_hex, "the entry's key (prefix prints it as recipe, hex)")
      ->required();
  patches->add_option("--spatial-size", ca.size)->delimiter(',')->expected(3);
  patches->add_option("--pos", ca.pos);
  patches->add_option("--neg", ca.neg);
  patches->add_option("--num-samples", ca.num_samples);
  patches->add_option("--seed", ca.seed);
  patches->add_option("--epoch", ca.epoch);
  patches->add_option("--index", ca.index);
  patches->add_flag("--allow-smaller", ca.allow_smaller);
  patches->add_option("--out", ca.out, "the patches' image values, float32, one after another");
  patches->add_option("--label-out", ca.label_out, "the patches' labels, uint8");
  CLI::App* affine = app.add_subcommand("affine", "RandAffine's resampling by a given matrix");
  AffineArgs aa;
  affine->add_option("file", aa.path, "a .nii, .nii.gz or .npy")->required();
  affine->add_option("--matrix", aa.matrix, "3x3, row-major")->delimiter(',')->expected(9)->required();
  affine->add_option("--padding", aa.padding)->check(CLI::IsMember({"reflection", "border", "zeros"}));
  affine->add_flag("--nearest", aa.nearest, "a label: nearest voxel, uint8");
  affine->add_option("--out", aa.out)->required();
  CLI11_PARSE(app, argc, argv);
  if (prefix->parsed()) return Prefix(pa);
  if (affine->parsed()) return Affine(aa);
  if (patches->parsed()) {
    ca.key = std::stoull(key_hex, nullptr, 16);
    return Patches(ca);
  }
  std::array<double, 3> s = {0, 0, 0};
  if (spacing.size() == 3) s = {spacing[0], spacing[1], spacing[2]};
  return Read(path, out, s, npz_keys);
}
