// Backward CPU kernel of opgen_ops.rms_norm, hand-written; spec: specs/rms_norm.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// rms_norm(Tensor x, Tensor weight, *, float eps=1e-06) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() >= 1, weight.dim() == 1, weight.size(0) == x.size(-1), eps > 0) and converted every tensor to the output's dtype.
// Each grad_<input> is allocated (contiguous, the input's shape) when autograd needs it,
// undefined otherwise; `result` is the forward's output.
#include "kernels/rms_norm_kernel.h"
#include "rowwise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps):
//   dx = rstd * (g * w - x * rstd^2 * mean(g * w * x)),  dw = sum over rows of g * x * rstd
namespace opgen_ops {
namespace {

template <typename Isa, typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline void grad_x_rows(Isa isa, const scalar_t* X, const scalar_t* W, const scalar_t* G, scalar_t* DX, acc_t* rstd,
                                              int64_t begin, int64_t end, int64_t n, double eps) {
  rowwise::Scratch<scalar_t> scratch(4, n);
  const acc_t* w = DX != nullptr ? rowwise::widen(isa, W, n, scratch.row(0)) : nullptr;
  for (int64_t r = begin; r < end; ++r) {
    const acc_t* xr = rowwise::widen(isa, X + r * n, n, scratch.row(1));
    const acc_t sum_squares = rowwise::sum<acc_t>(n, [&](int64_t j) { return xr[j] * xr[j]; });
    rstd[r] = acc_t(1) / std::sqrt(sum_squares / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    if (DX != nullptr) {
      const acc_t* gr = rowwise::widen(isa, G + r * n, n, scratch.row(2));
      const acc_t dot = rowwise::sum<acc_t>(n, [&](int64_t j) { return gr[j] * w[j] * xr[j]; });
      const acc_t c = rstd[r] * rstd[r] * dot / static_cast<acc_t>(n);
      acc_t* dx = rowwise::output(DX + r * n, scratch.row(3));
      for (int64_t j = 0; j < n; ++j) {
        dx[j] = rstd[r] * (gr[j] * w[j] - xr[j] * c);
      }
      rowwise::store(isa, dx, DX + r * n, n);
    }
  }
}

// Columns [begin, end) of dw, a block of columns at a time: each row's slice of the block is
// added into opmath sums (contiguous, so it vectorizes), rows in order, whatever the threads.
template <typename Isa, typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
[[gnu::always_inline]] inline void grad_weight_columns(Isa isa, const scalar_t* X, const scalar_t* G, const acc_t* rstd, scalar_t* DW,
                                                      int64_t rows, int64_t n, int64_t begin, int64_t end) {
  constexpr int64_t kColumns = 256;
  acc_t sum[kColumns];
  acc_t x_slice[kColumns];
  acc_t g_slice[kColumns];
  for (int64_t c0 = begin; c0 < end; c0 += kColumns) {
    const int64_t width = std::min(kColumns, end - c0);
    std::fill(sum, sum + width, acc_t(0));
    for (int64_t r = 0; r < rows; ++r) {
      const acc_t* xr = rowwise::widen(isa, X + r * n + c0, width, x_slice);
      const acc_t* gr = rowwise::widen(isa, G + r * n + c0, width, g_slice);
      for (int64_t i = 0; i < width; ++i) {
        sum[i] += gr[i] * xr[i] * rstd[r];
      }
    }
    rowwise::store(isa, sum, DW + c0, width);
  }
}

// Each dtype for each CPU capability.
#define OPGEN_BACKWARD_LOOPS(T, Isa, TARGET)                                                                          \
  TARGET void grad_x_rows(Isa isa, const T* X, const T* W, const T* G, T* DX, at::opmath_type<T>* rstd, int64_t begin, \
                          int64_t end, int64_t n, double eps) {                                                        \
    grad_x_rows<Isa, T>(isa, X, W, G, DX, rstd, begin, end, n, eps);                                                   \
  }                                                                                                                    \
  TARGET void grad_weight_columns(Isa isa, const T* X, const T* G, const at::opmath_type<T>* rstd, T* DW, int64_t rows,  \
                                  int64_t n, int64_t begin, int64_t end) {                                              \
    grad_weight_columns<Isa, T>(isa, X, G, rstd, DW, rows, n, begin, end);                                             \
  }
OPGEN_FOR_EACH_FLOATING_AND_CPU(OPGEN_BACKWARD_LOOPS)
#undef OPGEN_BACKWARD_LOOPS

}  // namespace

void rms_norm_backward_cpu(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight, double eps, const at::Tensor& result, const at::Tensor& grad_x, const at::Tensor& grad_weight) {
  const int64_t n = x.size(-1);
  const int64_t rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rms_norm_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* X = x.const_data_ptr<scalar_t>();
    const scalar_t* W = weight.const_data_ptr<scalar_t>();
    const scalar_t* G = grad.const_data_ptr<scalar_t>();
    scalar_t* DX = grad_x.defined() ? grad_x.mutable_data_ptr<scalar_t>() : nullptr;
    std::vector<acc_t> rstd(rows);
    at::parallel_for(0, rows, std::max<int64_t>(1, 8192 / n), [&](int64_t begin, int64_t end) {
      rowwise::on_cpu([&](auto isa) { grad_x_rows(isa, X, W, G, DX, rstd.data(), begin, end, n, eps); });  // overloads above
    });
    if (grad_weight.defined()) {
      scalar_t* DW = grad_weight.mutable_data_ptr<scalar_t>();
      at::parallel_for(0, n, std::max<int64_t>(1, 8192 / std::max<int64_t>(rows, 1)), [&](int64_t begin, int64_t end) {
        rowwise::on_cpu([&](auto isa) { grad_weight_columns(isa, X, G, rstd.data(), DW, rows, n, begin, end); });
      });
    }
  });
}

}  // namespace opgen_ops
