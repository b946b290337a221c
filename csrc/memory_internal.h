/*
 * memory_internal.h -- the memory model for callers that evaluate many
 * decisions over one graph (the planner): built once per graph, evaluated
 * with no allocation per call.  Internal: no validation beyond the
 * decision's realisability; the semantics are fxcut_memory_simulate's
 * (fxcut.h).
 */
#ifndef FXCUT_MEMORY_INTERNAL_H
#define FXCUT_MEMORY_INTERNAL_H

#include "fxcut.h"

/* The most distinct reads the inductor model counts per inlined value
 * (inductor compares them with realize_reads_threshold, 4, and the CPU
 * accumulated-reads threshold, 12 in torch 2.13: any count past both
 * decides alike). */
#define FXCUT_READ_SET_MAX 64

/* Per-node marks of one evaluation (bits of fxcut_memsim.mark). */
enum {
    M_SAVED = 1u << 0,      /* a backward input (after the unused are dropped) */
    M_BW_VALID = 1u << 1,   /* computable in the backward (inputs included) */
    M_BW_KEPT = 1u << 2,    /* a computed node of the backward module */
    M_FW_VALID = 1u << 3,
    M_FW_KEPT = 1u << 4,
    M_NEEDED = 1u << 5,     /* scratch of the dead-code passes */
    M_EMITTED = 1u << 6,    /* scratch of the backward reordering */
    M_FOUND = 1u << 7
};

struct fxcut_memsim {
    const fxcut_graph *g;
    int32_t num_fwd_outputs;
    const int64_t *flops;
    const uint8_t *marks;
    int32_t hold_saved;     /* the backward holds its saved values to its end */
    int32_t kernel_calls;   /* fused walk: the kernels between two extern
                               kernels run as one call (inductor's CPU
                               backend) */
    const int64_t *workspace; /* per node: bytes its kernel holds inside
                               itself while it runs (NULL: none) */
    int32_t layout_on;      /* fused walk: the module holds a FUSE_LAYOUT
                               kernel, its workspaces count */
    int32_t *root;          /* storage root of every node */
    int64_t *cost;          /* bytes a root's storage costs (0: not counted) */
    uint8_t *tangent_dep;   /* depends on a tangent / backward seed */
    int32_t *user_ptr;      /* users CSR */
    int32_t *user_idx;
    /* scratch, n entries each */
    uint8_t *mark;
    int32_t *body;          /* a module's nodes in order */
    int32_t *order;         /* the same after reordering / raising getitems */
    int32_t *stack;         /* n + 1 entries; n + 1 + edges under the
                               inductor model (kernel_reads) */
    int32_t *found;
    int32_t *last;          /* per root: last step reading it (INT32_MAX: end) */
    int64_t *charge;        /* per root: bytes its birth added (-1: unborn) */
    /* the inductor model (fusion != NULL; memory_fused.c) */
    const uint8_t *fusion;
    const int64_t *fused_cost;
    int32_t realize_reuse_reads, realize_acc_reads, realize_opcount;
    uint8_t *realized;      /* per node: a buffer of its own in the module
                               walked last (the backward after an eval) */
    uint8_t *donated;       /* per root: a saved storage the backward may
                               update in place */
    int32_t *inlined_reads; /* per node: reads of its inlined expression,
                               counted once per path (an upper bound) */
    int32_t *read_set;      /* per node: read_cap entries, the distinct
                               buffers its inlined expression reads */
    int32_t *read_n;        /* per node: how many (read_cap: at least) */
    int32_t read_cap;
    int32_t *inlined_ops;   /* per node: ops of its inlined expression */
    uint8_t *inlined_heavy; /* per node: a HEAVY op in it */
    int32_t *visit;         /* per node: the visit epoch that last saw it */
    int32_t epoch;
    int32_t *kernels;       /* a module's kernels (nodes) in order */
    const int64_t *iteration; /* per node: the iteration space of a kernel
                               inductor may fuse with its neighbours (0:
                               none); NULL: no fusion beyond inlining */
    int32_t *group_of;      /* per kernel: its fused group */
    int32_t *made_in;       /* per node: the group that made its buffer */
    int32_t *read_in;       /* per root: the last group that read it */
    int32_t *group_reads;   /* per root: kernels of the walked group
                               reading it */
    int32_t *leaf_ptr;      /* per kernel: where its leaves start in
                               leaf_idx (-1: not recorded, walked) */
    int32_t *leaf_end;      /* per kernel: where they end */
    int32_t *leaf_idx;      /* leaf_cap entries: the leaves the kernels of
                               the module walked last read, in order */
    int32_t leaf_cap;
};

typedef struct fxcut_memsim fxcut_memsim;

/* g validated by the caller (fxcut_graph_validate), opt->storage_of in
 * [0, i] and opt->flops >= 0, num_fwd_outputs in [0, n_outputs]: checked
 * by fxcut_memory_simulate, not here.  FXCUT_E_OVERFLOW when the sizes or
 * the flops of all nodes sum past INT64_MAX (no total can overflow then).  g's and opt's arrays must outlive
 * the simulator (they are read again by every evaluation). */
int fxcut_memsim_new(const fxcut_graph *g, const fxcut_memory_options *opt,
                     fxcut_memsim **out, fxcut_error *err);

/* saved_mask: n bytes, nonzero = the forward saves node i.  Returns
 * FXCUT_OK, or FXCUT_E_INVALID with err->node set when the decision is not
 * realisable (a value the backward needs can be neither saved nor
 * recomputed from saved values / inputs, e.g. a tangent-dependent value). */
int fxcut_memsim_eval(fxcut_memsim *s, const uint8_t *saved_mask,
                      fxcut_memory_result *res, fxcut_error *err);

void fxcut_memsim_free(fxcut_memsim *s);

/* Validates the inductor model's options (fxcut_memory_options: fusion
 * kinds, fused_cost >= 0, thresholds >= 0); FXCUT_E_INVALID naming the
 * node otherwise.  fusion NULL (the unfused model) needs fused_cost NULL. */
int fxcut_check_fusion(const fxcut_graph *g, const uint8_t *fusion,
                       const int64_t *fused_cost, const int64_t *iteration,
                       int32_t reuse_reads, int32_t acc_reads,
                       int32_t opcount, fxcut_error *err);

/* The walk of one module under the inductor model (memory_fused.c): the
 * module's nodes are s->body[0 .. n_body) in order, marked `kept`; values
 * marked `held` are live at the start, outputs[first_out .. end_out) and
 * values marked `pinned` live to the end.  Writes kernels step0 .. of the
 * result's optional arrays, sets *n_steps, returns the module's peak (its
 * step in *peak_step, -1 when there is no kernel) and leaves s->realized
 * set for the module. */
int64_t fxcut_memsim_walk_fused(fxcut_memsim *s, int32_t n_body, uint8_t kept,
                                uint8_t held, uint8_t pinned,
                                int32_t first_out, int32_t end_out,
                                int32_t step0, fxcut_memory_result *res,
                                int32_t *peak_step, int32_t *n_steps);

/* Readers of the last fxcut_memsim_eval that returned FXCUT_OK (for the
 * planner, which picks its moves from the model's own schedule):
 * out[i] = 1 where the backward reads node i as a saved value (the saved
 * mask after the values it never reads are dropped), n bytes. */
void fxcut_memsim_saved(const fxcut_memsim *s, uint8_t *out);

/* The node that owns node i's storage, and the bytes a storage root costs
 * (0: not counted), as the model counts them. */
int32_t fxcut_memsim_root(const fxcut_memsim *s, int32_t i);
int64_t fxcut_memsim_storage_bytes(const fxcut_memsim *s, int32_t root);

#endif /* FXCUT_MEMORY_INTERNAL_H */
