// Forward CUDA kernel of opgen_ops.add_n, hand-written; spec: specs/add_n.yaml.
//
// add_n(Tensor[] xs) -> Tensor
// Before this runs, the generated code has checked the arguments (dtypes, devices, one shared
// shape) and converted every tensor to the output's dtype. `out` is allocated: contiguous,
// shape same(xs), never empty.
#include "kernels/add_n_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <vector>

namespace opgen_ops {
namespace {

constexpr int kChunk = 8;  // inputs summed per launch; pointers travel in the kernel's arguments

template <typename scalar_t>
struct Inputs {
  const scalar_t* ptr[kChunk];
};

// out = (accumulate ? out : 0) + sum of n inputs, in opmath; a grid-stride loop.
template <typename scalar_t>
__global__ void add_n_chunk(scalar_t* out, Inputs<scalar_t> in, int n, int64_t numel, bool accumulate) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    acc_t sum = accumulate ? static_cast<acc_t>(out[i]) : acc_t(0);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < n) {
        sum += static_cast<acc_t>(in.ptr[k][i]);
      }
    }
    out[i] = static_cast<scalar_t>(sum);
  }
}

}  // namespace

void add_n_cuda(const at::Tensor& out, at::TensorList xs) {
  const c10::cuda::CUDAGuard guard(out.device());
  std::vector<at::Tensor> inputs;
  inputs.reserve(xs.size());
  for (const at::Tensor& t : xs) {
    inputs.push_back(t.contiguous());
  }
  const int64_t numel = out.numel();
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((numel + threads - 1) / threads,
                                           static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 8);
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "add_n_cuda", [&] {
    for (size_t first = 0; first < inputs.size(); first += kChunk) {
      Inputs<scalar_t> chunk{};
      const int n = static_cast<int>(std::min<size_t>(kChunk, inputs.size() - first));
      for (int k = 0; k < n; ++k) {
        chunk.ptr[k] = inputs[first + k].const_data_ptr<scalar_t>();
      }
      add_n_chunk<scalar_t><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
          out.mutable_data_ptr<scalar_t>(), chunk, n, numel, first > 0);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

}  // namespace opgen_ops
