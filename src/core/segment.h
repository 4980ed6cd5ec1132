/*
 * Where a captured step may be cut (segment.c): a pure function of its DAG
 * and of measured times, no driver call, so that the cutting rules are
 * tested on made-up graphs (tests/test_segment.c).
 *
 *  - ds__dag_order: a topological order (Kahn's algorithm, the lowest node
 *    index first among the ready ones: a captured chain keeps its capture
 *    order) and, for each position, whether the step may be cut before it:
 *    where the nodes before it have exactly one sink, so every one of them
 *    reaches that node and the segments run in order without serializing
 *    two branches of a fork.
 *  - ds__group_by_time: consecutive atoms (the runs between allowed cuts)
 *    grouped greedily into segments whose summed time is at most the bound
 *    (an atom longer than the bound is a segment of its own); greedy gives
 *    the fewest segments for a bound on consecutive groups.
 */
#ifndef DS_CORE_SEGMENT_H
#define DS_CORE_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

/* order[n]: the nodes in topological order; cut[n]: cut[i] nonzero where
 * the step may be cut before position i (cut[0] is always 1). Edges are
 * (from[e], to[e]), node indices < n. Returns 0, or -1 when the edges name
 * a node >= n or form a cycle, or memory ran out. */
int ds__dag_order(uint32_t n, const uint32_t *from, const uint32_t *to, size_t m, uint32_t *order, uint8_t *cut);

/* Groups `natoms` consecutive atoms of times t[] (us) under `bound_us`:
 * writes the index of each segment's first atom to first[] (at most natoms
 * entries) and returns the number of segments (0 when natoms is 0). */
uint32_t ds__group_by_time(const double *t, uint32_t natoms, double bound_us, uint32_t *first);

#endif /* DS_CORE_SEGMENT_H */
