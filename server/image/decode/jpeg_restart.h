// Restart intervals of a baseline JPEG, and a file cut down to the ones a
// window of the image needs. Internal to stoker_image (JpegDecoder::Window).
//
// Why: libjpeg-turbo 2.1.5 entropy-decodes every MCU above and beside a
// crop (jpeg_skip_scanlines and jpeg_crop_scanline skip only the IDCT and
// what follows), and never uses restart markers to jump. In a file with
// restart markers (a DRI segment: cameras and hardware encoders write
// them), each interval's entropy-coded data starts byte-aligned with every
// DC prediction reset, and its end is found by its marker without Huffman
// decoding. So a file holding the same header and only the intervals
// covering a window decodes, inside the window, to the same pixels as the
// whole file, provided the window keeps a margin from the cut edges (fancy
// upsampling reads a neighbouring chroma row or column there; the decoder
// keeps one MCU).
//
// What a cut file is: the original's bytes up to the end of its SOS segment
// (every table, APPn and COM kept), the frame's height and width rewritten
// for the window, then the intervals of MCU rows [row0, last] and MCU
// columns [col0, col1), joined by restart markers renumbered from RST0, then
// EOI. The rows below the window stay (the decoder stops reading before
// them; keeping them keeps the file's end, EOI included, where it was).
//
// Pure functions of their arguments; any thread. They read only [data,
// data + size) and refuse (false) anything they do not fully expect.

#ifndef STOKER_SERVER_IMAGE_DECODE_JPEG_RESTART_H_
#define STOKER_SERVER_IMAGE_DECODE_JPEG_RESTART_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::image {

struct RestartLayout {
  uint32_t width = 0, height = 0;  // the frame's, in pixels
  uint32_t mcu_width = 0;          // an MCU in pixels: 8 x the largest
  uint32_t mcu_height = 0;         // sampling factor (8 for one component)
  uint32_t mcus_per_row = 0, mcu_rows = 0;
  uint32_t interval = 0;  // MCUs per restart interval (DRI)
  size_t height_at = 0;   // offsets of the SOF's height and width fields
  size_t width_at = 0;
  size_t data_start = 0;  // first byte after the SOS segment
  // Per interval: where its entropy-coded data starts and ends (the end is
  // the first byte of the marker after it: RSTn or EOI, fill bytes
  // included).
  std::vector<size_t> starts, ends;
  size_t end = 0;  // one past the EOI marker
};

// Indexes a file that is: SOI; then only DQT, DHT, DRI, APPn and COM
// segments and one SOF0 or SOF1 frame (8-bit, 1 to 4 components, sampling
// factors 1..4, a height in the frame, not in a DNL); then a single SOS
// holding every component of the frame (Ss 0, Se 63, Ah Al 0) with a restart
// interval in effect; then entropy-coded data whose restart markers are
// exactly those the interval implies, numbered RST0..RST7 in turn; then EOI.
// False for anything else (progressive, arithmetic, several scans, no DRI, a
// marker count or number that is off, no EOI, a truncated file), and for a
// file of a single interval (nothing to leave out).
[[nodiscard]] bool IndexRestartIntervals(const uint8_t* data, size_t size, RestartLayout* layout);

// Whether MCU columns can be left out: every row must start and end on an
// interval boundary (the interval divides the row).
inline bool ColumnsSeekable(const RestartLayout& l) {
  return l.interval != 0 && l.mcus_per_row % l.interval == 0;
}

// The cut file for MCU rows [row0, mcu_rows) and MCU columns [col0, col1):
// row0 * mcus_per_row must fall on an interval boundary; when the columns
// are not all of them, ColumnsSeekable must hold and col0 and col1 be
// multiples of the interval (or col1 == mcus_per_row). Writes it to `out`
// (replaced), and its frame's size to *width and *height: the original's
// less the MCUs left out (the last column and row keep their partial MCU).
// False (out unspecified) when the arguments break these rules.
[[nodiscard]] bool CutToRestartWindow(const uint8_t* data, const RestartLayout& layout,
                                      uint32_t row0, uint32_t col0, uint32_t col1,
                                      std::vector<uint8_t>* out, uint32_t* width, uint32_t* height);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_JPEG_RESTART_H_
