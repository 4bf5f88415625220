// Forward CPU kernel of opgen_ops.rms_norm, hand-written; spec: specs/rms_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// rms_norm(Tensor x, Tensor weight, *, float eps=1e-06) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// `out` is allocated: contiguous, shape same(x), never empty.
#include "kernels/rms_norm_kernel.h"
#include "rowwise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace opgen_ops {
namespace {

template <typename Isa, typename scalar_t>
[[gnu::always_inline]] inline void normalize_rows(Isa isa, const scalar_t* X, const scalar_t* W, scalar_t* Y, int64_t begin, int64_t end, int64_t n, double eps) {
  using acc_t = at::opmath_type<scalar_t>;
  rowwise::Scratch<scalar_t> scratch(3, n);
  const acc_t* w = rowwise::widen(isa, W, n, scratch.row(0));
  for (int64_t r = begin; r < end; ++r) {
    const acc_t* xr = rowwise::widen(isa, X + r * n, n, scratch.row(1));
    acc_t* yr = rowwise::output(Y + r * n, scratch.row(2));
    const acc_t sum_squares = rowwise::sum<acc_t>(n, [&](int64_t j) { return xr[j] * xr[j]; });
    const acc_t rstd = acc_t(1) / std::sqrt(sum_squares / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = xr[j] * rstd * w[j];
    }
    rowwise::store(isa, yr, Y + r * n, n);
  }
}

// Each dtype for each CPU capability.
#define OPGEN_NORMALIZE_ROWS(T, Isa, TARGET)                                                                            \
  TARGET void normalize_rows(Isa isa, const T* X, const T* W, T* Y, int64_t begin, int64_t end, int64_t n, double eps) { \
    normalize_rows<Isa, T>(isa, X, W, Y, begin, end, n, eps);                                                            \
  }
OPGEN_FOR_EACH_FLOATING_AND_CPU(OPGEN_NORMALIZE_ROWS)
#undef OPGEN_NORMALIZE_ROWS

}  // namespace

void rms_norm_cpu(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t rows = xc.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm_cpu", [&] {
    const scalar_t* X = xc.const_data_ptr<scalar_t>();
    const scalar_t* W = wc.const_data_ptr<scalar_t>();
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
      rowwise::on_cpu([&](auto isa) { normalize_rows(isa, X, W, Y, begin, end, n, eps); });  // an overload above
    });
  });
}

}  // namespace opgen_ops
