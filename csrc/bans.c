/*
 * bans.c -- torch's rules for banning a forward node from recomputation.
 *
 * A banned node gets an infinite source -> X_in edge: if the backward needs
 * it, it must be saved (or something downstream of it must be).  The rules,
 * each in one function: fxcut_should_ban (per-node rules), the used-far-apart
 * rule and the long-fusible-chain rule.  fxcut_ban_if_allowed is the one
 * place a ban is recorded, with the exemptions torch grants.
 */
#include "partition_internal.h"

#include <stdlib.h>
#include <string.h>

/* torch's thresholds: a node whose dist_from_bw is below NEAR_BACKWARD (a
 * node with a path to the backward) but above max_dist_from_bw is banned;
 * a fusible chain may run on for LONG_CHAIN forward positions. */
#define NEAR_BACKWARD 1000
#define LONG_CHAIN 100

int fxcut_is_fusible(const fxcut_ctx *c, int32_t a, int32_t b)
{
    const uint32_t *flags = c->g->flags;
    if (c->g->kind[b] == FXCUT_CALL_FUNCTION && (flags[b] & FXCUT_F_CAT))
        return 1;
    if ((flags[b] & FXCUT_F_MUTABLE_HOP) && c->n_fuse_keys > 0) {
        int64_t key = ((int64_t)b << 32) | (int64_t)(uint32_t)a;
        int32_t lo = 0, hi = c->n_fuse_keys;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (c->fuse_keys[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < c->n_fuse_keys && c->fuse_keys[lo] == key)
            return 1;
    }
    if (flags[a] & FXCUT_F_NO_FUSE_OUT)
        return 0;
    return (flags[a] & FXCUT_F_FUSIBLE) && (flags[b] & FXCUT_F_FUSIBLE) &&
           c->g->kind[a] == FXCUT_CALL_FUNCTION &&
           c->g->kind[b] == FXCUT_CALL_FUNCTION;
}

int fxcut_ban_if_allowed(fxcut_ctx *c, int32_t i, int reason)
{
    const uint32_t f = c->g->flags[i];
    if (f & FXCUT_F_VIEW)
        return 0;
    if (c->opt->dont_ban != NULL && c->opt->dont_ban[i]) {
        /* Collectives stay banned even when the budget pass un-bans. */
        if (c->opt->unsafe_allow_optimization_of_collectives ||
            !(f & FXCUT_F_COLLECTIVE))
            return 0;
    }
    if (fxcut_must_recompute(c->res->tag[i]))
        return 0;
    if (f & FXCUT_F_SYMFLOAT)
        return 0;
    if (!(c->res->node_class[i] & FXCUT_C_BANNED)) {
        c->res->node_class[i] |= FXCUT_C_BANNED;
        c->res->ban_reason[i] = (uint8_t)reason;
    }
    return 1;
}

/* A fresh mark for one walk: c->stamp[v] == epoch means "seen". */
static uint32_t next_epoch(fxcut_ctx *c)
{
    if (++c->epoch == 0) {
        memset(c->stamp, 0, (size_t)c->stamp_len * sizeof *c->stamp);
        c->epoch = 1;
    }
    return c->epoch;
}

/* Must the value of i exist in backward anyway?  True when some user (or a
 * user of a view of it) outside the forward cannot fuse with it. */
static int is_materialized_backward(fxcut_ctx *c, int32_t i)
{
    const uint32_t *flags = c->g->flags;
    if (flags[i] & FXCUT_F_VIEW)
        return 0;
    uint32_t epoch = next_epoch(c);
    int32_t *stack = c->stack;
    int32_t top = 0;
    stack[top++] = i;
    c->stamp[i] = epoch;
    while (top > 0) {
        int32_t cur = stack[--top];
        for (int32_t e = c->user_ptr[cur]; e < c->user_ptr[cur + 1]; e++) {
            int32_t u = c->user_idx[e];
            if (!fxcut_is_fw(c, u) && !fxcut_is_fusible(c, cur, u))
                return 1;
            if ((flags[u] & FXCUT_F_VIEW) && c->stamp[u] != epoch) {
                c->stamp[u] = epoch;
                stack[top++] = u;
            }
        }
    }
    return 0;
}

/* Byte size of node j, or -1 with err set when it is unknown. */
static int64_t size_of(const fxcut_ctx *c, int32_t j, int32_t asker,
                       fxcut_error *err)
{
    int64_t s = c->g->nbytes[j];
    if (s == FXCUT_SIZE_UNKNOWN)
        fxcut_fail(err, FXCUT_E_SIZE, j,
                   "node %d has no meta['val'] to size it (needed by the "
                   "reduction rule for node %d)", (int)j, (int)asker);
    return s;
}

/* Returns a ban reason, 0 for none, or -1 on error (err set). */
int fxcut_should_ban(fxcut_ctx *c, int32_t i, fxcut_error *err)
{
    const fxcut_graph *g = c->g;
    const fxcut_partition_options *o = c->opt;
    const uint32_t f = g->flags[i];
    if (g->kind[i] != FXCUT_CALL_FUNCTION || (f & FXCUT_F_GETITEM))
        return FXCUT_BAN_NONE;
    if (c->res->tag[i] == FXCUT_TAG_MUST_SAVE)
        return FXCUT_BAN_MUST_SAVE;
    if (o->recompute_views && (f & FXCUT_F_VIEW))
        return FXCUT_BAN_NONE;
    if (f & FXCUT_F_LIFT_FRESH)
        return FXCUT_BAN_NONE;
    if (o->ban_if_not_in_allowlist) {
        if (!(f & FXCUT_F_RECOMPUTABLE))
            return FXCUT_BAN_NOT_IN_ALLOWLIST;
    } else {
        if (f & FXCUT_F_RANDOM)
            return FXCUT_BAN_RANDOM;
        if (f & FXCUT_F_COMPUTE_INTENSIVE)
            return FXCUT_BAN_COMPUTE_INTENSIVE;
        if (o->is_non_builtin_to_include && (f & FXCUT_F_NON_BUILTIN))
            return FXCUT_BAN_NON_BUILTIN;
    }
    if (o->ban_if_materialized_backward && is_materialized_backward(c, i))
        return FXCUT_BAN_MATERIALIZED_BACKWARD;
    int64_t d = c->res->dist_from_bw[i];
    if (d < NEAR_BACKWARD && d > o->max_dist_from_bw)
        return FXCUT_BAN_FAR_FROM_BACKWARD;
    if (o->ban_if_reduction) {
        /* Exact: up to 2^31 sizes below 2^63 sum below 2^94. */
        fxcut_wide inputs = 0;
        for (int32_t e = g->arg_ptr[i]; e < g->arg_ptr[i + 1]; e++) {
            int64_t s = size_of(c, g->arg_idx[e], i, err);
            if (s < 0)
                return -1;
            inputs += (fxcut_wide)s;
        }
        int64_t out = size_of(c, i, i, err);
        if (out < 0)
            return -1;
        if ((fxcut_wide)out * 4 < inputs)
            return FXCUT_BAN_REDUCTION;
    }
    return FXCUT_BAN_NONE;
}

/* ---- a binary min-heap of int64 keys over c->heap ---------------------- */

static void heap_push(int64_t *heap, int32_t *len, int64_t key)
{
    int32_t k = (*len)++;
    while (k > 0) {
        int32_t parent = (k - 1) / 2;
        if (heap[parent] <= key)
            break;
        heap[k] = heap[parent];
        k = parent;
    }
    heap[k] = key;
}

static int64_t heap_pop(int64_t *heap, int32_t *len)
{
    int64_t top = heap[0];
    int64_t last = heap[--(*len)];
    int32_t k = 0, n = *len;
    for (;;) {
        int32_t child = 2 * k + 1;
        if (child >= n)
            break;
        if (child + 1 < n && heap[child + 1] < heap[child])
            child++;
        if (heap[child] >= last)
            break;
        heap[k] = heap[child];
        k = child;
    }
    if (n > 0)
        heap[k] = last;
    return top;
}

/*
 * The forward order of the first node, in forward order, reached from the
 * users of `used` through fusible edges and entered through an unfusible
 * one; max_range when none is within max_range.  Heap keys are
 * 2 * fw_order + fusible, so at equal order the unfusible entry pops first,
 * as torch's (order, node, is_fusible) tuples do; each (node, fusible) pair
 * is pushed once.
 */
static int32_t find_first_unfusible(fxcut_ctx *c, int32_t used,
                                    int32_t max_range)
{
    uint32_t epoch = next_epoch(c);
    int64_t *heap = c->heap;
    int32_t len = 0;
    for (int32_t e = c->user_ptr[used]; e < c->user_ptr[used + 1]; e++) {
        int32_t u = c->user_idx[e];
        if (!fxcut_is_fw(c, u))
            continue;
        int64_t key = 2 * (int64_t)c->fw_order[u] + 1;
        c->stamp[key] = epoch;
        heap_push(heap, &len, key);
    }
    while (len > 0) {
        int64_t key = heap_pop(heap, &len);
        int32_t order = (int32_t)(key / 2);
        if ((key & 1) == 0)
            return order;
        int32_t cur = c->fw_nodes[order];
        for (int32_t e = c->user_ptr[cur]; e < c->user_ptr[cur + 1]; e++) {
            int32_t u = c->user_idx[e];
            if (!fxcut_is_fw(c, u) || c->fw_order[u] > max_range)
                continue;
            int64_t k2 = 2 * (int64_t)c->fw_order[u] + fxcut_is_fusible(c, cur, u);
            if (c->stamp[k2] != epoch) {
                c->stamp[k2] = epoch;
                heap_push(heap, &len, k2);
            }
        }
    }
    return max_range;
}

/*
 * A node used both near and far downstream in the forward: recomputing the
 * far users is unlikely to fuse with the near ones, so every fusible user
 * beyond the first unfusible use is banned.
 */
int fxcut_ban_used_far_apart(fxcut_ctx *c, fxcut_error *err)
{
    (void)err;
    for (int32_t r = 0; r < c->n_fw; r++) {
        int32_t used = c->fw_nodes[r];
        int32_t max_order = -1;
        for (int32_t e = c->user_ptr[used]; e < c->user_ptr[used + 1]; e++) {
            int32_t u = c->user_idx[e];
            if (fxcut_is_fw(c, u) && c->fw_order[u] > max_order)
                max_order = c->fw_order[u];
        }
        if (max_order < 0)
            continue;
        int32_t first = find_first_unfusible(c, used, max_order);
        for (int32_t e = c->user_ptr[used]; e < c->user_ptr[used + 1]; e++) {
            int32_t u = c->user_idx[e];
            if (fxcut_is_fw(c, u) && c->fw_order[u] > first &&
                fxcut_is_fusible(c, used, u) &&
                !(c->res->node_class[u] & FXCUT_C_BANNED))
                fxcut_ban_if_allowed(c, u, FXCUT_BAN_USED_FAR_APART);
        }
    }
    return FXCUT_OK;
}

/*
 * No chain of fusible forward ops may run on for more than 100 forward
 * positions: from each forward node, walk its fusible users in forward
 * order (one global visited set, as torch's); when the walk is down to its
 * last node and that node is over 100 positions on, ban it and stop.
 */
int fxcut_ban_long_fusible_chains(fxcut_ctx *c, fxcut_error *err)
{
    (void)err;
    uint32_t epoch = next_epoch(c); /* stamp[2 * v] == epoch: visited */
    int64_t *heap = c->heap;
    for (int32_t r = 0; r < c->n_fw; r++) {
        int32_t len = 0;
        heap_push(heap, &len, r);
        while (len > 0) {
            int32_t order = (int32_t)heap_pop(heap, &len);
            int32_t cur = c->fw_nodes[order];
            if (c->stamp[2 * (size_t)cur] == epoch)
                continue;
            c->stamp[2 * (size_t)cur] = epoch;
            if (order > r + LONG_CHAIN && len == 0) {
                fxcut_ban_if_allowed(c, cur, FXCUT_BAN_LONG_FUSIBLE_CHAIN);
                break;
            }
            for (int32_t e = c->user_ptr[cur]; e < c->user_ptr[cur + 1]; e++) {
                int32_t u = c->user_idx[e];
                if (fxcut_is_fw(c, u) && fxcut_is_fusible(c, cur, u) &&
                    !(c->res->node_class[u] & FXCUT_C_BANNED))
                    heap_push(heap, &len, c->fw_order[u]);
            }
        }
    }
    return FXCUT_OK;
}
