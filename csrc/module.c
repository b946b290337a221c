/*
 * module.c -- the CPython binding of fxcut's core: buffers in, results out.
 *
 * Each entry point parses its arguments, takes read-only buffers of the
 * arrays (any object with the buffer protocol: array.array, numpy, bytes),
 * checks their item sizes and lengths, runs the core with the GIL released,
 * and turns an fxcut_error into a Python exception whose message names the
 * node index.  The exception carries that index as its `node` attribute.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "fxcut.h"
#include "py_binding.h"

#include <string.h>

/* ---- module state ------------------------------------------------------ */

typedef struct {
    PyObject *infinite_cut_error; /* fxcut._C.InfiniteCutError */
} module_state;

static module_state *get_state(PyObject *module)
{
    return (module_state *)PyModule_GetState(module);
}

/* ---- errors ------------------------------------------------------------ */

PyObject *fxcut_raise(PyObject *module, const fxcut_error *err)
{
    PyObject *type;
    switch (err->code) {
    case FXCUT_E_INDEX:
        type = PyExc_IndexError;
        break;
    case FXCUT_E_NOMEM:
        return PyErr_NoMemory();
    case FXCUT_E_UNBOUNDED:
        type = get_state(module)->infinite_cut_error;
        break;
    case FXCUT_E_OVERFLOW:
        type = PyExc_OverflowError;
        break;
    case FXCUT_E_SIZE:
        type = PyExc_RuntimeError;
        break;
    case FXCUT_E_UNSUPPORTED:
        type = PyExc_NotImplementedError;
        break;
    default:
        type = PyExc_ValueError;
        break;
    }
    PyObject *exc = PyObject_CallFunction(type, "s", err->message);
    if (exc == NULL)
        return NULL;
    PyObject *node = PyLong_FromLongLong((long long)err->node);
    if (node == NULL || PyObject_SetAttrString(exc, "node", node) < 0) {
        Py_XDECREF(node);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(node);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ---- buffers ----------------------------------------------------------- */

int fxcut_get_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                     Py_ssize_t expected_len, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        /* An object with the buffer protocol fails here only when its data
         * is not contiguous (a strided numpy view): say that, not that it
         * lacks the protocol. */
        if (PyObject_CheckBuffer(obj))
            PyErr_Format(PyExc_TypeError,
                         "%s must be a C-contiguous buffer, got a "
                         "non-contiguous %.100s", name, Py_TYPE(obj)->tp_name);
        else
            PyErr_Format(PyExc_TypeError,
                         "%s must support the buffer protocol (array.array, "
                         "numpy array), got %.100s", name,
                         Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *fmt = view->format != NULL ? view->format : "B";
    if (*fmt == '<' || *fmt == '=' || *fmt == '@' || *fmt == '!')
        fmt++;
    /* *fmt == '\0' must be refused before strchr, which finds the
     * terminator, and before fmt[1] is read past it. */
    if (view->ndim > 1 || view->itemsize != itemsize || *fmt == '\0' ||
        strchr("bBhHiIlLqQ", *fmt) == NULL || fmt[1] != '\0') {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a flat array of %zd-byte integers, got "
                     "format '%s' with item size %zd", name, itemsize,
                     view->format != NULL ? view->format : "B",
                     view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    Py_ssize_t len = view->len / itemsize;
    if (expected_len >= 0 && len != expected_len) {
        PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd",
                     name, len, expected_len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The graph array as attributes of one Python object (fxcut.GraphArrays). */
enum { GB_KIND, GB_FLAGS, GB_TAG, GB_AC, GB_NBYTES, GB_ARG_PTR, GB_ARG_IDX,
       GB_IN_PTR, GB_IN_IDX, GB_OUTPUTS, GB_COUNT };

struct graph_field {
    const char *name;
    Py_ssize_t itemsize;
};

static const struct graph_field graph_fields[GB_COUNT] = {
    {"kind", 1},    {"flags", 4},   {"tag", 1},     {"ac_graph_id", 4},
    {"nbytes", 8},  {"arg_ptr", 4}, {"arg_idx", 4}, {"in_ptr", 4},
    {"in_idx", 4},  {"outputs", 4},
};

void fxcut_release_graph(fxcut_graph_buffers *gb)
{
    for (int k = 0; k < GB_COUNT; k++)
        if (gb->held[k]) {
            PyBuffer_Release(&gb->views[k]);
            gb->held[k] = 0;
        }
}

int fxcut_load_graph(PyObject *obj, fxcut_graph_buffers *gb)
{
    memset(gb, 0, sizeof *gb);
    Py_ssize_t n = -1;
    for (int k = 0; k < GB_COUNT; k++) {
        const struct graph_field *f = &graph_fields[k];
        PyObject *attr = PyObject_GetAttrString(obj, f->name);
        if (attr == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "graph arrays object has no attribute '%s'", f->name);
            fxcut_release_graph(gb);
            return -1;
        }
        Py_ssize_t expected = -1;
        if (k == GB_FLAGS || k == GB_TAG || k == GB_AC || k == GB_NBYTES)
            expected = n;
        else if (k == GB_ARG_PTR || k == GB_IN_PTR)
            expected = n + 1;
        int rc = fxcut_get_buffer(attr, f->name, f->itemsize, expected,
                                  &gb->views[k]);
        Py_DECREF(attr);
        if (rc < 0) {
            fxcut_release_graph(gb);
            return -1;
        }
        gb->held[k] = 1;
        if (k == GB_KIND) {
            n = gb->views[k].len;
            if (n > INT32_MAX - 1) {
                PyErr_Format(PyExc_ValueError,
                             "graph has %zd nodes, more than int32 indexes",
                             n);
                fxcut_release_graph(gb);
                return -1;
            }
        }
    }
    fxcut_graph *g = &gb->graph;
    g->n = (int32_t)n;
    g->kind = gb->views[GB_KIND].buf;
    g->flags = gb->views[GB_FLAGS].buf;
    g->tag = gb->views[GB_TAG].buf;
    g->ac_graph_id = gb->views[GB_AC].buf;
    g->nbytes = gb->views[GB_NBYTES].buf;
    g->arg_ptr = gb->views[GB_ARG_PTR].buf;
    g->arg_idx = gb->views[GB_ARG_IDX].buf;
    g->in_ptr = gb->views[GB_IN_PTR].buf;
    g->in_idx = gb->views[GB_IN_IDX].buf;
    g->outputs = gb->views[GB_OUTPUTS].buf;
    g->n_outputs = (int32_t)(gb->views[GB_OUTPUTS].len / 4);
    /* The CSR edge counts must match the index arrays before the core reads
     * ptr[n] as a bound. */
    Py_ssize_t n_args = gb->views[GB_ARG_IDX].len / 4;
    Py_ssize_t n_ins = gb->views[GB_IN_IDX].len / 4;
    if (g->arg_ptr[n] != n_args || g->in_ptr[n] != n_ins) {
        PyErr_Format(PyExc_ValueError,
                     "CSR ends do not match: arg_ptr[%zd] = %d with %zd "
                     "arg_idx entries, in_ptr[%zd] = %d with %zd in_idx "
                     "entries", n, (int)g->arg_ptr[n], n_args, n,
                     (int)g->in_ptr[n], n_ins);
        fxcut_release_graph(gb);
        return -1;
    }
    return 0;
}

/* ---- entry points ------------------------------------------------------ */

PyDoc_STRVAR(validate_doc,
"validate(graph) -> None\n\n"
"Check a graph array; raise ValueError / IndexError naming the first\n"
"malformed entry.");

static PyObject *py_validate(PyObject *module, PyObject *graph_obj)
{
    fxcut_graph_buffers gb;
    if (fxcut_load_graph(graph_obj, &gb) < 0)
        return NULL;
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_graph_validate(&gb.graph, &err);
    Py_END_ALLOW_THREADS
    fxcut_release_graph(&gb);
    if (rc != FXCUT_OK)
        return fxcut_raise(module, &err);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(param_alias_walk_doc,
"param_alias_walk(graph, params) -> bytes\n\n"
"DeepCompile's ZeRO-3 walk.  params: int32 buffer of parameter placeholder\n"
"node indices.  Returns one byte per node, 1 where the node must be\n"
"recomputed.");

static PyObject *py_param_alias_walk(PyObject *module, PyObject *args)
{
    PyObject *graph_obj, *params_obj;
    if (!PyArg_ParseTuple(args, "OO:param_alias_walk", &graph_obj,
                          &params_obj))
        return NULL;
    fxcut_graph_buffers gb;
    if (fxcut_load_graph(graph_obj, &gb) < 0)
        return NULL;
    Py_buffer params;
    if (fxcut_get_buffer(params_obj, "params", 4, -1, &params) < 0) {
        fxcut_release_graph(&gb);
        return NULL;
    }
    if (params.len / 4 > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "params must have fewer than 2^31 entries");
        PyBuffer_Release(&params);
        fxcut_release_graph(&gb);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, gb.graph.n);
    if (out == NULL) {
        PyBuffer_Release(&params);
        fxcut_release_graph(&gb);
        return NULL;
    }
    uint8_t *recompute = (uint8_t *)PyBytes_AS_STRING(out);
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_graph_validate(&gb.graph, &err);
    if (rc == FXCUT_OK)
        rc = fxcut_param_alias_walk(&gb.graph, params.buf,
                                    (int32_t)(params.len / 4), recompute,
                                    &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&params);
    fxcut_release_graph(&gb);
    if (rc != FXCUT_OK) {
        Py_DECREF(out);
        return fxcut_raise(module, &err);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"validate", (PyCFunction)py_validate, METH_O, validate_doc},
    {"param_alias_walk", (PyCFunction)py_param_alias_walk, METH_VARARGS,
     param_alias_walk_doc},
    FXCUT_EXTRA_METHODS
    {NULL, NULL, 0, NULL}
};

static int module_exec(PyObject *module)
{
    module_state *st = get_state(module);
    st->infinite_cut_error = PyErr_NewExceptionWithDoc(
        "fxcut._C.InfiniteCutError",
        "Source and sink of the min-cut network are joined by a path of "
        "infinite capacity: some value is needed in backward but can be "
        "neither saved nor recomputed.", PyExc_RuntimeError, NULL);
    if (st->infinite_cut_error == NULL)
        return -1;
    if (PyModule_AddObjectRef(module, "InfiniteCutError",
                              st->infinite_cut_error) < 0)
        return -1;
    /* The header's constants, so Python never restates them. */
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"F_PRIMAL", FXCUT_F_PRIMAL},
        {"F_TANGENT", FXCUT_F_TANGENT},
        {"F_FWD_SEED", FXCUT_F_FWD_SEED},
        {"F_BWD_SEED", FXCUT_F_BWD_SEED},
        {"F_NO_COPY", FXCUT_F_NO_COPY},
        {"F_CAST", FXCUT_F_CAST},
        {"F_VIEW", FXCUT_F_VIEW},
        {"F_FUSIBLE", FXCUT_F_FUSIBLE},
        {"F_RECOMPUTABLE", FXCUT_F_RECOMPUTABLE},
        {"F_RANDOM", FXCUT_F_RANDOM},
        {"F_COMPUTE_INTENSIVE", FXCUT_F_COMPUTE_INTENSIVE},
        {"F_NON_BUILTIN", FXCUT_F_NON_BUILTIN},
        {"F_GETITEM", FXCUT_F_GETITEM},
        {"F_SYM", FXCUT_F_SYM},
        {"F_SYMFLOAT", FXCUT_F_SYMFLOAT},
        {"F_NON_TENSOR", FXCUT_F_NON_TENSOR},
        {"F_FREE_OBJECT", FXCUT_F_FREE_OBJECT},
        {"F_MUST_BE_IN_BW", FXCUT_F_MUST_BE_IN_BW},
        {"F_IMPURE", FXCUT_F_IMPURE},
        {"F_COLLECTIVE", FXCUT_F_COLLECTIVE},
        {"F_CAT", FXCUT_F_CAT},
        {"F_LIFT_FRESH", FXCUT_F_LIFT_FRESH},
        {"F_NO_FUSE_OUT", FXCUT_F_NO_FUSE_OUT},
        {"F_WITH_EFFECTS", FXCUT_F_WITH_EFFECTS},
        {"F_BW_HOOK", FXCUT_F_BW_HOOK},
        {"F_VAL_IS_SEQ", FXCUT_F_VAL_IS_SEQ},
        {"F_HAS_AC_ID", FXCUT_F_HAS_AC_ID},
        {"F_IS_BACKWARD_TAG", FXCUT_F_IS_BACKWARD_TAG},
        {"KIND_PLACEHOLDER", FXCUT_PLACEHOLDER},
        {"KIND_CALL_FUNCTION", FXCUT_CALL_FUNCTION},
        {"KIND_GET_ATTR", FXCUT_GET_ATTR},
        {"KIND_OUTPUT", FXCUT_OUTPUT},
        {"KIND_CALL_MODULE", FXCUT_CALL_MODULE},
        {"KIND_CALL_METHOD", FXCUT_CALL_METHOD},
        {"F_MUTABLE_HOP", FXCUT_F_MUTABLE_HOP},
        {"TAG_NONE", FXCUT_TAG_NONE},
        {"C_REQUIRED_FW", FXCUT_C_REQUIRED_FW},
        {"C_REQUIRED_BW", FXCUT_C_REQUIRED_BW},
        {"C_TANGENTS_CLOSURE", FXCUT_C_TANGENTS_CLOSURE},
        {"C_INPUT", FXCUT_C_INPUT},
        {"C_BANNED", FXCUT_C_BANNED},
        {"C_SAVED", FXCUT_C_SAVED},
        {"C_SINK_SIDE", FXCUT_C_SINK_SIDE},
        {"C_MUST_RECOMPUTE", FXCUT_C_MUST_RECOMPUTE},
        {"BAN_NONE", FXCUT_BAN_NONE},
        {"BAN_PRIMAL", FXCUT_BAN_PRIMAL},
        {"BAN_FWD_SEED", FXCUT_BAN_FWD_SEED},
        {"BAN_MUST_SAVE", FXCUT_BAN_MUST_SAVE},
        {"BAN_NOT_IN_ALLOWLIST", FXCUT_BAN_NOT_IN_ALLOWLIST},
        {"BAN_RANDOM", FXCUT_BAN_RANDOM},
        {"BAN_COMPUTE_INTENSIVE", FXCUT_BAN_COMPUTE_INTENSIVE},
        {"BAN_NON_BUILTIN", FXCUT_BAN_NON_BUILTIN},
        {"BAN_MATERIALIZED_BACKWARD", FXCUT_BAN_MATERIALIZED_BACKWARD},
        {"BAN_FAR_FROM_BACKWARD", FXCUT_BAN_FAR_FROM_BACKWARD},
        {"BAN_REDUCTION", FXCUT_BAN_REDUCTION},
        {"BAN_USED_FAR_APART", FXCUT_BAN_USED_FAR_APART},
        {"BAN_LONG_FUSIBLE_CHAIN", FXCUT_BAN_LONG_FUSIBLE_CHAIN},
        {"WEIGHT_INF", (long)FXCUT_WEIGHT_INF},
        {"WEIGHT_NONE", (long)FXCUT_WEIGHT_NONE},
        {"SIZE_UNKNOWN", (long)FXCUT_SIZE_UNKNOWN},
        {"STAGE_NO_BACKWARD", FXCUT_STAGE_NO_BACKWARD},
        {"STAGE_INPUTS", FXCUT_STAGE_INPUTS},
        {"STAGE_MIN_CUT", FXCUT_STAGE_MIN_CUT},
        {"STAGE_MORE_AGGRESSIVE", FXCUT_STAGE_MORE_AGGRESSIVE},
        {"STAGE_AGGRESSIVE", FXCUT_STAGE_AGGRESSIVE},
        {"STAGE_NO_CANDIDATES", FXCUT_STAGE_NO_CANDIDATES},
        {"STAGE_KNAPSACK", FXCUT_STAGE_KNAPSACK},
    };
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++)
        if (PyModule_AddIntConstant(module, constants[k].name,
                                    constants[k].value) < 0)
            return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    Py_VISIT(get_state(module)->infinite_cut_error);
    return 0;
}

static int module_clear(PyObject *module)
{
    Py_CLEAR(get_state(module)->infinite_cut_error);
    return 0;
}

static void module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fxcut._C",
    .m_doc = "fxcut's C core: graph-array walks, min-cut and knapsack.",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void)
{
    return PyModuleDef_Init(&module_def);
}
