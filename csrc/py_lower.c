/*
 * lower_read: fxcut.route.lower's per-node pass over an fx graph's node
 * list, in C.  Its settings come as one named config (ReaderConfig, read by
 * name into reader_config below).
 *
 * For every node: its kind (from `op` through kind_of_op), the CSR of its
 * positional Node args and of its input nodes (uses redirected through
 * `replace`, inputs then deduplicated in first-use order), and -- for a
 * plain node -- its flag bits and byte size.  A plain node is a
 * call_function whose target's flags (from `flags_of`, memoised per target
 * in a table local to the call) carry none of `slow_bits`, whose target is
 * none of `special_targets`, whose meta has none of `slow_meta_keys`, and
 * whose meta["val"] is either a tensor of an exact int numel and dtype
 * itemsize, or an exact tuple or list whose tensor items all are (its size
 * their sum, as torch's _size_of takes it; any other item counts 0); or a
 * placeholder with such a value.  Whether a tuple (list) value is opaque
 * (torch's is_opaque_node) depends only on its type: `opaque(node)` answers
 * it for the first such node and the answer is kept for the call.  Every
 * other node's (flags, nbytes, tag, ac_graph_id) comes from calling
 * `slow(node)`, fxcut.route.lower's Python facts of one node, so the two
 * paths cannot disagree on anything but the plain case
 * (tests/test_graph_arrays.py compares them node for node).
 *
 * Two rules live here and only here: a placeholder's role from its name
 * and the flags a partitioner_tag gives (placeholder_role,
 * partitioner_tag_flags); the Python path asks the same functions through
 * _C.placeholder_role and _C.partitioner_tag_flags.
 *
 * Node positions come from a table on the nodes' addresses built here (an
 * fx.Node hashes and compares by identity, so it finds what a dict would);
 * the dict node -> position is built at the end and returned with the arrays.
 *
 * Returns None, leaving the Python path to run (and raise its error), when a
 * node's op is unknown, a node or a replace key or value is not exactly
 * `node_cls`, a used node is not in `nodes`, a count does not fit 32 bits, or
 * a plain node's size is out of range.  Holds the GIL (it reads Python
 * objects); no global state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "py_binding.h"

#include <structmember.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* An attribute of a node, read from its slot where node_cls's attribute is
 * a plain object member (fx.Node's are: torch's C _NodeBase): what
 * PyObject_GetAttr gives, without the lookup, and a pointer to prefetch. */
typedef struct {
    PyObject *name;
    Py_ssize_t offset; /* -1: through PyObject_GetAttr */
} field;

/* The slot of `cls`'s attribute `f->name` if it is an object member of a
 * base of `cls`; f->offset -1 otherwise (or on any error, which then
 * PyObject_GetAttr raises again per node). */
static void field_resolve(field *f, PyObject *cls) {
    f->offset = -1;
    PyObject *d = PyType_Check(cls) ? PyObject_GetAttr(cls, f->name) : NULL;
    if (d == NULL) {
        PyErr_Clear();
        return;
    }
    if (Py_IS_TYPE(d, &PyMemberDescr_Type) &&
        PyType_IsSubtype((PyTypeObject *)cls, ((PyDescrObject *)d)->d_type)) {
        const PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if ((m->type == T_OBJECT_EX || m->type == T_OBJECT) && !(m->flags & PY_AUDIT_READ) &&
            m->offset >= (Py_ssize_t)sizeof(PyObject) &&
            m->offset <= ((PyTypeObject *)cls)->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
            f->offset = m->offset;
        }
    }
    Py_DECREF(d);
}

/* The slot's object, borrowed, or NULL (empty, or not a slot). */
static PyObject *field_peek(const field *f, PyObject *node) {
    return f->offset >= 0 ? *(PyObject **)(void *)((char *)node + f->offset) : NULL;
}

/* node.<name> of a node of exactly node_cls: a new reference, NULL with an
 * exception (an empty slot goes through PyObject_GetAttr, which raises or
 * answers None as the member's kind says). */
static PyObject *field_get(const field *f, PyObject *node) {
    PyObject *v = field_peek(f, node);
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    return PyObject_GetAttr(node, f->name);
}

/* Target -> flags, open addressing on the target's address. */
typedef struct {
    PyObject **keys; /* held: Python code this runs may retarget a node */
    uint64_t *bits;
    size_t cap, used;
} target_table;

static size_t slot_of(const target_table *t, PyObject *key) {
    size_t h = ((size_t)(uintptr_t)key >> 4) * (size_t)0x9E3779B97F4A7C15ull;
    size_t i = h & (t->cap - 1);
    while (t->keys[i] != NULL && t->keys[i] != key) {
        i = (i + 1) & (t->cap - 1);
    }
    return i;
}

static int table_grow(target_table *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    PyObject **keys = calloc(cap, sizeof *keys);
    uint64_t *bits = calloc(cap, sizeof *bits);
    if (keys == NULL || bits == NULL) {
        free(keys);
        free(bits);
        PyErr_NoMemory();
        return -1;
    }
    target_table bigger = {keys, bits, cap, 0};
    for (size_t i = 0; i < t->cap; i++) {
        if (t->keys[i] != NULL) {
            size_t j = slot_of(&bigger, t->keys[i]);
            bigger.keys[j] = t->keys[i];
            bigger.bits[j] = t->bits[i];
            bigger.used++;
        }
    }
    free(t->keys);
    free(t->bits);
    *t = bigger;
    return 0;
}

/* The target's flags through `flags_of`, memoised; -1 with an exception. */
static int target_flags(target_table *t, PyObject *flags_of, PyObject *target, uint64_t *out) {
    if (t->cap == 0 || 2 * (t->used + 1) > t->cap) {
        if (table_grow(t) < 0) {
            return -1;
        }
    }
    size_t i = slot_of(t, target);
    if (t->keys[i] == target) {
        *out = t->bits[i];
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(flags_of, target);
    if (r == NULL) {
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(r);
    Py_DECREF(r);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    Py_INCREF(target);
    t->keys[i] = target;
    t->bits[i] = (uint64_t)v;
    t->used++;
    *out = (uint64_t)v;
    return 0;
}

/* A growable int32 array. */
typedef struct {
    int32_t *p;
    size_t len, cap;
} ivec;

static int ivec_push(ivec *v, int32_t x) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        v->p = p;
        v->cap = cap;
    }
    v->p[v->len++] = x;
    return 0;
}

/* Node -> (own position, position its uses are lowered to), open
 * addressing on the node's address.  `own` is -1 for a replace key that is
 * not in the graph; `use` is -2 for a node replaced by one that is not. */
typedef struct {
    PyObject **keys; /* borrowed: the node list and replace hold them */
    int32_t *own, *use;
    size_t mask;
    unsigned shift;
} node_table;

enum { NOT_IN_GRAPH = -2 };

static size_t node_slot(const node_table *t, PyObject *key) {
    size_t i = (size_t)(((uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull) >> t->shift) & t->mask;
    while (t->keys[i] != NULL && t->keys[i] != key) {
        i = (i + 1) & t->mask;
    }
    return i;
}

/* A table with room for `count` keys at half load; -1 on no memory. */
static int node_table_init(node_table *t, size_t count) {
    size_t cap = 16;
    unsigned bits = 4;
    while (cap / 2 < count) {
        if (cap > SIZE_MAX / 4 || bits >= 62) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
        bits++;
    }
    t->keys = calloc(cap, sizeof *t->keys);
    t->own = malloc(cap * sizeof *t->own);
    t->use = malloc(cap * sizeof *t->use);
    if (t->keys == NULL || t->own == NULL || t->use == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->mask = cap - 1;
    t->shift = 64u - bits;
    return 0;
}

static void node_table_free(node_table *t) {
    free(t->keys);
    free(t->own);
    free(t->use);
}

/* ---- the rules the reader applies (one copy: route/lower.py asks these) */

/* What a placeholder's name says it is, tried in this order (torch's
 * _is_tangent, _is_fwd_seed_offset, _is_bwd_seed_offset): a name holding
 * one of these parts has its role; any other name is a primal's. */
enum { ROLE_PARTS = 5 };
static const char *const role_parts[ROLE_PARTS] = {"tangents", "fwd_seed", "fwd_base_offset", "bwd_seed",
                                                   "bwd_base_offset"};
static const uint32_t role_flags[ROLE_PARTS] = {FXCUT_F_TANGENT, FXCUT_F_FWD_SEED, FXCUT_F_FWD_SEED,
                                                FXCUT_F_BWD_SEED, FXCUT_F_BWD_SEED};

/* 1 if the n bytes at `text` hold the ASCII string `part`. */
static int holds_ascii(const char *text, Py_ssize_t n, const char *part) {
    Py_ssize_t m = (Py_ssize_t)strlen(part);
    for (Py_ssize_t at = 0; at + m <= n; at++) {
        if (memcmp(text + at, part, (size_t)m) == 0) {
            return 1;
        }
    }
    return 0;
}

/* placeholder_role of a str UTF-8 cannot encode (a lone surrogate): the
 * parts searched in the str itself; -1 on error. */
static int placeholder_role_of_str(PyObject *name, uint32_t *role) {
    *role = FXCUT_F_PRIMAL;
    for (int k = 0; k < ROLE_PARTS; k++) {
        PyObject *part = PyUnicode_FromString(role_parts[k]);
        Py_ssize_t at = part ? PyUnicode_Find(name, part, 0, PY_SSIZE_T_MAX, 1) : -2;
        Py_XDECREF(part);
        if (at == -2) {
            return -1;
        }
        if (at >= 0) {
            *role = role_flags[k];
            return 0;
        }
    }
    return 0;
}

/* The role flag of a placeholder named `name` (a str); -1 on error.  An
 * ASCII part is found in a str exactly where it is found in its UTF-8
 * bytes (no other character's encoding holds an ASCII byte). */
static int placeholder_role(PyObject *name, uint32_t *role) {
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(name, &n);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            return -1;
        }
        PyErr_Clear();
        return placeholder_role_of_str(name, role);
    }
    *role = FXCUT_F_PRIMAL;
    for (int k = 0; k < ROLE_PARTS; k++) {
        if (holds_ascii(text, n, role_parts[k])) {
            *role = role_flags[k];
            break;
        }
    }
    return 0;
}

/* tag == text as Python's == answers it: 1, 0, -1 on error. */
static int tag_is(PyObject *tag, const char *text) {
    if (PyUnicode_CheckExact(tag)) {
        return PyUnicode_CompareWithASCIIString(tag, text) == 0;
    }
    PyObject *str = PyUnicode_FromString(text);
    int eq = str ? PyObject_RichCompareBool(tag, str, Py_EQ) : -1;
    Py_XDECREF(str);
    return eq;
}

/* The flags a node's meta["partitioner_tag"] gives it, its target mutable
 * or not -- torch's two placement rules, in one place:
 * "is_backward" marks a backward node (torch's is_backward tag);
 * F_MUST_BE_IN_BW: tagged "must_be_in_backward", or a mutation tagged
 * "is_backward" (torch's _must_be_in_backward); F_MUST_BE_IN_FW: tagged
 * "must_be_in_forward", or a mutation tagged neither "is_backward" nor
 * "must_be_in_backward" (torch's _must_be_in_forward).  `tag` is None for
 * a node without one.  -1 on error (a tag's __eq__ may raise). */
static int partitioner_tag_flags(PyObject *tag, int is_mutable, uint32_t *flags) {
    *flags = 0;
    if (tag == Py_None) {
        *flags = is_mutable ? FXCUT_F_MUST_BE_IN_FW : 0;
        return 0;
    }
    int backward = tag_is(tag, "is_backward");
    int must_bw = backward < 0 ? -1 : tag_is(tag, "must_be_in_backward");
    int must_fw = must_bw < 0 ? -1 : tag_is(tag, "must_be_in_forward");
    if (must_fw < 0) {
        return -1;
    }
    if (backward) {
        *flags |= FXCUT_F_IS_BACKWARD_TAG;
    }
    if (must_bw || (is_mutable && backward)) {
        *flags |= FXCUT_F_MUST_BE_IN_BW;
    }
    if (must_fw || (is_mutable && !backward && !must_bw)) {
        *flags |= FXCUT_F_MUST_BE_IN_FW;
    }
    return 0;
}

const char fxcut_py_placeholder_role_doc[] =
    "placeholder_role($module, name, /)\n--\n\n"
    "-> int: the role flag a placeholder named ``name`` (a str) has: F_TANGENT when the name holds\n"
    "'tangents', else F_FWD_SEED for 'fwd_seed' / 'fwd_base_offset', else F_BWD_SEED for 'bwd_seed' /\n"
    "'bwd_base_offset', else F_PRIMAL.  The rule lower_read applies (one copy).";

PyObject *fxcut_py_placeholder_role(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"", NULL};
    PyObject *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U:placeholder_role", keywords, &name)) {
        return NULL;
    }
    uint32_t role;
    return placeholder_role(name, &role) < 0 ? NULL : PyLong_FromUnsignedLong(role);
}

const char fxcut_py_partitioner_tag_flags_doc[] =
    "partitioner_tag_flags($module, tag, mutable, /)\n--\n\n"
    "-> int: the flags a node's meta['partitioner_tag'] ``tag`` (None: no tag) gives it, its target\n"
    "``mutable`` or not: F_IS_BACKWARD_TAG when tag == 'is_backward'; F_MUST_BE_IN_BW when\n"
    "tag == 'must_be_in_backward', or when mutable and tag == 'is_backward' (torch's\n"
    "_must_be_in_backward); F_MUST_BE_IN_FW when tag == 'must_be_in_forward', or when mutable and the\n"
    "tag is neither 'is_backward' nor 'must_be_in_backward' (torch's _must_be_in_forward).  Compared\n"
    "as Python's == compares.  The rule lower_read applies (one copy).";

PyObject *fxcut_py_partitioner_tag_flags(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"", "", NULL};
    PyObject *tag;
    int is_mutable;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Op:partitioner_tag_flags", keywords, &tag, &is_mutable)) {
        return NULL;
    }
    uint32_t flags;
    return partitioner_tag_flags(tag, is_mutable, &flags) < 0 ? NULL : PyLong_FromUnsignedLong(flags);
}

/* ---- the reader -------------------------------------------------------- */

/* The fields of fxcut.route.lower.ReaderConfig (read by name). */
typedef struct {
    PyObject *kind_of_op;      /* dict: node.op -> kind */
    PyObject *flags_of;        /* target -> its flag bits (fxcut.torchrules.ops.TargetFacts.flags) */
    PyObject *slow;            /* node -> (flags, nbytes, tag, ac_graph_id): the Python path's */
    PyObject *opaque;          /* node -> is its tuple or list value opaque */
    PyObject *node_cls, *tensor_cls;
    PyObject *special_targets; /* tuple: targets whose nodes are the slow path's */
    PyObject *slow_meta_keys;  /* tuple: meta keys that make a node the slow path's */
    PyObject *triton_hop;      /* the user triton kernel's op, or None */
    uint64_t slow_bits;        /* target bits that make a node the slow path's */
    uint64_t impure_bits;      /* target bits that make a node impure */
    uint64_t mutable_bit;      /* the target bit of a mutable schema */
} reader_config;

static const fxcut_config_field reader_fields[] = {
    FXCUT_FIELD(reader_config, kind_of_op, FXCUT_FIELD_DICT),
    FXCUT_FIELD(reader_config, flags_of, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(reader_config, slow, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(reader_config, opaque, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(reader_config, node_cls, FXCUT_FIELD_TYPE),
    FXCUT_FIELD(reader_config, tensor_cls, FXCUT_FIELD_TYPE),
    FXCUT_FIELD(reader_config, special_targets, FXCUT_FIELD_TUPLE),
    FXCUT_FIELD(reader_config, slow_meta_keys, FXCUT_FIELD_TUPLE),
    FXCUT_FIELD(reader_config, triton_hop, FXCUT_FIELD_OBJECT),
    FXCUT_FIELD(reader_config, slow_bits, FXCUT_FIELD_BITS),
    FXCUT_FIELD(reader_config, impure_bits, FXCUT_FIELD_BITS),
    FXCUT_FIELD(reader_config, mutable_bit, FXCUT_FIELD_BITS),
};
#define READER_FIELDS (sizeof reader_fields / sizeof reader_fields[0])

/* The interned attribute and key names the reader uses. */
enum { S_OP, S_TARGET, S__ARGS, S__INPUT_NODES, S_META, S_VAL, S_NUMEL, S_ITEMSIZE, S_PARTITIONER_TAG, S_COUNT };
static const char *const reader_strings[S_COUNT] = {"op", "target", "_args", "_input_nodes", "meta", "val",
                                                    "numel", "itemsize", "partitioner_tag"};

/* The graph array being built: a row per node, the two CSRs, the output
 * nodes' positions. */
typedef struct {
    uint8_t *kind;
    uint32_t *flags;
    int8_t *tag;
    int32_t *ac;
    int64_t *nbytes;
    int32_t *arg_ptr, *in_ptr;
    int32_t *seen; /* dedup of inputs: the last node that used it */
    ivec arg_idx, in_idx;
    PyObject *outputs;
} lowered;

typedef struct {
    reader_config cfg;
    PyObject *nodes;   /* a private tuple of the node list */
    PyObject *replace; /* a private copy of replace, or None */
    PyObject *s[S_COUNT];
    field f_op, f_target, f_meta, f_args, f_inputs;
    node_table at;     /* node -> its position and the one its uses go to */
    target_table targets;
    int seq_opaque[2]; /* opaque(node) of a tuple, a list value; -1: not asked yet */
    lowered out;
} reader;

/* What reading one node found. */
enum { READ_ERROR = -1, READ_GIVE_UP = 0, READ_OK = 1 };

/* The position a use of `node` is lowered to; < 0: not in the graph. */
static Py_ssize_t position_of(const reader *r, PyObject *node) {
    size_t i = node_slot(&r->at, node);
    return r->at.keys[i] == NULL ? NOT_IN_GRAPH : (Py_ssize_t)r->at.use[i];
}

/* Fill the table: every node at its position (a node listed twice at its
 * last, as a dict comprehension leaves it), then every replace key at its
 * value's own position.  1 done, 0 give up (a key that is not exactly a
 * node), -1 error. */
static int index_nodes(reader *r, PyObject *nodes) {
    Py_ssize_t n = PyTuple_GET_SIZE(nodes);
    Py_ssize_t extra = r->replace == Py_None ? 0 : PyDict_GET_SIZE(r->replace);
    if (node_table_init(&r->at, (size_t)n + (size_t)extra) < 0) {
        return -1;
    }
    node_table *t = &r->at;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *node = PyTuple_GET_ITEM(nodes, i);
        if ((PyObject *)Py_TYPE(node) != r->cfg.node_cls) {
            return 0;
        }
        size_t s = node_slot(t, node);
        t->keys[s] = node;
        t->own[s] = t->use[s] = (int32_t)i;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (extra && PyDict_Next(r->replace, &pos, &key, &value)) {
        if ((PyObject *)Py_TYPE(key) != r->cfg.node_cls || (PyObject *)Py_TYPE(value) != r->cfg.node_cls) {
            return 0;
        }
        size_t v = node_slot(t, value);
        int32_t to = t->keys[v] != NULL && t->own[v] >= 0 ? t->own[v] : NOT_IN_GRAPH;
        size_t s = node_slot(t, key);
        if (t->keys[s] == NULL) {
            t->keys[s] = key;
            t->own[s] = -1;
        }
        t->use[s] = to;
    }
    return 1;
}

/* The dict node -> position of `nodes` (the table holds their last ones). */
static PyObject *index_dict(const reader *r, PyObject *nodes) {
    PyObject *index = PyDict_New();
    if (index == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nodes); i++) {
        PyObject *node = PyTuple_GET_ITEM(nodes, i);
        PyObject *at = PyLong_FromLong((long)r->at.own[node_slot(&r->at, node)]);
        if (at == NULL || PyDict_SetItem(index, node, at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(index);
            return NULL;
        }
        Py_DECREF(at);
    }
    return index;
}

/* Adds the flags meta["partitioner_tag"] (or its absence) gives a node
 * whose target bits are `*bits` (partitioner_tag_flags); -1 on error. */
static int add_tag_flags(const reader *r, PyObject *meta, uint64_t *bits) {
    PyObject *tag = PyDict_GetItemWithError(meta, r->s[S_PARTITIONER_TAG]);
    if (tag == NULL && PyErr_Occurred()) {
        return -1;
    }
    tag = tag == NULL ? Py_None : tag;
    Py_INCREF(tag); /* a tag's __eq__ runs Python code: keep it alive */
    uint32_t flags;
    int rc = partitioner_tag_flags(tag, (*bits & r->cfg.mutable_bit) != 0, &flags);
    Py_DECREF(tag);
    *bits |= flags;
    return rc;
}

/* isinstance(x, tensor_cls): 1, 0, or -1 on error. */
static int is_tensor(const reader *r, PyObject *x) {
    return PyType_IsSubtype(Py_TYPE(x), (PyTypeObject *)r->cfg.tensor_cls) ? 1 : PyObject_IsInstance(x, r->cfg.tensor_cls);
}

/* numel() * itemsize of tensor `val`, checked (Tensor.nbytes would wrap
 * past 2^63): 1 and *nbytes, 0 if the slow path's (a symbolic numel, a size
 * out of range), -1 on error. */
static int tensor_size(const reader *r, PyObject *val, int64_t *nbytes) {
    int plain = 0;
    PyObject *numel = PyObject_CallMethodNoArgs(val, r->s[S_NUMEL]);
    PyObject *itemsize = numel ? PyObject_GetAttr(val, r->s[S_ITEMSIZE]) : NULL;
    if (itemsize == NULL) {
        plain = -1;
    } else if (PyLong_CheckExact(numel) && PyLong_CheckExact(itemsize)) {
        int overflow = 0;
        long long a = PyLong_AsLongLongAndOverflow(numel, &overflow);
        long long b = overflow ? 0 : PyLong_AsLongLongAndOverflow(itemsize, &overflow);
        if ((a == -1 || b == -1) && PyErr_Occurred()) {
            plain = -1;
        } else if (!overflow && a >= 0 && b >= 0 && (b == 0 || a <= INT64_MAX / b)) {
            *nbytes = (int64_t)(a * b);
            plain = 1;
        }
    }
    Py_XDECREF(numel);
    Py_XDECREF(itemsize);
    return plain;
}

/* The size torch's _size_of gives an exact tuple or list: the sum of its
 * tensor items' sizes (anything else -- None, a SymInt, a nested list --
 * counts 0).  1 and *nbytes, 0 if the slow path's, -1 on error.  A list is
 * read by index with its live length, as Python's iteration reads it. */
static int seq_size(const reader *r, PyObject *seq, int64_t *nbytes) {
    int64_t total = 0;
    int plain = 1;
    for (Py_ssize_t k = 0; plain > 0 && k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        Py_INCREF(item);
        int64_t size = 0;
        plain = is_tensor(r, item);
        if (plain > 0) {
            plain = tensor_size(r, item, &size);
        } else if (plain == 0) {
            plain = 1; /* not a tensor: 0 bytes */
        }
        Py_DECREF(item);
        if (plain > 0 && size > INT64_MAX - total) {
            plain = 0; /* the slow path raises its LoweringError */
        }
        total += plain > 0 ? size : 0;
    }
    if (plain > 0) {
        *nbytes = total;
    }
    return plain;
}

/* 1 if a tuple (which = 0) or list (1) value is opaque, through opaque(node)
 * once per call (it depends only on the value's type); 0, -1 on error. */
static int seq_opaque(reader *r, PyObject *node, int which) {
    if (r->seq_opaque[which] < 0) {
        PyObject *answer = PyObject_CallOneArg(r->cfg.opaque, node);
        int truth = answer ? PyObject_IsTrue(answer) : -1;
        Py_XDECREF(answer);
        if (truth < 0) {
            return -1;
        }
        r->seq_opaque[which] = truth;
    }
    return r->seq_opaque[which];
}

/* A plain node's value: 1 with *nbytes and the flag bits the value adds in
 * *bits, 0 if the slow path's, -1 on error. */
static int plain_size(reader *r, PyObject *node, PyObject *meta, int64_t *nbytes, uint64_t *bits) {
    Py_ssize_t nkeys = PyTuple_GET_SIZE(r->cfg.slow_meta_keys);
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        int has = PyDict_Contains(meta, PyTuple_GET_ITEM(r->cfg.slow_meta_keys, k));
        if (has != 0) {
            return has < 0 ? -1 : 0;
        }
    }
    PyObject *val = PyDict_GetItemWithError(meta, r->s[S_VAL]);
    if (val == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(val); /* numel() runs Python code: keep the value alive */
    int plain;
    int which = PyTuple_CheckExact(val) ? 0 : PyList_CheckExact(val) ? 1 : -1;
    if (which >= 0) {
        plain = seq_size(r, val, nbytes);
        int opaque = plain > 0 ? seq_opaque(r, node, which) : 0;
        if (opaque < 0) {
            plain = -1;
        }
        if (plain > 0) {
            *bits |= FXCUT_F_NON_TENSOR | FXCUT_F_VAL_IS_SEQ | (opaque ? FXCUT_F_FREE_OBJECT : 0);
        }
    } else {
        plain = is_tensor(r, val);
        if (plain > 0) {
            plain = tensor_size(r, val, nbytes);
        }
    }
    Py_DECREF(val);
    return plain;
}

/* node.args of a node of exactly node_cls: fx.Node's property returns its
 * `_args` slot, read directly. */
static PyObject *node_args_of(const reader *r, PyObject *node) {
    return field_get(&r->f_args, node);
}

/* A placeholder whose meta["val"] is a tensor of an exact size and whose
 * meta has none of the slow keys: its flags (the role str(target) gives it)
 * and size; 1 if so, 0 if the slow path's, -1 on error. */
static int plain_placeholder(reader *r, PyObject *node, uint32_t *flags, int64_t *nbytes) {
    PyObject *target = field_get(&r->f_target, node);
    PyObject *name = target ? PyObject_Str(target) : NULL;
    Py_XDECREF(target);
    uint32_t role = 0;
    int rc = name ? placeholder_role(name, &role) : -1;
    Py_XDECREF(name);
    if (rc < 0) {
        return -1;
    }
    PyObject *meta = field_get(&r->f_meta, node);
    if (meta == NULL) {
        return -1;
    }
    uint64_t bits = role;
    int plain = PyDict_CheckExact(meta) ? plain_size(r, node, meta, nbytes, &bits) : 0;
    Py_DECREF(meta);
    if (plain > 0) {
        *flags = (uint32_t)bits;
    }
    return plain;
}

/* 1 if node.args[0] is not exactly a Node or is one whose target is the
 * triton hop (the slow path decides), 0 otherwise, -1 on error. */
static int getitem_of(const reader *r, PyObject *node) {
    PyObject *node_args = node_args_of(r, node);
    if (node_args == NULL) {
        return -1;
    }
    int slow = 1;
    if (PyTuple_Check(node_args) && PyTuple_GET_SIZE(node_args) > 0 &&
        (PyObject *)Py_TYPE(PyTuple_GET_ITEM(node_args, 0)) == r->cfg.node_cls) {
        PyObject *target = field_get(&r->f_target, PyTuple_GET_ITEM(node_args, 0));
        if (target == NULL) {
            Py_DECREF(node_args);
            return -1;
        }
        slow = target == r->cfg.triton_hop;
        Py_DECREF(target);
    }
    Py_DECREF(node_args);
    return slow;
}

/* meta["val"] of a node, borrowed, or NULL: for prefetching only.  The
 * node's own turn looks it up again and keeps what it finds (or raises
 * what it raises); an error here is dropped.  (A str key runs no Python
 * code; only a meta key of another type whose hash equals "val"'s could
 * see its __eq__ called here as well.) */
static PyObject *value_of(const reader *r, PyObject *node) {
    PyObject *meta = field_peek(&r->f_meta, node);
    if (meta == NULL || !PyDict_CheckExact(meta)) {
        return NULL;
    }
    PyObject *val = PyDict_GetItemWithError(meta, r->s[S_VAL]);
    if (val == NULL) {
        PyErr_Clear();
    }
    return val;
}

/* Six nodes ahead: the node object's fields. */
static void prefetch_fields(const reader *r, PyObject *ahead) {
    const field *fs[] = {&r->f_op, &r->f_target, &r->f_meta, &r->f_args, &r->f_inputs};
    for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
        if (fs[k]->offset >= 0) {
            PREFETCH((char *)ahead + fs[k]->offset);
        }
    }
}

/* Five nodes ahead: the meta dict, args tuple and inputs dict objects. */
static void prefetch_field_objects(const reader *r, PyObject *ahead) {
    PyObject *objs[] = {field_peek(&r->f_meta, ahead), field_peek(&r->f_args, ahead),
                        field_peek(&r->f_inputs, ahead)};
    for (size_t k = 0; k < sizeof objs / sizeof objs[0]; k++) {
        if (objs[k] != NULL) {
            PREFETCH(objs[k]);
        }
    }
}

/* Four nodes ahead: the meta and inputs dicts' key tables. */
static void prefetch_dict_tables(const reader *r, PyObject *ahead) {
    PyObject *dicts[] = {field_peek(&r->f_meta, ahead), field_peek(&r->f_inputs, ahead)};
    for (size_t k = 0; k < sizeof dicts / sizeof dicts[0]; k++) {
        if (dicts[k] != NULL && PyDict_CheckExact(dicts[k])) {
            const char *keys = (const char *)((PyDictObject *)dicts[k])->ma_keys;
            for (int line = 0; line < 8; line++) {
                PREFETCH(keys + 64 * line);
            }
        }
    }
}

/* A tensor's numel() reads its instance dict (a method lookup) and its
 * TensorImpl, the pointer torch's python_variable.h puts right after the
 * object header (THPVariable.cdata): their heads d == 2 nodes ahead, their
 * next lines at d == 1.  A hint only: nothing but a prefetch uses what is
 * read here. */
static void prefetch_tensor(const reader *r, PyObject *val, Py_ssize_t d) {
    PyTypeObject *type = Py_TYPE(val);
    if (!PyType_IsSubtype(type, (PyTypeObject *)r->cfg.tensor_cls) ||
        type->tp_basicsize < (Py_ssize_t)(sizeof(PyObject) + sizeof(void *))) {
        return;
    }
    const char *impl = *(const char *const *)(const void *)((const char *)val + sizeof(PyObject));
    PyObject *dict = NULL;
    if (type->tp_dictoffset > 0 && type->tp_dictoffset <= type->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
        dict = *(PyObject **)(void *)((char *)val + type->tp_dictoffset);
    }
    if (d == 2) {
        PREFETCH(impl);
        if (dict != NULL) {
            PREFETCH(dict);
        }
    } else {
        for (int line = 1; line < 4; line++) {
            PREFETCH(impl + 64 * line);
        }
        if (dict != NULL && PyDict_CheckExact(dict)) {
            PREFETCH(((PyDictObject *)dict)->ma_keys);
        }
    }
}

/* Lowering reads each node's object, then its meta dict, args tuple and
 * inputs dict, then the dicts' tables, then meta["val"] and what numel()
 * reads of it: chains of loads that mostly miss the cache on a large graph.
 * Each link is prefetched one node earlier than the link it leads to (a
 * prefetch never faults, and its address only decides what gets warmed). */
static void prefetch_ahead(const reader *r, PyObject *nodes, Py_ssize_t i) {
    Py_ssize_t n = PyTuple_GET_SIZE(nodes);
    if (i + 6 < n) {
        prefetch_fields(r, PyTuple_GET_ITEM(nodes, i + 6));
    }
    if (i + 5 < n) {
        prefetch_field_objects(r, PyTuple_GET_ITEM(nodes, i + 5));
    }
    if (i + 4 < n) {
        prefetch_dict_tables(r, PyTuple_GET_ITEM(nodes, i + 4));
    }
    for (Py_ssize_t d = 3; d >= 1; d--) {
        PyObject *val = i + d < n ? value_of(r, PyTuple_GET_ITEM(nodes, i + d)) : NULL;
        if (val == NULL) {
            continue;
        }
        if (d == 3) {
            PREFETCH(val);
            PREFETCH((const char *)val + 32);
            continue;
        }
        prefetch_tensor(r, val, d);
    }
}


static PyObject *bytes_of(const void *p, size_t count, size_t size) {
    return PyBytes_FromStringAndSize(count ? (const char *)p : "", (Py_ssize_t)(count * size));
}

/* 1 if `target` is one of the special targets (the slow path's). */
static int is_special(const reader *r, PyObject *target) {
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(r->cfg.special_targets); s++) {
        if (PyTuple_GET_ITEM(r->cfg.special_targets, s) == target) {
            return 1;
        }
    }
    return 0;
}

/* A call_function node read here: 1 with its flags and size; 0 if it is
 * the slow path's (a special target, a target with a slow bit, a getitem
 * of a triton kernel's output, a meta or value that is not plain); -1 on
 * error. */
static int plain_call(reader *r, PyObject *node, uint32_t *flags, int64_t *nbytes) {
    PyObject *target = field_get(&r->f_target, node);
    if (target == NULL) {
        return -1;
    }
    uint64_t bits = 0;
    int plain = !is_special(r, target);
    int rc = plain ? target_flags(&r->targets, r->cfg.flags_of, target, &bits) : 0;
    Py_DECREF(target); /* the table holds its own reference */
    if (rc < 0) {
        return -1;
    }
    plain = plain && !(bits & r->cfg.slow_bits);
    if (plain && (bits & FXCUT_F_GETITEM) && r->cfg.triton_hop != Py_None) {
        int of_triton = getitem_of(r, node);
        if (of_triton < 0) {
            return -1;
        }
        plain = !of_triton;
    }
    if (!plain) {
        return 0;
    }
    PyObject *meta = field_get(&r->f_meta, node);
    if (meta == NULL) {
        return -1;
    }
    plain = PyDict_CheckExact(meta) ? plain_size(r, node, meta, nbytes, &bits) : 0;
    if (plain > 0 && add_tag_flags(r, meta, &bits) < 0) {
        plain = -1;
    }
    Py_DECREF(meta);
    if (plain > 0) {
        if (bits & r->cfg.impure_bits) {
            bits |= FXCUT_F_IMPURE;
        }
        *flags = (uint32_t)bits; /* the graph array keeps the low 32 bits */
    }
    return plain;
}

/* Row i's facts from slow(node), the Python path's; -1 on error. */
static int slow_facts(reader *r, PyObject *node, size_t i) {
    PyObject *facts = PyObject_CallOneArg(r->cfg.slow, node);
    if (facts == NULL) {
        return -1;
    }
    unsigned long long flags;
    long long nbytes;
    int tag, ac;
    int ok = PyTuple_Check(facts) && PyArg_ParseTuple(facts, "KLii:lower_read slow", &flags, &nbytes, &tag, &ac);
    Py_DECREF(facts);
    if (!ok) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "lower_read: slow(node) must return a tuple");
        }
        return -1;
    }
    r->out.flags[i] = (uint32_t)flags;
    r->out.nbytes[i] = (int64_t)nbytes;
    r->out.tag[i] = (int8_t)tag;
    r->out.ac[i] = (int32_t)ac;
    return 0;
}

/* Row i's kind from node.op: READ_OK, READ_GIVE_UP for an op kind_of_op
 * does not know, READ_ERROR. */
static int read_kind(reader *r, PyObject *node, size_t i, long *kind) {
    PyObject *op = field_get(&r->f_op, node);
    if (op == NULL) {
        return READ_ERROR;
    }
    PyObject *k = PyDict_GetItemWithError(r->cfg.kind_of_op, op);
    Py_DECREF(op);
    if (k == NULL) {
        return PyErr_Occurred() ? READ_ERROR : READ_GIVE_UP;
    }
    *kind = PyLong_AsLong(k);
    if (*kind == -1 && PyErr_Occurred()) {
        return READ_ERROR;
    }
    r->out.kind[i] = (uint8_t)*kind;
    return READ_OK;
}

/* Row i's flags, size, tag and ac_graph_id: read here for a plain
 * call_function or placeholder, from slow(node) otherwise; -1 on error. */
static int read_facts(reader *r, PyObject *node, size_t i, long kind) {
    int plain = 0;
    if (kind == FXCUT_CALL_FUNCTION) {
        plain = plain_call(r, node, &r->out.flags[i], &r->out.nbytes[i]);
    } else if (kind == FXCUT_PLACEHOLDER) {
        plain = plain_placeholder(r, node, &r->out.flags[i], &r->out.nbytes[i]);
    }
    if (plain < 0) {
        return -1;
    }
    if (!plain) {
        return slow_facts(r, node, i);
    }
    r->out.tag[i] = (int8_t)FXCUT_TAG_NONE;
    r->out.ac[i] = 0;
    return 0;
}

/* The positions of node's positional Node args, uses redirected through
 * replace, onto arg_idx: READ_OK, READ_GIVE_UP for a node of another graph
 * (or replaced by one) or args that are not a tuple, READ_ERROR. */
static int read_args(reader *r, PyObject *node) {
    PyObject *node_args = node_args_of(r, node);
    if (node_args == NULL) {
        return READ_ERROR;
    }
    int status = PyTuple_Check(node_args) ? READ_OK : READ_GIVE_UP;
    for (Py_ssize_t a = 0; status == READ_OK && a < PyTuple_GET_SIZE(node_args); a++) {
        /* The table's keys are all exactly node_cls: an arg found there
         * is a node without its object being read (often a cache miss). */
        PyObject *arg = PyTuple_GET_ITEM(node_args, a);
        size_t slot = node_slot(&r->at, arg);
        if (r->at.keys[slot] == NULL) {
            status = (PyObject *)Py_TYPE(arg) == r->cfg.node_cls ? READ_GIVE_UP : READ_OK;
            continue;
        }
        int32_t p = r->at.use[slot];
        if (p < 0) {
            status = READ_GIVE_UP;
        } else if (ivec_push(&r->out.arg_idx, p) < 0) {
            status = READ_ERROR;
        }
    }
    Py_DECREF(node_args);
    return status;
}

/* The positions of row i's input nodes, redirected through replace and
 * deduplicated in first-use order, onto in_idx: READ_OK, READ_GIVE_UP (an
 * input not in the graph, inputs that are not a dict), READ_ERROR. */
static int read_inputs(reader *r, PyObject *node, size_t i) {
    PyObject *inputs = field_get(&r->f_inputs, node);
    if (inputs == NULL) {
        return READ_ERROR;
    }
    int status = PyDict_Check(inputs) ? READ_OK : READ_GIVE_UP;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (status == READ_OK && PyDict_Next(inputs, &pos, &key, &value)) {
        Py_ssize_t p = position_of(r, key);
        if (p < 0) {
            status = READ_GIVE_UP;
        } else if (r->out.seen[p] != (int32_t)i) { /* two inputs replaced by one representative: once */
            r->out.seen[p] = (int32_t)i;
            status = ivec_push(&r->out.in_idx, (int32_t)p) < 0 ? READ_ERROR : READ_OK;
        }
    }
    Py_DECREF(inputs);
    return status;
}

/* Row i of the graph array, for node i. */
static int read_node(reader *r, size_t i) {
    PyObject *node = PyTuple_GET_ITEM(r->nodes, (Py_ssize_t)i);
    prefetch_ahead(r, r->nodes, (Py_ssize_t)i);
    long kind;
    int status = read_kind(r, node, i, &kind);
    if (status == READ_OK && read_facts(r, node, i, kind) < 0) {
        status = READ_ERROR;
    }
    if (status == READ_OK) {
        status = read_args(r, node);
    }
    if (status == READ_OK) {
        status = read_inputs(r, node, i);
    }
    if (status != READ_OK) {
        return status;
    }
    if (r->out.arg_idx.len >= INT32_MAX || r->out.in_idx.len >= INT32_MAX) {
        return READ_GIVE_UP;
    }
    r->out.arg_ptr[i + 1] = (int32_t)r->out.arg_idx.len;
    r->out.in_ptr[i + 1] = (int32_t)r->out.in_idx.len;
    if (kind == FXCUT_OUTPUT) {
        PyObject *where = PyLong_FromSize_t(i);
        int failed = where == NULL || PyList_Append(r->out.outputs, where) < 0;
        Py_XDECREF(where);
        return failed ? READ_ERROR : READ_OK;
    }
    return READ_OK;
}

/* The arrays for n nodes; -1 on no memory. */
static int lowered_open(lowered *out, size_t n) {
    out->kind = malloc(n + 1);
    out->flags = malloc((n + 1) * sizeof *out->flags);
    out->tag = malloc(n + 1);
    out->ac = malloc((n + 1) * sizeof *out->ac);
    out->nbytes = malloc((n + 1) * sizeof *out->nbytes);
    out->arg_ptr = calloc(n + 1, sizeof *out->arg_ptr);
    out->in_ptr = calloc(n + 1, sizeof *out->in_ptr);
    out->seen = malloc((n + 1) * sizeof *out->seen);
    if (!out->kind || !out->flags || !out->tag || !out->ac || !out->nbytes || !out->arg_ptr || !out->in_ptr ||
        !out->seen) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        out->seen[i] = -1;
    }
    out->outputs = PyList_New(0);
    return out->outputs == NULL ? -1 : 0;
}

static void lowered_close(lowered *out) {
    free(out->kind);
    free(out->flags);
    free(out->tag);
    free(out->ac);
    free(out->nbytes);
    free(out->arg_ptr);
    free(out->in_ptr);
    free(out->seen);
    free(out->arg_idx.p);
    free(out->in_idx.p);
    Py_XDECREF(out->outputs);
}

/* The reader of `node_list` (a list) with uses redirected by `replace`:
 * private copies of both (the Python code the reader calls -- slow,
 * numel, ... -- can neither shrink what is read nor free a node the table
 * holds), its names, the node slots, the arrays.  1 ready, 0 give up (a
 * node or a replace key or value that is not exactly node_cls), -1 error. */
static int reader_open(reader *r, PyObject *node_list, PyObject *replace) {
    r->seq_opaque[0] = r->seq_opaque[1] = -1;
    r->nodes = PyList_AsTuple(node_list);
    if (r->nodes == NULL) {
        return -1;
    }
    if (PyTuple_GET_SIZE(r->nodes) >= INT32_MAX) {
        return 0; /* positions are int32 */
    }
    r->replace = replace == Py_None ? Py_NewRef(Py_None) : PyDict_Copy(replace);
    if (r->replace == NULL) {
        return -1;
    }
    for (int k = 0; k < S_COUNT; k++) {
        r->s[k] = PyUnicode_InternFromString(reader_strings[k]);
        if (r->s[k] == NULL) {
            return -1;
        }
    }
    field *fields[] = {&r->f_op, &r->f_target, &r->f_meta, &r->f_args, &r->f_inputs};
    int names[] = {S_OP, S_TARGET, S_META, S__ARGS, S__INPUT_NODES};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        fields[k]->name = r->s[names[k]];
        field_resolve(fields[k], r->cfg.node_cls);
    }
    if (lowered_open(&r->out, (size_t)PyTuple_GET_SIZE(r->nodes)) < 0) {
        return -1;
    }
    return index_nodes(r, r->nodes);
}

static void reader_close(reader *r) {
    lowered_close(&r->out);
    node_table_free(&r->at);
    for (size_t k = 0; k < r->targets.cap; k++) {
        Py_XDECREF(r->targets.keys[k]);
    }
    free(r->targets.keys);
    free(r->targets.bits);
    for (int k = 0; k < S_COUNT; k++) {
        Py_XDECREF(r->s[k]);
    }
    Py_XDECREF(r->replace);
    Py_XDECREF(r->nodes);
    fxcut_release_config(reader_fields, READER_FIELDS, &r->cfg);
}

/* The result tuple: the arrays as bytes, the output positions, the dict
 * node -> position; NULL on error. */
static PyObject *reader_result(const reader *r) {
    size_t n = (size_t)PyTuple_GET_SIZE(r->nodes);
    const lowered *out = &r->out;
    PyObject *index = index_dict(r, r->nodes);
    PyObject *parts[9] = {
        bytes_of(out->kind, n, 1), bytes_of(out->flags, n, 4), bytes_of(out->tag, n, 1),
        bytes_of(out->ac, n, 4), bytes_of(out->nbytes, n, 8), bytes_of(out->arg_ptr, n + 1, 4),
        bytes_of(out->arg_idx.p, out->arg_idx.len, 4), bytes_of(out->in_ptr, n + 1, 4),
        bytes_of(out->in_idx.p, out->in_idx.len, 4)};
    int complete = index != NULL;
    for (int k = 0; k < 9; k++) {
        complete &= parts[k] != NULL;
    }
    PyObject *result = NULL;
    if (complete) {
        result = PyTuple_Pack(11, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6], parts[7],
                              parts[8], out->outputs, index);
    }
    for (int k = 0; k < 9; k++) {
        Py_XDECREF(parts[k]);
    }
    Py_XDECREF(index);
    return result;
}

const char fxcut_py_lower_read_doc[] =
    "lower_read($module, nodes, replace, config, /)\n--\n\n"
    "-> tuple | None: fxcut.route.lower's per-node pass in C: (kind, flags, tag, ac_graph_id, nbytes,\n"
    "arg_ptr, arg_idx, in_ptr, in_idx) as bytes in the graph array's item types, the positions of the\n"
    "output nodes, and the dict node -> position.  ``nodes``: a list of fx nodes; ``replace``: a dict\n"
    "node -> node its uses are lowered to, or None.  ``config``: a fxcut.route.lower.ReaderConfig, its\n"
    "fields read by name (kind_of_op, flags_of, slow, opaque, node_cls, tensor_cls, special_targets,\n"
    "slow_meta_keys, triton_hop, slow_bits, impure_bits, mutable_bit).  None where the Python path\n"
    "must run.";

PyObject *fxcut_py_lower_read(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"", "", "", NULL};
    PyObject *node_list, *replace, *config;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO:lower_read", keywords, &PyList_Type, &node_list,
                                     &replace, &config)) {
        return NULL;
    }
    if (replace != Py_None && !PyDict_Check(replace)) {
        PyErr_Format(PyExc_TypeError, "lower_read: replace must be a dict or None, got %.100s",
                     Py_TYPE(replace)->tp_name);
        return NULL;
    }
    reader r;
    memset(&r, 0, sizeof r);
    PyObject *result = NULL;
    int status = fxcut_read_config(config, "lower_read", reader_fields, READER_FIELDS, &r.cfg) < 0
                     ? READ_ERROR
                     : reader_open(&r, node_list, replace);
    size_t n = r.nodes ? (size_t)PyTuple_GET_SIZE(r.nodes) : 0;
    for (size_t i = 0; status == READ_OK && i < n; i++) {
        status = read_node(&r, i);
    }
    if (status == READ_OK) {
        result = reader_result(&r);
    } else if (status == READ_GIVE_UP) {
        result = Py_NewRef(Py_None);
    }
    reader_close(&r);
    return result;
}
