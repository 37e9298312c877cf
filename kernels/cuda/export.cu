/* export.cu — the backend library's one exported symbol: its table of
 * entry points (api.h). Everything else in the library is hidden, so the
 * binary's loader functions of the same names never collide with these. */
/* The project's headers are C: their functions have C linkage. */
extern "C" {
#include "kernels/cuda/api.h"
}

extern "C" __attribute__((visibility("default"))) const rh_cuda_api *rh_cuda_backend(void)
{
    static const rh_cuda_api api = {
        RH_CUDA_API_VERSION, sizeof(rh_cuda_api),
        kern_cuda, cuda_device_count, cuda_device_describe, cuda_use_device, cuda_thread_release, cuda_sync,
        cuda_error, cuda_clear_error, cuda_force_attention, cuda_force_gemm, cuda_set_variants, cuda_fill_uniform,
        cuda_timer_new, cuda_timer_start, cuda_timer_stop, cuda_timer_free, cuda_copy_bandwidth, cuda_ref_gemm_bf16,
        cuda_comm_id, cuda_comm_new, cuda_comm_kern, cuda_comm_free, cuda_allreduce_times,
    };
    return &api;
}
