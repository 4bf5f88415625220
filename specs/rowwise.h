// Helpers of the shipped hand-written kernels (layer_norm, rms_norm and its backward, add_n):
// row sums that vectorize, code for each CPU capability, and float16/bfloat16 rows widened to
// float32 in one vectorized pass.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <ATen/OpMathType.h>
#include <ATen/Version.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#define OPGEN_X86_TARGETS 1
#include <immintrin.h>
// What ATen compiles its AVX2 and AVX512 kernels for (opgen.build.CAPABILITY_FLAGS), per function.
#define OPGEN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define OPGEN_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#else
#define OPGEN_X86_TARGETS 0
#define OPGEN_TARGET_AVX2
#define OPGEN_TARGET_AVX512
#endif

// Each floating dtype with each CPU capability, M(type, capability tag, target attribute): one
// overload per pair, compiled for that capability, of a kernel template that takes the tag first.
#define OPGEN_FOR_EACH_FLOATING_AND_CPU(M)  \
  OPGEN_FOR_EACH_CPU_OF(M, float)           \
  OPGEN_FOR_EACH_CPU_OF(M, double)          \
  OPGEN_FOR_EACH_CPU_OF(M, c10::Half)       \
  OPGEN_FOR_EACH_CPU_OF(M, c10::BFloat16)
#define OPGEN_FOR_EACH_CPU_OF(M, T)                      \
  M(T, ::opgen_ops::rowwise::Default, )                  \
  M(T, ::opgen_ops::rowwise::Avx2, OPGEN_TARGET_AVX2)    \
  M(T, ::opgen_ops::rowwise::Avx512, OPGEN_TARGET_AVX512)

namespace opgen_ops::rowwise {

// The CPU capabilities, in ATen's names, as tags that pick a kernel's overload. Like the
// generated kernels, the hand-written ones run the capability ATen runs its own kernels at: the
// best the CPU has, or the one ATEN_CPU_CAPABILITY names, so every variant can be tested on one
// machine. `on_cpu(f)` calls f(tag), chosen once.
struct Default {};
struct Avx2 {};
struct Avx512 {};

enum class Capability { kDefault, kAvx2, kAvx512 };

inline Capability cpu_capability() {
  static const Capability chosen = [] {
    const std::string name = at::get_cpu_capability();
    if (name == "AVX512") return Capability::kAvx512;
    if (name == "AVX2") return Capability::kAvx2;
    return Capability::kDefault;
  }();
  return chosen;
}

template <typename F>
[[gnu::always_inline]] inline void on_cpu(F&& f) {
  switch (cpu_capability()) {
    case Capability::kAvx512:
      f(Avx512{});
      return;
    case Capability::kAvx2:
      f(Avx2{});
      return;
    case Capability::kDefault:
      f(Default{});
      return;
  }
}

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

// float16 and bfloat16 to and from float32, n values, for each capability. Element by element,
// a float16 conversion in software is a dozen integer operations; F16C converts 8 values an
// instruction (16 with AVX-512), and GCC does not vectorize _Float16 conversions itself, hence the
// intrinsics. All round to nearest even, as c10 does. bfloat16 is bit shifts, which the compiler
// vectorizes for each target.
namespace {

void to_float(Default, const c10::Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<float>(src[i]);
  }
}

void from_float(Default, const float* src, c10::Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<c10::Half>(src[i]);
  }
}

#if OPGEN_X86_TARGETS
constexpr int kRoundToNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

OPGEN_TARGET_AVX2 void to_float(Avx2, const c10::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) {
    dst[i] = _cvtsh_ss(src[i].x);
  }
}

OPGEN_TARGET_AVX2 void from_float(Avx2, const float* src, c10::Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRoundToNearestEven));
  }
  for (; i < n; ++i) {
    dst[i].x = _cvtss_sh(src[i], kRoundToNearestEven);
  }
}

// The last n % 16 values with masked loads and stores, which touch nothing past the end.
OPGEN_TARGET_AVX512 void to_float(Avx512, const c10::Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, tail, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail, src + i)));
  }
}

OPGEN_TARGET_AVX512 void from_float(Avx512, const float* src, c10::Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRoundToNearestEven));
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, tail, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(tail, src + i), kRoundToNearestEven));
  }
}
#else
void to_float(Avx2, const c10::Half* src, float* dst, int64_t n) { to_float(Default{}, src, dst, n); }
void from_float(Avx2, const float* src, c10::Half* dst, int64_t n) { from_float(Default{}, src, dst, n); }
void to_float(Avx512, const c10::Half* src, float* dst, int64_t n) { to_float(Default{}, src, dst, n); }
void from_float(Avx512, const float* src, c10::Half* dst, int64_t n) { from_float(Default{}, src, dst, n); }
#endif

#define OPGEN_BFLOAT16_CONVERSIONS(Isa, TARGET)                              \
  TARGET void to_float(Isa, const c10::BFloat16* src, float* dst, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) {                                        \
      dst[i] = static_cast<float>(src[i]);                                   \
    }                                                                        \
  }                                                                          \
  TARGET void from_float(Isa, const float* src, c10::BFloat16* dst, int64_t n) { \
    for (int64_t i = 0; i < n; ++i) {                                        \
      dst[i] = static_cast<c10::BFloat16>(src[i]);                           \
    }                                                                        \
  }
OPGEN_BFLOAT16_CONVERSIONS(Default, )
OPGEN_BFLOAT16_CONVERSIONS(Avx2, OPGEN_TARGET_AVX2)
OPGEN_BFLOAT16_CONVERSIONS(Avx512, OPGEN_TARGET_AVX512)
#undef OPGEN_BFLOAT16_CONVERSIONS

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
template <typename Isa, typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline const acc_t* widen(Isa isa, const scalar_t* row, int64_t n, acc_t* buffer) {
  if constexpr (kWidened<scalar_t>) {
    to_float(isa, row, buffer, n);
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
template <typename Isa, typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline void store(Isa isa, const acc_t* values, scalar_t* row, int64_t n) {
  if constexpr (kWidened<scalar_t>) {
    from_float(isa, values, row, n);
  } else if (values != row) {
    std::copy(values, values + n, row);
  }
}

}  // namespace opgen_ops::rowwise
