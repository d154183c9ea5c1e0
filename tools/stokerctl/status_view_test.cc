// stokerctl's layout: LayoutTable and RenderStatus at terminal widths, with
// names and paths too long for any of them. No daemon, no process.

#include "tools/stokerctl/status_view.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline/pipeline_spec.h"
#include "pipeline/volume_pipeline.h"

namespace stoker::ctl {
namespace {

constexpr char kEllipsis[] = "\u2026";

size_t Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The words of the first line that starts with `first`.
std::vector<std::string> HeaderOf(const std::string& text, const std::string& first) {
  for (const std::string& line : Lines(text)) {
    if (line.rfind(first, 0) != 0) continue;
    std::vector<std::string> words;
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  }
  return {};
}

// Whether `text` holds an ellipsis followed by an end of `s` (at least its
// last 4 characters), and not `s` whole.
bool ShortenedTail(const std::string& text, const std::string& s) {
  if (text.find(s) != std::string::npos) return false;
  for (size_t k = 4; k < s.size(); ++k) {
    if (text.find(kEllipsis + s.substr(s.size() - k)) != std::string::npos) return true;
  }
  return false;
}

const std::string kLongClient =
    "train.py --config configs/a-very-long-experiment-name-that-goes-on-and-on.yaml";
const std::string kLongDataset =
    "datasets/imagenet-2012/a/deep/folder/structure/that/keeps/going/train";
const std::string kLongPath = kLongDataset + "/n01440764/n01440764_10026_a_long_file_name.JPEG";

v1::StatusResponse Busy() {
  v1::StatusResponse s;
  s.set_version("0.1.0");
  s.set_pid(4242);
  s.set_state("serving");
  s.set_samples_total(123456789);
  s.mutable_readahead()->set_threads(16);
  for (uint32_t i = 0; i < 3; ++i) {
    auto* w = s.add_workers();
    w->set_id(i);
    w->set_pid(10000 + i);
    w->set_state("busy");
    w->set_samples_done(987654);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    auto* x = s.add_sessions();
    x->set_session_id("1a2b3c4d-" + std::to_string(17 + r));
    x->set_client_name(kLongClient);
    x->set_client_pid(31337);
    x->set_rank(r);
    x->set_world_size(8);
    x->set_dataset(kLongDataset);
    // A preset, and an op list.
    auto spec = pipeline::SpecFromKeywordsJson(
        r == 0 ? R"({"pipeline": "train", "dtype": "float32"})"
               : R"({"ops": [{"RandomCrop": {"size": 32, "padding": 4}},
                             {"RandomHorizontalFlip": {}}]})");
    REQUIRE(spec.ok());
    auto effective = pipeline::Effective(*spec);
    REQUIRE(effective.ok());
    *x->mutable_pipeline() = *effective;
    *x->mutable_requested_pipeline() = *spec;
    x->set_batch_size(256);
    x->set_batches_produced(100000);
    x->set_batches_consumed(99996);
    x->set_images_per_second(12345.6);
    x->set_ring_slots(4);
    x->set_ring_ready(3);
    x->set_samples_failed(2);
    x->mutable_decode()->set_count(10);
    x->mutable_decode()->set_p50_ms(1.5);
    x->mutable_decode()->set_p99_ms(12.25);
    auto* f = x->add_failures();
    f->set_path(kLongPath);
    f->set_reason("not a JPEG file: starts with 0x89 0x50, which is how a PNG file begins");
    f->set_count(2);
  }
  auto* d = s.add_dataset_failures();
  d->set_dataset(kLongDataset);
  d->set_samples_failed(3);
  auto* f = d->add_failures();
  f->set_path(kLongPath);
  f->set_reason("truncated: premature end of JPEG data after 4096 of 131072 bytes");
  f->set_count(3);
  f->set_dataset_index(1234567);
  return s;
}

TEST_CASE("RenderStatus fits 80, 100 and 200 columns, and wider shows more") {
  const v1::StatusResponse s = Busy();
  size_t columns_before = 0;
  for (size_t width : {80, 100, 200}) {
    INFO("width " << width);
    const std::string text = RenderStatus(s, width);
    for (const std::string& line : Lines(text)) {
      INFO(line);
      CHECK(Chars(line) <= width);
    }
    const std::vector<std::string> header = HeaderOf(text, "SESSION ");
    REQUIRE(!header.empty());
    CHECK(header.size() >= columns_before);
    columns_before = header.size();
    // Who, what, how fast and what failed are always there.
    for (const char* must : {"SESSION", "CLIENT", "DATASET", "IMG/S", "STALL", "FAILED"}) {
      CHECK(std::find(header.begin(), header.end(), must) != header.end());
    }
    CHECK(text.find("1a2b3c4d-17") != std::string::npos);
    CHECK(text.find("1a2b3c4d-18") != std::string::npos);
    // Names too long are shortened with an ellipsis; a path keeps its end.
    CHECK(text.find(kLongClient) == std::string::npos);
    CHECK(text.find(std::string("train.py")) != std::string::npos);
    CHECK(ShortenedTail(text, kLongPath));
    CHECK(text.find(kEllipsis) != std::string::npos);
    CHECK(ShortenedTail(text, kLongDataset));
    CHECK(text.find("failed samples by dataset") != std::string::npos);
    CHECK(text.find("not a JPEG") != std::string::npos);
    CHECK(text.find("truncated") != std::string::npos);
    // Each session's pipeline in full, wrapped to the width.
    CHECK(text.find("\npipelines\n1a2b3c4d-17  train: RandomResizedCrop(") != std::string::npos);
    CHECK(text.find("float32 nchw") != std::string::npos);
    CHECK(text.find("1a2b3c4d-18  RandomCrop(size=[32,") != std::string::npos);
  }
  // At 80 the least useful columns went; at 200 they are back.
  const std::vector<std::string> narrow = HeaderOf(RenderStatus(s, 80), "SESSION ");
  const std::vector<std::string> wide = HeaderOf(RenderStatus(s, 200), "SESSION ");
  CHECK(wide.size() > narrow.size());
  CHECK(std::find(narrow.begin(), narrow.end(), "PIPELINE") == narrow.end());
  CHECK(std::find(wide.begin(), wide.end(), "PIPELINE") != wide.end());
  CHECK(std::find(wide.begin(), wide.end(), "DECODE") != wide.end());
  // The PIPELINE column: the preset's name, or "custom" for an op list.
  const std::string at200 = RenderStatus(s, 200);
  const std::string table = at200.substr(0, at200.find("\npipelines\n"));
  CHECK(table.find("\n1a2b3c4d-17 ") != std::string::npos);
  for (const std::string& line : Lines(table)) {
    if (line.rfind("1a2b3c4d-17 ", 0) == 0) CHECK(line.find(" train ") != std::string::npos);
    if (line.rfind("1a2b3c4d-18 ", 0) == 0) CHECK(line.find(" custom ") != std::string::npos);
  }
  // Wide enough, nothing is shortened at all.
  const std::string huge = RenderStatus(s, 1000);
  CHECK(huge.find(kLongClient) != std::string::npos);
  CHECK(huge.find(kLongPath) != std::string::npos);
  CHECK(huge.find(kEllipsis) == std::string::npos);
  for (const auto& x : s.sessions()) {
    CHECK(huge.find(x.session_id() + "  " + pipeline::Describe(x.pipeline()) + "\n") !=
          std::string::npos);
  }
}

TEST_CASE("RenderStatus shows the prepared cache") {
  v1::StatusResponse s = Busy();
  CHECK(RenderStatus(s, 100).find("prepared cache") == std::string::npos);  // off
  auto* pc = s.mutable_prepared_cache();
  pc->set_dir("/var/cache/stoker/prepared");
  pc->set_budget_bytes(64ull << 30);
  pc->set_bytes(600u << 20);
  pc->set_entries(8);
  pc->set_volume_hits(24);
  pc->set_volume_writes(8);
  pc->set_image_hits(0);
  for (size_t width : {80, 200}) {
    const std::string text = RenderStatus(s, width);
    for (const std::string& line : Lines(text)) {
      INFO(line);
      CHECK(Chars(line) <= width);
    }
    CHECK(text.find("prepared cache") != std::string::npos);
    CHECK(text.find("600.0 of 65536 MiB") != std::string::npos);
    CHECK(text.find("volumes 24 hits, 8 written") != std::string::npos);
  }
  // A volume session's pipeline line names its transforms and patches.
  auto spec = VolumeSpecFromJson(R"({"ops": [{"Orientation": {}},
      {"RandCropByPosNegLabel": {"spatial_size": [96, 96, 96], "num_samples": 4}}]})");
  REQUIRE(spec.ok());
  *s.mutable_sessions(0)->mutable_volumes() = *spec;
  CHECK(RenderStatus(s, 200).find("Orientation, RandCropByPosNegLabel -> 4 x [1, 96, 96, 96] "
                                  "float32, labels uint8") != std::string::npos);
}

TEST_CASE("RenderStatus shows the decode nodes and marks the remote workers") {
  v1::StatusResponse s = Busy();
  CHECK(RenderStatus(s, 100).find("decode nodes") == std::string::npos);  // none
  auto* w = s.add_workers();
  w->set_id(0);
  w->set_pid(4242);
  w->set_state("busy");
  w->set_node("stoker-decode.default.svc.cluster.local:7070");
  s.set_decode_nodes_open(true);
  s.set_decode_nodes_reason("open: a trainer waited 40% of a second for data");
  auto* d = s.add_decode_nodes();
  d->set_address("stoker-decode.default.svc.cluster.local:7070");
  d->set_slots(16);
  d->set_connected(12);
  d->set_samples_done(123456);
  d->set_lost(3);
  d->set_bytes_sent(3u << 20);
  for (size_t width : {80, 200}) {
    const std::string text = RenderStatus(s, width);
    for (const std::string& line : Lines(text)) {
      INFO(line);
      CHECK(Chars(line) <= width);
    }
    CHECK(text.find("decode nodes (relays r*): open: a trainer waited") != std::string::npos);
    CHECK(text.find("12/16") != std::string::npos);
    CHECK(text.find("123456") != std::string::npos);
    CHECK(text.find("r0") != std::string::npos);
  }
  CHECK(RenderStatus(s, 200).find("stoker-decode.default.svc.cluster.local:7070") !=
        std::string::npos);
}

TEST_CASE("RenderStatus shows the transcode cache and each session's decode paths") {
  v1::StatusResponse s = Busy();
  CHECK(RenderStatus(s, 100).find("transcode cache") == std::string::npos);  // off
  auto* tc = s.mutable_transcode_cache();
  tc->set_dir("/var/cache/stoker/transcode");
  tc->set_budget_bytes(4ull << 30);
  tc->set_bytes(3u << 20);
  tc->set_entries(12);
  tc->set_hits(36);
  tc->set_misses(12);
  tc->set_hit_rate(0.75);
  tc->set_bad_entries(1);
  const char* names[] = {"whole", "dc_scans", "baseline"};
  for (auto& x : *s.mutable_sessions()) {
    for (int p = 0; p < 3; ++p) {
      auto* dp = x.add_decode_paths();
      dp->set_path(names[p]);
      dp->set_samples(p == 1 ? 0 : 40 + p);
      dp->set_mean_decode_ms(p == 2 ? 19.25 : 70.5);
      dp->set_decode_seconds(dp->samples() * dp->mean_decode_ms() / 1000);
    }
  }
  for (size_t width : {80, 200}) {
    const std::string text = RenderStatus(s, width);
    for (const std::string& line : Lines(text)) {
      INFO(line);
      CHECK(Chars(line) <= width);
    }
    CHECK(text.find("transcode cache") != std::string::npos);
    CHECK(text.find("hit rate 75.0% (36 hits, 12 misses)") != std::string::npos);
    CHECK(text.find("\ndecode paths\n") != std::string::npos);
    CHECK(text.find("19.25") != std::string::npos);
    CHECK(text.find("dc_scans") == std::string::npos);  // no samples: not listed
  }
}

TEST_CASE("RenderStatus lists each session's formats with their decode latency") {
  v1::StatusResponse s = Busy();
  CHECK(RenderStatus(s, 100).find("\nformats\n") == std::string::npos);  // none seen
  for (auto& x : *s.mutable_sessions()) {
    auto* png = x.add_formats();
    png->set_format("png");
    png->set_samples(1234);
    png->set_failed(7);
    png->mutable_decode()->set_count(1234);
    png->mutable_decode()->set_p50_ms(3.5);
    png->mutable_decode()->set_p99_ms(12.25);
    png->mutable_decode()->set_mean_ms(4.125);
    auto* webp = x.add_formats();
    webp->set_format("webp");
    webp->set_samples(56);
  }
  for (size_t width : {80, 200}) {
    const std::string text = RenderStatus(s, width);
    for (const std::string& line : Lines(text)) {
      INFO(line);
      CHECK(Chars(line) <= width);
    }
    REQUIRE(text.find("\nformats\n") != std::string::npos);
    CHECK(text.find("1234") != std::string::npos);
    CHECK(text.find("3.5/12.2") != std::string::npos);
    CHECK(text.find("webp") != std::string::npos);
  }
  CHECK(RenderStatus(s, 200).find("4.12") != std::string::npos);  // the mean, when it fits
}

TEST_CASE("RenderStatus sums up the decode calibration on one line when it fits") {
  v1::StatusResponse s = Busy();
  CHECK(RenderStatus(s, 100).find("decode calibration off\n") != std::string::npos);
  auto* dc = s.mutable_decode_calibration();
  dc->set_seconds(0.2125);
  const double baseline[] = {1.31, 1.48, 2.5, 1.8};
  const double progressive[] = {5.15, 4.89, 5.18, 5.26};
  for (int i = 0; i < 4; ++i) {
    auto* c = dc->add_scales();
    c->set_scale(1u << i);
    c->set_baseline_ms(baseline[i]);
    c->set_progressive_ms(progressive[i]);
    c->set_disabled(i == 2);
  }
  const std::string wide = RenderStatus(s, 200);
  CHECK(wide.find("decode calibration  0.21s  1/8 1.31/5.15 ms  2/8 1.48/4.89 ms  "
                  "4/8 2.50/5.18 ms disabled  8/8 1.80/5.26 ms\n") != std::string::npos);
  for (const std::string& line : Lines(RenderStatus(s, 80))) {
    INFO(line);
    CHECK(Chars(line) <= 80);
  }
}

TEST_CASE("LayoutTable drops by rank, trims to soft then min widths, and cuts as a last resort") {
  const std::vector<Column> cols = {{"NAME", Column::kAlways, Trim::kTail, 6, 3},
                                    {"A", 1},
                                    {"B", 2},
                                    {"PATH", Column::kAlways, Trim::kHead, 8, 4}};
  const std::vector<std::vector<std::string>> rows = {{"abcdefghij", "1", "2", "/x/y/z/file.jpg"}};
  // Fits: natural widths, two spaces apart.
  CHECK(LayoutTable(cols, rows, 100) ==
        "NAME        A  B  PATH\n"
        "abcdefghij  1  2  /x/y/z/file.jpg\n");
  // Trimmed to their soft widths first (the widest first), every column kept.
  CHECK(LayoutTable(cols, rows, 24) ==
        "NAME      A  B  PATH\n"
        "abcdefg\u2026  1  2  \u2026ile.jpg\n");
  // Then A (the lowest rank) goes before B.
  const std::string at19 = LayoutTable(cols, rows, 19);
  CHECK(at19.find(" A ") == std::string::npos);
  CHECK(at19.find("B") != std::string::npos);
  for (const std::string& line : Lines(at19)) CHECK(Chars(line) <= 19);
  // Then both, then the trimmed ones down to their min widths.
  const std::string at12 = LayoutTable(cols, rows, 12);
  CHECK(HeaderOf(at12, "NAME") == std::vector<std::string>{"NAME", "PATH"});
  for (const std::string& line : Lines(at12)) CHECK(Chars(line) <= 12);
  // Narrower than the min widths allow: each line is cut.
  for (const std::string& line : Lines(LayoutTable(cols, rows, 5))) CHECK(Chars(line) <= 5);
  // Short rows get empty cells.
  CHECK(LayoutTable({{"X"}, {"Y"}}, {{"1"}}, 80) == "X  Y\n1\n");
}

TEST_CASE("TerminalWidth falls back to $COLUMNS, then 80, when stdout is not a terminal") {
  if (::isatty(STDOUT_FILENO)) return;  // (ctest's stdout is a pipe)
  ::setenv("COLUMNS", "123", 1);
  CHECK(TerminalWidth() == 123);
  ::setenv("COLUMNS", "junk", 1);
  CHECK(TerminalWidth() == 80);
  ::unsetenv("COLUMNS");
  CHECK(TerminalWidth() == 80);
}

}  // namespace
}  // namespace stoker::ctl
