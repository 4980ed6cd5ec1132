/*
 * Shapes and launch constants shared by the determinism benchmark's device
 * code (kernels.cu, nvcc), its host code (C11) and the gpu suite's
 * test_determinism.c. Plain macros only, so both compilers read them alike.
 *
 * Every launch configuration of the LM head is a function of these constants
 * and of the batch size alone, never of the SMs a pCtx has: that is what makes
 * the output bits independent of placement and co-tenants.
 */
#ifndef DET_KERNELS_H
#define DET_KERNELS_H

#define DET_HIDDEN 4096
#define DET_VOCAB 128256
#define DET_MAX_BATCH 16

/* LM head: a warp per vocabulary row at a time, DET_ROWS_PER_WARP rows per
 * warp one after the other, DET_HEAD_WARPS warps per block. */
#define DET_WARP 32
#define DET_HEAD_WARPS 8
#define DET_HEAD_THREADS (DET_WARP * DET_HEAD_WARPS)
#define DET_ROWS_PER_WARP 4
#define DET_ROWS_PER_BLOCK (DET_HEAD_WARPS * DET_ROWS_PER_WARP)
#define DET_HEAD_GRID(vocab) (((vocab) + DET_ROWS_PER_BLOCK - 1) / DET_ROWS_PER_BLOCK)
/* bf16 values per 16-byte load; chunk bounds of the sliced baseline are
 * multiples of it. */
#define DET_VEC 8
/* Hidden elements of the batch's inputs staged in shared memory per pass
 * (DET_MAX_BATCH * DET_TILE * 2 bytes = 32 KiB). A multiple of DET_WARP *
 * DET_VEC, so each lane's order over k is the same whatever the tiling. */
#define DET_TILE 1024

/* Softmax and argmax: one block per batch row. */
#define DET_ROW_THREADS 1024

/* Grid-stride fills and elementwise kernels. */
#define DET_FILL_GRID 1024
#define DET_FILL_THREADS 256

/* Best-effort load. */
#define DET_BE_THREADS 256
#define DET_BE_BUF_FLOATS (1u << 20)

/* Most chunks the sliced baseline splits the hidden dimension into. */
#define DET_MAX_SLICES 16

/* LM-head weights uniform in +-sqrt(3/hidden) (variance 1/hidden), inputs
 * uniform in (-1, 1): logits of order 0.6, as in a trained model. */
#define DET_W_SCALE 0.02706f
#define DET_X_SCALE 1.0f

/* Poison written over the outputs before every trial: a kernel that did not
 * run leaves NaNs (and token -1), which the host checks refuse. */
#define DET_POISON_F32 0x7FC0DEADu
#define DET_POISON_TOKEN 0xFFFFFFFFu

/* Seeds of the weights; the inputs' seeds come from the trial plan. */
#define DET_W_SEED 0x5EED0001ull

#endif /* DET_KERNELS_H */
