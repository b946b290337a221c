/* py_maxflow.c -- the binding of fxcut_min_cut: fxcut._C.min_cut. */
#include "py_binding.h"
#include "maxflow.h"

const char fxcut_py_min_cut_doc[] =
"min_cut($module, n_vertices, tail, head, cap, source, sink,\n"
"        algorithm=MAXFLOW_DEFAULT)\n--\n\n"
"Minimum source-sink cut of the network with n_vertices vertices and the\n"
"edges tail[e] -> head[e] of capacity cap[e] (tail, head: int32 buffers;\n"
"cap: int64 buffer, CAP_INF = infinite; all three copied first).  Returns\n"
"(cut_value, sink_side): sink_side (bytes) is 1 exactly for the vertices\n"
"that can reach the sink in the residual network of a maximum flow\n"
"(networkx's minimum_cut partition[1]); cut_value (int) is exact.\n"
"algorithm: MAXFLOW_DEFAULT, MAXFLOW_PUSH_RELABEL or MAXFLOW_DINIC.\n"
"Raises InfiniteCutError when source and sink are joined by infinite\n"
"edges, IndexError for a vertex out of range, ValueError for other\n"
"malformed input.";

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

/* The private copies of the edge arrays; the solver frees them (without
 * the GIL) as soon as its residual network is built. */
typedef struct {
    void *tail, *head, *cap;
} edge_copies;

static void free_edges(void *arg)
{
    edge_copies *e = arg;
    free(e->tail);
    free(e->head);
    free(e->cap);
    e->tail = e->head = e->cap = NULL;
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

    edge_copies edges = {NULL, NULL, NULL};
    Py_ssize_t m, m_head, m_cap;
    if (fxcut_copy_buffer(tail_obj, "tail", 4, -1, 0, &edges.tail, &m) < 0 ||
        fxcut_copy_buffer(head_obj, "head", 4, m, 0, &edges.head, &m_head) < 0 ||
        fxcut_copy_buffer(cap_obj, "cap", 8, m, 0, &edges.cap, &m_cap) < 0) {
        free_edges(&edges);
        return NULL;
    }
    PyObject *side = PyBytes_FromStringAndSize(NULL, n);
    if (side == NULL) {
        free_edges(&edges);
        return NULL;
    }
    fxcut_network net = {(int32_t)n, (int64_t)m, edges.tail, edges.head,
                         edges.cap};
    const fxcut_min_cut_hooks hooks = {free_edges, NULL, &edges};
    fxcut_u128 value = {0, 0};
    fxcut_error err = {0, -1, {0}};
    int rc;
    uint8_t *sink_side = (uint8_t *)PyBytes_AS_STRING(side);
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_min_cut_hooked(&net, source32, sink32, algorithm, &value,
                              sink_side, &hooks, &err);
    Py_END_ALLOW_THREADS
    free_edges(&edges); /* already freed by the hook: a no-op */
    if (rc != FXCUT_OK) {
        Py_DECREF(side);
        return fxcut_raise(module, &err, NULL, NULL);
    }
    PyObject *value_obj = fxcut_pylong_from_u128(value.hi, value.lo);
    if (value_obj == NULL) {
        Py_DECREF(side);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, value_obj, side);
    Py_DECREF(value_obj);
    Py_DECREF(side);
    return result;
}
