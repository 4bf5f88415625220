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

#include <algorithm>
#include <cmath>
#include <vector>

namespace opgen_ops {

void add_n_cpu(const at::Tensor& out, at::TensorList xs) {
  // One pass over memory, block by block: each input is added into an opmath buffer that stays
  // in L1 (simple loops the compiler vectorizes), then the block is rounded into `out` once.
  std::vector<at::Tensor> inputs;
  inputs.reserve(xs.size());
  for (const at::Tensor& t : xs) {
    inputs.push_back(t.contiguous());
  }
  const int64_t numel = out.numel();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "add_n_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr int64_t kBlock = 1024;
    std::vector<const scalar_t*> ptrs;
    for (const at::Tensor& t : inputs) {
      ptrs.push_back(t.const_data_ptr<scalar_t>());
    }
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, numel, std::max<int64_t>(kBlock, at::internal::GRAIN_SIZE / static_cast<int64_t>(ptrs.size())),
                     [&](int64_t begin, int64_t end) {
      acc_t sum[kBlock];
      for (int64_t start = begin; start < end; start += kBlock) {
        const int64_t n = std::min(kBlock, end - start);
        const scalar_t* first = ptrs[0] + start;
        for (int64_t i = 0; i < n; ++i) {
          sum[i] = static_cast<acc_t>(first[i]);
        }
        for (size_t k = 1; k < ptrs.size(); ++k) {
          const scalar_t* p = ptrs[k] + start;
          for (int64_t i = 0; i < n; ++i) {
            sum[i] += static_cast<acc_t>(p[i]);
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          y[start + i] = static_cast<scalar_t>(sum[i]);
        }
      }
    });
  });
}

}  // namespace opgen_ops
