/*
 * Inside the simulated device, for api.c and the tests: the engine (engine.h:
 * devices, handles, clock, block scheduler, waits, trace) and the driver-API
 * face (driver_sim.h: cu* entry points, stream resolution, pointers, virtual
 * memory). Dependencies run one way: api.c, backend.c -> driver_sim*.c ->
 * engine.c; the engine includes engine.h only.
 */
#ifndef DS_SIM_SIM_INTERNAL_H
#define DS_SIM_SIM_INTERNAL_H

#include "sim/driver_sim.h"
#include "sim/engine.h"

#endif /* DS_SIM_SIM_INTERNAL_H */
