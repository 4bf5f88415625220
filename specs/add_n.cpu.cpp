// Forward CPU kernel of opgen_ops.add_n, hand-written; spec: specs/add_n.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// add_n(Tensor[] xs) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, devices) and converted every tensor to the output's dtype.
// `out` is allocated: contiguous, shape same(xs), never empty.
#include "kernels/add_n_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace opgen_ops {

void add_n_cpu(const at::Tensor& out, at::TensorList xs) {
  // One pass over memory: every output element sums the inputs' elements (in opmath for half and
  // bfloat16), with no intermediate tensors.
  std::vector<at::Tensor> inputs;
  inputs.reserve(xs.size());
  for (const at::Tensor& t : xs) {
    inputs.push_back(t.contiguous());
  }
  const int64_t numel = out.numel();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "add_n_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    std::vector<const scalar_t*> ptrs;
    for (const at::Tensor& t : inputs) {
      ptrs.push_back(t.const_data_ptr<scalar_t>());
    }
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, numel, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        acc_t sum = 0;
        for (const scalar_t* p : ptrs) {
          sum += static_cast<acc_t>(p[i]);
        }
        y[i] = static_cast<scalar_t>(sum);
      }
    });
  });
}

}  // namespace opgen_ops
