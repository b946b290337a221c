/*
 * py_cse.h -- the CSE key of one node (py_cse.c), shared by the cse_key
 * entry point and prepare_plan (py_prepare.c).  Binding files only.
 */
#ifndef FXCUT_PY_CSE_H
#define FXCUT_PY_CSE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A CSE key's settings: the fields of fxcut.torchrules.prepare.CseKeyConfig
 * (owned references, read by fxcut_cse_read_config), then what the caller
 * sets per use (borrowed). */
typedef struct {
    PyObject *node_cls;     /* torch.fx.Node */
    PyObject *sym_types;    /* tuple of SymInt, SymFloat, SymBool */
    PyObject *containers;   /* dict: exact container type -> str(type) */
    PyObject *dict_types;   /* tuple of the dict-like container types (exact) */
    PyObject *known_leaves; /* frozenset of leaf types */
    PyObject *tree_is_leaf; /* pytree.tree_is_leaf */
    PyObject *by_bits;      /* callable or None */
    PyObject *leaf_key;     /* the leaf's structure key */
    PyObject *env;          /* dict: node -> representative */
    PyObject *rank;         /* NULL, or dict: node -> when env got it (0, 1, ...) */
    Py_ssize_t limit;       /* with rank: only env's first `limit` entries apply */
} cse_config;

/* Fills *cfg from a CseKeyConfig (its fields by name); env and rank are
 * left NULL.  -1 with a TypeError naming `what` and the field.  Release
 * with fxcut_cse_release_config either way (*cfg must start zeroed). */
int fxcut_cse_read_config(PyObject *config, const char *what, cse_config *cfg);
void fxcut_cse_release_config(cse_config *cfg);

/* (args, args_spec, kwargs, kwargs_spec, hash_arg) of one node, a new
 * reference; Py_None (new reference) when a value holds a pytree container
 * other than fx's; NULL with an exception on error. */
PyObject *fxcut_cse_node_key(const cse_config *cfg, PyObject *args, PyObject *kwargs);

/* hash_arg of that key without building it: 1 and *hash_arg, 0 where the
 * key needs pytree (as above), -1 with an exception (the errors the key
 * would raise).  Valid only where fxcut_cse_hashes_like_tuples says so. */
int fxcut_cse_node_hash(const cse_config *cfg, PyObject *args, PyObject *kwargs, Py_hash_t *hash_arg);

/* 1 if this interpreter hashes tuples as fxcut_cse_node_hash computes it,
 * 0 if not, -1 on error. */
int fxcut_cse_hashes_like_tuples(void);

#endif /* FXCUT_PY_CSE_H */
