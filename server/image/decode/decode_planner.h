// The start-up calibration of the DCT scale choice: how long this machine
// takes to decode at each scale M/8 the pipeline may use (M = 1, 2, 4, 8),
// and which scales to leave out because a larger one decodes no slower.
//
// Why: a reduced scale is chosen for speed (the quality rule,
// pipeline.cc kMinDecodedPerOutput, says which scales are allowed), and
// whether it is faster depends on the CPU and on libjpeg-turbo's SIMD for
// the reduced IDCTs (7/8 and 6/8 are plain C, never used; on some CPUs 4/8 or
// 2/8 may not beat the next larger one). The measurement runs once, in the
// daemon, before any session; its result (PipelineParams::
// disabled_dct_scales) is the same for every session and worker of that
// daemon, so a given seed gives the same pixels whatever the number of
// workers. A daemon started again on the same machine loads the table an
// earlier one saved (SerializeCalibration, in the index cache's folder), so
// a resumed run keeps its scales; one that has to measure again relies on
// the rule below (a mean over both images, a tolerance, CPU time, the fastest of
// several runs) keeps a scale that is faster or tied allowed in every run,
// so the choice does not flip between runs (measured here, 2 busy cores:
// baseline 1/8 1.3, 2/8 1.5, 4/8 1.55, 8/8 1.8 ms; progressive 5.0-5.3 ms
// at every scale; nothing disabled in 24 starts). Only a scale near 10%
// slower than a larger one, a real tie, may be chosen differently by two
// daemons: their pixels then differ as at any other choice of scale.
//
// Thread safety: both functions keep no state; Calibrate is a function of
// its inputs and of the times `clock` returns (it calls `clock` from the
// calling thread only).

#ifndef STOKER_SERVER_IMAGE_DECODE_DECODE_PLANNER_H_
#define STOKER_SERVER_IMAGE_DECODE_DECODE_PLANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace stoker::image {

// The measured cost of decoding the calibration images at one scale.
struct ScaleCost {
  int scale = 8;              // M of M/8
  double baseline_ms = 0;     // a baseline 4:2:0 photo-like textured image
  double progressive_ms = 0;  // the same image coded progressive (at 1/8: its
                              // DC scans only, DecodePath::kDcScans)
};

// Scale M's bit in a disabled_dct_scales mask (PipelineParams): bit M-1.
inline constexpr uint32_t DctScaleBit(int m) { return m >= 1 && m <= 8 ? 1u << (m - 1) : 0; }

struct DecodeCalibration {
  std::vector<ScaleCost> costs;      // scales 1, 2, 4, 8 in that order
  uint32_t disabled_dct_scales = 0;  // as PipelineParams::disabled_dct_scales
  double seconds = 0;                // what the calibration took, by `clock`
};

// The rule: scale M (1, 2, 4) is disabled when its slowdown against a
// larger scale L that is not disabled, the mean of its two cost ratios
// (baseline_ms(M) / baseline_ms(L) + progressive_ms(M) / progressive_ms(L))
// / 2, is more than 1 + tolerance (exactly 1 + tolerance is allowed): the
// relative loss on a dataset half baseline, half progressive, each kind
// counting equally. Not "either image slower": a progressive file decoded
// whole costs nearly the same at every scale (its entropy decode is most of
// it), and that near tie, under the noise of a loaded machine, made one
// daemon start in 12 disable a scale that is 25% faster on baseline files
// (measured on 2 busy cores, CPU time); the mean keeps such a start stable
// and still disables a scale 30% slower on baseline files alone.
// The chain runs from 8/8 down: 8 is always allowed; 4 is compared with 8;
// 2 with 4 when 4 is allowed, and with 8; 1 with each of 2, 4, 8 that is
// allowed. A disabled scale is never a reference: when 4/8 is slower than
// 8/8, 2/8 stays allowed as long as it beats 8/8, however it compares with
// 4/8. A scale whose baseline or progressive cost is not positive is
// unmeasured: neither disabled nor a reference. `costs` in any order (one
// entry per scale); the result is as PipelineParams::disabled_dct_scales
// (bit M-1 for scale M).
uint32_t DisabledScales(const std::vector<ScaleCost>& costs, double tolerance = 0.10);

// A monotonic clock in nanoseconds; injected so tests can script the costs.
using NanoClock = std::function<uint64_t()>;

// The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID):
// the clock the daemon calibrates with. Wall time would count the time the
// thread waits for a core: on a loaded machine, a 5 ms decode preempted once
// measures 9 ms, and a min of 5 runs does not always lose that (measured: 3
// daemon starts of 12 disabled a scale by wall time on 2 busy cores).
uint64_t ThreadCpuNanos();

// Encodes the calibration images (in memory, a fixed seed: a 768x512
// textured photo-like RGB image, 4:2:0 q90 optimized Huffman tables, once
// baseline and once with jpeg_simple_progression's script), decodes each
// whole through JpegDecoder (ReadHeader, Start(M) reading every scan,
// ReadRows to the end, Finish) at every scale `reps` times (at least once),
// keeps the fastest run of each, and applies DisabledScales with its
// default tolerance. With reps 5: 0.18-0.23 s of CPU measured on 2 busy
// cores (24 daemon starts).
//
// `clock` is called in this order, which a test can script: once at the
// start; then for each repetition, for the baseline then the progressive
// image, for scales 1, 2, 4, 8: once before and once after that decode;
// once at the end (DecodeCalibration::seconds is end - start). A decode
// that fails (not expected: the files are our own) leaves its scale
// unmeasured (0 ms). The encoder keeps libjpeg's default error handler,
// which exits the process: on this fixed image only an allocation failure
// can reach it.
DecodeCalibration Calibrate(const NanoClock& clock, int reps = 5);

// A calibration kept on disk, so that a daemon started again on the same
// machine reuses it instead of measuring (the scales it disables, and so
// the pixels a resumed run gets, stay the same). `machine` names what the
// costs depend on (the CPU model, libjpeg-turbo's version): a file written
// for another machine is not loaded. Text, one field per line:
//   stoker decode calibration 1
//   machine <text>
//   scale <M> <baseline_ms> <progressive_ms>     (M = 1, 2, 4, 8)
//   disabled <mask>
std::string SerializeCalibration(const DecodeCalibration& c, const std::string& machine);

// Parses what SerializeCalibration wrote: false (and *c untouched) for any
// other text, another machine, costs that are not finite and >= 0, scales
// out of order, or a mask that is not DisabledScales(costs).
bool ParseCalibration(const std::string& text, const std::string& machine, DecodeCalibration* c);

// This machine as SerializeCalibration names it: the CPU model of
// /proc/cpuinfo (or "unknown") and libjpeg-turbo's version.
std::string CalibrationMachine();

}  // namespace stoker::image

#endif  // STOKER_SERVER_IMAGE_DECODE_DECODE_PLANNER_H_
