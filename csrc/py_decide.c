/*
 * py_decide.c -- binding of fxcut_partition_decide and
 * fxcut_budget_plan_decide: fxcut._C.partition_decide and
 * fxcut._C.budget_plan.  The signatures and results are in the docstrings.
 */
#include "py_binding.h"

#include <stdlib.h>
#include <string.h>

#define COMMON_ARGS_DOC                                                       \
"graph: a graph arrays object (fxcut.GraphArrays).  options: an object with\n" \
"the boolean attributes ban_if_used_far_apart, ban_if_long_fusible_chains,\n" \
"ban_if_materialized_backward, ban_if_not_in_allowlist, ban_if_reduction,\n" \
"recompute_views, treat_parameters_as_free_to_save,\n"                       \
"is_non_builtin_to_include, unsafe_allow_optimization_of_collectives and\n"  \
"the integer max_dist_from_bw (fxcut.core.MinCutOptions).\n"                \
"num_fwd_outputs: how many of graph.outputs are forward outputs.\n"           \
"static_lifetime: None or n bytes, 1 for a primal of static lifetime.\n"      \
"force_save: None or int32 node indices forced MUST_SAVE.  fuse_a, fuse_b:\n" \
"None or int32 buffers of one length: (a, b) pairs, b a mutable HOP that\n"  \
"mutates a.\n"

#define DECISION_DOC                                                          \
"Returns a Decision: tag (memoryview 'b'), node_class, ban_reason ('B'),\n"   \
"dist_from_bw, weight ('q'), saved ('i'), n_required_bw, cut_value (int),\n"  \
"network (None, or (tail 'i', head 'i', cap 'q')).  Errors name the node\n"   \
"in the exception's `node`; an InfiniteCutError also has `chain`, the\n"     \
"node indices of one infinite source -> sink path.\n"

const char fxcut_py_partition_decide_doc[] =
"partition_decide($module, graph, options, /, *, num_fwd_outputs,\n"
"                 keep_network=0, static_lifetime=None, dont_ban=None,\n"
"                 force_save=None, fuse_a=None, fuse_b=None)\n--\n\n"
"The min-cut partition decision at memory budget 1.\n\n" COMMON_ARGS_DOC
"keep_network: KEEP_NONE, KEEP_NETWORK (hand the flow network back) or\n"
"KEEP_BUILD_ONLY (hand it back unsolved).  dont_ban: None or n bytes, 1 for\n"
"a node no ban rule may ban.\n" DECISION_DOC;

const char fxcut_py_aggressive_options_doc[] =
"aggressive_options($module, options, /)\n--\n\n"
"The boolean switches of options (fxcut.core.MinCutOptions: its\n"
"ban_if_* and the other switches, and max_dist_from_bw) relaxed as\n"
"torch's aggressive_recomputation and the memory budget's last cuts\n"
"relax them: a dict of switch name -> bool.  The relaxation is written\n"
"once, in the core (budget.c); this hands it to Python.\n";

const char fxcut_py_budget_plan_doc[] =
"budget_plan($module, graph, options, /, *, num_fwd_outputs, memory_budget,\n"
"            static_lifetime=None, input_storage=None, force_save=None,\n"
"            fuse_a=None, fuse_b=None)\n--\n\n"
"The activation memory budget's passes up to the knapsack.\n\n"
COMMON_ARGS_DOC
"memory_budget: a float in [0, 1].  input_storage: None or n bytes, 1 for a\n"
"node whose storage is an input's.\n"
"Returns a BudgetPlan: decision (a Decision; its saved is the answer unless\n"
"stage is STAGE_KNAPSACK), stage, min_act_size, max_act_size,\n"
"ratio_more_aggressive, ratio_aggressive (floats, NaN where not reached),\n"
"candidates ('i'), memories ('d'), n_passes.\n";

/* ---- result types ------------------------------------------------------ */

static PyStructSequence_Field decision_fields[] = {
    {"tag", "recompute tags after the tag passes (int8, TAG_*)"},
    {"node_class", "C_* bits per node"},
    {"ban_reason", "BAN_* per node"},
    {"dist_from_bw", "torch's dist_from_bw per node (int64)"},
    {"weight", "X_in -> X_out capacity per node, WEIGHT_INF / WEIGHT_NONE"},
    {"saved", "saved node indices in graph order (int32)"},
    {"n_required_bw", "nodes required in backward; 0: nothing was cut"},
    {"cut_value", "the cut's exact capacity"},
    {"network", "None, or the flow network (tail, head, cap)"},
    {NULL, NULL}
};

PyStructSequence_Desc fxcut_decision_desc = {
    "fxcut._C.Decision", "What partition_decide decided, by node index.",
    decision_fields, 9
};

static PyStructSequence_Field plan_fields[] = {
    {"decision", "the Decision of the last cut the plan made"},
    {"stage", "STAGE_*: what the plan settled on"},
    {"min_act_size", "the inputs' size, bytes / 1e9"},
    {"max_act_size", "the plain cut's saved size, bytes / 1e9"},
    {"ratio_more_aggressive", "memory ratio of the second pass, or NaN"},
    {"ratio_aggressive", "memory ratio of the third pass, or NaN"},
    {"candidates", "the knapsack's items, largest first (int32)"},
    {"memories", "their sizes on the budget's scale (float64)"},
    {"n_passes", "min-cuts solved"},
    {NULL, NULL}
};

PyStructSequence_Desc fxcut_plan_desc = {
    "fxcut._C.BudgetPlan", "What budget_plan planned.", plan_fields, 9
};

/* Sets slot k of the struct sequence; value NULL fails (-1). */
static int set_field(PyObject *seq, Py_ssize_t k, PyObject *value)
{
    if (value == NULL)
        return -1;
    PyStructSequence_SetItem(seq, k, value);
    return 0;
}

static PyObject *build_decision(PyObject *module,
                                const fxcut_partition_result *r, int32_t n)
{
    PyObject *d = PyStructSequence_New(fxcut_state(module)->decision_type);
    if (d == NULL)
        return NULL;
    PyObject *network = Py_None;
    Py_INCREF(network);
    if (r->net_tail != NULL) {
        Py_DECREF(network);
        network = Py_BuildValue(
            "(NNN)", fxcut_typed_view(r->net_tail, r->net_len, "i", 4),
            fxcut_typed_view(r->net_head, r->net_len, "i", 4),
            fxcut_typed_view(r->net_cap, r->net_len, "q", 8));
    }
    if (set_field(d, 8, network) < 0 || set_field(d, 0, fxcut_typed_view(r->tag, n, "b", 1)) < 0 ||
        set_field(d, 1, fxcut_typed_view(r->node_class, n, "B", 1)) < 0 ||
        set_field(d, 2, fxcut_typed_view(r->ban_reason, n, "B", 1)) < 0 ||
        set_field(d, 3, fxcut_typed_view(r->dist_from_bw, n, "q", 8)) < 0 ||
        set_field(d, 4, fxcut_typed_view(r->weight, n, "q", 8)) < 0 ||
        set_field(d, 5, fxcut_typed_view(r->saved, r->n_saved, "i", 4)) < 0 ||
        set_field(d, 6, PyLong_FromLong(r->n_required_bw)) < 0 ||
        set_field(d, 7, fxcut_pylong_from_u128(r->cut_value_hi,
                                               r->cut_value_lo)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *build_plan(PyObject *module, PyObject *decision,
                            const fxcut_budget_plan *plan)
{
    PyObject *p = PyStructSequence_New(fxcut_state(module)->plan_type);
    if (p == NULL) {
        Py_DECREF(decision);
        return NULL;
    }
    if (set_field(p, 0, decision) < 0 ||
        set_field(p, 1, PyLong_FromLong(plan->stage)) < 0 ||
        set_field(p, 2, PyFloat_FromDouble(plan->min_act_size)) < 0 ||
        set_field(p, 3, PyFloat_FromDouble(plan->max_act_size)) < 0 ||
        set_field(p, 4, PyFloat_FromDouble(plan->ratio_more_aggressive)) < 0 ||
        set_field(p, 5, PyFloat_FromDouble(plan->ratio_aggressive)) < 0 ||
        set_field(p, 6, fxcut_typed_view(plan->candidates, plan->n_candidates,
                                         "i", 4)) < 0 ||
        set_field(p, 7, fxcut_typed_view(plan->memories, plan->n_candidates,
                                         "d", 8)) < 0 ||
        set_field(p, 8, PyLong_FromLong(plan->n_passes)) < 0) {
        Py_DECREF(p);
        return NULL;
    }
    return p;
}

/* ---- arguments --------------------------------------------------------- */

/* The boolean switches of the options object, by attribute name. */
static const struct {
    const char *name;
    size_t offset;
} switches[] = {
#define SW(f) {#f, offsetof(fxcut_partition_options, f)}
    SW(ban_if_used_far_apart), SW(ban_if_long_fusible_chains),
    SW(ban_if_materialized_backward), SW(ban_if_not_in_allowlist),
    SW(ban_if_reduction), SW(recompute_views),
    SW(treat_parameters_as_free_to_save), SW(is_non_builtin_to_include),
    SW(unsafe_allow_optimization_of_collectives),
#undef SW
};

/* The ban switches and max_dist_from_bw, read from options by attribute. */
static int read_options(PyObject *options, fxcut_partition_options *o)
{
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        PyObject *v = PyObject_GetAttrString(options, switches[k].name);
        if (v == NULL) {
            if (PyErr_ExceptionMatches(PyExc_AttributeError))
                fxcut_raise_from_current(PyExc_TypeError,
                                         "options has no attribute '%s'",
                                         switches[k].name);
            return -1;
        }
        int truth = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (truth < 0)
            return -1;
        *((uint8_t *)o + switches[k].offset) = (uint8_t)truth;
    }
    PyObject *v = PyObject_GetAttrString(options, "max_dist_from_bw");
    if (v == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError))
            fxcut_raise_from_current(PyExc_TypeError,
                                     "options has no attribute "
                                     "'max_dist_from_bw'");
        return -1;
    }
    long long dist = 0;
    int rc = fxcut_int_arg(v, "options.max_dist_from_bw", INT64_MIN, INT64_MAX,
                     &dist);
    Py_DECREF(v);
    o->max_dist_from_bw = dist;
    return rc;
}

/* What both entry points take besides their own arguments, and the
 * private copies behind it. */
typedef struct {
    fxcut_graph_buffers gb;
    int graph_held;
    fxcut_partition_options opt;
    void *static_lifetime, *mask, *force, *fuse_a, *fuse_b;
    void *block;
    fxcut_partition_result r;
    fxcut_budget_plan plan;
} call_state;

static void call_state_free(call_state *cs)
{
    fxcut_partition_result_release(&cs->r);
    void *const owned[] = {cs->block, cs->static_lifetime, cs->mask, cs->force,
                           cs->fuse_a, cs->fuse_b};
    fxcut_free_each(owned, sizeof owned / sizeof owned[0]);
    if (cs->graph_held)
        fxcut_release_graph(&cs->gb);
}

static int load_common(call_state *cs, PyObject *graph, PyObject *options,
                       PyObject *num_fwd, PyObject *statics,
                       PyObject *mask, const char *mask_name, PyObject *force,
                       PyObject *fuse_a, PyObject *fuse_b)
{
    memset(cs, 0, sizeof *cs);
    long long nfwd;
    if (fxcut_int_arg(num_fwd, "num_fwd_outputs", 0, INT32_MAX, &nfwd) < 0 ||
        read_options(options, &cs->opt) < 0)
        return -1;
    cs->opt.num_fwd_outputs = (int32_t)nfwd;
    if (fxcut_load_graph(graph, &cs->gb) < 0)
        return -1;
    cs->graph_held = 1;
    const int32_t n = cs->gb.graph.n;
    Py_ssize_t n_force, n_a, n_b;
    if (fxcut_copy_optional(statics, "static_lifetime", 1, n, &cs->static_lifetime) < 0 ||
        fxcut_copy_optional(mask, mask_name, 1, n, &cs->mask) < 0 ||
        fxcut_copy_buffer(force, "force_save", 4, -1, 1, &cs->force,
                          &n_force) < 0 ||
        fxcut_copy_buffer(fuse_a, "fuse_a", 4, -1, 1, &cs->fuse_a, &n_a) < 0 ||
        fxcut_copy_buffer(fuse_b, "fuse_b", 4, n_a, 1, &cs->fuse_b, &n_b) < 0)
        return -1;
    if (n_force > INT32_MAX || n_a > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "force_save and fuse_a / fuse_b must have fewer than "
                        "2^31 entries");
        return -1;
    }
    cs->opt.static_lifetime = cs->static_lifetime;
    cs->opt.force_save = cs->force;
    cs->opt.n_force_save = (int32_t)n_force;
    cs->opt.fuse_pair_a = cs->fuse_a;
    cs->opt.fuse_pair_b = cs->fuse_b;
    cs->opt.n_fuse_pairs = (int32_t)n_a;

    /* One block for the result (and plan) arrays, at the core's sizes. */
    fxcut_result_sizes z = fxcut_result_sizes_for(n);
    size_t bytes = z.per_node * (2 * 8 + 3) + z.saved * 4 + z.chain * 4 +
                   z.candidates * (8 + 4);
    char *p = cs->block = malloc(bytes);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* 8-byte arrays first, then 4-byte, then bytes: each aligned. */
    void **slot[] = {(void **)&cs->r.dist_from_bw, (void **)&cs->r.weight,
        (void **)&cs->plan.memories, (void **)&cs->r.saved, (void **)&cs->r.chain,
        (void **)&cs->plan.candidates, (void **)&cs->r.tag,
        (void **)&cs->r.node_class, (void **)&cs->r.ban_reason};
    const size_t size[] = {z.per_node * 8, z.per_node * 8, z.candidates * 8,
        z.saved * 4, z.chain * 4, z.candidates * 4, z.per_node, z.per_node,
        z.per_node};
    for (size_t k = 0; k < sizeof size / sizeof size[0]; k++) {
        *slot[k] = p;
        p += size[k];
    }
    return 0;
}

/* Raises err; an infinite path carries its chain of node indices. */
static PyObject *raise_decide_error(PyObject *module, const fxcut_error *err,
                                    const fxcut_partition_result *r)
{
    if (err->code != FXCUT_E_UNBOUNDED)
        return fxcut_raise(module, err, NULL, NULL);
    PyObject *chain = PyList_New(r->n_chain);
    if (chain == NULL)
        return NULL;
    for (int32_t k = 0; k < r->n_chain; k++) {
        PyObject *v = PyLong_FromLong(r->chain[k]);
        if (v == NULL) {
            Py_DECREF(chain);
            return NULL;
        }
        PyList_SET_ITEM(chain, k, v);
    }
    fxcut_raise(module, err, "chain", chain);
    Py_DECREF(chain);
    return NULL;
}

/* The arguments of either entry point, as given. */
typedef struct {
    PyObject *graph, *options, *num_fwd, *statics, *mask, *force, *fuse_a,
        *fuse_b;
} call_args;

/* The decision is done with the graph's index arrays (fxcut.h): the copy
 * goes before the max-flow allocates.  Runs without the GIL: free() only. */
static void release_copy(void *arg)
{
    fxcut_graph_buffers *gb = arg;
    free(gb->copy);
    gb->copy = NULL;
}

/* One call: partition_decide (plan_mode 0: mask is dont_ban) or
 * budget_plan (plan_mode 1: mask is input_storage). */
static PyObject *run(PyObject *module, const call_args *a, int plan_mode,
                     uint8_t keep, double budget)
{
    call_state cs;
    PyObject *result = NULL;
    if (load_common(&cs, a->graph, a->options, a->num_fwd, a->statics, a->mask,
                    plan_mode ? "input_storage" : "dont_ban", a->force,
                    a->fuse_a, a->fuse_b) < 0)
        goto out;
    cs.opt.keep_network = keep;
    if (!plan_mode) {
        cs.opt.dont_ban = cs.mask;
        cs.opt.release_graph = release_copy;
        cs.opt.release_graph_arg = &cs.gb;
    }
    fxcut_budget_options bopt = {budget, cs.mask};
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_graph_validate(&cs.gb.graph, &err);
    if (rc == FXCUT_OK && plan_mode)
        rc = fxcut_budget_plan_decide(&cs.gb.graph, &cs.opt, &bopt, &cs.r,
                                      &cs.plan, &err);
    else if (rc == FXCUT_OK)
        rc = fxcut_partition_decide(&cs.gb.graph, &cs.opt, &cs.r, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        raise_decide_error(module, &err, &cs.r);
        goto out;
    }
    result = build_decision(module, &cs.r, cs.gb.graph.n);
    if (result != NULL && plan_mode)
        result = build_plan(module, result, &cs.plan);
out:
    call_state_free(&cs);
    return result;
}

PyObject *fxcut_py_partition_decide(PyObject *module, PyObject *args,
                                    PyObject *kwargs)
{
    static char *keywords[] = {"", "", "num_fwd_outputs", "keep_network",
                               "static_lifetime", "dont_ban", "force_save",
                               "fuse_a", "fuse_b", NULL};
    call_args a = {NULL, NULL, NULL, Py_None, Py_None, Py_None, Py_None,
                   Py_None};
    PyObject *keep_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "OO|$OOOOOOO:partition_decide", keywords,
                                     &a.graph, &a.options, &a.num_fwd,
                                     &keep_obj, &a.statics, &a.mask, &a.force,
                                     &a.fuse_a, &a.fuse_b))
        return NULL;
    /* "|$" makes every keyword optional; num_fwd_outputs is not. */
    if (a.num_fwd == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "partition_decide() missing required keyword-only "
                        "argument: 'num_fwd_outputs'");
        return NULL;
    }
    long long keep = FXCUT_KEEP_NONE;
    if (keep_obj != NULL &&
        fxcut_int_arg(keep_obj, "keep_network (KEEP_NONE, KEEP_NETWORK or "
                "KEEP_BUILD_ONLY)", FXCUT_KEEP_NONE, FXCUT_KEEP_MAX,
                &keep) < 0)
        return NULL;
    return run(module, &a, 0, (uint8_t)keep, 1.0);
}

PyObject *fxcut_py_budget_plan(PyObject *module, PyObject *args,
                               PyObject *kwargs)
{
    static char *keywords[] = {"", "", "num_fwd_outputs", "memory_budget",
                               "static_lifetime", "input_storage",
                               "force_save", "fuse_a", "fuse_b", NULL};
    call_args a = {NULL, NULL, NULL, Py_None, Py_None, Py_None, Py_None,
                   Py_None};
    PyObject *budget_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OOOOOOO:budget_plan",
                                     keywords, &a.graph, &a.options,
                                     &a.num_fwd, &budget_obj, &a.statics,
                                     &a.mask, &a.force, &a.fuse_a, &a.fuse_b))
        return NULL;
    if (a.num_fwd == NULL || budget_obj == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "budget_plan() missing required keyword-only argument: "
                     "'%s'", a.num_fwd == NULL ? "num_fwd_outputs"
                                               : "memory_budget");
        return NULL;
    }
    double budget = PyFloat_AsDouble(budget_obj);
    if (budget == -1.0 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError))
            fxcut_raise_from_current(PyExc_TypeError,
                                     "memory_budget must be a number, got "
                                     "%.100s", Py_TYPE(budget_obj)->tp_name);
        return NULL;
    }
    return run(module, &a, 1, FXCUT_KEEP_NONE, budget);
}

PyObject *fxcut_py_aggressive_options(PyObject *module, PyObject *args,
                                      PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"", NULL};
    PyObject *options;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:aggressive_options",
                                     keywords, &options))
        return NULL;
    fxcut_partition_options given, relaxed;
    memset(&given, 0, sizeof given);
    if (read_options(options, &given) < 0)
        return NULL;
    fxcut_budget_aggressive_options(&given, &relaxed);
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        uint8_t on = *((const uint8_t *)&relaxed + switches[k].offset);
        if (PyDict_SetItemString(out, switches[k].name,
                                 on ? Py_True : Py_False) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}
