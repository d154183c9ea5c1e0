#include "server/image/ops.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "server/image/rng.h"
#include "server/image/test_jpeg.h"

namespace stoker::image {
namespace {

// 8 pixels whose results under Pillow 9.4 / torchvision 0.14 were computed
// with torchvision.transforms.functional on Image.fromarray(kPixels).
constexpr uint8_t kPixels[8][3] = {{255, 0, 0},     {0, 255, 0},   {0, 0, 255}, {10, 200, 90},
                                   {128, 128, 128}, {250, 3, 177}, {1, 2, 3},   {77, 66, 55}};

std::vector<uint8_t> Pixels() {
  return std::vector<uint8_t>(&kPixels[0][0], &kPixels[0][0] + sizeof(kPixels));
}

std::vector<uint8_t> Flat(std::initializer_list<std::initializer_list<int>> px) {
  std::vector<uint8_t> v;
  for (auto p : px) {
    for (int c : p) v.push_back(static_cast<uint8_t>(c));
  }
  return v;
}

// An image whose pixel (y, x) has channels (y, x, y * 16 + x) (mod 256).
std::vector<uint8_t> Indexed(uint32_t h, uint32_t w) {
  std::vector<uint8_t> img(size_t{h} * w * 3);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      uint8_t* p = &img[(size_t{y} * w + x) * 3];
      p[0] = static_cast<uint8_t>(y), p[1] = static_cast<uint8_t>(x);
      p[2] = static_cast<uint8_t>(y * 16 + x);
    }
  }
  return img;
}

TEST_CASE("Luma and grayscale are PIL's convert(\"L\")", "[ops]") {
  const uint8_t want[8] = {76, 150, 29, 131, 128, 97, 2, 68};
  std::vector<uint8_t> img = Pixels();
  ToGrayscale(img.data(), 8);
  for (int i = 0; i < 8; ++i) {
    CHECK(Luma(kPixels[i][0], kPixels[i][1], kPixels[i][2]) == want[i]);
    CHECK((img[3 * i] == want[i] && img[3 * i + 1] == want[i] && img[3 * i + 2] == want[i]));
  }
}

TEST_CASE("Brightness, contrast and saturation are PIL's ImageEnhance", "[ops]") {
  std::vector<uint8_t> b = Pixels(), c = Pixels(), s = Pixels();
  AdjustBrightness(b.data(), 8, 1.37f);
  AdjustContrast(c.data(), 8, 0.61f);
  AdjustSaturation(s.data(), 8, 1.6f);
  CHECK(b == Flat({{255, 0, 0},
                   {0, 255, 0},
                   {0, 0, 255},
                   {13, 255, 123},
                   {175, 175, 175},
                   {255, 4, 242},
                   {1, 2, 4},
                   {105, 90, 75}}));
  CHECK(c == Flat({{188, 33, 33},
                   {33, 188, 33},
                   {33, 33, 188},
                   {39, 155, 88},
                   {111, 111, 111},
                   {185, 34, 141},
                   {33, 34, 34},
                   {80, 73, 66}}));
  CHECK(s == Flat({{255, 0, 0},
                   {0, 255, 0},
                   {0, 0, 255},
                   {0, 241, 65},
                   {128, 128, 128},
                   {255, 0, 225},
                   {0, 2, 3},
                   {82, 64, 47}}));
  // The degenerate images themselves at factor 0, the image at 1.
  std::vector<uint8_t> img = Pixels();
  AdjustBrightness(img.data(), 8, 0.0f);
  CHECK(img == std::vector<uint8_t>(24, 0));
  img = Pixels();
  AdjustSaturation(img.data(), 8, 0.0f);
  std::vector<uint8_t> gray = Pixels();
  ToGrayscale(gray.data(), 8);
  CHECK(img == gray);
  img = Pixels();
  AdjustContrast(img.data(), 8, 0.0f);
  // mean of L = (76+150+29+131+128+97+2+68) / 8 = 85.125 -> 85
  CHECK(img == std::vector<uint8_t>(24, 85));
  for (float one : {1.0f}) {
    img = Pixels();
    AdjustBrightness(img.data(), 8, one);
    AdjustContrast(img.data(), 8, one);
    AdjustSaturation(img.data(), 8, one);
    CHECK(img == Pixels());
  }
}

TEST_CASE("Hue is torchvision's adjust_hue through PIL's HSV", "[ops]") {
  std::vector<uint8_t> a = Pixels(), b = Pixels(), z = Pixels();
  AdjustHue(a.data(), 8, 0.5f);
  AdjustHue(b.data(), 8, -0.23f);
  AdjustHue(z.data(), 8, 0.0f);  // PIL's HSV round trip is not lossless
  CHECK(a == Flat({{0, 255, 252},
                   {252, 0, 255},
                   {255, 246, 0},
                   {200, 10, 126},
                   {128, 128, 128},
                   {4, 250, 68},
                   {3, 2, 1},
                   {55, 67, 77}}));
  CHECK(b == Flat({{168, 0, 255},
                   {255, 162, 0},
                   {0, 255, 162},
                   {193, 200, 10},
                   {128, 128, 128},
                   {4, 21, 250},
                   {1, 3, 1},
                   {77, 55, 74}}));
  CHECK(z == Flat({{255, 0, 0},
                   {0, 255, 0},
                   {0, 0, 255},
                   {10, 200, 86},
                   {128, 128, 128},
                   {250, 4, 178},
                   {1, 2, 3},
                   {77, 66, 55}}));
}

TEST_CASE("ColorJitter runs its adjustments in its order", "[ops]") {
  Step s;
  s.kind = StepKind::kColorJitter;
  s.jitter_count = 3;
  s.jitter_order[0] = kHue, s.jitter_order[1] = kContrast, s.jitter_order[2] = kBrightness;
  s.factor[kBrightness] = 1.2f, s.factor[kContrast] = 0.5f, s.factor[kHue] = 0.1f;
  s.factor[kSaturation] = 9.0f;  // not in the order: not applied
  std::vector<uint8_t> got = testing::MakePhoto(20, 30, 3, 5), want = got;
  ColorJitter(got.data(), 600, s);
  AdjustHue(want.data(), 600, 0.1f);
  AdjustContrast(want.data(), 600, 0.5f);
  AdjustBrightness(want.data(), 600, 1.2f);
  CHECK(got == want);
  std::vector<uint8_t> other = testing::MakePhoto(20, 30, 3, 5);
  AdjustBrightness(other.data(), 600, 1.2f);
  AdjustContrast(other.data(), 600, 0.5f);
  AdjustHue(other.data(), 600, 0.1f);
  CHECK(other != want);  // the order matters
}

TEST_CASE("Crop and flips move pixels", "[ops]") {
  const std::vector<uint8_t> img = Indexed(5, 7);
  std::vector<uint8_t> crop(2 * 3 * 3);
  CropImage(img.data(), 7, CropBox{1, 2, 2, 3}, crop.data());
  for (uint32_t y = 0; y < 2; ++y) {
    for (uint32_t x = 0; x < 3; ++x) {
      CHECK(crop[(y * 3 + x) * 3] == 1 + y);
      CHECK(crop[(y * 3 + x) * 3 + 1] == 2 + x);
    }
  }
  for (uint32_t w : {1u, 6u, 7u}) {
    std::vector<uint8_t> h = Indexed(4, w), v = Indexed(4, w);
    FlipHorizontal(h.data(), 4, w);
    FlipVertical(v.data(), 4, w);
    for (uint32_t y = 0; y < 4; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        CHECK(h[(y * w + x) * 3 + 1] == w - 1 - x);
        CHECK(h[(y * w + x) * 3] == y);
        CHECK(v[(y * w + x) * 3] == 3 - y);
        CHECK(v[(y * w + x) * 3 + 1] == x);
      }
    }
  }
}

// Index of column x (-pad .. n + pad) in numpy.pad's result for an axis of
// n pixels: written from numpy's outputs for n = 5 and n = 1.
TEST_CASE("Padding follows numpy.pad in every mode", "[ops]") {
  // np.pad(np.arange(5), 7, mode) for reflect and symmetric, and edge.
  const std::vector<int> reflect = {1, 2, 3, 4, 3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1, 0, 1, 2, 3};
  const std::vector<int> symmetric = {3, 4, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 0, 1};
  const std::vector<int> edge = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4};
  const std::vector<uint8_t> row = Indexed(1, 5);
  const uint32_t pad[4] = {7, 0, 7, 0};
  const uint8_t fill[3] = {9, 8, 7};
  for (auto [mode, want] :
       {std::pair{PadMode::kReflect, reflect}, std::pair{PadMode::kSymmetric, symmetric},
        std::pair{PadMode::kEdge, edge}}) {
    std::vector<uint8_t> out(19 * 3);
    PadImage(row.data(), 1, 5, pad, mode, fill, out.data());
    for (int x = 0; x < 19; ++x) {
      CAPTURE(static_cast<int>(mode), x);
      CHECK(out[3 * x + 1] == want[x]);
    }
  }
  std::vector<uint8_t> out(19 * 3);
  PadImage(row.data(), 1, 5, pad, PadMode::kConstant, fill, out.data());
  for (int x = 0; x < 19; ++x) {
    if (x >= 7 && x < 12) {
      CHECK(out[3 * x + 1] == x - 7);
    } else {
      CHECK((out[3 * x] == 9 && out[3 * x + 1] == 8 && out[3 * x + 2] == 7));
    }
  }
  // A 1-pixel axis: numpy extends it as edge for reflect and symmetric.
  const std::vector<uint8_t> one = Indexed(1, 1);
  for (PadMode mode : {PadMode::kReflect, PadMode::kSymmetric}) {
    const uint32_t p2[4] = {2, 0, 3, 0};
    std::vector<uint8_t> o(6 * 3);
    PadImage(one.data(), 1, 1, p2, mode, fill, o.data());
    CHECK(o == std::vector<uint8_t>(18, 0));
  }
  // Both axes at once: rows and columns map independently.
  const std::vector<uint8_t> img = Indexed(3, 4);
  const uint32_t p4[4] = {2, 3, 1, 4};
  std::vector<uint8_t> o(10 * 7 * 3);
  PadImage(img.data(), 3, 4, p4, PadMode::kReflect, fill, o.data());
  const int rows[10] = {1, 2, 1, 0, 1, 2, 1, 0, 1, 2};  // np.pad(arange(3), (3, 4), "reflect")
  const int cols[7] = {2, 1, 0, 1, 2, 3, 2};            // np.pad(arange(4), (2, 1), "reflect")
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 7; ++x) {
      CHECK(o[(y * 7 + x) * 3] == rows[y]);
      CHECK(o[(y * 7 + x) * 3 + 1] == cols[x]);
    }
  }
}

TEST_CASE("Gaussian kernel is torchvision's", "[ops][blur]") {
  // torchvision's _get_gaussian_kernel1d(5, 1.3), float32 bits. torch's
  // vectorized exp and sum differ from libm's in the last bit: within 2 ulp.
  const uint32_t want[5] = {0x3dca4a8a, 0x3e75b4b0, 0x3ea5260c, 0x3e75b4b0, 0x3dca4a8a};
  float k[5];
  GaussianKernel(5, 1.3f, k);
  for (int i = 0; i < 5; ++i) {
    float w;
    std::memcpy(&w, &want[i], 4);
    CAPTURE(i, k[i], w);
    CHECK(std::abs(k[i] - w) <= 2 * w * 0x1p-24f);
  }
  CHECK(k[0] == k[4]);
  CHECK(k[1] == k[3]);
  float one;
  GaussianKernel(1, 0.7f, &one);
  CHECK(one == 1.0f);
}

// The blur by its definition: the reflect-padded image convolved with the
// 2-D kernel in double, then rounded.
std::vector<uint8_t> ReferenceBlur(const std::vector<uint8_t>& img, uint32_t h, uint32_t w,
                                   uint32_t kx, uint32_t ky, float sigma) {
  std::vector<float> gx(kx), gy(ky);
  GaussianKernel(kx, sigma, gx.data());
  GaussianKernel(ky, sigma, gy.data());
  auto reflect = [](int64_t i, int64_t n) {
    if (n == 1) return int64_t{0};
    const int64_t period = 2 * (n - 1);
    int64_t m = ((i % period) + period) % period;
    return m < n ? m : period - m;
  };
  std::vector<uint8_t> out(img.size());
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < ky; ++j) {
          for (int64_t i = 0; i < kx; ++i) {
            const int64_t sy = reflect(y + j - ky / 2, h), sx = reflect(x + i - kx / 2, w);
            sum += double{gy[j]} * gx[i] * img[(sy * w + sx) * 3 + c];
          }
        }
        out[(y * w + x) * 3 + c] = static_cast<uint8_t>(std::nearbyint(sum));
      }
    }
  }
  return out;
}

TEST_CASE("Gaussian blur matches the 2-D definition", "[ops][blur]") {
  struct Case {
    uint32_t h, w, kx, ky;
    float sigma;
  };
  for (const Case& c :
       {Case{40, 50, 5, 5, 1.3f}, Case{33, 21, 9, 3, 2.0f}, Case{16, 16, 1, 7, 0.4f},
        Case{8, 9, 15, 15, 5.0f}, Case{3, 3, 5, 3, 1.0f}}) {
    const std::vector<uint8_t> img = testing::MakePhoto(c.h, c.w, 3, c.kx * 31 + c.ky);
    std::vector<uint8_t> got(img.size());
    std::vector<float> scratch(GaussianBlurScratch(c.h, c.w, c.kx, c.ky));
    GaussianBlur(img.data(), c.h, c.w, c.kx, c.ky, c.sigma, scratch.data(), got.data());
    int worst = 0;
    const double mae = testing::MeanAbsDiff(
        got.data(), ReferenceBlur(img, c.h, c.w, c.kx, c.ky, c.sigma).data(), got.size(), &worst);
    CAPTURE(c.h, c.w, c.kx, c.ky, c.sigma, mae);
    CHECK(worst <= 1);
    CHECK(mae < 0.01);
  }
  // A flat image stays flat; a 1x1 kernel changes nothing.
  std::vector<uint8_t> flat(20 * 20 * 3, 77), out(flat.size());
  std::vector<float> scratch(GaussianBlurScratch(20, 20, 7, 7));
  GaussianBlur(flat.data(), 20, 20, 7, 7, 3.0f, scratch.data(), out.data());
  CHECK(out == flat);
  const std::vector<uint8_t> img = testing::MakePhoto(20, 20, 3, 1);
  GaussianBlur(img.data(), 20, 20, 1, 1, 3.0f, scratch.data(), out.data());
  CHECK(out == img);
}

}  // namespace
}  // namespace stoker::image
