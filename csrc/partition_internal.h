/*
 * partition_internal.h -- state shared by the stages of the partition
 * decision (tags.c, classify.c, bans.c, decide.c).  Not part of the API.
 */
#ifndef FXCUT_PARTITION_INTERNAL_H
#define FXCUT_PARTITION_INTERNAL_H

#include "fxcut_internal.h"
#include "maxflow.h"

/* One decision's working state.  Everything here is owned by decide.c. */
typedef struct {
    const fxcut_graph *g;
    const fxcut_partition_options *opt;
    fxcut_partition_result *res;
    int32_t *user_ptr;      /* users CSR (fxcut_graph_users) */
    int32_t *user_idx;
    int32_t *fw_order;      /* rank among required-forward nodes, or -1 */
    int32_t *fw_nodes;      /* fw_nodes[rank] = node index */
    int32_t n_fw;
    int64_t *fuse_keys;     /* sorted (b << 32 | a) of the fuse pairs */
    int32_t n_fuse_keys;
    /* scratch for the walks in bans.c */
    int32_t *stack;         /* n + 1 entries */
    int64_t *heap;          /* 2 * (n + E) + 2 entries */
    uint32_t *stamp;        /* stamp_len entries; == epoch: seen this walk */
    size_t stamp_len;       /* 2 * n + 2 */
    uint32_t epoch;
    /* The options of the memory budget's relaxed passes (budget.c): a
     * cut keeps pointing at its options (opt), so they live here. */
    fxcut_partition_options relaxed;
    /* Nonzero when no further cut follows: the scratch above is freed
     * before the max-flow allocates, which sets the peak. */
    uint8_t last_cut;
} fxcut_ctx;

static inline int fxcut_must_recompute(int8_t tag)
{
    return tag == FXCUT_TAG_MUST_RECOMPUTE ||
           tag == FXCUT_TAG_PREFER_RECOMPUTE;
}

static inline int fxcut_is_fw(const fxcut_ctx *c, int32_t i)
{
    return (c->res->node_class[i] & FXCUT_C_REQUIRED_FW) != 0;
}

/* torch's is_fusible(a, b): can b be fused with its producer a? */
int fxcut_is_fusible(const fxcut_ctx *c, int32_t a, int32_t b);

/* tags.c: recompute-tag clean-up at ac_graph_id boundaries and the forced
 * saves (collectives, effectful ops, backward-mutation sources). */
int fxcut_apply_tag_passes(fxcut_ctx *c, fxcut_error *err);

/* classify.c: required-backward (and the tangents closure), inputs,
 * required-forward (the forward-only graph after dead-code elimination),
 * fw_order and dist_from_bw. */
int fxcut_classify(fxcut_ctx *c, fxcut_error *err);

/* decide.c: one decision in stages, so that the memory-budget pass can cut
 * the same prepared graph several times.  prepare runs the tag passes and
 * the classification (res->n_required_bw == 0: nothing to cut); each cut
 * re-bans, re-weighs and re-solves under `pass` (its ban switches and
 * dont_ban), leaving the classification alone; release frees the context
 * (also after a failed prepare). */
int fxcut_decision_prepare(fxcut_ctx *c, const fxcut_graph *g,
                           const fxcut_partition_options *opt,
                           fxcut_partition_result *res, fxcut_error *err);
int fxcut_decision_cut(fxcut_ctx *c, const fxcut_partition_options *pass,
                       fxcut_error *err);
void fxcut_decision_release(fxcut_ctx *c);

/* bans.c */
int fxcut_should_ban(fxcut_ctx *c, int32_t i, fxcut_error *err);
int fxcut_ban_if_allowed(fxcut_ctx *c, int32_t i, int reason);
int fxcut_ban_used_far_apart(fxcut_ctx *c, fxcut_error *err);
int fxcut_ban_long_fusible_chains(fxcut_ctx *c, fxcut_error *err);

#endif /* FXCUT_PARTITION_INTERNAL_H */
