/*
 * budget.c -- the activation memory budget, as torch's choose_saved_values_set
 * decides it, up to its knapsack.
 *
 * One prepared graph (tags, classification, dist_from_bw), cut up to three
 * times under ever fewer bans:
 *   1. the plain cut (the caller's switches).  Budget 1 stops here; so does
 *      a cut that saves no more bytes than the inputs.  The memory ratio of
 *      a cut is (its bytes - the inputs' bytes) / (the plain cut's bytes -
 *      the inputs' bytes), in torch's units (bytes / 1e9, float64).
 *   2. "more aggressive": no used-far-apart, long-fusible-chain or
 *      materialized-backward ban.  Stops when its ratio < budget.
 *   3. "aggressive": no allowlist ban either.  Stops when its ratio < budget.
 * Then the candidates: the nodes banned in cut 3 (graph order: with those
 * switches off every ban happens in the per-node loop), needed by the
 * backward (dist_from_bw < 10^9), not sharing an input's storage (unless a
 * non-builtin op torch is told to include), not MUST_SAVE; sorted by size,
 * largest first, stably.  Their memories are their sizes over the plain
 * cut's excess, in the same units.  The runtimes and the knapsack are the
 * caller's (the runtime estimate needs torch), as is the final cut.
 */
#include "partition_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The one place torch's ban relaxation is written: stage MORE_AGGRESSIVE
 * drops the used-far-apart, long-chain and materialized-backward bans,
 * AGGRESSIVE the allowlist ban too.  The budget's passes use it here;
 * config.aggressive_recomputation and the budget's final cut reach it
 * through fxcut_budget_aggressive_options (Python: _C.aggressive_options,
 * from fxcut.core.MinCutOptions.aggressive). */
static void relax(const fxcut_partition_options *opt, int stage,
                  fxcut_partition_options *out)
{
    *out = *opt;
    out->ban_if_used_far_apart = 0;
    out->ban_if_long_fusible_chains = 0;
    out->ban_if_materialized_backward = 0;
    if (stage == FXCUT_STAGE_AGGRESSIVE)
        out->ban_if_not_in_allowlist = 0;
}

void fxcut_budget_aggressive_options(const fxcut_partition_options *opt,
                                     fxcut_partition_options *out)
{
    relax(opt, FXCUT_STAGE_AGGRESSIVE, out);
}

/* torch's sum(map(_size_of, nodes)) / 1e9: an exact integer sum, then one
 * rounding to double and one division. */
static int act_size(const fxcut_graph *g, const int32_t *nodes, int32_t count,
                    double *out, fxcut_error *err)
{
    fxcut_wide total = 0;
    for (int32_t k = 0; k < count; k++) {
        int64_t s = g->nbytes[nodes[k]];
        if (s == FXCUT_SIZE_UNKNOWN)
            return fxcut_fail(err, FXCUT_E_SIZE, nodes[k],
                              "node %d has no meta['val'] to size it (the "
                              "memory budget sums the saved values' sizes)",
                              (int)nodes[k]);
        total += (fxcut_wide)s;
    }
    *out = (double)total / 1e9;
    return FXCUT_OK;
}

/* The inputs as torch lists them: primals in graph order, then the forward
 * seeds and offsets. */
static int32_t list_inputs(const fxcut_graph *g, int32_t *out)
{
    int32_t count = 0;
    for (int32_t i = 0; i < g->n; i++)
        if (fxcut_is_input(g, i) && (g->flags[i] & FXCUT_F_PRIMAL))
            out[count++] = i;
    for (int32_t i = 0; i < g->n; i++)
        if (fxcut_is_input(g, i) && !(g->flags[i] & FXCUT_F_PRIMAL))
            out[count++] = i;
    return count;
}

static void set_saved(fxcut_partition_result *res, const int32_t *nodes,
                      int32_t count)
{
    memmove(res->saved, nodes, (size_t)count * sizeof *nodes);
    res->n_saved = count;
}

/* Sort key of the candidates: size, largest first. */
static int larger(const void *nbytes, int32_t a, int32_t b)
{
    return ((const int64_t *)nbytes)[a] > ((const int64_t *)nbytes)[b];
}

/* The candidates of the knapsack, after the aggressive cut; must-save ones
 * go to must_save (graph order). */
static int list_candidates(const fxcut_ctx *c, const fxcut_budget_options *b,
                           fxcut_budget_plan *plan, int32_t *must_save,
                           int32_t *n_must_save, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    const fxcut_partition_result *res = c->res;
    int32_t count = 0, saves = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (!(res->node_class[i] & FXCUT_C_BANNED) ||
            res->dist_from_bw[i] >= FXCUT_DIST_FAR)
            continue;
        int shares_input = b->input_storage != NULL && b->input_storage[i];
        int non_builtin = c->opt->is_non_builtin_to_include &&
                          (g->flags[i] & FXCUT_F_NON_BUILTIN);
        if (shares_input && !non_builtin)
            continue;
        if (res->tag[i] == FXCUT_TAG_MUST_SAVE)
            must_save[saves++] = i;
        else
            plan->candidates[count++] = i;
    }
    for (int32_t k = 0; k < count; k++)
        if (g->nbytes[plan->candidates[k]] == FXCUT_SIZE_UNKNOWN)
            return fxcut_fail(err, FXCUT_E_SIZE, plan->candidates[k],
                              "node %d has no meta['val'] to size it (a "
                              "memory-budget candidate)",
                              (int)plan->candidates[k]);
    int32_t *tmp = malloc(((size_t)count + 1) * sizeof *tmp);
    if (tmp == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    fxcut_sort_desc_stable(plan->candidates, tmp, count, larger, g->nbytes);
    free(tmp);
    plan->n_candidates = count;
    *n_must_save = saves;
    return FXCUT_OK;
}

/* The ratio of the current cut's saved bytes, as torch's get_mem_ratio. */
static int mem_ratio(const fxcut_ctx *c, const fxcut_budget_plan *plan,
                     double *ratio, fxcut_error *err)
{
    double size = 0.0;
    int rc = act_size(c->g, c->res->saved, c->res->n_saved, &size, err);
    if (rc == FXCUT_OK)
        *ratio = (size - plan->min_act_size) /
                 (plan->max_act_size - plan->min_act_size);
    return rc;
}

/* The relaxed passes, more aggressive then aggressive; each stops the plan
 * (*fits = 1, plan->stage set) when its cut's ratio is under the budget. */
static int relaxed_passes(fxcut_ctx *c, const fxcut_partition_options *opt,
                          double budget, fxcut_budget_plan *plan, int *fits,
                          fxcut_error *err)
{
    static const int relaxed[2] = {FXCUT_STAGE_MORE_AGGRESSIVE,
                                   FXCUT_STAGE_AGGRESSIVE};
    double *const ratios[2] = {&plan->ratio_more_aggressive,
                               &plan->ratio_aggressive};
    /* The options of the last pass stay in scope: the context keeps
     * pointing at them (list_candidates reads them). */
    fxcut_partition_options *pass = &c->relaxed;
    *fits = 0;
    for (int k = 0; k < 2; k++) {
        relax(opt, relaxed[k], pass);
        int rc = fxcut_decision_cut(c, pass, err);
        plan->n_passes = 2 + k;
        if (rc == FXCUT_OK)
            rc = mem_ratio(c, plan, ratios[k], err);
        if (rc != FXCUT_OK)
            return rc;
        if (*ratios[k] < budget) {
            plan->stage = relaxed[k];
            *fits = 1;
            return FXCUT_OK;
        }
    }
    return FXCUT_OK;
}

/* The last stage: the knapsack's candidates and their memories (a share
 * of the excess over the inputs), or the inputs and the must-save nodes
 * when there is no candidate.  scratch holds the n_inputs inputs. */
static int candidate_stage(fxcut_ctx *c, const fxcut_budget_options *b,
                           fxcut_budget_plan *plan, int32_t *scratch,
                           int32_t n_inputs, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    int32_t n_must_save = 0;
    int32_t *must_save = scratch + n_inputs;
    int rc = list_candidates(c, b, plan, must_save, &n_must_save, err);
    if (rc != FXCUT_OK)
        return rc;
    if (plan->n_candidates == 0) {
        /* inputs + must-save: scratch holds them back to back. */
        set_saved(c->res, scratch, n_inputs + n_must_save);
        plan->stage = FXCUT_STAGE_NO_CANDIDATES;
        return FXCUT_OK;
    }
    const double excess = plan->max_act_size - plan->min_act_size;
    for (int32_t k = 0; k < plan->n_candidates; k++)
        plan->memories[k] =
            ((double)g->nbytes[plan->candidates[k]] / 1e9) / excess;
    plan->stage = FXCUT_STAGE_KNAPSACK;
    return FXCUT_OK;
}

static int plan_stages(fxcut_ctx *c, const fxcut_partition_options *opt,
                       const fxcut_budget_options *b, fxcut_budget_plan *plan,
                       int32_t *scratch, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    fxcut_partition_result *res = c->res;
    const double budget = b->memory_budget;
    int32_t n_inputs = list_inputs(g, scratch);
    if (budget == 0.0) {
        set_saved(res, scratch, n_inputs);
        plan->stage = FXCUT_STAGE_INPUTS;
        return FXCUT_OK;
    }
    int rc = fxcut_decision_cut(c, opt, err);
    plan->n_passes = 1;
    if (rc != FXCUT_OK)
        return rc;
    plan->stage = FXCUT_STAGE_MIN_CUT;
    if (budget == 1.0)
        return FXCUT_OK;
    rc = act_size(g, scratch, n_inputs, &plan->min_act_size, err);
    if (rc == FXCUT_OK)
        rc = act_size(g, res->saved, res->n_saved, &plan->max_act_size, err);
    if (rc != FXCUT_OK || plan->max_act_size <= plan->min_act_size)
        return rc;
    int fits = 0;
    rc = relaxed_passes(c, opt, budget, plan, &fits, err);
    if (rc != FXCUT_OK || fits)
        return rc;
    return candidate_stage(c, b, plan, scratch, n_inputs, err);
}

int fxcut_budget_plan_decide(const fxcut_graph *g,
                             const fxcut_partition_options *opt,
                             const fxcut_budget_options *bopt,
                             fxcut_partition_result *res,
                             fxcut_budget_plan *plan, fxcut_error *err)
{
    const double budget = bopt->memory_budget;
    plan->stage = FXCUT_STAGE_NO_BACKWARD;
    plan->min_act_size = plan->max_act_size = 0.0;
    plan->ratio_more_aggressive = plan->ratio_aggressive = NAN;
    plan->n_candidates = 0;
    plan->n_passes = 0;
    if (!(budget >= 0.0 && budget <= 1.0))
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "activation_memory_budget (%g) must be between 0 "
                          "and 1", budget);
    /* The passes un-ban nothing and keep no network (fxcut.h). */
    fxcut_partition_options first = *opt;
    first.dont_ban = NULL;
    first.keep_network = FXCUT_KEEP_NONE;
    first.release_graph = NULL; /* the plan reads the graph to its end */
    fxcut_ctx c;
    int rc = fxcut_decision_prepare(&c, g, &first, res, err);
    int32_t *scratch = NULL;
    if (rc == FXCUT_OK && res->n_required_bw > 0) {
        /* inputs, then must-save candidates: fewer than 2n together. */
        scratch = malloc((2 * (size_t)g->n + 1) * sizeof *scratch);
        if (scratch == NULL)
            rc = fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
        else
            rc = plan_stages(&c, &first, bopt, plan, scratch, err);
    }
    free(scratch);
    fxcut_decision_release(&c);
    return rc;
}
