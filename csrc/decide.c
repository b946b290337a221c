/*
 * decide.c -- the partition decision, end to end: tag passes, classification,
 * bans, weights, the split-node flow network, the min-cut, the saved set.
 *
 * The network has two vertices per node i: X_in = 2i and X_out = 2i + 1, then
 * source = 2n and sink = 2n + 1.  A node's value is saved when the cut
 * separates its X_in (source side) from its X_out (sink side).
 */
#include "partition_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V_IN(i) (2 * (i))
#define V_OUT(i) (2 * (i) + 1)

/* INT_INF of torch's partitioner: the weight of a value never to be saved
 * but not strictly impossible to save (non-SymInt symbolic values). */
#define INT_INF_WEIGHT ((int64_t)1000000)

typedef struct {
    int32_t *tail;
    int32_t *head;
    int64_t *cap;
    int64_t len;
} edge_list;

static void add_edge(edge_list *el, int32_t t, int32_t h, int64_t cap)
{
    el->tail[el->len] = t;
    el->head[el->len] = h;
    el->cap[el->len] = cap;
    el->len++;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void ctx_free(fxcut_ctx *c)
{
    free(c->user_ptr);
    free(c->user_idx);
    free(c->fw_order);
    free(c->fw_nodes);
    free(c->fuse_keys);
    free(c->stack);
    free(c->heap);
    free(c->stamp);
    c->user_ptr = c->user_idx = c->fw_order = c->fw_nodes = c->stack = NULL;
    c->fuse_keys = c->heap = NULL;
    c->stamp = NULL;
}

static int ctx_init(fxcut_ctx *c, const fxcut_graph *g,
                    const fxcut_partition_options *opt,
                    fxcut_partition_result *res, fxcut_error *err)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->opt = opt;
    c->res = res;
    int rc = fxcut_graph_users(g, &c->user_ptr, &c->user_idx, err);
    if (rc != FXCUT_OK)
        return rc;
    size_t n = (size_t)g->n;
    size_t m = (size_t)g->in_ptr[g->n];
    c->fw_order = malloc((n + 1) * sizeof *c->fw_order);
    c->fw_nodes = malloc((n + 1) * sizeof *c->fw_nodes);
    c->stack = malloc((n + 1) * sizeof *c->stack);
    c->heap = malloc((2 * (n + m) + 2) * sizeof *c->heap);
    c->stamp_len = 2 * n + 2;
    c->stamp = calloc(c->stamp_len, sizeof *c->stamp);
    c->fuse_keys = malloc(((size_t)opt->n_fuse_pairs + 1) * sizeof *c->fuse_keys);
    if (c->fw_order == NULL || c->fw_nodes == NULL || c->stack == NULL ||
        c->heap == NULL || c->stamp == NULL || c->fuse_keys == NULL) {
        ctx_free(c);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the decision over %d nodes",
                          (int)g->n);
    }
    for (int32_t k = 0; k < opt->n_fuse_pairs; k++) {
        int32_t a = opt->fuse_pair_a[k], b = opt->fuse_pair_b[k];
        if (a < 0 || a >= g->n || b < 0 || b >= g->n) {
            ctx_free(c);
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "fuse pair %d = (%d, %d) is outside [0, %d)",
                              (int)k, (int)a, (int)b, (int)g->n);
        }
        c->fuse_keys[k] = ((int64_t)b << 32) | (int64_t)(uint32_t)a;
    }
    c->n_fuse_keys = opt->n_fuse_pairs;
    qsort(c->fuse_keys, (size_t)c->n_fuse_keys, sizeof *c->fuse_keys, cmp_i64);
    return FXCUT_OK;
}

/* The X_in -> X_out capacity of node i (torch's get_node_weight and the
 * symbolic / non-tensor cases before it).  FXCUT_WEIGHT_INF for never. */
static int node_weight(const fxcut_ctx *c, int32_t i, int64_t *w,
                       fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    const fxcut_partition_options *o = c->opt;
    const uint32_t f = g->flags[i];
    if (f & FXCUT_F_SYM) {
        *w = (f & FXCUT_F_SYMFLOAT) ? 4 : 1;
        return FXCUT_OK;
    }
    if (f & FXCUT_F_NON_TENSOR) {
        *w = (f & FXCUT_F_FREE_OBJECT) ? 0 : FXCUT_WEIGHT_INF;
        return FXCUT_OK;
    }
    if (o->treat_parameters_as_free_to_save && o->static_lifetime != NULL &&
        o->static_lifetime[i]) {
        *w = 0;
        return FXCUT_OK;
    }
    int64_t size = g->nbytes[i];
    if (size == FXCUT_SIZE_UNKNOWN)
        return fxcut_fail(err, FXCUT_E_SIZE, i,
                          "node %d has no meta['val'] to size it", (int)i);
    if (o->recompute_views && (f & FXCUT_F_VIEW)) {
        *w = FXCUT_WEIGHT_INF;
        return FXCUT_OK;
    }
    (void)INT_INF_WEIGHT; /* symbolic values are handled above */
    int64_t d = c->res->dist_from_bw[i];
    double k = (double)(d > 100 ? 100 : (d < 1 ? 1 : d));
    /* As torch: int(size * 1.1 ** k), in double, truncated. */
    double scaled = (double)size * pow(1.1, k);
    if (!(scaled < 4611686018427387904.0)) /* 2^62 */
        return fxcut_fail(err, FXCUT_E_OVERFLOW, i,
                          "weight of node %d (%lld bytes) exceeds 2^62",
                          (int)i, (long long)size);
    int64_t weight = (int64_t)scaled;
    int materialized = g->kind[i] == FXCUT_PLACEHOLDER;
    for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1] && !materialized; e++)
        materialized = !fxcut_is_fusible(c, i, c->user_idx[e]);
    *w = materialized ? weight : 2 * weight;
    return FXCUT_OK;
}

/* Per-node bans and the node's edges, in graph order (torch's main loop).
 * Source edges of banned nodes are added later, once every ban is known. */
static int build_node_edges(fxcut_ctx *c, edge_list *el, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    fxcut_partition_result *res = c->res;
    const int32_t sink = 2 * g->n + 1;
    for (int32_t i = 0; i < g->n; i++) {
        res->weight[i] = FXCUT_WEIGHT_NONE;
        if (g->kind[i] == FXCUT_OUTPUT)
            continue;
        uint8_t cls = res->node_class[i];
        if (cls & FXCUT_C_REQUIRED_BW) {
            if (!(cls & FXCUT_C_TANGENTS_CLOSURE)) {
                add_edge(el, V_OUT(i), sink, FXCUT_CAP_INF);
            } else {
                add_edge(el, V_IN(i), sink, FXCUT_CAP_INF);
                continue;
            }
        }
        if (fxcut_must_recompute(res->tag[i])) {
            res->node_class[i] |= FXCUT_C_MUST_RECOMPUTE;
            add_edge(el, V_IN(i), sink, FXCUT_CAP_INF);
            continue;
        }
        if (g->kind[i] == FXCUT_PLACEHOLDER && (g->flags[i] & FXCUT_F_PRIMAL))
            fxcut_ban_if_allowed(c, i, FXCUT_BAN_PRIMAL);
        else if (g->kind[i] == FXCUT_PLACEHOLDER &&
                 (g->flags[i] & FXCUT_F_FWD_SEED))
            fxcut_ban_if_allowed(c, i, FXCUT_BAN_FWD_SEED);
        if (cls & FXCUT_C_REQUIRED_FW) {
            int reason = fxcut_should_ban(c, i, err);
            if (reason < 0)
                return err->code;
            if (reason != FXCUT_BAN_NONE)
                fxcut_ban_if_allowed(c, i, reason);
        }
        int64_t w = 0;
        int rc = node_weight(c, i, &w, err);
        if (rc != FXCUT_OK)
            return rc;
        res->weight[i] = w;
        add_edge(el, V_IN(i), V_OUT(i), w == FXCUT_WEIGHT_INF ? FXCUT_CAP_INF : w);
        for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1]; e++)
            add_edge(el, V_OUT(i), V_IN(c->user_idx[e]), FXCUT_CAP_INF);
    }
    return FXCUT_OK;
}

/* One source -> sink path of infinite edges, as node indices (consecutive
 * duplicates merged), or 0 nodes when there is none.  BFS from the source. */
static int find_infinite_path(const fxcut_ctx *c, const edge_list *el,
                              fxcut_error *err)
{
    const int32_t nv = 2 * c->g->n + 2, source = nv - 2, sink = nv - 1;
    int32_t *ptr = calloc((size_t)nv + 1, sizeof *ptr);
    int32_t *adj = malloc(((size_t)el->len + 1) * sizeof *adj);
    int32_t *prev = malloc((size_t)nv * sizeof *prev);
    int32_t *queue = malloc((size_t)nv * sizeof *queue);
    if (ptr == NULL || adj == NULL || prev == NULL || queue == NULL) {
        free(ptr);
        free(adj);
        free(prev);
        free(queue);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    }
    for (int64_t e = 0; e < el->len; e++)
        if (el->cap[e] == FXCUT_CAP_INF)
            ptr[el->tail[e] + 1]++;
    for (int32_t v = 0; v < nv; v++)
        ptr[v + 1] += ptr[v];
    for (int64_t e = 0; e < el->len; e++)
        if (el->cap[e] == FXCUT_CAP_INF)
            adj[ptr[el->tail[e]]++] = el->head[e];
    for (int32_t v = nv; v > 0; v--)
        ptr[v] = ptr[v - 1];
    ptr[0] = 0;
    for (int32_t v = 0; v < nv; v++)
        prev[v] = -2;
    int32_t qh = 0, qt = 0;
    queue[qt++] = source;
    prev[source] = -1;
    while (qh < qt && prev[sink] == -2) {
        int32_t v = queue[qh++];
        for (int32_t e = ptr[v]; e < ptr[v + 1]; e++)
            if (prev[adj[e]] == -2) {
                prev[adj[e]] = v;
                queue[qt++] = adj[e];
            }
    }
    fxcut_partition_result *res = c->res;
    res->n_chain = 0;
    if (prev[sink] != -2) {
        /* Walk back, then reverse, keeping node indices only. */
        for (int32_t v = prev[sink]; v != source && v >= 0; v = prev[v]) {
            int32_t node = v / 2;
            if (res->n_chain == 0 || res->chain[res->n_chain - 1] != node)
                res->chain[res->n_chain++] = node;
        }
        for (int32_t a = 0, b = res->n_chain - 1; a < b; a++, b--) {
            int32_t t = res->chain[a];
            res->chain[a] = res->chain[b];
            res->chain[b] = t;
        }
    }
    free(ptr);
    free(adj);
    free(prev);
    free(queue);
    return FXCUT_OK;
}

/* Frees the edge list (fxcut_min_cut_release calls this once the residual
 * network is built). */
static void edge_list_free(void *arg)
{
    edge_list *el = arg;
    free(el->tail);
    free(el->head);
    free(el->cap);
    el->tail = el->head = NULL;
    el->cap = NULL;
}

/* Solves the network and reads the saved set off the cut.  Unless the
 * caller keeps the network, the edge list is freed as soon as the solver
 * has its own copy (it would otherwise sit under the solver's peak). */
static int solve_and_extract(fxcut_ctx *c, edge_list *el, int keep,
                             fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    fxcut_partition_result *res = c->res;
    const int32_t nv = 2 * g->n + 2;
    int rc = find_infinite_path(c, el, err);
    if (rc != FXCUT_OK)
        return rc;
    if (res->n_chain > 0)
        return fxcut_fail(err, FXCUT_E_UNBOUNDED, res->chain[0],
                          "a value is needed in backward but can be neither "
                          "saved nor recomputed: %d nodes join source and "
                          "sink by infinite edges, starting at node %d",
                          (int)res->n_chain, (int)res->chain[0]);
    uint8_t *sink_side = malloc((size_t)nv);
    if (sink_side == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    fxcut_network net = {nv, el->len, el->tail, el->head, el->cap};
    rc = fxcut_min_cut_release(&net, nv - 2, nv - 1, FXCUT_MAXFLOW_DEFAULT,
                               &res->cut_value, sink_side,
                               keep ? NULL : edge_list_free, el, err);
    if (rc != FXCUT_OK) {
        free(sink_side);
        return rc;
    }
    res->n_saved = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (sink_side[V_IN(i)])
            res->node_class[i] |= FXCUT_C_SINK_SIDE;
        if (res->weight[i] != FXCUT_WEIGHT_NONE && !sink_side[V_IN(i)] &&
            sink_side[V_OUT(i)]) {
            res->node_class[i] |= FXCUT_C_SAVED;
            res->saved[res->n_saved++] = i;
        }
    }
    free(sink_side);
    return FXCUT_OK;
}

int fxcut_decision_prepare(fxcut_ctx *c, const fxcut_graph *g,
                           const fxcut_partition_options *opt,
                           fxcut_partition_result *res, fxcut_error *err)
{
    memset(c, 0, sizeof *c);
    if (opt->num_fwd_outputs < 0 || opt->num_fwd_outputs > g->n_outputs)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "num_fwd_outputs (%d) must be between 0 and the "
                          "number of outputs (%d)", (int)opt->num_fwd_outputs,
                          (int)g->n_outputs);
    if (g->n > (INT32_MAX - 2) / 2)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "graph has %d nodes; the network needs 2n + 2 "
                          "int32 vertices", (int)g->n);
    /* Up to 3n + E network edges: they, the heap pushes of the ban walks
     * (at most n + E) and the edge counts of the infinite-path search must
     * all stay int32.  (The max-flow's arcs, two per edge, are limited to
     * 2^31 as well, so no graph past this could be solved anyway.) */
    if (3 * (int64_t)g->n + (int64_t)g->in_ptr[g->n] + 1 > INT32_MAX)
        return fxcut_fail(err, FXCUT_E_OVERFLOW, -1,
                          "graph of %d nodes and %d input edges: its flow "
                          "network would pass 2^31 edges", (int)g->n,
                          (int)g->in_ptr[g->n]);
    res->n_saved = 0;
    res->n_chain = 0;
    res->n_required_bw = 0;
    res->cut_value.hi = res->cut_value.lo = 0;
    res->net_tail = res->net_head = NULL;
    res->net_cap = NULL;
    res->net_len = 0;
    memset(res->ban_reason, 0, (size_t)g->n);
    for (int32_t i = 0; i < g->n; i++)
        res->weight[i] = FXCUT_WEIGHT_NONE;
    int rc = ctx_init(c, g, opt, res, err);
    if (rc != FXCUT_OK)
        return rc;
    rc = fxcut_apply_tag_passes(c, err);
    if (rc == FXCUT_OK)
        rc = fxcut_classify(c, err);
    return rc;
}

void fxcut_decision_release(fxcut_ctx *c)
{
    ctx_free(c);
}

/* The classification bits a cut leaves alone. */
#define CLASS_BITS (FXCUT_C_REQUIRED_FW | FXCUT_C_REQUIRED_BW | \
                    FXCUT_C_TANGENTS_CLOSURE | FXCUT_C_INPUT)

int fxcut_decision_cut(fxcut_ctx *c, const fxcut_partition_options *pass,
                       fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    fxcut_partition_result *res = c->res;
    c->opt = pass;
    res->n_saved = 0;
    res->n_chain = 0;
    res->cut_value.hi = res->cut_value.lo = 0;
    for (int32_t i = 0; i < g->n; i++) {
        res->node_class[i] &= (uint8_t)CLASS_BITS;
        res->ban_reason[i] = FXCUT_BAN_NONE;
    }
    size_t max_edges = 3 * (size_t)g->n + (size_t)g->in_ptr[g->n] + 1;
    edge_list el = {malloc(max_edges * sizeof(int32_t)),
                    malloc(max_edges * sizeof(int32_t)),
                    malloc(max_edges * sizeof(int64_t)), 0};
    int rc = FXCUT_OK;
    if (el.tail == NULL || el.head == NULL || el.cap == NULL) {
        rc = fxcut_fail(err, FXCUT_E_NOMEM, -1,
                        "out of memory for %zu network edges", max_edges);
        goto done;
    }
    rc = build_node_edges(c, &el, err);
    if (rc == FXCUT_OK && pass->ban_if_used_far_apart)
        rc = fxcut_ban_used_far_apart(c, err);
    if (rc == FXCUT_OK && pass->ban_if_long_fusible_chains)
        rc = fxcut_ban_long_fusible_chains(c, err);
    if (rc != FXCUT_OK)
        goto done;
    for (int32_t i = 0; i < g->n; i++)
        if (res->node_class[i] & FXCUT_C_BANNED)
            add_edge(&el, 2 * g->n, V_IN(i), FXCUT_CAP_INF);
    if (c->last_cut)
        ctx_free(c); /* the users CSR, heap and stamps: ~40 B/node + 20 B/edge */
    if (pass->keep_network == 2) {
        /* Network only: the caller solves it (tests, benchmarks). */
    } else {
        rc = solve_and_extract(c, &el, pass->keep_network != 0, err);
    }
    if (pass->keep_network) {
        fxcut_partition_result_release(res);
        res->net_tail = el.tail;
        res->net_head = el.head;
        res->net_cap = el.cap;
        res->net_len = el.len;
        el.tail = el.head = NULL;
        el.cap = NULL;
    }
done:
    free(el.tail);
    free(el.head);
    free(el.cap);
    return rc;
}

int fxcut_partition_decide(const fxcut_graph *g,
                           const fxcut_partition_options *opt,
                           fxcut_partition_result *res, fxcut_error *err)
{
    fxcut_ctx c;
    int rc = fxcut_decision_prepare(&c, g, opt, res, err);
    c.last_cut = 1;
    if (rc == FXCUT_OK && res->n_required_bw > 0)
        rc = fxcut_decision_cut(&c, opt, err);
    fxcut_decision_release(&c);
    return rc;
}

void fxcut_partition_result_release(fxcut_partition_result *res)
{
    free(res->net_tail);
    free(res->net_head);
    free(res->net_cap);
    res->net_tail = res->net_head = NULL;
    res->net_cap = NULL;
    res->net_len = 0;
}
