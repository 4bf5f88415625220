// Forward CPU kernel of opgen_ops.layer_norm, hand-written; spec: specs/layer_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// layer_norm(Tensor x, Tensor weight, Tensor bias, *, float eps=1e-05) -> (Tensor y, Tensor mean, Tensor rstd)
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), bias.dim() == 1, bias.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// The outputs are allocated, contiguous and not all empty: y same(x), mean reduce(x, -1, True), rstd reduce(x, -1, True).
#include "kernels/layer_norm_kernel.h"
#include "rowwise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace opgen_ops {
namespace {

template <typename Isa, typename scalar_t>
[[gnu::always_inline]] inline void normalize_rows(Isa isa, const scalar_t* X, const scalar_t* W, const scalar_t* B, scalar_t* Y, scalar_t* M, scalar_t* R,
                                                 int64_t begin, int64_t end, int64_t n, double eps) {
  using acc_t = at::opmath_type<scalar_t>;
  rowwise::Scratch<scalar_t> scratch(4, n);
  const acc_t* w = rowwise::widen(isa, W, n, scratch.row(0));
  const acc_t* b = rowwise::widen(isa, B, n, scratch.row(1));
  for (int64_t r = begin; r < end; ++r) {
    const acc_t* xr = rowwise::widen(isa, X + r * n, n, scratch.row(2));
    acc_t* yr = rowwise::output(Y + r * n, scratch.row(3));
    // Two passes in opmath (not Welford's, whose division per element does not vectorize): the
    // mean, then the centered sum of squares. Rows of no elements have mean 0 and rstd NaN (0 / 0), as in ATen.
    const acc_t mean = n > 0 ? rowwise::sum<acc_t>(n, [&](int64_t j) { return xr[j]; }) / static_cast<acc_t>(n) : acc_t(0);
    const acc_t m2 = rowwise::sum<acc_t>(n, [&](int64_t j) {
      const acc_t d = xr[j] - mean;
      return d * d;
    });
    const acc_t rstd = acc_t(1) / std::sqrt(m2 / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    M[r] = static_cast<scalar_t>(mean);
    R[r] = static_cast<scalar_t>(rstd);
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
    }
    rowwise::store(isa, yr, Y + r * n, n);
  }
}

// Each dtype for each CPU capability.
#define OPGEN_NORMALIZE_ROWS(T, Isa, TARGET)                                                                       \
  TARGET void normalize_rows(Isa isa, const T* X, const T* W, const T* B, T* Y, T* M, T* R, int64_t begin, int64_t end, \
                             int64_t n, double eps) {                                                               \
    normalize_rows<Isa, T>(isa, X, W, B, Y, M, R, begin, end, n, eps);                                              \
  }
OPGEN_FOR_EACH_FLOATING_AND_CPU(OPGEN_NORMALIZE_ROWS)
#undef OPGEN_NORMALIZE_ROWS

}  // namespace

void layer_norm_cpu(const at::Tensor& y, const at::Tensor& mean_out, const at::Tensor& rstd_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor bc = bias.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t rows = mean_out.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "layer_norm_cpu", [&] {
    const scalar_t* X = xc.const_data_ptr<scalar_t>();
    const scalar_t* W = wc.const_data_ptr<scalar_t>();
    const scalar_t* B = bc.const_data_ptr<scalar_t>();
    scalar_t* Y = y.mutable_data_ptr<scalar_t>();
    scalar_t* M = mean_out.mutable_data_ptr<scalar_t>();
    scalar_t* R = rstd_out.mutable_data_ptr<scalar_t>();
    // Rows are independent: threads split them once each gets ~8K elements (ATen's layer_norm
    // splits at any size; this keeps small inputs on the calling thread).
    at::parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
      rowwise::on_cpu([&](auto isa) { normalize_rows(isa, X, W, B, Y, M, R, begin, end, n, eps); });  // an overload above
    });
  });
}

}  // namespace opgen_ops
