/* memory_fused.c -- the inductor model's walk of one module: which values
 * inductor makes buffers, the kernels that read them, and the liveness of
 * those buffers with inductor's in-place updates.  The rules are stated
 * above enum fxcut_fusion_kind (fxcut.h). */
#include "memory_internal.h"
#include "fxcut_internal.h"

#include <limits.h>

/* Caps of the inlined-expression counts: any value past every threshold
 * behaves the same, and the sums never overflow. */
#define COUNT_CAP (1 << 20)

static int kind_of(const fxcut_memsim *s, int32_t i)
{
    return s->fusion[i] & FXCUT_FUSE_KIND_MASK;
}

static int is_item(const fxcut_graph *g, int32_t v)
{
    return (g->flags[v] & FXCUT_F_GETITEM) != 0 &&
           g->in_ptr[v + 1] - g->in_ptr[v] == 1;
}

static int32_t producer_of(const fxcut_graph *g, int32_t item)
{
    return g->in_idx[g->in_ptr[item]];
}

static int32_t capped_add(int32_t a, int32_t b)
{
    int64_t c = (int64_t)a + (int64_t)b;
    return c > COUNT_CAP ? COUNT_CAP : (int32_t)c;
}

/* Readers of v in the module: its kept users, and the output when v is one
 * of the module's outputs. */
static int32_t readers_in_module(const fxcut_memsim *s, int32_t v,
                                 uint8_t kept, int is_output,
                                 int *extern_reader)
{
    int32_t c = is_output ? 1 : 0;
    *extern_reader = 0;
    for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
        int32_t u = s->user_idx[e];
        if ((s->mark[u] & kept) == 0)
            continue;
        c++;
        if (kind_of(s, u) == FXCUT_FUSE_EXTERN)
            *extern_reader = 1;
    }
    return c;
}

/* A value computed in this module that is not (yet) a buffer: inlined. */
static int inlinable(const fxcut_memsim *s, int32_t r, uint8_t kept)
{
    return (s->mark[r] & kept) != 0 && !s->realized[r];
}

/* Which computed nodes of the module are buffers (s->realized), in module
 * order.  s->last must already hold END for the module's outputs. */
static void realize(fxcut_memsim *s, int32_t n_body, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    const int32_t END = INT32_MAX;
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        s->realized[v] = 0;
        s->inlined_reads[v] = 1;
        s->inlined_ops[v] = 0;
        s->inlined_heavy[v] = 0;
    }
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->root[v] != v)
            continue; /* an alias: its root decides */
        int kind = kind_of(s, v);
        if (is_item(g, v)) {
            int32_t p = s->root[producer_of(g, v)];
            if ((s->mark[p] & kept) != 0 && s->realized[p]) {
                s->realized[v] = 1;
                continue;
            }
        }
        if (kind == FXCUT_FUSE_EXTERN || kind == FXCUT_FUSE_REDUCTION ||
            kind == FXCUT_FUSE_CAT) {
            s->realized[v] = 1;
            if (kind != FXCUT_FUSE_EXTERN)
                continue;
            for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
                int32_t r = s->root[g->in_idx[e]];
                if (inlinable(s, r, kept))
                    s->realized[r] = 1;
            }
            continue;
        }
        /* POINTWISE: the expression inlining it would build */
        int32_t reads = 0, ops = 1;
        uint8_t heavy = (s->fusion[v] & FXCUT_FUSE_HEAVY) != 0;
        for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
            int32_t r = s->root[g->in_idx[e]];
            if (inlinable(s, r, kept)) {
                reads = capped_add(reads, s->inlined_reads[r]);
                ops = capped_add(ops, s->inlined_ops[r]);
                heavy = (uint8_t)(heavy | s->inlined_heavy[r]);
            } else {
                reads = capped_add(reads, 1);
            }
        }
        s->inlined_reads[v] = reads;
        s->inlined_ops[v] = ops;
        s->inlined_heavy[v] = heavy;
        int extern_reader = 0;
        int32_t readers = readers_in_module(s, v, kept, s->last[v] == END,
                                            &extern_reader);
        if ((readers > 1 && (extern_reader || heavy ||
                             reads > s->realize_reuse_reads ||
                             ops > s->realize_opcount)) ||
            reads > s->realize_acc_reads || ops > s->realize_opcount)
            s->realized[v] = 1;
    }
    /* module outputs are buffers */
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        int32_t r = s->root[v];
        if (s->last[r] == END && (s->mark[r] & kept) != 0)
            s->realized[r] = 1;
    }
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->realized[v]) {
            s->inlined_reads[v] = 1;
            s->inlined_ops[v] = 0;
            s->inlined_heavy[v] = 0;
        }
    }
}

/* The buffers and module inputs kernel k (node v) reads: its inlined
 * expression's leaves.  Calls visit(s, root, k, ctx) once per leaf root.
 * Each call is one visit epoch (s->visit holds the epoch that last saw a
 * node; the epochs restart from 0 before they could overflow). */
typedef void (*leaf_fn)(fxcut_memsim *s, int32_t root, int32_t k, void *ctx);

static void kernel_reads(fxcut_memsim *s, int32_t v, int32_t k, uint8_t kept,
                         leaf_fn visit, void *ctx)
{
    const fxcut_graph *g = s->g;
    if (s->epoch == INT32_MAX) {
        for (int32_t i = 0; i < g->n; i++)
            s->visit[i] = -1;
        s->epoch = 0;
    }
    int32_t ep = s->epoch++;
    int32_t sp = 0;
    s->visit[v] = ep;
    for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++)
        s->stack[sp++] = g->in_idx[e];
    while (sp > 0) {
        int32_t r = s->root[s->stack[--sp]];
        if (s->visit[r] == ep)
            continue;
        s->visit[r] = ep;
        if (!inlinable(s, r, kept)) {
            visit(s, r, k, ctx);
            continue;
        }
        for (int32_t e = g->in_ptr[r]; e < g->in_ptr[r + 1]; e++)
            if (s->visit[s->root[g->in_idx[e]]] != ep)
                s->stack[sp++] = g->in_idx[e];
    }
}

static void note_last_read(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    (void)ctx;
    if (s->last[r] != INT32_MAX && s->last[r] < k)
        s->last[r] = k;
}

typedef struct {
    uint8_t kept;
    int64_t want;     /* bytes the kernel's buffer needs */
    int32_t taken;    /* a dying buffer it can take over (-1: none) */
    int64_t live;
} step_ctx;

/* In-place candidates: a dying buffer of the right size, allocated in this
 * module or donated. */
static void find_inplace(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    if (c->taken >= 0 || s->last[r] != k || s->charge[r] <= 0)
        return;
    int64_t have = s->cost[r];
    if (have < c->want || (double)c->want < 0.95 * (double)have)
        return;
    int own = (s->mark[r] & c->kept) != 0 && s->realized[r];
    if (!own && !s->donated[r])
        return;
    if (own && kind_of(s, r) == FXCUT_FUSE_EXTERN && is_item(s->g, r))
        return; /* an extern kernel's item may alias its inputs */
    c->taken = r;
}

static void free_dead(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    if (s->last[r] != k)
        return;
    if (s->charge[r] > 0)
        c->live -= s->charge[r];
    s->last[r] = -2;
}

/* Bytes kernel v allocates: its own storage (a multi-output node: less what
 * its kept items own, which it allocates as theirs: prepaid here). */
static int64_t kernel_alloc(fxcut_memsim *s, int32_t v, uint8_t kept,
                            int64_t *items)
{
    const fxcut_graph *g = s->g;
    int64_t b = s->cost[v];
    *items = 0;
    if ((g->flags[v] & FXCUT_F_VAL_IS_SEQ) == 0)
        return b;
    for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
        int32_t u = s->user_idx[e];
        if ((s->mark[u] & kept) != 0 && s->root[u] == u && is_item(g, u) &&
            s->realized[u] && s->charge[u] < 0) {
            b -= s->cost[u];
            s->charge[u] = s->cost[u];
            *items += s->cost[u];
        }
    }
    return b < 0 ? 0 : b;
}

/* Bytes of the copies a COPIES_INPUTS kernel makes of its tensor inputs. */
static int64_t input_copies(const fxcut_memsim *s, int32_t v)
{
    const fxcut_graph *g = s->g;
    if ((s->fusion[v] & FXCUT_FUSE_COPIES_INPUTS) == 0)
        return 0;
    int64_t b = 0;
    for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
        int32_t u = g->in_idx[e];
        uint32_t f = g->flags[u];
        if (g->nbytes[u] > 0 && ((f & FXCUT_F_NON_TENSOR) == 0 ||
                                 (f & FXCUT_F_VAL_IS_SEQ) != 0))
            b += g->nbytes[u];
    }
    return b;
}

int64_t fxcut_memsim_walk_fused(fxcut_memsim *s, int32_t n_body, uint8_t kept,
                                uint8_t held, uint8_t pinned,
                                int32_t first_out, int32_t end_out,
                                int32_t step0, fxcut_memory_result *res,
                                int32_t *peak_step, int32_t *n_steps)
{
    const fxcut_graph *g = s->g;
    const int32_t END = INT32_MAX;
    int64_t peak = 0;
    *peak_step = -1;
    for (int32_t i = 0; i < g->n; i++) {
        s->last[i] = -1;
        s->charge[i] = -1;
        s->visit[i] = -1;
    }
    s->epoch = 0;
    for (int32_t k = first_out; k < end_out; k++)
        if (g->outputs[k] >= 0)
            s->last[s->root[g->outputs[k]]] = END;
    for (int32_t i = 0; i < g->n; i++)
        if ((s->mark[i] & pinned) != 0)
            s->last[s->root[i]] = END;
    realize(s, n_body, kept);

    /* the kernels, and the last kernel reading each storage */
    int32_t nk = 0;
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->root[v] != v || !s->realized[v])
            continue;
        if (is_item(g, v) && s->realized[s->root[producer_of(g, v)]])
            continue; /* allocated by its producer's kernel */
        s->kernels[nk++] = v;
    }
    for (int32_t k = 0; k < nk; k++) {
        int32_t v = s->kernels[k];
        if (s->last[v] != END && s->last[v] < k)
            s->last[v] = k;
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if (is_item(g, u) && s->root[u] == u && s->last[u] != END &&
                s->last[u] < k)
                s->last[u] = k;
        }
        kernel_reads(s, v, k, kept, note_last_read, NULL);
    }

    step_ctx c = {kept, 0, -1, 0};
    for (int32_t i = 0; i < g->n; i++) {
        int32_t r = s->root[i];
        if ((s->mark[i] & held) != 0 && s->charge[r] < 0) {
            s->charge[r] = s->cost[r];
            c.live += s->cost[r];
            if (s->last[r] == -1)
                s->last[r] = -2; /* read by no kernel: dropped at once */
        }
    }
    for (int32_t i = 0; i < g->n; i++)
        if (s->last[i] == -2 && s->charge[i] > 0) {
            c.live -= s->charge[i];
            s->charge[i] = 0;
        }
    for (int32_t k = 0; k < nk; k++) {
        int32_t v = s->kernels[k];
        int64_t items = 0;
        int64_t own = kernel_alloc(s, v, kept, &items);
        c.want = own;
        c.taken = -1;
        if (own > 0 && kind_of(s, v) == FXCUT_FUSE_POINTWISE &&
            (g->flags[v] & FXCUT_F_VAL_IS_SEQ) == 0)
            kernel_reads(s, v, k, kept, find_inplace, &c);
        if (c.taken >= 0) {
            s->charge[v] = s->charge[c.taken];
            s->charge[c.taken] = 0;
            c.live += items;
        } else {
            s->charge[v] = own;
            c.live += own + items;
        }
        int64_t copies = input_copies(s, v);
        c.live += copies;
        if (res->schedule != NULL)
            res->schedule[step0 + k] = v;
        if (res->live_bytes != NULL)
            res->live_bytes[step0 + k] = c.live;
        if (*peak_step < 0 || c.live > peak) {
            peak = c.live;
            *peak_step = step0 + k;
        }
        c.live -= copies;
        kernel_reads(s, v, k, kept, free_dead, &c);
        /* its own buffer and items, when nothing reads them later */
        if (s->last[v] == k) {
            c.live -= s->charge[v] > 0 ? s->charge[v] : 0;
            s->last[v] = -2;
        }
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if (is_item(g, u) && s->root[u] == u && s->last[u] == k) {
                c.live -= s->charge[u] > 0 ? s->charge[u] : 0;
                s->last[u] = -2;
            }
        }
    }
    *n_steps = nk;
    return peak;
}
