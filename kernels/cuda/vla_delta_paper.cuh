/* Internal to kernels/cuda: the paper's DeltaNet (delta-paper, VLA-MATH 1 last subsection and 5),
 * forward and backward (vla_delta_paper.cu). vla_launch.cu and vla_grad_launch.cu hand every call of
 * this mechanism here; each function plans the call itself (the same plan for the size query and the
 * launch). */
#ifndef VLA_DELTA_PAPER_CUH
#define VLA_DELTA_PAPER_CUH

#include "vla_common.cuh"

namespace vlacu {

/* Bytes of workspace (SIZE_MAX when the sizes overflow). */
size_t dpaper_forward_workspace(const vlacu_args &a, const vlacu_device &dev);
size_t dpaper_backward_workspace(const vlacu_args &a, const vlacu_device &dev);

/* Enqueue the call on `st`; the workspace holds at least the bytes above. */
cudaError_t dpaper_forward(const vlacu_args &a, const vlacu_device &dev, void *ws, size_t ws_bytes, cudaStream_t st);
cudaError_t dpaper_backward(const vlacu_args &a, const vlacu_grads &g, const vlacu_device &dev, void *ws,
                            size_t ws_bytes, cudaStream_t st);

} // namespace vlacu

#endif /* VLA_DELTA_PAPER_CUH */
