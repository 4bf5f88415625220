// Helpers of the shipped hand-written kernels (layer_norm, rms_norm and its backward, add_n):
// row sums that vectorize, code for each x86-64 CPU generation, and float16/bfloat16 rows widened
// to float32 in one vectorized pass. The extension is compiled for the baseline ISA; the generated
// kernels get their CPU generations from ATen's dispatch (DEFAULT, AVX2, AVX512), these from the
// GCC function clones below, one overload per floating dtype.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <ATen/OpMathType.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define OPGEN_CPU_MULTIVERSION 1
#include <immintrin.h>
#else
#define OPGEN_CPU_MULTIVERSION 0
#endif

// On a function: GCC compiles it for AVX-512 (x86-64-v4), AVX2 with FMA (x86-64-v3) and the
// baseline, and the dynamic loader picks the version for the CPU once (an ifunc). What the
// function inlines (the kernels' always_inline templates) is compiled for each version too.
// Unlike the generated kernels, ATEN_CPU_CAPABILITY does not choose among them.
#if OPGEN_CPU_MULTIVERSION
#define OPGEN_CPU_CLONES [[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]]
#else
#define OPGEN_CPU_CLONES
#endif

// The floating dtypes the shipped kernels take, for one cloned overload per dtype: M(type).
#define OPGEN_FOR_EACH_FLOATING(M) M(float) M(double) M(c10::Half) M(c10::BFloat16)

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

// float16 and bfloat16 to and from float32, n values. Element by element, a float16 conversion
// in software is a dozen integer operations (c10::Half has no F16C unless the whole file is
// compiled for it); F16C converts eight values an instruction on every x86-64-v3 CPU. Both round
// to nearest even, as c10 does. bfloat16 is bit shifts, which the compiler vectorizes.
namespace {

#if OPGEN_CPU_MULTIVERSION
[[gnu::target("default")]] void to_float(const c10::Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(src[i]);
  }
}

[[gnu::target("arch=x86-64-v3")]] void to_float(const c10::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) {
    dst[i] = _cvtsh_ss(src[i].x);
  }
}

[[gnu::target("default")]] void from_float(const float* src, c10::Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<c10::Half>(src[i]);
  }
}

[[gnu::target("arch=x86-64-v3")]] void from_float(const float* src, c10::Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) {
    dst[i].x = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
#else
void to_float(const c10::Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(src[i]);
  }
}

void from_float(const float* src, c10::Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<c10::Half>(src[i]);
  }
}
#endif

OPGEN_CPU_CLONES
void to_float(const c10::BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(src[i]);
  }
}

OPGEN_CPU_CLONES
void from_float(const float* src, c10::BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<c10::BFloat16>(src[i]);
  }
}

}  // namespace

// A kernel's loops run on opmath values: for float and double the tensors' own rows, for float16
// and bfloat16 rows widened into scratch buffers first and narrowed back after, so that every
// dtype's arithmetic is float or double vectors and each conversion is one vectorized pass over
// a row that is in L1 or L2.
template <typename scalar_t>
constexpr bool kWidened = !std::is_same_v<scalar_t, at::opmath_type<scalar_t>>;

// `rows` scratch rows of n opmath values, for the dtypes that are widened; none for the others.
template <typename scalar_t>
class Scratch {
 public:
  using acc_t = at::opmath_type<scalar_t>;
  Scratch(int64_t rows, int64_t n) : n_(n), values_(kWidened<scalar_t> ? rows * n : 0) {}
  acc_t* row(int64_t k) { return kWidened<scalar_t> ? values_.data() + k * n_ : nullptr; }

 private:
  int64_t n_;
  std::vector<acc_t> values_;
};

// n values of `row` as opmath values: `row` itself, or its values widened into `buffer`.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline const acc_t* widen(const scalar_t* row, int64_t n, acc_t* buffer) {
  if constexpr (kWidened<scalar_t>) {
    to_float(row, buffer, n);
    return buffer;
  } else {
    return row;
  }
}

// Where a kernel writes opmath results bound for `row`: `row` itself, or `buffer` (then `store`).
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline acc_t* output(scalar_t* row, acc_t* buffer) {
  if constexpr (kWidened<scalar_t>) {
    return buffer;
  } else {
    return row;
  }
}

// n opmath values into `row`, rounded to its dtype; nothing to do when they are `row` already.
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline void store(const acc_t* values, scalar_t* row, int64_t n) {
  if constexpr (kWidened<scalar_t>) {
    from_float(values, row, n);
  } else if (values != row) {
    std::copy(values, values + n, row);
  }
}

}  // namespace opgen_ops::rowwise
