// Forward CPU kernel of opgen_ops.rms_norm, hand-written; spec: specs/rms_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// rms_norm(Tensor x, Tensor weight, *, float eps=1e-06) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// `out` is allocated: contiguous, shape same(x), never empty.
#include "kernels/rms_norm_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace opgen_ops {

void rms_norm_cpu(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t rows = xc.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* X = xc.const_data_ptr<scalar_t>();
    const scalar_t* W = wc.const_data_ptr<scalar_t>();
    scalar_t* Y = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = X + r * n;
        scalar_t* yr = Y + r * n;
        acc_t sum_squares = 0;
        for (int64_t j = 0; j < n; ++j) {
          const acc_t v = static_cast<acc_t>(xr[j]);
          sum_squares += v * v;
        }
        const acc_t rstd = acc_t(1) / std::sqrt(sum_squares / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
        for (int64_t j = 0; j < n; ++j) {
          yr[j] = static_cast<scalar_t>(static_cast<acc_t>(xr[j]) * rstd * static_cast<acc_t>(W[j]));
        }
      }
    });
  });
}

}  // namespace opgen_ops
