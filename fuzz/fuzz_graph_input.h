/*
 * fuzz_graph_input.h -- what the graph fuzz targets (fuzz_graph.c,
 * fuzz_budget.c) share: the decoding of arbitrary bytes into a graph
 * array and partition options, and the checks of a decision.
 *
 * Input format (every read past the end is 0):
 *   u8 n                        nodes (0 .. 255)
 *   u8 options                  bit k: ban_if_used_far_apart,
 *                               ban_if_long_fusible_chains,
 *                               ban_if_materialized_backward,
 *                               ban_if_not_in_allowlist, ban_if_reduction,
 *                               recompute_views,
 *                               treat_parameters_as_free_to_save,
 *                               is_non_builtin_to_include
 *   u8 mode                     bit 0 unsafe_allow_optimization_of_
 *                               collectives; bits 1-2 keep_network (3 -> 0);
 *                               bit 3 static_lifetime given; bit 4 dont_ban
 *                               given; bit 5 raw: kinds, tags, indices and
 *                               CSR pointers are taken as they come (mostly
 *                               invalid, for the validator), else mapped
 *                               into range
 *   u16 max_dist_from_bw
 *   per node i:
 *     u8 kind, u32 flags, u8 tag, u8 ac_graph_id, u8 size code (see
 *     decode_size), u8 masks (bit 0 static_lifetime, bit 1 dont_ban),
 *     u8 n_args (% 5), n_args x u8 arg, u8 n_extra (% 4), n_extra x u8 in
 *     (the node's inputs are its args and extras, each once)
 *   u8 n_outputs, n_outputs x u8 output (255 -> -1)
 *   u8 num_fwd_outputs
 *   u8 n_force_save, that many u8 node indices
 *   u8 n_fuse_pairs, that many (u8 a, u8 b)
 *   u8 n_params, that many u8 node indices
 */
#ifndef FXCUT_FUZZ_GRAPH_INPUT_H
#define FXCUT_FUZZ_GRAPH_INPUT_H

#include "fxcut_internal.h"
#include "maxflow.h"
#include "fuzz_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 5
#define MAX_EXTRA 4

typedef struct {
    int32_t n;
    uint8_t *kind;
    uint32_t *flags;
    int8_t *tag;
    int32_t *ac_graph_id;
    int64_t *nbytes;
    int32_t *arg_ptr, *arg_idx;
    int32_t *in_ptr, *in_idx;
    int32_t n_outputs;
    int32_t *outputs;
    uint8_t *static_lifetime, *dont_ban;
    int32_t n_force, *force;
    int32_t n_fuse, *fuse_a, *fuse_b;
    int32_t n_params, *params;
} arrays;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

static void *exact(void *p, size_t n)
{
    void *q = xmalloc(n);
    memcpy(q, p, n);
    free(p);
    return q;
}

static void arrays_free(arrays *a)
{
    free(a->kind);
    free(a->flags);
    free(a->tag);
    free(a->ac_graph_id);
    free(a->nbytes);
    free(a->arg_ptr);
    free(a->arg_idx);
    free(a->in_ptr);
    free(a->in_idx);
    free(a->outputs);
    free(a->static_lifetime);
    free(a->dont_ban);
    free(a->force);
    free(a->fuse_a);
    free(a->fuse_b);
    free(a->params);
}

/* Small sizes mostly; the extremes sometimes. */
static int64_t decode_size(fuzz_input *in)
{
    uint8_t code = fz_u8(in);
    switch (code) {
    case 0:
        return FXCUT_SIZE_UNKNOWN;
    case 251:
        return INT64_MAX;
    case 252:
        return (int64_t)1 << 62;
    case 253:
        return (int64_t)fz_u64(in); /* anything, negatives included */
    case 254:
        return 0;
    case 255:
        return (int64_t)1 << 40;
    default:
        return (int64_t)code * 64;
    }
}

/* A node index as node i sees it: an earlier node (valid), or raw. */
static int32_t decode_ref(fuzz_input *in, int32_t i, int raw)
{
    uint8_t b = fz_u8(in);
    if (raw)
        return (int32_t)(int8_t)b * 3; /* negatives, self, later nodes */
    return i > 0 ? (int32_t)(b % i) : 0;
}

static void decode(fuzz_input *in, arrays *a, fxcut_partition_options *o,
                   int *raw_out)
{
    memset(a, 0, sizeof *a);
    memset(o, 0, sizeof *o);
    const int32_t n = fz_u8(in);
    const uint8_t bits = fz_u8(in), mode = fz_u8(in);
    const int raw = (mode >> 5) & 1;
    *raw_out = raw;
    o->ban_if_used_far_apart = bits & 1;
    o->ban_if_long_fusible_chains = (bits >> 1) & 1;
    o->ban_if_materialized_backward = (bits >> 2) & 1;
    o->ban_if_not_in_allowlist = (bits >> 3) & 1;
    o->ban_if_reduction = (bits >> 4) & 1;
    o->recompute_views = (bits >> 5) & 1;
    o->treat_parameters_as_free_to_save = (bits >> 6) & 1;
    o->is_non_builtin_to_include = (bits >> 7) & 1;
    o->unsafe_allow_optimization_of_collectives = mode & 1;
    o->keep_network = (uint8_t)(((mode >> 1) & 3) % 3);
    o->max_dist_from_bw = fz_u16(in);

    a->n = n;
    size_t un = (size_t)n;
    a->kind = xmalloc(un);
    a->flags = xmalloc(un * sizeof *a->flags);
    a->tag = xmalloc(un);
    a->ac_graph_id = xmalloc(un * sizeof *a->ac_graph_id);
    a->nbytes = xmalloc(un * sizeof *a->nbytes);
    a->arg_ptr = xmalloc((un + 1) * sizeof *a->arg_ptr);
    a->in_ptr = xmalloc((un + 1) * sizeof *a->in_ptr);
    a->arg_idx = xmalloc(un * MAX_ARGS * sizeof *a->arg_idx);
    a->in_idx = xmalloc(un * (MAX_ARGS + MAX_EXTRA) * sizeof *a->in_idx);
    a->static_lifetime = (mode & 8) ? xmalloc(un) : NULL;
    a->dont_ban = (mode & 16) ? xmalloc(un) : NULL;
    int32_t n_arg = 0, n_in = 0;
    a->arg_ptr[0] = a->in_ptr[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t k = fz_u8(in);
        a->kind[i] = raw ? k : (uint8_t)(k % FXCUT_NUM_KINDS);
        a->flags[i] = fz_u32(in);
        uint8_t t = fz_u8(in);
        a->tag[i] = raw ? (int8_t)t : (int8_t)(t % (FXCUT_TAG_MAX + 2) - 1);
        a->ac_graph_id[i] = fz_u8(in);
        a->nbytes[i] = decode_size(in);
        uint8_t masks = fz_u8(in);
        if (a->static_lifetime)
            a->static_lifetime[i] = masks & 1;
        if (a->dont_ban)
            a->dont_ban[i] = (masks >> 1) & 1;
        int32_t first_in = n_in;
        int32_t n_args = fz_u8(in) % MAX_ARGS;
        for (int32_t k2 = 0; k2 < n_args && (i > 0 || raw); k2++) {
            int32_t j = decode_ref(in, i, raw);
            a->arg_idx[n_arg++] = j;
            int dup = 0;
            for (int32_t e = first_in; e < n_in && !raw; e++)
                dup |= a->in_idx[e] == j;
            if (!dup)
                a->in_idx[n_in++] = j;
        }
        int32_t n_extra = fz_u8(in) % MAX_EXTRA;
        for (int32_t k2 = 0; k2 < n_extra && (i > 0 || raw); k2++) {
            int32_t j = decode_ref(in, i, raw);
            int dup = 0;
            for (int32_t e = first_in; e < n_in && !raw; e++)
                dup |= a->in_idx[e] == j;
            if (!dup)
                a->in_idx[n_in++] = j;
        }
        a->arg_ptr[i + 1] = n_arg;
        a->in_ptr[i + 1] = n_in;
    }
    /* The index arrays at their exact length, so ASan sees any read past
     * ptr[n]. */
    a->arg_idx = exact(a->arg_idx, (size_t)n_arg * sizeof *a->arg_idx);
    a->in_idx = exact(a->in_idx, (size_t)n_in * sizeof *a->in_idx);
    if (raw && n > 1) {
        /* A broken pointer array, within the index arrays' real length. */
        uint8_t which = fz_u8(in);
        int32_t at = 1 + (int32_t)(which % (uint32_t)(n - 1));
        if (which & 1)
            a->arg_ptr[at] = (int32_t)(int8_t)fz_u8(in);
        else
            a->in_ptr[at] = (int32_t)(int8_t)fz_u8(in);
    }
    a->n_outputs = fz_u8(in);
    a->outputs = xmalloc((size_t)a->n_outputs * sizeof *a->outputs);
    for (int32_t k = 0; k < a->n_outputs; k++) {
        uint8_t b = fz_u8(in);
        if (raw)
            a->outputs[k] = (int32_t)(int8_t)b * 5;
        else
            a->outputs[k] = b == 255 || n == 0 ? -1 : (int32_t)(b % n);
    }
    uint8_t nfw = fz_u8(in);
    o->num_fwd_outputs = raw ? nfw : (int32_t)(nfw % (a->n_outputs + 1));
    a->n_force = fz_u8(in) % 8;
    a->force = xmalloc((size_t)a->n_force * sizeof *a->force);
    for (int32_t k = 0; k < a->n_force; k++) {
        uint8_t b = fz_u8(in);
        a->force[k] = raw ? (int32_t)(int8_t)b : (n ? (int32_t)(b % n) : 0);
    }
    a->n_fuse = fz_u8(in) % 8;
    a->fuse_a = xmalloc((size_t)a->n_fuse * sizeof *a->fuse_a);
    a->fuse_b = xmalloc((size_t)a->n_fuse * sizeof *a->fuse_b);
    for (int32_t k = 0; k < a->n_fuse; k++) {
        uint8_t x = fz_u8(in), y = fz_u8(in);
        a->fuse_a[k] = raw ? (int32_t)(int8_t)x : (n ? (int32_t)(x % n) : 0);
        a->fuse_b[k] = raw ? (int32_t)(int8_t)y : (n ? (int32_t)(y % n) : 0);
    }
    a->n_params = fz_u8(in) % 8;
    a->params = xmalloc((size_t)a->n_params * sizeof *a->params);
    for (int32_t k = 0; k < a->n_params; k++) {
        uint8_t b = fz_u8(in);
        a->params[k] = raw ? (int32_t)(int8_t)b : (n ? (int32_t)(b % n) : 0);
    }
    o->static_lifetime = a->static_lifetime;
    o->dont_ban = a->dont_ban;
    o->force_save = a->force;
    o->n_force_save = a->n_force;
    o->fuse_pair_a = a->fuse_a;
    o->fuse_pair_b = a->fuse_b;
    o->n_fuse_pairs = a->n_fuse;
}

static fxcut_graph graph_of(const arrays *a)
{
    fxcut_graph g = {a->n, a->kind, a->flags, a->tag, a->ac_graph_id,
                     a->nbytes, a->arg_ptr, a->arg_idx, a->in_ptr,
                     a->in_idx, a->n_outputs, a->outputs};
    return g;
}

static void check_error(int rc, const fxcut_error *err)
{
    /* FXCUT_E_INTERNAL (a broken invariant of the core) is a bug. */
    FZ_CHECK(rc > FXCUT_OK && rc <= FXCUT_E_UNSUPPORTED, "bad code %d: %s", rc,
             err->message);
    FZ_CHECK(err->code == rc, "err->code %d, rc %d", err->code, rc);
    FZ_CHECK(memchr(err->message, 0, sizeof err->message) != NULL,
             "unterminated message");
    FZ_CHECK(err->message[0] != 0, "empty message for code %d", rc);
    FZ_CHECK(rc != FXCUT_E_NOMEM, "out of memory on a tiny graph");
}

/* The result arrays, each at exactly the size the core asks for
 * (fxcut_result_sizes_for, the rule the binding allocates by too). */
static inline void result_alloc(fxcut_partition_result *r, int32_t n)
{
    fxcut_result_sizes z = fxcut_result_sizes_for(n);
    memset(r, 0, sizeof *r);
    r->tag = xmalloc(z.per_node);
    r->node_class = xmalloc(z.per_node);
    r->ban_reason = xmalloc(z.per_node);
    r->dist_from_bw = xmalloc(z.per_node * sizeof *r->dist_from_bw);
    r->weight = xmalloc(z.per_node * sizeof *r->weight);
    r->saved = xmalloc(z.saved * sizeof *r->saved);
    r->chain = xmalloc(z.chain * sizeof *r->chain);
}

static inline void result_free(fxcut_partition_result *r)
{
    fxcut_partition_result_release(r);
    free(r->tag);
    free(r->node_class);
    free(r->ban_reason);
    free(r->dist_from_bw);
    free(r->weight);
    free(r->saved);
    free(r->chain);
}

static inline void check_decision(const fxcut_graph *g,
                           const fxcut_partition_options *o,
                           const fxcut_partition_result *r)
{
    const int32_t n = g->n;
    FZ_CHECK(r->n_saved >= 0 && r->n_saved <= n, "n_saved %d", r->n_saved);
    FZ_CHECK(r->n_required_bw >= 0 && r->n_required_bw <= n,
             "n_required_bw %d", r->n_required_bw);
    if (r->n_required_bw == 0)
        FZ_CHECK(r->n_saved == 0, "saved %d with no backward", r->n_saved);
    int32_t n_marked = 0;
    fxcut_u128 sum = {0, 0};
    for (int32_t i = 0; i < n; i++) {
        FZ_CHECK(r->tag[i] >= FXCUT_TAG_NONE && r->tag[i] <= FXCUT_TAG_MAX,
                 "tag[%d] = %d", i, r->tag[i]);
        FZ_CHECK(r->ban_reason[i] <= FXCUT_BAN_LONG_FUSIBLE_CHAIN,
                 "ban_reason[%d] = %d", i, r->ban_reason[i]);
        if (r->n_required_bw == 0)
            continue;
        FZ_CHECK(r->weight[i] >= FXCUT_WEIGHT_NONE, "weight[%d] = %lld", i,
                 (long long)r->weight[i]);
        if (r->node_class[i] & FXCUT_C_SAVED) {
            n_marked++;
            FZ_CHECK(r->weight[i] >= 0, "saved node %d has weight %lld", i,
                     (long long)r->weight[i]);
            fxcut_u128_add(&sum, (uint64_t)r->weight[i]);
        }
    }
    for (int32_t k = 0; k < r->n_saved; k++) {
        int32_t i = r->saved[k];
        FZ_CHECK(i >= 0 && i < n, "saved[%d] = %d of %d", k, i, n);
        FZ_CHECK(k == 0 || r->saved[k - 1] < i, "saved not increasing at %d",
                 k);
        FZ_CHECK(r->node_class[i] & FXCUT_C_SAVED, "saved %d not marked", i);
        FZ_CHECK(g->kind[i] != FXCUT_OUTPUT, "the output node is saved");
    }
    FZ_CHECK(n_marked == r->n_saved, "%d marked SAVED, %d saved", n_marked,
             r->n_saved);
    if (r->n_required_bw > 0 && o->keep_network != FXCUT_KEEP_BUILD_ONLY)
        FZ_CHECK(sum.hi == r->cut_value_hi && sum.lo == r->cut_value_lo,
                 "cut value (%llu, %llu) is not the saved weight (%llu, %llu)",
                 (unsigned long long)r->cut_value_hi,
                 (unsigned long long)r->cut_value_lo,
                 (unsigned long long)sum.hi, (unsigned long long)sum.lo);
}

#endif /* FXCUT_FUZZ_GRAPH_INPUT_H */
