/*
 * tags.c -- the recompute-tag passes torch runs before classifying nodes.
 *
 * All of them only ever turn a tag into MUST_SAVE, in this order:
 *  1. clean-up at ac_graph_id boundaries: a recompute-tagged node whose
 *     recompute-tagged user belongs to a later checkpoint region is saved
 *     (two adjacent checkpointed blocks still stash their boundary), and so
 *     is an AC-region output with a backward hook and no recomputed user;
 *  2. collectives are saved unless the user asked to recompute them;
 *  3. the non-tuple getitem outputs of effectful ops are saved;
 *  4. sources of mutations applied in both forward and backward are saved
 *     (found by Python: opt->force_save).
 */
#include "partition_internal.h"

#include <stdlib.h>
#include <string.h>

static void cleanup_at_region_boundaries(fxcut_ctx *c, int8_t *tag)
{
    const fxcut_graph *g = c->g;
    for (int32_t i = 0; i < g->n; i++) {
        if (!fxcut_must_recompute(tag[i]))
            continue;
        int any_recomputed_user = 0;
        for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1]; e++) {
            int32_t u = c->user_idx[e];
            if (!fxcut_must_recompute(tag[u]))
                continue;
            any_recomputed_user = 1;
            if ((g->flags[u] & FXCUT_F_HAS_AC_ID) &&
                (g->flags[i] & FXCUT_F_HAS_AC_ID) &&
                g->ac_graph_id[u] > g->ac_graph_id[i])
                tag[i] = FXCUT_TAG_MUST_SAVE;
        }
        if ((g->flags[i] & FXCUT_F_BW_HOOK) && !any_recomputed_user)
            tag[i] = FXCUT_TAG_MUST_SAVE;
    }
}

static void save_collectives(fxcut_ctx *c, int8_t *tag)
{
    for (int32_t i = 0; i < c->g->n; i++)
        if ((c->g->flags[i] & FXCUT_F_COLLECTIVE) &&
            !fxcut_must_recompute(tag[i]))
            tag[i] = FXCUT_TAG_MUST_SAVE;
}

/* The getitem descendants (through chains of getitems) of every effectful
 * op; those whose value is not itself a tuple are saved.  Marking is
 * idempotent, so each node is expanded once (`seen`) in any order. */
static int save_effectful_outputs(fxcut_ctx *c, int8_t *tag)
{
    const fxcut_graph *g = c->g;
    int32_t *stack = NULL;
    uint8_t *seen = NULL;
    for (int32_t i = 0; i < g->n; i++) {
        if (!(g->flags[i] & FXCUT_F_WITH_EFFECTS) ||
            fxcut_must_recompute(tag[i]) ||
            (g->flags[i] & FXCUT_F_IS_BACKWARD_TAG))
            continue;
        if (stack == NULL) {
            stack = malloc(((size_t)g->n + 1) * sizeof *stack);
            seen = calloc((size_t)g->n + 1, 1);
            if (stack == NULL || seen == NULL) {
                free(stack);
                free(seen);
                return FXCUT_E_NOMEM;
            }
        }
        int32_t top = 0;
        stack[top++] = i;
        while (top > 0) {
            int32_t cur = stack[--top];
            for (int32_t e = c->user_ptr[cur]; e < c->user_ptr[cur + 1]; e++) {
                int32_t u = c->user_idx[e];
                if (!(g->flags[u] & FXCUT_F_GETITEM) ||
                    g->kind[u] != FXCUT_CALL_FUNCTION)
                    continue;
                if (!(g->flags[u] & FXCUT_F_VAL_IS_SEQ))
                    tag[u] = FXCUT_TAG_MUST_SAVE;
                if (!seen[u]) {
                    seen[u] = 1;
                    stack[top++] = u;
                }
            }
        }
    }
    free(stack);
    free(seen);
    return FXCUT_OK;
}

int fxcut_apply_tag_passes(fxcut_ctx *c, fxcut_error *err)
{
    int8_t *tag = c->res->tag;
    memcpy(tag, c->g->tag, (size_t)c->g->n);
    cleanup_at_region_boundaries(c, tag);
    if (!c->opt->unsafe_allow_optimization_of_collectives)
        save_collectives(c, tag);
    if (save_effectful_outputs(c, tag) != FXCUT_OK)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory walking effectful ops");
    for (int32_t k = 0; k < c->opt->n_force_save; k++) {
        int32_t i = c->opt->force_save[k];
        if (i < 0 || i >= c->g->n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "force_save[%d] = %d is outside [0, %d)",
                              (int)k, (int)i, (int)c->g->n);
        tag[i] = FXCUT_TAG_MUST_SAVE;
    }
    return FXCUT_OK;
}
