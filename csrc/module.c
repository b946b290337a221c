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

#include "py_binding.h"
#include "knapsack.h"
#include "maxflow.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- module state ------------------------------------------------------ */

fxcut_module_state *fxcut_state(PyObject *module)
{
    return (fxcut_module_state *)PyModule_GetState(module);
}

/* ---- errors ------------------------------------------------------------ */

/* The exception being handled, taken (normalized); NULL when none.  Python
 * 3.12 has one call for it; older ones the (type, value, traceback)
 * triple, deprecated since. */
static PyObject *take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

/* Raises exc (a reference is stolen). */
static void give_exception(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    PyErr_Restore(type, exc, PyException_GetTraceback(exc));
#endif
}

PyObject *fxcut_raise_from_current(PyObject *type, const char *format, ...)
{
    PyObject *cause = take_exception();
    va_list ap;
    va_start(ap, format);
    PyErr_FormatV(type, format, ap);
    va_end(ap);
    if (cause == NULL)
        return NULL;
    PyObject *exc = take_exception();
    if (exc == NULL) {
        Py_DECREF(cause);
        return NULL;
    }
    Py_INCREF(cause);
    PyException_SetContext(exc, cause);  /* steals */
    PyException_SetCause(exc, cause);    /* steals */
    give_exception(exc);
    return NULL;
}

PyObject *fxcut_raise(PyObject *module, const fxcut_error *err,
                      const char *attr, PyObject *value)
{
    PyObject *type;
    switch (err->code) {
    case FXCUT_E_INDEX:
        type = PyExc_IndexError;
        break;
    case FXCUT_E_NOMEM:
        return PyErr_NoMemory();
    case FXCUT_E_UNBOUNDED:
        type = fxcut_state(module)->infinite_cut_error;
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
    case FXCUT_E_INTERNAL:
        type = PyExc_SystemError;
        break;
    default:
        type = PyExc_ValueError;
        break;
    }
    PyObject *exc = PyObject_CallFunction(type, "s", err->message);
    if (exc == NULL)
        return NULL;
    PyObject *node = PyLong_FromLongLong((long long)err->node);
    int rc = node == NULL ? -1 : PyObject_SetAttrString(exc, "node", node);
    Py_XDECREF(node);
    if (rc == 0 && attr != NULL)
        rc = PyObject_SetAttrString(exc, attr, value);
    if (rc < 0) {
        Py_DECREF(exc);
        return NULL;
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* ---- results ----------------------------------------------------------- */

PyObject *fxcut_pylong_from_u128(uint64_t hi, uint64_t lo)
{
    if (hi == 0)
        return PyLong_FromUnsignedLongLong(lo);
    PyObject *high = PyLong_FromUnsignedLongLong(hi);
    PyObject *low = PyLong_FromUnsignedLongLong(lo);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *shifted = NULL, *result = NULL;
    if (high != NULL && low != NULL && shift != NULL)
        shifted = PyNumber_Lshift(high, shift);
    if (shifted != NULL)
        result = PyNumber_Or(shifted, low);
    Py_XDECREF(high);
    Py_XDECREF(low);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    return result;
}

PyObject *fxcut_typed_view(const void *p, Py_ssize_t count, const char *format,
                           Py_ssize_t itemsize)
{
    PyObject *bytes = PyBytes_FromStringAndSize(
        count > 0 ? (const char *)p : "", count * itemsize);
    if (bytes == NULL)
        return NULL;
    PyObject *raw = PyMemoryView_FromObject(bytes);
    Py_DECREF(bytes);
    if (raw == NULL || strcmp(format, "B") == 0)
        return raw;
    PyObject *view = PyObject_CallMethod(raw, "cast", "s", format);
    Py_DECREF(raw);
    return view;
}

/* ---- buffers ----------------------------------------------------------- */

int fxcut_get_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                     Py_ssize_t expected_len, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        if (!PyObject_CheckBuffer(obj)) {
            fxcut_raise_from_current(
                PyExc_TypeError, "%s must support the buffer protocol "
                "(array.array, numpy array), got %.100s", name,
                Py_TYPE(obj)->tp_name);
            return -1;
        }
        /* An exporter fails a contiguous request either because its data
         * is strided (say so) or for a reason of its own, such as a
         * released memoryview (keep that error). */
        PyObject *why = take_exception();
        Py_buffer probe;
        if (PyObject_GetBuffer(obj, &probe, PyBUF_FULL_RO) == 0) {
            int strided = !PyBuffer_IsContiguous(&probe, 'C');
            PyBuffer_Release(&probe);
            if (strided) {
                give_exception(why);
                fxcut_raise_from_current(
                    PyExc_TypeError, "%s must be a C-contiguous buffer, got "
                    "a non-contiguous %.100s", name, Py_TYPE(obj)->tp_name);
                return -1;
            }
        } else {
            PyErr_Clear();
        }
        if (why != NULL)
            give_exception(why);
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

/* fxcut_copy_optional: py_binding.h. */
int fxcut_copy_optional(PyObject *obj, const char *name, Py_ssize_t itemsize,
                        Py_ssize_t n, void **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 0;
    Py_ssize_t len;
    return fxcut_copy_buffer(obj, name, itemsize, n, 0, out, &len);
}

/* fxcut_int_arg: py_binding.h. */
int fxcut_int_arg(PyObject *obj, const char *name, long long lo,
                  long long hi, long long *out)
{
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError))
            fxcut_raise_from_current(PyExc_TypeError,
                                     "%s must be an integer, got %.100s", name,
                                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(index);
        return -1;
    }
    if (overflow != 0 || v < lo || v > hi) {
        PyErr_Format(overflow != 0 ? PyExc_OverflowError : PyExc_ValueError,
                     "%s (%R) must be between %lld and %lld", name, index, lo,
                     hi);
        Py_DECREF(index);
        return -1;
    }
    Py_DECREF(index);
    *out = v;
    return 0;
}

int fxcut_copy_buffer(PyObject *obj, const char *name, Py_ssize_t itemsize,
                      Py_ssize_t expected_len, int none_ok, void **out,
                      Py_ssize_t *len)
{
    *out = NULL;
    *len = 0;
    if (none_ok && obj == Py_None) {
        if (expected_len > 0) {
            PyErr_Format(PyExc_ValueError, "%s has 0 entries, expected %zd",
                         name, expected_len);
            return -1;
        }
        *out = malloc(1);
        if (*out == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        return 0;
    }
    Py_buffer view;
    if (fxcut_get_buffer(obj, name, itemsize, expected_len, &view) < 0)
        return -1;
    *out = malloc(view.len > 0 ? (size_t)view.len : 1);
    if (*out == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*out, view.buf, (size_t)view.len);
    *len = view.len / itemsize;
    PyBuffer_Release(&view);
    return 0;
}

/* The graph array as attributes of one Python object (fxcut.GraphArrays). */
struct graph_field {
    const char *name;
    Py_ssize_t itemsize;
};

static const struct graph_field graph_fields[GB_COUNT] = {
    [GB_KIND] = {"kind", 1},       [GB_FLAGS] = {"flags", 4},
    [GB_TAG] = {"tag", 1},         [GB_AC] = {"ac_graph_id", 4},
    [GB_NBYTES] = {"nbytes", 8},   [GB_ARG_PTR] = {"arg_ptr", 4},
    [GB_ARG_IDX] = {"arg_idx", 4}, [GB_IN_PTR] = {"in_ptr", 4},
    [GB_IN_IDX] = {"in_idx", 4},   [GB_OUTPUTS] = {"outputs", 4},
};

void fxcut_release_graph(fxcut_graph_buffers *gb)
{
    for (int k = 0; k < GB_FIRST_INDEX; k++)
        if (gb->held[k]) {
            PyBuffer_Release(&gb->views[k]);
            gb->held[k] = 0;
        }
    free(gb->copy);
    gb->copy = NULL;
}

/* attr of obj; an AttributeError becomes a TypeError naming what is
 * missing (with the original as its cause); anything else the getter
 * raises (KeyboardInterrupt, ...) is kept. */
static PyObject *get_field(PyObject *obj, const char *what, const char *name)
{
    PyObject *attr = PyObject_GetAttrString(obj, name);
    if (attr == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        fxcut_raise_from_current(PyExc_TypeError, "%s has no attribute '%s'",
                                 what, name);
    return attr;
}

/* The index arrays while a graph is loaded: views of the caller's buffers,
 * copied back to back into gb->copy (offsets in entries). */
#define N_INDEX_ARRAYS (GB_COUNT - GB_FIRST_INDEX)
typedef struct {
    Py_buffer views[N_INDEX_ARRAYS];
    int n_views; /* views held, released by fxcut_load_graph */
    Py_ssize_t offset[N_INDEX_ARRAYS + 1];
} graph_index_views;

/* The length graph field k must have, n nodes known (-1: any length). */
static Py_ssize_t expected_field_len(int k, Py_ssize_t n)
{
    if (k == GB_FLAGS || k == GB_TAG || k == GB_AC || k == GB_NBYTES)
        return n;
    if (k == GB_ARG_PTR || k == GB_IN_PTR)
        return n + 1;
    return -1;
}

/* Every field's buffer: the per-node ones held in gb, the index ones in
 * iv; *n from the kind array.  -1 with an exception set; what was
 * acquired is counted in gb->held and iv->n_views for the caller. */
static int get_graph_views(PyObject *obj, fxcut_graph_buffers *gb,
                           graph_index_views *iv, Py_ssize_t *n)
{
    for (int k = 0; k < GB_COUNT; k++) {
        const struct graph_field *f = &graph_fields[k];
        PyObject *attr = get_field(obj, "graph arrays object", f->name);
        if (attr == NULL)
            return -1;
        Py_buffer *view = k < GB_FIRST_INDEX ? &gb->views[k]
                                             : &iv->views[k - GB_FIRST_INDEX];
        int got = fxcut_get_buffer(attr, f->name, f->itemsize,
                                   expected_field_len(k, *n), view);
        Py_DECREF(attr);
        if (got < 0)
            return -1;
        if (k < GB_FIRST_INDEX)
            gb->held[k] = 1;
        else
            iv->n_views++;
        if (k == GB_KIND) {
            *n = view->len;
            if (*n > INT32_MAX - 1) {
                PyErr_Format(PyExc_ValueError,
                             "graph has %zd nodes, more than int32 indexes",
                             *n);
                return -1;
            }
        }
    }
    return 0;
}

/* The index arrays copied into gb->copy (the caller's may change while
 * the core reads them); iv->offset set. */
static int copy_index_arrays(fxcut_graph_buffers *gb, graph_index_views *iv)
{
    iv->offset[0] = 0;
    for (int k = 0; k < N_INDEX_ARRAYS; k++)
        iv->offset[k + 1] = iv->offset[k] + iv->views[k].len / 4;
    gb->copy = malloc((size_t)iv->offset[N_INDEX_ARRAYS] * 4 + 4);
    if (gb->copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < N_INDEX_ARRAYS; k++)
        memcpy(gb->copy + iv->offset[k], iv->views[k].buf,
               (size_t)iv->views[k].len);
    return 0;
}

/* gb->graph pointed at the held views and the copy; the CSR edge counts
 * checked against the index arrays before the core reads ptr[n] as a
 * bound (of the copy: the caller's may change). */
static int point_graph(fxcut_graph_buffers *gb, const graph_index_views *iv,
                       Py_ssize_t n)
{
    fxcut_graph *g = &gb->graph;
    g->n = (int32_t)n;
    g->kind = gb->views[GB_KIND].buf;
    g->flags = gb->views[GB_FLAGS].buf;
    g->tag = gb->views[GB_TAG].buf;
    g->ac_graph_id = gb->views[GB_AC].buf;
    g->nbytes = gb->views[GB_NBYTES].buf;
#define INDEX_ARRAY(k) (gb->copy + iv->offset[(k) - GB_FIRST_INDEX])
#define INDEX_LEN(k) (iv->offset[(k) - GB_FIRST_INDEX + 1] - iv->offset[(k) - GB_FIRST_INDEX])
    g->arg_ptr = INDEX_ARRAY(GB_ARG_PTR);
    g->arg_idx = INDEX_ARRAY(GB_ARG_IDX);
    g->in_ptr = INDEX_ARRAY(GB_IN_PTR);
    g->in_idx = INDEX_ARRAY(GB_IN_IDX);
    g->outputs = INDEX_ARRAY(GB_OUTPUTS);
    g->n_outputs = (int32_t)INDEX_LEN(GB_OUTPUTS); /* checked below */
    Py_ssize_t n_args = INDEX_LEN(GB_ARG_IDX), n_ins = INDEX_LEN(GB_IN_IDX),
               n_outs = INDEX_LEN(GB_OUTPUTS);
#undef INDEX_ARRAY
#undef INDEX_LEN
    if (n_args > INT32_MAX || n_ins > INT32_MAX || n_outs > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "arg_idx, in_idx and outputs must have fewer than "
                        "2^31 entries");
        return -1;
    }
    if (g->arg_ptr[n] != n_args || g->in_ptr[n] != n_ins) {
        PyErr_Format(PyExc_ValueError,
                     "CSR ends do not match: arg_ptr[%zd] = %d with %zd "
                     "arg_idx entries, in_ptr[%zd] = %d with %zd in_idx "
                     "entries", n, (int)g->arg_ptr[n], n_args, n,
                     (int)g->in_ptr[n], n_ins);
        return -1;
    }
    return 0;
}

int fxcut_load_graph(PyObject *obj, fxcut_graph_buffers *gb)
{
    memset(gb, 0, sizeof *gb);
    graph_index_views iv;
    iv.n_views = 0;
    Py_ssize_t n = -1;
    int rc = -1;
    if (get_graph_views(obj, gb, &iv, &n) == 0 &&
        copy_index_arrays(gb, &iv) == 0)
        rc = point_graph(gb, &iv, n);
    for (int k = 0; k < iv.n_views; k++)
        PyBuffer_Release(&iv.views[k]);
    if (rc < 0)
        fxcut_release_graph(gb);
    return rc;
}
#undef N_INDEX_ARRAYS

/* ---- entry points ------------------------------------------------------ */

PyDoc_STRVAR(validate_doc,
"validate($module, graph, /)\n--\n\n"
"Check a graph array; raise ValueError / IndexError naming the first\n"
"malformed entry (the exception's `node`: its node index, or -1).");

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
        return fxcut_raise(module, &err, NULL, NULL);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(param_alias_walk_doc,
"param_alias_walk($module, graph, params, /)\n--\n\n"
"DeepCompile's ZeRO-3 walk.  params: int32 buffer of parameter placeholder\n"
"node indices.  Returns bytes, one per node: 1 where the node must be\n"
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
    void *params = NULL;
    Py_ssize_t n_params = 0;
    PyObject *out = NULL;
    if (fxcut_copy_buffer(params_obj, "params", 4, -1, 0, &params,
                          &n_params) < 0)
        goto done;
    if (n_params > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "params must have fewer than 2^31 entries");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, gb.graph.n);
    if (out == NULL)
        goto done;
    uint8_t *recompute = (uint8_t *)PyBytes_AS_STRING(out);
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_graph_validate(&gb.graph, &err);
    if (rc == FXCUT_OK)
        rc = fxcut_param_alias_walk(&gb.graph, params, (int32_t)n_params,
                                    recompute, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        Py_CLEAR(out);
        fxcut_raise(module, &err, NULL, NULL);
    }
done:
    free(params);
    fxcut_release_graph(&gb);
    return out;
}

static PyMethodDef module_methods[] = {
    {"validate", (PyCFunction)py_validate, METH_O, validate_doc},
    {"param_alias_walk", (PyCFunction)py_param_alias_walk, METH_VARARGS,
     param_alias_walk_doc},
    FXCUT_EXTRA_METHODS
    {NULL, NULL, 0, NULL}
};

/* The header's constants, so Python never restates them. */
#define C(prefix, name) {#prefix #name, (long long)FXCUT_##prefix##name}
static const struct {
    const char *name;
    long long value;
} constants[] = {
    C(F_, PRIMAL), C(F_, TANGENT), C(F_, FWD_SEED), C(F_, BWD_SEED),
    C(F_, NO_COPY), C(F_, CAST), C(F_, VIEW), C(F_, FUSIBLE),
    C(F_, RECOMPUTABLE), C(F_, RANDOM), C(F_, COMPUTE_INTENSIVE),
    C(F_, NON_BUILTIN), C(F_, GETITEM), C(F_, SYM), C(F_, SYMFLOAT),
    C(F_, NON_TENSOR), C(F_, FREE_OBJECT), C(F_, MUST_BE_IN_BW),
    C(F_, IMPURE), C(F_, COLLECTIVE), C(F_, CAT), C(F_, LIFT_FRESH),
    C(F_, NO_FUSE_OUT), C(F_, WITH_EFFECTS), C(F_, BW_HOOK),
    C(F_, VAL_IS_SEQ), C(F_, HAS_AC_ID), C(F_, IS_BACKWARD_TAG), C(F_, MUST_BE_IN_FW),
    C(F_, MUTABLE_HOP),
    {"KIND_PLACEHOLDER", FXCUT_PLACEHOLDER},
    {"KIND_CALL_FUNCTION", FXCUT_CALL_FUNCTION},
    {"KIND_GET_ATTR", FXCUT_GET_ATTR},
    {"KIND_OUTPUT", FXCUT_OUTPUT},
    {"KIND_CALL_MODULE", FXCUT_CALL_MODULE},
    {"KIND_CALL_METHOD", FXCUT_CALL_METHOD},
    C(TAG_, NONE), C(TAG_, MUST_SAVE), C(TAG_, PREFER_SAVE),
    C(TAG_, MUST_RECOMPUTE), C(TAG_, PREFER_RECOMPUTE),
    C(TAG_, MUST_CPU_OFFLOAD), C(TAG_, PREFER_CPU_OFFLOAD),
    C(C_, REQUIRED_FW), C(C_, REQUIRED_BW), C(C_, TANGENTS_CLOSURE),
    C(C_, INPUT), C(C_, BANNED), C(C_, SAVED), C(C_, SINK_SIDE),
    C(C_, MUST_RECOMPUTE),
    C(BAN_, NONE), C(BAN_, PRIMAL), C(BAN_, FWD_SEED), C(BAN_, MUST_SAVE),
    C(BAN_, NOT_IN_ALLOWLIST), C(BAN_, RANDOM), C(BAN_, COMPUTE_INTENSIVE),
    C(BAN_, NON_BUILTIN), C(BAN_, MATERIALIZED_BACKWARD),
    C(BAN_, FAR_FROM_BACKWARD), C(BAN_, REDUCTION), C(BAN_, USED_FAR_APART),
    C(BAN_, LONG_FUSIBLE_CHAIN),
    C(, WEIGHT_INF), C(, WEIGHT_NONE), C(, SIZE_UNKNOWN), C(, CAP_INF),
    C(KEEP_, NONE), C(KEEP_, NETWORK), C(KEEP_, BUILD_ONLY),
    C(X_, MUST_FW), C(X_, COPY),
    C(FUSE_, POINTWISE), C(FUSE_, REDUCTION), C(FUSE_, EXTERN), C(FUSE_, CAT),
    C(FUSE_, HEAVY), C(FUSE_, COPIES_INPUTS),
    C(FUSE_, ABSORBED), C(FUSE_, LAYOUT), C(FUSE_, KIND_MASK),
    C(MAXFLOW_, DEFAULT), C(MAXFLOW_, PUSH_RELABEL), C(MAXFLOW_, DINIC),
    C(STAGE_, NO_BACKWARD), C(STAGE_, INPUTS), C(STAGE_, MIN_CUT),
    C(STAGE_, MORE_AGGRESSIVE), C(STAGE_, AGGRESSIVE),
    C(STAGE_, NO_CANDIDATES), C(STAGE_, KNAPSACK),
    {"PLAN_ROLE_BACKWARD", FXCUT_ROLE_BACKWARD},
    {"PLAN_ROLE_INPUT", FXCUT_ROLE_INPUT},
    {"PLAN_ROLE_SAVE", FXCUT_ROLE_SAVE},
    {"PLAN_ROLE_FREE", FXCUT_ROLE_FREE},
    {"PLAN_ROLE_RECOMPUTE", FXCUT_ROLE_RECOMPUTE},
    {"PLAN_MAX_THREADS", FXCUT_PLAN_MAX_THREADS},
};
#undef C

static PyTypeObject *new_result_type(PyObject *module,
                                     PyStructSequence_Desc *desc,
                                     const char *attr)
{
    PyTypeObject *type = PyStructSequence_NewType(desc);
    if (type == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, attr, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return type;
}

static int module_exec(PyObject *module)
{
    fxcut_module_state *st = fxcut_state(module);
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
    st->decision_type = new_result_type(module, &fxcut_decision_desc,
                                        "Decision");
    if (st->decision_type == NULL)
        return -1;
    st->plan_type = new_result_type(module, &fxcut_plan_desc, "BudgetPlan");
    if (st->plan_type == NULL)
        return -1;
    st->knapsack_type = new_result_type(module, &fxcut_knapsack_desc,
                                        "KnapsackResult");
    if (st->knapsack_type == NULL)
        return -1;
    st->memory_type = new_result_type(module, &fxcut_memory_desc,
                                      "MemoryResult");
    if (st->memory_type == NULL)
        return -1;
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++) {
        PyObject *v = PyLong_FromLongLong(constants[k].value);
        if (v == NULL || PyModule_AddObjectRef(module, constants[k].name,
                                               v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    PyObject *solvers = PyTuple_New(FXCUT_KNAPSACK_NUM_SOLVERS);
    if (solvers == NULL)
        return -1;
    for (int s = 0; s < FXCUT_KNAPSACK_NUM_SOLVERS; s++) {
        PyObject *name = PyUnicode_FromString(fxcut_knapsack_solver_name(s));
        if (name == NULL) {
            Py_DECREF(solvers);
            return -1;
        }
        PyTuple_SET_ITEM(solvers, s, name);
    }
    int rc = PyModule_AddObjectRef(module, "KNAPSACK_SOLVERS", solvers);
    Py_DECREF(solvers);
    return rc;
}

/* Each reference the state holds: visited (visit given) or cleared. */
static int state_refs(PyObject *module, visitproc visit, void *arg)
{
    fxcut_module_state *st = fxcut_state(module);
    PyObject **refs[] = {&st->infinite_cut_error,
                         (PyObject **)&st->decision_type,
                         (PyObject **)&st->plan_type,
                         (PyObject **)&st->knapsack_type,
                         (PyObject **)&st->memory_type};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++) {
        if (visit != NULL)
            Py_VISIT(*refs[k]);
        else
            Py_CLEAR(*refs[k]);
    }
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    return state_refs(module, visit, arg);
}

static int module_clear(PyObject *module)
{
    return state_refs(module, NULL, NULL);
}

static void module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* The core keeps no state and the module keeps its own per interpreter, so
 * it supports sub-interpreters with their own GIL (3.12+) and runs without
 * the GIL in free-threaded builds (3.13+): every array the core indexes
 * with is a private copy, every sequence a private tuple. */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fxcut._C",
    .m_doc = "fxcut's C core: graph-array walks, min-cut and knapsack.",
    .m_size = sizeof(fxcut_module_state),
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
