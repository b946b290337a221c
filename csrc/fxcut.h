/*
 * fxcut.h -- the public C API of fxcut's core.
 *
 * The core knows nothing of Python, fx or torch.  It works over a compact
 * "graph array": one row per fx node, in graph order, every array flat and
 * contiguous, indices int32.  The CPython binding (module.c) fills this
 * struct from buffers and calls the entry points with the GIL released.
 *
 * Every entry point returns FXCUT_OK or an error code and, on error, fills an
 * fxcut_error with a message and the index of the offending node (or -1).
 * No entry point keeps state between calls; all memory is owned by the
 * caller or freed before return.
 *
 * The contract on inputs:
 *   - fxcut_graph_validate checks a graph array (every invariant stated
 *     above fxcut_graph).  fxcut_graph_users, fxcut_param_alias_walk,
 *     fxcut_partition_decide and fxcut_budget_plan_decide REQUIRE a graph
 *     that fxcut_graph_validate accepted; given any other, their behaviour
 *     is undefined.  They check everything else they are given themselves:
 *     the options (num_fwd_outputs, keep_network, the budget), the index
 *     lists (params, force_save, the fuse pairs), each entry read once and
 *     checked before it is used.
 *   - fxcut_min_cut (maxflow.h) and fxcut_knapsack_solve (knapsack.h)
 *     validate all of their input.
 *   - No input array may change while an entry point runs: what was
 *     validated is read again later.  A caller whose arrays another thread
 *     can write (the binding: Python buffers, read without the GIL) copies
 *     the arrays that hold indices first, and validates the copy.  The
 *     other arrays (kinds, flags, tags, sizes, masks) are only compared and
 *     summed, never used to address memory, so a torn value there gives a
 *     wrong answer at worst.
 *   - Caller-allocated result arrays are sized by fxcut_result_sizes_for.
 */
#ifndef FXCUT_H
#define FXCUT_H

#include <stddef.h>
#include <stdint.h>

/* ---- node kinds (fx Node.op) ------------------------------------------ */
enum fxcut_kind { /* consecutive from 0 */
    FXCUT_PLACEHOLDER = 0,
    FXCUT_CALL_FUNCTION,
    FXCUT_GET_ATTR,
    FXCUT_OUTPUT,
    FXCUT_CALL_MODULE,
    FXCUT_CALL_METHOD,
    FXCUT_NUM_KINDS
};

/* ---- per-node flags ---------------------------------------------------- */
enum fxcut_flag {
    FXCUT_F_PRIMAL = 1u << 0,          /* placeholder, not tangent / seed */
    FXCUT_F_TANGENT = 1u << 1,         /* placeholder named tangents_* */
    FXCUT_F_FWD_SEED = 1u << 2,        /* fwd_seed / fwd_base_offset */
    FXCUT_F_BWD_SEED = 1u << 3,        /* bwd_seed / bwd_base_offset */
    FXCUT_F_NO_COPY = 1u << 4,         /* target aliases its input (walk) */
    FXCUT_F_CAST = 1u << 5,            /* dtype cast in DeepSpeed's sense */
    FXCUT_F_VIEW = 1u << 6,            /* torch's partitioner view op */
    FXCUT_F_FUSIBLE = 1u << 7,
    FXCUT_F_RECOMPUTABLE = 1u << 8,    /* in the recompute allowlist */
    FXCUT_F_RANDOM = 1u << 9,
    FXCUT_F_COMPUTE_INTENSIVE = 1u << 10,
    FXCUT_F_NON_BUILTIN = 1u << 11,    /* is_non_builtin_to_include */
    FXCUT_F_GETITEM = 1u << 12,        /* operator.getitem */
    FXCUT_F_SYM = 1u << 13,            /* meta["val"] is a SymInt/Float/Bool */
    FXCUT_F_SYMFLOAT = 1u << 14,       /* meta["val"] is a SymFloat */
    FXCUT_F_NON_TENSOR = 1u << 15,     /* value is not a tensor */
    FXCUT_F_FREE_OBJECT = 1u << 16,    /* BackwardState / script object */
    FXCUT_F_MUST_BE_IN_BW = 1u << 17,  /* _must_be_in_backward */
    FXCUT_F_IMPURE = 1u << 18,         /* survives dead-code elimination */
    FXCUT_F_COLLECTIVE = 1u << 19,     /* _c10d_functional op */
    FXCUT_F_CAT = 1u << 20,            /* aten.cat: anything fuses into it */
    FXCUT_F_LIFT_FRESH = 1u << 21,     /* lift_fresh(_copy): never banned */
    FXCUT_F_NO_FUSE_OUT = 1u << 22,    /* getitem of a user triton kernel */
    FXCUT_F_WITH_EFFECTS = 1u << 23,   /* with_effects higher-order op */
    FXCUT_F_BW_HOOK = 1u << 24,        /* meta["has_backward_hook"] */
    FXCUT_F_VAL_IS_SEQ = 1u << 25,     /* meta["val"] is a tuple / list */
    FXCUT_F_HAS_AC_ID = 1u << 26,      /* meta has "ac_graph_id" */
    FXCUT_F_IS_BACKWARD_TAG = 1u << 27, /* partitioner_tag == "is_backward" */
    FXCUT_F_MUTABLE_HOP = 1u << 28,    /* auto_functionalized / user triton
                                          kernel: fusible with the inputs it
                                          mutates (see fuse pairs) */
    FXCUT_F_MUST_BE_IN_FW = 1u << 29   /* _must_be_in_forward: tagged so, or
                                          a mutation not tagged backward */
};

/* meta["recompute"] as torch's CheckpointPolicy values; -1 when absent. */
enum fxcut_tag {
    FXCUT_TAG_NONE = -1,
    FXCUT_TAG_MUST_SAVE = 0,
    FXCUT_TAG_PREFER_SAVE = 1,
    FXCUT_TAG_MUST_RECOMPUTE = 2,
    FXCUT_TAG_PREFER_RECOMPUTE = 3,
    FXCUT_TAG_MUST_CPU_OFFLOAD = 4,
    FXCUT_TAG_PREFER_CPU_OFFLOAD = 5,
    FXCUT_TAG_MAX = 5
};

/* nbytes[i] == FXCUT_SIZE_UNKNOWN: the node has no size (torch would raise
 * if it ever asked for it). */
#define FXCUT_SIZE_UNKNOWN ((int64_t)-1)

/*
 * The graph array.  n rows; for every i in [0, n):
 *   kind[i]         one of enum fxcut_kind
 *   flags[i]        bit set of enum fxcut_flag
 *   tag[i]          enum fxcut_tag
 *   ac_graph_id[i]  meta["ac_graph_id"] (meaningful when FXCUT_F_HAS_AC_ID)
 *   nbytes[i]       byte size of the value, or FXCUT_SIZE_UNKNOWN
 *   arg_idx[arg_ptr[i] .. arg_ptr[i+1])  positional top-level Node args
 *   in_idx[in_ptr[i] .. in_ptr[i+1])     every input node (args, kwargs,
 *                                        nested), each at most once
 *   outputs[0 .. n_outputs)              the leaves of the output node's
 *                                        value, in order, forward outputs
 *                                        first; -1 for a leaf that is not a
 *                                        node (a None gradient)
 * Invariants checked by fxcut_graph_validate: ptr arrays start at 0, never
 * decrease, end at the edge count; every index is in [0, n) and names an
 * earlier node (graph order is a topological order).
 */
typedef struct {
    int32_t n;
    const uint8_t *kind;
    const uint32_t *flags;
    const int8_t *tag;
    const int32_t *ac_graph_id;
    const int64_t *nbytes;
    const int32_t *arg_ptr;
    const int32_t *arg_idx;
    const int32_t *in_ptr;
    const int32_t *in_idx;
    int32_t n_outputs;
    const int32_t *outputs;
} fxcut_graph;

enum fxcut_status {
    FXCUT_OK = 0,
    FXCUT_E_INVALID = 1,    /* malformed arrays (ValueError) */
    FXCUT_E_INDEX = 2,      /* an index out of range (IndexError) */
    FXCUT_E_NOMEM = 3,      /* allocation failed (MemoryError) */
    FXCUT_E_UNBOUNDED = 4,  /* source and sink joined by infinite edges */
    FXCUT_E_OVERFLOW = 5,   /* a quantity does not fit the integer type */
    FXCUT_E_SIZE = 6,       /* a node's size was needed but is unknown */
    FXCUT_E_UNSUPPORTED = 7, /* a graph shape the core does not decide */
    FXCUT_E_INTERNAL = 8    /* a broken invariant of the core itself: a
                               bug (SystemError) */
};

typedef struct {
    int code;
    int64_t node;       /* offending node index, or -1 */
    char message[256];
} fxcut_error;

/* ---- graph.c ----------------------------------------------------------- */

/* Checks every invariant stated above fxcut_graph. */
int fxcut_graph_validate(const fxcut_graph *g, fxcut_error *err);

/* The users of every node as CSR (the transpose of in_ptr / in_idx), users
 * of a node in graph order.  *user_ptr (n+1) and *user_idx are malloc'ed;
 * the caller frees them. */
int fxcut_graph_users(const fxcut_graph *g, int32_t **user_ptr,
                      int32_t **user_idx, fxcut_error *err);

/* ---- walk.c: DeepCompile's ZeRO-3 parameter-alias walk ----------------- */

/*
 * params[0 .. n_params) are node indices of parameter placeholders.  On
 * return recompute[i] == 1 for every call_function node flagged NO_COPY or
 * CAST that has a positional top-level arg which is a parameter or a node
 * already marked; 0 elsewhere.  recompute has n entries.
 */
int fxcut_param_alias_walk(const fxcut_graph *g, const int32_t *params,
                           int32_t n_params, uint8_t *recompute,
                           fxcut_error *err);

/* ---- the partition decision (tags.c, classify.c, bans.c, decide.c) ---- */

/* Per-node class bits reported in fxcut_partition_result.node_class. */
enum fxcut_node_class {
    FXCUT_C_REQUIRED_FW = 0x01,
    FXCUT_C_REQUIRED_BW = 0x02,
    FXCUT_C_TANGENTS_CLOSURE = 0x04,
    FXCUT_C_INPUT = 0x08,           /* primal or forward seed / offset */
    FXCUT_C_BANNED = 0x10,          /* source -> X_in is infinite */
    FXCUT_C_SAVED = 0x20,           /* X_in -> X_out is in the cut */
    FXCUT_C_SINK_SIDE = 0x40,       /* X_in can reach the sink: recomputed
                                       (or computed) in backward */
    FXCUT_C_MUST_RECOMPUTE = 0x80   /* X_in -> sink is infinite */
};

/* Why a node was banned from recomputation (ban_reason). */
enum fxcut_ban_reason { /* consecutive from 0 */
    FXCUT_BAN_NONE = 0,
    FXCUT_BAN_PRIMAL,
    FXCUT_BAN_FWD_SEED,
    FXCUT_BAN_MUST_SAVE,
    FXCUT_BAN_NOT_IN_ALLOWLIST,
    FXCUT_BAN_RANDOM,
    FXCUT_BAN_COMPUTE_INTENSIVE,
    FXCUT_BAN_NON_BUILTIN,
    FXCUT_BAN_MATERIALIZED_BACKWARD,
    FXCUT_BAN_FAR_FROM_BACKWARD,
    FXCUT_BAN_REDUCTION,
    FXCUT_BAN_USED_FAR_APART,
    FXCUT_BAN_LONG_FUSIBLE_CHAIN
};

/* Capacity of an infinite edge in fxcut_partition_result.weight. */
#define FXCUT_WEIGHT_INF ((int64_t)-1)
/* No X_in -> X_out edge for this node. */
#define FXCUT_WEIGHT_NONE ((int64_t)-2)

/* What a decision does with its flow network. */
enum fxcut_keep_network {
    FXCUT_KEEP_NONE = 0,       /* solve it and free it */
    FXCUT_KEEP_NETWORK = 1,    /* solve it and hand it back (net_*) */
    FXCUT_KEEP_BUILD_ONLY = 2, /* build it and hand it back unsolved:
                                  saved stays empty, cut_value 0 */
    FXCUT_KEEP_MAX = 2
};

/*
 * The options of torch's min-cut partitioner (MinCutOptions and the
 * torch._functorch.config values it reads), read by Python at call time.
 */
typedef struct {
    int32_t num_fwd_outputs;        /* outputs[0 .. num_fwd_outputs) */
    uint8_t ban_if_used_far_apart;
    uint8_t ban_if_long_fusible_chains;
    uint8_t ban_if_materialized_backward;
    uint8_t ban_if_not_in_allowlist;
    uint8_t ban_if_reduction;
    uint8_t recompute_views;
    uint8_t treat_parameters_as_free_to_save;
    uint8_t is_non_builtin_to_include;
    uint8_t unsafe_allow_optimization_of_collectives;
    int64_t max_dist_from_bw;
    /* n entries or NULL: primals whose lifetime is static (parameters) */
    const uint8_t *static_lifetime;
    /* n entries or NULL: nonzero for a node no ban rule may ban (the
     * memory budget's recomputed knapsack candidates): it gets no source
     * edge and no ban_reason.  Collectives stay banned unless
     * unsafe_allow_optimization_of_collectives; a node tagged to be
     * recomputed, a view and a SymFloat are never banned anyway. */
    const uint8_t *dont_ban;
    /* Nodes forced MUST_SAVE after the other tag passes (the sources of
     * mutations that happen both in forward and backward). */
    const int32_t *force_save;
    int32_t n_force_save;
    /* (a, b) pairs where b is a MUTABLE_HOP node that mutates a: fusible. */
    const int32_t *fuse_pair_a;
    const int32_t *fuse_pair_b;
    int32_t n_fuse_pairs;
    /* enum fxcut_keep_network */
    uint8_t keep_network;
    /* NULL, or called at most once (with release_graph_arg) as soon as
     * fxcut_partition_decide reads none of g's arrays any more: after its
     * network is built, before the max-flow allocates.  A caller that
     * passed private copies of the arrays frees them there, so they never
     * sit under the max-flow's peak. */
    void (*release_graph)(void *arg);
    void *release_graph_arg;
} fxcut_partition_options;

/*
 * What the decision produced.  The arrays are allocated by the caller, with
 * the entries fxcut_result_sizes_for gives.
 */
typedef struct {
    int8_t *tag;            /* tags after clean-up and forced saves */
    uint8_t *node_class;    /* enum fxcut_node_class bits */
    uint8_t *ban_reason;    /* enum fxcut_ban_reason */
    int64_t *dist_from_bw;
    int64_t *weight;        /* X_in -> X_out capacity, or WEIGHT_INF/NONE */
    int32_t *saved;         /* saved node indices, in graph order */
    int32_t n_saved;
    int32_t n_required_bw;  /* 0: torch hands the graph to default_partition */
    int32_t *chain;         /* on FXCUT_E_UNBOUNDED: the nodes of one infinite
                               source -> sink path, in order */
    int32_t n_chain;
    uint64_t cut_value_hi;  /* the cut's exact capacity: */
    uint64_t cut_value_lo;  /* cut_value_hi * 2^64 + cut_value_lo */
    /* With opt->keep_network: the flow network (2n + 2 vertices: X_in = 2i,
     * X_out = 2i + 1, source 2n, sink 2n + 1; capacity -1 = infinite).
     * Owned by the result: release with fxcut_partition_result_release. */
    int32_t *net_tail;
    int32_t *net_head;
    int64_t *net_cap;
    int64_t net_len;
} fxcut_partition_result;

void fxcut_partition_result_release(fxcut_partition_result *res);

/* Entries of the caller-allocated result arrays for a graph of n nodes: the
 * one rule the binding and the fuzzers allocate by. */
typedef struct {
    size_t per_node;    /* tag, node_class, ban_reason, dist_from_bw, weight */
    size_t saved;       /* fxcut_partition_result.saved */
    size_t chain;       /* fxcut_partition_result.chain */
    size_t candidates;  /* fxcut_budget_plan.candidates and .memories */
} fxcut_result_sizes;

fxcut_result_sizes fxcut_result_sizes_for(int32_t n);

/*
 * The whole decision of torch's min_cut_rematerialization_partition at
 * memory budget 1: tag clean-up and forced saves, classification,
 * dist_from_bw, the ban rules, the weights, the split-node network, the
 * max-flow and the saved set.  When no node is required for backward it
 * stops after classification with n_required_bw == 0.
 */
int fxcut_partition_decide(const fxcut_graph *g,
                           const fxcut_partition_options *opt,
                           fxcut_partition_result *res, fxcut_error *err);

/* ---- the activation memory budget (budget.c) --------------------------- */

/*
 * torch's choose_saved_values_set up to its knapsack.  What it settled on:
 */
enum fxcut_budget_stage {
    FXCUT_STAGE_NO_BACKWARD = 0,     /* no node is required for backward:
                                        torch hands the graph to
                                        default_partition; nothing cut */
    FXCUT_STAGE_INPUTS = 1,          /* budget 0: save the inputs */
    FXCUT_STAGE_MIN_CUT = 2,         /* budget 1, or the plain cut saves no
                                        more than the inputs */
    FXCUT_STAGE_MORE_AGGRESSIVE = 3, /* the cut without the used-far-apart,
                                        long-chain and materialized-backward
                                        bans fits the budget */
    FXCUT_STAGE_AGGRESSIVE = 4,      /* ... and without the allowlist ban */
    FXCUT_STAGE_NO_CANDIDATES = 5,   /* nothing banned is recomputable:
                                        the inputs and the MUST_SAVE ones */
    FXCUT_STAGE_KNAPSACK = 6         /* the caller estimates the candidates'
                                        runtimes, solves the knapsack and
                                        cuts with the recomputed candidates
                                        un-banned (dont_ban) under the
                                        aggressive switches */
};

typedef struct {
    double memory_budget;           /* in [0, 1] */
    /* n entries, or NULL when every value's storage is its own: 1 where
     * the node's storage is one of the inputs' (torch compares
     * get_node_storage(node) against the inputs', None included).  A banned
     * node sharing an input's storage is no candidate. */
    const uint8_t *input_storage;
} fxcut_budget_options;

/*
 * The plan.  Caller-allocated arrays of n entries.  On return res holds
 * the tags and classification, and the last cut the plan made (for every
 * stage but KNAPSACK, res->saved is the answer).
 */
typedef struct {
    int stage;                      /* enum fxcut_budget_stage */
    double min_act_size;            /* sizes of the inputs / of the plain
                                       cut's saved values, bytes / 1e9 */
    double max_act_size;
    double ratio_more_aggressive;   /* memory ratios of the two passes */
    double ratio_aggressive;        /* (NaN where not reached) */
    int32_t *candidates;            /* the knapsack's items, in torch's
                                       order: by size, largest first, ties
                                       in graph order */
    double *memories;               /* their sizes on the budget's scale */
    int32_t n_candidates;
    int32_t n_passes;               /* min-cuts solved */
} fxcut_budget_plan;

/* Per pass: opt's ban switches, relaxed by the budget pass as torch
 * relaxes them.  opt->dont_ban and opt->keep_network are ignored: no pass
 * un-bans anything (the knapsack's final cut is the caller's) or keeps its
 * network. */
int fxcut_budget_plan_decide(const fxcut_graph *g,
                             const fxcut_partition_options *opt,
                             const fxcut_budget_options *bopt,
                             fxcut_partition_result *res,
                             fxcut_budget_plan *plan, fxcut_error *err);

/* The ban switches of the budget's final cut and of torch's
 * aggressive_recomputation ("aggressive": no used-far-apart, long-chain,
 * materialized-backward or allowlist ban): the relaxation, written once. */
void fxcut_budget_aggressive_options(const fxcut_partition_options *opt,
                                     fxcut_partition_options *out);

/* ---- the memory model (memory.c) --------------------------------------- */

/*
 * The live activation bytes of the forward and backward modules a decision
 * produces, as they run: torch's module extraction emulated on the graph
 * array, then a liveness walk of each module.  The choices, stated once:
 *
 *  - Forward module: the call_function / get_attr nodes computable from the
 *    primals and forward seeds (never a MUST_BE_IN_BW node), kept when a
 *    forward output or a saved value needs them or they are IMPURE, in
 *    joint order; then every getitem moved right after its producer
 *    (torch's raise_getitems).
 *  - Saved values the backward never reads are dropped first, as torch's
 *    extraction drops them (they cost nothing).
 *  - Backward module: the nodes computable from the saved values, tangents
 *    and backward seeds (never a FXCUT_X_MUST_FW node), kept when a
 *    gradient needs them or they are IMPURE; ordered as
 *    reordering_to_mimic_autograd_engine orders them: when a tangent is
 *    used, from the first tangent user on each node is preceded by the
 *    not-yet-emitted nodes it needs, in joint order; before it only the
 *    FXCUT_X_COPY nodes are pulled; then raise_getitems.
 *  - Bytes: a value's storage is storage_of's root (storage_of[i] < i is
 *    followed to a node that is its own storage); a storage costs the
 *    nbytes of its root, once, while any value on it is live.  Storages of
 *    placeholders (primals, parameters, tangents, seeds) cost nothing; so
 *    do values of unknown size and non-tensor values other than sequences.
 *    A sequence-valued node (a multi-output op) owning its storage
 *    allocates its whole nbytes at its step; the part its getitems in the
 *    same module own (storage_of == themselves) lives as long as those
 *    getitems, the rest as long as the sequence node.
 *  - A value is allocated at its step and freed after the last step of its
 *    module that reads a value on its storage; module outputs (forward
 *    outputs and saved values in the forward, gradients in the backward)
 *    live to the module's end.  The backward starts with the saved
 *    storages live; forward outputs are not carried over.
 *  - live_bytes[s] is the bytes live while step s runs (its inputs and its
 *    output both allocated, before anything is freed after it); the peak is
 *    their maximum, and 0 for a module with no step.  Workspace an op
 *    allocates and frees inside itself is not modelled.
 *  - Recomputed: a backward node that depends on no tangent or backward
 *    seed.  recompute_bytes sums the bytes those nodes' own storages cost.
 */
/* Per-node marks of fxcut_memory_options.marks. */
enum fxcut_extract_mark {
    /* torch's _must_be_in_forward: a mutable op not tagged for the
     * backward, or partitioner_tag "must_be_in_forward": never in the
     * backward module */
    FXCUT_X_MUST_FW = 1u << 0,
    /* aten.copy_: reordering_to_mimic_autograd_engine emits it (and what it
     * needs) even before the first tangent user */
    FXCUT_X_COPY = 1u << 1
};

/*
 * The inductor model (fxcut_memory_options.fusion non-NULL): the same
 * extraction and module orders, then each module walked as inductor runs it
 * (csrc/memory_fused.c), kernel by kernel instead of op by op.  The rules,
 * stated once (their source: torch/_inductor/graph.py run_node, ir.py
 * StorageBox, scheduler.py decide_inplace_update, codegen/wrapper.py):
 *
 *  - Which values are buffers ("realized"), in module order: a node that
 *    shares an earlier node's storage (storage_of) is an alias of it, never
 *    a buffer; EXTERN, REDUCTION and CAT nodes are buffers; an EXTERN
 *    node's inputs are made buffers (inductor realizes an extern kernel's
 *    inputs); an item (getitem) of a buffer-producing multi-output node is a
 *    buffer allocated with its producer; a module output (forward outputs
 *    and saved values in the forward, gradients in the backward) is a
 *    buffer.  A POINTWISE node is a buffer when read by two or more nodes
 *    of the module (an output counts as a reader) and one of them is EXTERN
 *    or it is HEAVY (after inlining) or its inlined expression reads more
 *    than realize_reuse_reads distinct buffers or has more than
 *    realize_opcount ops; or, whatever its readers, when its expression
 *    reads more than realize_acc_reads distinct buffers or has more than
 *    realize_opcount ops.  Reads are counted once per buffer (inductor's
 *    num_reads is a set of memory dependencies), up to 64; a threshold of
 *    64 or more is compared with the reads counted once per path, an upper
 *    bound.  Ops are counted once per path (inductor counts them after CSE:
 *    the model may realize a value inductor inlines).
 *    Otherwise it is inlined into every kernel that reads it: no memory.
 *    A COPIES_INPUTS kernel also holds, while it runs, a copy of each of its
 *    tensor inputs (nbytes of the input node, parameters included).  An
 *    ABSORBED node whose one reader in the module is EXTERN is no buffer:
 *    that reader's kernel computes it (and reads its inputs).
 *  - Kernels: the buffers in module order (an item is not a kernel of its
 *    own).  A kernel reads the buffers and module inputs its inlined
 *    expression reaches (through non-buffer nodes and aliases).  Fused
 *    kernels (iteration non-NULL): a pointwise or reduction kernel joins the
 *    group of kernels before it when both have the same iteration space and
 *    it reads a buffer the group makes or a value the group reads (inductor
 *    fuses such neighbours into one kernel); a group allocates its buffers
 *    before it runs and frees what it read last after it; a buffer read
 *    only inside its group is a local of the fused kernel: no memory.  With
 *    kernel_calls (inductor's C++ backend) the groups between two extern
 *    kernels are one call: all their buffers allocated before it, what
 *    they read last freed after it.
 *  - Memory: a kernel allocates its buffer (a multi-output node: its items
 *    in the module too) before it runs; a buffer is freed after the last
 *    kernel reading it, a module output lives to the module's end; the
 *    backward starts with the saved storages live, freed after their last
 *    reader.  In-place: a POINTWISE kernel's buffer takes over the storage
 *    of a buffer it reads whose last reader it is, when that storage is
 *    not an output, holds between 1 and 1/0.95 times its bytes, and was
 *    allocated in this module or is a donated saved value (a saved value
 *    whose storage no forward output or gradient shares): no allocation.
 *  - live_bytes[s] is the bytes live while kernel s runs (its fused
 *    group); schedule[s] its node.  recompute_flops sums, over recomputed nodes, flops[i] when the
 *    backward makes the node a buffer (a kernel of its own) and
 *    fused_cost[i] when it is inlined or an alias.
 * Not modelled: inductor's post-grad rewrites other than addmm, its fusion
 * of kernels that are not neighbours in module order, and
 * reorder_for_peak_memory (kernels run in module order).
 */
enum fxcut_fusion_kind {
    FXCUT_FUSE_POINTWISE = 0,  /* inlined into its readers unless realized */
    FXCUT_FUSE_REDUCTION = 1,  /* a kernel and a buffer of its own: a
                                  reduction or scan, or an op whose lowering
                                  always realizes (scatters, random values) */
    FXCUT_FUSE_EXTERN = 2,     /* an extern / fallback kernel: its inputs are
                                  made buffers */
    FXCUT_FUSE_CAT = 3,        /* a buffer its inputs are written into */
    FXCUT_FUSE_KIND_MASK = 7,
    FXCUT_FUSE_HEAVY = 1u << 3, /* a POINTWISE op costly to inline twice (exp,
                                   log, sigmoid, tanh, ...) */
    FXCUT_FUSE_COPIES_INPUTS = 1u << 4, /* an EXTERN kernel that reads copies
                                  of its tensor inputs in another layout (CPU
                                  convolutions): each input's bytes are
                                  allocated before it and freed after it */
    FXCUT_FUSE_ABSORBED = 1u << 5, /* an EXTERN matmul whose one reader, an
                                  add marked EXTERN, becomes one addmm with it
                                  (inductor's post-grad addmm pattern): run
                                  and allocated by that reader when both are
                                  in the module */
    FXCUT_FUSE_LAYOUT = 1u << 6 /* a kernel whose presence in a module turns
                                  inductor's layout optimisation on there (a
                                  forward convolution on CPU): the module's
                                  kernels hold their workspace (the bytes
                                  of their kernels in that layout); in a
                                  module without one, no workspace counts */
};

typedef struct {
    int32_t num_fwd_outputs;
    /* n entries, or NULL (every value its own storage): storage_of[i] is
     * the node whose storage node i's value shares; i itself for a value
     * with its own storage.  Must be in [0, i]. */
    const int32_t *storage_of;
    /* n entries, or NULL (all 0): the cost of running node i once as an op
     * or kernel of its own (the unit is the caller's: torch's flop counter,
     * or fxcut's modelled time); >= 0. */
    const int64_t *flops;
    /* n entries, or NULL (all 0): enum fxcut_extract_mark bits, what torch's
     * extraction knows of a node beyond the graph array. */
    const uint8_t *marks;
    /* n entries, or NULL: the unfused model.  Else enum fxcut_fusion_kind
     * per node: the inductor model (above). */
    const uint8_t *fusion;
    /* n entries, or NULL (all 0): under the inductor model, the cost of
     * recomputing node i inlined into its readers; >= 0. */
    const int64_t *fused_cost;
    /* n entries, or NULL (no kernel fusion beyond inlining): under the
     * inductor model, the iteration space (elements) of node i's kernel when
     * inductor may fuse it with its neighbours (a pointwise or reduction
     * kernel; 0: never); >= 0. */
    const int64_t *iteration;
    /* the inductor model's realization thresholds (>= 0; inductor's
     * realize_reads_threshold, realize_cpu_acc_reads_threshold,
     * realize_cpu_opcount_threshold on CPU) */
    int32_t realize_reuse_reads, realize_acc_reads, realize_opcount;
    /* nonzero: the backward holds every saved value to its end, as a
     * backward whose caller keeps its argument list alive does (AOT
     * Autograd's unboxed compilers, DeepCompile's eager backend); 0: each
     * saved value is freed after its last use (torch's aot_eager, inductor) */
    int32_t hold_saved;
    /* n entries, or NULL (all 0): bytes node i's kernel allocates and frees
     * inside itself while it runs, beyond its outputs (oneDNN's reorders,
     * attention scratch: the per-op table of fxcut.torchrules.kernels),
     * counted at its step on top of what is live; >= 0.  Under the
     * inductor model: what it holds in inductor's optimised layout, counted
     * only in a module that holds a FUSE_LAYOUT kernel. */
    const int64_t *workspace;
    /* nonzero (under the inductor model): a module's kernels between two
     * extern kernels run as one call, as inductor's C++ backend generates
     * them (its kernel group is flushed at extern kernels only): the call
     * allocates the buffers of all its kernels before it runs and frees
     * what they read last after it.  0: each fused group is a call of its
     * own (GPU kernels). */
    int32_t kernel_calls;
} fxcut_memory_options;

typedef struct {
    int64_t peak_bytes;        /* max live activation bytes over fw then bw */
    int32_t peak_step;         /* index into the schedule where it happens,
                                  -1 when there is no step */
    int64_t fw_peak_bytes, bw_peak_bytes;
    int64_t saved_bytes;       /* bytes of the saved values (storages once) */
    int64_t recompute_flops;   /* sum of flops[] over recomputed nodes */
    int64_t recompute_bytes;   /* bytes those nodes write */
    int32_t n_recomputed;
    int32_t n_fw_steps;        /* schedule[0 .. n_fw_steps) is the forward */
    /* optional, caller-allocated, may be NULL: */
    uint8_t *recomputed;       /* n entries: 1 where the backward recomputes i */
    int32_t *schedule;         /* 2n entries: node run at each step (fw then bw) */
    int64_t *live_bytes;       /* same length: live bytes while that step runs */
    int32_t n_steps;
} fxcut_memory_result;

/*
 * Validates g, opt and saved[0 .. n_saved) (node indices; repeats allowed),
 * then simulates the forward and backward modules the decision produces.
 * FXCUT_E_INVALID with err->node set when the decision is not realisable
 * (a saved value the forward cannot compute, a gradient the backward
 * cannot compute).
 */
int fxcut_memory_simulate(const fxcut_graph *g, const fxcut_memory_options *opt,
                          const int32_t *saved, int32_t n_saved,
                          fxcut_memory_result *res, fxcut_error *err);
/* ---- the peak-aware memory plan (plan.c) ------------------------------- */

/*
 * What the planner may do with each node (role[i]):
 *   BACKWARD   not a forward node: computed by the backward when needed
 *   INPUT      a placeholder / get_attr: available to both modules, never
 *              counted (graph inputs and parameters are not activations)
 *   SAVE       a forward node that cannot be recomputed (banned for
 *              correctness, MUST_SAVE, random, mutating, collective...):
 *              saved whenever the backward needs it
 *   FREE       a forward node the plan may save or recompute
 *   RECOMPUTE  a forward node that must not be saved (MUST_RECOMPUTE /
 *              PREFER_RECOMPUTE tags, ZeRO-3's walk, must be in backward):
 *              recomputed whenever the backward needs it
 * A decision is a saved mask over the FREE nodes; every mask is valid: the
 * backward walk from the gradients saves the SAVE and saved FREE nodes it
 * meets and recomputes the RECOMPUTE and unsaved FREE ones.
 */
enum fxcut_plan_role {
    FXCUT_ROLE_BACKWARD = 0,
    FXCUT_ROLE_INPUT = 1,
    FXCUT_ROLE_SAVE = 2,
    FXCUT_ROLE_FREE = 3,
    FXCUT_ROLE_RECOMPUTE = 4,
    FXCUT_ROLE_MAX = 4
};

typedef struct {
    int32_t num_fwd_outputs;
    const uint8_t *role;          /* n entries, enum fxcut_plan_role */
    /* n entries or NULL: the node whose storage node i's value shares
     * (<= i; i for its own storage).  Bytes count once per storage. */
    const int32_t *storage_of;
    /* n entries or NULL: the cost of running node i once (FLOPs), >= 0 */
    const int64_t *flops;
    /* n_seeds * n bytes: saved masks to start from (nonzero = saved) */
    const uint8_t *seeds;
    int32_t n_seeds;
    /* enumerate every decision when at most this many FREE nodes can
     * reach the backward (0: never); else local search */
    int32_t exact_max_free;
    /* the search's budget: it stops once it has simulated this many
     * units of work (n + edges per decision simulated), so that calls on
     * one graph stop at the same point whatever the machine's load; >= 1 */
    int64_t max_work;
    /* a wall-clock safety net, > 0: a search it stops is flagged
     * timed_out (and may then differ between calls) */
    double time_limit_s;
    int32_t max_points;           /* capacity of the frontier, >= 1 */
    /* n entries or NULL: the memory model's extraction marks
     * (enum fxcut_extract_mark), handed to it as they are.  Every decision
     * is simulated by the memory model (fxcut_memsim_eval); the search
     * picks its toggles from the model's schedule. */
    const uint8_t *marks;
    /* the memory model's inductor mode (fxcut_memory_options: fusion,
     * fused_cost, iteration, the realization thresholds), handed to it as
     * they are;
     * fusion NULL: the unfused model */
    const uint8_t *fusion;
    const int64_t *fused_cost;
    const int64_t *iteration;
    int32_t realize_reuse_reads, realize_acc_reads, realize_opcount;
    /* the memory model's hold_saved (fxcut_memory_options) */
    int32_t hold_saved;
    /* the memory model's workspace (fxcut_memory_options; NULL: none) */
    const int64_t *workspace;
    /* the memory model's kernel_calls (fxcut_memory_options) */
    int32_t kernel_calls;
    /* the search's lanes: decisions simulated at once, each on its own
     * thread (<= 1: one, on the caller's; at most FXCUT_PLAN_MAX_THREADS).
     * The frontier, the work and every decision are the same whatever the
     * number: lanes only shorten the wall time (plan.c, "Lanes"). */
    int32_t threads;
} fxcut_plan_options;

#define FXCUT_PLAN_MAX_THREADS 64

/* One simulated decision. */
typedef struct {
    int64_t peak_bytes;
    int64_t fw_peak_bytes;
    int64_t bw_peak_bytes;
    int64_t saved_bytes;          /* storages of the saved values, once */
    int64_t recompute_flops;      /* flops of the recomputed nodes */
    int32_t peak_step;            /* step of the peak in the schedule */
    int32_t n_fw_steps;           /* schedule[0 .. n_fw_steps) is the
                                     forward, the rest the backward */
    int32_t n_steps;
    int32_t n_recomputed;
    /* optional, caller-allocated (NULL: not filled): */
    uint8_t *saved;               /* n: 1 where the forward hands node i
                                     to the backward (the forward inputs
                                     it reads included: 0 bytes) */
    int32_t *schedule;            /* 2n: node run at each step */
    int64_t *live_bytes;          /* 2n: live bytes while that step runs
                                     (the memory model's timeline) */
} fxcut_plan_eval;

/* Validates g and opt, simulates the decision saved_mask (n bytes). */
int fxcut_plan_simulate(const fxcut_graph *g, const fxcut_plan_options *opt,
                        const uint8_t *saved_mask, fxcut_plan_eval *res,
                        fxcut_error *err);

/* The Pareto frontier (peak, recompute flops) of the decisions found:
 * points sorted by peak ascending, cost strictly descending.  Arrays
 * caller-allocated with opt->max_points entries (masks: max_points * n
 * bytes, each the normalised saved set of the point). */
typedef struct {
    int64_t *peak_bytes;
    int64_t *recompute_flops;
    uint8_t *masks;
    int32_t n_points;
    int32_t n_free;               /* FREE nodes that can reach the backward */
    int64_t n_evals;              /* decisions simulated */
    int64_t work;                 /* units of work spent (max_work's) */
    uint8_t exact;                /* 1: every decision was enumerated */
    uint8_t timed_out;            /* 1: the time limit stopped the search */
    uint8_t out_of_work;          /* 1: max_work stopped the search */
    int32_t lanes;                /* the decisions it simulated at once
                                     (opt->threads, less any it could not
                                     start) */
} fxcut_plan_frontier;

int fxcut_plan_frontier_search(const fxcut_graph *g,
                               const fxcut_plan_options *opt,
                               fxcut_plan_frontier *res, fxcut_error *err);
#endif /* FXCUT_H */
