/* py_maxflow.c -- the binding of fxcut_min_cut: fxcut._C.min_cut. */
#include "py_binding.h"
#include "maxflow.h"

const char fxcut_py_min_cut_doc[] =
"min_cut(n_vertices, tail, head, cap, source, sink, algorithm=0)\n"
"    -> (cut_value: int, sink_side: bytes)\n\n"
"Minimum source-sink cut of the network with n_vertices vertices and the\n"
"edges tail[e] -> head[e] of capacity cap[e] (tail, head: int32 buffers;\n"
"cap: int64 buffer, -1 = infinite).  sink_side[v] is 1 exactly for the\n"
"vertices that can reach the sink in the residual network of a maximum\n"
"flow (networkx's minimum_cut partition[1]); cut_value is exact.\n"
"algorithm: 0 default, 1 push-relabel, 2 Dinic.  Raises InfiniteCutError\n"
"when source and sink are joined by infinite edges, IndexError for a\n"
"vertex out of range, ValueError for other malformed input.";

/* A Python-side integer that must fit an int32 vertex index before the
 * core sees it; out of range, the core's own message. */
static int vertex_arg(Py_ssize_t value, Py_ssize_t n, const char *name,
                      int32_t *out)
{
    if (value < 0 || value >= n) {
        PyErr_Format(PyExc_IndexError,
                     "%s value (%zd) must be between 0 and %zd", name, value,
                     n - 1);
        return -1;
    }
    *out = (int32_t)value;
    return 0;
}

/* hi * 2^64 + lo as a Python int. */
static PyObject *u128_to_pylong(fxcut_u128 x)
{
    if (x.hi == 0)
        return PyLong_FromUnsignedLongLong(x.lo);
    PyObject *hi = PyLong_FromUnsignedLongLong(x.hi);
    PyObject *lo = PyLong_FromUnsignedLongLong(x.lo);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *shifted = NULL, *result = NULL;
    if (hi != NULL && lo != NULL && shift != NULL)
        shifted = PyNumber_Lshift(hi, shift);
    if (shifted != NULL)
        result = PyNumber_Or(shifted, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    return result;
}

PyObject *fxcut_py_min_cut(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"n_vertices", "tail", "head", "cap", "source",
                               "sink", "algorithm", NULL};
    Py_ssize_t n, source, sink;
    PyObject *tail_obj, *head_obj, *cap_obj;
    int algorithm = FXCUT_MAXFLOW_DEFAULT;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nOOOnn|i:min_cut",
                                     keywords, &n, &tail_obj, &head_obj,
                                     &cap_obj, &source, &sink, &algorithm))
        return NULL;
    if (n <= 0 || n >= INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "n_vertices must be between 1 and %d, got %zd",
                     (int)(INT32_MAX - 1), n);
        return NULL;
    }
    int32_t source32, sink32;
    if (vertex_arg(source, n, "source", &source32) < 0 ||
        vertex_arg(sink, n, "sink", &sink32) < 0)
        return NULL;

    Py_buffer tail, head, cap;
    if (fxcut_get_buffer(tail_obj, "tail", 4, -1, &tail) < 0)
        return NULL;
    Py_ssize_t m = tail.len / 4;
    if (fxcut_get_buffer(head_obj, "head", 4, m, &head) < 0) {
        PyBuffer_Release(&tail);
        return NULL;
    }
    if (fxcut_get_buffer(cap_obj, "cap", 8, m, &cap) < 0) {
        PyBuffer_Release(&head);
        PyBuffer_Release(&tail);
        return NULL;
    }
    PyObject *side = PyBytes_FromStringAndSize(NULL, n);
    if (side == NULL) {
        PyBuffer_Release(&cap);
        PyBuffer_Release(&head);
        PyBuffer_Release(&tail);
        return NULL;
    }

    fxcut_network net = {(int32_t)n, (int64_t)m, tail.buf, head.buf,
                         cap.buf};
    fxcut_u128 value = {0, 0};
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_min_cut(&net, source32, sink32, algorithm, &value,
                       (uint8_t *)PyBytes_AS_STRING(side), &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&cap);
    PyBuffer_Release(&head);
    PyBuffer_Release(&tail);
    if (rc != FXCUT_OK) {
        Py_DECREF(side);
        return fxcut_raise(module, &err);
    }
    PyObject *value_obj = u128_to_pylong(value);
    if (value_obj == NULL) {
        Py_DECREF(side);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, value_obj, side);
    Py_DECREF(value_obj);
    Py_DECREF(side);
    return result;
}
