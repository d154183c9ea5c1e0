// How a decoding process keeps its allocator's memory between images.
//
// libjpeg allocates its buffers afresh for every image and frees them at the
// end of it; for a progressive file they include a whole-image coefficient
// buffer (2 bytes a coefficient: ~0.4 MB for an ImageNet-sized photo, ~27 MB
// at 9 MP), which it zeroes. With glibc's defaults those buffers come from
// pages the kernel maps anew for each image (an mmap, or heap memory that
// free() gave back with the top of the heap), so every image also pays a page
// fault per 4 KiB and the kernel's zeroing of each page. Measured on the
// ImageNet-like bench set through the daemon: 6 page faults per image on
// average, about 2-3% of the workers' CPU.
//
// KeepDecoderMemory() sets glibc's malloc, for the whole process, to serve
// blocks of up to kHeapBlockBytes from the heap and to give the heap's top
// back to the kernel only beyond kKeepFreeBytes free, so the next image
// reuses the same pages. The cost: a process that decoded a large image
// keeps up to kKeepFreeBytes more resident. Call it once, early, from the
// main thread of a process that decodes many images in a loop (a worker,
// the image tool); not from a library.

#ifndef STOKER_SERVER_IMAGE_DECODE_DECODE_MEMORY_H_
#define STOKER_SERVER_IMAGE_DECODE_DECODE_MEMORY_H_

#include <cstddef>

namespace stoker::image {

// The largest block malloc serves from the heap (glibc's ceiling for this
// setting on 64-bit); larger ones are mapped and unmapped each time.
inline constexpr size_t kHeapBlockBytes = size_t{32} << 20;
// Free memory at the top of the heap kept rather than given back.
inline constexpr size_t kKeepFreeBytes = size_t{64} << 20;

// True when the allocator took both settings (glibc's malloc); false where
// it ignores them (another libc, AddressSanitizer's malloc).
bool KeepDecoderMemory();

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_DECODE_MEMORY_H_
