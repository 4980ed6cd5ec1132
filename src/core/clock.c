/*
 * The runtime's clock (clock.h).
 */
#include <time.h>

#include "core/clock.h"
#include "core/runtime.h"

double ds__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double ds__now_us(struct ds_runtime *rt) { return rt->ops->now_us(rt->dev) - rt->sched.clock0_us; }

void ds__sleep_us(struct ds_runtime *rt, double us) { rt->ops->sleep_us(rt->dev, us); }
