// Kernels of tests/gpu/test_determinism.c: the determinism benchmark's own
// (bench/determinism/kernels.cu), so the test checks exactly the kernels
// the benchmark measures. Embedded as `gpu_det_fatbin` (tests/gpu/meson.build).
#include "../../bench/determinism/kernels.cu"
