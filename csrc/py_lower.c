/*
 * lower_read: fxcut.lower's per-node pass over an fx graph's node list, in C.
 *
 * For every node: its kind (from `op`), the CSR of its positional Node args
 * and of its input nodes (uses redirected through `replace`, inputs then
 * deduplicated in first-use order), and -- for a plain node -- its flag bits
 * and byte size.  A plain node is a call_function whose target's flags (from
 * `flags_of`, memoised per target in a table local to the call) carry none
 * of `slow_bits`, whose target is none of `special_targets`, whose meta has
 * none of `slow_meta_keys`, and whose meta["val"] is either a tensor of an
 * exact int numel and dtype itemsize, or an exact tuple or list whose tensor
 * items all are (its size their sum, as torch's _size_of takes it; any other
 * item counts 0); or a placeholder named by an exact str with such a value.
 * Whether a tuple (list) value is opaque (torch's is_opaque_node) depends
 * only on its type: `opaque(node)` answers it for the first such node and
 * the answer is kept for the call.  Every other node's (flags, nbytes, tag,
 * ac_graph_id) comes from calling `slow(node)`, fxcut.lower's Python facts
 * of one node, so the two paths cannot disagree on anything but the plain
 * case (tests/test_graph_arrays.py compares them node for node).
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

typedef struct {
    PyObject *replace, *kind_of_op, *flags_of, *slow, *opaque, *node_cls, *tensor_cls;
    PyObject *special_targets, *slow_meta_keys, *triton_hop;
    PyObject *s_op, *s_target, *s_args, *s__args, *s_input_nodes, *s_meta, *s_val, *s_numel, *s_itemsize;
    PyObject *s_tangents, *s_fwd_seed, *s_fwd_base_offset, *s_bwd_seed, *s_bwd_base_offset;
    /* Flag values from the config tuple, parsed straight in ("K"). */
    unsigned long long slow_bits, impure_bits, impure_flag, mask, getitem_bit;
    unsigned long long mutable_bit, is_backward_flag, must_bw_flag;
    unsigned long long f_tangent, f_fwd_seed, f_bwd_seed, f_primal;
    unsigned long long f_non_tensor, f_val_is_seq, f_free_object;
    PyObject *s_partitioner_tag;
    long kind_call_function, kind_placeholder;
    field f_op, f_target, f_meta, f_args, f_inputs;
    node_table nodes;
    int seq_opaque[2]; /* opaque(node) of a tuple, a list value; -1: not asked yet */
} reader;

/* The position a use of `node` is lowered to; < 0: not in the graph. */
static Py_ssize_t position_of(const reader *r, PyObject *node) {
    size_t i = node_slot(&r->nodes, node);
    return r->nodes.keys[i] == NULL ? NOT_IN_GRAPH : (Py_ssize_t)r->nodes.use[i];
}

/* Fill the table: every node at its position (a node listed twice at its
 * last, as a dict comprehension leaves it), then every replace key at its
 * value's own position.  1 done, 0 give up (a key that is not exactly a
 * node), -1 error. */
static int index_nodes(reader *r, PyObject *nodes) {
    Py_ssize_t n = PyTuple_GET_SIZE(nodes);
    Py_ssize_t extra = r->replace == Py_None ? 0 : PyDict_GET_SIZE(r->replace);
    if (node_table_init(&r->nodes, (size_t)n + (size_t)extra) < 0) {
        return -1;
    }
    node_table *t = &r->nodes;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *node = PyTuple_GET_ITEM(nodes, i);
        if ((PyObject *)Py_TYPE(node) != r->node_cls) {
            return 0;
        }
        size_t s = node_slot(t, node);
        t->keys[s] = node;
        t->own[s] = t->use[s] = (int32_t)i;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (extra && PyDict_Next(r->replace, &pos, &key, &value)) {
        if ((PyObject *)Py_TYPE(key) != r->node_cls || (PyObject *)Py_TYPE(value) != r->node_cls) {
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
        PyObject *at = PyLong_FromLong((long)r->nodes.own[node_slot(&r->nodes, node)]);
        if (at == NULL || PyDict_SetItem(index, node, at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(index);
            return NULL;
        }
        Py_DECREF(at);
    }
    return index;
}

/* The flags meta["partitioner_tag"] adds to `*bits` (torch's is_backward
 * and must-be-in-backward tests); 0 if the tag is not an exact str (the
 * slow path compares it), 1 otherwise, -1 on error. */
static int tag_bits(const reader *r, PyObject *meta, uint64_t *bits) {
    PyObject *tag = PyDict_GetItemWithError(meta, r->s_partitioner_tag);
    if (tag == NULL) {
        return PyErr_Occurred() ? -1 : 1;
    }
    if (tag == Py_None) {
        return 1;
    }
    if (!PyUnicode_CheckExact(tag)) {
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(tag, "is_backward") == 0) {
        *bits |= r->is_backward_flag;
        if (*bits & r->mutable_bit) {
            *bits |= r->must_bw_flag;
        }
    } else if (PyUnicode_CompareWithASCIIString(tag, "must_be_in_backward") == 0) {
        *bits |= r->must_bw_flag;
    }
    return 1;
}

/* isinstance(x, tensor_cls): 1, 0, or -1 on error. */
static int is_tensor(const reader *r, PyObject *x) {
    return PyType_IsSubtype(Py_TYPE(x), (PyTypeObject *)r->tensor_cls) ? 1 : PyObject_IsInstance(x, r->tensor_cls);
}

/* numel() * itemsize of tensor `val`, checked (Tensor.nbytes would wrap
 * past 2^63): 1 and *nbytes, 0 if the slow path's (a symbolic numel, a size
 * out of range), -1 on error. */
static int tensor_size(const reader *r, PyObject *val, int64_t *nbytes) {
    int plain = 0;
    PyObject *numel = PyObject_CallMethodNoArgs(val, r->s_numel);
    PyObject *itemsize = numel ? PyObject_GetAttr(val, r->s_itemsize) : NULL;
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
        PyObject *answer = PyObject_CallOneArg(r->opaque, node);
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
    Py_ssize_t nkeys = PyTuple_GET_SIZE(r->slow_meta_keys);
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        int has = PyDict_Contains(meta, PyTuple_GET_ITEM(r->slow_meta_keys, k));
        if (has != 0) {
            return has < 0 ? -1 : 0;
        }
    }
    PyObject *val = PyDict_GetItemWithError(meta, r->s_val);
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
            *bits |= r->f_non_tensor | r->f_val_is_seq | (opaque ? r->f_free_object : 0);
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

/* 1 if `name` holds `part`, 0 if not, -1 on error. */
static int holds(PyObject *name, PyObject *part) {
    Py_ssize_t at = PyUnicode_Find(name, part, 0, PY_SSIZE_T_MAX, 1);
    return at == -2 ? -1 : at >= 0;
}

/* A placeholder named by an exact str whose meta["val"] is a tensor of an
 * exact size and whose meta has none of the slow keys: its flags (the role
 * its name gives) and size; 1 if so, 0 if the slow path's, -1 on error. */
static int plain_placeholder(reader *r, PyObject *node, uint32_t *flags, int64_t *nbytes) {
    PyObject *target = field_get(&r->f_target, node);
    if (target == NULL) {
        return -1;
    }
    int plain = 0;
    uint64_t bits = r->f_primal;
    if (PyUnicode_CheckExact(target)) {
        int t = holds(target, r->s_tangents);
        int f = t ? 0 : holds(target, r->s_fwd_seed);
        f = (t || f) ? f : holds(target, r->s_fwd_base_offset);
        int b = (t || f) ? 0 : holds(target, r->s_bwd_seed);
        b = (t || f || b) ? b : holds(target, r->s_bwd_base_offset);
        if (t < 0 || f < 0 || b < 0) {
            Py_DECREF(target);
            return -1;
        }
        bits = t ? r->f_tangent : f ? r->f_fwd_seed : b ? r->f_bwd_seed : r->f_primal;
        plain = 1;
    }
    Py_DECREF(target);
    if (!plain) {
        return 0;
    }
    PyObject *meta = field_get(&r->f_meta, node);
    if (meta == NULL) {
        return -1;
    }
    plain = PyDict_CheckExact(meta) ? plain_size(r, node, meta, nbytes, &bits) : 0;
    Py_DECREF(meta);
    if (plain > 0) {
        *flags = (uint32_t)(bits & r->mask);
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
        (PyObject *)Py_TYPE(PyTuple_GET_ITEM(node_args, 0)) == r->node_cls) {
        PyObject *target = field_get(&r->f_target, PyTuple_GET_ITEM(node_args, 0));
        if (target == NULL) {
            Py_DECREF(node_args);
            return -1;
        }
        slow = target == r->triton_hop;
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
    PyObject *val = PyDict_GetItemWithError(meta, r->s_val);
    if (val == NULL) {
        PyErr_Clear();
    }
    return val;
}

/* Lowering reads each node's object, then its meta dict, args tuple and
 * inputs dict, then the dicts' tables, then meta["val"] and what numel()
 * reads of it: chains of loads that mostly miss the cache on a large graph.
 * Each link is prefetched one node earlier than the link it leads to (a
 * prefetch never faults, and its address only decides what gets warmed). */
static void prefetch_ahead(const reader *r, PyObject *nodes, Py_ssize_t i) {
    Py_ssize_t n = PyTuple_GET_SIZE(nodes);
    if (i + 6 < n) {
        PyObject *ahead = PyTuple_GET_ITEM(nodes, i + 6);
        const field *fs[] = {&r->f_op, &r->f_target, &r->f_meta, &r->f_args, &r->f_inputs};
        for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
            if (fs[k]->offset >= 0) {
                PREFETCH((char *)ahead + fs[k]->offset);
            }
        }
    }
    if (i + 5 < n) {
        PyObject *ahead = PyTuple_GET_ITEM(nodes, i + 5);
        PyObject *objs[] = {field_peek(&r->f_meta, ahead), field_peek(&r->f_args, ahead),
                            field_peek(&r->f_inputs, ahead)};
        for (size_t k = 0; k < sizeof objs / sizeof objs[0]; k++) {
            if (objs[k] != NULL) {
                PREFETCH(objs[k]);
            }
        }
    }
    if (i + 4 < n) {
        PyObject *ahead = PyTuple_GET_ITEM(nodes, i + 4);
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
        /* A tensor's numel() reads its instance dict (a method lookup)
         * and its TensorImpl, the pointer torch's python_variable.h puts
         * right after the object header (THPVariable.cdata): their heads
         * at d == 2, their next lines at d == 1.  A hint only: nothing
         * but a prefetch uses what is read here. */
        PyTypeObject *type = Py_TYPE(val);
        if (!PyType_IsSubtype(type, (PyTypeObject *)r->tensor_cls) ||
            type->tp_basicsize < (Py_ssize_t)(sizeof(PyObject) + sizeof(void *))) {
            continue;
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
}

static PyObject *bytes_of(const void *p, size_t count, size_t size) {
    return PyBytes_FromStringAndSize(count ? (const char *)p : "", (Py_ssize_t)(count * size));
}

const char fxcut_py_lower_read_doc[] =
    "lower_read($module, nodes, replace, kind_of_op, flags_of, slow, opaque, config)\n--\n\n"
    "-> tuple | None: fxcut.lower's per-node pass in C: (kind, flags, tag, ac_graph_id, nbytes, arg_ptr, arg_idx,\n"
    "in_ptr, in_idx) as bytes in the graph array's item types, the positions of the output\n"
    "nodes, and the dict node -> position.  ``slow(node)`` gives (flags, nbytes, tag, ac_graph_id) of a\n"
    "node that is not plain; ``opaque(node)`` whether a node's tuple or list value is opaque;\n"
    "``config``: (node_cls, tensor_cls, special_targets, slow_meta_keys, slow_bits, impure_bits,\n"
    "impure_flag, mask, kind_call_function, getitem_bit, triton_hop, mutable_bit, is_backward_flag,\n"
    "must_be_in_backward_flag, kind_placeholder, F_TANGENT, F_FWD_SEED, F_BWD_SEED, F_PRIMAL,\n"
    "F_NON_TENSOR, F_VAL_IS_SEQ, F_FREE_OBJECT).  None where the Python path must run.";

PyObject *fxcut_py_lower_read(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"nodes", "replace", "kind_of_op", "flags_of", "slow", "opaque", "config", NULL};
    PyObject *node_list, *config;
    reader r;
    memset(&r, 0, sizeof r);
    r.seq_opaque[0] = r.seq_opaque[1] = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO!OOOO!:lower_read", keywords, &PyList_Type,
                                     &node_list, &r.replace, &PyDict_Type, &r.kind_of_op, &r.flags_of,
                                     &r.slow, &r.opaque, &PyTuple_Type, &config)) {
        return NULL;
    }
    if (!PyArg_ParseTuple(config, "OOO!O!KKKKlKOKKKlKKKKKKK:lower_read config", &r.node_cls,
                          &r.tensor_cls, &PyTuple_Type, &r.special_targets, &PyTuple_Type,
                          &r.slow_meta_keys, &r.slow_bits, &r.impure_bits, &r.impure_flag,
                          &r.mask, &r.kind_call_function, &r.getitem_bit, &r.triton_hop,
                          &r.mutable_bit, &r.is_backward_flag, &r.must_bw_flag,
                          &r.kind_placeholder, &r.f_tangent, &r.f_fwd_seed, &r.f_bwd_seed,
                          &r.f_primal, &r.f_non_tensor, &r.f_val_is_seq, &r.f_free_object)) {
        return NULL;
    }
    if (!PyType_Check(r.tensor_cls)) {
        PyErr_SetString(PyExc_TypeError, "lower_read config: tensor_cls must be a type");
        return NULL;
    }
    if (r.replace != Py_None && !PyDict_Check(r.replace)) {
        PyErr_SetString(PyExc_TypeError, "lower_read: replace must be a dict or None");
        return NULL;
    }
    if (!PyCallable_Check(r.flags_of) || !PyCallable_Check(r.slow) || !PyCallable_Check(r.opaque)) {
        PyErr_SetString(PyExc_TypeError, "lower_read: flags_of, slow and opaque must be callable");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(node_list);
    if (n >= INT32_MAX) {
        Py_RETURN_NONE;
    }
    /* Private copies: the Python code this calls (slow, numel, ...) cannot
     * shrink what is read, nor free a node or replacement the table holds. */
    PyObject *nodes = PyList_AsTuple(node_list);
    if (nodes == NULL) {
        return NULL;
    }
    n = PyTuple_GET_SIZE(nodes);
    if (r.replace != Py_None) {
        r.replace = PyDict_Copy(r.replace);
        if (r.replace == NULL) {
            Py_DECREF(nodes);
            return NULL;
        }
    } else {
        Py_INCREF(r.replace);
    }
    size_t un = (size_t)n;
    uint8_t *kind = malloc(un + 1);
    uint32_t *flags = malloc((un + 1) * sizeof *flags);
    int8_t *tag = malloc(un + 1);
    int32_t *ac = malloc((un + 1) * sizeof *ac);
    int64_t *nbytes = malloc((un + 1) * sizeof *nbytes);
    int32_t *arg_ptr = calloc(un + 1, sizeof *arg_ptr);
    int32_t *in_ptr = calloc(un + 1, sizeof *in_ptr);
    int32_t *seen = malloc((un + 1) * sizeof *seen); /* dedup of inputs: last node that used it */
    ivec arg_idx = {NULL, 0, 0}, in_idx = {NULL, 0, 0};
    target_table table = {NULL, NULL, 0, 0};
    PyObject *outputs = PyList_New(0);
    PyObject *index = NULL;
    PyObject *result = NULL;
    int give_up = 0;
    static const char *names[] = {"op", "target", "args", "_args", "_input_nodes", "meta", "val", "numel", "itemsize",
                                  "partitioner_tag", "tangents", "fwd_seed", "fwd_base_offset",
                                  "bwd_seed", "bwd_base_offset"};
    PyObject **interned[] = {&r.s_op, &r.s_target, &r.s_args, &r.s__args, &r.s_input_nodes, &r.s_meta,
                             &r.s_val, &r.s_numel, &r.s_itemsize, &r.s_partitioner_tag, &r.s_tangents,
                             &r.s_fwd_seed, &r.s_fwd_base_offset, &r.s_bwd_seed,
                             &r.s_bwd_base_offset};
    if (!kind || !flags || !tag || !ac || !nbytes || !arg_ptr || !in_ptr || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    if (outputs == NULL) {
        goto done;
    }
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        *interned[k] = PyUnicode_InternFromString(names[k]);
        if (*interned[k] == NULL) {
            goto done;
        }
    }
    for (size_t i = 0; i < un; i++) {
        seen[i] = -1;
    }
    {
        field *fields[] = {&r.f_op, &r.f_target, &r.f_meta, &r.f_args, &r.f_inputs};
        PyObject *field_names[] = {r.s_op, r.s_target, r.s_meta, r.s__args, r.s_input_nodes};
        for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
            fields[k]->name = field_names[k];
            field_resolve(fields[k], r.node_cls);
        }
    }
    {
        int indexed = index_nodes(&r, nodes);
        if (indexed < 0) {
            goto done;
        }
        give_up = !indexed;
    }

    for (Py_ssize_t i = 0; i < n && !give_up; i++) {
        PyObject *node = PyTuple_GET_ITEM(nodes, i);
        prefetch_ahead(&r, nodes, i);
        PyObject *op = field_get(&r.f_op, node);
        if (op == NULL) {
            goto done;
        }
        PyObject *k = PyDict_GetItemWithError(r.kind_of_op, op);
        Py_DECREF(op);
        if (k == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            give_up = 1;
            break;
        }
        long kv = PyLong_AsLong(k);
        if (kv == -1 && PyErr_Occurred()) {
            goto done;
        }
        kind[i] = (uint8_t)kv;
        int plain = 0;
        if (kv == r.kind_call_function) {
            PyObject *target = field_get(&r.f_target, node);
            if (target == NULL) {
                goto done;
            }
            uint64_t bits = 0;
            int special = 0;
            for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(r.special_targets); s++) {
                special |= PyTuple_GET_ITEM(r.special_targets, s) == target;
            }
            int rc = special ? 0 : target_flags(&table, r.flags_of, target, &bits);
            Py_DECREF(target); /* the table holds its own reference */
            if (rc < 0) {
                goto done;
            }
            if (!special && (bits & r.getitem_bit) && r.triton_hop != Py_None) {
                /* a getitem of a triton kernel's output is the slow path's */
                int of_triton = getitem_of(&r, node);
                if (of_triton < 0) {
                    goto done;
                }
                special = of_triton;
            }
            if (!special && !(bits & r.slow_bits)) {
                PyObject *meta = field_get(&r.f_meta, node);
                if (meta == NULL) {
                    goto done;
                }
                int64_t size = 0;
                plain = PyDict_CheckExact(meta) ? plain_size(&r, node, meta, &size, &bits) : 0;
                if (plain > 0) {
                    plain = tag_bits(&r, meta, &bits);
                }
                Py_DECREF(meta);
                if (plain < 0) {
                    goto done;
                }
                if (plain) {
                    if (bits & r.impure_bits) {
                        bits |= r.impure_flag;
                    }
                    flags[i] = (uint32_t)(bits & r.mask);
                    nbytes[i] = size;
                    tag[i] = (int8_t)FXCUT_TAG_NONE;
                    ac[i] = 0;
                }
            }
        }
        if (kv == r.kind_placeholder) {
            plain = plain_placeholder(&r, node, &flags[i], &nbytes[i]);
            if (plain < 0) {
                goto done;
            }
            if (plain) {
                tag[i] = (int8_t)FXCUT_TAG_NONE;
                ac[i] = 0;
            }
        }
        if (!plain) {
            PyObject *facts = PyObject_CallOneArg(r.slow, node);
            if (facts == NULL) {
                goto done;
            }
            unsigned long long fb;
            long long nb;
            int tg, acv;
            int ok = PyTuple_Check(facts) &&
                     PyArg_ParseTuple(facts, "KLii:lower_read slow", &fb, &nb, &tg, &acv);
            Py_DECREF(facts);
            if (!ok) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_TypeError, "lower_read: slow(node) must return a tuple");
                }
                goto done;
            }
            flags[i] = (uint32_t)(fb & r.mask);
            nbytes[i] = (int64_t)nb;
            tag[i] = (int8_t)tg;
            ac[i] = (int32_t)acv;
        }

        /* Edges: positional Node args, then every input node. */
        PyObject *node_args = node_args_of(&r, node);
        if (node_args == NULL) {
            goto done;
        }
        if (!PyTuple_Check(node_args)) {
            Py_DECREF(node_args);
            give_up = 1;
            break;
        }
        for (Py_ssize_t a = 0; a < PyTuple_GET_SIZE(node_args) && !give_up; a++) {
            /* The table's keys are all exactly node_cls: an arg found there
             * is a node without its object being read (often a cache miss). */
            PyObject *arg = PyTuple_GET_ITEM(node_args, a);
            size_t slot = node_slot(&r.nodes, arg);
            if (r.nodes.keys[slot] == NULL) {
                give_up = (PyObject *)Py_TYPE(arg) == r.node_cls; /* a node of another graph */
                continue;
            }
            Py_ssize_t p = r.nodes.use[slot];
            if (p >= 0 && ivec_push(&arg_idx, (int32_t)p) < 0) {
                Py_DECREF(node_args);
                goto done;
            }
            give_up = p < 0;
        }
        Py_DECREF(node_args);
        PyObject *inputs = give_up ? NULL : field_get(&r.f_inputs, node);
        if (give_up) {
            break;
        }
        if (inputs == NULL) {
            goto done;
        }
        if (!PyDict_Check(inputs)) {
            Py_DECREF(inputs);
            give_up = 1;
            break;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (!give_up && PyDict_Next(inputs, &pos, &key, &value)) {
            Py_ssize_t p = position_of(&r, key);
            if (p < 0) {
                give_up = 1;
                break;
            }
            if (seen[p] == (int32_t)i) {
                continue; /* two inputs replaced by one representative */
            }
            seen[p] = (int32_t)i;
            if (ivec_push(&in_idx, (int32_t)p) < 0) {
                Py_DECREF(inputs);
                goto done;
            }
        }
        Py_DECREF(inputs);
        if (arg_idx.len >= INT32_MAX || in_idx.len >= INT32_MAX) {
            give_up = 1;
        }
        arg_ptr[i + 1] = (int32_t)arg_idx.len;
        in_ptr[i + 1] = (int32_t)in_idx.len;
        if (kv == FXCUT_OUTPUT) {
            PyObject *where = PyLong_FromSsize_t(i);
            if (where == NULL || PyList_Append(outputs, where) < 0) {
                Py_XDECREF(where);
                goto done;
            }
            Py_DECREF(where);
        }
    }
    if (give_up) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    index = index_dict(&r, nodes);
    if (index == NULL) {
        goto done;
    }
    {
        PyObject *parts[11] = {
            bytes_of(kind, un, 1), bytes_of(flags, un, 4), bytes_of(tag, un, 1),
            bytes_of(ac, un, 4), bytes_of(nbytes, un, 8), bytes_of(arg_ptr, un + 1, 4),
            bytes_of(arg_idx.p, arg_idx.len, 4), bytes_of(in_ptr, un + 1, 4),
            bytes_of(in_idx.p, in_idx.len, 4), outputs, index};
        int complete = 1;
        for (int k = 0; k < 9; k++) {
            complete &= parts[k] != NULL;
        }
        if (complete) {
            result = PyTuple_Pack(11, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5],
                                  parts[6], parts[7], parts[8], parts[9], parts[10]);
        }
        for (int k = 0; k < 9; k++) {
            Py_XDECREF(parts[k]);
        }
    }
done:
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        Py_XDECREF(*interned[k]);
    }
    Py_XDECREF(outputs);
    Py_XDECREF(index);
    Py_DECREF(nodes);
    Py_DECREF(r.replace);
    node_table_free(&r.nodes);
    free(kind);
    free(flags);
    free(tag);
    free(ac);
    free(nbytes);
    free(arg_ptr);
    free(in_ptr);
    free(seen);
    free(arg_idx.p);
    free(in_idx.p);
    for (size_t k = 0; k < table.cap; k++) {
        Py_XDECREF(table.keys[k]);
    }
    free(table.keys);
    free(table.bits);
    return result;
}
