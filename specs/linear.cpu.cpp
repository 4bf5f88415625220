// Forward CPU kernel of opgen_ops.linear, hand-written; spec: specs/linear.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, devices,
// x.dim() == 2, w.dim() == 2, x.size(1) == w.size(1), bias is None or (bias.dim() == 1 and bias.size(0) == w.size(0)))
// and converted every tensor to the output's dtype.
// `out` is allocated: contiguous, shape [x.size(0), w.size(0)], never empty.
#include "kernels/linear_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>

namespace opgen_ops {

void linear_cpu(const at::Tensor& out, const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias) {
  // ATen's GEMM (MKL/OpenBLAS) writes straight into `out`; the bias is broadcast over the rows.
  if (bias.has_value()) {
    at::addmm_out(const_cast<at::Tensor&>(out), *bias, x, w.t());
  } else {
    at::mm_out(const_cast<at::Tensor&>(out), x, w.t());
  }
}

}  // namespace opgen_ops
