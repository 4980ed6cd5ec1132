/*
 * Kernel duration profiles per (function, grid, block, tier SM count): a
 * moving mean and a tail estimate (mean + 4 x mean absolute deviation, the
 * Jacobson/Karels estimator of RFC 6298 section 2, there used for round-trip
 * times). Writers (harvests) take a lock; readers (tenant threads predicting
 * on the hot path) are lock-free.
 */
#ifndef DS_CORE_PROFILE_H
#define DS_CORE_PROFILE_H

#include "detshare/detshare.h"

typedef struct ds__profiles ds__profiles;

ds__profiles *ds__profiles_create(void);
void ds__profiles_destroy(ds__profiles *p);

/* Adds one measured duration (writers serialise on an internal lock). */
void ds__profile_add(ds__profiles *p, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms, double us);

/* Mean and tail in us; returns the number of samples behind them (0: unknown,
 * outputs untouched). Any thread. */
uint32_t ds__profile_get(const ds__profiles *p, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms,
                         double *mean_us, double *tail_us);

#endif
