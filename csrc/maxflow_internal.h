/*
 * maxflow_internal.h -- the residual network that maxflow.c builds and the
 * max-flow algorithms (maxflow_push_relabel.c, maxflow_dinic.c) run on.
 * Internal to the maxflow*.c files.
 *
 * Every algorithm exists twice, for two flow types: int64_t (the fast path,
 * used when every quantity the algorithm can form provably fits) and
 * __int128 (used otherwise; only where the compiler has it).  The bodies
 * are written once, in maxflow_*.tmpl.h, and instantiated by defining
 * FLOW_T and FN(name) before including them.
 */
#ifndef FXCUT_MAXFLOW_INTERNAL_H
#define FXCUT_MAXFLOW_INTERNAL_H

#include "maxflow.h"

#if defined(__SIZEOF_INT128__)
#define FXCUT_HAVE_INT128 1
__extension__ typedef __int128 fxcut_i128;
#endif

/*
 * The residual network's structure, as CSR over arcs.
 *
 *   n             vertices 0 .. n-1
 *   sink          the sink t
 *   first[v]      the arcs leaving v are first[v] .. first[v+1]-1 (n+1
 *                 entries, first[0] == 0, first[n] == the arc count)
 *   head[a]       the vertex arc a enters
 *   rev[a]        the arc paired with a: it runs head[a] -> (tail of a), so
 *                 head[rev[a]] is a's tail, and rev[rev[a]] == a
 *
 * Every input edge u -> v (u != v, capacity > 0) is one pair: a forward
 * arc at u and a reverse arc at v.  The algorithms keep res[a], the
 * residual capacity, with the pair invariant
 *     res[a] + res[rev[a]] == capacity of the edge,    res[a] >= 0,
 * where the edge's capacity is finite (an infinite capacity is replaced by
 * a finite value larger than any cut that can be minimum; see maxflow.c).
 * The flow on the edge is res[reverse arc].
 *
 * The source set R.  Before an algorithm runs, maxflow.c computes R: the
 * source and every vertex it reaches along infinite edges.  Every finite
 * cut has all of R on its source side, so the algorithms treat R as one
 * contracted source: they saturate every arc leaving R and never push
 * into R.  This keeps the total excess at most the capacity leaving R
 * (instead of "infinity" times the number of infinite source edges), and
 * it makes the banned nodes of the partitioner's network (source -> X_in
 * infinite) cost nothing.
 */
typedef struct {
    const int32_t *first;
    const int32_t *head;
    const int32_t *rev;
    int32_t n;
    int32_t sink;
} fxcut_arcs;

/* "No vertex / no arc" in the int32 links. */
#define FXCUT_NONE ((int32_t)-1)

/*
 * The algorithms.  On entry: res[a] as above; side[v] == 1 exactly for the
 * vertices of R (the sink is not in R).  On success: res is the residual
 * network of a maximum preflow; side[v] == 1 exactly for the vertices that
 * can reach the sink along arcs with res > 0 (the smallest sink side of a
 * minimum cut); *flow is the flow value (the minimum cut's capacity).
 * Returns FXCUT_OK or FXCUT_E_NOMEM (having freed what it allocated).
 */
int fxcut_push_relabel_i64(const fxcut_arcs *g, int64_t *res, uint8_t *side,
                           fxcut_u128 *flow, fxcut_error *err);
int fxcut_dinic_i64(const fxcut_arcs *g, int64_t *res, uint8_t *side,
                    fxcut_u128 *flow, fxcut_error *err);
#if FXCUT_HAVE_INT128
int fxcut_push_relabel_i128(const fxcut_arcs *g, fxcut_i128 *res,
                            uint8_t *side, fxcut_u128 *flow,
                            fxcut_error *err);
int fxcut_dinic_i128(const fxcut_arcs *g, fxcut_i128 *res, uint8_t *side,
                     fxcut_u128 *flow, fxcut_error *err);
#endif

/* A non-negative FLOW_T as fxcut_u128; ">> 32 >> 32" is 0 for an int64_t
 * and the high word for an __int128. */
#define FXCUT_FLOW_TO_U128(x)                                                 \
    ((fxcut_u128){(uint64_t)((x) >> 32 >> 32), (uint64_t)(x)})

#endif /* FXCUT_MAXFLOW_INTERNAL_H */
