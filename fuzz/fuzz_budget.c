/*
 * fuzz_budget.c -- libFuzzer target: arbitrary bytes -> a graph array,
 * partition options and a memory budget -> fxcut_budget_plan_decide (the
 * entry point behind fxcut._C.budget_plan), then, where the plan ends in
 * the knapsack, a knapsack solve and the final cut with the recomputed
 * candidates un-banned, as fxcut.solve.budget runs them.
 *
 * Checks: an error code with a terminated message, or a plan that keeps its
 * contract -- stage and pass count in range; candidates in range, distinct,
 * largest first with ties in graph order, memories >= 0; saved indices in
 * range and increasing; the same plan when run twice; at budget 1 the very
 * decision fxcut_partition_decide makes.  ASan/UBSan catch the rest.
 *
 * Input format: fuzz_graph_input.h's, then
 *   u8 budget code              0: 0.0, 255: 1.0, 254: a raw float64 (u64
 *                               bits: NaN, negatives, ...), else code / 255
 *   u8 storage                  bit 0: an input_storage mask is given, one
 *                               u8 per node (bit 0)
 *   u8 solver                   the knapsack solver (% 4)
 */
#include "fuzz_graph_input.h"
#include "knapsack.h"

#include <math.h>

static double decode_budget(fuzz_input *in)
{
    uint8_t code = fz_u8(in);
    if (code == 0)
        return 0.0;
    if (code == 255)
        return 1.0;
    if (code == 254) {
        uint64_t bits = fz_u64(in);
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    return code / 255.0;
}

static void plan_alloc(fxcut_budget_plan *p, int32_t n)
{
    fxcut_result_sizes z = fxcut_result_sizes_for(n);
    memset(p, 0, sizeof *p);
    p->candidates = xmalloc(z.candidates * sizeof *p->candidates);
    p->memories = xmalloc(z.candidates * sizeof *p->memories);
}

static void plan_free(fxcut_budget_plan *p)
{
    free(p->candidates);
    free(p->memories);
}

static int same_plan(const fxcut_budget_plan *a, const fxcut_budget_plan *b)
{
    return a->stage == b->stage && a->n_passes == b->n_passes &&
           a->n_candidates == b->n_candidates &&
           memcmp(a->candidates, b->candidates,
                  (size_t)a->n_candidates * sizeof *a->candidates) == 0 &&
           memcmp(a->memories, b->memories,
                  (size_t)a->n_candidates * sizeof *a->memories) == 0;
}

static void check_plan(const fxcut_graph *g, const fxcut_budget_plan *p,
                       const fxcut_partition_result *r)
{
    FZ_CHECK(p->stage >= FXCUT_STAGE_NO_BACKWARD &&
                 p->stage <= FXCUT_STAGE_KNAPSACK, "stage %d", p->stage);
    FZ_CHECK(p->n_passes >= 0 && p->n_passes <= 3, "%d passes", p->n_passes);
    FZ_CHECK(p->n_candidates >= 0 && p->n_candidates <= g->n,
             "%d candidates", p->n_candidates);
    FZ_CHECK(p->stage == FXCUT_STAGE_KNAPSACK || p->n_candidates == 0,
             "%d candidates at stage %d", p->n_candidates, p->stage);
    for (int32_t k = 0; k < p->n_candidates; k++) {
        int32_t i = p->candidates[k];
        FZ_CHECK(i >= 0 && i < g->n, "candidate %d = %d", k, i);
        FZ_CHECK(p->memories[k] >= 0.0, "memory %d = %g", k, p->memories[k]);
        if (k > 0) {
            int32_t j = p->candidates[k - 1];
            FZ_CHECK(g->nbytes[j] > g->nbytes[i] ||
                         (g->nbytes[j] == g->nbytes[i] && j < i),
                     "candidates %d, %d out of order", j, i);
        }
    }
    FZ_CHECK(r->n_saved >= 0 && r->n_saved <= g->n, "n_saved %d", r->n_saved);
    for (int32_t k = 0; k < r->n_saved; k++) {
        FZ_CHECK(r->saved[k] >= 0 && r->saved[k] < g->n, "saved[%d] = %d", k,
                 r->saved[k]);
        /* The inputs-and-must-save answer lists the inputs first (torch's
         * order); every cut lists graph order. */
        if (p->stage != FXCUT_STAGE_NO_CANDIDATES &&
            p->stage != FXCUT_STAGE_INPUTS)
            FZ_CHECK(k == 0 || r->saved[k - 1] < r->saved[k],
                     "saved not increasing at %d", k);
    }
}

/* The knapsack over the candidates and the final cut, as fxcut.solve.budget. */
static void knapsack_and_cut(const fxcut_graph *g,
                             const fxcut_partition_options *o,
                             const fxcut_budget_plan *p, double budget,
                             int solver)
{
    const int32_t m = p->n_candidates;
    double *runtime = xmalloc((size_t)m * sizeof *runtime);
    for (int32_t k = 0; k < m; k++)
        runtime[k] = 1.0 + (double)(k % 3);
    fxcut_knapsack_problem kp = {m, p->memories, runtime, budget};
    fxcut_knapsack_result kr = {xmalloc((size_t)m), xmalloc((size_t)m * 4),
                                0.0, 0};
    fxcut_error err;
    memset(&err, 0, sizeof err);
    int rc = fxcut_knapsack_solve(&kp, solver, &kr, &err);
    int32_t first_empty = -1; /* greedy's ratio divides by memory */
    for (int32_t k = 0; k < m && first_empty < 0; k++)
        if (p->memories[k] == 0.0)
            first_empty = k;
    if (rc != FXCUT_OK) {
        /* A capacity past the quantiser's range may fail, and greedy refuses
         * a zero-memory item (torch's greedy_knapsack divides by it), naming
         * the first one; nothing else. */
        if (solver == FXCUT_KNAPSACK_GREEDY && first_empty >= 0)
            FZ_CHECK(rc == FXCUT_E_INVALID && err.node == first_empty,
                     "greedy with item %d of memory 0 fails with %d at %d: %s",
                     first_empty, rc, (int)err.node, err.message);
        else
            FZ_CHECK(rc == FXCUT_E_OVERFLOW, "knapsack fails with %d: %s", rc,
                     err.message);
    } else {
        FZ_CHECK(solver != FXCUT_KNAPSACK_GREEDY || first_empty < 0,
                 "greedy accepted item %d of memory 0", first_empty);
        uint8_t *dont_ban = xmalloc((size_t)g->n);
        memset(dont_ban, 0, (size_t)g->n);
        for (int32_t k = 0; k < m; k++)
            if (!kr.save[k])
                dont_ban[p->candidates[k]] = 1;
        fxcut_partition_options final;
        fxcut_budget_aggressive_options(o, &final);
        final.dont_ban = dont_ban;
        final.keep_network = FXCUT_KEEP_NONE;
        fxcut_partition_result r;
        result_alloc(&r, g->n);
        rc = fxcut_partition_decide(g, &final, &r, &err);
        if (rc != FXCUT_OK)
            check_error(rc, &err);
        else
            check_decision(g, &final, &r);
        result_free(&r);
        free(dont_ban);
    }
    free(kr.save);
    free(kr.order);
    free(runtime);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fxcut_error err;
    memset(&err, 0, sizeof err);
    fuzz_input in = {data, size};
    arrays a;
    fxcut_partition_options o;
    int raw; /* fuzz_graph's concern: which inputs validate */
    decode(&in, &a, &o, &raw);
    (void)raw;
    const double budget = decode_budget(&in);
    uint8_t *storage = NULL;
    if (fz_u8(&in) & 1) {
        storage = xmalloc((size_t)a.n);
        for (int32_t i = 0; i < a.n; i++)
            storage[i] = fz_u8(&in) & 1;
    }
    const int solver = fz_u8(&in) % FXCUT_KNAPSACK_NUM_SOLVERS;
    fxcut_graph g = graph_of(&a);
    if (fxcut_graph_validate(&g, &err) != FXCUT_OK) {
        free(storage);
        arrays_free(&a);
        return 0;
    }
    fxcut_budget_options b = {budget, storage};
    fxcut_partition_result r1, r2;
    fxcut_budget_plan p1, p2;
    result_alloc(&r1, a.n);
    result_alloc(&r2, a.n);
    plan_alloc(&p1, a.n);
    plan_alloc(&p2, a.n);
    int rc = fxcut_budget_plan_decide(&g, &o, &b, &r1, &p1, &err);
    fxcut_error err2;
    memset(&err2, 0, sizeof err2);
    int rc2 = fxcut_budget_plan_decide(&g, &o, &b, &r2, &p2, &err2);
    FZ_CHECK(rc == rc2, "two runs disagree: %d then %d", rc, rc2);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
        FZ_CHECK(strcmp(err.message, err2.message) == 0,
                 "two runs give different messages");
    } else {
        check_plan(&g, &p1, &r1);
        FZ_CHECK(same_plan(&p1, &p2) && r1.n_saved == r2.n_saved &&
                     memcmp(r1.saved, r2.saved,
                            (size_t)r1.n_saved * sizeof *r1.saved) == 0,
                 "two runs plan differently");
        FZ_CHECK(r1.net_tail == NULL, "the plan kept a network");
        if (budget == 1.0 && p1.stage == FXCUT_STAGE_MIN_CUT) {
            /* Budget 1 is the plain decision (no un-bans, no network). */
            fxcut_partition_options plain = o;
            plain.dont_ban = NULL;
            plain.keep_network = FXCUT_KEEP_NONE;
            fxcut_partition_result r3;
            result_alloc(&r3, a.n);
            int rc3 = fxcut_partition_decide(&g, &plain, &r3, &err2);
            FZ_CHECK(rc3 == FXCUT_OK && r3.n_saved == r1.n_saved &&
                         memcmp(r3.saved, r1.saved,
                                (size_t)r1.n_saved * sizeof *r1.saved) == 0 &&
                         r3.cut_value_lo == r1.cut_value_lo &&
                         r3.cut_value_hi == r1.cut_value_hi,
                     "budget 1 differs from the plain decision (%d)", rc3);
            result_free(&r3);
        }
        if (p1.stage == FXCUT_STAGE_KNAPSACK)
            knapsack_and_cut(&g, &o, &p1, budget, solver);
    }
    result_free(&r1);
    result_free(&r2);
    plan_free(&p1);
    plan_free(&p2);
    free(storage);
    arrays_free(&a);
    return 0;
}
