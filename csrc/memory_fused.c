/* memory_fused.c -- the inductor model's walk of one module: which values
 * inductor makes buffers, the kernels that read them, and the liveness of
 * those buffers with inductor's in-place updates.  The rules are stated
 * above enum fxcut_fusion_kind (fxcut.h). */
#include "memory_internal.h"
#include "fxcut_internal.h"

#include <limits.h>
#include <string.h>

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

/* An ABSORBED node whose one reader in the module is an EXTERN node (an
 * add inductor's post-grad pass turns into an addmm with it): that
 * reader's kernel computes it.  Not when it is a module output. */
static int absorbed_here(const fxcut_memsim *s, int32_t v, uint8_t kept)
{
    if ((s->fusion[v] & FXCUT_FUSE_ABSORBED) == 0 || s->last[v] == INT32_MAX)
        return 0;
    int32_t reader = -1, n = 0;
    for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
        int32_t u = s->user_idx[e];
        if ((s->mark[u] & kept) != 0) {
            reader = u;
            n++;
        }
    }
    return n == 1 && kind_of(s, reader) == FXCUT_FUSE_EXTERN;
}

/* The distinct buffers an inlined expression reads: node v's set is its
 * own id until realize() builds it (a buffer, an input: one read). */
static void reads_only_itself(fxcut_memsim *s, int32_t v)
{
    s->read_set[(size_t)v * (size_t)s->read_cap] = v;
    s->read_n[v] = 1;
}

/* Adds the reads of input r (its set when it is inlined, else r itself) to
 * the set of length n at set; returns the new length (at most read_cap). */
static int32_t add_reads(const fxcut_memsim *s, int32_t *set, int32_t n,
                         int32_t r, int inlined)
{
    const int32_t cap = s->read_cap;
    const int32_t *from = inlined ? s->read_set + (size_t)r * (size_t)cap : &r;
    int32_t count = inlined ? s->read_n[r] : 1;
    for (int32_t i = 0; i < count && n < cap; i++) {
        int32_t j = 0;
        while (j < n && set[j] != from[i])
            j++;
        if (j == n)
            set[n++] = from[i];
    }
    return n;
}

/* Does an inlined expression reading `distinct` buffers (`paths` counted
 * once per path) read more than `threshold`?  Inductor counts distinct
 * reads (a set of memory dependencies); the set stops at read_cap, past
 * which only a threshold below it is decided by the set alone. */
static int reads_over(const fxcut_memsim *s, int32_t distinct, int32_t paths,
                      int32_t threshold)
{
    if (distinct < s->read_cap || threshold < s->read_cap)
        return distinct > threshold;
    return paths > threshold;
}

/* Forgets node v's inlined expression: it reads only itself (a buffer, an
 * input, or a node whose expression is not built yet). */
static void forget_expression(fxcut_memsim *s, int32_t v)
{
    s->inlined_reads[v] = 1;
    reads_only_itself(s, v);
    s->inlined_ops[v] = 0;
    s->inlined_heavy[v] = 0;
}

/* An item of a multi-output node that is a buffer of this module: a
 * buffer too (its producer's kernel allocates it). */
static int item_of_realized(const fxcut_memsim *s, int32_t v, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    if (!is_item(g, v))
        return 0;
    int32_t p = s->root[producer_of(g, v)];
    return (s->mark[p] & kept) != 0 && s->realized[p];
}

/* EXTERN, REDUCTION and CAT nodes are buffers; an EXTERN kernel reads
 * buffers, so the values it would inline become buffers too (but those its
 * kernel absorbs). */
static void realize_kernel(fxcut_memsim *s, int32_t v, int kind, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    s->realized[v] = 1;
    if (kind != FXCUT_FUSE_EXTERN)
        return;
    for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
        int32_t r = s->root[g->in_idx[e]];
        if (inlinable(s, r, kept) && !absorbed_here(s, r, kept))
            s->realized[r] = 1;
    }
}

/* POINTWISE node v: the expression inlining it would build, from its
 * inputs' (the inlined ones' expressions, the others one read each):
 * distinct reads (read_set, read_n), reads counted per path, ops, and
 * whether a HEAVY op is in it. */
static void build_expression(fxcut_memsim *s, int32_t v, uint8_t kept)
{
    const fxcut_graph *g = s->g;
    int32_t reads = 0, ops = 1, distinct = 0;
    int32_t *set = s->read_set + (size_t)v * (size_t)s->read_cap;
    uint8_t heavy = (s->fusion[v] & FXCUT_FUSE_HEAVY) != 0;
    for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++) {
        int32_t r = s->root[g->in_idx[e]];
        int inlined = inlinable(s, r, kept);
        distinct = add_reads(s, set, distinct, r, inlined);
        if (inlined) {
            reads = capped_add(reads, s->inlined_reads[r]);
            ops = capped_add(ops, s->inlined_ops[r]);
            heavy = (uint8_t)(heavy | s->inlined_heavy[r]);
        } else {
            reads = capped_add(reads, 1);
        }
    }
    s->read_n[v] = distinct;
    s->inlined_reads[v] = reads;
    s->inlined_ops[v] = ops;
    s->inlined_heavy[v] = heavy;
}

/* Does inductor make POINTWISE node v (its expression built) a buffer?
 * When read more than once and an extern kernel reads it, it is heavy or
 * it is past the reuse thresholds; or when past the accumulated ones. */
static int must_realize(const fxcut_memsim *s, int32_t v, uint8_t kept)
{
    int32_t distinct = s->read_n[v], reads = s->inlined_reads[v];
    int32_t ops = s->inlined_ops[v];
    int extern_reader = 0;
    int32_t readers = readers_in_module(s, v, kept, s->last[v] == INT32_MAX,
                                        &extern_reader);
    return (readers > 1 &&
            (extern_reader || s->inlined_heavy[v] ||
             reads_over(s, distinct, reads, s->realize_reuse_reads) ||
             ops > s->realize_opcount)) ||
           reads_over(s, distinct, reads, s->realize_acc_reads) ||
           ops > s->realize_opcount;
}

/* Which computed nodes of the module are buffers (s->realized), in module
 * order.  s->last must already hold END for the module's outputs. */
static void realize(fxcut_memsim *s, int32_t n_body, uint8_t kept)
{
    const int32_t END = INT32_MAX;
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        s->realized[v] = 0;
        forget_expression(s, v);
    }
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->root[v] != v)
            continue; /* an alias: its root decides */
        int kind = kind_of(s, v);
        if (item_of_realized(s, v, kept)) {
            s->realized[v] = 1;
            continue;
        }
        if (absorbed_here(s, v, kept))
            continue; /* its reader's kernel computes it */
        if (kind == FXCUT_FUSE_EXTERN || kind == FXCUT_FUSE_REDUCTION ||
            kind == FXCUT_FUSE_CAT) {
            realize_kernel(s, v, kind, kept);
            continue;
        }
        build_expression(s, v, kept);
        if (must_realize(s, v, kept))
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
        if (s->realized[v])
            forget_expression(s, v);
    }
}

/* A fresh visit epoch (s->visit holds the epoch that last saw a node; the
 * epochs restart from 0 before they could overflow). */
static int32_t next_epoch(fxcut_memsim *s)
{
    if (s->epoch == INT32_MAX) {
        for (int32_t i = 0; i < s->g->n; i++)
            s->visit[i] = -1;
        s->epoch = 0;
    }
    return s->epoch++;
}

/* The buffers and module inputs kernel k (node v) reads: its inlined
 * expression's leaves.  Calls visit(s, root, k, ctx) once per leaf root. */
typedef void (*leaf_fn)(fxcut_memsim *s, int32_t root, int32_t k, void *ctx);

/* Which of a kernel's leaves walk_leaves visits. */
enum leaf_walk {
    ALL_LEAVES,       /* every leaf of the inlined expression */
    SAME_INDEX_LEAVES /* the leaves read at the index the kernel writes:
                         through whole-storage views and inlined pointwise
                         nodes over the kernel's own iteration space only */
};

/* Does the walk from a kernel over iteration space `space` (0: unknown)
 * step through inlined node r?  Under SAME_INDEX_LEAVES only a pointwise
 * node over that space: a slice, a broadcast or a reduction in between
 * reads another index. */
static int walks_through(const fxcut_memsim *s, int32_t r, int64_t space,
                         enum leaf_walk which)
{
    if (which == ALL_LEAVES)
        return 1;
    return kind_of(s, r) == FXCUT_FUSE_POINTWISE &&
           !(space > 0 && s->iteration != NULL && s->iteration[r] != space);
}

/* The walk itself, depth first from kernel v's inputs through the values
 * it inlines, in one visit epoch (each root visited once). */
static void walk_leaves(fxcut_memsim *s, int32_t v, int32_t k, uint8_t kept,
                        enum leaf_walk which, leaf_fn visit, void *ctx)
{
    const fxcut_graph *g = s->g;
    int64_t space = which == SAME_INDEX_LEAVES && s->iteration != NULL
                        ? s->iteration[v]
                        : 0;
    int32_t ep = next_epoch(s);
    int32_t sp = 0;
    s->visit[v] = ep;
    for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++)
        s->stack[sp++] = g->in_idx[e];
    while (sp > 0) {
        int32_t u = s->stack[--sp];
        int32_t r = s->root[u];
        if (which == SAME_INDEX_LEAVES && u != r && g->nbytes[u] != s->cost[r])
            continue; /* a partial view */
        if (s->visit[r] == ep)
            continue;
        s->visit[r] = ep;
        if (!inlinable(s, r, kept)) {
            visit(s, r, k, ctx);
            continue;
        }
        if (!walks_through(s, r, space, which))
            continue;
        for (int32_t e = g->in_ptr[r]; e < g->in_ptr[r + 1]; e++)
            if (s->visit[s->root[g->in_idx[e]]] != ep)
                s->stack[sp++] = g->in_idx[e];
    }
}

/* A module walk asks each kernel's leaves five times (grouping, last
 * reads, group counts, frees): the first walk of each kernel records them
 * in s->leaf_idx, in the walk's order, while they fit. */
static void record_leaf(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    (void)k;
    int64_t *fill = ctx;
    if (*fill < s->leaf_cap)
        s->leaf_idx[*fill] = r;
    (*fill)++;
}

static void record_reads(fxcut_memsim *s, int32_t nk, uint8_t kept)
{
    int64_t fill = 0; /* past leaf_cap: the rest are walked each time */
    for (int32_t k = 0; k < nk; k++) {
        int64_t start = fill;
        s->leaf_ptr[k] = -1;
        if (fill > s->leaf_cap)
            continue;
        walk_leaves(s, s->kernels[k], k, kept, ALL_LEAVES, record_leaf, &fill);
        if (fill <= s->leaf_cap) {
            s->leaf_ptr[k] = (int32_t)start;
            s->leaf_end[k] = (int32_t)fill;
        }
    }
}

static void kernel_reads(fxcut_memsim *s, int32_t v, int32_t k, uint8_t kept,
                         leaf_fn visit, void *ctx)
{
    int32_t at = s->leaf_ptr[k];
    if (at < 0) {
        walk_leaves(s, v, k, kept, ALL_LEAVES, visit, ctx);
        return;
    }
    for (int32_t end = s->leaf_end[k]; at < end; at++)
        visit(s, s->leaf_idx[at], k, ctx);
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
    int32_t group;    /* the group being walked */
    int32_t kernel;   /* the kernel being walked */
    int32_t found;    /* a read made in / read by the group (grouping) */
    int64_t live;
} step_ctx;

/* In-place candidates: a buffer whose last reader is this kernel and that
 * no other kernel of its fused group reads (inductor updates in place only
 * a buffer read at one index in the fused kernel), of the right size,
 * allocated in an earlier group of this module or donated. */
static void find_inplace(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    if (c->taken >= 0 || s->last[r] != k || s->charge[r] <= 0 ||
        s->group_reads[r] != 1)
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
    (void)k;
    if (s->last[r] < 0 || s->last[r] == INT32_MAX ||
        s->group_of[s->last[r]] != c->group)
        return;
    if (s->charge[r] > 0)
        c->live -= s->charge[r];
    s->last[r] = -2;
}

/* Grouping: does kernel k read what the group made or reads? */
static void shares_with_group(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    (void)k;
    if (s->made_in[r] == c->group || s->read_in[r] == c->group)
        c->found = 1;
}

static void note_group_read(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    (void)k;
    s->read_in[r] = c->group;
}

/* How many kernels of the group being walked read each root: stamps past
 * every group id (c->found), counts in s->group_reads. */
static void count_group_read(fxcut_memsim *s, int32_t r, int32_t k, void *ctx)
{
    step_ctx *c = ctx;
    (void)k;
    if (s->read_in[r] != c->found) {
        s->read_in[r] = c->found;
        s->group_reads[r] = 0;
    }
    s->group_reads[r]++;
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

/* A kernel inductor may fuse with its neighbours: pointwise or reduction
 * work over a known iteration space. */
static int64_t fusable_space(const fxcut_memsim *s, int32_t v)
{
    int kind = kind_of(s, v);
    if (s->iteration == NULL ||
        (kind != FXCUT_FUSE_POINTWISE && kind != FXCUT_FUSE_REDUCTION))
        return 0;
    return s->iteration[v] > 0 ? s->iteration[v] : 0;
}

/* Iteration spaces inductor fuses: equal ones (a pointwise kernel over a
 * slice and one over the whole do not fuse, nor do loops of different
 * lengths; until 2026-12-07 spaces within a factor 2 did here, and a value
 * a language-model loss's gradient reads over the logits' slice and over
 * the whole was a local of no memory: 3.7 MiB below inductor's code on
 * GPT-2's backward at the plan's b=0 pick). */
static int compatible_spaces(int64_t a, int64_t b)
{
    return a == b;
}

/* Groups of consecutive kernels inductor fuses into one: a fusable kernel
 * joins the group before it when both iterate over the same space and it
 * reads a buffer the group makes or a value the group reads.  Sets
 * s->group_of[k] and returns the number of groups. */
static int32_t group_kernels(fxcut_memsim *s, int32_t nk, uint8_t kept)
{
    int32_t ng = 0;
    int64_t space = 0;
    step_ctx c = {kept, 0, -1, -1, -1, 0, 0};
    for (int32_t k = 0; k < nk; k++) {
        int32_t v = s->kernels[k];
        int64_t here = fusable_space(s, v);
        int join = 0;
        if (ng > 0 && here > 0 && space > 0 && compatible_spaces(here, space)) {
            c.group = ng - 1;
            c.found = 0;
            kernel_reads(s, v, k, kept, shares_with_group, &c);
            join = c.found;
        }
        if (!join) {
            ng++;
            space = here;
        }
        c.group = ng - 1;
        s->group_of[k] = ng - 1;
        s->made_in[v] = ng - 1;
        kernel_reads(s, v, k, kept, note_group_read, &c);
    }
    return ng;
}

/* The walk's per-module state: every storage unread, uncharged, not
 * realized (nothing of another module's or another evaluation's walk). */
static void reset_walk(fxcut_memsim *s)
{
    size_t n = (size_t)s->g->n;
    int32_t *reads = s->inlined_reads;
    memset(s->realized, 0, n);
    for (size_t i = 0; i < n; i++) {
        reads[i] = 1;
        reads_only_itself(s, (int32_t)i);
    }
    memset(s->inlined_ops, 0, n * sizeof *s->inlined_ops);
    memset(s->inlined_heavy, 0, n);
    /* all bytes 0xFF: -1 in each of these two's-complement arrays */
    memset(s->last, 0xFF, n * sizeof *s->last);
    memset(s->charge, 0xFF, n * sizeof *s->charge);
    memset(s->visit, 0xFF, n * sizeof *s->visit);
    memset(s->made_in, 0xFF, n * sizeof *s->made_in);
    memset(s->read_in, 0xFF, n * sizeof *s->read_in);
    s->epoch = 0;
}

/* The module's kernels (realized roots, an extern kernel's items with it)
 * into s->kernels; their count. */
static int32_t collect_kernels(fxcut_memsim *s, int32_t n_body)
{
    const fxcut_graph *g = s->g;
    int32_t nk = 0;
    for (int32_t k = 0; k < n_body; k++) {
        int32_t v = s->body[k];
        if (s->root[v] != v || !s->realized[v])
            continue;
        if (is_item(g, v) && s->realized[s->root[producer_of(g, v)]])
            continue; /* allocated by its producer's kernel */
        s->kernels[nk++] = v;
    }
    return nk;
}

/* The last kernel reading each storage (END: lives past the module). */
static void note_last_kernels(fxcut_memsim *s, int32_t nk, uint8_t kept,
                              int32_t end)
{
    const fxcut_graph *g = s->g;
    for (int32_t k = 0; k < nk; k++) {
        int32_t v = s->kernels[k];
        if (s->last[v] != end && s->last[v] < k)
            s->last[v] = k;
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if (is_item(g, u) && s->root[u] == u && s->last[u] != end &&
                s->last[u] < k)
                s->last[u] = k;
        }
        kernel_reads(s, v, k, kept, note_last_read, NULL);
    }
}

/* The module's inputs (``held``) charged once each; those no kernel reads
 * dropped at once. */
static void charge_inputs(fxcut_memsim *s, uint8_t held, step_ctx *c)
{
    const fxcut_graph *g = s->g;
    for (int32_t i = 0; i < g->n; i++) {
        int32_t r = s->root[i];
        if ((s->mark[i] & held) != 0 && s->charge[r] < 0) {
            s->charge[r] = s->cost[r];
            c->live += s->cost[r];
            if (s->last[r] == -1)
                s->last[r] = -2; /* read by no kernel: dropped at once */
        }
    }
    for (int32_t i = 0; i < g->n; i++)
        if (s->last[i] == -2 && s->charge[i] > 0) {
            c->live -= s->charge[i];
            s->charge[i] = 0;
        }
}

/* What kernel v holds only while it runs: the layout copies of its inputs
 * and, in a module whose layout is optimised, its workspace. */
static int64_t kernel_transient(const fxcut_memsim *s, int32_t v)
{
    int64_t ws = s->workspace != NULL && s->layout_on ? s->workspace[v] : 0;
    return input_copies(s, v) + ws;
}

/* Whether one of the module's n_body nodes is a FUSE_LAYOUT kernel. */
static int32_t module_layout_on(const fxcut_memsim *s, int32_t n_body)
{
    for (int32_t k = 0; k < n_body; k++)
        if ((s->fusion[s->body[k]] & FXCUT_FUSE_LAYOUT) != 0)
            return 1;
    return 0;
}

/* Kernel v of group grp (kernels k0 .. k1) allocates its buffer: none for
 * a group-local value, a dying buffer's in place, else a new one; returns
 * what it holds only while it runs (kernel_transient). */
static int64_t alloc_kernel(fxcut_memsim *s, int32_t k, int32_t k0,
                            int32_t k1, int32_t grp, int32_t end,
                            step_ctx *c)
{
    const fxcut_graph *g = s->g;
    int32_t v = s->kernels[k];
    if (s->charge[v] >= 0) /* live already (a module input it also computes): charged once */
        return kernel_transient(s, v);
    int64_t items = 0;
    int64_t own = kernel_alloc(s, v, c->kept, &items);
    if (k1 - k0 > 1 && s->last[v] != end && s->last[v] >= 0 &&
        s->group_of[s->last[v]] == grp &&
        (g->flags[v] & FXCUT_F_VAL_IS_SEQ) == 0) {
        /* read only inside its fused kernel: a local, no buffer */
        s->charge[v] = 0;
        c->live += items;
        return 0;
    }
    c->want = own;
    c->taken = -1;
    if (own > 0 && kind_of(s, v) == FXCUT_FUSE_POINTWISE &&
        (g->flags[v] & FXCUT_F_VAL_IS_SEQ) == 0)
        /* the in-place candidates among its reads: those at the index it
         * writes (inductor updates no other in place) */
        walk_leaves(s, v, k, c->kept, SAME_INDEX_LEAVES, find_inplace, c);
    if (c->taken >= 0) {
        s->charge[v] = s->charge[c->taken];
        s->charge[c->taken] = 0;
        c->live += items;
    } else {
        s->charge[v] = own;
        c->live += own + items;
    }
    return kernel_transient(s, v);
}

/* After group grp (kernels k0 .. k1): what it read for the last time, and
 * its own buffers and items nothing reads later, freed. */
static void free_group(fxcut_memsim *s, int32_t k0, int32_t k1, int32_t grp,
                       int32_t end, step_ctx *c)
{
    const fxcut_graph *g = s->g;
    for (int32_t k = k0; k < k1; k++) {
        int32_t v = s->kernels[k];
        kernel_reads(s, v, k, c->kept, free_dead, c);
        if (s->last[v] >= 0 && s->last[v] != end &&
            s->group_of[s->last[v]] == grp) {
            c->live -= s->charge[v] > 0 ? s->charge[v] : 0;
            s->last[v] = -2;
        }
        for (int32_t e = s->user_ptr[v]; e < s->user_ptr[v + 1]; e++) {
            int32_t u = s->user_idx[e];
            if (is_item(g, u) && s->root[u] == u && s->last[u] >= 0 &&
                s->last[u] != end && s->group_of[s->last[u]] == grp) {
                c->live -= s->charge[u] > 0 ? s->charge[u] : 0;
                s->last[u] = -2;
            }
        }
    }
}

/* The end (a kernel index) of the call starting at kernel k0: its fused
 * group, and with kernel_calls every following group up to the next
 * extern kernel (inductor's C++ backend flushes its kernel group there). */
static int32_t call_end(const fxcut_memsim *s, int32_t k0, int32_t nk)
{
    int32_t k1 = k0;
    while (k1 < nk && s->group_of[k1] == s->group_of[k0])
        k1++;
    if (!s->kernel_calls || kind_of(s, s->kernels[k0]) == FXCUT_FUSE_EXTERN)
        return k1;
    while (k1 < nk && kind_of(s, s->kernels[k1]) != FXCUT_FUSE_EXTERN)
        k1++;
    return k1;
}

/* The end of the fused group starting at kernel k (before kend). */
static int32_t group_end(const fxcut_memsim *s, int32_t k, int32_t kend)
{
    int32_t b = k;
    while (b < kend && s->group_of[b] == s->group_of[k])
        b++;
    return b;
}

/* The call of kernels k0 .. k1 allocates its groups' buffers, each group
 * counting its reads first (in-place updates need them); returns what its
 * kernels hold only while they run. */
static int64_t alloc_call(fxcut_memsim *s, int32_t k0, int32_t k1, int32_t ng,
                          int32_t end, step_ctx *c)
{
    int64_t copies = 0;
    for (int32_t a = k0, b; a < k1; a = b) {
        int32_t grp = s->group_of[a];
        b = group_end(s, a, k1);
        c->group = grp;
        c->found = ng + grp; /* the counting stamp: past every group id */
        for (int32_t k = a; k < b; k++)
            kernel_reads(s, s->kernels[k], k, c->kept, count_group_read, c);
        for (int32_t k = a; k < b; k++)
            copies += alloc_kernel(s, k, a, b, grp, end, c);
    }
    return copies;
}

/* After the call of kernels k0 .. k1: each group's dead buffers freed. */
static void free_call(fxcut_memsim *s, int32_t k0, int32_t k1, int32_t end,
                      step_ctx *c)
{
    for (int32_t a = k0, b; a < k1; a = b) {
        b = group_end(s, a, k1);
        c->group = s->group_of[a];
        free_group(s, a, b, c->group, end, c);
    }
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
    reset_walk(s);
    for (int32_t k = first_out; k < end_out; k++)
        if (g->outputs[k] >= 0)
            s->last[s->root[g->outputs[k]]] = END;
    for (int32_t i = 0; i < g->n; i++)
        if ((s->mark[i] & pinned) != 0)
            s->last[s->root[i]] = END;
    realize(s, n_body, kept);
    s->layout_on = s->workspace != NULL && module_layout_on(s, n_body);
    int32_t nk = collect_kernels(s, n_body);
    record_reads(s, nk, kept);
    int32_t ng = group_kernels(s, nk, kept);
    note_last_kernels(s, nk, kept, END);
    step_ctx c = {kept, 0, -1, -1, -1, 0, 0};
    charge_inputs(s, held, &c);
    for (int32_t k0 = 0, k1; k0 < nk; k0 = k1) {
        k1 = call_end(s, k0, nk);
        int64_t copies = alloc_call(s, k0, k1, ng, END, &c);
        c.live += copies;
        for (int32_t k = k0; k < k1; k++) {
            if (res->schedule != NULL)
                res->schedule[step0 + k] = s->kernels[k];
            if (res->live_bytes != NULL)
                res->live_bytes[step0 + k] = c.live;
        }
        if (*peak_step < 0 || c.live > peak) {
            peak = c.live;
            *peak_step = step0 + k0;
        }
        c.live -= copies;
        free_call(s, k0, k1, END, &c);
    }
    *n_steps = nk;
    return peak;
}
