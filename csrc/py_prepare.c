/*
 * prepare_plan: fxcut.prepare's plan -- torch's dead-code elimination and
 * fx_graph_cse, decided without touching the graph -- in one C pass over
 * the node list (fxcut.prepare.plan calls it once per graph).
 *
 *   dead code   walking backwards, a node none of whose users survive and
 *               that is not impure is dead (Graph.eliminate_dead_code);
 *   regions     over the live nodes, the mutation region of each (torch's
 *               compute_mutation_region_ids);
 *   CSE         fx_graph_cse's choices: each node's key (py_cse.c), its
 *               token, the table of representatives, with the release's
 *               rules (backward values apart, impure nodes and mutation
 *               bases skipped, streams keyed) as fxcut.prepare passes them.
 *
 * A node's facts (a random op or aten.empty, impure, a mutation, a
 * functional wrapper) come from the Python callback `node_facts(node)` as
 * bits -- the rules are Python's alone (fxcut.torchrules.prepare) -- asked
 * once per distinct call_function target and once per op for placeholders,
 * outputs and get_attrs where the answer says it holds alike (cached here,
 * in tables local to the call), once per node otherwise (a higher-order
 * op's purity depends on its arguments).  A node's key falls back to Python
 * (`python_key`) where its arguments hold a pytree container fx does not make.
 *
 * One difference from a literal transcription, giving the same plan: torch
 * skips nodes whose value shares a storage with an output, which asks
 * every tensor for its storage.  Here a node's storage is asked only when
 * it matters -- when a later node finds the same table entry -- and a table
 * entry whose node turns out to alias an output is dropped (it was only ever
 * added to an empty entry, and nothing has read it since).
 *
 * Holds the GIL throughout (it reads Python objects and calls back into
 * Python); no global state: everything lives in the `planner` of one call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "py_binding.h"
#include "py_cse.h"

/* The interned attribute names and values one call uses. */
enum {
    S_OP, S_TARGET, S_ARGS, S__ARGS, S_KWARGS, S__KWARGS, S_META, S_USERS, S__INPUT_NODES,
    S_ALL_INPUT_NODES, S_VAL, S_CUSTOM, S_STREAM, S_MEMPOOL, S_MEMPOOL_DEVICE, S_OUT, S_GET,
    S_UNTYPED_STORAGE, S__CDATA, S_PLACEHOLDER, S_OUTPUT, S_GET_ATTR, S_CALL_FUNCTION, S_COUNT
};
static const char *const string_values[S_COUNT] = {
    "op", "target", "args", "_args", "kwargs", "_kwargs", "meta", "users", "_input_nodes",
    "all_input_nodes", "val", "custom", "stream", "mempool", "mempool_device", "out", "get",
    "untyped_storage", "_cdata", "placeholder", "output", "get_attr", "call_function",
};

/* The fields of fxcut.torchrules.prepare.PlanConfig (read by name): the
 * bits node_facts answers with, the callbacks, the release's CSE rules and
 * the CSE key's own config. */
typedef struct {
    uint64_t never_merged, impure_dce, impure_cse, mutates, mutation_wrapper, same_for_target, same_for_op;
    PyObject *python_key, *bases_of, *backward_seeds, *free_unbacked_symbols, *symbol_cls, *tensor_cls, *key;
    int keys_stream, skips_impure;
} plan_config;

static const fxcut_config_field plan_fields[] = {
    FXCUT_FIELD(plan_config, never_merged, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, impure_dce, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, impure_cse, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, mutates, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, mutation_wrapper, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, same_for_target, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, same_for_op, FXCUT_FIELD_BITS),
    FXCUT_FIELD(plan_config, python_key, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(plan_config, bases_of, FXCUT_FIELD_CALLABLE_OR_NONE),
    FXCUT_FIELD(plan_config, backward_seeds, FXCUT_FIELD_CALLABLE_OR_NONE),
    FXCUT_FIELD(plan_config, free_unbacked_symbols, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(plan_config, symbol_cls, FXCUT_FIELD_TYPE),
    FXCUT_FIELD(plan_config, tensor_cls, FXCUT_FIELD_TYPE),
    FXCUT_FIELD(plan_config, keys_stream, FXCUT_FIELD_BOOL),
    FXCUT_FIELD(plan_config, skips_impure, FXCUT_FIELD_BOOL),
    FXCUT_FIELD(plan_config, key, FXCUT_FIELD_OBJECT),
};
#define PLAN_FIELDS (sizeof plan_fields / sizeof plan_fields[0])

/* A node's op, as far as this pass tells them apart. */
enum { OP_OTHER, OP_PLACEHOLDER, OP_OUTPUT, OP_GET_ATTR, OP_CALL_FUNCTION };

/* Per-target facts: open addressing on the target's address; holds each
 * target (so an address is never reused while cached). */
typedef struct {
    PyObject **keys;
    unsigned long long *bits;
    size_t cap, len;
} target_table;

/* Alias states of a node (storage shared with an output). */
enum { ALIAS_UNKNOWN, ALIAS_NO, ALIAS_YES };

typedef struct {
    PyObject *nodes; /* tuple, owned */
    Py_ssize_t n;
    PyObject *s[S_COUNT];
    plan_config cfg;
    cse_config key;             /* cfg.key's fields */
    PyObject *node_facts;
    PyObject *default_ctx;      /* (0, None, None) */
    PyObject *output_storages;  /* set, or NULL until first asked */
    Py_ssize_t output_index;    /* the last live node */
    target_table table;
    unsigned long long op_facts[OP_CALL_FUNCTION]; /* by op kind: see cached_facts */
    unsigned char op_known[OP_CALL_FUNCTION];
    unsigned char *known;       /* node i's facts computed */
    unsigned char *dead;
    unsigned char *alias;
    unsigned long long *facts;
    long *region;
    PyObject **key_of;          /* a table entry's key (owned) */
    PyObject **ctx_of;          /* a table entry's stream context (owned) */
    PyObject **target_of;       /* a table entry's target (owned) */
    unsigned char *kind;        /* node i's op kind + 1 (0: not read yet) */
    Py_hash_t *hash_arg;        /* node i's hash_arg */
    Py_ssize_t *env_size;       /* replacements planned when node i was visited */
    PyObject *rank;             /* dict: replaced node -> its place in replace */
    int hash_only;              /* the interpreter hashes tuples as py_cse.c assumes */
} planner;

static void table_free(target_table *t) {
    for (size_t i = 0; i < t->cap; i++) {
        Py_XDECREF(t->keys[i]);
    }
    free(t->keys);
    free(t->bits);
    t->keys = NULL;
    t->bits = NULL;
    t->cap = t->len = 0;
}

static size_t slot_of(PyObject *key, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)(x & (uint64_t)(cap - 1));
}

/* The bits cached for `target`, or 0 in *found. */
static unsigned long long table_get(const target_table *t, PyObject *target, int *found) {
    *found = 0;
    if (t->cap == 0) {
        return 0;
    }
    for (size_t i = slot_of(target, t->cap);; i = (i + 1) & (t->cap - 1)) {
        if (t->keys[i] == NULL) {
            return 0;
        }
        if (t->keys[i] == target) {
            *found = 1;
            return t->bits[i];
        }
    }
}

static int table_put(target_table *t, PyObject *target, unsigned long long bits) {
    if (2 * (t->len + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        target_table grown = {calloc(cap, sizeof(PyObject *)), calloc(cap, sizeof(unsigned long long)), cap, 0};
        if (grown.keys == NULL || grown.bits == NULL) {
            free(grown.keys);
            free(grown.bits);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (t->keys[i] != NULL) {
                size_t j = slot_of(t->keys[i], cap);
                while (grown.keys[j] != NULL) {
                    j = (j + 1) & (cap - 1);
                }
                grown.keys[j] = t->keys[i]; /* the reference moves */
                grown.bits[j] = t->bits[i];
                grown.len++;
            }
        }
        free(t->keys);
        free(t->bits);
        *t = grown;
    }
    size_t i = slot_of(target, t->cap);
    while (t->keys[i] != NULL && t->keys[i] != target) {
        i = (i + 1) & (t->cap - 1);
    }
    if (t->keys[i] == NULL) {
        Py_INCREF(target);
        t->keys[i] = target;
        t->len++;
    }
    t->bits[i] = bits;
    return 0;
}

static int str_is(PyObject *s, PyObject *interned) {
    return s == interned || (PyUnicode_Check(s) && PyUnicode_Compare(s, interned) == 0);
}

/* mapping.get(key) as a new reference (NULL with *missing when absent, NULL
 * without it on error): a dict or one of fx's immutable dicts directly,
 * anything else through its own get. */
static PyObject *mapping_get(const planner *p, PyObject *mapping, PyObject *key) {
    PyTypeObject *t = Py_TYPE(mapping);
    int direct = PyDict_CheckExact(mapping);
    for (Py_ssize_t i = 0; !direct && PyDict_Check(mapping) && i < PyTuple_GET_SIZE(p->key.dict_types); i++) {
        direct = PyTuple_GET_ITEM(p->key.dict_types, i) == (PyObject *)t;
    }
    if (direct) {
        PyObject *v = PyDict_GetItemWithError(mapping, key);
        if (v == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_CallMethodOneArg(mapping, p->s[S_GET], key);
}

/* node.args / node.kwargs: fx.Node's properties return their slots; a
 * subclass goes through its own property. */
static PyObject *node_field(const planner *p, PyObject *node, int slot, int property) {
    return PyObject_GetAttr(node, p->s[(PyObject *)Py_TYPE(node) == p->key.node_cls ? slot : property]);
}

static int op_kind(const planner *p, PyObject *node, int *kind) {
    PyObject *op = PyObject_GetAttr(node, p->s[S_OP]);
    if (op == NULL) {
        return -1;
    }
    *kind = str_is(op, p->s[S_CALL_FUNCTION]) ? OP_CALL_FUNCTION
            : str_is(op, p->s[S_PLACEHOLDER]) ? OP_PLACEHOLDER
            : str_is(op, p->s[S_OUTPUT])      ? OP_OUTPUT
            : str_is(op, p->s[S_GET_ATTR])    ? OP_GET_ATTR
                                              : OP_OTHER;
    Py_DECREF(op);
    return 0;
}

/* Node i's op kind, read once. */
static int kind_of(planner *p, Py_ssize_t i, int *kind) {
    if (p->kind[i] == 0) {
        int k;
        if (op_kind(p, PyTuple_GET_ITEM(p->nodes, i), &k) < 0) {
            return -1;
        }
        p->kind[i] = (unsigned char)(k + 1);
    }
    *kind = p->kind[i] - 1;
    return 0;
}

/* 1 when node.kwargs.get("out") is not None, 0 when it is, -1 on error. */
static int has_out(const planner *p, PyObject *node) {
    PyObject *kwargs = node_field(p, node, S__KWARGS, S_KWARGS);
    if (kwargs == NULL) {
        return -1;
    }
    PyObject *out = mapping_get(p, kwargs, p->s[S_OUT]);
    Py_DECREF(kwargs);
    if (out == NULL) {
        return -1;
    }
    int r = out != Py_None;
    Py_DECREF(out);
    return r;
}

static int ask_node_facts(const planner *p, PyObject *node, unsigned long long *bits) {
    PyObject *r = PyObject_CallOneArg(p->node_facts, node);
    if (r == NULL) {
        return -1;
    }
    if (!PyLong_Check(r)) {
        PyErr_Format(PyExc_TypeError, "prepare_plan: node_facts must return an int, got %.100s",
                     Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return -1;
    }
    *bits = PyLong_AsUnsignedLongLongMask(r);
    Py_DECREF(r);
    return (*bits == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* node_facts(node), memoised where its answer says it holds for every
 * node alike: a call_function's for its target (same_for_target), a
 * placeholder's, output's or get_attr's with a str target for its op
 * (same_for_op); never for a node with an `out` keyword.  -1 on error. */
static int cached_facts(planner *p, PyObject *node, int kind, PyObject *target, unsigned long long *bits) {
    int by_op = (kind == OP_PLACEHOLDER || kind == OP_OUTPUT || kind == OP_GET_ATTR) && PyUnicode_Check(target);
    int by_target = kind == OP_CALL_FUNCTION;
    int out = by_op || by_target ? has_out(p, node) : 1;
    if (out < 0) {
        return -1;
    }
    int found = 0;
    if (!out && by_op && p->op_known[kind]) {
        *bits = p->op_facts[kind];
        found = 1;
    } else if (!out && by_target) {
        *bits = table_get(&p->table, target, &found);
    }
    if (found) {
        return 0;
    }
    if (ask_node_facts(p, node, bits) < 0) {
        return -1;
    }
    if (!out && by_op && (*bits & p->cfg.same_for_op)) {
        p->op_facts[kind] = *bits;
        p->op_known[kind] = 1;
    } else if (!out && by_target && (*bits & p->cfg.same_for_target)) {
        return table_put(&p->table, target, *bits);
    }
    return 0;
}

/* Node i's facts (the config's bits), computed once. */
static int facts_of(planner *p, Py_ssize_t i, unsigned long long *result) {
    if (p->known[i]) {
        *result = p->facts[i];
        return 0;
    }
    int kind;
    if (kind_of(p, i, &kind) < 0) {
        return -1;
    }
    PyObject *node = PyTuple_GET_ITEM(p->nodes, i);
    PyObject *target = PyObject_GetAttr(node, p->s[S_TARGET]);
    if (target == NULL) {
        return -1;
    }
    Py_XSETREF(p->target_of[i], target); /* kept for the CSE table */
    Py_INCREF(target);
    unsigned long long bits = 0;
    int rc = cached_facts(p, node, kind, target, &bits);
    Py_DECREF(target);
    if (rc < 0) {
        return -1;
    }
    p->facts[i] = bits;
    p->known[i] = 1;
    *result = bits;
    return 0;
}

/* Graph.eliminate_dead_code's choice: p->dead[i], and the set `dead`. */
static int plan_dead(planner *p, PyObject *dead) {
    for (Py_ssize_t i = p->n - 1; i >= 0; i--) {
        PyObject *node = PyTuple_GET_ITEM(p->nodes, i);
        PyObject *users = PyObject_GetAttr(node, p->s[S_USERS]);
        if (users == NULL) {
            return -1;
        }
        int live = PyObject_IsTrue(users);
        if (live > 0 && PyDict_Check(users)) {
            /* fx keeps users in a dict: walked in place */
            Py_ssize_t pos = 0;
            PyObject *user, *ignored;
            live = 0;
            while (PyDict_Next(users, &pos, &user, &ignored)) {
                Py_INCREF(user);
                int is_dead = PySet_Contains(dead, user);
                Py_DECREF(user);
                if (is_dead <= 0) {
                    live = is_dead < 0 ? -1 : 1;
                    break;
                }
            }
        } else if (live > 0) {
            live = 0;
            PyObject *it = PyObject_GetIter(users);
            PyObject *user;
            while (it != NULL && (user = PyIter_Next(it)) != NULL) {
                int is_dead = PySet_Contains(dead, user);
                Py_DECREF(user);
                if (is_dead <= 0) {
                    live = is_dead < 0 ? -1 : 1;
                    break;
                }
            }
            if (it == NULL || PyErr_Occurred()) {
                live = -1;
            }
            Py_XDECREF(it);
        }
        Py_DECREF(users);
        if (live < 0) {
            return -1;
        }
        if (live) {
            continue;
        }
        unsigned long long bits;
        if (facts_of(p, i, &bits) < 0) {
            return -1;
        }
        if (!(bits & p->cfg.impure_dce)) {
            p->dead[i] = 1;
            if (PySet_Add(dead, node) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* The storage identity torch compares (`val.untyped_storage()._cdata`) of
 * a node whose meta["val"] is a tensor, a new reference; Py_None if it has
 * none; NULL on error. */
static PyObject *storage_key(const planner *p, PyObject *node) {
    PyObject *meta = PyObject_GetAttr(node, p->s[S_META]);
    if (meta == NULL) {
        return NULL;
    }
    PyObject *val = mapping_get(p, meta, p->s[S_VAL]);
    Py_DECREF(meta);
    if (val == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    int is_tensor = PyObject_IsInstance(val, p->cfg.tensor_cls);
    if (is_tensor <= 0) {
        Py_DECREF(val);
        if (is_tensor < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *storage = PyObject_CallMethodNoArgs(val, p->s[S_UNTYPED_STORAGE]);
    Py_DECREF(val);
    if (storage == NULL) {
        if (PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    result = PyObject_GetAttr(storage, p->s[S__CDATA]);
    Py_DECREF(storage);
    return result;
}

/* 1 if live node i's value shares a storage with one of the output's
 * inputs (torch's nodes_that_alias_outputs), 0 if not, -1 on error. */
static int aliases_output(planner *p, Py_ssize_t i) {
    if (p->alias[i] != ALIAS_UNKNOWN) {
        return p->alias[i] == ALIAS_YES;
    }
    if (p->output_storages == NULL) {
        PyObject *storages = PySet_New(NULL);
        PyObject *output = PyTuple_GET_ITEM(p->nodes, p->output_index);
        PyObject *inputs = storages ? PyObject_GetAttr(output, p->s[S_ALL_INPUT_NODES]) : NULL;
        PyObject *it = inputs ? PyObject_GetIter(inputs) : NULL;
        Py_XDECREF(inputs);
        PyObject *input;
        int ok = it != NULL;
        while (ok && (input = PyIter_Next(it)) != NULL) {
            PyObject *k = storage_key(p, input);
            Py_DECREF(input);
            ok = k != NULL && (k == Py_None || PySet_Add(storages, k) == 0);
            Py_XDECREF(k);
        }
        Py_XDECREF(it);
        if (!ok || PyErr_Occurred()) {
            Py_XDECREF(storages);
            return -1;
        }
        p->output_storages = storages;
    }
    int yes = 0;
    if (PySet_GET_SIZE(p->output_storages) > 0) {
        PyObject *k = storage_key(p, PyTuple_GET_ITEM(p->nodes, i));
        if (k == NULL) {
            return -1;
        }
        yes = k == Py_None ? 0 : PySet_Contains(p->output_storages, k);
        Py_DECREF(k);
        if (yes < 0) {
            return -1;
        }
    }
    p->alias[i] = yes ? ALIAS_YES : ALIAS_NO;
    return yes;
}

/* The live nodes' mutation regions (into `region_ids` and p->region), and
 * the mutable bases of functional wrappers (into `bases`, when given). */
static int plan_regions(planner *p, PyObject *region_ids, PyObject *bases) {
    long region = 0;
    for (Py_ssize_t i = 0; i < p->n; i++) {
        if (p->dead[i]) {
            continue;
        }
        PyObject *node = PyTuple_GET_ITEM(p->nodes, i);
        unsigned long long bits;
        if (facts_of(p, i, &bits) < 0) {
            return -1;
        }
        if (bits & p->cfg.mutates) {
            region++;
        }
        p->region[i] = region;
        PyObject *r = PyLong_FromLong(region);
        if (r == NULL || PyDict_SetItem(region_ids, node, r) < 0) {
            Py_XDECREF(r);
            return -1;
        }
        Py_DECREF(r);
        if (bases != NULL && (bits & p->cfg.mutation_wrapper)) {
            PyObject *found = PyObject_CallOneArg(p->cfg.bases_of, node);
            PyObject *updated = found ? PyObject_CallMethod(bases, "update", "O", found) : NULL;
            Py_XDECREF(found);
            if (updated == NULL) {
                return -1;
            }
            Py_DECREF(updated);
        }
    }
    return 0;
}

/* A stack of held references. */
typedef struct {
    PyObject **items;
    size_t len, cap;
} ref_stack;

static int stack_push(ref_stack *st, PyObject *item) {
    if (st->len == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 1024;
        PyObject **grown = realloc(st->items, cap * sizeof *grown);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        st->items = grown;
        st->cap = cap;
    }
    Py_INCREF(item);
    st->items[st->len++] = item;
    return 0;
}

/* Pushes every node of `inputs` (a dict's keys, or any iterable). */
static int push_all(ref_stack *st, PyObject *inputs) {
    if (PyDict_Check(inputs)) {
        Py_ssize_t pos = 0;
        PyObject *input, *ignored;
        while (PyDict_Next(inputs, &pos, &input, &ignored)) {
            if (stack_push(st, input) < 0) {
                return -1;
            }
        }
        return 0;
    }
    PyObject *it = PyObject_GetIter(inputs);
    PyObject *input;
    int ok = it != NULL;
    while (ok && (input = PyIter_Next(it)) != NULL) {
        ok = stack_push(st, input) == 0;
        Py_DECREF(input);
    }
    Py_XDECREF(it);
    return ok && !PyErr_Occurred() ? 0 : -1;
}

/* The backward outputs (backward_seeds(output)) and everything they are
 * computed from, as a new set. */
static PyObject *backward_ancestors(const planner *p) {
    PyObject *output = PyTuple_GET_ITEM(p->nodes, p->output_index);
    PyObject *seeds = PyObject_CallOneArg(p->cfg.backward_seeds, output);
    if (seeds == NULL) {
        return NULL;
    }
    ref_stack st = {NULL, 0, 0};
    PyObject *seen = PySet_New(NULL);
    int ok = seen != NULL && push_all(&st, seeds) == 0;
    Py_DECREF(seeds);
    while (ok && st.len > 0) {
        PyObject *node = st.items[--st.len];
        int known = PySet_Contains(seen, node);
        if (known == 0) {
            /* fx.Node's all_input_nodes lists its `_input_nodes` dict. */
            PyObject *inputs = PySet_Add(seen, node) < 0 ? NULL
                               : (PyObject *)Py_TYPE(node) == p->key.node_cls
                                   ? PyObject_GetAttr(node, p->s[S__INPUT_NODES])
                                   : PyObject_GetAttr(node, p->s[S_ALL_INPUT_NODES]);
            ok = inputs != NULL && push_all(&st, inputs) == 0;
            Py_XDECREF(inputs);
        }
        ok = ok && known >= 0;
        Py_DECREF(node);
    }
    while (st.len > 0) {
        Py_DECREF(st.items[--st.len]);
    }
    free(st.items);
    if (!ok) {
        Py_XDECREF(seen);
        return NULL;
    }
    return seen;
}

/* (custom.get("stream", 0), custom.get("mempool"), custom.get("mempool_device"))
 * of custom = meta.get("custom", {}), a new reference. */
static PyObject *stream_context(const planner *p, PyObject *meta) {
    PyObject *custom = mapping_get(p, meta, p->s[S_CUSTOM]);
    if (custom == NULL) {
        return NULL;
    }
    if (custom == Py_None) {
        int present = PyDict_Check(meta) ? PyDict_Contains(meta, p->s[S_CUSTOM]) : 1;
        if (present <= 0) {
            Py_DECREF(custom);
            if (present < 0) {
                return NULL;
            }
            Py_INCREF(p->default_ctx);
            return p->default_ctx;
        }
    }
    PyObject *zero = PyLong_FromLong(0);
    PyObject *stream = zero ? PyObject_CallMethodObjArgs(custom, p->s[S_GET], p->s[S_STREAM], zero, NULL) : NULL;
    PyObject *pool = stream ? PyObject_CallMethodOneArg(custom, p->s[S_GET], p->s[S_MEMPOOL]) : NULL;
    PyObject *device = pool ? PyObject_CallMethodOneArg(custom, p->s[S_GET], p->s[S_MEMPOOL_DEVICE]) : NULL;
    PyObject *ctx = device ? PyTuple_Pack(3, stream, pool, device) : NULL;
    Py_XDECREF(zero);
    Py_XDECREF(stream);
    Py_XDECREF(pool);
    Py_XDECREF(device);
    Py_DECREF(custom);
    return ctx;
}

/* Node i's full key (p->key_of[i]), built when first compared: with the
 * substitutions in force when the node was visited (its first env_size[i]
 * replacements), so the same key as built then. */
static int full_key(planner *p, Py_ssize_t i, PyObject *replace) {
    if (p->key_of[i] != NULL) {
        return 0;
    }
    PyObject *node = PyTuple_GET_ITEM(p->nodes, i);
    PyObject *args = node_field(p, node, S__ARGS, S_ARGS);
    PyObject *kwargs = args ? node_field(p, node, S__KWARGS, S_KWARGS) : NULL;
    PyObject *key = NULL;
    if (kwargs != NULL) {
        cse_config cfg = p->key;
        cfg.env = replace;
        cfg.rank = p->rank;
        cfg.limit = p->env_size[i];
        key = fxcut_cse_node_key(&cfg, args, kwargs);
    }
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (key == NULL) {
        return -1;
    }
    if (key == Py_None || PyLong_AsSsize_t(PyTuple_GET_ITEM(key, 4)) != p->hash_arg[i]) {
        Py_DECREF(key);
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_RuntimeError, "prepare_plan: node %zd's arguments changed while planning", i);
        }
        return -1;
    }
    p->key_of[i] = key;
    return 0;
}

/* Node i's stream context (p->ctx_of[i]), read when first compared. */
static int context_of(planner *p, Py_ssize_t i) {
    if (p->ctx_of[i] != NULL) {
        return 0;
    }
    PyObject *meta = PyObject_GetAttr(PyTuple_GET_ITEM(p->nodes, i), p->s[S_META]);
    if (meta == NULL) {
        return -1;
    }
    p->ctx_of[i] = stream_context(p, meta);
    Py_DECREF(meta);
    return p->ctx_of[i] == NULL ? -1 : 0;
}

/* 1 if entry j's token equals node i's (target, args, specs, kwargs,
 * context), 0 if not, -1 on error: item by item, as torch's dicts compare. */
static int same_token(planner *p, Py_ssize_t j, Py_ssize_t i, PyObject *replace) {
    int same = PyObject_RichCompareBool(p->target_of[j], p->target_of[i], Py_EQ);
    if (same <= 0) {
        return same;
    }
    if (full_key(p, j, replace) < 0 || full_key(p, i, replace) < 0) {
        return -1;
    }
    for (Py_ssize_t k = 0; k < 4; k++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(p->key_of[j], k), PyTuple_GET_ITEM(p->key_of[i], k), Py_EQ);
        if (eq <= 0) {
            return eq;
        }
    }
    if (!p->cfg.keys_stream) {
        return 1;
    }
    if (context_of(p, j) < 0 || context_of(p, i) < 0) {
        return -1;
    }
    return PyObject_RichCompareBool(p->ctx_of[j], p->ctx_of[i], Py_EQ);
}

/* 1 when the target compares by identity (no __eq__ of its own): hashed by
 * its address, not its (perhaps Python) __hash__. */
static int identity_equal(PyObject *target) {
    return Py_TYPE(target)->tp_richcompare == PyBaseObject_Type.tp_richcompare;
}

/* fx_graph_cse's table, hash_env: (target, extra_key, hash_arg) -> the
 * node (index) it holds, or -1 once emptied. */
typedef struct {
    Py_hash_t hash, hash_arg;
    PyObject *target; /* held by p->target_of of the entry's first node */
    int extra;
    Py_ssize_t node;
} table_entry;

typedef struct {
    table_entry *e;
    size_t cap, len;
} cse_table;

/* The entry of (target, extra, hash_arg), added (node -1) if absent. */
static table_entry *cse_table_find(cse_table *t, PyObject *target, int extra, Py_hash_t hash_arg) {
    int by_identity = identity_equal(target);
    Py_hash_t th = by_identity ? (Py_hash_t)slot_of(target, (size_t)1 << 62) : PyObject_Hash(target);
    if (th == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_hash_t hash = (Py_hash_t)((Py_uhash_t)hash_arg * 1000003u ^ (Py_uhash_t)th ^ (Py_uhash_t)extra);
    if (2 * (t->len + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        table_entry *grown = calloc(cap, sizeof *grown);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (t->e[i].target != NULL) {
                size_t j = (size_t)t->e[i].hash & (cap - 1);
                while (grown[j].target != NULL) {
                    j = (j + 1) & (cap - 1);
                }
                grown[j] = t->e[i];
            }
        }
        free(t->e);
        t->e = grown;
        t->cap = cap;
    }
    size_t mask = t->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        table_entry *e = &t->e[i];
        if (e->target == NULL) {
            e->hash = hash;
            e->hash_arg = hash_arg;
            e->target = target;
            e->extra = extra;
            e->node = -1;
            t->len++;
            return e;
        }
        if (e->hash == hash && e->hash_arg == hash_arg && e->extra == extra) {
            int eq = e->target == target ? 1 : by_identity ? 0 : PyObject_RichCompareBool(e->target, target, Py_EQ);
            if (eq < 0) {
                return NULL;
            }
            if (eq) {
                return e;
            }
        }
    }
}

/* Node i's hash_arg (p->hash_arg[i]; the key itself too where pytree must
 * build it), or 0 when the node is skipped (torch's unbacked-symbol test),
 * -1 on error. */
static int hash_of(planner *p, Py_ssize_t i, PyObject *node, PyObject *replace) {
    PyObject *meta = PyObject_GetAttr(node, p->s[S_META]);
    if (meta == NULL) {
        return -1;
    }
    PyObject *val = mapping_get(p, meta, p->s[S_VAL]);
    Py_DECREF(meta);
    int skip = val == NULL ? -1 : 0;
    if (val != NULL && val != Py_None && !PyObject_TypeCheck(val, (PyTypeObject *)p->cfg.tensor_cls)) {
        skip = PyObject_IsInstance(val, p->cfg.symbol_cls);
        if (skip > 0) {
            PyObject *free_symbols = PyObject_CallOneArg(p->cfg.free_unbacked_symbols, val);
            skip = free_symbols ? PyObject_IsTrue(free_symbols) : -1;
            Py_XDECREF(free_symbols);
        }
    }
    Py_XDECREF(val);
    if (skip != 0) {
        return skip < 0 ? -1 : 0;
    }
    PyObject *args = node_field(p, node, S__ARGS, S_ARGS);
    PyObject *kwargs = args ? node_field(p, node, S__KWARGS, S_KWARGS) : NULL;
    int rc = -1;
    if (kwargs != NULL) {
        rc = p->hash_only ? fxcut_cse_node_hash(&p->key, args, kwargs, &p->hash_arg[i]) : 0;
        if (rc == 0) { /* the whole key now: pytree's, or every node's on an unknown interpreter */
            PyObject *key = fxcut_cse_node_key(&p->key, args, kwargs);
            if (key == Py_None) {
                Py_DECREF(key);
                key = PyObject_CallFunctionObjArgs(p->cfg.python_key, args, kwargs, replace, NULL);
            }
            if (key != NULL && !(PyTuple_CheckExact(key) && PyTuple_GET_SIZE(key) == 5 &&
                                 PyLong_Check(PyTuple_GET_ITEM(key, 4)))) {
                PyErr_SetString(PyExc_TypeError, "prepare_plan: python_key must return a 5-tuple ending in an int");
                Py_CLEAR(key);
            }
            if (key != NULL) {
                p->hash_arg[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, 4));
                if (p->hash_arg[i] == -1 && PyErr_Occurred()) {
                    Py_CLEAR(key);
                }
            }
            p->key_of[i] = key;
            rc = key == NULL ? -1 : 1;
        }
    }
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return rc;
}

/* After a failure to key node i: 1 (the error cleared) if the node aliases
 * an output (torch never keys it), else -1 with the original error (or the
 * storage test's). */
static int aliases_after_error(planner *p, Py_ssize_t i) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *saved = PyErr_GetRaisedException();
    int yes = aliases_output(p, i);
    if (yes == 0) {
        PyErr_SetRaisedException(saved);
        return -1;
    }
    Py_XDECREF(saved);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int yes = aliases_output(p, i);
    if (yes == 0) {
        PyErr_Restore(type, value, tb);
        return -1;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
#endif
    return yes == 1 ? 1 : -1;
}

/* What node i does to the table: 0 nothing, 1 enters it, 2 merges into
 * entry *j; -1 on error. */
static int cse_step(planner *p, Py_ssize_t i, table_entry *e, PyObject *replace, Py_ssize_t *j) {
    *j = e->node;
    if (*j >= 0) {
        int yes = aliases_output(p, *j);
        if (yes < 0) {
            return -1;
        }
        if (yes == 1) {
            *j = -1; /* torch never entered it: the entry was empty */
        }
    }
    if (*j < 0) {
        return 1;
    }
    int yes = aliases_output(p, i);
    if (yes != 0) {
        return yes < 0 ? -1 : 0;
    }
    int eq = same_token(p, *j, i, replace);
    if (eq <= 0) {
        return eq;
    }
    return p->region[i] == p->region[*j] ? 2 : 1;
}

/* May fx_graph_cse merge live node i?  Not a placeholder, output or
 * get_attr, not an op never merged (nor an impure one when those are
 * skipped), not one of `bases`.  1 yes, 0 no, -1 on error. */
static int cse_candidate(planner *p, Py_ssize_t i, PyObject *node, PyObject *bases) {
    int kind;
    unsigned long long bits;
    if (kind_of(p, i, &kind) < 0) {
        return -1;
    }
    if (kind == OP_PLACEHOLDER || kind == OP_OUTPUT || kind == OP_GET_ATTR) {
        return 0;
    }
    if (facts_of(p, i, &bits) < 0) {
        return -1;
    }
    if ((bits & p->cfg.never_merged) || (p->cfg.skips_impure && (bits & p->cfg.impure_cse))) {
        return 0;
    }
    if (bases != NULL) {
        int is_base = PySet_Contains(bases, node);
        if (is_base != 0) {
            return is_base < 0 ? -1 : 0;
        }
    }
    return 1;
}

/* Node `node` merges into node j: replace[node] = nodes[j], and its rank
 * is the number of replacements before it. */
static int merge_into(planner *p, PyObject *node, Py_ssize_t j, PyObject *replace) {
    PyObject *when = PyLong_FromSsize_t(PyDict_GET_SIZE(replace));
    int failed = when == NULL || PyDict_SetItem(p->rank, node, when) < 0 ||
                 PyDict_SetItem(replace, node, PyTuple_GET_ITEM(p->nodes, j)) < 0;
    Py_XDECREF(when);
    return failed ? -1 : 0;
}

/* fx_graph_cse's step at candidate node i: its key looked up in the table
 * (the backward's nodes apart from the forward's when `backward` is
 * given), then entered or merged.  0, or -1 on error. */
static int cse_node(planner *p, cse_table *table, Py_ssize_t i, PyObject *node,
                    PyObject *replace, PyObject *backward) {
    p->env_size[i] = PyDict_GET_SIZE(replace);
    int have = hash_of(p, i, node, replace);
    if (have <= 0) {
        /* torch never keys a node that aliases an output: no error then. */
        return have == 0 || aliases_after_error(p, i) == 1 ? 0 : -1;
    }
    PyObject *target = p->target_of[i]; /* read by facts_of */
    int extra = 0;
    if (backward != NULL) {
        int in = PySet_Contains(backward, node);
        if (in < 0) {
            return -1;
        }
        extra = in ? 2 : 1;
    }
    table_entry *e = cse_table_find(table, target, extra, p->hash_arg[i]);
    if (e == NULL) {
        return -1;
    }
    Py_ssize_t j;
    int step = cse_step(p, i, e, replace, &j);
    if (step < 0) {
        return -1;
    }
    if (step == 1) {
        e->node = i;
    } else if (step == 2) {
        return merge_into(p, node, j, replace);
    }
    return 0;
}

/* fx_graph_cse's choices over the live nodes, into `replace`. */
static int plan_cse(planner *p, PyObject *replace, PyObject *bases, PyObject *backward) {
    cse_table table = {NULL, 0, 0};
    int rc = 0;
    for (Py_ssize_t i = 0; i < p->n && rc == 0; i++) {
        if (p->dead[i]) {
            continue;
        }
        PyObject *node = PyTuple_GET_ITEM(p->nodes, i);
        int candidate = cse_candidate(p, i, node, bases);
        if (candidate != 0) {
            rc = candidate < 0 ? -1 : cse_node(p, &table, i, node, replace, backward);
        }
    }
    free(table.e);
    return rc;
}

static void planner_free(planner *p) {
    for (Py_ssize_t i = 0; p->key_of != NULL && i < p->n; i++) {
        Py_XDECREF(p->key_of[i]);
        Py_XDECREF(p->ctx_of[i]);
        Py_XDECREF(p->target_of[i]);
    }
    free(p->key_of);
    free(p->ctx_of);
    free(p->target_of);
    free(p->kind);
    free(p->hash_arg);
    free(p->env_size);
    Py_XDECREF(p->rank);
    free(p->known);
    free(p->dead);
    free(p->alias);
    free(p->facts);
    free(p->region);
    table_free(&p->table);
    Py_XDECREF(p->output_storages);
    Py_XDECREF(p->default_ctx);
    for (int k = 0; k < S_COUNT; k++) {
        Py_XDECREF(p->s[k]);
    }
    Py_XDECREF(p->nodes);
    fxcut_cse_release_config(&p->key);
    fxcut_release_config(plan_fields, PLAN_FIELDS, &p->cfg);
}

/* The PlanConfig and, in its field `key`, the CSE key's config, read by
 * name into *p; -1 with a TypeError naming the field. */
static int read_config(planner *p, PyObject *config) {
    if (fxcut_read_config(config, "prepare_plan", plan_fields, PLAN_FIELDS, &p->cfg) < 0) {
        return -1;
    }
    return fxcut_cse_read_config(p->cfg.key, "prepare_plan config.key", &p->key);
}

/* The planner's private copy of the node list, its interned names and its
 * per-node tables; -1 with an exception. */
static int planner_open(planner *p, PyObject *node_list) {
    p->nodes = PyList_AsTuple(node_list); /* callbacks cannot change what is walked */
    if (p->nodes == NULL) {
        return -1;
    }
    p->n = PyTuple_GET_SIZE(p->nodes);
    for (int k = 0; k < S_COUNT; k++) {
        p->s[k] = PyUnicode_InternFromString(string_values[k]);
        if (p->s[k] == NULL) {
            return -1;
        }
    }
    size_t n = (size_t)p->n + 1;
    p->known = calloc(n, 1);
    p->dead = calloc(n, 1);
    p->alias = calloc(n, 1);
    p->facts = calloc(n, sizeof *p->facts);
    p->region = calloc(n, sizeof *p->region);
    p->key_of = calloc(n, sizeof *p->key_of);
    p->ctx_of = calloc(n, sizeof *p->ctx_of);
    p->target_of = calloc(n, sizeof *p->target_of);
    p->kind = calloc(n, 1);
    p->hash_arg = calloc(n, sizeof *p->hash_arg);
    p->env_size = calloc(n, sizeof *p->env_size);
    if (!p->known || !p->dead || !p->alias || !p->facts || !p->region || !p->key_of || !p->ctx_of ||
        !p->target_of || !p->kind || !p->hash_arg || !p->env_size) {
        PyErr_NoMemory();
        return -1;
    }
    p->hash_only = fxcut_cse_hashes_like_tuples();
    if (p->hash_only < 0) {
        return -1;
    }
    p->rank = PyDict_New();
    p->default_ctx = p->rank ? Py_BuildValue("(iOO)", 0, Py_None, Py_None) : NULL;
    return p->default_ctx == NULL ? -1 : 0;
}

/* fx_graph_cse's plan over the live nodes: the duplicates into `replace`,
 * and the live nodes' mutation regions returned (a new dict); NULL with an
 * exception (an IndexError when no node is live). */
static PyObject *plan_all_cse(planner *p, PyObject *replace) {
    p->output_index = -1;
    for (Py_ssize_t i = p->n - 1; i >= 0 && p->output_index < 0; i--) {
        if (!p->dead[i]) {
            p->output_index = i;
        }
    }
    if (p->output_index < 0) {
        PyErr_SetString(PyExc_IndexError, "prepare_plan: no live node (the output node comes last)");
        return NULL;
    }
    PyObject *region_ids = PyDict_New();
    PyObject *bases = NULL, *backward = NULL;
    int ok = region_ids != NULL;
    if (ok && p->cfg.bases_of != Py_None) {
        bases = PySet_New(NULL);
        ok = bases != NULL;
    }
    ok = ok && plan_regions(p, region_ids, bases) == 0;
    if (ok && p->cfg.backward_seeds != Py_None) {
        backward = backward_ancestors(p);
        ok = backward != NULL;
    }
    ok = ok && plan_cse(p, replace, bases, backward) == 0;
    Py_XDECREF(bases);
    Py_XDECREF(backward);
    if (!ok) {
        Py_CLEAR(region_ids);
    }
    return region_ids;
}

const char fxcut_py_prepare_plan_doc[] =
    "prepare_plan($module, nodes, node_facts, config, /, *, eliminate_dead, cse)\n--\n\n"
    "-> (dead, replace, region_ids): torch's dead-code elimination (when ``eliminate_dead``) and\n"
    "fx_graph_cse (when ``cse``; region_ids None otherwise) over ``nodes`` (a list of fx nodes,\n"
    "the output last), planned: the dead nodes (a set), each duplicate's representative (a dict,\n"
    "in graph order) and the live nodes' mutation regions (a dict).  ``node_facts(node)`` -> the\n"
    "node's facts as the bits the config names (never_merged, impure_dce, impure_cse, mutates,\n"
    "mutation_wrapper, same_for_target, same_for_op).  ``config``: a fxcut.torchrules.prepare.PlanConfig, its\n"
    "fields read by name (the bits, python_key, bases_of, backward_seeds, free_unbacked_symbols,\n"
    "symbol_cls, tensor_cls, keys_stream, skips_impure, and key: the CseKeyConfig).";

PyObject *fxcut_py_prepare_plan(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"", "", "", "eliminate_dead", "cse", NULL};
    PyObject *node_list, *config;
    int eliminate_dead, cse;
    planner p;
    memset(&p, 0, sizeof p);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO$pp:prepare_plan", keywords, &node_list, &p.node_facts,
                                     &config, &eliminate_dead, &cse)) {
        return NULL;
    }
    if (!PyList_Check(node_list)) {
        PyErr_Format(PyExc_TypeError, "prepare_plan: nodes must be a list of fx nodes, got %.100s",
                     Py_TYPE(node_list)->tp_name);
        return NULL;
    }
    if (!PyCallable_Check(p.node_facts)) {
        PyErr_SetString(PyExc_TypeError, "prepare_plan: node_facts must be callable");
        return NULL;
    }
    PyObject *dead = NULL, *replace = NULL, *region_ids = NULL, *result = NULL;
    if (read_config(&p, config) < 0 || planner_open(&p, node_list) < 0) {
        goto done;
    }
    dead = PySet_New(NULL);
    replace = PyDict_New();
    if (dead == NULL || replace == NULL) {
        goto done;
    }
    p.key.env = replace;
    if (eliminate_dead && plan_dead(&p, dead) < 0) {
        goto done;
    }
    if (cse) {
        region_ids = plan_all_cse(&p, replace);
    } else {
        region_ids = Py_None;
        Py_INCREF(region_ids);
    }
    if (region_ids != NULL) {
        result = PyTuple_Pack(3, dead, replace, region_ids);
    }
done:
    Py_XDECREF(dead);
    Py_XDECREF(replace);
    Py_XDECREF(region_ids);
    planner_free(&p);
    return result;
}
