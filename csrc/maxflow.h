/*
 * maxflow.h -- max-flow / min-cut over a flow network given as arrays.
 * Knows nothing of fx or torch.
 */
#ifndef FXCUT_MAXFLOW_H
#define FXCUT_MAXFLOW_H

#include "fxcut_internal.h"

/* A capacity of FXCUT_CAP_INF means "infinite". */
#define FXCUT_CAP_INF ((int64_t)-1)

/*
 * The network: n_vertices vertices, n_edges directed edges; edge e goes
 * tail[e] -> head[e] with capacity cap[e] (>= 0, or FXCUT_CAP_INF).
 * Parallel edges are allowed; self-loops are ignored.
 */
typedef struct {
    int32_t n_vertices;
    int64_t n_edges;
    const int32_t *tail;
    const int32_t *head;
    const int64_t *cap;
} fxcut_network;

/* fxcut_u128 (fxcut.h) carries the exact cut value.
 * FXCUT_MAXFLOW_DEFAULT is push-relabel.  Both give the same cut (the
 * smallest sink side is unique); they differ only in speed. */
enum fxcut_maxflow_algorithm {
    FXCUT_MAXFLOW_DEFAULT = 0,
    FXCUT_MAXFLOW_PUSH_RELABEL = 1, /* highest label, global relabel, gap */
    FXCUT_MAXFLOW_DINIC = 2
};

/*
 * Solves max-flow from source to sink and reports the minimum cut that
 * networkx's minimum_cut reports: sink_side[v] = 1 exactly for the vertices
 * that can still reach the sink in the residual network of a maximum flow
 * (the smallest sink side), 0 elsewhere; so a vertex no edge touches is 0
 * unless it is the sink.  sink_side has n_vertices entries.  *cut_value is
 * the cut's exact capacity (it can exceed 2^64 in principle: up to 2^30
 * edges of up to 2^63 each).
 *
 * Errors: FXCUT_E_UNBOUNDED when source and sink are joined by a path of
 * infinite edges (the message names its first vertices, err->node the one
 * after the source); FXCUT_E_INDEX for a source, sink, tail or head outside
 * [0, n_vertices); FXCUT_E_INVALID for n_vertices < 1, n_edges < 0, source
 * == sink, a capacity below 0 other than FXCUT_CAP_INF, an unknown
 * algorithm; FXCUT_E_NOMEM; FXCUT_E_OVERFLOW for more than 2^30 - 1 edges
 * of nonzero capacity, or when the capacity leaving the source's infinite
 * closure passes 2^63 - 2 and the compiler has no __int128.
 *
 * Memory while it runs, for n vertices and m edges of nonzero capacity:
 * 32.25m bytes of arcs (48.25m when 128-bit flows are needed, 64m for a
 * moment while switching), 4n of arc offsets, 16n for a moment finding the
 * source's infinite closure, and 32n bytes of vertex state for
 * push-relabel (8 of excess, 4 each of label, current arc, two links and
 * two bucket heads; 16 of excess with 128-bit flows), 16n for Dinic.  The
 * input arrays are read only while the arcs are built.  Thread-safe; no
 * state is kept between calls.
 */
int fxcut_min_cut(const fxcut_network *net, int32_t source, int32_t sink,
                  int algorithm, fxcut_u128 *cut_value, uint8_t *sink_side,
                  fxcut_error *err);

/* Optional callbacks of fxcut_min_cut_hooked; any may be NULL. */
typedef struct {
    /* Called exactly once, as soon as net's arrays are no longer read:
     * after the residual network is built and before the solver allocates
     * its state, or on an early error.  A caller that owns the edge arrays
     * frees them there, so they never sit under the solver's memory. */
    void (*release)(void *arg);
    /* On FXCUT_E_UNBOUNDED: the infinite path found (a shortest one, edges
     * taken in input order), path[0] the source ... path[len - 1] the sink;
     * the array is the solver's, valid during the call only. */
    void (*infinite_path)(void *arg, const int32_t *path, int32_t len);
    void *arg;
} fxcut_min_cut_hooks;

/* fxcut_min_cut with hooks (NULL: none). */
int fxcut_min_cut_hooked(const fxcut_network *net, int32_t source,
                         int32_t sink, int algorithm, fxcut_u128 *cut_value,
                         uint8_t *sink_side, const fxcut_min_cut_hooks *hooks,
                         fxcut_error *err);

#endif /* FXCUT_MAXFLOW_H */
