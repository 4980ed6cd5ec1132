/*
 * The runtime's clock (clock.c): the device's (the device-ops table's:
 * simulated time on the simulated device), counted from the runtime's
 * creation (ds__sched.clock0_us), and the host's wall clock for limits a
 * caller waits out. Every module reads it; it calls nothing of core.
 */
#ifndef DS_CORE_CLOCK_H
#define DS_CORE_CLOCK_H

struct ds_runtime;

/* Runtime clock in us since creation (the device's: simulated time on the
 * simulated device). */
double ds__now_us(struct ds_runtime *rt);
/* Lets `us` of device time pass on the calling thread. */
void ds__sleep_us(struct ds_runtime *rt, double us);
/* Host wall clock (CLOCK_MONOTONIC) in ms, whatever the device: for time
 * limits the caller waits out (hold and gate timeouts). */
double ds__wall_ms(void);

#endif /* DS_CORE_CLOCK_H */
