/*
 * maxflow_push_relabel.tmpl.h -- highest-label push-relabel, first phase
 * only (a maximum preflow is enough for a minimum cut), with exact global
 * relabelling and the gap heuristic.
 *
 * A template: maxflow_push_relabel.c includes it once per flow type after
 * defining FLOW_T (the integer type of capacities and excesses) and
 * FN(name) (which gives each function a per-type name).  See
 * maxflow_internal.h for the residual network and the source set R.
 *
 * State, for every vertex v (n = number of vertices):
 *   excess[v]  flow into v minus flow out of v (>= 0 outside R; R's
 *              vertices are never pushed into and keep excess 0).
 *   d[v]       the label: a lower bound on v's residual distance to the
 *              sink, valid in the sense d[u] <= d[w] + 1 for every arc
 *              u -> w with res > 0 and d[u] < n.  d[v] == n means v cannot
 *              reach the sink (R, vertices cut off by a gap, vertices a
 *              global relabelling did not reach); such vertices are out of
 *              the game for good: nothing is ever pushed into them, so no
 *              arc towards the sink can appear at them.
 *   cur[v]     the current arc: no arc of v before cur[v] is admissible
 *              (res > 0 and d[head] == d[v] - 1).
 *   next/prev  bucket links.  Every live vertex (d < n) other than the one
 *              being discharged is in exactly one bucket list of its
 *              label: active[d] (singly linked through next) when it has
 *              excess, inactive[d] (doubly linked) when it has none.  The
 *              sink sits in inactive[0] and is never active.
 *   a_max      no active list above a_max is non-empty.
 *   d_max      no list at all above d_max is non-empty.
 *
 * Highest-label selection means that when a vertex at label k is
 * discharged, no vertex above k is active; a relabel that empties label k
 * therefore cuts everything above k off from the sink (the gap), and all of
 * it goes to label n at once.
 *
 * Built with -DFXCUT_MAXFLOW_STATS, each call prints its operation counts
 * (discharges, pushes, relabels, global relabellings, gaps) to stderr, for
 * tuning; the extension is never built that way.
 */

#ifndef FLOW_T
#error "define FLOW_T and FN(name) before including this template"
#endif

typedef struct {
    const fxcut_arcs *g;
    FLOW_T *res;
    FLOW_T *excess;
    int32_t *d;
    int32_t *cur;
    int32_t *next;
    int32_t *prev;
    int32_t *active;    /* n entries, indexed by label */
    int32_t *inactive;  /* n entries, indexed by label */
    int32_t a_max;
    int32_t d_max;
    int64_t work;       /* relabel work since the last global relabel */
#ifdef FXCUT_MAXFLOW_STATS
    int64_t n_push, n_relabel, n_global, n_gap, n_gap_vertices, n_discharge;
#endif
} FN(pr_state);

static inline void FN(add_active)(FN(pr_state) *st, int32_t v)
{
    int32_t k = st->d[v];
    st->next[v] = st->active[k];
    st->active[k] = v;
    if (k > st->a_max)
        st->a_max = k;
    if (k > st->d_max)
        st->d_max = k;
}

static inline void FN(add_inactive)(FN(pr_state) *st, int32_t v)
{
    int32_t k = st->d[v];
    int32_t first = st->inactive[k];
    st->next[v] = first;
    st->prev[v] = FXCUT_NONE;
    if (first != FXCUT_NONE)
        st->prev[first] = v;
    st->inactive[k] = v;
    if (k > st->d_max)
        st->d_max = k;
}

static inline void FN(remove_inactive)(FN(pr_state) *st, int32_t v)
{
    int32_t p = st->prev[v], q = st->next[v];
    if (p != FXCUT_NONE)
        st->next[p] = q;
    else
        st->inactive[st->d[v]] = q;
    if (q != FXCUT_NONE)
        st->prev[q] = p;
}

/*
 * Sets every label to the exact residual distance to the sink (n where
 * there is none) by a breadth-first search backwards from the sink.  With
 * rebuild, also refills the buckets and resets the current arcs; without,
 * only the labels are wanted (the final reachability).
 *
 * The search queue lives in cur[], which is reset afterwards anyway: a
 * queue keeps the scan sequential, where walking the bucket lists level by
 * level would chase one pointer per vertex.
 */
static void FN(global_relabel)(FN(pr_state) *st, int rebuild)
{
    const fxcut_arcs *g = st->g;
    const int32_t n = g->n;
    const int32_t *first = g->first, *head = g->head, *rev = g->rev;
    const FLOW_T *res = st->res;
    int32_t *d = st->d, *queue = st->cur;

    for (int32_t v = 0; v < n; v++)
        d[v] = n;
    d[g->sink] = 0;
    queue[0] = g->sink;
    int32_t q_end = 1;
    for (int32_t q = 0; q < q_end; q++) {
        int32_t w = queue[q];
        int32_t label = d[w] + 1;
        for (int32_t a = first[w]; a < first[w + 1]; a++) {
            int32_t u = head[a];
            /* u -> w is rev[a]. */
            if (d[u] == n && res[rev[a]] > 0) {
                d[u] = label;
                queue[q_end++] = u;
            }
        }
    }
    if (!rebuild)
        return;

    for (int32_t k = 0; k <= st->d_max; k++)
        st->active[k] = st->inactive[k] = FXCUT_NONE;
    st->a_max = st->d_max = 0;
    for (int32_t q = 0; q < q_end; q++) {
        int32_t v = queue[q];
        if (st->excess[v] > 0 && v != g->sink)
            FN(add_active)(st, v);
        else
            FN(add_inactive)(st, v);
    }
    memcpy(st->cur, first, (size_t)n * sizeof *st->cur);
    st->work = 0;
#ifdef FXCUT_MAXFLOW_STATS
    st->n_global++;
#endif
}

/* Label k has just become empty: every vertex above it goes to n. */
static void FN(gap)(FN(pr_state) *st, int32_t k)
{
    const int32_t n = st->g->n;
    for (int32_t j = k + 1; j <= st->d_max; j++) {
        for (int32_t v = st->active[j]; v != FXCUT_NONE; v = st->next[v])
            st->d[v] = n;
        for (int32_t v = st->inactive[j]; v != FXCUT_NONE; v = st->next[v])
            st->d[v] = n;
        st->active[j] = st->inactive[j] = FXCUT_NONE;
#ifdef FXCUT_MAXFLOW_STATS
        st->n_gap_vertices++;
#endif
    }
#ifdef FXCUT_MAXFLOW_STATS
    st->n_gap++;
#endif
    if (st->d_max > k - 1)
        st->d_max = k - 1;
    if (st->a_max > k - 1)
        st->a_max = k - 1;
}

/* v has excess and no admissible arc: lift it just above its lowest
 * residual neighbour (n if it has none below n). */
static void FN(relabel)(FN(pr_state) *st, int32_t v)
{
    const fxcut_arcs *g = st->g;
    const int32_t n = g->n;
    const int32_t begin = g->first[v], end = g->first[v + 1];
    int32_t label = n, arc = FXCUT_NONE;
    for (int32_t a = begin; a < end; a++) {
        if (st->res[a] > 0 && st->d[g->head[a]] + 1 < label) {
            label = st->d[g->head[a]] + 1;
            arc = a;
        }
    }
    st->work += 12 + (end - begin);
#ifdef FXCUT_MAXFLOW_STATS
    st->n_relabel++;
#endif
    st->d[v] = label;
    if (label < n) {
        st->cur[v] = arc;
        if (label > st->d_max)
            st->d_max = label;
    }
}

/*
 * Pushes v's excess along admissible arcs, relabelling v when it has none,
 * until v has no excess (it joins inactive[d[v]]) or reaches label n.
 * v is in no bucket while it is discharged.
 */
static void FN(discharge)(FN(pr_state) *st, int32_t v)
{
    const fxcut_arcs *g = st->g;
    const int32_t sink = g->sink, end = g->first[v + 1];
    const int32_t *head = g->head, *rev = g->rev;
    FLOW_T *res = st->res, *excess = st->excess;
    int32_t *d = st->d;

    for (;;) {
        const int32_t k = d[v];
        int32_t a;
        for (a = st->cur[v]; a < end; a++) {
            if (res[a] == 0)
                continue;
            int32_t w = head[a];
            if (d[w] != k - 1)
                continue;
            FLOW_T delta = excess[v] < res[a] ? excess[v] : res[a];
            if (w != sink && excess[w] == 0) {
                FN(remove_inactive)(st, w);
                FN(add_active)(st, w);
            }
#ifdef FXCUT_MAXFLOW_STATS
            st->n_push++;
#endif
            res[a] -= delta;
            res[rev[a]] += delta;
            excess[w] += delta;
            excess[v] -= delta;
            if (excess[v] == 0)
                break;
        }
        if (a < end) {
            st->cur[v] = a;
            FN(add_inactive)(st, v);
            return;
        }
        if (st->active[k] == FXCUT_NONE && st->inactive[k] == FXCUT_NONE) {
            FN(gap)(st, k);
            d[v] = g->n;
            return;
        }
        FN(relabel)(st, v);
        if (d[v] >= g->n)
            return;
    }
}

/* The state's arrays for n vertices (excess zeroed); 0 when one could not
 * be allocated (FN(pr_free) frees what was). */
static int FN(pr_alloc)(FN(pr_state) *st, int32_t n)
{
    st->excess = calloc((size_t)n, sizeof *st->excess);
    st->d = malloc((size_t)n * sizeof *st->d);
    st->cur = malloc((size_t)n * sizeof *st->cur);
    st->next = malloc((size_t)n * sizeof *st->next);
    st->prev = malloc((size_t)n * sizeof *st->prev);
    st->active = malloc((size_t)n * sizeof *st->active);
    st->inactive = malloc((size_t)n * sizeof *st->inactive);
    return st->excess && st->d && st->cur && st->next && st->prev &&
           st->active && st->inactive;
}

static void FN(pr_free)(FN(pr_state) *st)
{
    free(st->excess);
    free(st->d);
    free(st->cur);
    free(st->next);
    free(st->prev);
    free(st->active);
    free(st->inactive);
}

/* The initial preflow: saturate every arc leaving R (side). */
static void FN(initial_preflow)(FN(pr_state) *st, const uint8_t *side)
{
    const fxcut_arcs *g = st->g;
    FLOW_T *res = st->res;
    for (int32_t v = 0; v < g->n; v++) {
        if (!side[v])
            continue;
        for (int32_t a = g->first[v]; a < g->first[v + 1]; a++) {
            int32_t w = g->head[a];
            if (!side[w] && res[a] > 0) {
                st->excess[w] += res[a];
                res[g->rev[a]] += res[a];
                res[a] = 0;
            }
        }
    }
}

/* Discharges the highest active vertex until none is left: the preflow is
 * then maximum.  Between global relabellings, relabel work of about
 * 6n + m arc visits: the cost of one global relabelling, so neither
 * dominates. */
static void FN(max_preflow)(FN(pr_state) *st)
{
    const int32_t n = st->g->n;
    const int64_t work_limit = 6 * (int64_t)n + (int64_t)st->g->first[n] / 2;
    st->d_max = n - 1;
    FN(global_relabel)(st, 1);
    for (;;) {
        while (st->a_max > 0 && st->active[st->a_max] == FXCUT_NONE)
            st->a_max--;
        if (st->a_max <= 0)
            break;
        int32_t v = st->active[st->a_max];
        st->active[st->a_max] = st->next[v];
        FN(discharge)(st, v);
#ifdef FXCUT_MAXFLOW_STATS
        st->n_discharge++;
#endif
        if (st->work > work_limit)
            FN(global_relabel)(st, 1);
    }
}

int FN(fxcut_push_relabel)(const fxcut_arcs *g, FLOW_T *res, uint8_t *side,
                           fxcut_u128 *flow, fxcut_error *err)
{
    const int32_t n = g->n;
    FN(pr_state) st = {0};
    st.g = g;
    st.res = res;
    if (!FN(pr_alloc)(&st, n)) {
        FN(pr_free)(&st);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "min_cut: out of memory for %d vertices", (int)n);
    }
    FN(initial_preflow)(&st, side);
    FN(max_preflow)(&st);
    /* No live vertex has excess: the preflow is maximum.  One more exact
     * relabelling gives the vertices that reach the sink. */
    FN(global_relabel)(&st, 0);
#ifdef FXCUT_MAXFLOW_STATS
    fprintf(stderr, "push-relabel: n %d arcs %d discharges %lld pushes %lld "
            "relabels %lld global %lld gaps %lld (labels %lld)\n", (int)n,
            (int)g->first[n], (long long)st.n_discharge, (long long)st.n_push,
            (long long)st.n_relabel, (long long)st.n_global,
            (long long)st.n_gap, (long long)st.n_gap_vertices);
#endif
    for (int32_t v = 0; v < n; v++)
        side[v] = st.d[v] < n;
    *flow = FXCUT_FLOW_TO_U128(st.excess[g->sink]);
    FN(pr_free)(&st);
    return FXCUT_OK;
}
