/*
 * cse_key: the key torch's fx_graph_cse computes for one node, read from its
 * args and kwargs in one C pass (fxcut.prepare.plan_cse calls it per node).
 *
 * For each of args and kwargs: the pytree leaves in order, each substituted
 * as torch's CSE substitutes them (a node by its representative in `env`,
 * a SymInt/SymFloat/SymBool by its `.node`, a float or complex through
 * `by_bits` when given), and the structure as a key that compares the way
 * pytree TreeSpecs do: (str(type), context, children) for a container,
 * `leaf` for a leaf.  Plus hash_arg, the hash torch keys its table on.
 *
 * Only fx's containers (tuple, list, dict, immutable_list, immutable_dict,
 * exactly those types) are walked here; a value of any other type is a leaf
 * when it is one of `known_leaves` or `tree_is_leaf(value)` says so, and
 * otherwise (a namedtuple, a user-registered pytree node) the call returns
 * None and the caller flattens the node through pytree itself.
 *
 * Holds the GIL throughout (it reads Python objects); no global state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "py_binding.h"
#include "py_cse.h"


/* 1 when `value` is certainly not an instance of a symbolic type nor a
 * node (an exact int, float, bool, str, complex or None): isinstance needs
 * no asking. */
static int plain_scalar(PyObject *value) {
    return value == Py_None || PyLong_CheckExact(value) || PyBool_Check(value) ||
           PyFloat_CheckExact(value) || PyUnicode_CheckExact(value) || PyComplex_CheckExact(value);
}

/* 1: a leaf, 0: not one (a container this walk does not know), -1: error. */
static int known_leaf(const cse_config *cfg, PyObject *value) {
    int known = PySet_Contains(cfg->known_leaves, (PyObject *)Py_TYPE(value));
    if (known != 0) {
        return known;
    }
    PyObject *r = PyObject_CallOneArg(cfg->tree_is_leaf, value);
    if (r == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(r);
    Py_DECREF(r);
    return truth;
}

/* The substituted leaf (new reference), or NULL with an exception. */
static PyObject *substitute(const cse_config *cfg, PyObject *value) {
    PyObject *out = value;
    int plain = plain_scalar(value);
    int is_node = 0, is_sym = 0;
    if (!plain) {
        is_node = (PyObject *)Py_TYPE(value) == cfg->node_cls ? 1 : PyObject_IsInstance(value, cfg->node_cls);
        if (is_node < 0) {
            return NULL;
        }
    }
    if (is_node) {
        PyObject *mapped = PyDict_GetItemWithError(cfg->env, value);
        if (mapped == NULL && PyErr_Occurred()) {
            return NULL;
        }
        if (mapped != NULL && cfg->rank != NULL) {
            PyObject *when = PyDict_GetItemWithError(cfg->rank, value);
            if (when == NULL && PyErr_Occurred()) {
                return NULL;
            }
            Py_ssize_t at = when ? PyLong_AsSsize_t(when) : PY_SSIZE_T_MAX;
            if (at == -1 && PyErr_Occurred()) {
                return NULL;
            }
            if (at >= cfg->limit) {
                mapped = NULL; /* env got it later */
            }
        }
        if (mapped != NULL) {
            out = mapped;
        }
    }
    if (!plain && (PyObject *)Py_TYPE(value) != cfg->node_cls) {
        is_sym = PyObject_IsInstance(value, cfg->sym_types);
        if (is_sym < 0) {
            return NULL;
        }
    }
    if (is_sym) {
        return PyObject_GetAttrString(value, "node");
    }
    if (cfg->by_bits != Py_None &&
        (PyFloat_CheckExact(out) || PyComplex_CheckExact(out))) {
        return PyObject_CallOneArg(cfg->by_bits, out);
    }
    Py_INCREF(out);
    return out;
}

/* 1 if `cls` is one of the (exact) dict-like container types. */
static int is_dict_type(const cse_config *cfg, PyObject *cls) {
    Py_ssize_t n = PyTuple_GET_SIZE(cfg->dict_types);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(cfg->dict_types, i) == cls) {
            return 1;
        }
    }
    return 0;
}

static PyObject *flatten(const cse_config *cfg, PyObject *value, PyObject *leaves);

/* flatten() of a value that is no container of fx's: a leaf's key, its
 * substitute appended to `leaves`; Py_None when it is no known leaf. */
static PyObject *flatten_leaf(const cse_config *cfg, PyObject *value, PyObject *leaves) {
    int leaf = plain_scalar(value) ? 1 : known_leaf(cfg, value);
    if (leaf < 0) {
        return NULL;
    }
    if (!leaf) {
        Py_RETURN_NONE;
    }
    PyObject *sub = substitute(cfg, value);
    if (sub == NULL) {
        return NULL;
    }
    int rc = PyList_Append(leaves, sub);
    Py_DECREF(sub);
    if (rc < 0) {
        return NULL;
    }
    Py_INCREF(cfg->leaf_key);
    return cfg->leaf_key;
}

/* A container's context (a dict's keys in order, else None) and items (a
 * dict's values as a list, else a tuple), new references; -1 on error with
 * what was made in *context / *items for the caller to release. */
static int container_parts(const cse_config *cfg, PyObject *value, PyObject **context,
                           PyObject **items) {
    if (is_dict_type(cfg, (PyObject *)Py_TYPE(value))) {
        *context = PySequence_List(value);                   /* the keys, in order */
        *items = *context ? PyDict_Values(value) : NULL;
    } else {
        Py_INCREF(Py_None);
        *context = Py_None;
        if (PyTuple_Check(value)) {                         /* immutable: walked in place */
            Py_INCREF(value);
            *items = value;
        } else {
            *items = PySequence_Tuple(value);
        }
    }
    return *items == NULL ? -1 : 0;
}

/* The keys of a container's items (a tuple or a list), as a tuple (new
 * reference); Py_None (new reference) as soon as one is not fx's, NULL
 * with an exception on error. */
static PyObject *flatten_items(const cse_config *cfg, PyObject *items, PyObject *leaves) {
    Py_ssize_t n = PyTuple_Check(items) ? PyTuple_GET_SIZE(items) : PyList_GET_SIZE(items);
    PyObject *children = PyTuple_New(n);
    if (children == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_Check(items) ? PyTuple_GET_ITEM(items, i) : PyList_GET_ITEM(items, i);
        PyObject *child = flatten(cfg, item, leaves);
        if (child == NULL || child == Py_None) {             /* None: not fx's, give up */
            Py_DECREF(children);
            return child;
        }
        PyTuple_SET_ITEM(children, i, child);
    }
    return children;
}

/* The structure key of `value` (new reference), its leaves appended to
 * `leaves`; Py_None (new reference) when a container is not fx's, NULL with
 * an exception on error. */
static PyObject *flatten(const cse_config *cfg, PyObject *value, PyObject *leaves) {
    PyObject *name = NULL;
    if (!plain_scalar(value)) {
        name = PyDict_GetItemWithError(cfg->containers, (PyObject *)Py_TYPE(value));
        if (name == NULL && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (name == NULL) {
        return flatten_leaf(cfg, value, leaves);
    }
    if (Py_EnterRecursiveCall(" in fxcut's CSE key")) {
        return NULL;
    }
    PyObject *context = NULL, *items = NULL, *result = NULL;
    Py_INCREF(name); /* a leaf test may drop the containers dict's entry */
    if (container_parts(cfg, value, &context, &items) == 0) {
        PyObject *children = flatten_items(cfg, items, leaves);
        if (children == NULL || children == Py_None) {
            result = children;
        } else {
            result = PyTuple_Pack(3, name, context, children);
            Py_DECREF(children);
        }
    }
    Py_LeaveRecursiveCall();
    Py_DECREF(name);
    Py_XDECREF(context);
    Py_XDECREF(items);
    return result;
}

/* tuple((a, type(a)) for a in leaves), new reference. */
static PyObject *typed_pairs(PyObject *leaves) {
    Py_ssize_t n = PyTuple_GET_SIZE(leaves);
    PyObject *pairs = PyTuple_New(n);
    if (pairs == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(leaves, i);
        PyObject *pair = PyTuple_Pack(2, a, (PyObject *)Py_TYPE(a));
        if (pair == NULL) {
            Py_DECREF(pairs);
            return NULL;
        }
        PyTuple_SET_ITEM(pairs, i, pair);
    }
    return pairs;
}

/* (leaves tuple, structure key) of one value, or Py_None; new references. */
static int flatten_value(const cse_config *cfg, PyObject *value, PyObject **leaves_out,
                         PyObject **spec_out) {
    PyObject *leaves = PyList_New(0);
    if (leaves == NULL) {
        return -1;
    }
    PyObject *spec = flatten(cfg, value, leaves);
    if (spec == NULL || spec == Py_None) {
        Py_DECREF(leaves);
        *spec_out = spec;
        *leaves_out = NULL;
        return spec == NULL ? -1 : 0;
    }
    *leaves_out = PyList_AsTuple(leaves);
    Py_DECREF(leaves);
    if (*leaves_out == NULL) {
        Py_DECREF(spec);
        return -1;
    }
    *spec_out = spec;
    return 0;
}

/* CPython's tuple hash (xxHash-based, Objects/tupleobject.c), fed one item
 * hash at a time: hash_arg without building its tuples.
 * fxcut_cse_hashes_like_tuples checks it against the interpreter's. */
#if SIZEOF_PY_UHASH_T > 4
#define XXPRIME_1 ((Py_uhash_t)11400714785074694791ULL)
#define XXPRIME_2 ((Py_uhash_t)14029467366897019727ULL)
#define XXPRIME_5 ((Py_uhash_t)2870177450012600261ULL)
#define XXROTATE(x) (((x) << 31) | ((x) >> 33))
#else
#define XXPRIME_1 ((Py_uhash_t)2654435761UL)
#define XXPRIME_2 ((Py_uhash_t)2246822519UL)
#define XXPRIME_5 ((Py_uhash_t)374761393UL)
#define XXROTATE(x) (((x) << 13) | ((x) >> 19))
#endif

typedef struct {
    Py_uhash_t acc;
    Py_ssize_t len;
} tuple_hash;

static void th_init(tuple_hash *h) {
    h->acc = XXPRIME_5;
    h->len = 0;
}

static void th_add(tuple_hash *h, Py_hash_t item) {
    h->acc += (Py_uhash_t)item * XXPRIME_2;
    h->acc = XXROTATE(h->acc);
    h->acc *= XXPRIME_1;
    h->len++;
}

static Py_hash_t th_done(const tuple_hash *h) {
    Py_uhash_t acc = h->acc + ((Py_uhash_t)h->len ^ (XXPRIME_5 ^ 3527539UL));
    return acc == (Py_uhash_t)-1 ? 1546275796 : (Py_hash_t)acc;
}

/* Adds hash((leaf, type(leaf))) of the substituted leaf to h. */
static int hash_leaf(const cse_config *cfg, PyObject *value, tuple_hash *h) {
    PyObject *sub = substitute(cfg, value);
    if (sub == NULL) {
        return -1;
    }
    Py_hash_t a = PyObject_Hash(sub);
    Py_hash_t t = a == -1 ? -1 : PyObject_Hash((PyObject *)Py_TYPE(sub));
    Py_DECREF(sub);
    if (t == -1) {
        return -1;
    }
    tuple_hash pair;
    th_init(&pair);
    th_add(&pair, a);
    th_add(&pair, t);
    th_add(h, th_done(&pair));
    return 0;
}

/* Adds the (leaf, type) hashes of value's leaves to h, as flatten walks
 * them: 1, 0 for a container not fx's, -1 on error. */
static int hash_walk(const cse_config *cfg, PyObject *value, tuple_hash *h) {
    PyObject *name = NULL;
    int plain = plain_scalar(value);
    if (!plain) {
        name = PyDict_GetItemWithError(cfg->containers, (PyObject *)Py_TYPE(value));
        if (name == NULL && PyErr_Occurred()) {
            return -1;
        }
    }
    if (name == NULL) {
        int leaf = plain ? 1 : known_leaf(cfg, value);
        if (leaf <= 0) {
            return leaf;
        }
        return hash_leaf(cfg, value, h) < 0 ? -1 : 1;
    }
    if (Py_EnterRecursiveCall(" in fxcut's CSE key")) {
        return -1;
    }
    /* Walked in place, as Python's for loop walks them (no copy made). */
    int rc = 1;
    if (is_dict_type(cfg, (PyObject *)Py_TYPE(value))) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (rc == 1 && PyDict_Next(value, &pos, &key, &item)) {
            Py_INCREF(item);
            rc = hash_walk(cfg, item, h);
            Py_DECREF(item);
        }
    } else if (PyTuple_Check(value)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value) && rc == 1; i++) {
            rc = hash_walk(cfg, PyTuple_GET_ITEM(value, i), h);
        }
    } else if (PyList_Check(value)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value) && rc == 1; i++) {
            PyObject *item = PyList_GET_ITEM(value, i);
            Py_INCREF(item);
            rc = hash_walk(cfg, item, h);
            Py_DECREF(item);
        }
    } else {
        PyObject *items = PySequence_Tuple(value);
        if (items == NULL) {
            rc = -1;
        }
        for (Py_ssize_t i = 0; items != NULL && i < PyTuple_GET_SIZE(items) && rc == 1; i++) {
            rc = hash_walk(cfg, PyTuple_GET_ITEM(items, i), h);
        }
        Py_XDECREF(items);
    }
    Py_LeaveRecursiveCall();
    return rc;
}

int fxcut_cse_node_hash(const cse_config *cfg, PyObject *node_args, PyObject *node_kwargs, Py_hash_t *hash_arg) {
    tuple_hash a, k, both;
    th_init(&a);
    th_init(&k);
    int rc = hash_walk(cfg, node_args, &a);
    if (rc == 1) {
        rc = hash_walk(cfg, node_kwargs, &k);
    }
    if (rc == 1) {
        th_init(&both);
        th_add(&both, th_done(&a));
        th_add(&both, th_done(&k));
        *hash_arg = th_done(&both);
    }
    return rc;
}

int fxcut_cse_hashes_like_tuples(void) {
    PyObject *x = PyUnicode_FromString("x");
    PyObject *sample = x ? Py_BuildValue("((O(OO)(OO))())", Py_None, (PyObject *)&PyLong_Type, Py_None, x,
                                         (PyObject *)&PyUnicode_Type) : NULL;
    Py_hash_t want = sample ? PyObject_Hash(sample) : -1;
    Py_hash_t hx = want != -1 ? PyObject_Hash(x) : -1;
    Py_XDECREF(sample);
    Py_XDECREF(x);
    if (hx == -1) {
        return -1;
    }
    /* ((None, (int, None), ("x", str)), ()) item by item. */
    tuple_hash outer, first, p1, p2, empty;
    th_init(&p1);
    th_add(&p1, PyObject_Hash((PyObject *)&PyLong_Type));
    th_add(&p1, PyObject_Hash(Py_None));
    th_init(&p2);
    th_add(&p2, hx);
    th_add(&p2, PyObject_Hash((PyObject *)&PyUnicode_Type));
    th_init(&first);
    th_add(&first, PyObject_Hash(Py_None));
    th_add(&first, th_done(&p1));
    th_add(&first, th_done(&p2));
    th_init(&empty);
    th_init(&outer);
    th_add(&outer, th_done(&first));
    th_add(&outer, th_done(&empty));
    return th_done(&outer) == want;
}

static const fxcut_config_field cse_fields[] = {
    FXCUT_FIELD(cse_config, node_cls, FXCUT_FIELD_TYPE),
    FXCUT_FIELD(cse_config, sym_types, FXCUT_FIELD_TUPLE),
    FXCUT_FIELD(cse_config, containers, FXCUT_FIELD_DICT),
    FXCUT_FIELD(cse_config, dict_types, FXCUT_FIELD_TUPLE),
    FXCUT_FIELD(cse_config, known_leaves, FXCUT_FIELD_FROZENSET),
    FXCUT_FIELD(cse_config, tree_is_leaf, FXCUT_FIELD_CALLABLE),
    FXCUT_FIELD(cse_config, by_bits, FXCUT_FIELD_CALLABLE_OR_NONE),
    FXCUT_FIELD(cse_config, leaf_key, FXCUT_FIELD_OBJECT),
};
#define CSE_FIELDS (sizeof cse_fields / sizeof cse_fields[0])

int fxcut_cse_read_config(PyObject *config, const char *what, cse_config *cfg) {
    cfg->env = NULL;
    cfg->rank = NULL;
    cfg->limit = 0;
    return fxcut_read_config(config, what, cse_fields, CSE_FIELDS, cfg);
}

void fxcut_cse_release_config(cse_config *cfg) {
    fxcut_release_config(cse_fields, CSE_FIELDS, cfg);
}

PyObject *fxcut_cse_node_key(const cse_config *cfg, PyObject *node_args, PyObject *node_kwargs) {
    PyObject *a_leaves = NULL, *a_spec = NULL, *k_leaves = NULL, *k_spec = NULL;
    PyObject *a_pairs = NULL, *k_pairs = NULL, *both = NULL, *result = NULL;
    if (flatten_value(cfg, node_args, &a_leaves, &a_spec) < 0) {
        return NULL;
    }
    if (a_spec == Py_None) {
        return a_spec;
    }
    if (flatten_value(cfg, node_kwargs, &k_leaves, &k_spec) < 0) {
        goto done;
    }
    if (k_spec == Py_None) {
        result = k_spec;
        k_spec = NULL;
        goto done;
    }
    a_pairs = typed_pairs(a_leaves);
    k_pairs = a_pairs ? typed_pairs(k_leaves) : NULL;
    both = k_pairs ? PyTuple_Pack(2, a_pairs, k_pairs) : NULL;
    if (both == NULL) {
        goto done;
    }
    Py_hash_t h = PyObject_Hash(both);
    if (h == -1 && PyErr_Occurred()) {
        goto done;
    }
    PyObject *hash_obj = PyLong_FromSsize_t(h);
    if (hash_obj == NULL) {
        goto done;
    }
    result = PyTuple_Pack(5, a_leaves, a_spec, k_leaves, k_spec, hash_obj);
    Py_DECREF(hash_obj);
done:
    Py_XDECREF(a_leaves);
    Py_XDECREF(a_spec);
    Py_XDECREF(k_leaves);
    Py_XDECREF(k_spec);
    Py_XDECREF(a_pairs);
    Py_XDECREF(k_pairs);
    Py_XDECREF(both);
    return result;
}

const char fxcut_py_cse_key_doc[] =
    "cse_key($module, args, kwargs, env, config)\n--\n\n"
    "-> (args, args_spec, kwargs, kwargs_spec, hash_arg) or None: fx_graph_cse's key of one node: each of\n"
    "``args`` and ``kwargs`` flattened as pytree does (leaves substituted: nodes through ``env``, symbolic\n"
    "values by their ``.node``, floats and complexes through config.by_bits unless None), its structure\n"
    "as a key that compares like a TreeSpec, and hash_arg = hash of the (leaf, type(leaf)) pairs.\n"
    "``config``: a fxcut.torchrules.prepare.CseKeyConfig (node_cls, sym_types, containers, dict_types,\n"
    "known_leaves, tree_is_leaf, by_bits, leaf_key, read by name).  None where a value holds a pytree\n"
    "container other than fx's.";

PyObject *fxcut_py_cse_key(PyObject *module, PyObject *args, PyObject *kwargs) {
    (void)module;
    static char *keywords[] = {"args", "kwargs", "env", "config", NULL};
    PyObject *node_args, *node_kwargs, *env, *config_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!O:cse_key", keywords, &node_args,
                                     &node_kwargs, &PyDict_Type, &env, &config_obj)) {
        return NULL;
    }
    cse_config cfg;
    memset(&cfg, 0, sizeof cfg);
    PyObject *key = NULL;
    if (fxcut_cse_read_config(config_obj, "cse_key", &cfg) == 0) {
        cfg.env = env;
        key = fxcut_cse_node_key(&cfg, node_args, node_kwargs);
    }
    fxcut_cse_release_config(&cfg);
    return key;
}
