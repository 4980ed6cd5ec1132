/*
 * The embedded device code (probe.c): the device image the runtime was
 * given, loaded once, and the SM probe (ds_pctx_probe_sms).
 */
#ifndef DS_CORE_PROBE_H
#define DS_CORE_PROBE_H

#include "seam/driver.h"

struct ds_runtime;

/* Loads the device image the runtime was given into the primary
 * context once (caller holds rt->lock or is the only thread) and returns a
 * function of it. ds__probe_prepare: the probe kernel and its buffer, once
 * (a plug-in that makes resident work calls it first: a module load or an
 * allocation may wait for every running kernel). */
ds_status ds__module_function(struct ds_runtime *rt, const char *name, CUfunction *out);
ds_status ds__probe_prepare(struct ds_runtime *rt);

#endif /* DS_CORE_PROBE_H */
