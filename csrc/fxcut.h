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
 */
#ifndef FXCUT_H
#define FXCUT_H

#include <stddef.h>
#include <stdint.h>

/* ---- node kinds (fx Node.op) ------------------------------------------ */
enum fxcut_kind {
    FXCUT_PLACEHOLDER = 0,
    FXCUT_CALL_FUNCTION = 1,
    FXCUT_GET_ATTR = 2,
    FXCUT_OUTPUT = 3,
    FXCUT_CALL_MODULE = 4,
    FXCUT_CALL_METHOD = 5,
    FXCUT_NUM_KINDS = 6
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
    FXCUT_F_IS_BACKWARD_TAG = 1u << 27 /* partitioner_tag == "is_backward" */
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
    FXCUT_E_SIZE = 6        /* a node's size was needed but is unknown */
};

typedef struct {
    int code;
    int64_t node;       /* offending node index, or -1 */
    char message[256];
} fxcut_error;

/* Sets err and returns code; message is printf-style. */
int fxcut_fail(fxcut_error *err, int code, int64_t node, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

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

#endif /* FXCUT_H */
