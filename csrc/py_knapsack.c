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
    "knapsack(memory, runtime, max_memory, solver) -> (save, order, value, "
    "peak_bytes)\n\nOne of torch's knapsack solvers (dp, greedy, "
    "dp_knapsack_sliding_hirschberg) or fxcut's dp_lean; see "
    "csrc/py_knapsack.c.";

/* The floats of a sequence into out[0 .. n). */
static int read_floats(PyObject *seq, const char *name, Py_ssize_t n,
                       double *out)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        double v = PyFloat_AsDouble(item);
        if (v == -1.0 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be a number, got %.100s",
                         name, k, Py_TYPE(item)->tp_name);
            return -1;
        }
        out[k] = v;
    }
    return 0;
}

PyObject *fxcut_py_knapsack(PyObject *module, PyObject *args)
{
    PyObject *mem_obj, *rt_obj;
    double max_memory;
    const char *name;
    if (!PyArg_ParseTuple(args, "OOds:knapsack", &mem_obj, &rt_obj,
                          &max_memory, &name))
        return NULL;
    int solver = -1;
    for (int s = 0; s < FXCUT_KNAPSACK_NUM_SOLVERS; s++)
        if (strcmp(name, fxcut_knapsack_solver_name(s)) == 0)
            solver = s;
    if (solver < 0) {
        PyErr_Format(PyExc_ValueError,
                     "unknown knapsack solver %R; fxcut's C solvers are 'dp', "
                     "'dp_lean', 'greedy' and 'dp_knapsack_sliding_hirschberg'",
                     PyTuple_GET_ITEM(args, 3));
        return NULL;
    }
    PyObject *mem = PySequence_Fast(mem_obj, "memory must be a sequence");
    if (mem == NULL)
        return NULL;
    PyObject *rt = PySequence_Fast(rt_obj, "runtime must be a sequence");
    if (rt == NULL) {
        Py_DECREF(mem);
        return NULL;
    }
    PyObject *result = NULL, *save = NULL, *order = NULL;
    double *values = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(mem);
    if (PySequence_Fast_GET_SIZE(rt) != n) {
        PyErr_Format(PyExc_ValueError,
                     "memory has %zd items but runtime has %zd", n,
                     PySequence_Fast_GET_SIZE(rt));
        goto out;
    }
    if (n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd items are more than int32", n);
        goto out;
    }
    values = malloc(2 * ((size_t)n + 1) * sizeof *values);
    save = PyBytes_FromStringAndSize(NULL, n);
    order = PyBytes_FromStringAndSize(NULL, n * 4);
    if (values == NULL || save == NULL || order == NULL) {
        if (values == NULL)
            PyErr_NoMemory();
        goto out;
    }
    if (read_floats(mem, "memory", n, values) < 0 ||
        read_floats(rt, "runtime", n, values + n + 1) < 0)
        goto out;
    fxcut_knapsack_problem p = {(int32_t)n, values, values + n + 1, max_memory};
    fxcut_knapsack_result r = {(uint8_t *)PyBytes_AS_STRING(save),
                               (int32_t *)(void *)PyBytes_AS_STRING(order),
                               0.0, 0};
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_knapsack_solve(&p, solver, &r, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        fxcut_raise(module, &err);
        goto out;
    }
    result = Py_BuildValue("(OOdn)", save, order, r.value,
                           (Py_ssize_t)r.peak_bytes);
out:
    free(values);
    Py_XDECREF(save);
    Py_XDECREF(order);
    Py_DECREF(mem);
    Py_DECREF(rt);
    return result;
}
