/*
 * The resident control kernel's (RCK) control block and its loop body, shared
 * by the CUDA kernel (src/rck/device_kernels.cu, compiled by nvcc) and the
 * simulated device (src/sim/engine.c runs the same pass at every simulated
 * instant). C and CUDA C++ alike: no _Atomic, volatile accesses and explicit
 * fences only.
 *
 * Memory:
 *  - the block: pinned host memory mapped into the device (cuMemHostAlloc
 *    DEVICEMAP); the host writes stop / gate_gen / nslots / gate_bits, the
 *    RCK writes state / heartbeat / ring;
 *  - gates[slot]: device memory, what a vCtx's stream waits on
 *    (cuStreamWaitValue32 == 0): the RCK mirrors gate_bits into it;
 *  - bounds[slot]: device memory the vCtx's stream writes the sequence number
 *    of each boundary it passes (cuStreamWriteValue32 after each gate);
 *  - seen[slot]: device memory, the RCK's last seen bounds[slot].
 *
 * Protocol: the host changes gate_bits, then bumps gate_gen (release); the RCK
 * reads gate_gen, fences, reads the bits and writes every changed gate word,
 * then fences again so the stream front end sees them. A boundary value that
 * changed since the last pass is pushed to the ring with the %globaltimer
 * time of that pass; records are written before ring_head (fence between).
 * On stop the RCK opens every gate before it exits: teardown never leaves a
 * stream waiting.
 */
#ifndef DS_RCK_RCK_BLOCK_H
#define DS_RCK_RCK_BLOCK_H

#include <stdint.h>

/* Accesses to the block's fields. On the device: volatile loads and stores
 * with system-scope fences between the steps that must be ordered. In C (the
 * simulated device, whose passes run on host threads): acquire loads and
 * release stores, which order the same steps and which ThreadSanitizer
 * understands (it does not model fences). */
#ifdef __CUDACC__
#define DS__RCK_FN static __device__ __forceinline__
#define DS__RCK_FENCE() __threadfence_system()
#define DS__RCK_LD(x) (x)
#define DS__RCK_ST(x, v) ((x) = (v))
#else
#define DS__RCK_FN static inline
#define DS__RCK_FENCE() ((void)0)
#define DS__RCK_LD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define DS__RCK_ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#endif

/* Slots the block covers (ds_runtime_config.max_vctx is at most this). */
#define DS__RCK_MAX_SLOTS 4096u
/* Boundary records kept in the ring (the scheduler drains it every pass). */
#define DS__RCK_RING 1024u
/* Pause between two passes of the device loop (ns): bounds the RCK's polling
 * of host memory over the link to a few million reads a second. */
#define DS__RCK_PAUSE_NS 200u

#define DS__RCK_STATE_NONE 0u    /* not started yet */
#define DS__RCK_STATE_RUNNING 1u
#define DS__RCK_STATE_STOPPED 2u /* exited after opening every gate */

typedef struct ds__rck_record {
    uint32_t slot;
    uint32_t seq;  /* bounds[slot] as seen */
    uint64_t t_ns; /* %globaltimer of the pass that saw it */
} ds__rck_record;

typedef struct ds__rck_block {
    /* host -> RCK */
    uint32_t stop;     /* 1: open every gate and exit */
    uint32_t gate_gen; /* bumped after gate_bits changed */
    uint32_t nslots;   /* slots to scan (highest live slot + 1) */
    uint32_t pad0;
    uint64_t beat_ns;  /* heartbeat period */
    uint32_t gate_bits[DS__RCK_MAX_SLOTS / 32]; /* bit set: gate closed */
    /* RCK -> host */
    uint32_t state;     /* DS__RCK_STATE_* */
    uint32_t ring_head; /* records written so far */
    uint64_t heartbeat_ns; /* %globaltimer at the last beat */
    uint64_t beats;
    ds__rck_record ring[DS__RCK_RING];
} ds__rck_block;

/* The RCK's own state between passes (registers on the device). */
typedef struct ds__rck_local {
    uint32_t started;
    uint32_t gen;
    uint32_t head;
    uint64_t last_beat;
    uint64_t beats;
} ds__rck_local;

/* One pass of the RCK loop at time now_ns. Returns 1 when the RCK stopped
 * (every gate open, state STOPPED) and must exit. */
DS__RCK_FN int ds__rck_device_pass(volatile ds__rck_block *cb, volatile uint32_t *gates,
                                   const volatile uint32_t *bounds, volatile uint32_t *seen,
                                   ds__rck_local *st, uint64_t now_ns)
{
    uint32_t n = DS__RCK_LD(cb->nslots);
    if (n > DS__RCK_MAX_SLOTS)
        n = DS__RCK_MAX_SLOTS;
    if (!st->started) {
        st->started = 1;
        st->gen = DS__RCK_LD(cb->gate_gen) - 1u; /* mirror the bits on the first pass */
        st->head = DS__RCK_LD(cb->ring_head);
        st->last_beat = now_ns;
        DS__RCK_ST(cb->heartbeat_ns, now_ns);
        DS__RCK_FENCE();
        DS__RCK_ST(cb->state, DS__RCK_STATE_RUNNING);
    }
    if (DS__RCK_LD(cb->stop)) {
        for (uint32_t s = 0; s < n; s++)
            gates[s] = 0;
        DS__RCK_FENCE();
        DS__RCK_ST(cb->state, DS__RCK_STATE_STOPPED);
        DS__RCK_FENCE();
        return 1;
    }
    uint32_t gen = DS__RCK_LD(cb->gate_gen);
    if (gen != st->gen) {
        st->gen = gen;
        DS__RCK_FENCE();
        for (uint32_t w = 0; w * 32u < n; w++) {
            uint32_t bits = DS__RCK_LD(cb->gate_bits[w]);
            for (uint32_t b = 0; b < 32u && w * 32u + b < n; b++) {
                uint32_t want = (bits >> b) & 1u;
                if (gates[w * 32u + b] != want)
                    gates[w * 32u + b] = want;
            }
        }
        DS__RCK_FENCE();
    }
    uint32_t head = st->head;
    for (uint32_t s = 0; s < n; s++) {
        uint32_t b = bounds[s];
        if (b != seen[s]) {
            seen[s] = b;
            volatile ds__rck_record *r = &cb->ring[head % DS__RCK_RING];
            DS__RCK_ST(r->slot, s);
            DS__RCK_ST(r->seq, b);
            DS__RCK_ST(r->t_ns, now_ns);
            head++;
        }
    }
    if (head != st->head) {
        DS__RCK_FENCE();
        DS__RCK_ST(cb->ring_head, head);
        st->head = head;
    }
    if (now_ns - st->last_beat >= DS__RCK_LD(cb->beat_ns)) {
        st->last_beat = now_ns;
        st->beats++;
        DS__RCK_ST(cb->heartbeat_ns, now_ns);
        DS__RCK_ST(cb->beats, st->beats);
    }
    return 0;
}

#endif /* DS_RCK_RCK_BLOCK_H */
