#include "server/image/decode/jpeg_restart.h"

#include "server/image/decode/jpeg_markers.h"

namespace stoker::image {
namespace {

void PutBe16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// The segments from SOI to the end of the SOS segment.
bool ParseHeader(const uint8_t* d, size_t n, RestartLayout* l) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  size_t pos = 2;
  int components = 0;
  uint32_t max_h = 0, max_v = 0;
  for (;;) {
    const int marker = ReadMarker(d, n, &pos);
    const uint8_t* seg = nullptr;
    uint32_t seg_len = 0;
    if (marker < 0 || !ReadSegment(d, n, &pos, &seg, &seg_len)) return false;
    const size_t seg_at = static_cast<size_t>(seg - d);
    switch (marker) {
      case 0xC0:  // SOF0 baseline
      case 0xC1:  // SOF1 extended sequential, Huffman
        if (components != 0 || seg_len < 6 || seg[0] != 8) return false;
        components = seg[5];
        if (components < 1 || components > 4 || seg_len != 6u + 3u * components) return false;
        l->height = Be16(seg + 1);
        l->width = Be16(seg + 3);
        if (l->height == 0 || l->width == 0) return false;
        l->height_at = seg_at + 1;
        l->width_at = seg_at + 3;
        for (int c = 0; c < components; ++c) {
          const uint32_t h = seg[6 + 3 * c + 1] >> 4, v = seg[6 + 3 * c + 1] & 15;
          if (h < 1 || h > 4 || v < 1 || v > 4) return false;
          max_h = h > max_h ? h : max_h;
          max_v = v > max_v ? v : max_v;
        }
        break;
      case 0xDD:  // DRI
        if (seg_len != 2) return false;
        l->interval = Be16(seg);
        break;
      case 0xDA: {  // SOS: the one scan
        if (components == 0 || seg_len < 1 || seg[0] != components ||
            seg_len != 4u + 2u * components) {
          return false;
        }
        const uint8_t* tail = seg + 1 + 2 * components;
        if (tail[0] != 0 || tail[1] != 63 || tail[2] != 0) return false;
        l->data_start = pos;
        // A single-component scan is not interleaved: its MCU is one block.
        l->mcu_width = components == 1 ? 8 : 8 * max_h;
        l->mcu_height = components == 1 ? 8 : 8 * max_v;
        return l->interval != 0;
      }
      case 0xC4:  // DHT
      case 0xDB:  // DQT
      case 0xFE:  // COM
        break;
      default:
        if (marker < 0xE0 || marker > 0xEF) return false;  // APPn only
        break;
    }
  }
}

}  // namespace

bool IndexRestartIntervals(const uint8_t* data, size_t size, RestartLayout* layout) {
  RestartLayout& l = *layout;
  l = RestartLayout{};
  if (data == nullptr || !ParseHeader(data, size, &l)) return false;
  l.mcus_per_row = (l.width + l.mcu_width - 1) / l.mcu_width;
  l.mcu_rows = (l.height + l.mcu_height - 1) / l.mcu_height;
  const uint64_t mcus = uint64_t{l.mcus_per_row} * l.mcu_rows;
  const uint64_t intervals = (mcus + l.interval - 1) / l.interval;
  // Each interval holds at least one byte and its marker two: more than the
  // file can hold is a lie of the header, refused before any allocation.
  if (intervals < 2 || intervals > (size - l.data_start) / 2) return false;
  l.starts.reserve(intervals);
  l.ends.reserve(intervals);
  l.starts.push_back(l.data_start);
  size_t i = l.data_start, at = 0, k = 0;
  for (;;) {
    if (!NextMarkerInData(data, size, i, &at, &k)) return false;  // no EOI
    const uint8_t b = data[k];
    if (IsRestartMarker(b)) {
      if (l.starts.size() == intervals || b - 0xD0u != l.ends.size() % 8) return false;
      l.ends.push_back(at);
      l.starts.push_back(k + 1);
      i = k + 1;
      continue;
    }
    if (b != 0xD9) return false;  // any other marker
    l.ends.push_back(at);
    l.end = k + 1;
    return l.starts.size() == intervals;
  }
}

bool CutToRestartWindow(const uint8_t* data, const RestartLayout& l, uint32_t row0, uint32_t col0,
                        uint32_t col1, std::vector<uint8_t>* out, uint32_t* width,
                        uint32_t* height) {
  const uint32_t k = l.interval;
  if (k == 0 || row0 >= l.mcu_rows || col0 >= col1 || col1 > l.mcus_per_row ||
      l.starts.size() != l.ends.size()) {
    return false;
  }
  const bool all_columns = col0 == 0 && col1 == l.mcus_per_row;
  if (!all_columns && (!ColumnsSeekable(l) || col0 % k != 0 || col1 % k != 0)) return false;
  if (uint64_t{row0} * l.mcus_per_row % k != 0) return false;

  out->assign(data, data + l.data_start);
  *height = l.height - row0 * l.mcu_height;
  *width = (col1 == l.mcus_per_row ? l.width : col1 * l.mcu_width) - col0 * l.mcu_width;
  PutBe16(out->data() + l.height_at, *height);
  PutBe16(out->data() + l.width_at, *width);
  size_t copied = 0;
  auto append = [&](size_t interval) {
    if (interval >= l.starts.size()) return false;
    if (copied > 0) {  // a marker before every interval but the first
      out->push_back(0xFF);
      out->push_back(static_cast<uint8_t>(0xD0 + (copied - 1) % 8));
    }
    ++copied;
    out->insert(out->end(), data + l.starts[interval], data + l.ends[interval]);
    return true;
  };
  if (all_columns) {
    for (size_t i = uint64_t{row0} * l.mcus_per_row / k; i < l.starts.size(); ++i) {
      if (!append(i)) return false;
    }
  } else {
    const uint32_t per_row = l.mcus_per_row / k;
    for (uint32_t r = row0; r < l.mcu_rows; ++r) {
      for (uint32_t c = col0 / k; c < col1 / k; ++c) {
        if (!append(size_t{r} * per_row + c)) return false;
      }
    }
  }
  out->push_back(0xFF);
  out->push_back(0xD9);
  return true;
}

}  // namespace stoker::image
