// A video session's samples (clip_source.h) over a VideoTable
// (server/dataset/video_table.h) built through a scripted prober: the
// table's incremental cache, the clips an epoch visits per sampler, rank
// shards that cover every clip once, and what a task carries of a clip.

#include "server/engine/clip_source.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "server/dataset/video_table.h"
#include "testing/dataset_test_util.h"

namespace stoker {
namespace {

// Videos by file name: their frame count (pts 0, 100, 200, ...; a keyframe
// every 10 frames), or a failure.
class ScriptedProber : public VideoProber {
 public:
  std::map<std::string, int> frames;  // -1: DATA_LOSS; -2: ABORTED (a crash)
  int probes = 0;
  std::vector<ProbeOutcome> ProbeAll(const std::vector<ProbeTarget>& targets,
                                     const std::function<void(uint64_t)>&) override {
    std::vector<ProbeOutcome> out;
    for (const ProbeTarget& t : targets) {
      ++probes;
      ProbeOutcome o;
      const int n = frames.at(std::filesystem::path(t.path).filename().string());
      if (n == -1) o.status = absl::DataLossError("not a container");
      if (n == -2) o.status = absl::AbortedError("the worker indexing it died");
      for (int k = 0; k < n; ++k) o.pts.push_back(100 * k);
      for (int k = 0; k < n; k += 10) o.keyframes.push_back(100 * k);
      o.info.fps = 30;
      o.info.time_base_den = 3000;
      out.push_back(std::move(o));
    }
    return out;
  }
};

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<DataRoot> root;
  std::shared_ptr<const Dataset> ds;
  ScriptedProber prober;
  Fixture() {
    dir.Write("kin/a/long.mp4", "1");
    dir.Write("kin/a/short.mp4", "2");
    dir.Write("kin/b/broken.mp4", "3");
    dir.Write("kin/b/mid.mp4", "4");
    prober.frames = {{"long.mp4", 20}, {"short.mp4", 5}, {"broken.mp4", -1}, {"mid.mp4", 33}};
    root = *DataRoot::Open(dir.path());
    IndexOptions io;
    io.extensions = {"mp4"};
    auto d = Dataset::Open(*root, "kin", DatasetFormat::kImageFolder, io);
    REQUIRE(d.ok());
    ds = *d;
  }
  std::shared_ptr<const VideoTable> Build() {
    return VideoTable::Build(*root, *ds, prober, dir / "cache");
  }
};

ClipPlan Plan(video::ClipSampling sampling, uint32_t per_video) {
  ClipPlan p;
  p.options.frames_per_clip = 8;
  p.options.step_between_clips = 4;
  p.sampling = sampling;
  p.clips_per_video = per_video;
  p.params.frames = 8;
  return p;
}

TEST_CASE("a video table probes only what changed, and keeps failures that last",
          "[clip_source]") {
  Fixture f;
  std::filesystem::create_directories(f.dir / "cache");
  auto t = f.Build();
  REQUIRE(t->videos() == 4);  // a/long, a/short, b/broken, b/mid
  CHECK(t->probed() == 4);
  CHECK(t->frames(0) == 20);
  CHECK(t->keyframe_count(0) == 2);
  CHECK(t->failure(2) == "not a container");
  CHECK(t->frames(2) == 0);
  CHECK(t->failed() == 1);
  CHECK(t->warnings().size() == 1);
  // Nothing changed: nothing probed, the failure kept.
  auto again = f.Build();
  CHECK(again->probed() == 0);
  CHECK(again->reused() == 4);
  CHECK(again->frames(3) == 33);
  CHECK(again->failure(2) == "not a container");
  CHECK(f.prober.probes == 4);
  // One file rewritten: that one probed again.
  f.dir.Write("kin/a/short.mp4", "longer now");
  f.prober.frames["short.mp4"] = 9;
  auto changed = f.Build();
  CHECK(changed->probed() == 1);
  CHECK(changed->frames(1) == 9);
  // A crash says nothing lasting of its file: probed again next time.
  f.dir.Write("kin/b/mid.mp4", "rewritten");
  f.prober.frames["mid.mp4"] = -2;
  CHECK(f.Build()->failed() == 2);
  f.prober.frames["mid.mp4"] = 33;
  auto retried = f.Build();
  CHECK(retried->probed() == 1);
  CHECK(retried->frames(3) == 33);
}

TEST_CASE("every clip once an epoch across ranks, and the samplers' counts", "[clip_source]") {
  Fixture f;
  auto table = f.Build();
  // 8 frames, 4 apart: long (20) 4 clips, short (5) none, broken none, mid (33) 7.
  ClipSource all(table, Plan(video::ClipSampling::kAll, 0));
  CHECK(all.clips() == 11);
  CHECK(all.epoch_size() == 11);
  CHECK(all.videos_with_clips() == 2);
  CHECK(all.VideoOf(3) == 0);
  CHECK(all.VideoOf(4) == 3);
  SamplerOptions o;
  o.seed = 3;
  o.world_size = 2;
  std::multiset<uint64_t> seen;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    for (uint64_t c : all.Shard(o, 1)) seen.insert(c);
  }
  CHECK(seen.size() == 12);  // padded to a multiple of the ranks
  CHECK(std::set<uint64_t>(seen.begin(), seen.end()).size() == 11);

  ClipSource random(table, Plan(video::ClipSampling::kRandom, 3));
  CHECK(random.epoch_size() == 6);
  o.world_size = 1;
  o.rank = 0;
  o.shuffle = false;
  const std::vector<uint64_t> e0 = random.Shard(o, 0), e1 = random.Shard(o, 1);
  REQUIRE(e0.size() == 6);
  std::map<uint64_t, int> per_video;
  for (uint64_t c : e0) ++per_video[random.VideoOf(c)];
  CHECK(per_video == std::map<uint64_t, int>{{0, 3}, {3, 3}});
  CHECK(std::set<uint64_t>(e0.begin(), e0.end()).size() == 6);
  CHECK(e0 == random.Shard(o, 0));  // drawn from (seed, epoch)
  CHECK(e0 != e1);

  ClipSource uniform(table, Plan(video::ClipSampling::kUniform, 2));
  CHECK(uniform.epoch_size() == 4);
  CHECK(uniform.Shard(o, 0) == std::vector<uint64_t>{0, 3, 4, 10});
  CHECK(uniform.Shard(o, 5) == uniform.Shard(o, 0));
}

TEST_CASE("a clip's task: its frames' pts and where decoding starts", "[clip_source]") {
  Fixture f;
  ClipSource all(f.Build(), Plan(video::ClipSampling::kAll, 0));
  worker::ClipTask task;
  all.FillTask(6, &task);  // mid.mp4's clip 2: frames 8..15
  CHECK(task.params.frames == 8);
  CHECK(task.pts[0] == 800);
  CHECK(task.pts[7] == 1500);
  CHECK(task.first_frame == 8);
  CHECK(task.last_frame == 15);
  CHECK(task.has_keyframe == 1);
  CHECK(task.keyframe_pts == 0);  // keyframes at frames 0, 10, 20, 30
  CHECK(task.has_earlier_keyframe == 0);
  all.FillTask(9, &task);  // clip 5: frames 20..27
  CHECK(task.keyframe_pts == 2000);
  CHECK(task.keyframe_frame == 20);
  CHECK(task.has_earlier_keyframe == 1);
  CHECK(task.earlier_keyframe_pts == 1000);
  CHECK(all.Display(*f.ds, 9) == "kin/b/mid.mp4 (clip 5 of 7)");
}

}  // namespace
}  // namespace stoker
