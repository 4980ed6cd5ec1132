/*
 * Cutting a step into segments (segment.h): topological order, allowed
 * cuts, greedy grouping by measured time.
 */
#include "core/segment.h"
#include "seam/alloc.h"

#include <string.h>

int ds__dag_order(uint32_t n, const uint32_t *from, const uint32_t *to, size_t m, uint32_t *order, uint8_t *cut)
{
    if (!n)
        return 0;
    for (size_t e = 0; e < m; e++)
        if (from[e] >= n || to[e] >= n || from[e] == to[e])
            return -1;
    /* adjacency in CSR form: successors (for Kahn) and predecessors (for
     * the sink count) */
    uint32_t *indeg = ds__calloc(n, sizeof *indeg), *succ_off = ds__calloc((size_t)n + 1, sizeof *succ_off),
             *pred_off = ds__calloc((size_t)n + 1, sizeof *pred_off), *succ = ds__calloc(m ? m : 1, sizeof *succ),
             *pred = ds__calloc(m ? m : 1, sizeof *pred), *out_in_prefix = ds__calloc(n, sizeof *out_in_prefix),
             *heap = ds__calloc(n, sizeof *heap);
    int rc = -1;
    if (!indeg || !succ_off || !pred_off || !succ || !pred || !out_in_prefix || !heap)
        goto done;
    for (size_t e = 0; e < m; e++) {
        succ_off[from[e] + 1]++;
        pred_off[to[e] + 1]++;
        indeg[to[e]]++;
    }
    for (uint32_t i = 0; i < n; i++) {
        succ_off[i + 1] += succ_off[i];
        pred_off[i + 1] += pred_off[i];
    }
    {
        uint32_t *sfill = out_in_prefix, *pfill = heap; /* scratch, cleared below */
        for (size_t e = 0; e < m; e++) {
            succ[succ_off[from[e]] + sfill[from[e]]++] = to[e];
            pred[pred_off[to[e]] + pfill[to[e]]++] = from[e];
        }
        memset(out_in_prefix, 0, n * sizeof *out_in_prefix);
        memset(heap, 0, n * sizeof *heap);
    }
    /* Kahn with a binary min-heap of ready nodes: the lowest index first */
    uint32_t hn = 0;
#define HEAP_PUSH(x)                                                                                                   \
    do {                                                                                                               \
        uint32_t i_ = hn++;                                                                                            \
        heap[i_] = (x);                                                                                                \
        while (i_ && heap[(i_ - 1) / 2] > heap[i_]) {                                                                  \
            uint32_t p_ = (i_ - 1) / 2, t_ = heap[p_];                                                                 \
            heap[p_] = heap[i_];                                                                                       \
            heap[i_] = t_;                                                                                             \
            i_ = p_;                                                                                                   \
        }                                                                                                              \
    } while (0)
    for (uint32_t i = 0; i < n; i++)
        if (!indeg[i])
            HEAP_PUSH(i);
    /* per position: sinks of the prefix, its open nodes (with a successor
     * outside), the edges crossing into the rest, and roots not placed */
    uint32_t placed = 0, sinks = 0, open = 0, open_sinks = 0, roots_left = hn;
    size_t crossing = 0;
    while (hn) {
        uint32_t v = heap[0];
        heap[0] = heap[--hn];
        for (uint32_t i = 0;;) {
            uint32_t l = 2 * i + 1, r = l + 1, s = i;
            if (l < hn && heap[l] < heap[s])
                s = l;
            if (r < hn && heap[r] < heap[s])
                s = r;
            if (s == i)
                break;
            uint32_t t = heap[s];
            heap[s] = heap[i];
            heap[i] = t;
            i = s;
        }
        uint32_t in_v = pred_off[v + 1] - pred_off[v], out_v = succ_off[v + 1] - succ_off[v];
        /* cut before v: every root placed, and either the prefix funnels
         * into its one sink, the only node with edges out (a chain, or
         * before a fork's branches), or every edge out of it goes to v and
         * every sink of the prefix is one of v's predecessors (a join) */
        cut[placed] = placed == 0 || (roots_left == 0 && ((sinks == 1 && open == 1 && open_sinks == 1) ||
                                                          (crossing == in_v && sinks == open_sinks)));
        order[placed++] = v;
        if (!in_v)
            roots_left--;
        crossing += out_v;
        crossing -= in_v;
        sinks++; /* v has no successor in the prefix yet */
        open += out_v != 0;
        open_sinks += out_v != 0;
        for (uint32_t k = pred_off[v]; k < pred_off[v + 1]; k++) {
            uint32_t u = pred[k];
            if (out_in_prefix[u]++ == 0) {
                sinks--;
                open_sinks--; /* u had a successor (v), so it was open */
            }
            if (out_in_prefix[u] == succ_off[u + 1] - succ_off[u])
                open--; /* every successor of u is placed */
        }
        for (uint32_t k = succ_off[v]; k < succ_off[v + 1]; k++)
            if (--indeg[succ[k]] == 0)
                HEAP_PUSH(succ[k]);
    }
#undef HEAP_PUSH
    rc = placed == n ? 0 : -1; /* fewer placed: a cycle */
done:
    ds__free(indeg);
    ds__free(succ_off);
    ds__free(pred_off);
    ds__free(succ);
    ds__free(pred);
    ds__free(out_in_prefix);
    ds__free(heap);
    return rc;
}

uint32_t ds__group_by_time(const double *t, uint32_t natoms, double bound_us, uint32_t *first)
{
    uint32_t nseg = 0;
    double sum = 0;
    for (uint32_t a = 0; a < natoms; a++) {
        double ta = t[a] > 0 ? t[a] : 0;
        if (nseg == 0 || sum + ta > bound_us) {
            first[nseg++] = a;
            sum = 0;
        }
        sum += ta;
    }
    return nseg;
}
