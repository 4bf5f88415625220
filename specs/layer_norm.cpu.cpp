// Forward CPU kernel of opgen_ops.layer_norm, hand-written; spec: specs/layer_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// layer_norm(Tensor x, Tensor weight, Tensor bias, *, float eps=1e-05) -> (Tensor y, Tensor mean, Tensor rstd)
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), bias.dim() == 1, bias.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// The outputs are allocated, contiguous and not all empty: y same(x), mean reduce(x, -1, True), rstd reduce(x, -1, True).
#include "kernels/layer_norm_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace opgen_ops {

void layer_norm_cpu(const at::Tensor& y, const at::Tensor& mean_out, const at::Tensor& rstd_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor bc = bias.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t rows = mean_out.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "layer_norm_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* X = xc.const_data_ptr<scalar_t>();
    const scalar_t* W = wc.const_data_ptr<scalar_t>();
    const scalar_t* B = bc.const_data_ptr<scalar_t>();
    scalar_t* Y = y.mutable_data_ptr<scalar_t>();
    scalar_t* M = mean_out.mutable_data_ptr<scalar_t>();
    scalar_t* R = rstd_out.mutable_data_ptr<scalar_t>();
    // Rows of no elements (x of shape [..., 0]) have mean 0 and rstd NaN (0 / 0), as in ATen.
    at::parallel_for(0, rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = X + r * n;
        scalar_t* yr = Y + r * n;
        // Two passes in opmath with four partial sums each (the compiler vectorizes neither a
        // single running sum nor Welford's division): the mean, then the centered sum of squares.
        acc_t s[4] = {0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
          for (int k = 0; k < 4; ++k) {
            s[k] += static_cast<acc_t>(xr[j + k]);
          }
        }
        for (; j < n; ++j) {
          s[0] += static_cast<acc_t>(xr[j]);
        }
        const acc_t mean = n > 0 ? (s[0] + s[1] + s[2] + s[3]) / static_cast<acc_t>(n) : acc_t(0);
        acc_t q[4] = {0, 0, 0, 0};
        for (j = 0; j + 4 <= n; j += 4) {
          for (int k = 0; k < 4; ++k) {
            const acc_t d = static_cast<acc_t>(xr[j + k]) - mean;
            q[k] += d * d;
          }
        }
        for (; j < n; ++j) {
          const acc_t d = static_cast<acc_t>(xr[j]) - mean;
          q[0] += d * d;
        }
        const acc_t m2 = q[0] + q[1] + q[2] + q[3];
        const acc_t rstd = acc_t(1) / std::sqrt(m2 / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
        M[r] = static_cast<scalar_t>(mean);
        R[r] = static_cast<scalar_t>(rstd);
        for (j = 0; j < n; ++j) {
          const acc_t v = (static_cast<acc_t>(xr[j]) - mean) * rstd;
          yr[j] = static_cast<scalar_t>(v * static_cast<acc_t>(W[j]) + static_cast<acc_t>(B[j]));
        }
      }
    });
  });
}

}  // namespace opgen_ops
