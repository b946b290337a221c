/*
 * py_knapsack.c -- binding of fxcut_knapsack_solve.
 *
 * knapsack(memory, runtime, max_memory, solver) -> (save, order, value, peak)
 *   memory, runtime: sequences of n numbers (ints are converted to float64
 *     as Python converts them, correctly rounded)
 *   max_memory: a number; solver: a name of knapsack.h's solvers
 *   save: n bytes, 1 for an item that stays saved; order: int32 bytes, the
 *   order the solver reports its lists in; value: float, the runtime torch's
 *   solver reports; peak: the solver's peak heap use in bytes.
 */
#include "py_binding.h"
#include "knapsack.h"

#include <stdlib.h>
#include <string.h>

const char fxcut_py_knapsack_doc[] =
"knapsack($module, memory, runtime, max_memory, solver, /)\n--\n\n"
"One of torch's knapsack solvers ('dp', 'greedy',\n"
"'dp_knapsack_sliding_hirschberg') or fxcut's 'dp_lean' (KNAPSACK_SOLVERS).\n"
"memory, runtime: sequences of n numbers (copied first; ints convert to\n"
"float64 as Python converts them).  Returns a KnapsackResult: save\n"
"(memoryview 'B', 1 for an item that stays saved), order (memoryview 'i',\n"
"the order the solver reports its lists in), value (the runtime torch's\n"
"solver reports), peak_bytes (the solver's peak heap use).";

static PyStructSequence_Field knapsack_fields[] = {
    {"save", "1 for an item that stays saved (uint8)"},
    {"order", "the items in the order the solver lists them (int32)"},
    {"value", "the runtime torch's solver reports"},
    {"peak_bytes", "the solver's peak heap use"},
    {NULL, NULL}
};

PyStructSequence_Desc fxcut_knapsack_desc = {
    "fxcut._C.KnapsackResult", "What a knapsack solver chose.",
    knapsack_fields, 4
};

/* The floats of a tuple (a private copy of the caller's sequence: an
 * item's __float__ can neither shrink it nor free the item) into
 * out[0 .. n). */
static int read_floats(PyObject *tuple, const char *name, Py_ssize_t n,
                       double *out)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, k);
        double v = PyFloat_AsDouble(item);
        if (v == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError))
                fxcut_raise_from_current(PyExc_TypeError,
                                         "%s[%zd] must be a number, got "
                                         "%.100s", name, k,
                                         Py_TYPE(item)->tp_name);
            else if (PyErr_ExceptionMatches(PyExc_OverflowError))
                fxcut_raise_from_current(PyExc_OverflowError,
                                         "%s[%zd] (%.100s) is too large for "
                                         "a float64", name, k,
                                         Py_TYPE(item)->tp_name);
            return -1;
        }
        out[k] = v;
    }
    return 0;
}

/* A tuple copy of a sequence; the error names it. */
static PyObject *as_tuple(PyObject *obj, const char *name)
{
    PyObject *t = PySequence_Tuple(obj);
    if (t == NULL && PyErr_ExceptionMatches(PyExc_TypeError))
        fxcut_raise_from_current(PyExc_TypeError,
                                 "%s must be a sequence of numbers, got "
                                 "%.100s", name, Py_TYPE(obj)->tp_name);
    return t;
}

/* The solver named name_obj (fxcut_knapsack_solver_name); -1 with a
 * ValueError listing the known ones. */
static int solver_of(PyObject *name_obj)
{
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (name == NULL)
        return -1;
    int solver = -1;
    for (int s = 0; s < FXCUT_KNAPSACK_NUM_SOLVERS; s++)
        if (strcmp(name, fxcut_knapsack_solver_name(s)) == 0)
            solver = s;
    if (solver < 0)
        PyErr_Format(PyExc_ValueError,
                     "unknown knapsack solver %R; fxcut's C solvers are 'dp', "
                     "'dp_lean', 'greedy' and 'dp_knapsack_sliding_hirschberg'",
                     name_obj);
    return solver;
}

/* The KnapsackResult of a solve of n items; NULL with an exception. */
static PyObject *build_result(PyObject *module, const fxcut_knapsack_result *r,
                              Py_ssize_t n)
{
    PyObject *result = PyStructSequence_New(fxcut_state(module)->knapsack_type);
    if (result == NULL)
        return NULL;
    PyObject *items[4] = {fxcut_typed_view(r->save, n, "B", 1),
                          fxcut_typed_view(r->order, n, "i", 4),
                          PyFloat_FromDouble(r->value),
                          PyLong_FromSize_t(r->peak_bytes)};
    for (int k = 0; k < 4; k++) {
        if (items[k] == NULL)
            Py_CLEAR(result);
        if (result != NULL)
            PyStructSequence_SetItem(result, k, items[k]);
        else
            Py_XDECREF(items[k]);
    }
    return result;
}

/* Solves the items of the tuples mem and rt (checked: same length, numbers)
 * without the GIL; the KnapsackResult, or NULL with an exception. */
static PyObject *solve(PyObject *module, PyObject *mem, PyObject *rt,
                       double max_memory, int solver)
{
    PyObject *result = NULL;
    double *values = NULL;
    uint8_t *save = NULL;
    int32_t *order = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(mem);
    if (PyTuple_GET_SIZE(rt) != n) {
        PyErr_Format(PyExc_ValueError,
                     "memory has %zd items but runtime has %zd", n,
                     PyTuple_GET_SIZE(rt));
        goto out;
    }
    if (n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd items are more than int32", n);
        goto out;
    }
    values = malloc(2 * ((size_t)n + 1) * sizeof *values);
    save = malloc((size_t)n + 1);
    order = malloc(((size_t)n + 1) * sizeof *order);
    if (values == NULL || save == NULL || order == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (read_floats(mem, "memory", n, values) < 0 ||
        read_floats(rt, "runtime", n, values + n + 1) < 0)
        goto out;
    fxcut_knapsack_problem p = {(int32_t)n, values, values + n + 1, max_memory};
    fxcut_knapsack_result r = {save, order, 0.0, 0};
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_knapsack_solve(&p, solver, &r, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK)
        fxcut_raise(module, &err, NULL, NULL);
    else
        result = build_result(module, &r, n);
out:
    free(values);
    free(save);
    free(order);
    return result;
}

PyObject *fxcut_py_knapsack(PyObject *module, PyObject *args,
                            PyObject *kwargs)
{
    static char *keywords[] = {"", "", "", "", NULL};
    PyObject *mem_obj, *rt_obj, *name_obj;
    double max_memory;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOdU:knapsack", keywords,
                                     &mem_obj, &rt_obj, &max_memory,
                                     &name_obj))
        return NULL;
    int solver = solver_of(name_obj);
    if (solver < 0)
        return NULL;
    /* tuple copies: the items' __float__ may change the caller's lists */
    PyObject *mem = as_tuple(mem_obj, "memory");
    if (mem == NULL)
        return NULL;
    PyObject *rt = as_tuple(rt_obj, "runtime");
    if (rt == NULL) {
        Py_DECREF(mem);
        return NULL;
    }
    PyObject *result = solve(module, mem, rt, max_memory, solver);
    Py_DECREF(mem);
    Py_DECREF(rt);
    return result;
}
