/*
 * Fields shared between threads, read and written without a fence: relaxed
 * loads and stores, and counters with a single writer. Every module of core
 * uses them; they call nothing.
 */
#ifndef DS_CORE_RELAXED_H
#define DS_CORE_RELAXED_H

#include <stdatomic.h>
#include <stdint.h>

/* Relaxed load / store of a field shared between threads. On x86-64 and
 * AArch64 both are plain loads and stores of an aligned word: no lock prefix,
 * no fence, so the hot path pays nothing for them. */
#define DS__LD(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define DS__ST(field, value) atomic_store_explicit(&(field), (value), memory_order_relaxed)

/* Single-writer counter: a plain load + store, no locked instruction. */
static inline void ds__bump(_Atomic uint64_t *c, uint64_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

#endif /* DS_CORE_RELAXED_H */
