/*
 * Layouts shared by the suite `gpu` kernels (kernels.cu, compiled by nvcc) and
 * the host tests (C11). Plain C structs with fixed-width fields only, so both
 * compilers lay them out identically (checked by the static asserts below).
 */
#ifndef DS_TESTS_GPU_KERNELS_H
#define DS_TESTS_GPU_KERNELS_H

#include <stdint.h>

/* The by-value struct parameter of `echo`: 28 bytes, 4-byte aligned, no padding. */
typedef struct echo_struct {
    int32_t x;
    float y;
    char z[20];
} echo_struct;

/* What `echo` writes back: block 0 thread 0 writes the configuration and the
 * parameters it received; every block and thread counts itself. `done` is
 * written last (ECHO_DONE) so a partial write is recognisable. */
typedef struct echo_out {
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t dynamic_smem; /* %dynamic_smem_size */
    int32_t a;
    double b;
    echo_struct s;
    uint32_t smem_ok;      /* 1 if the last byte of the dynamic smem was writable/readable */
    unsigned long long blocks;  /* one atomicAdd per block */
    unsigned long long threads; /* one atomicAdd per thread */
    uint32_t done;
    uint32_t pad_;
} echo_out;

#define ECHO_DONE 0xEC40D0E5u

/* `append` log capacity (entries); ids past it are counted but not logged. */
#define APPEND_LOG_CAP 4096

/* Isolation measurement written by `be_spin` (atomics over all blocks). */
typedef struct be_record {
    unsigned long long first_start; /* min %globaltimer at block start (init ~0) */
    unsigned long long last_end;    /* max %globaltimer at block end (init 0) */
    unsigned int sm_bitmap[8];      /* %smid of every block (256 SMs) */
} be_record;

typedef struct ls_record {
    unsigned long long start; /* %globaltimer when the block started */
    unsigned int smid;
    unsigned int done;
} ls_record;

/* Policies (test_policy.c): one record per kernel launch, written by the
 * kernel `span` itself. Initialise start to ~0 and everything else to 0
 * (span_records_init). */
typedef struct span_record {
    unsigned long long start; /* min %globaltimer over the blocks' starts */
    unsigned long long end;   /* %globaltimer when the last block finished */
    unsigned int blocks;      /* blocks that finished (== grid size when complete) */
    unsigned int pad_;
    unsigned int sm_bitmap[8]; /* %smid of every block (256 SMs) */
} span_record;

#if defined(__cplusplus)
static_assert(sizeof(echo_struct) == 28, "echo_struct layout");
static_assert(sizeof(echo_out) == 96, "echo_out layout");
static_assert(sizeof(span_record) == 56, "span_record layout");
#else
_Static_assert(sizeof(echo_struct) == 28, "echo_struct layout");
_Static_assert(sizeof(echo_out) == 96, "echo_out layout");
_Static_assert(sizeof(span_record) == 56, "span_record layout");
#endif

#endif /* DS_TESTS_GPU_KERNELS_H */
