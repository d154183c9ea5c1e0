// The per-sample kernels of the ops that run on a decoded image (the steps
// of pipeline.h that the planner does not fuse into the decode), each
// reproducing torchvision 0.14's PIL path (Pillow 9.4), and, for AugMix's
// chains, its tensor path on a uint8 tensor (the Tensor* ones). Internal to
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
// Exactness against torchvision + PIL (tests/python/test_image_ops.py,
// tests/python/test_policy_ops.py):
//   crop, pad (all modes), flips, grayscale    identical
//   brightness, contrast, saturation           identical (PIL's float
//                                              blend, reproduced)
//   hue                                        identical (PIL's RGB <-> HSV
//                                              conversions, reproduced)
//   Gaussian blur                              separable float32; within
//                                              1 level, mean < 0.01
//   posterize, solarize, invert, autocontrast, identical (PIL's tables)
//   equalize
//   sharpness                                  identical (PIL's float32 3x3
//                                              filter and blend)
//   affine and rotate, nearest and bilinear    identical (Geometry.c's
//                                              engines and arithmetic)
//   AugMix's mixing                            identical to torch's float32
//
// torchvision's tensor kernels (the Tensor* functions: AugMix's chains),
// against F.* on the uint8 tensor (tests/python/test_augmix.py):
//   contrast, saturation, autocontrast,        identical (contrast's mean:
//   sharpness                                  torch on one thread)
//   affine and rotate, nearest and bilinear,   identical (grid and
//   fill None or given                         grid_sample's float32 steps)
//                                              where torch runs its AVX2
//                                              (FMA) kernels; under its
//                                              default kernels a few % of
//                                              the pixels differ, mean
//                                              error < 0.05 levels

#ifndef STOKER_SERVER_IMAGE_OPS_OPS_H_
#define STOKER_SERVER_IMAGE_OPS_OPS_H_

#include <cstddef>
#include <cstdint>

#include "server/image/steps.h"

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
// its order; with step.tensor_kernels, contrast and saturation are the
// Tensor* kernels below, with ratio 1 + aug_magnitude (double) for a
// policy's step, else the factor (hue stays PIL's: no policy makes one).
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

// --- The ops of the augmentation policies (torchvision 0.14, PIL 9.4) ---

// In place, a 256-entry lookup table applied to every channel of every
// pixel (what PIL's Image.point does): the point ops below build one.
void ApplyLut(uint8_t* img, size_t pixels, const uint8_t lut[256]);

// In place: ImageOps.posterize (v & ~(2^(8 - bits) - 1)), bits 0..8;
// ImageOps.solarize (v < threshold ? v : 255 - v); ImageOps.invert
// (255 - v).
void Posterize(uint8_t* img, size_t pixels, uint32_t bits);
void Solarize(uint8_t* img, size_t pixels, double threshold);
void Invert(uint8_t* img, size_t pixels);

// In place, per channel: ImageOps.autocontrast(img) (cutoff 0, no ignore:
// the channel's lowest and highest values stretched to 0 and 255, PIL's
// double arithmetic and truncation; a flat channel unchanged) and
// ImageOps.equalize(img) (PIL's integer histogram LUT; a channel with one
// value, or whose step is 0, unchanged).
void Autocontrast(uint8_t* img, size_t pixels);
void Equalize(uint8_t* img, size_t pixels);

// In place, ImageEnhance.Sharpness(img).enhance(factor) (torchvision's
// adjust_sharpness for PIL): Image.blend(img.filter(SMOOTH), img, factor).
// SMOOTH is Pillow's 3x3 filter in float32: kernel [1 1 1; 1 5 1; 1 1 1]
// each divided by 13.0f, summed from 0.5 row below / row / row above,
// clipped to [0, 255] and truncated; the outer ring of pixels is copied as
// is, and an image under 3 pixels on a side is left as it is. `scratch`
// holds height * width * 3 bytes. factor >= 0.
void AdjustSharpness(uint8_t* img, uint32_t height, uint32_t width, float factor, uint8_t* scratch);

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
// shear) in double, as F.affine computes it for a PIL image (center in
// pixels from the top left: torchvision passes [w * 0.5, h * 0.5] by
// default); the 6 coefficients PIL's Image.transform(AFFINE) takes: the
// input point of output point (x, y) is (m0 x + m1 y + m2, m3 x + m4 y + m5).
void InverseAffineMatrix(const double center[2], double angle, const double translate[2],
                         double scale, const double shear[2], double matrix[6]);

// The PIL matrix of a kAffine step (pipeline.h) on a height x width image,
// as F.affine computes it: the step's center, or the image's; false when
// it is not finite (scale, shear or angle too extreme).
bool AffineStepMatrix(const Step& step, uint32_t height, uint32_t width, double matrix[6]);

// dst (height x width) = PIL's Image.transform(size, AFFINE, matrix,
// resample, fillcolor=fill) of src (height x width), the input point of
// output pixel (x, y) being matrix applied to (x + 0.5, y + 0.5); points
// outside the source are `fill`. As Geometry.c does it: kNearest takes
// ImagingScaleAffine when m1 == m3 == 0 (positions accumulated in double),
// else 16.16 fixed point accumulated per pixel and row when all four
// corners map within 2^15, else doubles accumulated; kBilinear (Pillow's
// generic engine) computes each point afresh, clips the 2x2 neighbours to
// the image, interpolates in double along x then y and truncates (any
// interpolation but kNearest is taken as kBilinear). A whole-pixel
// translation (a matrix of 1, 0, dx, 0, 1, dy, |dx| and |dy| at most the
// size) is a shifted copy with fill, the result of either engine there. src
// and dst may not overlap.
void AffineTransform(const uint8_t* src, uint32_t height, uint32_t width, const double matrix[6],
                     Interpolation interpolation, const uint8_t fill[3], uint8_t* dst);

// dst = PIL's Image.rotate(angle, resample, expand=False, center, fillcolor=
// fill) of src (torchvision's F.rotate for PIL): angle in degrees,
// counter-clockwise; center in pixels (nullptr: PIL's default, the image's
// center). PIL's shortcuts are kept (angle % 360 of 0 a copy, 180 a
// transpose, 90 and 270 a transpose on square images), and its matrix,
// rounded to 15 digits. src and dst may not overlap.
void RotateImage(const uint8_t* src, uint32_t height, uint32_t width, double angle,
                 const double* center, Interpolation interpolation, const uint8_t fill[3],
                 uint8_t* dst);

// The PIL matrix RotateImage samples by (angle in degrees, counter-
// clockwise, taken mod 360 as PIL does; center nullptr: the image's), for
// moving points with the image (boxes.h). PIL's 90/180/270 shortcuts are the
// same map.
void RotateStepMatrix(uint32_t height, uint32_t width, double angle, const double* center,
                      double matrix[6]);

// Label maps (segmentation masks): one value of `bpp` bytes (1, 2 or 4; any
// other does nothing) per pixel, moved, never blended, as PIL moves a mode
// "P", "L" or "I" image with NEAREST, which torchvision's segmentation
// references use for their targets. src and dst may not overlap.
//   ResizeLabels   PIL's Image.resize((width, height), NEAREST): the affine
//                  NEAREST engine over the scale (a copy at the same size)
//   AffineLabels   AffineTransform with kNearest, `fill` (bpp bytes) outside
//   RotateLabels   RotateImage with kNearest, PIL's shortcuts included
//   PadLabels      PadImage: `fill` (bpp bytes) for kConstant
void PadLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
               const uint32_t pad[4], PadMode mode, const uint8_t* fill, uint8_t* dst);
void ResizeLabels(const uint8_t* src, uint32_t src_height, uint32_t src_width, uint32_t bpp,
                  uint8_t* dst, uint32_t height, uint32_t width);
void AffineLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp,
                  const double matrix[6], const uint8_t* fill, uint8_t* dst);
void RotateLabels(const uint8_t* src, uint32_t height, uint32_t width, uint32_t bpp, double angle,
                  const double* center, const uint8_t* fill, uint8_t* dst);

// AugMix's mixing (torchvision 0.14 on a PIL image: the image as a uint8
// tensor, mixed in float32, truncated back to uint8): acc = weight * img
// (MixStart), acc += weight * img (MixAdd), img = uint8(acc) truncated,
// clamped to [0, 255] (MixFinish). `acc` holds pixels * 3 floats.
// torchvision 0.14's AugMix also runs its chains' ops on that tensor: its
// chains' steps run the Tensor* kernels below (Step::tensor_kernels).
void MixStart(const uint8_t* img, size_t pixels, float weight, float* acc);
void MixAdd(const uint8_t* img, size_t pixels, float weight, float* acc);
void MixFinish(const float* acc, size_t pixels, uint8_t* img);

// --- torchvision 0.14's tensor kernels (functional_tensor.py) on a uint8
// image, for AugMix's chains (torchvision runs them on the PIL image's
// uint8 tensor). A ratio is the Python float _blend gets: it multiplies in
// float32(ratio), the other side in float32(1.0 - ratio) (computed in
// double); each product and sum is rounded to float32, then clamped to
// [0, 255] and truncated. Brightness, equalize, posterize, solarize,
// invert and whole-pixel translations give what the PIL kernels above give;
// these are the ones that do not. ---

// rgb_to_grayscale of one pixel: (0.2989 r + 0.587 g) + 0.114 b in float32,
// truncated. TensorGrayMean: torch.mean of it over the image, the float32
// sum divided by float32(pixels), summed as torch 1.13's AVX2 cascade_sum
// does on one thread (what DataLoader workers run: past 32768 pixels torch
// with more threads splits the sum between them, and its last bits may
// differ; under 2^24 every order gives the exact sum). pixels > 0.
uint8_t TensorGrayscale(uint8_t r, uint8_t g, uint8_t b);
float TensorGrayMean(const uint8_t* img, size_t pixels);

// In place, F.adjust_contrast (_blend with the grey mean) and
// F.adjust_saturation (_blend with the pixel's TensorGrayscale) on a uint8
// tensor. ratio >= 0.
void TensorAdjustContrast(uint8_t* img, size_t pixels, double ratio);
void TensorAdjustSaturation(uint8_t* img, size_t pixels, double ratio);

// In place, F.autocontrast on a uint8 tensor, per channel: (v - min) *
// scale in float32, clamped, truncated, scale = (1 / (max - min)) * 255
// (torch's bound / tensor is reciprocal(tensor) * bound); a flat channel
// unchanged.
void TensorAutocontrast(uint8_t* img, size_t pixels);

// In place, F.adjust_sharpness on a uint8 tensor: _blend(img, blurred,
// ratio) on every pixel, blurred = the image with its inner pixels replaced
// by torch.round of the float32 3x3 conv [1 1 1; 1 5 1; 1 1 1] / 13 (which
// is round(k / 13) for the integer sum k: no tie, no summation order
// matters); an image under 3 pixels on a side unchanged. `scratch` holds
// height * width * 3 bytes.
void TensorAdjustSharpness(uint8_t* img, uint32_t height, uint32_t width, double ratio,
                           uint8_t* scratch);

// dst = functional_tensor.affine / rotate (expand off) of src with
// `matrix`, the 6 coefficients _get_inverse_affine_matrix gives for a
// tensor (InverseAffineMatrix with the center relative to the image's
// center: F.affine's center_f, [0, 0] by default; F.rotate passes -angle):
// theta = float32(matrix); the grid _gen_affine_grid makes (linspace base
// grid, TorchLinspace; theta / [0.5 w, 0.5 h], products and sums rounded in
// float32 as bmm gives them); grid_sample (align_corners false, zero
// padding) as torch 1.13's AVX2 CPU kernel computes it (unnormalized
// coordinates and bilinear weights in float32, fused multiply-adds where it
// compiles them: ix = fma(gx + 1, w / 2, -0.5), value = fma(se_v, se,
// fma(sw_v, sw, fma(ne_v, ne, nw_v * nw))), the FMA instruction where the
// CPU has one, else libm's fmaf: the same values); kNearest rounds half to
// even.
// fill nullptr: torchvision's fill None (outside points read 0, bilinear
// blends them in); else its mask channel: nearest takes fill where the mask
// is < 0.5, bilinear v * mask + (1 - mask) * fill. Then torch.round to
// uint8. src and dst may not overlap.
void TensorAffine(const uint8_t* src, uint32_t height, uint32_t width, const double matrix[6],
                  Interpolation interpolation, const uint8_t* fill, uint8_t* dst);

// ElasticTransform (torchvision 0.14 on a PIL image).
// The blur kernel's side for a sigma: int(8 sigma + 1), made odd.
uint32_t ElasticKernelSize(float sigma);
// Floats of scratch ElasticDisplacement needs.
size_t ElasticScratch(uint32_t height, uint32_t width, const float sigma[2]);
// ElasticTransform.get_params for a height x width image: for dx then dy,
// uniform noise in [-1, 1) (torch.rand's 24-bit floats * 2 - 1, from
// KeyedRng(noise_seed), row by row, dx's then dy's), blurred when its sigma
// is > 0 as F.gaussian_blur(field, [k, k], sigma) (k = ElasticKernelSize of
// that axis' sigma; the x kernel with sigma[0], the y kernel with sigma[1];
// reflect padding, which needs k / 2 < each side; one axis after the other
// in float32, where torchvision convolves in 2-D: the last bits differ),
// times alpha / size (dx by the height, dy by the width: torchvision's
// order). `field` gets height * width (dx, dy) pairs: the [1, H, W, 2]
// displacement. `scratch` holds ElasticScratch() floats.
void ElasticDisplacement(uint32_t height, uint32_t width, const float alpha[2],
                         const float sigma[2], uint64_t noise_seed, float* field, float* scratch);
// dst = F.elastic_transform(src, field, interpolation, fill) of an RGB
// image: the identity grid (float32 linspace from (1 - s) / s to
// (s - 1) / s) plus the field, grid_sample with the fill's mask channel, as
// TensorAffine samples; torch.round to uint8. src and dst may not overlap.
void ElasticTransform(const uint8_t* src, uint32_t height, uint32_t width, const float* field,
                      Interpolation interpolation, const uint8_t fill[3], uint8_t* dst);

// RandomErasing on an output tensor (torchvision F.erase: out[..., top:top
// + h, left:left + w] = v) of out_height x out_width x 3 in `dtype`
// (ring::DType) and `layout` (ring::Layout), the box in step.top, left,
// height, width. erase_random 0: the constant erase_value[c] per channel;
// uint8 outputs take it truncated toward zero and clamped to [0, 255],
// float16 rounds to nearest. erase_random 1: normal(0, 1) noise (float32
// outputs; float16 rounds it), the values in channel, row, column order
// (torchvision's [c, h, w] tensor) drawn by Box-Muller from
// KeyedRng(step.noise_seed): for each pair, u1 = Uniform(), u2 = Uniform()
// (doubles, in that order), r = sqrtf(-2 logf(float(1 - u1))), values
// r cosf(a) then r sinf(a) with a = float(2 pi u2), in float32; a box's
// values depend on the seed and the box's size only.
void EraseOutput(void* out, uint32_t out_height, uint32_t out_width, uint32_t dtype,
                 uint32_t layout, const Step& step);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_OPS_H_
