// Forward CPU kernel of opgen_ops.add_n, hand-written; spec: specs/add_n.yaml.
// opgen wrote this file once, as a stub, and never overwrites it; the body below is hand-written.
//
// add_n(Tensor[] xs) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, devices) and converted every tensor to the output's dtype.
// `out` is allocated: contiguous, shape same(xs), never empty.
#include "kernels/add_n_kernel.h"
#include "rowwise.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace opgen_ops {
namespace {

// Elements [begin, end) of the sum, block by block: the inputs are added into an opmath buffer
// that stays in L1, two at a time, in order (((x0 + x1) + x2) + x3, as eager's chain rounds
// them), then the block is rounded into `out` once. Each loop is a simple one the compiler
// vectorizes; left to itself GCC jammed pairs of the per-input loops into one it did not
// vectorize. Pointers come by value: through a closure's references they would be loaded
// again after every store.
template <typename Isa, typename scalar_t>
[[gnu::always_inline]] inline void add_blocks(Isa isa, const scalar_t* const* inputs, int64_t count, scalar_t* out, int64_t begin, int64_t end) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int64_t kBlock = 1024;
  acc_t sum[kBlock];
  acc_t p_block[kBlock];  // float16 and bfloat16 inputs, widened
  acc_t q_block[kBlock];
  for (int64_t start = begin; start < end; start += kBlock) {
    const int64_t n = std::min(kBlock, end - start);
    const acc_t* first = rowwise::widen(isa, inputs[0] + start, n, sum);
    if (first != sum) {
      std::copy(first, first + n, sum);
    }
    int64_t k = 1;
    for (; k + 2 <= count; k += 2) {
      const acc_t* p = rowwise::widen(isa, inputs[k] + start, n, p_block);
      const acc_t* q = rowwise::widen(isa, inputs[k + 1] + start, n, q_block);
      for (int64_t i = 0; i < n; ++i) {
        sum[i] = (sum[i] + p[i]) + q[i];
      }
    }
    if (k < count) {
      const acc_t* p = rowwise::widen(isa, inputs[k] + start, n, p_block);
      for (int64_t i = 0; i < n; ++i) {
        sum[i] += p[i];
      }
    }
    rowwise::store(isa, sum, out + start, n);
  }
}

// Each floating dtype for each CPU capability; the integral ones use the template as it is, at
// the baseline.
#define OPGEN_ADD_BLOCKS(T, Isa, TARGET)                                                                         \
  TARGET void add_blocks(Isa isa, const T* const* inputs, int64_t count, T* out, int64_t begin, int64_t end) { \
    add_blocks<Isa, T>(isa, inputs, count, out, begin, end);                                                     \
  }
OPGEN_FOR_EACH_FLOATING_AND_CPU(OPGEN_ADD_BLOCKS)
#undef OPGEN_ADD_BLOCKS

}  // namespace

void add_n_cpu(const at::Tensor& out, at::TensorList xs) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(xs.size());
  for (const at::Tensor& t : xs) {
    inputs.push_back(t.contiguous());
  }
  const int64_t numel = out.numel();
  const int64_t count = static_cast<int64_t>(inputs.size());
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "add_n_cpu", [&] {
    std::vector<const scalar_t*> ptrs;
    for (const at::Tensor& t : inputs) {
      ptrs.push_back(t.const_data_ptr<scalar_t>());
    }
    const scalar_t* const* first = ptrs.data();
    scalar_t* y = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, numel, std::max<int64_t>(1024, at::internal::GRAIN_SIZE / count), [=](int64_t begin, int64_t end) {
      rowwise::on_cpu([=](auto isa) { add_blocks(isa, first, count, y, begin, end); });  // an overload above
    });
  });
}

}  // namespace opgen_ops
