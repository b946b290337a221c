/*
 * py_binding.h -- helpers shared by the binding files (module.c and the
 * py_*.c files that add entry points).  Only binding files include Python.
 */
#ifndef FXCUT_PY_BINDING_H
#define FXCUT_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "fxcut.h"

/* The buffers behind one fxcut_graph; release with fxcut_release_graph. */
typedef struct {
    fxcut_graph graph;
    Py_buffer views[10];
    int held[10];
} fxcut_graph_buffers;

/* Read-only, C-contiguous, flat buffer of integers of `itemsize` bytes with
 * `expected_len` entries (-1: any).  Sets TypeError / ValueError naming
 * `name` and returns -1 on mismatch. */
int fxcut_get_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                     Py_ssize_t expected_len, Py_buffer *view);

/* Loads the attributes kind, flags, tag, ac_graph_id, nbytes, arg_ptr,
 * arg_idx, in_ptr, in_idx, outputs of obj.  Checks lengths only; the core's
 * fxcut_graph_validate checks the contents. */
int fxcut_load_graph(PyObject *obj, fxcut_graph_buffers *gb);
void fxcut_release_graph(fxcut_graph_buffers *gb);

/* Raises the Python exception for err (with attribute `node`); returns
 * NULL. */
PyObject *fxcut_raise(PyObject *module, const fxcut_error *err);

/* Entry points defined in other binding files. */
PyObject *fxcut_py_min_cut(PyObject *module, PyObject *args,
                           PyObject *kwargs);
extern const char fxcut_py_min_cut_doc[];
PyObject *fxcut_py_partition_decide(PyObject *module, PyObject *args);
extern const char fxcut_py_partition_decide_doc[];
PyObject *fxcut_py_budget_plan(PyObject *module, PyObject *args);
extern const char fxcut_py_budget_plan_doc[];
PyObject *fxcut_py_knapsack(PyObject *module, PyObject *args);
extern const char fxcut_py_knapsack_doc[];

#define FXCUT_EXTRA_METHODS                                                   \
    {"min_cut", (PyCFunction)(void (*)(void))fxcut_py_min_cut,                \
     METH_VARARGS | METH_KEYWORDS, fxcut_py_min_cut_doc},                     \
    {"partition_decide", (PyCFunction)fxcut_py_partition_decide,              \
     METH_VARARGS, fxcut_py_partition_decide_doc},                        \
    {"budget_plan", (PyCFunction)fxcut_py_budget_plan, METH_VARARGS,       \
     fxcut_py_budget_plan_doc},                                             \
    {"knapsack", (PyCFunction)fxcut_py_knapsack, METH_VARARGS,             \
     fxcut_py_knapsack_doc},

#endif /* FXCUT_PY_BINDING_H */
