#include "server/image/decode/exif.h"

#include <cstring>

namespace stoker::image {
namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kTypeShort = 3;
constexpr uint16_t kTypeLong = 4;
constexpr uint32_t kMaxEntries = 1024;  // IFD0 rarely has more than ~30

class TiffReader {
 public:
  TiffReader(const uint8_t* data, size_t size, bool big_endian)
      : data_(data), size_(size), big_endian_(big_endian) {}

  bool U16(size_t offset, uint16_t* v) const {
    if (offset > size_ || size_ - offset < 2) return false;
    const uint8_t* p = data_ + offset;
    *v = big_endian_ ? static_cast<uint16_t>(p[0] << 8 | p[1])
                     : static_cast<uint16_t>(p[1] << 8 | p[0]);
    return true;
  }
  bool U32(size_t offset, uint32_t* v) const {
    if (offset > size_ || size_ - offset < 4) return false;
    const uint8_t* p = data_ + offset;
    *v = big_endian_ ? (uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3])
                     : (uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0]);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  bool big_endian_;
};

}  // namespace

int ParseExifOrientation(const uint8_t* app1, size_t size) {
  static constexpr uint8_t kExifId[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1 == nullptr || size < sizeof(kExifId) + 8) return 1;
  if (std::memcmp(app1, kExifId, sizeof(kExifId)) != 0) return 1;
  const uint8_t* tiff = app1 + sizeof(kExifId);
  const size_t tiff_size = size - sizeof(kExifId);
  bool big_endian;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    big_endian = false;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    big_endian = true;
  } else {
    return 1;
  }
  const TiffReader r(tiff, tiff_size, big_endian);
  uint16_t magic;
  uint32_t ifd0;
  uint16_t entries;
  if (!r.U16(2, &magic) || magic != 42 || !r.U32(4, &ifd0) || !r.U16(ifd0, &entries)) return 1;
  const uint32_t n = entries < kMaxEntries ? entries : kMaxEntries;
  for (uint32_t i = 0; i < n; ++i) {
    const size_t entry = size_t{ifd0} + 2 + size_t{i} * 12;
    uint16_t tag, type;
    uint32_t count;
    if (!r.U16(entry, &tag) || !r.U16(entry + 2, &type) || !r.U32(entry + 4, &count)) return 1;
    if (tag != kOrientationTag) continue;
    if (count < 1) return 1;
    uint32_t value = 0;
    if (type == kTypeShort) {
      uint16_t v16;
      if (!r.U16(entry + 8, &v16)) return 1;
      value = v16;
    } else if (type == kTypeLong) {
      if (!r.U32(entry + 8, &value)) return 1;
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace stoker::image
