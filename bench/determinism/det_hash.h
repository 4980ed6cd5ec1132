/*
 * The 64-bit hash of output bytes that the determinism benchmark
 * (determinism.c) and the gpu suite's test_determinism.c compare trials by:
 * one implementation, so the test checks outputs as the benchmark does.
 * Plain C11, header only: the test builds it without the benchmark's sources.
 */
#ifndef DET_HASH_H
#define DET_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/** Seed of det_hash_bytes for a fresh hash (FNV-1a's offset basis). */
#define DET_HASH_INIT 0xcbf29ce484222325ull

static inline uint64_t det_hash_rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/** 64-bit hash of raw bytes, continuing from h: FNV-1a-like steps over
 *  little-endian 64-bit words (tail bytes one by one), then a splitmix
 *  finaliser. Each step is a bijection of h for a fixed word, so two inputs
 *  that differ in one word always hash differently. */
static inline uint64_t det_hash_bytes(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = det_hash_rotl64(h ^ (w * 0xC2B2AE3D27D4EB4Full), 31) * 0x9E3779B185EBCA87ull;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

#endif /* DET_HASH_H */
