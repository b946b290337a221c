/*
 * py_binding.h -- what the binding files (module.c and the py_*.c files
 * that add entry points) share.  Only binding files include Python.
 *
 * Memory safety at the boundary: the core reads its arrays without the GIL,
 * so another thread may write a caller's buffer meanwhile.  Every array
 * whose values the core uses as indices (the CSR arrays, outputs, params,
 * force_save, the fuse pairs, a network's edges) is therefore COPIED, with
 * the GIL held, before it is validated: the core validates and reads the
 * copy, which nobody else can write.  The other arrays are read in place
 * (fxcut.h: they are only compared and summed).  Sequences (knapsack) are
 * copied to a tuple before any item is converted, so an item's __float__
 * cannot shrink or free what is being iterated.
 */
#ifndef FXCUT_PY_BINDING_H
#define FXCUT_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#include "fxcut_internal.h"

/* The fields of a graph arrays object (fxcut.GraphArrays), in the order
 * they are read; GB_FIRST_INDEX .. GB_COUNT-1 hold indices and are copied. */
enum {
    GB_KIND, GB_FLAGS, GB_TAG, GB_AC, GB_NBYTES,
    GB_ARG_PTR, GB_ARG_IDX, GB_IN_PTR, GB_IN_IDX, GB_OUTPUTS,
    GB_COUNT,
    GB_FIRST_INDEX = GB_ARG_PTR
};

/* One fxcut_graph: the value arrays as held buffers, the index arrays as
 * one private copy.  Release with fxcut_release_graph. */
typedef struct {
    fxcut_graph graph;
    Py_buffer views[GB_FIRST_INDEX];
    int held[GB_FIRST_INDEX];
    int32_t *copy;
} fxcut_graph_buffers;

/* The module's state: the exception and the result types. */
typedef struct {
    PyObject *infinite_cut_error; /* fxcut._C.InfiniteCutError */
    PyTypeObject *decision_type;  /* fxcut._C.Decision */
    PyTypeObject *plan_type;      /* fxcut._C.BudgetPlan */
    PyTypeObject *knapsack_type;  /* fxcut._C.KnapsackResult */
    PyTypeObject *memory_type;    /* fxcut._C.MemoryResult */
} fxcut_module_state;

fxcut_module_state *fxcut_state(PyObject *module);

/* Read-only, C-contiguous, flat buffer of integers of `itemsize` bytes with
 * `expected_len` entries (-1: any).  Sets TypeError / ValueError naming
 * `name` and returns -1 on mismatch; an exception the exporter raised (a
 * released memoryview) is kept. */
int fxcut_get_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                     Py_ssize_t expected_len, Py_buffer *view);

/* A private copy of such a buffer: *out is malloc'ed (free() it, with or
 * without the GIL), *len its entries.  obj None gives 0 entries when
 * none_ok. */
int fxcut_copy_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                      Py_ssize_t expected_len, int none_ok, void **out,
                      Py_ssize_t *len);

/* Loads the attributes kind, flags, tag, ac_graph_id, nbytes, arg_ptr,
 * arg_idx, in_ptr, in_idx, outputs of obj.  Checks lengths and the CSR
 * ends; the core's fxcut_graph_validate checks the contents. */
int fxcut_load_graph(PyObject *obj, fxcut_graph_buffers *gb);
void fxcut_release_graph(fxcut_graph_buffers *gb);

/* Raises the Python exception for err, with attribute `node` and, when
 * attr is not NULL, attribute attr = value; returns NULL. */
PyObject *fxcut_raise(PyObject *module, const fxcut_error *err,
                      const char *attr, PyObject *value);

/* Raises type(message) with the exception being handled as its __cause__
 * (and __context__); returns NULL. */
PyObject *fxcut_raise_from_current(PyObject *type, const char *format, ...);

/* An optional array of n entries: None gives *out = NULL, anything else
 * a private copy as fxcut_copy_buffer makes it. */
int fxcut_copy_optional(PyObject *obj, const char *name, Py_ssize_t itemsize,
                        Py_ssize_t n, void **out);

/* An integer argument in [lo, hi] into *out; the error names it and says
 * what it got (TypeError for a non-integer, OverflowError for an int past
 * int64, ValueError out of range).  Returns -1 with the error set. */
int fxcut_int_arg(PyObject *obj, const char *name, long long lo,
                  long long hi, long long *out);

/* The inductor model's arguments of memory_simulate / plan_simulate /
 * plan_frontier: fusion (None: the unfused model, or n bytes of
 * FUSE_* kinds), fused_cost and iteration (None or n int64), realize
 * (None: inductor's defaults 4, 8, 30; or a 3-tuple of ints >= 0: reuse
 * reads, accumulated reads, ops).  Copies the arrays
 * (fxcut_fusion_release frees them). */
typedef struct {
    void *fusion, *fused_cost, *iteration;
    int32_t reuse_reads, acc_reads, opcount;
} fxcut_fusion_args;

int fxcut_fusion_load(PyObject *fusion, PyObject *fused_cost,
                      PyObject *iteration, PyObject *realize, Py_ssize_t n,
                      fxcut_fusion_args *out);
void fxcut_fusion_release(fxcut_fusion_args *a);

/* The kernel_calls keyword of memory_simulate, plan_simulate and
 * plan_frontier: 0 or 1; -1 with a ValueError where it is set without the
 * inductor model (``fusion`` NULL). */
int fxcut_kernel_calls_option(int kernel_calls, const void *fusion);

/* hi * 2^64 + lo as a Python int. */
PyObject *fxcut_pylong_from_u128(uint64_t hi, uint64_t lo);

/* A read-only memoryview of a copy of count items of p, of struct format
 * `format` ('b', 'B', 'i', 'q', 'd') and itemsize bytes each. */
PyObject *fxcut_typed_view(const void *p, Py_ssize_t count, const char *format,
                           Py_ssize_t itemsize);

/* ---- named configs (py_config.c) ---------------------------------------
 * A reader's settings come as one object with named attributes; its struct
 * lists them in a table of fields, each read by name: a missing attribute
 * or one of the wrong kind is a TypeError naming the field (an int out of
 * 64 bits a ValueError).  Object fields are new references the struct
 * owns; BOOL fields are stored as int, BITS fields as uint64_t. */
typedef enum {
    FXCUT_FIELD_OBJECT,           /* anything */
    FXCUT_FIELD_TYPE,             /* a type */
    FXCUT_FIELD_TUPLE,            /* a tuple (or subclass) */
    FXCUT_FIELD_DICT,             /* a dict (or subclass) */
    FXCUT_FIELD_FROZENSET,        /* a frozenset */
    FXCUT_FIELD_CALLABLE,         /* a callable */
    FXCUT_FIELD_CALLABLE_OR_NONE, /* a callable or None */
    FXCUT_FIELD_BOOL,             /* True or False, into an int */
    FXCUT_FIELD_BITS              /* an int in [0, 2**64), into a uint64_t */
} fxcut_field_kind;

typedef struct {
    const char *name; /* the attribute, and the struct member of that name */
    fxcut_field_kind kind;
    size_t offset;    /* offsetof the member */
} fxcut_config_field;

/* A field whose attribute is named as the member of `type` it fills. */
#define FXCUT_FIELD(type, member, kind) {#member, kind, offsetof(type, member)}

/* Reads `count` fields of `config` into the struct at `out`, which starts
 * zeroed; `what` opens each message ("lower_read").  Release the struct
 * with fxcut_release_config whether this succeeded (0) or not (-1). */
int fxcut_read_config(PyObject *config, const char *what, const fxcut_config_field *fields, size_t count,
                      void *out);
void fxcut_release_config(const fxcut_config_field *fields, size_t count, void *out);

/* Entry points defined in the py_*.c files: fxcut_py_NAME(module, args,
 * kwargs) and its docstring fxcut_py_NAME_doc. */
#define FXCUT_ENTRY(name)                                                     \
    PyObject *fxcut_py_##name(PyObject *module, PyObject *args,              \
                              PyObject *kwargs);                              \
    extern const char fxcut_py_##name##_doc[];
FXCUT_ENTRY(min_cut) FXCUT_ENTRY(partition_decide)
FXCUT_ENTRY(budget_plan) FXCUT_ENTRY(knapsack)
FXCUT_ENTRY(aggressive_options)
FXCUT_ENTRY(memory_simulate)
FXCUT_ENTRY(plan_simulate) FXCUT_ENTRY(plan_frontier)
FXCUT_ENTRY(cse_key) FXCUT_ENTRY(lower_read)
FXCUT_ENTRY(prepare_plan)
FXCUT_ENTRY(placeholder_role) FXCUT_ENTRY(partitioner_tag_flags)
#undef FXCUT_ENTRY

/* The result types py_decide.c, py_knapsack.c and py_memory.c fill (module.c makes
 * them in module_exec). */
extern PyStructSequence_Desc fxcut_decision_desc;
extern PyStructSequence_Desc fxcut_plan_desc;
extern PyStructSequence_Desc fxcut_knapsack_desc;
extern PyStructSequence_Desc fxcut_memory_desc;

#define FXCUT_KW_METHOD(name)                                                 \
    {#name, (PyCFunction)(void (*)(void))fxcut_py_##name,                     \
     METH_VARARGS | METH_KEYWORDS, fxcut_py_##name##_doc}

#define FXCUT_EXTRA_METHODS                                                   \
    FXCUT_KW_METHOD(min_cut), FXCUT_KW_METHOD(partition_decide),              \
    FXCUT_KW_METHOD(budget_plan), FXCUT_KW_METHOD(knapsack),                  \
    FXCUT_KW_METHOD(aggressive_options), FXCUT_KW_METHOD(memory_simulate),      \
    FXCUT_KW_METHOD(plan_simulate), FXCUT_KW_METHOD(plan_frontier),         \
    FXCUT_KW_METHOD(cse_key), FXCUT_KW_METHOD(lower_read),                 \
    FXCUT_KW_METHOD(prepare_plan), FXCUT_KW_METHOD(placeholder_role),       \
    FXCUT_KW_METHOD(partitioner_tag_flags),

#endif /* FXCUT_PY_BINDING_H */
