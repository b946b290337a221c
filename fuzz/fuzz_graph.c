/*
 * fuzz_graph.c -- libFuzzer target: arbitrary bytes -> a graph array and
 * partition options -> fxcut_graph_validate, then (when valid)
 * fxcut_param_alias_walk and fxcut_partition_decide.
 *
 * Each entry point must return an error code with a terminated message, or
 * a result that keeps its contract: saved indices in range, strictly
 * increasing and marked SAVED; the cut value equal to the weights of the
 * saved nodes; on an infinite path a chain of in-range nodes; the same
 * result when run twice; the network it hands back solving to the same
 * cut.  ASan/UBSan catch the rest.  Everything is allocated at its exact
 * size, so a read or write one past an array is caught.
 *
 * Input format: see fuzz_graph_input.h.
 */
#include "fuzz_graph_input.h"

/* The network handed back solves (by the other algorithm) to the same cut. */
static void check_network(const fxcut_graph *g, const fxcut_partition_result *r)
{
    const int32_t nv = 2 * g->n + 2;
    FZ_CHECK(r->net_tail != NULL && r->net_len >= 0, "no network");
    for (int64_t e = 0; e < r->net_len; e++)
        FZ_CHECK(r->net_tail[e] >= 0 && r->net_tail[e] < nv &&
                     r->net_head[e] >= 0 && r->net_head[e] < nv &&
                     r->net_cap[e] >= FXCUT_CAP_INF,
                 "bad network edge %lld", (long long)e);
    fxcut_network net = {nv, r->net_len, r->net_tail, r->net_head,
                         r->net_cap};
    uint8_t *side = xmalloc((size_t)nv);
    fxcut_u128 value;
    fxcut_error err;
    int rc = fxcut_min_cut(&net, nv - 2, nv - 1, FXCUT_MAXFLOW_DINIC, &value,
                           side, &err);
    FZ_CHECK(rc == FXCUT_OK, "the kept network fails with %d: %s", rc,
             err.message);
    FZ_CHECK(value.hi == r->cut_value_hi && value.lo == r->cut_value_lo,
             "Dinic's cut differs from the decision's");
    int32_t k = 0;
    for (int32_t i = 0; i < g->n; i++)
        if (r->weight[i] != FXCUT_WEIGHT_NONE && !side[2 * i] &&
            side[2 * i + 1])
            FZ_CHECK(k < r->n_saved && r->saved[k++] == i,
                     "Dinic saves node %d, the decision does not", i);
    FZ_CHECK(k == r->n_saved, "Dinic saves %d nodes, the decision %d", k,
             r->n_saved);
    free(side);
}

static int same_result(const fxcut_partition_result *a,
                       const fxcut_partition_result *b, int32_t n)
{
    size_t un = (size_t)n;
    return a->n_saved == b->n_saved && a->n_required_bw == b->n_required_bw &&
           a->cut_value_hi == b->cut_value_hi &&
           a->cut_value_lo == b->cut_value_lo &&
           memcmp(a->saved, b->saved, (size_t)a->n_saved * 4) == 0 &&
           memcmp(a->tag, b->tag, un) == 0 &&
           memcmp(a->node_class, b->node_class, un) == 0 &&
           memcmp(a->ban_reason, b->ban_reason, un) == 0 &&
           memcmp(a->weight, b->weight, un * 8) == 0;
}

static int32_t *dup_i32(const int32_t *p, int32_t count)
{
    int32_t *q = xmalloc((size_t)count * sizeof *q);
    memcpy(q, p, (size_t)count * sizeof *q);
    return q;
}

typedef struct {
    int32_t **owned;
    int calls;
} released_copies;

static void release_copies(void *arg)
{
    released_copies *rel = arg;
    for (int k = 0; k < 5; k++) {
        free(rel->owned[k]);
        rel->owned[k] = NULL;
    }
    rel->calls++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    arrays a;
    fxcut_partition_options o;
    int raw;
    decode(&in, &a, &o, &raw);
    fxcut_graph g = graph_of(&a);
    fxcut_error err;
    memset(&err, 0, sizeof err);
    int rc = fxcut_graph_validate(&g, &err);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
        arrays_free(&a);
        return 0;
    }

    uint8_t *recompute = xmalloc((size_t)a.n);
    rc = fxcut_param_alias_walk(&g, a.params, a.n_params, recompute, &err);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
    } else {
        for (int32_t i = 0; i < a.n; i++) {
            FZ_CHECK(recompute[i] <= 1, "recompute[%d] = %d", i,
                     recompute[i]);
            if (recompute[i])
                FZ_CHECK(a.kind[i] == FXCUT_CALL_FUNCTION,
                         "non-call node %d marked", i);
        }
    }
    free(recompute);

    fxcut_partition_result r1, r2;
    result_alloc(&r1, a.n);
    result_alloc(&r2, a.n);
    /* The first run reads private copies of the index arrays, freed by
     * release_graph: ASan sees any read of them after the release. */
    fxcut_graph copy = g;
    int32_t *owned[5] = {dup_i32(g.arg_ptr, a.n + 1),
                         dup_i32(g.arg_idx, g.arg_ptr[a.n]),
                         dup_i32(g.in_ptr, a.n + 1),
                         dup_i32(g.in_idx, g.in_ptr[a.n]),
                         dup_i32(g.outputs, g.n_outputs)};
    copy.arg_ptr = owned[0];
    copy.arg_idx = owned[1];
    copy.in_ptr = owned[2];
    copy.in_idx = owned[3];
    copy.outputs = owned[4];
    released_copies rel = {owned, 0};
    fxcut_partition_options o1 = o;
    o1.release_graph = release_copies;
    o1.release_graph_arg = &rel;
    rc = fxcut_partition_decide(&copy, &o1, &r1, &err);
    FZ_CHECK(rel.calls <= 1, "release_graph called %d times", rel.calls);
    if (rel.calls == 0)
        release_copies(&rel);
    fxcut_error err2;
    memset(&err2, 0, sizeof err2);
    int rc2 = fxcut_partition_decide(&g, &o, &r2, &err2);
    FZ_CHECK(rc == rc2, "two runs disagree: %d then %d", rc, rc2);
    if (getenv("FXCUT_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "fuzz_graph: n %d rc %d (%s) required_bw %d saved %d "
                "cut %llu\n", a.n, rc, rc ? err.message : "ok",
                r1.n_required_bw, r1.n_saved,
                (unsigned long long)r1.cut_value_lo);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
        FZ_CHECK(strcmp(err.message, err2.message) == 0,
                 "two runs give different messages");
        if (rc == FXCUT_E_UNBOUNDED) {
            FZ_CHECK(r1.n_chain >= 1 && r1.n_chain <= a.n + 2, "n_chain %d",
                     r1.n_chain);
            for (int32_t k = 0; k < r1.n_chain; k++)
                FZ_CHECK(r1.chain[k] >= 0 && r1.chain[k] < a.n,
                         "chain[%d] = %d", k, r1.chain[k]);
        }
    } else {
        check_decision(&g, &o, &r1);
        FZ_CHECK(same_result(&r1, &r2, a.n), "two runs disagree");
        if (o.keep_network == FXCUT_KEEP_NETWORK && r1.n_required_bw > 0)
            check_network(&g, &r1);
    }
    result_free(&r1);
    result_free(&r2);
    arrays_free(&a);
    return 0;
}
