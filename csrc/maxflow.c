/*
 * maxflow.c -- fxcut_min_cut: validation, the residual network, infinite
 * capacities, the choice of flow type, and the cut read off the result.
 * The algorithms themselves are in maxflow_push_relabel.c and
 * maxflow_dinic.c; see maxflow_internal.h for what they share.
 *
 * Steps:
 *  1. check the arguments and every edge (scipy-style messages);
 *  2. build the CSR residual network, an arc pair per edge with nonzero
 *     capacity (self-loops and zero capacities carry no flow and are
 *     dropped, as networkx drops them);
 *  3. find R, the vertices the source reaches along infinite edges; the
 *     sink in R means an infinite path: FXCUT_E_UNBOUNDED naming it;
 *  4. C_R = the finite capacity leaving R.  The cut (R, rest) costs C_R,
 *     so no minimum cut can cost more, and an infinite edge may be given
 *     any capacity above C_R without changing the set of minimum cuts (a
 *     cut crossing it would cost more than C_R).  We give INF = C_R + 1.
 *     networkx gives 3 * (sum of finite capacities), also above C_R, so
 *     both choose among the same minimum cuts;
 *  5. every quantity an algorithm forms is at most max(largest capacity,
 *     INF): residuals by the pair invariant, excesses and the flow value
 *     because R is the (contracted) source and the total excess never
 *     exceeds C_R.  int64_t when INF fits in it, __int128 otherwise (its
 *     bound, 2^31 arcs times 2^63, is far inside 2^127);
 *  6. run the algorithm; sink_side comes back from it;
 *  7. the cut value is summed over the edges that cross from the source
 *     side into the sink side, in 128 bits, and checked against the flow
 *     value: the max-flow/min-cut theorem, as a guard against any
 *     arithmetic slip.  An edge's capacity is read back from its arc pair
 *     (res[a] + res[rev[a]], the pair invariant), so the input arrays are
 *     not needed after step 2: fxcut_min_cut_hooked hands them back to
 *     the caller then, before the solver allocates its state.
 */
#include "maxflow_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most arcs (two per kept edge) that int32 arc indices can address. */
#define MAX_ARCS ((int64_t)INT32_MAX - 1)

/* How many path vertices an unbounded-cut message names. */
#define PATH_SHOWN 8

static int u128_equal(fxcut_u128 x, fxcut_u128 y)
{
    return x.hi == y.hi && x.lo == y.lo;
}

/* Step 1.  Every edge index in range, every capacity >= 0 or infinite. */
static int validate(const fxcut_network *net, int32_t source, int32_t sink,
                    int algorithm, fxcut_error *err)
{
    const int32_t n = net->n_vertices;
    if (n <= 0 || n >= INT32_MAX)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "n_vertices must be between 1 and %d, got %d",
                          (int)(INT32_MAX - 1), (int)n);
    if (net->n_edges < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "n_edges must be >= 0, got %lld",
                          (long long)net->n_edges);
    if (source < 0 || source >= n)
        return fxcut_fail(err, FXCUT_E_INDEX, -1,
                          "source value (%d) must be between 0 and %d",
                          (int)source, (int)(n - 1));
    if (sink < 0 || sink >= n)
        return fxcut_fail(err, FXCUT_E_INDEX, -1,
                          "sink value (%d) must be between 0 and %d",
                          (int)sink, (int)(n - 1));
    if (source == sink)
        return fxcut_fail(err, FXCUT_E_INVALID, source,
                          "source and sink must be different vertices, "
                          "both are %d", (int)source);
    if (algorithm < FXCUT_MAXFLOW_DEFAULT || algorithm > FXCUT_MAXFLOW_DINIC)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "algorithm must be %d (default), %d (push-relabel) "
                          "or %d (Dinic), got %d", FXCUT_MAXFLOW_DEFAULT,
                          FXCUT_MAXFLOW_PUSH_RELABEL, FXCUT_MAXFLOW_DINIC,
                          algorithm);
    for (int64_t e = 0; e < net->n_edges; e++) {
        if (net->tail[e] < 0 || net->tail[e] >= n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "tail[%lld] value (%d) must be between 0 and "
                              "%d", (long long)e, (int)net->tail[e],
                              (int)(n - 1));
        if (net->head[e] < 0 || net->head[e] >= n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "head[%lld] value (%d) must be between 0 and "
                              "%d", (long long)e, (int)net->head[e],
                              (int)(n - 1));
        if (net->cap[e] < 0 && net->cap[e] != FXCUT_CAP_INF)
            return fxcut_fail(err, FXCUT_E_INVALID, -1,
                              "cap[%lld] value (%lld) of edge %d -> %d must "
                              "be >= 0, or %lld for infinite", (long long)e,
                              (long long)net->cap[e], (int)net->tail[e],
                              (int)net->head[e], (long long)FXCUT_CAP_INF);
    }
    return FXCUT_OK;
}

static int edge_kept(const fxcut_network *net, int64_t e)
{
    return net->tail[e] != net->head[e] && net->cap[e] != 0;
}

/* The arrays of the residual network; res64 holds FXCUT_CAP_INF on the
 * forward arc of an infinite edge until step 5 replaces it.  Bit a of fwd
 * is set when arc a is the forward arc of its pair (runs as the input edge
 * ran). */
typedef struct {
    fxcut_arcs arcs;
    int32_t *first;  /* n + 2 entries while building, n + 1 used after */
    int32_t *head;
    int32_t *rev;
    int64_t *res64;
    uint8_t *fwd;
} residual;

static void residual_free(residual *r)
{
    void *const owned[] = {r->first, r->head, r->rev, r->res64, r->fwd};
    fxcut_free_each(owned, sizeof owned / sizeof owned[0]);
}

static int is_forward(const residual *r, int32_t a)
{
    return (r->fwd[(uint32_t)a >> 3] >> (a & 7)) & 1;
}

/*
 * Step 2.  Arcs of a vertex appear in edge order.  first[] is built with
 * the usual shifted-count trick: after counting, first[v + 1] is the next
 * free slot of v; filling advances it to v's end, which is v + 1's start.
 */
static int residual_build(const fxcut_network *net, int32_t sink,
                          residual *r, fxcut_error *err)
{
    const int32_t n = net->n_vertices;
    int64_t kept = 0;
    for (int64_t e = 0; e < net->n_edges; e++)
        kept += edge_kept(net, e);
    if (2 * kept > MAX_ARCS)
        return fxcut_fail(err, FXCUT_E_OVERFLOW, -1,
                          "min_cut: %lld edges with nonzero capacity, at most "
                          "%lld supported (int32 arc indices)",
                          (long long)kept, (long long)(MAX_ARCS / 2));
    size_t n_arcs = (size_t)(2 * kept);
    size_t arcs_alloc = n_arcs > 0 ? n_arcs : 1;
    memset(r, 0, sizeof *r);
    r->first = calloc((size_t)n + 2, sizeof *r->first);
    r->head = malloc(arcs_alloc * sizeof *r->head);
    r->rev = malloc(arcs_alloc * sizeof *r->rev);
    r->res64 = malloc(arcs_alloc * sizeof *r->res64);
    r->fwd = calloc(arcs_alloc / 8 + 1, 1);
    if (!r->first || !r->head || !r->rev || !r->res64 || !r->fwd) {
        residual_free(r);
        memset(r, 0, sizeof *r);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "min_cut: out of memory for %d vertices and %lld "
                          "arcs", (int)n, (long long)n_arcs);
    }
    int32_t *first = r->first;
    for (int64_t e = 0; e < net->n_edges; e++) {
        if (!edge_kept(net, e))
            continue;
        first[net->tail[e] + 2]++;
        first[net->head[e] + 2]++;
    }
    for (int32_t v = 2; v <= n; v++)
        first[v] += first[v - 1];
    for (int64_t e = 0; e < net->n_edges; e++) {
        if (!edge_kept(net, e))
            continue;
        int32_t u = net->tail[e], v = net->head[e];
        int32_t a = first[u + 1]++, b = first[v + 1]++;
        r->head[a] = v;
        r->head[b] = u;
        r->rev[a] = b;
        r->rev[b] = a;
        r->res64[a] = net->cap[e];
        r->res64[b] = 0;
        r->fwd[(uint32_t)a >> 3] |= (uint8_t)(1u << (a & 7));
    }
    r->arcs.n = n;
    r->arcs.sink = sink;
    r->arcs.first = first;
    r->arcs.head = r->head;
    r->arcs.rev = r->rev;
    return FXCUT_OK;
}

/*
 * Step 3.  Marks in_r[v] = 1 for the vertices the source reaches along
 * infinite edges (breadth-first, so a reported path is a shortest one).
 * When the sink is among them, fails with FXCUT_E_UNBOUNDED: the message
 * names the path's first vertices, err->node the vertex after the source.
 */
static int source_closure(const residual *r, int32_t source, uint8_t *in_r,
                          const fxcut_min_cut_hooks *hooks, fxcut_error *err)
{
    const int32_t n = r->arcs.n, sink = r->arcs.sink;
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    int32_t *parent = malloc((size_t)n * sizeof *parent);
    if (!queue || !parent) {
        free(queue);
        free(parent);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "min_cut: out of memory for %d vertices", (int)n);
    }
    memset(in_r, 0, (size_t)n);
    in_r[source] = 1;
    queue[0] = source;
    int32_t q_end = 1;
    for (int32_t q = 0; q < q_end && !in_r[sink]; q++) {
        int32_t v = queue[q];
        for (int32_t a = r->first[v]; a < r->first[v + 1]; a++) {
            int32_t w = r->head[a];
            if (!in_r[w] && r->res64[a] == FXCUT_CAP_INF) {
                in_r[w] = 1;
                parent[w] = v;
                queue[q_end++] = w;
            }
        }
    }
    int rc = FXCUT_OK;
    if (in_r[sink]) {
        /* Walk back from the sink, writing the path into queue reversed,
         * then turn it round. */
        int32_t len = 0;
        for (int32_t v = sink; v != source; v = parent[v])
            queue[len++] = v;
        queue[len++] = source;
        for (int32_t a = 0, b = len - 1; a < b; a++, b--) {
            int32_t t = queue[a];
            queue[a] = queue[b];
            queue[b] = t;
        }
        if (hooks != NULL && hooks->infinite_path != NULL)
            hooks->infinite_path(hooks->arg, queue, len);
        char shown[8 * 12 + 16];
        size_t used = 0;
        int32_t show = len <= PATH_SHOWN ? len : PATH_SHOWN;
        for (int32_t i = 0; i < show; i++) {
            int k = snprintf(shown + used, sizeof shown - used, "%s%d",
                             i ? " -> " : "", (int)queue[i]);
            if (k < 0 || (size_t)k >= sizeof shown - used)
                break;
            used += (size_t)k;
        }
        rc = fxcut_fail(err, FXCUT_E_UNBOUNDED, queue[1],
                        "min_cut: the source (%d) and the sink (%d) are "
                        "joined by a path of %d infinite-capacity edges, so "
                        "no cut is finite: %s%s", (int)source, (int)sink,
                        (int)(len - 1), shown, len > show ? " -> ..." : "");
    }
    free(queue);
    free(parent);
    return rc;
}

/* Step 4.  The finite capacity on arcs leaving R.  Forward arcs leaving R
 * are finite (R is closed under infinite edges); reverse arcs hold 0. */
static fxcut_u128 capacity_leaving(const residual *r, const uint8_t *in_r)
{
    fxcut_u128 total = {0, 0};
    for (int32_t v = 0; v < r->arcs.n; v++) {
        if (!in_r[v])
            continue;
        for (int32_t a = r->first[v]; a < r->first[v + 1]; a++)
            if (!in_r[r->head[a]])
                fxcut_u128_add(&total, (uint64_t)r->res64[a]);
    }
    return total;
}

/*
 * Step 7.  The capacity of the cut (side == 0 -> side == 1), summed over
 * the forward arcs that cross it; an edge's capacity is res[a] +
 * res[rev[a]].  No crossing edge can have capacity INF or more (the cut
 * costs at most C_R < INF): one that does is an internal error.  A macro,
 * to be exact in either flow type.
 */
#define CUT_FROM_RESIDUAL(FLOW_T, r, res, inf, side, value, err, rc)         \
    do {                                                                      \
        fxcut_u128 total_ = {0, 0};                                           \
        (rc) = FXCUT_OK;                                                      \
        for (int32_t v_ = 0; v_ < (r)->arcs.n && (rc) == FXCUT_OK; v_++) {   \
            if ((side)[v_])                                                   \
                continue;                                                     \
            for (int32_t a_ = (r)->first[v_]; a_ < (r)->first[v_ + 1]; a_++) {\
                if (!is_forward((r), a_) || !(side)[(r)->head[a_]])           \
                    continue;                                                 \
                FLOW_T cap_ = (res)[a_] + (res)[(r)->rev[a_]];                \
                if (cap_ >= (inf)) {                                          \
                    (rc) = fxcut_fail((err), FXCUT_E_INTERNAL, v_,            \
                                      "min_cut: internal error: the cut "     \
                                      "crosses an edge of capacity >= the "   \
                                      "infinity (%d -> %d)", (int)v_,         \
                                      (int)(r)->head[a_]);                    \
                    break;                                                    \
                }                                                             \
                fxcut_u128 c_ = FXCUT_FLOW_TO_U128(cap_);                     \
                fxcut_u128_add(&total_, c_.lo);                                     \
                total_.hi += c_.hi;                                           \
            }                                                                 \
        }                                                                     \
        *(value) = total_;                                                    \
    } while (0)

/* Steps 5-6 for the int64_t path: INF replaces the infinite marks. */
static int solve_i64(residual *r, int algorithm, int64_t inf, uint8_t *side,
                     fxcut_u128 *flow, fxcut_u128 *cut, fxcut_error *err)
{
    const size_t n_arcs = (size_t)r->first[r->arcs.n];
    for (size_t a = 0; a < n_arcs; a++)
        if (r->res64[a] == FXCUT_CAP_INF)
            r->res64[a] = inf;
    int rc = algorithm == FXCUT_MAXFLOW_DINIC
                 ? fxcut_dinic_i64(&r->arcs, r->res64, side, flow, err)
                 : fxcut_push_relabel_i64(&r->arcs, r->res64, side, flow, err);
    if (rc == FXCUT_OK)
        CUT_FROM_RESIDUAL(int64_t, r, r->res64, inf, side, cut, err, rc);
    return rc;
}

#if FXCUT_HAVE_INT128
/* Steps 5-6 for the __int128 path: the residuals move to 16-byte slots
 * (res64 is freed first thing after copying, to keep the peak low). */
static int solve_i128(residual *r, int algorithm, fxcut_u128 inf,
                      uint8_t *side, fxcut_u128 *flow, fxcut_u128 *cut,
                      fxcut_error *err)
{
    const size_t n_arcs = (size_t)r->first[r->arcs.n];
    fxcut_i128 *res = malloc((n_arcs > 0 ? n_arcs : 1) * sizeof *res);
    if (res == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "min_cut: out of memory for %lld 128-bit residual "
                          "capacities", (long long)n_arcs);
    const fxcut_i128 inf128 = (fxcut_i128)inf.hi << 64 | (fxcut_i128)inf.lo;
    for (size_t a = 0; a < n_arcs; a++)
        res[a] = r->res64[a] == FXCUT_CAP_INF ? inf128
                                              : (fxcut_i128)r->res64[a];
    free(r->res64);
    r->res64 = NULL;
    int rc = algorithm == FXCUT_MAXFLOW_DINIC
                 ? fxcut_dinic_i128(&r->arcs, res, side, flow, err)
                 : fxcut_push_relabel_i128(&r->arcs, res, side, flow, err);
    if (rc == FXCUT_OK)
        CUT_FROM_RESIDUAL(fxcut_i128, r, res, inf128, side, cut, err, rc);
    free(res);
    return rc;
}
#endif

/* The entry points; see maxflow.h for the contract and the memory.
 * sink_side doubles as the R mask between steps 3 and 6. */
int fxcut_min_cut_hooked(const fxcut_network *net, int32_t source,
                         int32_t sink, int algorithm, fxcut_u128 *cut_value,
                         uint8_t *sink_side, const fxcut_min_cut_hooks *hooks,
                         fxcut_error *err)
{
    residual r;
    int rc = validate(net, source, sink, algorithm, err);
    if (rc == FXCUT_OK)
        rc = residual_build(net, sink, &r, err);
    /* Steps 3-7 read the residual network only. */
    if (hooks != NULL && hooks->release != NULL)
        hooks->release(hooks->arg);
    if (rc != FXCUT_OK)
        return rc;
    rc = source_closure(&r, source, sink_side, hooks, err);
    if (rc != FXCUT_OK)
        goto done;

    fxcut_u128 inf = capacity_leaving(&r, sink_side);
    fxcut_u128_add(&inf, 1);
    fxcut_u128 flow = {0, 0};
    if (inf.hi == 0 && inf.lo <= (uint64_t)INT64_MAX) {
        rc = solve_i64(&r, algorithm, (int64_t)inf.lo, sink_side, &flow,
                       cut_value, err);
    } else {
#if FXCUT_HAVE_INT128
        rc = solve_i128(&r, algorithm, inf, sink_side, &flow, cut_value, err);
#else
        rc = fxcut_fail(err, FXCUT_E_OVERFLOW, -1,
                        "min_cut: capacities leaving the source sum past "
                        "2^63 and this compiler has no 128-bit integers");
#endif
    }
    if (rc == FXCUT_OK && !u128_equal(*cut_value, flow))
        rc = fxcut_fail(err, FXCUT_E_INTERNAL, -1,
                        "min_cut: internal error: the flow (hi %llu, lo %llu) "
                        "differs from the cut (hi %llu, lo %llu)",
                        (unsigned long long)flow.hi,
                        (unsigned long long)flow.lo,
                        (unsigned long long)cut_value->hi,
                        (unsigned long long)cut_value->lo);
done:
    residual_free(&r);
    return rc;
}

int fxcut_min_cut(const fxcut_network *net, int32_t source, int32_t sink,
                  int algorithm, fxcut_u128 *cut_value, uint8_t *sink_side,
                  fxcut_error *err)
{
    return fxcut_min_cut_hooked(net, source, sink, algorithm, cut_value,
                                sink_side, NULL, err);
}
