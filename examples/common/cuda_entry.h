/*
 * Driver entry points for the examples, through cudart
 * (cudaGetDriverEntryPointByVersion): the examples link cudart and cuBLAS but
 * never libcuda, so they start on machines without a driver and fall back to
 * the simulated device there.
 */
#ifndef DS_EXAMPLES_CUDA_ENTRY_H
#define DS_EXAMPLES_CUDA_ENTRY_H

/* ABI version asked for every entry point (CUDA 12.0). */
#define BENCH_ENTRY_POINT_VERSION 12000

/* Stores the driver's `symbol` in *fn. Prints what failed and returns -1. */
int bench_cuda_entry(const char *symbol, void **fn);

/* POSIX allows storing a function address through a void ** (dlsym idiom). */
#define BENCH_ENTRY_POINT(table, name) bench_cuda_entry(#name, (void **)&(table).name)

#endif
