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

/* torch's get_node_weight: size * 1.1 ** clamp(dist_from_bw, 1, 100),
 * 2x for a value whose users all fuse it (it would be written and read). */
#define WEIGHT_DIST_MIN 1
#define WEIGHT_DIST_MAX 100
#define WEIGHT_GROWTH 1.1
/* Weights stay below 2^62: sums of a few of them fit int64. */
#define WEIGHT_LIMIT 4611686018427387904.0
/* A SymInt / SymBool costs 1 to save, a SymFloat 4 (torch's choice). */
#define WEIGHT_SYMINT 1
#define WEIGHT_SYMFLOAT 4

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
    void *const owned[] = {c->user_ptr, c->user_idx, c->fw_order, c->fw_nodes,
                           c->fuse_keys, c->stack, c->heap, c->stamp};
    fxcut_free_each(owned, sizeof owned / sizeof owned[0]);
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
        *w = (f & FXCUT_F_SYMFLOAT) ? WEIGHT_SYMFLOAT : WEIGHT_SYMINT;
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
    int64_t d = c->res->dist_from_bw[i];
    double k = (double)(d > WEIGHT_DIST_MAX ? WEIGHT_DIST_MAX
                                            : (d < WEIGHT_DIST_MIN ? WEIGHT_DIST_MIN : d));
    /* As torch: int(size * 1.1 ** k), in double, truncated. */
    double scaled = (double)size * pow(WEIGHT_GROWTH, k);
    if (!(scaled < WEIGHT_LIMIT))
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

/* The infinite path the max-flow found, as node indices (X_in / X_out of a
 * node merged, source and sink left out): the result's chain. */
static void keep_chain(void *arg, const int32_t *path, int32_t len)
{
    fxcut_partition_result *res = ((const fxcut_ctx *)arg)->res;
    const int32_t source = 2 * ((const fxcut_ctx *)arg)->g->n;
    res->n_chain = 0;
    for (int32_t k = 0; k < len; k++) {
        if (path[k] >= source)
            continue;
        int32_t node = path[k] / 2;
        if (res->n_chain == 0 || res->chain[res->n_chain - 1] != node)
            res->chain[res->n_chain++] = node;
    }
}

/* What fxcut_min_cut_hooked needs: the edge list's release and the chain. */
typedef struct {
    fxcut_ctx *c;
    edge_list *el;
    int keep;
} solve_args;

/* Frees the edge list. */
static void edge_list_free(edge_list *el)
{
    free(el->tail);
    free(el->head);
    free(el->cap);
    el->tail = el->head = NULL;
    el->cap = NULL;
}

static void solve_release(void *arg)
{
    const solve_args *a = arg;
    if (!a->keep)
        edge_list_free(a->el);
}

static void solve_infinite_path(void *arg, const int32_t *path, int32_t len)
{
    keep_chain(((const solve_args *)arg)->c, path, len);
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
    uint8_t *sink_side = malloc((size_t)nv);
    if (sink_side == NULL) {
        if (!keep)
            edge_list_free(el);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    }
    fxcut_network net = {nv, el->len, el->tail, el->head, el->cap};
    solve_args args = {c, el, keep};
    const fxcut_min_cut_hooks hooks = {solve_release, solve_infinite_path,
                                       &args};
    fxcut_u128 value = {0, 0};
    int rc = fxcut_min_cut_hooked(&net, nv - 2, nv - 1, FXCUT_MAXFLOW_DEFAULT,
                                  &value, sink_side, &hooks, err);
    if (rc != FXCUT_OK)
        free(sink_side);
    if (rc == FXCUT_E_UNBOUNDED && res->n_chain > 0)
        return fxcut_fail(err, FXCUT_E_UNBOUNDED, res->chain[0],
                          "a value is needed in backward but can be neither "
                          "saved nor recomputed: %d nodes join source and "
                          "sink by infinite edges, starting at node %d",
                          (int)res->n_chain, (int)res->chain[0]);
    if (rc != FXCUT_OK)
        return rc;
    res->cut_value_hi = value.hi;
    res->cut_value_lo = value.lo;
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
    if (opt->keep_network > FXCUT_KEEP_MAX)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "keep_network (%d) must be %d (none), %d (keep) or "
                          "%d (build only)", (int)opt->keep_network,
                          FXCUT_KEEP_NONE, FXCUT_KEEP_NETWORK,
                          FXCUT_KEEP_BUILD_ONLY);
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
    res->cut_value_hi = res->cut_value_lo = 0;
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
    res->cut_value_hi = res->cut_value_lo = 0;
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
    if (c->last_cut) {
        ctx_free(c); /* the users CSR, heap and stamps: ~40 B/node + 20 B/edge */
        if (pass->release_graph != NULL)
            pass->release_graph(pass->release_graph_arg); /* g is done */
    }
    if (pass->keep_network != FXCUT_KEEP_BUILD_ONLY)
        rc = solve_and_extract(c, &el, pass->keep_network != FXCUT_KEEP_NONE,
                               err);
    if (pass->keep_network != FXCUT_KEEP_NONE) {
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

fxcut_result_sizes fxcut_result_sizes_for(int32_t n)
{
    /* chain: the nodes of a shortest source -> sink path, each once (a
     * node's X_out is entered from its X_in only, so its two vertices are
     * adjacent on the path and merge), +2 for slack. */
    size_t un = n > 0 ? (size_t)n : 0;
    fxcut_result_sizes s = {un, un, un + 2, un};
    return s;
}
