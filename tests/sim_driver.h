/* Helpers shared by the unit tests that drive the simulated device (src/sim)
 * at the driver seam (test_sim.c, test_sim_graph.c).
 *
 * Driver-level calls go through the simulated driver table, `cu`, which a
 * suite sets with `.init = sd_init`; devices come from a runtime on
 * DS_DEVICE_SIM (sd_open: the public ds_sim_* functions reach them), or bare
 * from ds__sim_device_create() (sd_open_bare) where the test destroys the
 * device itself. */
#ifndef DS_TESTS_SIM_DRIVER_H
#define DS_TESTS_SIM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "sim/sim.h"

/* The simulated driver table (ds__sim_driver()), set by sd_init. */
extern const ds__driver *cu;

/* A suite's .init: sets cu. */
void sd_init(void);

/* The name of a driver result ("?" if it has none). */
const char *cuname(CUresult r);

/* Asserts a driver call succeeded / returned `want`, naming it. */
#define CU(call)                                                                              \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        cr_assert_eq(r_, CUDA_SUCCESS, "%s:%d: %s -> %s", __FILE__, __LINE__, #call,          \
                     cuname(r_));                                                             \
    } while (0)

#define CU_EXPECT(call, want)                                                                 \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        cr_assert_eq(r_, (want), "%s:%d: %s -> %s, want %s", __FILE__, __LINE__, #call,       \
                     cuname(r_), cuname(want));                                               \
    } while (0)

/* A simulated device (132 SMs unless cfg says otherwise) with its primary
 * context current and its SMs split in groups of 8 (15 groups + 12). */
typedef struct simdev {
    ds_runtime_t rt; /* NULL for a bare device */
    CUdevice dev;
    CUcontext primary;
    CUdevResource groups[64];
    unsigned ngroups;
    CUdevResource rem;
} simdev;

/* Through a runtime: the device is the runtime's own. cfg NULL = defaults. */
void sd_open(simdev *s, const ds_sim_config *cfg);
/* A bare device, for tests that destroy it themselves. */
void sd_open_bare(simdev *s, const ds_sim_config *cfg);
/* Releases the primary context and destroys the runtime (or the bare device). */
void sd_close(simdev *s);

/* Green context over groups first..last (and the remainder if with_rem). */
CUgreenCtx sd_green(simdev *s, unsigned first, unsigned last, int with_rem);
/* The context of a green context. */
CUcontext ctx_of(CUgreenCtx g);
/* A non-blocking stream of a green context. */
CUstream sd_stream(CUgreenCtx g, int prio);

/* The simulated kernel kd describes (ds_sim_kernel_create, asserting success). */
CUfunction sd_kernel_desc(simdev *s, const ds_sim_kernel_desc *kd);

/* Every record of the device's trace, bare or not (caller frees). */
ds_sim_kernel_record *sd_trace(simdev *s, size_t *n);

/* The last record of the trace that `match` accepts (key is match's):
 * returns 1 and writes *out, or 0; *n is the number of records either way. */
typedef int (*sd_record_match)(const ds_sim_kernel_record *r, const void *key);
int sd_find_last(simdev *s, sd_record_match match, const void *key, ds_sim_kernel_record *out, size_t *n);

#endif
