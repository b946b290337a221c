/*
 * py_decide.c -- binding of fxcut_partition_decide.
 *
 * partition_decide(graph, options, static_lifetime, dont_ban, force_save,
 *                  fuse_a, fuse_b) -> dict
 *   options: tuple (num_fwd_outputs, ban_if_used_far_apart,
 *     ban_if_long_fusible_chains, ban_if_materialized_backward,
 *     ban_if_not_in_allowlist, ban_if_reduction, recompute_views,
 *     treat_parameters_as_free_to_save, is_non_builtin_to_include,
 *     unsafe_allow_optimization_of_collectives, max_dist_from_bw,
 *     keep_network)
 *   static_lifetime, dont_ban: n bytes, or None
 *   force_save, fuse_a, fuse_b: int32 buffers
 * The dict holds tag, node_class, ban_reason (n bytes each), dist_from_bw
 * and weight (n int64 each, as bytes), saved (int32 bytes), n_required_bw,
 * cut_value (int), and with keep_network net_tail / net_head (int32 bytes)
 * and net_cap (int64 bytes).  On an infinite path the InfiniteCutError has
 * attribute `chain`: the node indices of the path.
 *
 * budget_plan(graph, options, static_lifetime, input_storage, force_save,
 *             fuse_a, fuse_b, budget) -> dict
 *   fxcut_budget_plan_decide: the same dict (saved: the answer unless the
 *   stage is the knapsack's), plus stage, min_act_size, max_act_size,
 *   ratio_more_aggressive, ratio_aggressive (floats), candidates (int32
 *   bytes), memories (float64 bytes), n_passes.  input_storage: n bytes or
 *   None.
 */
#include "py_binding.h"

#include <stdlib.h>
#include <string.h>

const char fxcut_py_partition_decide_doc[] =
    "partition_decide(graph, options, static_lifetime, dont_ban, force_save, "
    "fuse_a, fuse_b) -> dict\n\nThe min-cut partition decision; see "
    "csrc/py_decide.c.";

const char fxcut_py_budget_plan_doc[] =
    "budget_plan(graph, options, static_lifetime, input_storage, force_save, "
    "fuse_a, fuse_b, budget) -> dict\n\nThe activation memory budget's "
    "passes up to the knapsack; see csrc/py_decide.c.";

static int parse_options(PyObject *tuple, fxcut_partition_options *o)
{
    long long v[12];
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 12) {
        PyErr_SetString(PyExc_TypeError, "options must be a tuple of 12 ints");
        return -1;
    }
    for (Py_ssize_t k = 0; k < 12; k++) {
        v[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, k));
        if (v[k] == -1 && PyErr_Occurred())
            return -1;
    }
    if (v[0] < 0 || v[0] > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "num_fwd_outputs (%lld) must be a non-negative int32",
                     v[0]);
        return -1;
    }
    memset(o, 0, sizeof *o);
    o->num_fwd_outputs = (int32_t)v[0];
    o->ban_if_used_far_apart = v[1] != 0;
    o->ban_if_long_fusible_chains = v[2] != 0;
    o->ban_if_materialized_backward = v[3] != 0;
    o->ban_if_not_in_allowlist = v[4] != 0;
    o->ban_if_reduction = v[5] != 0;
    o->recompute_views = v[6] != 0;
    o->treat_parameters_as_free_to_save = v[7] != 0;
    o->is_non_builtin_to_include = v[8] != 0;
    o->unsafe_allow_optimization_of_collectives = v[9] != 0;
    o->max_dist_from_bw = v[10];
    o->keep_network = (uint8_t)(v[11] < 0 || v[11] > 2 ? 1 : v[11]);
    return 0;
}

/* An optional n-byte mask: None -> NULL. */
static int get_mask(PyObject *obj, const char *name, Py_ssize_t n,
                    Py_buffer *view, int *held, const uint8_t **out)
{
    *out = NULL;
    *held = 0;
    if (obj == Py_None)
        return 0;
    if (fxcut_get_buffer(obj, name, 1, n, view) < 0)
        return -1;
    *held = 1;
    *out = view->buf;
    return 0;
}

static PyObject *bytes_of(const void *p, Py_ssize_t len)
{
    return PyBytes_FromStringAndSize(len > 0 ? (const char *)p : "", len);
}

static PyObject *u128_to_int(fxcut_u128 v)
{
    PyObject *hi = PyLong_FromUnsignedLongLong(v.hi);
    PyObject *lo = PyLong_FromUnsignedLongLong(v.lo);
    PyObject *shift = PyLong_FromLong(64);
    PyObject *out = NULL, *hi_shifted = NULL;
    if (hi != NULL && lo != NULL && shift != NULL)
        hi_shifted = PyNumber_Lshift(hi, shift);
    if (hi_shifted != NULL)
        out = PyNumber_Or(hi_shifted, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(hi_shifted);
    return out;
}

static int set_item(PyObject *d, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *build_result(const fxcut_partition_result *r, int32_t n)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (set_item(d, "tag", bytes_of(r->tag, n)) < 0 ||
        set_item(d, "node_class", bytes_of(r->node_class, n)) < 0 ||
        set_item(d, "ban_reason", bytes_of(r->ban_reason, n)) < 0 ||
        set_item(d, "dist_from_bw", bytes_of(r->dist_from_bw, (Py_ssize_t)n * 8)) < 0 ||
        set_item(d, "weight", bytes_of(r->weight, (Py_ssize_t)n * 8)) < 0 ||
        set_item(d, "saved", bytes_of(r->saved, (Py_ssize_t)r->n_saved * 4)) < 0 ||
        set_item(d, "n_required_bw", PyLong_FromLong(r->n_required_bw)) < 0 ||
        set_item(d, "cut_value", u128_to_int(r->cut_value)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    if (r->net_tail != NULL &&
        (set_item(d, "net_tail", bytes_of(r->net_tail, (Py_ssize_t)r->net_len * 4)) < 0 ||
         set_item(d, "net_head", bytes_of(r->net_head, (Py_ssize_t)r->net_len * 4)) < 0 ||
         set_item(d, "net_cap", bytes_of(r->net_cap, (Py_ssize_t)r->net_len * 8)) < 0)) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Raise err; for an infinite path attach the chain of node indices. */
static PyObject *raise_decide_error(PyObject *module, const fxcut_error *err,
                                    const fxcut_partition_result *r)
{
    fxcut_raise(module, err);
    if (err->code != FXCUT_E_UNBOUNDED)
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *chain = PyList_New(r->n_chain);
    if (chain != NULL) {
        for (int32_t k = 0; k < r->n_chain; k++) {
            PyObject *v = PyLong_FromLong(r->chain[k]);
            if (v == NULL) {
                Py_CLEAR(chain);
                break;
            }
            PyList_SET_ITEM(chain, k, v);
        }
    }
    if (chain == NULL || value == NULL ||
        PyObject_SetAttrString(value, "chain", chain) < 0) {
        Py_XDECREF(chain);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    Py_DECREF(chain);
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* The plan's fields, added to the decision's dict. */
static int add_plan(PyObject *d, const fxcut_budget_plan *plan)
{
    if (set_item(d, "stage", PyLong_FromLong(plan->stage)) < 0 ||
        set_item(d, "min_act_size", PyFloat_FromDouble(plan->min_act_size)) < 0 ||
        set_item(d, "max_act_size", PyFloat_FromDouble(plan->max_act_size)) < 0 ||
        set_item(d, "ratio_more_aggressive",
                 PyFloat_FromDouble(plan->ratio_more_aggressive)) < 0 ||
        set_item(d, "ratio_aggressive",
                 PyFloat_FromDouble(plan->ratio_aggressive)) < 0 ||
        set_item(d, "candidates", bytes_of(plan->candidates,
                                           (Py_ssize_t)plan->n_candidates * 4)) < 0 ||
        set_item(d, "memories", bytes_of(plan->memories,
                                         (Py_ssize_t)plan->n_candidates * 8)) < 0 ||
        set_item(d, "n_passes", PyLong_FromLong(plan->n_passes)) < 0)
        return -1;
    return 0;
}

/*
 * partition_decide and budget_plan share their arguments: the graph, the
 * options, two optional n-byte masks (static_lifetime and dont_ban, or
 * static_lifetime and input_storage), force_save, fuse_a, fuse_b; the
 * budget plan takes the budget last.
 */
static PyObject *decision_call(PyObject *module, PyObject *args, int plan_mode)
{
    PyObject *graph_obj, *opt_obj, *static_obj, *mask_obj, *force_obj,
        *fa_obj, *fb_obj;
    double budget = 1.0;
    int ok = plan_mode
        ? PyArg_ParseTuple(args, "OOOOOOOd:budget_plan", &graph_obj, &opt_obj,
                           &static_obj, &mask_obj, &force_obj, &fa_obj,
                           &fb_obj, &budget)
        : PyArg_ParseTuple(args, "OOOOOOO:partition_decide", &graph_obj,
                           &opt_obj, &static_obj, &mask_obj, &force_obj,
                           &fa_obj, &fb_obj);
    if (!ok)
        return NULL;
    fxcut_partition_options opt;
    if (parse_options(opt_obj, &opt) < 0)
        return NULL;
    fxcut_graph_buffers gb;
    if (fxcut_load_graph(graph_obj, &gb) < 0)
        return NULL;
    const int32_t n = gb.graph.n;
    Py_buffer sv, mv, fv, av, bv;
    int s_held = 0, m_held = 0, f_held = 0, a_held = 0, b_held = 0;
    PyObject *result = NULL;
    fxcut_partition_result r;
    memset(&r, 0, sizeof r);
    fxcut_budget_plan plan;
    memset(&plan, 0, sizeof plan);
    fxcut_budget_options bopt = {budget, NULL};
    const uint8_t *mask = NULL;
    void *block = NULL;

    if (get_mask(static_obj, "static_lifetime", n, &sv, &s_held, &opt.static_lifetime) < 0 ||
        get_mask(mask_obj, plan_mode ? "input_storage" : "dont_ban", n, &mv,
                 &m_held, &mask) < 0)
        goto out;
    if (plan_mode)
        bopt.input_storage = mask;
    else
        opt.dont_ban = mask;
    if (fxcut_get_buffer(force_obj, "force_save", 4, -1, &fv) < 0)
        goto out;
    f_held = 1;
    if (fxcut_get_buffer(fa_obj, "fuse_a", 4, -1, &av) < 0)
        goto out;
    a_held = 1;
    if (fxcut_get_buffer(fb_obj, "fuse_b", 4, av.len / 4, &bv) < 0)
        goto out;
    b_held = 1;
    if (fv.len / 4 > INT32_MAX || av.len / 4 > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "force_save and fuse_a / fuse_b must have fewer than "
                        "2^31 entries");
        goto out;
    }
    opt.force_save = fv.buf;
    opt.n_force_save = (int32_t)(fv.len / 4);
    opt.fuse_pair_a = av.buf;
    opt.fuse_pair_b = bv.buf;
    opt.n_fuse_pairs = (int32_t)(av.len / 4);

    /* One block for the per-node result (and plan) arrays. */
    size_t un = (size_t)n + 2;
    block = malloc(un * (3 + 8 + 8 + 4 + 4 + 4 + 8));
    if (block == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    char *p = block;
    r.dist_from_bw = (int64_t *)p;
    p += un * 8;
    r.weight = (int64_t *)p;
    p += un * 8;
    plan.memories = (double *)p;
    p += un * 8;
    r.saved = (int32_t *)p;
    p += un * 4;
    r.chain = (int32_t *)p;
    p += un * 4;
    plan.candidates = (int32_t *)p;
    p += un * 4;
    r.tag = (int8_t *)p;
    p += un;
    r.node_class = (uint8_t *)p;
    p += un;
    r.ban_reason = (uint8_t *)p;

    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_graph_validate(&gb.graph, &err);
    if (rc == FXCUT_OK && plan_mode)
        rc = fxcut_budget_plan_decide(&gb.graph, &opt, &bopt, &r, &plan, &err);
    else if (rc == FXCUT_OK)
        rc = fxcut_partition_decide(&gb.graph, &opt, &r, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        raise_decide_error(module, &err, &r);
    } else {
        result = build_result(&r, n);
        if (result != NULL && plan_mode && add_plan(result, &plan) < 0)
            Py_CLEAR(result);
    }
out:
    fxcut_partition_result_release(&r);
    free(block);
    if (s_held)
        PyBuffer_Release(&sv);
    if (m_held)
        PyBuffer_Release(&mv);
    if (f_held)
        PyBuffer_Release(&fv);
    if (a_held)
        PyBuffer_Release(&av);
    if (b_held)
        PyBuffer_Release(&bv);
    fxcut_release_graph(&gb);
    return result;
}

PyObject *fxcut_py_partition_decide(PyObject *module, PyObject *args)
{
    return decision_call(module, args, 0);
}

PyObject *fxcut_py_budget_plan(PyObject *module, PyObject *args)
{
    return decision_call(module, args, 1);
}
