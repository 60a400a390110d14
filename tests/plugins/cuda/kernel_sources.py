"""Hand-written CUDA C kernels the backend tests compile (and, on a GPU, run).

They stand in for generated code until the code generator exists, and exercise what
it will emit: extern "C" kernels, cuda_fp16.h, inline PTX for tensor cores
(mma.sync), async copies with zero-fill (cp.async) and ldmatrix.
"""

VECTOR_ADD = r"""
/* hidet function: vector_add */
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""

HALF_AXPY = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
/* hidet function: half_axpy */
extern "C" __global__ void half_axpy(const __half* x, __half* y, __half alpha, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hfma(alpha, x[i], y[i]);
}
"""

# One warp computes C[16x8] (f32) = A[16x16] (f16, row-major) @ B[16x8] (f16), with B
# given transposed (Bt[8x16], row-major = B column-major, the "col" of row.col).
# A is brought in with cp.async; its elements at index >= a_valid are zero-filled by
# the copy itself (src-size < 16), like a predicated tile load at a matrix edge.
MMA_TILE = r"""
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/* hidet function: mma_tile */
extern "C" __global__ void mma_tile(const __half* A, const __half* Bt, float* C, int a_valid) {
  __shared__ __align__(128) __half sA[16 * 16];
  __shared__ __align__(128) __half sB[8 * 16];
  int lane = threadIdx.x;
  int first = lane * 8;  // each lane copies 16 bytes = 8 halves of A
  int left = a_valid - first;
  int src_bytes = left >= 8 ? 16 : (left > 0 ? left * 2 : 0);
  const __half* src = A + (left > 0 ? first : 0);  // never form an address past the data
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(sA + first)), "l"(src), "r"(src_bytes));
  if (lane < 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                 :: "r"(smem_addr(sB + lane * 8)), "l"(Bt + lane * 8));
  }
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();

  unsigned a[4], b[2];
  int mat = lane / 8, r = lane % 8;  // ldmatrix: lanes 8i..8i+7 address matrix i's rows
  const __half* a_row = sA + (r + (mat % 2) * 8) * 16 + (mat / 2) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(smem_addr(a_row)));
  const __half* b_row = sB + r * 16 + (mat % 2) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b[0]), "=r"(b[1]) : "r"(smem_addr(b_row)));

  float c[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  int row = lane / 4, col = (lane % 4) * 2;
  C[row * 8 + col] = c[0];
  C[row * 8 + col + 1] = c[1];
  C[(row + 8) * 8 + col] = c[2];
  C[(row + 8) * 8 + col + 1] = c[3];
}
"""

# Needs more than the default 48 KB of dynamic shared memory: each block stages a
# chunk of `chunk` floats and writes it back reversed and doubled (zeros past n).
BIG_SMEM_REVERSE = r"""
/* hidet function: smem_reverse */
extern "C" __global__ void smem_reverse(const float* x, float* y, int n, int chunk) {
  extern __shared__ float buf[];
  long base = (long)blockIdx.x * chunk;
  for (int j = threadIdx.x; j < chunk; j += blockDim.x)
    buf[j] = base + j < n ? x[base + j] : 0.0f;
  __syncthreads();
  for (int j = threadIdx.x; j < chunk; j += blockDim.x)
    if (base + j < n) y[base + j] = 2.0f * buf[chunk - 1 - j];
}
"""

# sm_90a-only (setmaxnreg): the build must pick sm_90a by itself.
SETMAXNREG = r"""
/* hidet function: uses_setmaxnreg */
extern "C" __global__ void __launch_bounds__(128, 1) uses_setmaxnreg(int* out) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::);
  out[threadIdx.x] = threadIdx.x;
}
"""

BROKEN = r"""
#include <cuda_fp16.h>

/* hidet function: fine_kernel */
extern "C" __global__ void fine_kernel(float* x) { x[threadIdx.x] = 1.0f; }

/* hidet function: broken_kernel */
extern "C" __global__ void broken_kernel(float* x, int n) {
  int i = threadIdx.x;
  if (i < n)
    x[i] = undefined_symbol_here * 2.0f;
}
"""
