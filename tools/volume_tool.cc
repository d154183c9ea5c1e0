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
// A file that does not read prints {"error", "code"} and exits 2; bad
// usage exits 1.

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_text.h"
#include "common/posix.h"
#include "server/volume/reader.h"

namespace {

std::string Number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
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
  CLI11_PARSE(app, argc, argv);
  std::array<double, 3> s = {0, 0, 0};
  if (spacing.size() == 3) s = {spacing[0], spacing[1], spacing[2]};
  return Read(path, out, s);
}
