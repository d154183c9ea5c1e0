#include "server/image/ops/ops.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "proto/stoker/ring_layout.h"
#include "server/image/ops/rng.h"
#include "server/image/ops/transform.h"
#include "testing/test_jpeg.h"

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

// --- The policies' ops ---

std::vector<uint8_t> AllValues() {  // 256 pixels (v, 255 - v, v / 2)
  std::vector<uint8_t> img;
  for (int v = 0; v < 256; ++v) {
    img.push_back(static_cast<uint8_t>(v));
    img.push_back(static_cast<uint8_t>(255 - v));
    img.push_back(static_cast<uint8_t>(v / 2));
  }
  return img;
}

TEST_CASE("Point ops are PIL's tables", "[ops][policy]") {
  const std::vector<uint8_t> all = AllValues();
  for (uint32_t bits = 0; bits <= 8; ++bits) {
    std::vector<uint8_t> img = all;
    Posterize(img.data(), 256, bits);
    const int mask = ~((1 << (8 - bits)) - 1);
    for (size_t i = 0; i < img.size(); ++i) CHECK(img[i] == (all[i] & mask));
  }
  std::vector<uint8_t> p = all;
  Posterize(p.data(), 256, 3);
  CHECK((p[3 * 200] == 192 && p[3 * 31] == 0 && p[3 * 32] == 32));
  // i < threshold keeps i: 127.5 inverts 128 but not 127; 0 inverts all;
  // above 255 none.
  for (float t : {0.0f, 1.0f, 127.5f, 128.0f, 255.0f, 256.0f, -3.0f}) {
    std::vector<uint8_t> img = all;
    Solarize(img.data(), 256, t);
    for (size_t i = 0; i < img.size(); ++i) {
      CAPTURE(t, i);
      CHECK(img[i] == (static_cast<float>(all[i]) < t ? all[i] : 255 - all[i]));
    }
  }
  std::vector<uint8_t> inv = all;
  Invert(inv.data(), 256);
  for (size_t i = 0; i < inv.size(); ++i) CHECK(inv[i] == 255 - all[i]);
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>((v * 7) & 0xff);
  std::vector<uint8_t> l = all;
  ApplyLut(l.data(), 256, lut);
  for (size_t i = 0; i < l.size(); ++i) CHECK(l[i] == lut[all[i]]);
}

TEST_CASE("Autocontrast stretches each channel, leaves a flat one", "[ops][policy]") {
  // Values from torchvision's F.autocontrast on this image (PIL 9.4).
  std::vector<uint8_t> img = Flat({{10, 200, 7},
                                   {20, 100, 7},
                                   {30, 0, 7},
                                   {40, 50, 7},
                                   {250, 150, 7},
                                   {60, 250, 7},
                                   {70, 25, 7},
                                   {80, 75, 7},
                                   {90, 125, 7}});
  Autocontrast(img.data(), 9);
  CHECK(img == Flat({{0, 204, 7},
                     {10, 102, 7},
                     {21, 0, 7},
                     {31, 51, 7},
                     {255, 153, 7},
                     {53, 255, 7},
                     {63, 25, 7},
                     {74, 76, 7},
                     {85, 127, 7}}));
}

TEST_CASE("Equalize is PIL's histogram table", "[ops][policy]") {
  // Channel 0: 510 zeros, 510 x 100, 255 x 200. step = (1275 - 255) / 255
  // = 4; the table: n / 4 with n = 2 + the count below: 0 -> 0, 100 ->
  // 512 / 4 = 128, 200 -> 1022 / 4 = 255. Channel 1 is flat (unchanged);
  // channel 2 the same counts reversed (200 x 510 ... 0 x 255).
  std::vector<uint8_t> img;
  for (int i = 0; i < 1275; ++i) {
    const int v = i < 510 ? 0 : i < 1020 ? 100 : 200;
    const int r = i < 255 ? 200 : i < 765 ? 100 : 0;
    img.insert(img.end(), {static_cast<uint8_t>(v), 77, static_cast<uint8_t>(r)});
  }
  std::vector<uint8_t> got = img;
  Equalize(got.data(), 1275);
  for (size_t i = 0; i < 1275; ++i) {
    const uint8_t* in = &img[3 * i];
    const uint8_t* out = &got[3 * i];
    CHECK(out[0] == (in[0] == 0 ? 0 : in[0] == 100 ? 128 : 255));
    CHECK(out[1] == 77);
    // Channel 2: 510 x 0, 510 x 100, 255 x 200: the same table.
    CHECK(out[2] == (in[2] == 0 ? 0 : in[2] == 100 ? 128 : 255));
  }
  // Channel 0 of these: 510 x 0, 257 x 100, 100 x 200 (last): step = 767 /
  // 255 = 3; 0 -> 1 / 3 = 0, 100 -> 511 / 3 = 170, 200 -> 768 / 3 = 256,
  // past 255: PIL's point() clips it to 255.
  std::vector<uint8_t> clip;
  for (int i = 0; i < 867; ++i) {
    clip.insert(clip.end(), {static_cast<uint8_t>(i < 510 ? 0 : i < 767 ? 100 : 200), 0, 0});
  }
  Equalize(clip.data(), 867);
  for (int i = 0; i < 867; ++i) CHECK(clip[3 * i] == (i < 510 ? 0 : i < 767 ? 170 : 255));
  // Fewer than 256 pixels besides the last value: step 0, unchanged.
  std::vector<uint8_t> small = Pixels();
  Equalize(small.data(), 8);
  CHECK(small == Pixels());
}

TEST_CASE("Sharpness blends with PIL's SMOOTH, the border kept", "[ops][policy]") {
  const std::vector<uint8_t> img = Flat({{10, 200, 7},
                                         {20, 100, 7},
                                         {30, 0, 7},
                                         {40, 50, 7},
                                         {250, 150, 7},
                                         {60, 250, 7},
                                         {70, 25, 7},
                                         {80, 75, 7},
                                         {90, 125, 7}});
  std::vector<uint8_t> scratch(img.size());
  // F.adjust_sharpness(img, 2.0) and (img, 0.0): the center pixel changes
  // only; 0 gives SMOOTH itself ((sum + 4 * center) / 13, rounded).
  for (auto [factor, center] :
       {std::pair{2.0f, Flat({{255, 179, 7}})}, std::pair{0.0f, Flat({{127, 121, 7}})},
        std::pair{1.0f, Flat({{250, 150, 7}})}}) {
    std::vector<uint8_t> got = img;
    AdjustSharpness(got.data(), 3, 3, factor, scratch.data());
    CAPTURE(factor);
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i] == (i / 3 == 4 ? center[i % 3] : img[i]));
    }
  }
  // Under 3 pixels on a side: unchanged, as Pillow copies it.
  std::vector<uint8_t> two = Indexed(2, 5);
  AdjustSharpness(two.data(), 2, 5, 0.0f, scratch.data());
  CHECK(two == Indexed(2, 5));
  // A flat image stays flat at any factor.
  std::vector<uint8_t> flat(30 * 41 * 3, 93), flat_scratch(flat.size());
  AdjustSharpness(flat.data(), 30, 41, 3.0f, flat_scratch.data());
  CHECK(flat == std::vector<uint8_t>(30 * 41 * 3, 93));
}

TEST_CASE("Inverse affine matrix is torchvision's", "[ops][policy]") {
  double m[6];
  const double center[2] = {50, 40}, translate[2] = {3, -2}, shear[2] = {10, -5};
  InverseAffineMatrix(center, 30.0, translate, 1.25, shear, m);
  // torchvision's _get_inverse_affine_matrix([50., 40.], 30., [3, -2], 1.25,
  // [10., -5.]), as Python prints it.
  const double want[6] = {0.6116016605142625,   0.5159922709786133, -2.022594304443217,
                          -0.46061392412527935, 0.6578248576171812, 39.41519338918692};
  for (int i = 0; i < 6; ++i) CHECK(m[i] == want[i]);
  const double none[2] = {0, 0};
  InverseAffineMatrix(center, 0.0, none, 1.0, none, m);
  CHECK((m[0] == 1 && m[1] == 0 && m[2] == 0 && m[3] == 0 && m[4] == 1 && m[5] == 0));
}

TEST_CASE("Affine identity copies, whole-pixel translations shift with fill", "[ops][policy]") {
  const uint32_t h = 13, w = 17;
  const std::vector<uint8_t> img = Indexed(h, w);
  const uint8_t fill[3] = {201, 202, 203};
  for (Interpolation interp : {Interpolation::kNearest, Interpolation::kBilinear}) {
    CAPTURE(static_cast<int>(interp));
    std::vector<uint8_t> out(img.size());
    const double id[6] = {1, 0, 0, 0, 1, 0};
    AffineTransform(img.data(), h, w, id, interp, fill, out.data());
    CHECK(out == img);
    // F.affine(translate=[tx, ty]): output (x, y) = input (x - tx, y - ty).
    // Shifts of the image's size or more leave only fill (the whole-pixel
    // shortcut takes those up to the size; past it, the engines).
    for (auto [tx, ty] :
         {std::pair{3, -2}, std::pair{-5, 4}, std::pair{0, 7}, std::pair{16, -12},
          std::pair{-17, 0}, std::pair{0, 13}, std::pair{18, 1}, std::pair{-2, -14}}) {
      const double center[2] = {w * 0.5, h * 0.5}, t[2] = {double(tx), double(ty)},
                   shear[2] = {0, 0};
      double m[6];
      InverseAffineMatrix(center, 0.0, t, 1.0, shear, m);
      // NEAREST: a rotation by a tiny angle takes the general path (not the
      // pure translation one) and lands on the same pixels. (BILINEAR's
      // weights of nearly 1 would truncate to one level less.)
      double mr[6];
      InverseAffineMatrix(center, 1e-9, t, 1.0, shear, mr);
      for (const double* mat : {m, interp == Interpolation::kNearest ? mr : m}) {
        AffineTransform(img.data(), h, w, mat, interp, fill, out.data());
        for (uint32_t y = 0; y < h; ++y) {
          for (uint32_t x = 0; x < w; ++x) {
            const int sx = int(x) - tx, sy = int(y) - ty;
            const bool inside = sx >= 0 && sx < int(w) && sy >= 0 && sy < int(h);
            const uint8_t* want = inside ? &img[(size_t(sy) * w + sx) * 3] : fill;
            const uint8_t* got = &out[(size_t{y} * w + x) * 3];
            CAPTURE(tx, ty, x, y);
            CHECK((got[0] == want[0] && got[1] == want[1] && got[2] == want[2]));
          }
        }
      }
    }
  }
}

TEST_CASE("Affine sampling is Pillow's at fractional points", "[ops][policy]") {
  // PIL's Image.transform((2, 2), AFFINE, m, resample, fillcolor=(9, 9, 9))
  // of this 2x2 image.
  const std::vector<uint8_t> img = Flat({{0, 0, 0}, {100, 200, 50}, {200, 40, 255}, {10, 10, 10}});
  const uint8_t fill[3] = {9, 9, 9};
  std::vector<uint8_t> out(img.size());
  const double half[6] = {1.0, 0.0, 0.25, 0.0, 1.0, 0.5};
  AffineTransform(img.data(), 2, 2, half, Interpolation::kBilinear, fill, out.data());
  // (0, 0) samples (0.25, 0.5) between the four: 88.75 truncated to 88.
  CHECK(out == Flat({{88, 41, 103}, {55, 105, 30}, {9, 9, 9}, {9, 9, 9}}));
  const double skew[6] = {1.0, 0.01, 0.25, 0.0, 1.0, 0.5};
  AffineTransform(img.data(), 2, 2, skew, Interpolation::kNearest, fill, out.data());
  CHECK(out == Flat({{200, 40, 255}, {10, 10, 10}, {9, 9, 9}, {9, 9, 9}}));
}

TEST_CASE("Rotation by right angles is a transpose", "[ops][policy]") {
  const uint8_t fill[3] = {1, 2, 3};
  for (auto [h, w] : {std::pair{9u, 9u}, std::pair{7u, 12u}}) {
    const std::vector<uint8_t> img = Indexed(h, w);
    auto at = [&](const std::vector<uint8_t>& v, uint32_t width, uint32_t y, uint32_t x) {
      return std::vector<uint8_t>(&v[(size_t{y} * width + x) * 3],
                                  &v[(size_t{y} * width + x) * 3] + 3);
    };
    for (Interpolation interp : {Interpolation::kNearest, Interpolation::kBilinear}) {
      std::vector<uint8_t> out(img.size());
      for (double angle : {0.0, 360.0, -720.0}) {
        RotateImage(img.data(), h, w, angle, nullptr, interp, fill, out.data());
        CHECK(out == img);
      }
      for (double angle : {180.0, -180.0, 540.0}) {
        RotateImage(img.data(), h, w, angle, nullptr, interp, fill, out.data());
        for (uint32_t y = 0; y < h; ++y) {
          for (uint32_t x = 0; x < w; ++x)
            CHECK(at(out, w, y, x) == at(img, w, h - 1 - y, w - 1 - x));
        }
      }
      if (h != w) continue;                  // PIL transposes square images only
      for (double angle : {90.0, -270.0}) {  // counter-clockwise
        RotateImage(img.data(), h, w, angle, nullptr, interp, fill, out.data());
        for (uint32_t y = 0; y < h; ++y) {
          for (uint32_t x = 0; x < w; ++x) CHECK(at(out, w, y, x) == at(img, w, x, w - 1 - y));
        }
      }
      RotateImage(img.data(), h, w, 270.0, nullptr, interp, fill, out.data());
      for (uint32_t y = 0; y < h; ++y) {
        for (uint32_t x = 0; x < w; ++x) CHECK(at(out, w, y, x) == at(img, w, h - 1 - x, y));
      }
      // About a given center, 90 degrees goes through the affine engine: on
      // the image center of an odd square it lands on the same pixels.
      const double center[2] = {4.5, 4.5};
      std::vector<uint8_t> affine(img.size());
      RotateImage(img.data(), h, w, 90.0, center, interp, fill, affine.data());
      RotateImage(img.data(), h, w, 90.0, nullptr, interp, fill, out.data());
      CHECK(affine == out);
    }
  }
  // 7 x 12 by 90 degrees: rotated in place about the center, the corners
  // that leave the image filled.
  const std::vector<uint8_t> img = Indexed(7, 12);
  std::vector<uint8_t> out(img.size());
  RotateImage(img.data(), 7, 12, 90.0, nullptr, Interpolation::kNearest, fill, out.data());
  CHECK((out[0] == 1 && out[1] == 2 && out[2] == 3));
}

TEST_CASE("AugMix's mixing is float32 products and sums, truncated", "[ops][policy]") {
  const std::vector<uint8_t> a = AllValues();
  std::vector<uint8_t> b = a;
  Invert(b.data(), 256);
  std::vector<float> acc(a.size());
  const float w0 = 0.3f, w1 = 0.45f, w2 = 0.25f;
  MixStart(a.data(), 256, w0, acc.data());
  MixAdd(b.data(), 256, w1, acc.data());
  MixAdd(a.data(), 256, w2, acc.data());
  std::vector<uint8_t> out(a.size());
  MixFinish(acc.data(), 256, out.data());
  for (size_t i = 0; i < a.size(); ++i) {
    volatile float m = w0 * static_cast<float>(a[i]);
    m = m + w1 * static_cast<float>(b[i]);
    m = m + w2 * static_cast<float>(a[i]);
    CHECK(out[i] == static_cast<uint8_t>(static_cast<float>(m)));
  }
  // Out of range: clamped.
  const float over[3] = {-3.5f, 255.9f, 300.0f};
  uint8_t o[3];
  MixFinish(over, 1, o);
  CHECK((o[0] == 0 && o[1] == 255 && o[2] == 255));
}

// torchvision's tensor kernels: expectations from
// torchvision.transforms.functional on torch.from_numpy(pixels).permute(2,
// 0, 1) (uint8 tensors), checked by hand where noted.
TEST_CASE("Tensor contrast and saturation are _blend on the uint8 tensor", "[ops][tensor]") {
  // rgb_to_grayscale: (0.2989 r + 0.587 g) + 0.114 b, truncated.
  const uint8_t gray[8] = {76, 149, 29, 130, 127, 96, 1, 68};
  for (int i = 0; i < 8; ++i) {
    CHECK(TensorGrayscale(kPixels[i][0], kPixels[i][1], kPixels[i][2]) == gray[i]);
  }
  std::vector<uint8_t> img = Pixels();
  CHECK(TensorGrayMean(img.data(), 8) == 84.5f);  // 676 / 8
  TensorAdjustContrast(img.data(), 8, 1.5);
  CHECK(img == Flat({{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {0, 255, 92}, {149, 149, 149},
                     {255, 0, 223}, {0, 0, 0}, {73, 56, 40}}));
  img = Pixels();
  TensorAdjustContrast(img.data(), 8, 0.3);
  // (128, 128, 128): 0.3 * 128 + 0.7 * 84.5 = 97.55, truncated.
  CHECK(img == Flat({{135, 59, 59}, {59, 135, 59}, {59, 59, 135}, {62, 119, 86}, {97, 97, 97},
                     {134, 60, 112}, {59, 59, 60}, {82, 78, 75}}));
  img = Pixels();
  TensorAdjustSaturation(img.data(), 8, 1.7);
  CHECK(img == Flat({{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {0, 249, 62}, {128, 128, 128},
                     {255, 0, 233}, {1, 2, 4}, {83, 64, 45}}));
  img = Pixels();
  TensorAdjustSaturation(img.data(), 8, 0.0);  // the grey image
  for (int i = 0; i < 8; ++i) {
    CHECK((img[3 * i] == gray[i] && img[3 * i + 1] == gray[i] && img[3 * i + 2] == gray[i]));
  }
}

TEST_CASE("Tensor grey mean sums in float32 as torch's cascade_sum does", "[ops][tensor]") {
  // An LCG's pixels; torch.mean(rgb_to_grayscale(t).float()) on one thread.
  auto image = [](size_t n) {
    std::vector<uint8_t> img(n * 3);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t x = (static_cast<uint32_t>(i) * 1103515245u + 12345u) >> 16;
      img[3 * i] = static_cast<uint8_t>(x & 255);
      img[3 * i + 1] = static_cast<uint8_t>(((x >> 8) & 127) | 128);
      img[3 * i + 2] = static_cast<uint8_t>((x * 3) & 255);
    }
    return img;
  };
  std::vector<uint8_t> img = image(307200);  // grey sum 50551377
  CHECK(TensorGrayMean(img.data(), 307200) == 164.55526733398438f);
  // Grey sum 164555022: the float32 of the exact mean would be
  // 164.55502319335938; torch's float32 sums round on the way.
  img = image(1000000);
  CHECK(TensorGrayMean(img.data(), 1000000) == 164.5550079345703f);
}

TEST_CASE("Tensor autocontrast scales by reciprocal(max - min) * 255", "[ops][tensor]") {
  std::vector<uint8_t> img = Pixels();
  TensorAutocontrast(img.data(), 8);  // every channel spans 0..255 already
  CHECK(img == Pixels());
  // One channel 7..10: scale (1 / 3.0f) * 255 = 85.0f; 8 -> 85, 10 -> 255;
  // a flat channel stays.
  img = Flat({{7, 5, 0}, {8, 5, 0}, {10, 5, 0}});
  TensorAutocontrast(img.data(), 3);
  CHECK(img == Flat({{0, 5, 0}, {85, 5, 0}, {255, 5, 0}}));
  // (1 / d) * 255 is not 255 / d in float32: the top level of 0..61 lands
  // on 254.99998 (torch gives 254; 255 / 61.0f would give 255), that of
  // 0..7 on 255 (255 / 7.0f: 254).
  img = Flat({{0, 0, 1}, {30, 3, 1}, {61, 7, 1}});
  TensorAutocontrast(img.data(), 3);
  CHECK(img == Flat({{0, 0, 1}, {125, 109, 1}, {254, 255, 1}}));
}

TEST_CASE("Tensor sharpness rounds the 3x3 mean, blends every pixel", "[ops][tensor]") {
  // A 3x4 image: only the two inner pixels are blurred.
  const std::vector<uint8_t> src =
      Flat({{10, 245, 5}, {200, 55, 100}, {30, 225, 15}, {40, 215, 20},  // row 0
            {250, 5, 125}, {5, 250, 2}, {255, 0, 127}, {0, 255, 0},      // row 1
            {70, 185, 35}, {80, 175, 40}, {90, 165, 45}, {100, 155, 50}});
  std::vector<uint8_t> scratch(src.size());
  std::vector<uint8_t> img = src;
  TensorAdjustSharpness(img.data(), 3, 4, 0.0, scratch.data());  // the blurred image itself
  std::vector<uint8_t> want = src;
  // (1, 1) red: (10 + 200 + 30 + 250 + 255 + 70 + 80 + 90 + 5 * 5) / 13 =
  // 77.69, rounded to 78.
  const uint8_t blurred[2][3] = {{78, 177, 39}, {140, 115, 70}};
  for (int c = 0; c < 3; ++c) want[5 * 3 + c] = blurred[0][c], want[6 * 3 + c] = blurred[1][c];
  CHECK(img == want);
  img = src;
  TensorAdjustSharpness(img.data(), 3, 4, 2.0, scratch.data());
  want = src;
  const uint8_t sharp[2][3] = {{0, 255, 0}, {255, 0, 184}};
  for (int c = 0; c < 3; ++c) want[5 * 3 + c] = sharp[0][c], want[6 * 3 + c] = sharp[1][c];
  CHECK(img == want);
  img = src;
  TensorAdjustSharpness(img.data(), 3, 4, 1.1, scratch.data());
  want[6 * 3 + 2] = 132;  // 1.1f * 127 + float32(1 - 1.1) * 70
  CHECK(img == want);
  // Under 3 pixels on a side: unchanged.
  img = src;
  TensorAdjustSharpness(img.data(), 2, 6, 0.0, scratch.data());
  CHECK(img == src);
}

TEST_CASE("Tensor affine is grid_sample's: half to even, zero padding, mask fill",
          "[ops][tensor]") {
  // functional_tensor.affine(img, matrix, mode, fill) of this 2x2 image.
  const std::vector<uint8_t> img = Flat({{0, 0, 0}, {100, 200, 50}, {200, 40, 255}, {10, 10, 10}});
  const uint8_t fill[3] = {9, 9, 9};
  std::vector<uint8_t> out(img.size());
  const double id[6] = {1, 0, 0, 0, 1, 0};
  for (Interpolation interp : {Interpolation::kNearest, Interpolation::kBilinear}) {
    for (const uint8_t* f : {static_cast<const uint8_t*>(nullptr), fill}) {
      TensorAffine(img.data(), 2, 2, id, interp, f, out.data());
      CHECK(out == img);
    }
  }
  // Output pixel (x, y) samples (x + 0.25, y + 0.5): row 0 at (0.25, 0.5)
  // and (1.25, 0.5), row 1 at y 1.5.
  const double half[6] = {1.0, 0.0, 0.25, 0.0, 1.0, 0.5};
  // Nearest: 0.5 and 1.5 round to 0 and 2 (half to even): row 1 outside.
  TensorAffine(img.data(), 2, 2, half, Interpolation::kNearest, nullptr, out.data());
  CHECK(out == Flat({{0, 0, 0}, {100, 200, 50}, {0, 0, 0}, {0, 0, 0}}));
  TensorAffine(img.data(), 2, 2, half, Interpolation::kNearest, fill, out.data());
  CHECK(out == Flat({{0, 0, 0}, {100, 200, 50}, {9, 9, 9}, {9, 9, 9}}));
  // Bilinear: (0, 0) = 100 * 0.125 + 200 * 0.375 + 10 * 0.125 = 88.75,
  // rounded to 89 (PIL truncates); (1, 0) reads zeros past the edge:
  // 100 * 0.375 + 10 * 0.375 = 41.25.
  TensorAffine(img.data(), 2, 2, half, Interpolation::kBilinear, nullptr, out.data());
  CHECK(out == Flat({{89, 41, 103}, {41, 79, 22}, {76, 16, 97}, {4, 4, 4}}));
  // With a fill, the mask (0.75 at (1, 0)) blends it in: 41.25 * 0.75 +
  // 0.25 * 9 = 33.19.
  TensorAffine(img.data(), 2, 2, half, Interpolation::kBilinear, fill, out.data());
  CHECK(out == Flat({{89, 41, 103}, {33, 61, 19}, {43, 13, 53}, {7, 7, 7}}));
}

TEST_CASE("Erase writes only its box, in each dtype and layout", "[ops][policy]") {
  const uint32_t h = 9, w = 11;
  Step step;
  step.kind = StepKind::kErase;
  step.top = 2, step.left = 3, step.height = 4, step.width = 5;
  step.erase_value[0] = 1.75f, step.erase_value[1] = -0.5f, step.erase_value[2] = 300.0f;
  auto in_box = [&](uint32_t y, uint32_t x) { return y >= 2 && y < 6 && x >= 3 && x < 8; };
  for (uint32_t layout : {ring::kNHWC, ring::kNCHW}) {
    auto index = [&](uint32_t c, uint32_t y, uint32_t x) {
      return layout == ring::kNCHW ? (size_t{c} * h + y) * w + x : (size_t{y} * w + x) * 3 + c;
    };
    CAPTURE(layout);
    std::vector<uint8_t> u8(h * w * 3, 42);
    EraseOutput(u8.data(), h, w, ring::kUint8, layout, step);
    std::vector<float> f32(h * w * 3, 42.0f);
    EraseOutput(f32.data(), h, w, ring::kFloat32, layout, step);
    std::vector<uint16_t> f16(h * w * 3, FloatToHalf(42.0f));
    EraseOutput(f16.data(), h, w, ring::kFloat16, layout, step);
    const uint8_t want_u8[3] = {1, 0, 255};  // truncated, clamped
    for (uint32_t c = 0; c < 3; ++c) {
      for (uint32_t y = 0; y < h; ++y) {
        for (uint32_t x = 0; x < w; ++x) {
          const size_t i = index(c, y, x);
          CAPTURE(c, y, x);
          if (in_box(y, x)) {
            CHECK(u8[i] == want_u8[c]);
            CHECK(f32[i] == step.erase_value[c]);
            CHECK(HalfToFloat(f16[i]) == step.erase_value[c]);
          } else {
            CHECK(u8[i] == 42);
            CHECK(f32[i] == 42.0f);
            CHECK(HalfToFloat(f16[i]) == 42.0f);
          }
        }
      }
    }
  }
}

TEST_CASE("Erase noise is normal(0, 1) from its seed, in [c][y][x] order", "[ops][policy]") {
  const uint32_t h = 160, w = 150;
  Step step;
  step.kind = StepKind::kErase;
  step.top = 0, step.left = 0, step.height = h, step.width = w;
  step.erase_random = 1;
  step.noise_seed = 12345;
  std::vector<float> nchw(h * w * 3), nhwc(h * w * 3);
  EraseOutput(nchw.data(), h, w, ring::kFloat32, ring::kNCHW, step);
  EraseOutput(nhwc.data(), h, w, ring::kFloat32, ring::kNHWC, step);
  double sum = 0, sum2 = 0, sum4 = 0;
  size_t within1 = 0;
  for (size_t i = 0; i < nchw.size(); ++i) {
    const double v = nchw[i];
    sum += v, sum2 += v * v, sum4 += v * v * v * v;
    within1 += std::fabs(v) < 1.0;
  }
  const double n = static_cast<double>(nchw.size());
  const double mean = sum / n, var = sum2 / n - mean * mean;
  // 72000 draws: the mean's sd is 0.0037, the variance's 0.0053.
  CHECK(std::fabs(mean) < 0.02);
  CHECK(std::fabs(var - 1.0) < 0.03);
  CHECK(std::fabs(sum4 / n - 3.0) < 0.1);         // normal kurtosis
  CHECK(std::fabs(within1 / n - 0.6827) < 0.01);  // normal mass in [-1, 1]
  // The same values in either layout: channel, row, column order.
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t y = 0; y < h; y += 7) {
      for (uint32_t x = 0; x < w; x += 5) {
        CHECK(nchw[(size_t{c} * h + y) * w + x] == nhwc[(size_t{y} * w + x) * 3 + c]);
      }
    }
  }
  // A box's values depend on its seed only (the box's first values are the
  // full image's first ones).
  Step small = step;
  small.top = 3, small.left = 4, small.height = 2, small.width = 2;
  std::vector<float> part(h * w * 3, 0.0f);
  EraseOutput(part.data(), h, w, ring::kFloat32, ring::kNCHW, small);
  CHECK(part[(size_t{0} * h + 3) * w + 4] == nchw[0]);
  CHECK(part[(size_t{0} * h + 3) * w + 5] == nchw[1]);
  CHECK(part[(size_t{0} * h + 4) * w + 4] == nchw[2]);
  CHECK(part[(size_t{1} * h + 3) * w + 4] == nchw[4]);
  std::vector<float> other(h * w * 3);
  step.noise_seed = 12346;
  EraseOutput(other.data(), h, w, ring::kFloat32, ring::kNCHW, step);
  CHECK(other != nchw);
}

}  // namespace
}  // namespace stoker::image
