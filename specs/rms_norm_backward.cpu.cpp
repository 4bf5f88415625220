// Backward CPU kernel of opgen_ops.rms_norm, hand-written; spec: specs/rms_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// rms_norm(Tensor x, Tensor weight, *, float eps=1e-06) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// Each grad_<input> is allocated (contiguous, the input's shape) when autograd needs it,
// undefined otherwise; `result` is the forward's output.
#include "kernels/rms_norm_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace opgen_ops {

void rms_norm_backward_cpu(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& result, const at::Tensor& grad_x, const at::Tensor& grad_weight) {
  // y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps):
  //   dx = rstd * (g * w - x * rstd^2 * mean(g * w * x)),  dw = sum over rows of g * x * rstd
  const int64_t n = x.size(-1);
  const int64_t rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* W = weight.const_data_ptr<scalar_t>();
    const scalar_t* G = grad.const_data_ptr<scalar_t>();
    std::vector<acc_t> rstd(rows);
    const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = X + r * n;
        const scalar_t* gr = G + r * n;
        acc_t sum_squares = 0, dot = 0;
        for (int64_t j = 0; j < n; ++j) {
          const acc_t v = static_cast<acc_t>(xr[j]);
          sum_squares += v * v;
          dot += static_cast<acc_t>(gr[j]) * static_cast<acc_t>(W[j]) * v;
        }
        rstd[r] = acc_t(1) / std::sqrt(sum_squares / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
        if (grad_x.defined()) {
          scalar_t* dx = grad_x.mutable_data_ptr<scalar_t>() + r * n;
          const acc_t c = rstd[r] * rstd[r] * dot / static_cast<acc_t>(n);
          for (int64_t j = 0; j < n; ++j) {
            const acc_t gw = static_cast<acc_t>(gr[j]) * static_cast<acc_t>(W[j]);
            dx[j] = static_cast<scalar_t>(rstd[r] * (gw - static_cast<acc_t>(xr[j]) * c));
          }
        }
      }
    });
    if (grad_weight.defined()) {
      scalar_t* dw = grad_weight.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, n, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(rows, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          acc_t sum = 0;
          for (int64_t r = 0; r < rows; ++r) {
            sum += static_cast<acc_t>(G[r * n + j]) * static_cast<acc_t>(X[r * n + j]) * rstd[r];
          }
          dw[j] = static_cast<scalar_t>(sum);
        }
      });
    }
  });
}

}  // namespace opgen_ops
