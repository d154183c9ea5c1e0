// PIL's ImageFilter.GaussianBlur(radius) on an RGB image, as Pillow 9.4
// computes it: not a Gaussian kernel but three box blurs per axis (the
// extended box of Gwosdek et al., "Theoretical foundations of Gaussian
// convolution by extended box filtering": a box of integer radius plus a
// fractional weight on the two pixels just outside it), horizontal passes
// first, then vertical, each pass rounded to uint8, the image's edge pixels
// repeated beyond it. The self-supervised recipes blur this way (DINO's and
// MoCo's GaussianBlur classes call img.filter(ImageFilter.GaussianBlur(r))),
// not with torchvision's GaussianBlur. Every value equals Pillow's.
//
// Internal to stoker_image; pure functions, thread-safe.

#ifndef STOKER_SERVER_IMAGE_OPS_BOX_BLUR_H_
#define STOKER_SERVER_IMAGE_OPS_BOX_BLUR_H_

#include <cstddef>
#include <cstdint>

namespace stoker::image {

// One box pass's integer weights for a Gaussian of `radius` (Pillow's
// ImagingGaussianBlur with 3 passes, in its float arithmetic): the box's
// integer radius, the weight of each pixel inside it and of the two just
// outside (both in units of 2^-24).
struct BoxWeights {
  int32_t radius = 0;
  uint32_t inner = 1u << 24;
  uint32_t outer = 0;
};
BoxWeights GaussianBoxWeights(float radius);

// Bytes of scratch BoxBlur needs for a height x width image.
size_t BoxBlurScratch(uint32_t height, uint32_t width);

// dst = img.filter(ImageFilter.GaussianBlur(radius)) for an RGB image,
// 0 <= radius <= kMaxBoxBlurRadius (pipeline_params.h). As Pillow, the row passes run down the
// columns of the transposed image; every pass moves all columns together.
// `img` serves as a buffer (its contents are lost); `scratch` holds
// BoxBlurScratch() bytes, aligned for uint32_t (as any heap block is); img,
// scratch and dst (height * width * 3 bytes) may not overlap.
void BoxBlur(uint8_t* img, uint32_t height, uint32_t width, float radius, uint8_t* scratch,
             uint8_t* dst);

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_OPS_BOX_BLUR_H_
