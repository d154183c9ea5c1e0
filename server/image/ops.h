// The per-sample kernels of the ops that run on a decoded image (the steps
// of pipeline.h that the planner does not fuse into the decode), each
// reproducing torchvision 0.14's PIL path (Pillow 9.4). Internal to
// stoker_image: the daemon calls SampleProcessor (pipeline.h) only; tests
// and tools call these directly.
//
// Images are uint8 RGB, 3 bytes per pixel, rows contiguous (stride
// width * 3), row 0 at the top, as PIL's Image.convert("RGB") holds them.
// No kernel allocates: the caller passes the output and any scratch, sized
// as each function says. None keeps state; all are safe from any thread on
// distinct buffers. Sizes are the caller's to check (pipeline.cc validates
// every step against the image before it runs); a kernel given sizes that
// do not hold reads or writes out of bounds.
//
// Exactness against torchvision + PIL (tests/python/test_image_ops.py):
//   crop, pad (all modes), flips, grayscale    identical
//   brightness, contrast, saturation           identical (PIL's float
//                                              blend, reproduced)
//   hue                                        identical (PIL's RGB <-> HSV
//                                              conversions, reproduced)
//   Gaussian blur                              separable float32; within
//                                              1 level, mean < 0.01

#ifndef STOKER_SERVER_IMAGE_OPS_H_
#define STOKER_SERVER_IMAGE_OPS_H_

#include <cstddef>
#include <cstdint>

#include "server/image/pipeline.h"

namespace stoker::image {

// PIL's convert("L") of one pixel: ITU-R 601-2 luma in PIL's integers,
// (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16.
inline uint8_t Luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

// dst (box.height x box.width) = the box of src (src_width wide); the box
// must lie inside src. PIL's Image.crop / torchvision F.crop.
void CropImage(const uint8_t* src, uint32_t src_width, const CropBox& box, uint8_t* dst);

// dst ((top + height + bottom) x (left + width + right)) = src padded as
// torchvision F.pad does on a PIL image: kConstant with `fill` (R, G, B),
// else numpy.pad's "edge", "reflect" (mirror without repeating the edge)
// and "symmetric" (mirror repeating it), any amount (numpy reflects again
// past the far edge; a 1-pixel axis reflects as edge). pad = left, top,
// right, bottom.
void PadImage(const uint8_t* src, uint32_t height, uint32_t width, const uint32_t pad[4],
              PadMode mode, const uint8_t fill[3], uint8_t* dst);

// In place: F.hflip (columns reversed), F.vflip (rows reversed).
void FlipHorizontal(uint8_t* img, uint32_t height, uint32_t width);
void FlipVertical(uint8_t* img, uint32_t height, uint32_t width);

// In place, every channel = Luma of the pixel: F.rgb_to_grayscale(img, 3).
void ToGrayscale(uint8_t* img, size_t pixels);

// In place, PIL's ImageEnhance with `factor` (torchvision's
// adjust_brightness / adjust_contrast / adjust_saturation): Image.blend of
// a degenerate image and the image, in float32 as Pillow computes it
// (d + factor * (x - d), clipped to [0, 255], truncated). The degenerate
// image: black (brightness), the grey int(mean of the L image + 0.5)
// (contrast), the L image as RGB (saturation). factor >= 0.
void AdjustBrightness(uint8_t* img, size_t pixels, float factor);
void AdjustContrast(uint8_t* img, size_t pixels, float factor);
void AdjustSaturation(uint8_t* img, size_t pixels, float factor);

// In place, torchvision's adjust_hue for PIL: to PIL's HSV, H += uint8(
// hue * 255) (truncated toward zero, wrapping), back to RGB. hue in
// [-0.5, 0.5].
void AdjustHue(uint8_t* img, size_t pixels, float hue);

// One ColorJitter step (pipeline.h: Step kColorJitter): its adjustments in
// its order.
void ColorJitter(uint8_t* img, size_t pixels, const Step& step);

// torchvision's 1-D Gaussian kernel: linspace(-(k-1)/2, (k-1)/2, k),
// exp(-0.5 (x / sigma)^2), normalized; float32. `kernel` holds k floats.
void GaussianKernel(uint32_t k, float sigma, float* kernel);

// Floats of scratch GaussianBlur needs for a height x width image.
size_t GaussianBlurScratch(uint32_t height, uint32_t width, uint32_t kernel_x, uint32_t kernel_y);

// dst = F.gaussian_blur(src, [kernel_x, kernel_y], [sigma, sigma]) for a
// uint8 image: reflect padding (kernel_x / 2 < width and kernel_y / 2 <
// height required), the kernel applied in float32 one axis after the other
// (torchvision convolves with the 2-D outer product: the sums differ in
// their last bits), rounded half to even. `scratch` holds
// GaussianBlurScratch() floats. src and dst may not overlap.
void GaussianBlur(const uint8_t* src, uint32_t height, uint32_t width, uint32_t kernel_x,
                  uint32_t kernel_y, float sigma, float* scratch, uint8_t* dst);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_H_
