/*
 * classify.c -- which nodes the forward needs, which the backward needs,
 * and how far each forward node is from the backward.
 *
 * required_bw: the tangents and the nodes that must run in backward, closed
 *   over their users (graph order is topological, so one pass suffices);
 *   that closure is the tangents_closure.  The backward outputs are added
 *   after it is taken.
 * required_fw: the nodes of the forward-only graph torch extracts from the
 *   inputs (primals, forward seeds) to the forward outputs: a node is valid
 *   when all its inputs are, and it is kept when it is impure, a forward
 *   output, or feeds a kept node (the extraction's dead-code elimination).
 * dist_from_bw: 0 off the forward, else 1 + the least distance of a user;
 *   the output node and user-less forward nodes count as 10^9.
 */
#include "partition_internal.h"

#include <stdlib.h>
#include <string.h>

static int32_t classify_backward(fxcut_ctx *c)
{
    const fxcut_graph *g = c->g;
    uint8_t *cls = c->res->node_class;
    for (int32_t i = 0; i < g->n; i++) {
        if ((g->kind[i] == FXCUT_PLACEHOLDER &&
             (g->flags[i] & FXCUT_F_TANGENT)) ||
            (g->flags[i] & FXCUT_F_MUST_BE_IN_BW))
            cls[i] |= FXCUT_C_REQUIRED_BW;
        if (cls[i] & FXCUT_C_REQUIRED_BW)
            for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1]; e++)
                cls[c->user_idx[e]] |= FXCUT_C_REQUIRED_BW;
    }
    for (int32_t i = 0; i < g->n; i++)
        if (cls[i] & FXCUT_C_REQUIRED_BW)
            cls[i] |= FXCUT_C_TANGENTS_CLOSURE;
    for (int32_t k = c->opt->num_fwd_outputs; k < g->n_outputs; k++) {
        int32_t o = g->outputs[k];
        if (o >= 0 && g->kind[o] != FXCUT_OUTPUT)
            cls[o] |= FXCUT_C_REQUIRED_BW;
    }
    int32_t count = 0;
    for (int32_t i = 0; i < g->n; i++)
        count += (cls[i] & FXCUT_C_REQUIRED_BW) != 0;
    return count;
}

/* Forward states of classify_forward. */
enum { FW_INVALID = 0, FW_VALID = 1, FW_KEPT = 2 };

/* The extraction's valid nodes: the inputs and get_attrs, and the calls
 * whose inputs are all valid (none that must be in the backward). */
static void mark_forward_valid(fxcut_ctx *c, uint8_t *state)
{
    const fxcut_graph *g = c->g;
    uint8_t *cls = c->res->node_class;
    for (int32_t i = 0; i < g->n; i++) {
        uint32_t f = g->flags[i];
        if (fxcut_is_input(g, i)) {
            cls[i] |= FXCUT_C_INPUT;
            state[i] = FW_VALID;
        } else if (f & FXCUT_F_MUST_BE_IN_BW) {
            state[i] = FW_INVALID;
        } else if (g->kind[i] == FXCUT_CALL_FUNCTION) {
            uint8_t ok = 1;
            for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1] && ok; e++)
                ok = state[g->in_idx[e]] != FW_INVALID;
            state[i] = ok;
        } else if (g->kind[i] == FXCUT_GET_ATTR) {
            state[i] = FW_VALID;
        }
    }
}

/* The extraction's dead-code elimination: valid placeholders and impure
 * nodes are kept, and every valid node feeding a kept one. */
static void keep_forward_needed(fxcut_ctx *c, uint8_t *state)
{
    const fxcut_graph *g = c->g;
    for (int32_t i = g->n - 1; i >= 0; i--) {
        if (state[i] == FW_INVALID)
            continue;
        if (state[i] != FW_KEPT &&
            (g->kind[i] == FXCUT_PLACEHOLDER ||
             (g->flags[i] & FXCUT_F_IMPURE)))
            state[i] = FW_KEPT;
        if (state[i] != FW_KEPT)
            for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1]; e++)
                if (state[c->user_idx[e]] == FW_KEPT) {
                    state[i] = FW_KEPT;
                    break;
                }
    }
}

/* The kept nodes (but the output) are REQUIRED_FW, numbered in graph
 * order into c->fw_order / c->fw_nodes. */
static void number_forward_nodes(fxcut_ctx *c, const uint8_t *state)
{
    const fxcut_graph *g = c->g;
    uint8_t *cls = c->res->node_class;
    int32_t rank = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (state[i] == FW_KEPT && g->kind[i] != FXCUT_OUTPUT) {
            cls[i] |= FXCUT_C_REQUIRED_FW;
            c->fw_order[i] = rank;
            c->fw_nodes[rank++] = i;
        } else {
            c->fw_order[i] = -1;
        }
    }
    c->n_fw = rank;
}

static int classify_forward(fxcut_ctx *c, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    uint8_t *state = calloc((size_t)g->n + 1, 1); /* FW_INVALID */
    if (state == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory classifying %d nodes", (int)g->n);
    mark_forward_valid(c, state);
    for (int32_t k = 0; k < c->opt->num_fwd_outputs; k++) {
        int32_t o = g->outputs[k];
        if (o < 0)
            continue;
        if (state[o] == FW_INVALID) {
            free(state);
            return fxcut_fail(err, FXCUT_E_UNSUPPORTED, o,
                              "forward output %d (node %d) depends on a "
                              "value only the backward has", (int)k, (int)o);
        }
        state[o] = FW_KEPT;
    }
    keep_forward_needed(c, state);
    number_forward_nodes(c, state);
    free(state);
    return FXCUT_OK;
}

static void compute_dist_from_bw(fxcut_ctx *c)
{
    const fxcut_graph *g = c->g;
    int64_t *dist = c->res->dist_from_bw;
    for (int32_t i = g->n - 1; i >= 0; i--) {
        if (g->kind[i] == FXCUT_OUTPUT) {
            dist[i] = FXCUT_DIST_FAR;
        } else if (!fxcut_is_fw(c, i)) {
            dist[i] = 0;
        } else {
            int64_t d = FXCUT_DIST_FAR;
            for (int32_t e = c->user_ptr[i]; e < c->user_ptr[i + 1]; e++) {
                int64_t via = dist[c->user_idx[e]] + 1;
                if (via < d)
                    d = via;
            }
            dist[i] = d;
        }
    }
}

int fxcut_classify(fxcut_ctx *c, fxcut_error *err)
{
    memset(c->res->node_class, 0, (size_t)c->g->n);
    c->res->n_required_bw = classify_backward(c);
    int rc = classify_forward(c, err);
    if (rc != FXCUT_OK)
        return rc;
    compute_dist_from_bw(c);
    return FXCUT_OK;
}
