/*
 * maxflow.h -- max-flow / min-cut over a flow network given as arrays.
 * Knows nothing of fx or torch.
 */
#ifndef FXCUT_MAXFLOW_H
#define FXCUT_MAXFLOW_H

#include "fxcut.h"

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

enum fxcut_maxflow_algorithm {
    FXCUT_MAXFLOW_DEFAULT = 0,
    FXCUT_MAXFLOW_PUSH_RELABEL = 1,
    FXCUT_MAXFLOW_DINIC = 2
};

/*
 * Solves max-flow from source to sink and reports the minimum cut that
 * networkx's minimum_cut reports: sink_side[v] = 1 exactly for the vertices
 * that can still reach the sink in the residual network of a maximum flow
 * (the smallest sink side), 0 elsewhere.  *cut_value is the cut's exact
 * capacity.  Returns FXCUT_E_UNBOUNDED (naming a vertex on the path) when
 * source and sink are joined by a path of infinite edges.
 */
int fxcut_min_cut(const fxcut_network *net, int32_t source, int32_t sink,
                  int algorithm, fxcut_u128 *cut_value, uint8_t *sink_side,
                  fxcut_error *err);

#endif /* FXCUT_MAXFLOW_H */
