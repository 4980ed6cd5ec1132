/*
 * Windows bound library work: a best-effort vCtx under slo_aware running
 * cuBLAS GEMMs (4096^3, FP16 in, FP32 accumulate) in sections, as a PyTorch
 * tenant does, never has more predicted work in flight than its window plus
 * one section.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpu_fixture.h"

#define N 4096

Test(window, cublas_sections_stay_within_the_window, .timeout = 120)
{
    gpu_env e;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "slo_aware";
    gpu_open(&e, &cfg);
    ds_vctx_t v = gpu_vctx(&e, "be", DS_CLASS_BEST_EFFORT, -1);
    cublasHandle_t h;
    cr_assert_eq(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    CUdeviceptr a = gpu_alloc(&e, (size_t)N * N * 2), b = gpu_alloc(&e, (size_t)N * N * 2),
                c = gpu_alloc(&e, (size_t)N * N * 4);
    const float one = 1.0f, zero = 0.0f;
    /* cuBLAS's first GEMM loads its kernels: warm it up outside any section */
    cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const void *)a, CUDA_R_16F, N,
                              (const void *)b, CUDA_R_16F, N, &zero, (void *)c, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    const ds_policy_view *view = (const ds_policy_view *)e.rt; /* the view is the runtime */
    double most = 0, unit = 0, most_over = -1e18;
    uint32_t window = 0;
    for (int i = 0; i < 60; i++) {
        CUstream s = NULL;
        GPU_DS(ds_vctx_acquire_stream(v, &s));
        cr_assert_eq(cublasSetStream(h, (cudaStream_t)s), CUBLAS_STATUS_SUCCESS);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const void *)a, CUDA_R_16F, N,
                                      (const void *)b, CUDA_R_16F, N, &zero, (void *)c, CUDA_R_32F, N,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         CUBLAS_STATUS_SUCCESS);
        GPU_DS(ds_vctx_release_stream(v));
        ds_vctx_state st = DS_VCTX_STATE_INIT;
        GPU_DS(ds_view_vctx_state(view, v, &st));
        window = st.window_us;
        unit = st.unit_us; /* the longest recent section, predicted */
        if (st.inflight_us > most)
            most = st.inflight_us;
        if (st.inflight_us - st.window_us > most_over)
            most_over = st.inflight_us - st.window_us;
        cr_assert_leq(st.inflight_us, st.window_us + unit + 1.0,
                      "section %d: %.0f us of predicted work in flight; window %u us, one section %.0f us", i,
                      st.inflight_us, st.window_us, unit);
    }
    GPU_DS(ds_vctx_synchronize(v));
    cr_log_info("window %u us, a section %.0f us (predicted), most in flight %.0f us (window %+.0f us)", window,
                unit, most, most_over);
    cr_assert_gt(window, 0, "slo_aware gives BE a window");
    cr_assert_gt(unit, 0, "the sections were measured");
    cr_assert_gt(most, window / 2.0, "the window was reached, so the check above was not vacuous");
    cublasDestroy(h);
    gpu_free(&e, a);
    gpu_free(&e, b);
    gpu_free(&e, c);
    GPU_DS(ds_vctx_destroy(v));
    gpu_close(&e);
}
