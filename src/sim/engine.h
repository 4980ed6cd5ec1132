/*
 * The simulated hardware (engine.c): devices and their registry, handle
 * tables, the clock, the block scheduler, waits, per-device memory and the
 * kernel trace. The engine knows nothing of the driver API: driver_sim*.c (the
 * cu* face, driver_sim.h), backend.c and api.c call it, never the reverse.
 *
 * Locking: one mutex per device (sim_dev.mu) guards everything of that device.
 * A process-wide registry maps CUdevice (a small slot index) to devices; its
 * lock is only ever taken alone (never while holding a device mutex), so there
 * is no lock-order question. Calls reach a device through
 * ds__sim_dev_acquire()/ds__sim_dev_release(), which also count the callers
 * inside so that ds__sim_device_destroy() can wait for them.
 *
 * Turns: on a VIRTUAL device, host threads that reserve a place
 * (ds__sim_thread_reserve/attach) run one at a time, in simulated-time order,
 * ties broken by place; the clock moves only when none of them can go on
 * (engine.c, "Turns"; docs/design.md, section 5). That is what makes a
 * multi-threaded program on the simulator repeat itself.
 *
 * Handles (CUstream, CUevent, CUcontext, CUgreenCtx, CUmodule, CUfunction,
 * CUkernel, CUdevResourceDesc, CUgraph, CUgraphNode, CUgraphExec) are not
 * pointers: they encode a kind, the device slot, an
 * index into the device's handle table and a process-unique generation, so a
 * foreign, destroyed or NULL handle is always recognised without dereferencing
 * anything (see SIM_H_* below).
 */
#ifndef DS_SIM_ENGINE_H
#define DS_SIM_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "rck/rck_block.h"
#include "sim/sim.h"

/* Most simulated devices alive at once (CUdevice is the slot index). */
#define DS__SIM_MAX_DEVICES 64
/* Capacity of one SM in occupancy units: a block of a kernel with
 * blocks_per_sm = o takes 8 / o units. */
#define DS__SIM_SM_UNITS 8u
/* Name of the built-in probe kernel every sim module holds. */
#define DS__SIM_PROBE_NAME "ds_probe_smid"
#define DS__SIM_PROBE_BLOCK_US 5.0
#define DS__SIM_PROBE_BLOCKS_PER_SM 4u
/* ... and of the resident control kernel (src/rck): one block of one unit
 * that stays on its SM, running ds__rck_device_pass at every instant, until
 * its control block says stop. */
#define DS__SIM_RCK_NAME "ds_rck"
/* Device limits reported and enforced by cuLaunchKernel. */
#define DS__SIM_MAX_GRID_X 2147483647u
#define DS__SIM_MAX_GRID_YZ 65535u
#define DS__SIM_MAX_BLOCK_XY 1024u
#define DS__SIM_MAX_BLOCK_Z 64u
#define DS__SIM_MAX_THREADS 1024u
#define DS__SIM_MAX_SMEM 232448u
#define DS__SIM_PRIO_LEAST 0
#define DS__SIM_PRIO_GREATEST (-5)
#define DS__SIM_TRACE_CHUNK 256u
/* Device memory (cuMemGetInfo's total): an H100's or H200's 80 GB class,
 * as a round 80 GiB; the simulator does not model HBM capacity otherwise. */
#define DS__SIM_MEM_TOTAL ((size_t)80 << 30)
/* Device memory an executable graph holds from cuGraphInstantiate to
 * cuGraphExecDestroy (the model: 64 KiB + 1 KiB per node). */
#define DS__SIM_EXEC_BYTES ((size_t)64 << 10)
#define DS__SIM_EXEC_NODE_BYTES ((size_t)1 << 10)

/* ---- handles -------------------------------------------------------------
 * bits 60..63 kind (never 0, so a handle is never NULL nor one of the special
 * stream values 0x1/0x2), 52..59 device slot, 32..51 table index, 0..31
 * generation (process-unique, never 0). */
enum {
    SIM_H_FREE = 0,
    SIM_H_CTX = 1,
    SIM_H_GREEN = 2,
    SIM_H_STREAM = 3,
    SIM_H_EVENT = 4,
    SIM_H_MODULE = 5,
    SIM_H_FUNC = 6,
    SIM_H_DESC = 7,
    SIM_H_GRAPH = 8,  /* CUgraph (a template: cuStreamEndCapture) */
    SIM_H_NODE = 9,   /* CUgraphNode of a template */
    SIM_H_EXEC = 10,  /* CUgraphExec (cuGraphInstantiateWithFlags) */
    SIM_H_KERNEL = 11, /* CUkernel naming a ds_sim_kernel_create function */
};

static inline unsigned sim_h_kind(uint64_t h) { return (unsigned)(h >> 60); }
static inline int sim_h_slot(uint64_t h) { return (int)((h >> 52) & 0xffu); }

typedef struct sim_hentry {
    void *obj;
    uint32_t gen;
    uint32_t kind;      /* SIM_H_*, SIM_H_FREE when unused */
    uint32_t next_free; /* free-list link (index + 1, 0 = end) */
} sim_hentry;

/* ---- SM sets -------------------------------------------------------------- */
typedef struct sim_smset {
    uint64_t w[DS_MAX_SMS / 64];
} sim_smset;

static inline void sim_set_add(sim_smset *s, unsigned sm) { s->w[sm >> 6] |= 1ull << (sm & 63u); }
static inline void sim_set_del(sim_smset *s, unsigned sm) { s->w[sm >> 6] &= ~(1ull << (sm & 63u)); }
static inline int sim_set_has(const sim_smset *s, unsigned sm) { return (int)((s->w[sm >> 6] >> (sm & 63u)) & 1u); }
static inline unsigned sim_set_count(const sim_smset *s)
{
    unsigned n = 0;
    for (unsigned i = 0; i < DS_MAX_SMS / 64; i++)
        n += (unsigned)__builtin_popcountll(s->w[i]);
    return n;
}
static inline int sim_set_empty(const sim_smset *s)
{
    uint64_t a = 0;
    for (unsigned i = 0; i < DS_MAX_SMS / 64; i++)
        a |= s->w[i];
    return a == 0;
}
static inline int sim_set_intersects(const sim_smset *a, const sim_smset *b)
{
    for (unsigned i = 0; i < DS_MAX_SMS / 64; i++)
        if (a->w[i] & b->w[i])
            return 1;
    return 0;
}
static inline void sim_set_or(sim_smset *a, const sim_smset *b)
{
    for (unsigned i = 0; i < DS_MAX_SMS / 64; i++)
        a->w[i] |= b->w[i];
}

/* ---- objects -------------------------------------------------------------- */
typedef struct sim_dev sim_dev;

/* A condition a waiting thread needs (evaluated under the device lock). */
typedef int (*sim_cond_fn)(const sim_dev *d, const void *arg);

/* Most threads that take turns on one device (ds_sim_thread_reserve). */
#define DS__SIM_MAX_TURNS 32

/* One place in the turn order of a VIRTUAL device (engine.c, "Turns"). */
typedef struct sim_thr {
    int state;          /* SIM_THR_* */
    int attached;       /* a thread took it (ds__sim_thread_attach) */
    double wake_us;     /* SIM_THR_SLEEP: runnable from then on */
    sim_cond_fn cond;   /* SIM_THR_WAIT: runnable once it holds */
    const void *arg;
    uint64_t mark;      /* SIM_THR_YIELD: sim_dev.grants when it yielded, */
    double since_us;    /* and the time: runnable once either moved */
    pthread_cond_t cv;  /* its thread waits here for its turn (CLOCK_MONOTONIC) */
} sim_thr;

enum { SIM_THR_FREE = 0, SIM_THR_READY, SIM_THR_RUN, SIM_THR_SLEEP, SIM_THR_WAIT, SIM_THR_YIELD };
typedef struct sim_stream sim_stream;
typedef struct sim_op sim_op;
typedef struct sim_green sim_green;

/* A CUcontext: the primary context, or the one cuCtxFromGreenCtx gives. */
typedef struct sim_ctx {
    uint64_t handle;
    sim_green *green; /* NULL for the primary context */
} sim_ctx;

struct sim_green {
    uint64_t handle;
    sim_ctx ctx;
    sim_smset mask;
    sim_stream *default_stream; /* CU_GREEN_CTX_DEFAULT_STREAM */
};

/* One recorded instance of an event (refcounted: the event holds its latest
 * instance, every pending record/wait op holds the one it refers to). */
typedef struct sim_einst {
    uint32_t refs;
    int done;
    double t_us;
} sim_einst;

typedef struct sim_event {
    uint64_t handle;
    unsigned flags;
    sim_einst *last; /* most recent record, NULL if never recorded */
} sim_event;

typedef struct sim_module sim_module;

typedef struct sim_func {
    uint64_t handle;
    char name[64];
    double block_us;
    uint32_t blocks_per_sm;
    uint32_t num_params;
    uint32_t param_sizes[DS_SIM_MAX_PARAMS];
    int probe;          /* the built-in ds_probe_smid */
    int rck;            /* the built-in ds_rck (resident) */
    int faults;         /* ds_sim_kernel_desc.faults */
    sim_module *module; /* owning module, NULL for ds_sim_kernel_create */
    uint64_t kern;      /* SIM_H_KERNEL handle naming it (ds_sim_kernel_create
                           functions, which model cudart / cuLibrary kernels);
                           0 for module functions */
} sim_func;

struct sim_module {
    uint64_t handle;
    sim_func *probe;
    sim_func *rck;
};

typedef struct sim_desc {
    uint64_t handle;
    sim_smset mask;
} sim_desc;

enum {
    SIM_OP_KERNEL,
    SIM_OP_RECORD,
    SIM_OP_WAIT_EVENT,
    SIM_OP_WAIT_VALUE,
    SIM_OP_WRITE_VALUE,
    SIM_OP_COPY, /* cuMemcpy{HtoD,DtoH}Async: done when it reaches the head */
};

struct sim_op {
    sim_op *next; /* stream FIFO */
    int kind;
    /* SIM_OP_KERNEL */
    sim_stream *stream;
    sim_smset mask; /* SMs its blocks may use: its stream's, or for a graph's
                       kernel node those of the node's context */
    uint64_t total, dispatched, done; /* blocks */
    uint32_t units;                   /* SM capacity units per block */
    double block_us;
    uint32_t *probe_bitmap; /* probe kernel: uint32 words, bit s = SM s ran */
    int faults;             /* faults when its first block starts */
    uint64_t seq;           /* trace sequence number */
    uint64_t act_seq;       /* activation order (FIFO among equal priority) */
    int activated;          /* reached the head of its stream */
    int started;            /* first block dispatched */
    sim_op *act_next;       /* device's active list */
    /* the resident control kernel: its parameters (block, gates, bounds,
     * seen), loop state, SM, and the device's list of residents */
    int resident;
    uint64_t rck_args[4];
    ds__rck_local rck_st;
    unsigned res_sm;
    sim_op *res_next;
    /* SIM_OP_RECORD / SIM_OP_WAIT_EVENT */
    sim_einst *inst;
    /* SIM_OP_WAIT_VALUE / SIM_OP_WRITE_VALUE */
    uint32_t *addr;
    uint32_t value;
    unsigned flags;
    /* SIM_OP_COPY */
    void *dst;
    const void *src;
    size_t n;
};

struct sim_stream {
    uint64_t handle;  /* 0 for default streams (reached through NULL) */
    sim_green *green; /* NULL: primary context (or orphaned) */
    sim_smset mask;
    int priority;
    sim_op *head, *tail;
    uint64_t enqueued, completed; /* ops */
    uint32_t waiters;             /* threads inside a synchronize on it */
    int released;                 /* freed once drained and no waiters */
    int orphaned;                 /* its green context was destroyed */
    sim_stream *prev, *next;      /* device's stream list, creation order */
    /* stream capture (cuStreamBeginCapture): the graph being recorded, NULL
     * when not capturing; invalidated by unsupported work on the stream */
    struct sim_graph *capture;
    int capture_invalid;
    int capture_mode;            /* CUstreamCaptureMode */
    pthread_t capture_thread;    /* the thread that began it */
};

/* Blocks of one kernel dispatched in one instant: they end together. */
typedef struct sim_batch {
    double end_us;
    uint64_t order; /* insertion order, breaks ties of end_us */
    sim_op *op;
    uint64_t blocks;
    uint32_t n;
    struct {
        uint16_t sm;
        uint16_t count;
    } e[];
} sim_batch;

typedef struct sim_alloc {
    void *p;
    size_t n;
    int host; /* cuMemHostAlloc: host memory, not counted as device memory */
} sim_alloc;

/* ---- graphs ----------------------------------------------------------------
 * A kernel node: what cuLaunchKernel got on a capturing stream, with its own
 * copy of the argument values, and the context it runs in. A template's nodes
 * are allocated one by one (their handles, SIM_H_NODE, stay valid while the
 * graph lives); an executable holds copies (an array, no handles). */
struct sim_graph;

typedef struct sim_gnode {
    uint64_t handle; /* SIM_H_NODE (template), 0 (executable's copy) */
    struct sim_graph *owner; /* the template graph holding it (NULL in an executable) */
    uint64_t orig;   /* cuGraphClone: the handle of the node it copies, else 0 */
    uint64_t func;   /* SIM_H_FUNC handle of the kernel */
    uint64_t kern;   /* SIM_H_KERNEL handle naming the same kernel, or 0 */
    uint64_t ctx;    /* SIM_H_CTX the kernel runs in */
    unsigned grid[3], block[3], smem;
    /* argument values: kernelParams form (argv[i] points into args, one
     * slot per declared parameter) or, captured from `extra`, the packed
     * buffer (extra[] is the node's CU_LAUNCH_PARAM_* list over it) */
    int packed;
    uint32_t nargs;
    uint8_t *args;
    size_t args_bytes;
    void *argv[DS_SIM_MAX_PARAMS];
    void *extra[5];
} sim_gnode;

typedef struct sim_graph {
    uint64_t handle; /* SIM_H_GRAPH; 0 while being captured */
    sim_gnode **nodes;
    size_t n, cap;
} sim_graph;

typedef struct sim_exec {
    uint64_t handle; /* SIM_H_EXEC */
    sim_gnode *nodes;
    size_t n;
    size_t mem;      /* device memory it holds */
    sim_einst *last; /* completion of its latest launch (launches of one
                        executable are serialized) */
} sim_exec;

struct sim_dev {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; broadcast on state changes */
    int slot;
    uint64_t serial; /* process-unique, tells a reused slot apart */
    ds_sim_config cfg;
    uint32_t users; /* callers inside (registry lock) */
    int dying;      /* set by destroy (device lock) */
    int changed;    /* something a waiter may care about happened */

    /* clock */
    double now_us;
    struct timespec t0; /* REALTIME: wall time of creation */

    /* turns (VIRTUAL): the threads that take part, and whose turn it is
     * (index into thr, -1: nobody's) */
    sim_thr thr[DS__SIM_MAX_TURNS];
    uint32_t nthr;
    int turn;
    uint64_t grants; /* turns given to a thread not back from a yield */

    /* SMs */
    uint8_t free_units[DS_MAX_SMS];
    sim_smset avail[4]; /* SMs with >= 1, 2, 4, 8 free units */
    sim_smset all;

    /* contexts and streams */
    sim_ctx primary;
    uint32_t primary_refs;
    sim_stream *default_stream; /* legacy NULL stream over all SMs */
    sim_stream *streams_head, *streams_tail;

    /* scheduler */
    sim_op *active; /* kernels with blocks left to dispatch, dispatch order */
    uint64_t act_counter;
    sim_batch **heap;
    size_t heap_len, heap_cap;
    uint64_t batch_order;

    /* handle table */
    sim_hentry *h;
    uint32_t h_len, h_cap, h_free;

    /* memory from cuMemAlloc and cuMemHostAlloc; device bytes held by
     * cuMemAlloc and by executable graphs */
    sim_alloc *allocs;
    size_t n_allocs, cap_allocs;
    size_t mem_alloc_bytes, mem_graph_bytes;

    uint64_t split_counter;

    /* resident kernels running (not owned: each is its stream's head) */
    sim_op *residents;
    int rck_stalled; /* test hook: residents skip their passes */

    /* sticky fault: set when a kernel with `faults` starts; from then on the
     * device runs nothing and its calls return `fault` */
    CUresult fault;
    uint64_t fault_stream; /* handle of the faulting kernel's stream */

    /* kernel trace ring of cfg.trace_capacity records: record seq lives at
     * index seq % capacity, in chunks of DS__SIM_TRACE_CHUNK allocated on
     * first use (a 65536-record ring is 28 MB) */
    ds_sim_kernel_record **trace;
    uint64_t trace_next;  /* next sequence number */
    uint64_t trace_first; /* records below were cleared */
};

/* ---- functions ------------------------------------------------------------ */

/* Finds the device of slot, locks it, counts the caller in and brings the
 * simulation up to the current time (REALTIME: wall clock; VIRTUAL: settles at
 * `now`). CUDA_ERROR_INVALID_DEVICE if there is none. */
CUresult ds__sim_dev_acquire(int slot, sim_dev **out);
/* Wakes waiters if anything changed, unlocks and counts the caller out. */
void ds__sim_dev_release(sim_dev *d);
/* Live devices: count, and the slot of the ordinal-th one (-1 if none). */
int ds__sim_dev_count(void);
int ds__sim_dev_nth(int ordinal);

uint64_t ds__sim_handle_new(sim_dev *d, unsigned kind, void *obj); /* 0: OOM */
void *ds__sim_handle_get(const sim_dev *d, uint64_t h, unsigned kind);
void ds__sim_handle_free(sim_dev *d, uint64_t h);

/* Streams */
sim_stream *ds__sim_stream_new(sim_dev *d, sim_green *g, const sim_smset *mask, int prio);
/* Drops the caller's claim: the stream is freed once it has drained. */
void ds__sim_stream_release(sim_dev *d, sim_stream *s);
/* Appends op (already filled) and lets it run if it can. */
void ds__sim_enqueue(sim_dev *d, sim_stream *s, sim_op *op);
void ds__sim_op_free(sim_op *op);
void ds__sim_einst_unref(sim_einst *e);
int ds__sim_stream_busy(const sim_stream *s);

/* Kernel launch: validates dimensions (CUDA_ERROR_INVALID_VALUE), captures
 * parameters, records the trace and enqueues. caller_stream is what the
 * caller passed (kept in the trace). On a capturing stream the kernel is
 * recorded as a node of the capture instead (ds__sim_capture_kernel). */
CUresult ds__sim_launch(sim_dev *d, const sim_func *f, const unsigned grid[3],
                        const unsigned block[3], unsigned smem, sim_stream *s,
                        CUstream caller_stream, void **params, void **extra);
/* The checks of a launch (dimensions, shared memory, parameters, the probe's
 * and the RCK's pointers) without launching: CUDA_SUCCESS or the error. */
CUresult ds__sim_launch_check(const sim_func *f, const unsigned grid[3], const unsigned block[3],
                              unsigned smem, void **params, void **extra);
/* Dimension check shared with ds_sim_launch_on_stream. */
int ds__sim_dims_ok(const unsigned grid[3], const unsigned block[3]);

/* Waits. Both return CUDA_SUCCESS, or CUDA_ERROR_CONTEXT_IS_DESTROYED when the
 * device is destroyed meanwhile. */
CUresult ds__sim_wait_stream(sim_dev *d, sim_stream *s);
CUresult ds__sim_wait_einst(sim_dev *d, sim_einst *e);
void ds__sim_sleep_until(sim_dev *d, double t_us);
/* Settles and dispatches at the current time (after enqueuing ops). */
void ds__sim_kick(sim_dev *d);

/* Memory (cuMemAlloc, host 0; cuMemHostAlloc, host 1): zeroed, 256-byte
 * aligned. Device memory is bounded by DS__SIM_MEM_TOTAL (less what
 * executable graphs hold): CUDA_ERROR_OUT_OF_MEMORY beyond. */
CUresult ds__sim_mem_alloc(sim_dev *d, size_t n, int host, void **out);
/* Finds [p, p+n) inside a live allocation of the locked device d. remove: frees
 * it (n ignored, p must be the start). CUDA_SUCCESS, or CUDA_ERROR_NOT_FOUND. */
CUresult ds__sim_mem_find(sim_dev *d, uintptr_t p, size_t n, int remove);

/* Graphs (the driver face, driver_sim_graph.c, checks handles and arguments).
 * The SM set a context's kernels run on (a green context's, or every SM for
 * the primary context); NULL if ctx is not a live context of d. */
const sim_smset *ds__sim_ctx_mask(const sim_dev *d, uint64_t ctx);
/* A new, empty graph (no handle yet) or NULL (out of memory). */
sim_graph *ds__sim_graph_new(void);
/* Frees a graph, its nodes and their handles, and its own handle if any. */
void ds__sim_graph_free(sim_dev *d, sim_graph *g);
/* cuGraphClone: a copy of g with new node handles (each node's `orig` the
 * handle it copies) and a graph handle. */
CUresult ds__sim_graph_clone(sim_dev *d, const sim_graph *g, sim_graph **out);
/* cuGraphDestroyNode: removes n from its graph and frees it. */
void ds__sim_node_destroy(sim_dev *d, sim_gnode *n);
/* Sets a node's kernel, dimensions and argument values (copied from params
 * or extra by f's declared parameters; the launch was checked) and context.
 * params may point into the node's own values. CUDA_ERROR_OUT_OF_MEMORY
 * leaves the node as it was. */
CUresult ds__sim_node_set(sim_gnode *n, const sim_func *f, uint64_t kern, uint64_t ctx,
                          const unsigned grid[3], const unsigned block[3], unsigned smem,
                          void **params, void **extra);
/* Instantiates g: an executable holding a copy of its nodes (each node's
 * kernel and context must be alive: CUDA_ERROR_INVALID_HANDLE /
 * CUDA_ERROR_CONTEXT_IS_DESTROYED), and its device memory (other_bytes: device
 * memory held outside the engine, the VMM's; CUDA_ERROR_OUT_OF_MEMORY when it
 * does not fit). The executable gets its handle here. */
CUresult ds__sim_exec_new(sim_dev *d, const sim_graph *g, size_t other_bytes, sim_exec **out);
/* Frees an executable (its launches already enqueued still run) and its
 * device memory. */
void ds__sim_exec_free(sim_dev *d, sim_exec *e);
/* Enqueues every node of e on s, in order, after what s holds and after e's
 * previous launch: each kernel runs on the SMs of its node's context, not
 * s's. All nodes are checked before any is enqueued. caller_stream is kept in
 * the trace. */
CUresult ds__sim_exec_launch(sim_dev *d, sim_exec *e, sim_stream *s, CUstream caller_stream);

/* Turns (VIRTUAL devices only; engine.c, "Turns"). reserve: a new place in
 * the turn order (the lowest free), *ticket its number (>= 1);
 * CUDA_ERROR_NOT_SUPPORTED on a REALTIME device, CUDA_ERROR_OUT_OF_MEMORY
 * when DS__SIM_MAX_TURNS are taken. attach: the calling thread takes the
 * place and waits for its turn; CUDA_ERROR_INVALID_VALUE for a ticket not
 * reserved, already taken, or a thread that already holds one.
 * release: gives the place up (the caller's own, or one never attached),
 * passing the turn on; CUDA_ERROR_INVALID_VALUE for a ticket not reserved or
 * held by another thread. */
CUresult ds__sim_thread_reserve(sim_dev *d, uint32_t *ticket);
CUresult ds__sim_thread_attach(sim_dev *d, uint32_t ticket);
CUresult ds__sim_thread_release(sim_dev *d, uint32_t ticket);
/* The calling thread (taking turns) gives the turn up until another thread
 * has had one or the clock has moved. CUDA_ERROR_INVALID_VALUE if it takes
 * no turns on d. */
CUresult ds__sim_thread_yield(sim_dev *d);

/* Trace */
void ds__sim_trace_get(sim_dev *d, ds_sim_kernel_record *out, size_t cap, size_t *count);
void ds__sim_trace_clear(sim_dev *d);
/* Records with sequence numbers from `from` on (oldest first, at most cap);
 * *next is the next sequence number the device will give. Returns 0, or -1
 * when records from `from` on were already overwritten (the ring wrapped). */
int ds__sim_trace_since(sim_dev *d, uint64_t from, ds_sim_kernel_record *out, size_t cap,
                        size_t *count, uint64_t *next);

#endif /* DS_SIM_ENGINE_H */
