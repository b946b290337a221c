/* memory.c -- the memory model: torch's module extraction emulated on the
 * graph array, then a liveness walk of the forward and backward modules.
 * The semantics are stated above fxcut_memory_options (fxcut.h). */
#include "memory_internal.h"
#include "fxcut_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>



static int is_source(const fxcut_graph *g, int32_t i)
{
    return g->kind[i] == FXCUT_PLACEHOLDER;
}

static int is_bw_input_placeholder(const fxcut_graph *g, int32_t i)
{
    return g->kind[i] == FXCUT_PLACEHOLDER &&
           (g->flags[i] & (FXCUT_F_TANGENT | FXCUT_F_BWD_SEED)) != 0;
}

static int forward_only(const fxcut_memsim *s, int32_t i)
{
    return s->marks != NULL && (s->marks[i] & FXCUT_X_MUST_FW) != 0;
}

static int is_copy(const fxcut_memsim *s, int32_t i)
{
    return s->marks != NULL && (s->marks[i] & FXCUT_X_COPY) != 0;
}

static int is_computed_kind(const fxcut_graph *g, int32_t i)
{
    uint8_t k = g->kind[i];
    return k != FXCUT_PLACEHOLDER && k != FXCUT_OUTPUT;
}

void fxcut_memsim_free(fxcut_memsim *s)
{
    if (s == NULL)
        return;
    void *ptrs[] = {s->root, s->cost, s->tangent_dep, s->user_ptr,
                    s->user_idx, s->mark, s->body, s->order, s->stack,
                    s->found, s->last, s->charge, s->realized, s->donated,
                    s->inlined_reads, s->read_set, s->read_n,
                    s->inlined_ops, s->inlined_heavy,
                    s->visit, s->kernels, s->group_of, s->made_in,
                    s->read_in, s->group_reads, s->leaf_ptr, s->leaf_end,
                    s->leaf_idx};
    fxcut_free_each(ptrs, sizeof ptrs / sizeof ptrs[0]);
    free(s);
}

/* The scratch arrays every evaluation uses, n + 1 entries each (the stack
 * more under the inductor model).  Returns 1 when all were allocated; the
 * caller frees s either way. */
static int alloc_walk_arrays(fxcut_memsim *s, const fxcut_graph *g,
                             const fxcut_memory_options *opt)
{
    size_t m = (size_t)g->n + 1;
    s->root = malloc(m * sizeof *s->root);
    s->cost = malloc(m * sizeof *s->cost);
    s->tangent_dep = malloc(m);
    s->mark = malloc(m);
    s->body = malloc(m * sizeof *s->body);
    s->order = malloc(m * sizeof *s->order);
    /* the inductor model's walks through inlined values push a node once
     * per edge reaching it before it is visited: up to n + edges entries */
    size_t stack_len = m + (opt->fusion != NULL ? (size_t)g->in_ptr[g->n] : 0);
    s->stack = malloc(stack_len * sizeof *s->stack);
    s->found = malloc(m * sizeof *s->found);
    s->last = malloc(m * sizeof *s->last);
    s->charge = malloc(m * sizeof *s->charge);
    return s->root != NULL && s->cost != NULL && s->tangent_dep != NULL &&
           s->mark != NULL && s->body != NULL && s->order != NULL &&
           s->stack != NULL && s->found != NULL && s->last != NULL &&
           s->charge != NULL;
}

/* Distinct reads are counted up to one past the larger threshold (past it
 * every comparison is decided), at most FXCUT_READ_SET_MAX. */
static int32_t read_set_cap(const fxcut_memory_options *opt)
{
    int64_t top = opt->realize_reuse_reads > opt->realize_acc_reads
                      ? opt->realize_reuse_reads
                      : opt->realize_acc_reads;
    return top < 0 ? 1
           : top >= FXCUT_READ_SET_MAX ? FXCUT_READ_SET_MAX
                                       : (int32_t)top + 1;
}

/* The inductor model's arrays (opt->fusion != NULL).  Returns 1 when all
 * were allocated; the caller frees s either way. */
static int alloc_fused_arrays(fxcut_memsim *s, const fxcut_graph *g,
                              const fxcut_memory_options *opt)
{
    size_t m = (size_t)g->n + 1;
    s->realized = calloc(m, 1);
    s->donated = calloc(m, 1);
    s->inlined_reads = malloc(m * sizeof *s->inlined_reads);
    s->read_cap = read_set_cap(opt);
    s->read_set = (size_t)s->read_cap <= SIZE_MAX / sizeof *s->read_set / m
                      ? malloc(m * (size_t)s->read_cap * sizeof *s->read_set)
                      : NULL;
    s->read_n = malloc(m * sizeof *s->read_n);
    s->inlined_ops = malloc(m * sizeof *s->inlined_ops);
    s->inlined_heavy = malloc(m);
    s->visit = malloc(m * sizeof *s->visit);
    s->kernels = malloc(m * sizeof *s->kernels);
    s->group_of = malloc(m * sizeof *s->group_of);
    s->made_in = malloc(m * sizeof *s->made_in);
    s->read_in = malloc(m * sizeof *s->read_in);
    s->group_reads = malloc(m * sizeof *s->group_reads);
    s->leaf_ptr = malloc(m * sizeof *s->leaf_ptr);
    s->leaf_end = malloc(m * sizeof *s->leaf_end);
    /* room for each kernel's leaves read about twice over the graph's
     * edges (kernels past it are walked each time they are asked) */
    size_t cap = 2 * (m + (size_t)g->in_ptr[g->n]);
    if (cap > (size_t)INT32_MAX / 2)
        cap = (size_t)INT32_MAX / 2;
    s->leaf_cap = (int32_t)cap;
    s->leaf_idx = malloc(cap * sizeof *s->leaf_idx);
    return s->realized != NULL && s->donated != NULL &&
           s->inlined_reads != NULL && s->read_set != NULL &&
           s->read_n != NULL && s->inlined_ops != NULL &&
           s->inlined_heavy != NULL && s->visit != NULL &&
           s->kernels != NULL && s->group_of != NULL &&
           s->made_in != NULL && s->read_in != NULL &&
           s->group_reads != NULL && s->leaf_ptr != NULL &&
           s->leaf_end != NULL && s->leaf_idx != NULL;
}

/* Per node: its storage root, the bytes it costs as a root (inputs, non-
 * tensors and unknown sizes cost 0) and whether it depends on a tangent
 * or a backward seed. */
static void fill_roots_and_costs(fxcut_memsim *s,
                                 const fxcut_memory_options *opt)
{
    const fxcut_graph *g = s->g;
    for (int32_t i = 0; i < g->n; i++) {
        int32_t so = opt->storage_of != NULL ? opt->storage_of[i] : i;
        s->root[i] = so < i ? s->root[so] : i;
        uint32_t f = g->flags[i];
        int64_t b = g->nbytes[i];
        if (b < 0 || is_source(g, i) ||
            ((f & FXCUT_F_NON_TENSOR) != 0 && (f & FXCUT_F_VAL_IS_SEQ) == 0))
            b = 0;
        s->cost[i] = b;
        uint8_t dep = is_bw_input_placeholder(g, i) ? 1 : 0;
        for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1] && !dep; e++)
            dep = s->tangent_dep[g->in_idx[e]];
        s->tangent_dep[i] = dep;
    }
}

/* Every total the evaluations form is at most these sums (the inductor
 * model's layout copies included: each COPIES_INPUTS kernel's inputs, and
 * every kernel's workspace): FXCUT_E_OVERFLOW when either passes INT64_MAX,
 * FXCUT_E_INVALID naming the node of a negative workspace. */
static int check_sums(const fxcut_memsim *s, const fxcut_memory_options *opt,
                      fxcut_error *err)
{
    const fxcut_graph *g = s->g;
    fxcut_wide bytes = 0, work = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (opt->workspace != NULL && opt->workspace[i] < 0)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "workspace[%d] = %lld is negative", (int)i,
                              (long long)opt->workspace[i]);
        bytes += s->cost[i];
        if (opt->workspace != NULL)
            bytes += opt->workspace[i];
        if (opt->fusion != NULL && (opt->fusion[i] & FXCUT_FUSE_COPIES_INPUTS))
            for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1]; e++)
                if (g->nbytes[g->in_idx[e]] > 0)
                    bytes += g->nbytes[g->in_idx[e]];
        if (opt->flops != NULL)
            work += opt->flops[i];
        if (opt->fused_cost != NULL)
            work += opt->fused_cost[i];
    }
    if (bytes > (fxcut_wide)INT64_MAX || work > (fxcut_wide)INT64_MAX)
        return fxcut_fail(err, FXCUT_E_OVERFLOW, -1,
                          "the graph's %s sum past 2^63 - 1",
                          bytes > (fxcut_wide)INT64_MAX ? "sizes (nbytes)"
                                                         : "flops");
    return FXCUT_OK;
}

int fxcut_memsim_new(const fxcut_graph *g, const fxcut_memory_options *opt,
                     fxcut_memsim **out, fxcut_error *err)
{
    *out = NULL;
    fxcut_memsim *s = calloc(1, sizeof *s);
    if (s == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the memory model");
    s->g = g;
    s->num_fwd_outputs = opt->num_fwd_outputs;
    s->flops = opt->flops;
    s->marks = opt->marks;
    s->hold_saved = opt->hold_saved != 0;
    s->kernel_calls = opt->fusion != NULL && opt->kernel_calls != 0;
    s->workspace = opt->workspace;
    s->fusion = opt->fusion;
    s->fused_cost = opt->fused_cost;
    s->realize_reuse_reads = opt->realize_reuse_reads;
    s->realize_acc_reads = opt->realize_acc_reads;
    s->realize_opcount = opt->realize_opcount;
    s->iteration = opt->fusion != NULL ? opt->iteration : NULL;
    int ok = alloc_walk_arrays(s, g, opt);
    if (opt->fusion != NULL)
        ok = alloc_fused_arrays(s, g, opt) && ok;
    if (!ok) {
        fxcut_memsim_free(s);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the memory model of %d nodes",
                          (int)g->n);
    }
    int rc = fxcut_graph_users(g, &s->user_ptr, &s->user_idx, err);
    if (rc == FXCUT_OK) {
        fill_roots_and_costs(s, opt);
        rc = check_sums(s, opt, err);
    }
    if (rc != FXCUT_OK) {
        fxcut_memsim_free(s);
        return rc;
    }
    *out = s;
    return FXCUT_OK;
}

/* Dead-code elimination of one extraction: of the nodes marked `valid`
 * (computed ones, not inputs), keep those an output needs or that are
 * IMPURE; mark them `kept`.  Inputs reached get M_NEEDED. */
static void keep_needed(fxcut_memsim *s, int32_t first_out, int32_t end_out,
                        uint8_t valid, uint8_t kept, uint8_t input)
{
    const fxcut_graph *g = s->g;
    for (int32_t i = 0; i < g->n; i++)
        s->mark[i] &= (uint8_t)~M_NEEDED;
    for (int32_t k = first_out; k < end_out; k++)
        if (g->outputs[k] >= 0)
            s->mark[g->outputs[k]] |= M_NEEDED;
    for (int32_t i = g->n - 1; i >= 0; i--) {
        uint8_t mk = s->mark[i];
        if ((mk & valid) == 0 || (mk & input) != 0 || is_source(g, i))
            continue;
        if ((mk & M_NEEDED) == 0 && (g->flags[i] & FXCUT_F_IMPURE) == 0)
            continue;
        s->mark[i] |= kept;
        for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1]; e++)
            s->mark[g->in_idx[e]] |= M_NEEDED;
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Emits node x of the backward after the not-yet-emitted kept nodes it
 * needs, all in joint order. */
static void pull(fxcut_memsim *s, int32_t x, int32_t *n_order)
{
    const fxcut_graph *g = s->g;
    if ((s->mark[x] & M_EMITTED) != 0)
        return;
    int32_t sp = 0, nf = 0;
    s->stack[sp++] = x;
    s->mark[x] |= M_FOUND;
    while (sp > 0) {
        int32_t v = s->stack[--sp];
        s->found[nf++] = v;
        for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
            int32_t u = g->in_idx[e];
            uint8_t mk = s->mark[u];
            if ((mk & M_BW_KEPT) == 0 || (mk & (M_EMITTED | M_FOUND)) != 0)
                continue;
            s->mark[u] |= M_FOUND;
            s->stack[sp++] = u;
        }
    }
    qsort(s->found, (size_t)nf, sizeof *s->found, cmp_i32);
    for (int32_t k = 0; k < nf; k++) {
        int32_t v = s->found[k];
        s->mark[v] = (uint8_t)((s->mark[v] & ~M_FOUND) | M_EMITTED);
        s->order[(*n_order)++] = v;
    }
}

/* s->order[0 .. n) with every getitem moved right after its producer (or to
 * the front when its producer is a module input); written to s->body. */
static int32_t raise_getitems(fxcut_memsim *s, int32_t n, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    int32_t k = 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t v = s->order[j];
        if ((g->flags[v] & FXCUT_F_GETITEM) != 0 &&
            g->in_ptr[v + 1] - g->in_ptr[v] == 1 &&
            (s->mark[g->in_idx[g->in_ptr[v]]] & kept) == 0)
            s->body[k++] = v;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t v = s->order[j];
        if ((g->flags[v] & FXCUT_F_GETITEM) != 0 &&
            g->in_ptr[v + 1] - g->in_ptr[v] == 1)
            continue;
        s->body[k++] = v;
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if ((s->mark[u] & kept) != 0 &&
                (g->flags[u] & FXCUT_F_GETITEM) != 0 &&
                g->in_ptr[u + 1] - g->in_ptr[u] == 1)
                s->body[k++] = u;
        }
    }
    return k;
}

/* What a node's own storage costs while it lives: its cost, less (for a
 * sequence) what its getitems in the module own (born with it, but freed
 * when they die). */
static int64_t step_alloc(const fxcut_memsim *s, int32_t v, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    if (s->root[v] != v)
        return 0;
    int64_t b = s->cost[v];
    if ((g->flags[v] & FXCUT_F_VAL_IS_SEQ) != 0) {
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if ((s->mark[u] & kept) != 0 && s->root[u] == u &&
                (g->flags[u] & FXCUT_F_GETITEM) != 0)
                b -= s->cost[u];
        }
        if (b < 0)
            b = 0;
    }
    return b;
}

/* A multi-output op allocates all its outputs at once: the storages its
 * getitems in the module own are born with it (charged to them, freed when
 * they die).  Returns the bytes so born. */
static int64_t prepay_getitems(fxcut_memsim *s, int32_t v, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    int64_t b = 0;
    for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
        int32_t u = s->user_idx[e];
        if ((s->mark[u] & kept) != 0 && s->root[u] == u &&
            (g->flags[u] & FXCUT_F_GETITEM) != 0 && s->charge[u] < 0) {
            s->charge[u] = s->cost[u];
            b += s->cost[u];
        }
    }
    return b;
}

/* Resets a walk of s->body[0 .. n_body): every value's last reading step
 * (END for module outputs and values marked `pinned`), and the values
 * marked `held` charged as live at the start; returns their bytes. */
static int64_t start_walk(fxcut_memsim *s, int32_t n_body, uint8_t held,
                          uint8_t pinned, int32_t first_out, int32_t end_out)
{
    const fxcut_graph *g = s->g;
    const int32_t END = INT32_MAX;
    int64_t live = 0;
    for (int32_t i = 0; i < g->n; i++) {
        s->last[i] = -1;
        s->charge[i] = -1;
    }
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->last[s->root[v]] < k)
            s->last[s->root[v]] = k;
        for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
            int32_t u = s->root[g->in_idx[e]];
            if (s->last[u] < k)
                s->last[u] = k;
        }
    }
    for (int32_t k = first_out; k < end_out; k++)
        if (g->outputs[k] >= 0)
            s->last[s->root[g->outputs[k]]] = END;
    for (int32_t i = 0; i < g->n; i++) {
        int32_t r = s->root[i];
        if ((s->mark[i] & pinned) != 0)
            s->last[r] = END;
        if ((s->mark[i] & held) != 0 && s->charge[r] < 0) {
            s->charge[r] = s->cost[r];
            live += s->cost[r];
        }
    }
    return live;
}

/* The liveness walk of one module whose steps are s->body[0 .. n_body).
 * Values marked `held` are live at the start (the backward's saved
 * values); outputs[first_out .. end_out) and values marked `pinned` live to
 * the end.  Writes steps step0 .. step0 + n_body of the result's optional
 * arrays and returns the module's peak (its step in *peak_step, -1 when
 * there is no step). */
static int64_t walk_module(fxcut_memsim *s, int32_t n_body, uint8_t kept,
                           uint8_t held, uint8_t pinned, int32_t first_out,
                           int32_t end_out, int32_t step0,
                           fxcut_memory_result *res, int32_t *peak_step)
{
    const fxcut_graph *g = s->g;
    int64_t live = start_walk(s, n_body, held, pinned, first_out, end_out);
    int64_t peak = 0;
    *peak_step = -1;
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        int32_t r = s->root[v];
        if (s->charge[r] < 0) {
            s->charge[r] = r == v ? step_alloc(s, v, kept) : s->cost[r];
            live += s->charge[r];
            if (r == v && (g->flags[v] & FXCUT_F_VAL_IS_SEQ) != 0)
                live += prepay_getitems(s, v, kept);
        }
        if (res->schedule != NULL)
            res->schedule[step0 + k] = v;
        int64_t running = live + (s->workspace != NULL ? s->workspace[v] : 0);
        if (res->live_bytes != NULL)
            res->live_bytes[step0 + k] = running;
        if (*peak_step < 0 || running > peak) {
            peak = running;
            *peak_step = step0 + k;
        }
        if (s->last[r] == k) {
            live -= s->charge[r];
            s->last[r] = -2;
        }
        for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
            int32_t u = s->root[g->in_idx[e]];
            if (s->last[u] == k) {
                live -= s->charge[u] > 0 ? s->charge[u] : 0;
                s->last[u] = -2;
            }
        }
    }
    return peak;
}

/* The saved storages the backward may update in place (AOT Autograd's
 * donated buffers): computed by the forward, shared by no forward output
 * and no gradient. */
static void mark_donated(fxcut_memsim *s)
{
    const fxcut_graph *g = s->g;
    for (int32_t i = 0; i < g->n; i++)
        s->donated[i] = 0;
    for (int32_t i = 0; i < g->n; i++)
        if ((s->mark[i] & M_SAVED) != 0 && is_computed_kind(g, i))
            s->donated[s->root[i]] = 1;
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] >= 0)
            s->donated[s->root[g->outputs[k]]] = 0;
    for (int32_t i = 0; i < g->n; i++)
        if (is_source(g, i))
            s->donated[s->root[i]] = 0;
}

/* 1. The backward extraction: its inputs (the saved values, the backward's
 * placeholders) and every node computable from them; the nodes it keeps;
 * saved values it never reads dropped.  An error when a backward output
 * cannot be computed. */
static int mark_backward(fxcut_memsim *s, const uint8_t *saved_mask,
                         fxcut_error *err)
{
    const fxcut_graph *g = s->g;
    int32_t n = g->n, nfo = s->num_fwd_outputs, nout = g->n_outputs;
    for (int32_t i = 0; i < n; i++) {
        uint8_t mk = 0;
        if (saved_mask[i] != 0)
            mk = M_SAVED | M_BW_VALID;
        else if (is_bw_input_placeholder(g, i))
            mk = M_BW_VALID;
        else if (is_computed_kind(g, i) && !forward_only(s, i)) {
            mk = M_BW_VALID;
            for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1]; e++)
                if ((s->mark[g->in_idx[e]] & M_BW_VALID) == 0) {
                    mk = 0;
                    break;
                }
        }
        s->mark[i] = mk;
    }
    for (int32_t k = nfo; k < nout; k++) {
        int32_t o = g->outputs[k];
        if (o >= 0 && (s->mark[o] & M_BW_VALID) == 0)
            return fxcut_fail(err, FXCUT_E_INVALID, o,
                              "the backward cannot compute output %d (node "
                              "%d) from the saved values and tangents",
                              (int)k, (int)o);
    }
    keep_needed(s, nfo, nout, M_BW_VALID, M_BW_KEPT, M_SAVED);
    /* saved values the backward never reads are dropped */
    for (int32_t i = 0; i < n; i++)
        if ((s->mark[i] & M_SAVED) != 0 && (s->mark[i] & M_NEEDED) == 0)
            s->mark[i] &= (uint8_t)~M_SAVED;
    return FXCUT_OK;
}

/* The forward's dead-code elimination: its outputs are the forward outputs
 * and the saved values; an impure node stays. */
static void keep_forward(fxcut_memsim *s)
{
    const fxcut_graph *g = s->g;
    for (int32_t i = 0; i < g->n; i++) {
        if ((s->mark[i] & M_SAVED) != 0)
            s->mark[i] |= M_NEEDED;
        else
            s->mark[i] &= (uint8_t)~M_NEEDED;
    }
    for (int32_t k = 0; k < s->num_fwd_outputs; k++)
        if (g->outputs[k] >= 0)
            s->mark[g->outputs[k]] |= M_NEEDED;
    for (int32_t i = g->n - 1; i >= 0; i--) {
        uint8_t mk = s->mark[i];
        if ((mk & M_FW_VALID) == 0 || is_source(g, i))
            continue;
        if ((mk & M_NEEDED) == 0 && (g->flags[i] & FXCUT_F_IMPURE) == 0)
            continue;
        s->mark[i] |= M_FW_KEPT;
        for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1]; e++)
            s->mark[g->in_idx[e]] |= M_NEEDED;
    }
}

/* 2. The forward extraction: every node computable from the primals (not
 * one that must be in the backward), then the nodes it keeps.  An error
 * when a forward output or a saved value cannot be computed there. */
static int mark_forward(fxcut_memsim *s, fxcut_error *err)
{
    const fxcut_graph *g = s->g;
    int32_t n = g->n, nfo = s->num_fwd_outputs;
    for (int32_t i = 0; i < n; i++) {
        uint8_t ok;
        if (g->kind[i] == FXCUT_PLACEHOLDER)
            ok = fxcut_is_input(g, i) ? 1 : 0;
        else if (!is_computed_kind(g, i) ||
                 (g->flags[i] & FXCUT_F_MUST_BE_IN_BW) != 0)
            ok = 0;
        else {
            ok = 1;
            for (int32_t e = g->in_ptr[i]; e < g->in_ptr[i + 1]; e++)
                if ((s->mark[g->in_idx[e]] & M_FW_VALID) == 0) {
                    ok = 0;
                    break;
                }
        }
        if (ok)
            s->mark[i] |= M_FW_VALID;
    }
    for (int32_t k = 0; k < nfo; k++) {
        int32_t o = g->outputs[k];
        if (o >= 0 && (s->mark[o] & M_FW_VALID) == 0)
            return fxcut_fail(err, FXCUT_E_INVALID, o,
                              "the forward cannot compute forward output %d "
                              "(node %d) from the primals", (int)k, (int)o);
    }
    for (int32_t i = 0; i < n; i++)
        if ((s->mark[i] & M_SAVED) != 0 && (s->mark[i] & M_FW_VALID) == 0)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "saved node %d cannot be computed in the "
                              "forward (it depends on a tangent or must be "
                              "in the backward)", (int)i);
    keep_forward(s);
    return FXCUT_OK;
}

/* 3. The forward module's order (joint order, getitems raised) into
 * s->order; returns its length. */
static int32_t forward_order(fxcut_memsim *s)
{
    int32_t n_fw = 0;
    for (int32_t i = 0; i < s->g->n; i++)
        if ((s->mark[i] & M_FW_KEPT) != 0)
            s->order[n_fw++] = i;
    return raise_getitems(s, n_fw, M_FW_KEPT);
}

/* Where the backward's reordering starts: the position in body[0 ..
 * n_body) of the first kept user of a tangent (users are in joint order:
 * a tangent's first kept one is it); n_body when a tangent is itself an
 * output; n_body + 1 when no tangent is used. */
static int32_t first_tangent_use(const fxcut_memsim *s, int32_t n_body)
{
    const fxcut_graph *g = s->g;
    int32_t first = n_body + 1;
    for (int32_t i = 0; i < g->n; i++) {
        if (g->kind[i] != FXCUT_PLACEHOLDER ||
            (g->flags[i] & FXCUT_F_TANGENT) == 0)
            continue;
        for (int32_t e = s->user_ptr[i]; e < s->user_ptr[i + 1]; e++)
            if ((s->mark[s->user_idx[e]] & M_BW_KEPT) != 0) {
                int32_t u = s->user_idx[e];
                int32_t lo = 0, hi = n_body;
                while (lo < hi) {
                    int32_t mid = lo + (hi - lo) / 2;
                    if (s->body[mid] < u)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (lo < first)
                    first = lo;
                break;
            }
        for (int32_t k = s->num_fwd_outputs; k < g->n_outputs; k++)
            if (g->outputs[k] == i && n_body < first)
                first = n_body;
    }
    return first;
}

/* 4. The backward module's order (reordering_to_mimic_autograd_engine)
 * into s->order; returns its length.  Nodes the reordering never reaches
 * leave the module. */
static int32_t backward_order(fxcut_memsim *s)
{
    const fxcut_graph *g = s->g;
    int32_t n_body = 0, n_bw = 0;
    for (int32_t i = 0; i < g->n; i++)
        if ((s->mark[i] & M_BW_KEPT) != 0)
            s->body[n_body++] = i;
    int32_t first = first_tangent_use(s, n_body);
    if (first > n_body) {
        memcpy(s->order, s->body, (size_t)n_body * sizeof *s->order);
        n_bw = n_body;
    } else {
        for (int32_t k = 0; k < first; k++) {
            int32_t v = s->body[k];
            if (is_copy(s, v))
                pull(s, v, &n_bw);
        }
        for (int32_t k = first; k < n_body; k++)
            pull(s, s->body[k], &n_bw);
        for (int32_t k = s->num_fwd_outputs; k < g->n_outputs; k++) {
            int32_t o = g->outputs[k];
            if (o >= 0 && (s->mark[o] & M_BW_KEPT) != 0)
                pull(s, o, &n_bw);
        }
    }
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if ((s->mark[v] & M_EMITTED) == 0 && first <= n_body)
            s->mark[v] &= (uint8_t)~M_BW_KEPT;
    }
    return raise_getitems(s, n_bw, M_BW_KEPT);
}

/* The peak of the two modules' (the forward's on a tie). */
static void set_peak(fxcut_memory_result *res, int32_t fw_step,
                     int32_t bw_step)
{
    res->peak_bytes = 0;
    res->peak_step = -1;
    if (fw_step < 0 && bw_step < 0)
        return;
    if (bw_step < 0 || (fw_step >= 0 &&
                        res->fw_peak_bytes >= res->bw_peak_bytes)) {
        res->peak_bytes = res->fw_peak_bytes;
        res->peak_step = fw_step;
    } else {
        res->peak_bytes = res->bw_peak_bytes;
        res->peak_step = bw_step;
    }
}

/* 5. The saved bytes (each storage once) and what the backward recomputes
 * (kept there, not depending on a tangent): count, flops, bytes. */
static void count_saved_and_recomputed(fxcut_memsim *s,
                                       fxcut_memory_result *res)
{
    int32_t n = s->g->n;
    res->saved_bytes = 0;
    res->recompute_flops = 0;
    res->recompute_bytes = 0;
    res->n_recomputed = 0;
    for (int32_t i = 0; i < n; i++)
        s->last[i] = 0;
    for (int32_t i = 0; i < n; i++) {
        if ((s->mark[i] & M_SAVED) == 0)
            continue;
        int32_t r = s->root[i];
        if (s->last[r] == 0) {
            s->last[r] = 1;
            res->saved_bytes += s->cost[r];
        }
    }
    if (res->recomputed != NULL && n > 0)
        memset(res->recomputed, 0, (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        if ((s->mark[i] & M_BW_KEPT) == 0 || s->tangent_dep[i])
            continue;
        res->n_recomputed++;
        if (res->recomputed != NULL)
            res->recomputed[i] = 1;
        if (s->fusion == NULL || s->realized[i]) {
            if (s->flops != NULL)
                res->recompute_flops += s->flops[i];
        } else if (s->fused_cost != NULL)
            res->recompute_flops += s->fused_cost[i];
        if (s->root[i] == i)
            res->recompute_bytes += s->cost[i];
    }
}

int fxcut_memsim_eval(fxcut_memsim *s, const uint8_t *saved_mask,
                      fxcut_memory_result *res, fxcut_error *err)
{
    int rc = mark_backward(s, saved_mask, err);
    if (rc == FXCUT_OK)
        rc = mark_forward(s, err);
    if (rc != FXCUT_OK)
        return rc;
    int32_t fw_step = -1, bw_step = -1;
    int32_t nfo = s->num_fwd_outputs, nout = s->g->n_outputs;
    int32_t n_fw = forward_order(s);
    if (s->fusion != NULL) {
        /* donation is the backward's: nothing of the last evaluation's */
        memset(s->donated, 0, (size_t)s->g->n);
        res->fw_peak_bytes = fxcut_memsim_walk_fused(
            s, n_fw, M_FW_KEPT, 0, M_SAVED, 0, nfo, 0, res, &fw_step, &n_fw);
    } else
        res->fw_peak_bytes = walk_module(s, n_fw, M_FW_KEPT, 0, M_SAVED, 0,
                                         nfo, 0, res, &fw_step);
    int32_t n_bw = backward_order(s);
    /* a held saved value lives to the backward's end */
    uint8_t bw_pinned = s->hold_saved ? M_SAVED : 0;
    if (s->fusion != NULL) {
        mark_donated(s);
        res->bw_peak_bytes = fxcut_memsim_walk_fused(
            s, n_bw, M_BW_KEPT, M_SAVED, bw_pinned, nfo, nout, n_fw, res,
            &bw_step, &n_bw);
    } else
        res->bw_peak_bytes = walk_module(s, n_bw, M_BW_KEPT, M_SAVED,
                                         bw_pinned, nfo, nout, n_fw, res,
                                         &bw_step);
    res->n_fw_steps = n_fw;
    res->n_steps = n_fw + n_bw;
    set_peak(res, fw_step, bw_step);
    count_saved_and_recomputed(s, res);
    return FXCUT_OK;
}

int fxcut_memory_simulate(const fxcut_graph *g, const fxcut_memory_options *opt,
                          const int32_t *saved, int32_t n_saved,
                          fxcut_memory_result *res, fxcut_error *err)
{
    int rc = fxcut_graph_validate(g, err);
    if (rc != FXCUT_OK)
        return rc;
    int32_t n = g->n;
    if (opt->num_fwd_outputs < 0 || opt->num_fwd_outputs > g->n_outputs)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "num_fwd_outputs (%d) must be between 0 and the "
                          "graph's %d outputs", (int)opt->num_fwd_outputs,
                          (int)g->n_outputs);
    if (opt->storage_of != NULL)
        for (int32_t i = 0; i < n; i++) {
            int32_t so = opt->storage_of[i];
            if (so < 0 || so >= n)
                return fxcut_fail(err, FXCUT_E_INDEX, i,
                                  "storage_of[%d] = %d is outside [0, %d)",
                                  (int)i, (int)so, (int)n);
            if (so > i)
                return fxcut_fail(err, FXCUT_E_INVALID, i,
                                  "storage_of[%d] = %d names a later node "
                                  "(a storage belongs to an earlier-or-equal "
                                  "node)", (int)i, (int)so);
        }
    if (opt->flops != NULL)
        for (int32_t i = 0; i < n; i++)
            if (opt->flops[i] < 0)
                return fxcut_fail(err, FXCUT_E_INVALID, i,
                                  "flops[%d] = %lld is negative", (int)i,
                                  (long long)opt->flops[i]);
    rc = fxcut_check_fusion(g, opt->fusion, opt->fused_cost, opt->iteration,
                            opt->realize_reuse_reads, opt->realize_acc_reads,
                            opt->realize_opcount, err);
    if (rc != FXCUT_OK)
        return rc;
    if (n_saved < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "saved count must be >= 0, got %d", (int)n_saved);
    for (int32_t k = 0; k < n_saved; k++)
        if (saved[k] < 0 || saved[k] >= n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "saved[%d] = %d is outside [0, %d)", (int)k,
                              (int)saved[k], (int)n);
    for (int32_t k = 0; k < n_saved; k++)
        if (g->kind[saved[k]] == FXCUT_OUTPUT)
            return fxcut_fail(err, FXCUT_E_INVALID, saved[k],
                              "saved[%d] = node %d is the output node",
                              (int)k, (int)saved[k]);
    uint8_t *mask = calloc((size_t)n + 1, 1);
    if (mask == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the saved mask of %d nodes",
                          (int)n);
    for (int32_t k = 0; k < n_saved; k++)
        mask[saved[k]] = 1;
    fxcut_memsim *s = NULL;
    rc = fxcut_memsim_new(g, opt, &s, err);
    if (rc == FXCUT_OK)
        rc = fxcut_memsim_eval(s, mask, res, err);
    fxcut_memsim_free(s);
    free(mask);
    return rc;
}

int fxcut_check_fusion(const fxcut_graph *g, const uint8_t *fusion,
                       const int64_t *fused_cost, const int64_t *iteration,
                       int32_t reuse_reads, int32_t acc_reads,
                       int32_t opcount, fxcut_error *err)
{
    if (fusion == NULL) {
        if (fused_cost != NULL || iteration != NULL)
            return fxcut_fail(err, FXCUT_E_INVALID, -1,
                              "fused_cost and iteration apply to the "
                              "inductor model only (fusion is NULL)");
        return FXCUT_OK;
    }
    if (reuse_reads < 0 || acc_reads < 0 || opcount < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "the realization thresholds must be >= 0, got "
                          "%d, %d, %d", (int)reuse_reads, (int)acc_reads,
                          (int)opcount);
    const unsigned known = FXCUT_FUSE_KIND_MASK | FXCUT_FUSE_HEAVY |
                           FXCUT_FUSE_COPIES_INPUTS | FXCUT_FUSE_ABSORBED |
                           FXCUT_FUSE_LAYOUT;
    for (int32_t i = 0; i < g->n; i++) {
        unsigned f = fusion[i];
        if ((f & ~known) != 0 || (f & FXCUT_FUSE_KIND_MASK) > FXCUT_FUSE_CAT)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "fusion[%d] = %u is not a FUSE_* kind (0..3, "
                              "| FUSE_HEAVY | FUSE_COPIES_INPUTS | "
                              "FUSE_ABSORBED | FUSE_LAYOUT)", (int)i, f);
        if (fused_cost != NULL && fused_cost[i] < 0)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "fused_cost[%d] = %lld is negative", (int)i,
                              (long long)fused_cost[i]);
        if (iteration != NULL && iteration[i] < 0)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "iteration[%d] = %lld is negative", (int)i,
                              (long long)iteration[i]);
    }
    return FXCUT_OK;
}

/* ---- readers for the planner (memory_internal.h) ----------------------- */

void fxcut_memsim_saved(const fxcut_memsim *s, uint8_t *out)
{
    for (int32_t i = 0; i < s->g->n; i++)
        out[i] = (s->mark[i] & M_SAVED) != 0;
}

int32_t fxcut_memsim_root(const fxcut_memsim *s, int32_t i)
{
    return s->root[i];
}

int64_t fxcut_memsim_storage_bytes(const fxcut_memsim *s, int32_t root)
{
    return s->cost[root];
}
