#include "server/image/decode/png_unfilter.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker::image {
namespace {

// The spec's predictor, with its tie order (a, then b, then c), written
// without branches on the data.
inline uint8_t Paeth(int a, int b, int c) {
  const int pa = std::abs(b - c);
  const int pb = std::abs(a - c);
  const int pc = std::abs(a + b - 2 * c);
  const int b_or_c = pb <= pc ? b : c;
  return static_cast<uint8_t>(pa <= std::min(pb, pc) ? a : b_or_c);
}

// BPP as a constant lets the compiler keep each channel's chain in
// registers.
template <size_t BPP>
void Sub(uint8_t* row, size_t n) {
  for (size_t i = BPP; i < n; ++i) row[i] = static_cast<uint8_t>(row[i] + row[i - BPP]);
}

void Up(uint8_t* row, const uint8_t* prev, size_t n) {
  for (size_t i = 0; i < n; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
}

template <size_t BPP>
void Average(uint8_t* row, const uint8_t* prev, size_t n) {
  const size_t head = std::min(BPP, n);
  for (size_t i = 0; i < head; ++i) row[i] = static_cast<uint8_t>(row[i] + (prev[i] >> 1));
  for (size_t i = BPP; i < n; ++i) {
    row[i] = static_cast<uint8_t>(row[i] + ((row[i - BPP] + prev[i]) >> 1));
  }
}

template <size_t BPP>
void PaethRow(uint8_t* row, const uint8_t* prev, size_t n) {
  // The first pixel: a = c = 0, so the predictor is b.
  const size_t head = std::min(BPP, n);
  for (size_t i = 0; i < head; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
  for (size_t i = BPP; i < n; ++i) {
    row[i] = static_cast<uint8_t>(row[i] + Paeth(row[i - BPP], prev[i], prev[i - BPP]));
  }
}

#if defined(__SSE2__)
// Sub, Average and Paeth for 3- and 4-byte pixels, one pixel at a time in
// 16-bit lanes: the chain from each pixel to the next is serial, but its
// channels run side by side (about 3x the scalar loops on RGB photos).
// Bytes to and from general registers: a 3-byte memcpy through a stack
// temporary would stall store forwarding on every pixel.
template <size_t BPP>
__m128i LoadPixel(const uint8_t* p) {
  uint32_t v;
  if constexpr (BPP == 4) {
    std::memcpy(&v, p, 4);
  } else {
    v = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16;
  }
  return _mm_unpacklo_epi8(_mm_cvtsi32_si128(static_cast<int>(v)), _mm_setzero_si128());
}

template <size_t BPP>
void StorePixel(uint8_t* p, __m128i v) {
  const auto bytes = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(v, v)));
  if constexpr (BPP == 4) {
    std::memcpy(p, &bytes, 4);
  } else {
    p[0] = static_cast<uint8_t>(bytes);
    p[1] = static_cast<uint8_t>(bytes >> 8);
    p[2] = static_cast<uint8_t>(bytes >> 16);
  }
}

inline __m128i Abs16(__m128i v) { return _mm_max_epi16(v, _mm_sub_epi16(_mm_setzero_si128(), v)); }

template <size_t BPP>
void SubPixels(uint8_t* row, size_t n) {
  const __m128i low = _mm_set1_epi16(0xFF);
  __m128i a = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += BPP) {
    a = _mm_and_si128(_mm_add_epi16(LoadPixel<BPP>(row + i), a), low);
    StorePixel<BPP>(row + i, a);
  }
}

template <size_t BPP>
void AveragePixels(uint8_t* row, const uint8_t* prev, size_t n) {
  const __m128i low = _mm_set1_epi16(0xFF);
  __m128i a = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += BPP) {
    const __m128i avg = _mm_srli_epi16(_mm_add_epi16(a, LoadPixel<BPP>(prev + i)), 1);
    a = _mm_and_si128(_mm_add_epi16(LoadPixel<BPP>(row + i), avg), low);
    StorePixel<BPP>(row + i, a);
  }
}

template <size_t BPP>
void PaethPixels(uint8_t* row, const uint8_t* prev, size_t n) {
  const __m128i low = _mm_set1_epi16(0xFF);
  __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();
  for (size_t i = 0; i < n; i += BPP) {
    const __m128i b = LoadPixel<BPP>(prev + i);
    const __m128i b_c = _mm_sub_epi16(b, c), a_c = _mm_sub_epi16(a, c);
    const __m128i pa = Abs16(b_c), pb = Abs16(a_c), pc = Abs16(_mm_add_epi16(a_c, b_c));
    // pb <= pc ? b : c, then pa <= min(pb, pc) ? a : that.
    const __m128i take_c = _mm_cmpgt_epi16(pb, pc);
    const __m128i b_or_c = _mm_or_si128(_mm_and_si128(take_c, c), _mm_andnot_si128(take_c, b));
    const __m128i not_a = _mm_cmpgt_epi16(pa, _mm_min_epi16(pb, pc));
    const __m128i pred = _mm_or_si128(_mm_and_si128(not_a, b_or_c), _mm_andnot_si128(not_a, a));
    a = _mm_and_si128(_mm_add_epi16(LoadPixel<BPP>(row + i), pred), low);
    StorePixel<BPP>(row + i, a);
    c = b;
  }
}
#endif

// The first row: the previous one is all zeros, so Up is None, Average adds
// half the left byte and Paeth the left byte (Sub's rule).
template <size_t BPP>
void FirstRow(uint8_t filter, uint8_t* row, size_t n) {
  if (filter == 1 || filter == 4) {
    Sub<BPP>(row, n);
  } else if (filter == 3) {
    for (size_t i = BPP; i < n; ++i) row[i] = static_cast<uint8_t>(row[i] + (row[i - BPP] >> 1));
  }
}

// Filter 1..4 (UnfilterRow sorts out the others).
template <size_t BPP>
void Unfilter(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n) {
  if (prev == nullptr) return FirstRow<BPP>(filter, row, n);
#if defined(__SSE2__)
  // Rows of whole pixels only (n is a multiple of BPP for 8-bit samples);
  // Up has no chain and vectorizes as it is.
  if constexpr (BPP == 3 || BPP == 4) {
    if (n % BPP == 0 && filter != 2) {
      if (filter == 1) return SubPixels<BPP>(row, n);
      if (filter == 3) return AveragePixels<BPP>(row, prev, n);
      return PaethPixels<BPP>(row, prev, n);
    }
  }
#endif
  switch (filter) {
    case 1:
      return Sub<BPP>(row, n);
    case 2:
      return Up(row, prev, n);
    case 3:
      return Average<BPP>(row, prev, n);
    case 4:
      return PaethRow<BPP>(row, prev, n);
    default:
      return;
  }
}

}  // namespace

bool UnfilterRow(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n, size_t bpp) {
  using Kernel = void (*)(uint8_t, uint8_t*, const uint8_t*, size_t);
  static constexpr Kernel kByBpp[9] = {nullptr, Unfilter<1>, Unfilter<2>, Unfilter<3>, Unfilter<4>,
                                       nullptr, Unfilter<6>, nullptr,     Unfilter<8>};
  if (filter > 4) return false;
  if (filter == 0) return true;
  if (bpp >= 9 || kByBpp[bpp] == nullptr) return false;
  kByBpp[bpp](filter, row, prev, n);
  return true;
}

}  // namespace stoker::image
