/*
 * maxflow_dinic.tmpl.h -- Dinic's algorithm: breadth-first levels from the
 * source set R, then a blocking flow found by depth-first search with
 * current arcs, repeated until the sink is out of reach.
 *
 * A template: maxflow_dinic.c includes it once per flow type after
 * defining FLOW_T and FN(name).  See maxflow_internal.h for the residual
 * network and the source set R.
 *
 * State, for every vertex v:
 *   level[v]  residual distance from R in this phase (R is level 0), or -1
 *             when v is unreached or known to be a dead end in this phase.
 *             An arc u -> w is admissible when res > 0 and
 *             level[w] == level[u] + 1.
 *   cur[v]    no arc of v before cur[v] is admissible (in this phase).
 *   queue     the breadth-first order; its first entries are R's vertices,
 *             which is how a phase finds where to start its searches.
 *   path      the arcs of the current search path from an R vertex; the
 *             search is a loop over this explicit stack, never recursion,
 *             so a path of 10^7 vertices needs no call stack.
 */

#ifndef FLOW_T
#error "define FLOW_T and FN(name) before including this template"
#endif

/* Levels from R along residual arcs; stops expanding at the sink's level.
 * Returns 1 when the sink is reached.  Puts R's vertices first in queue
 * and their count in *n_sources. */
static int FN(dinic_levels)(const fxcut_arcs *g, const FLOW_T *res,
                            const uint8_t *in_r, int32_t *level,
                            int32_t *queue, int32_t *n_sources)
{
    const int32_t n = g->n, sink = g->sink;
    const int32_t *first = g->first, *head = g->head;
    int32_t q_end = 0;
    for (int32_t v = 0; v < n; v++) {
        level[v] = in_r[v] ? 0 : -1;
        if (in_r[v])
            queue[q_end++] = v;
    }
    *n_sources = q_end;
    for (int32_t q = 0; q < q_end; q++) {
        int32_t v = queue[q];
        if (level[sink] >= 0 && level[v] >= level[sink])
            break;
        for (int32_t a = first[v]; a < first[v + 1]; a++) {
            int32_t w = head[a];
            if (level[w] < 0 && res[a] > 0) {
                level[w] = level[v] + 1;
                queue[q_end++] = w;
            }
        }
    }
    return level[sink] >= 0;
}

/* Augments along admissible paths from the R vertex r until none is left
 * in this phase; returns the flow sent. */
static FLOW_T FN(dinic_block)(const fxcut_arcs *g, FLOW_T *res, int32_t r,
                              int32_t *level, int32_t *cur, int32_t *path)
{
    const int32_t sink = g->sink;
    const int32_t *first = g->first, *head = g->head, *rev = g->rev;
    FLOW_T sent = 0;
    int32_t len = 0, v = r;
    for (;;) {
        if (v == sink) {
            FLOW_T delta = res[path[0]];
            for (int32_t i = 1; i < len; i++)
                if (res[path[i]] < delta)
                    delta = res[path[i]];
            int32_t cut = len;
            for (int32_t i = len - 1; i >= 0; i--) {
                res[path[i]] -= delta;
                res[rev[path[i]]] += delta;
                if (res[path[i]] == 0)
                    cut = i;
            }
            sent += delta;
            /* Resume at the tail of the first saturated arc. */
            len = cut;
            v = len == 0 ? r : head[path[len - 1]];
            continue;
        }
        const int32_t end = first[v + 1], next_level = level[v] + 1;
        int32_t a = cur[v];
        while (a < end && !(res[a] > 0 && level[head[a]] == next_level))
            a++;
        cur[v] = a;
        if (a < end) {
            path[len++] = a;
            v = head[a];
            continue;
        }
        /* Dead end: retreat, and let the arc that led here be skipped. */
        level[v] = -1;
        if (len == 0)
            return sent;
        len--;
        v = len == 0 ? r : head[path[len - 1]];
        cur[v]++;
    }
}

int FN(fxcut_dinic)(const fxcut_arcs *g, FLOW_T *res, uint8_t *side,
                    fxcut_u128 *flow, fxcut_error *err)
{
    const int32_t n = g->n, sink = g->sink;
    const int32_t *first = g->first, *head = g->head, *rev = g->rev;
    /* calloc, not malloc: gcc cannot see that level[sink] is written first. */
    int32_t *level = calloc((size_t)n, sizeof *level);
    int32_t *cur = malloc((size_t)n * sizeof *cur);
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    int32_t *path = malloc((size_t)n * sizeof *path);
    if (!level || !cur || !queue || !path) {
        free(level);
        free(cur);
        free(queue);
        free(path);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "min_cut: out of memory for %d vertices", (int)n);
    }

    FLOW_T total = 0;
    int32_t n_sources;
    while (FN(dinic_levels)(g, res, side, level, queue, &n_sources)) {
        for (int32_t v = 0; v < n; v++)
            cur[v] = first[v];
        for (int32_t i = 0; i < n_sources; i++)
            total += FN(dinic_block)(g, res, queue[i], level, cur, path);
    }

    /* The vertices that reach the sink: backwards search from it. */
    memset(side, 0, (size_t)n);
    side[sink] = 1;
    queue[0] = sink;
    int32_t q_end = 1;
    for (int32_t q = 0; q < q_end; q++) {
        int32_t w = queue[q];
        for (int32_t a = first[w]; a < first[w + 1]; a++) {
            int32_t u = head[a];
            if (!side[u] && res[rev[a]] > 0) {
                side[u] = 1;
                queue[q_end++] = u;
            }
        }
    }
    *flow = FXCUT_FLOW_TO_U128(total);

    free(level);
    free(cur);
    free(queue);
    free(path);
    return FXCUT_OK;
}
