// Helpers of the shipped hand-written kernels (layer_norm, rms_norm and its backward, add_n):
// row sums that vectorize, and float32 code for each x86-64 CPU generation. Hand-written kernels are
// compiled once, for the baseline ISA, unlike the generated kernels (DEFAULT, AVX2, AVX512).
#pragma once

#include <cstdint>

namespace opgen_ops::rowwise {

// Partial sums per reduction. One running sum waits on an add's latency at every element, and
// without -ffast-math the compiler may not reorder it into vector lanes; 32 independent sums
// become two AVX-512 registers, four AVX2 or eight SSE ones.
constexpr int kLanes = 32;

// The sum of term(j) over j in [0, n), in T: the partial sums are added pairwise in a fixed
// order, so the result depends neither on the thread count nor on the CPU.
template <typename T, typename Term>
[[gnu::always_inline]] inline T sum(int64_t n, Term&& term) {
  T s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      s[k] += term(j + k);
    }
  }
  for (int k = 0; j < n; ++j, ++k) {
    s[k] += term(j);
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) {
      s[k] += s[k + width];
    }
  }
  return s[0];
}

}  // namespace opgen_ops::rowwise

// On a function: GCC compiles it for AVX-512 (x86-64-v4), AVX2 with FMA (x86-64-v3) and the
// baseline, and the dynamic loader picks the version for the CPU once (an ifunc). What the
// function inlines (the kernels' always_inline templates) is compiled for each version too.
// Unlike the generated kernels, ATEN_CPU_CAPABILITY does not choose among them.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define OPGEN_CPU_CLONES [[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]]
#else
#define OPGEN_CPU_CLONES
#endif
