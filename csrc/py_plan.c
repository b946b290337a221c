/*
 * py_plan.c -- binding of the peak-aware plan (plan.c).
 *
 * plan_simulate(arrays, *, num_fwd_outputs, role, saved, storage_of=None,
 *               flops=None) -> tuple
 * plan_frontier(arrays, *, num_fwd_outputs, role, storage_of=None,
 *               flops=None, seeds=None, exact_max_free=16,
 *               max_work=..., time_limit=1.0, max_points=1024,
 *               threads=0) -> tuple
 * Every array is copied (GIL held) before the core runs without the GIL.
 */
#include "py_binding.h"

#include <stdlib.h>
#include <string.h>

const char fxcut_py_plan_simulate_doc[] =
"plan_simulate($module, graph, /, *, num_fwd_outputs, role, saved,\n"
"              storage_of=None, flops=None, marks=None, fusion=None,\n"
"              fused_cost=None, iteration=None, realize=None,\n"
"              hold_saved=False, workspace=None, kernel_calls=False)\n"
"--\n\n"
"Simulates the forward then backward modules of the decision `saved` (n\n"
"bytes, nonzero = saved; read at FREE nodes).  role: n bytes of\n"
"PLAN_ROLE_*; storage_of: None or int32 (n), the node whose storage each\n"
"value shares; flops: None or int64 (n).  Returns (peak_bytes,\n"
"fw_peak_bytes, bw_peak_bytes, saved_bytes, recompute_flops, peak_step,\n"
"n_fw_steps, n_recomputed, saved (bytes, n), schedule (memoryview 'i'),\n"
"live_bytes (memoryview 'q')), all the memory model's (memory.c).\n"
"fusion, fused_cost, iteration, realize: the inductor model, as\n"
"memory_simulate's; hold_saved, workspace and kernel_calls as\n"
"memory_simulate's.";

const char fxcut_py_plan_frontier_doc[] =
"plan_frontier($module, graph, /, *, num_fwd_outputs, role,\n"
"              storage_of=None, flops=None, seeds=None, exact_max_free=16,\n"
"              max_work=4000000000, time_limit=1.0, max_points=1024,\n"
"              marks=None, fusion=None, fused_cost=None, iteration=None,\n"
"              realize=None, threads=0, hold_saved=False,\n"
"              workspace=None, kernel_calls=False)\n"
"--\n\n"
"The Pareto frontier (peak, recompute flops) of the decisions the search\n"
"finds from `seeds` (k * n bytes of saved masks), every decision when at\n"
"most exact_max_free FREE nodes can reach the backward.  Returns\n"
"(peak_bytes (memoryview 'q'), recompute_flops (memoryview 'q'), masks\n"
"(bytes, one n-byte saved set per point), n_free, n_evals, exact,\n"
"timed_out, work, out_of_work, lanes); points by peak ascending, cost\n"
"descending.\n"
"The search stops after max_work units (n + edges per decision\n"
"simulated: the same point on every machine); time_limit (seconds) is a\n"
"safety net only (timed_out).  threads: the decisions simulated at\n"
"once, each on a thread of its own (0 or 1: one; at most\n"
"PLAN_MAX_THREADS): the same result whatever the number.  hold_saved,\n"
"workspace, kernel_calls: the memory model's, as memory_simulate's.";

typedef struct {
    fxcut_graph_buffers gb;
    int loaded;
    fxcut_plan_options opt;
    void *role, *storage, *flops, *seeds, *saved, *marks, *workspace;
    fxcut_fusion_args fusion;
} plan_call;

static void plan_call_free(plan_call *c)
{
    void *p[] = {c->role, c->storage, c->flops, c->seeds, c->saved,
                 c->marks, c->workspace};
    fxcut_free_each(p, sizeof p / sizeof p[0]);
    fxcut_fusion_release(&c->fusion);
    if (c->loaded)
        fxcut_release_graph(&c->gb);
}

/* An optional int32 keyword (NULL: not given, *out kept). */
static int int32_option(PyObject *obj, const char *name, long long lo,
                        long long hi, int32_t *out)
{
    long long v;
    if (obj == NULL)
        return 0;
    if (fxcut_int_arg(obj, name, lo, hi, &v) < 0)
        return -1;
    *out = (int32_t)v;
    return 0;
}

/* "|$" makes every keyword optional; these are not. */
static int missing(const char *fn, PyObject *num_fwd, PyObject *role,
                   PyObject *saved)
{
    const char *name = num_fwd == NULL ? "num_fwd_outputs"
                       : role == NULL  ? "role"
                       : saved == NULL ? "saved"
                                       : NULL;
    if (name == NULL)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s() missing required keyword-only argument: '%s'", fn,
                 name);
    return -1;
}

static int load(plan_call *c, PyObject *graph, PyObject *num_fwd,
                PyObject *role, PyObject *storage, PyObject *flops,
                PyObject *marks, PyObject *fusion, PyObject *fused_cost,
                PyObject *iteration, PyObject *realize, int hold_saved)
{
    memset(c, 0, sizeof *c);
    c->opt.hold_saved = hold_saved;
    if (fxcut_load_graph(graph, &c->gb) < 0)
        return -1;
    c->loaded = 1;
    Py_ssize_t n = c->gb.graph.n, len;
    if (int32_option(num_fwd, "num_fwd_outputs", 0, INT32_MAX,
                   &c->opt.num_fwd_outputs) < 0)
        return -1;
    if (fxcut_copy_buffer(role, "role", 1, n, 0, &c->role, &len) < 0 ||
        fxcut_copy_optional(storage, "storage_of", 4, n, &c->storage) < 0 ||
        fxcut_copy_optional(flops, "flops", 8, n, &c->flops) < 0 ||
        fxcut_copy_optional(marks, "marks", 1, n, &c->marks) < 0 ||
        fxcut_fusion_load(fusion, fused_cost, iteration, realize, n,
                          &c->fusion) < 0)
        return -1;
    c->opt.fusion = c->fusion.fusion;
    c->opt.fused_cost = c->fusion.fused_cost;
    c->opt.iteration = c->fusion.iteration;
    c->opt.realize_reuse_reads = c->fusion.reuse_reads;
    c->opt.realize_acc_reads = c->fusion.acc_reads;
    c->opt.realize_opcount = c->fusion.opcount;
    c->opt.marks = c->marks;
    c->opt.storage_of = c->storage;
    c->opt.flops = c->flops;
    c->opt.role = c->role;
    return 0;
}

/* The optional workspace (None: none) and kernel_calls keywords into
 * c->opt (after load: kernel_calls needs the inductor model). */
static int load_workspace(plan_call *c, PyObject *workspace, int kernel_calls)
{
    if (fxcut_copy_optional(workspace, "workspace", 8, c->gb.graph.n,
                            &c->workspace) < 0 ||
        fxcut_kernel_calls_option(kernel_calls, c->opt.fusion) < 0)
        return -1;
    c->opt.workspace = c->workspace;
    c->opt.kernel_calls = kernel_calls;
    return 0;
}

/* Simulates c->saved without the GIL into buffers for 2 (n + 1) steps and
 * returns plan_simulate's result tuple; NULL with an exception. */
static PyObject *run_simulate(PyObject *module, plan_call *c)
{
    Py_ssize_t n = c->gb.graph.n;
    PyObject *result = NULL;
    int32_t *sched = malloc(2 * ((size_t)n + 1) * sizeof *sched);
    int64_t *live = malloc(2 * ((size_t)n + 1) * sizeof *live);
    PyObject *saved_out = PyBytes_FromStringAndSize(NULL, n);
    if (sched == NULL || live == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if (saved_out == NULL)
        goto out;
    fxcut_plan_eval r;
    memset(&r, 0, sizeof r);
    r.saved = (uint8_t *)PyBytes_AS_STRING(saved_out);
    r.schedule = sched;
    r.live_bytes = live;
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_plan_simulate(&c->gb.graph, &c->opt, c->saved, &r, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        fxcut_raise(module, &err, NULL, NULL);
        goto out;
    }
    result = Py_BuildValue("(LLLLLiiiONN)", (long long)r.peak_bytes,
                           (long long)r.fw_peak_bytes,
                           (long long)r.bw_peak_bytes,
                           (long long)r.saved_bytes,
                           (long long)r.recompute_flops, (int)r.peak_step,
                           (int)r.n_fw_steps, (int)r.n_recomputed, saved_out,
                           fxcut_typed_view(sched, r.n_steps, "i", 4),
                           fxcut_typed_view(live, r.n_steps, "q", 8));
out:
    Py_XDECREF(saved_out);
    free(sched);
    free(live);
    return result;
}

PyObject *fxcut_py_plan_simulate(PyObject *module, PyObject *args,
                                 PyObject *kwargs)
{
    static char *keywords[] = {"", "num_fwd_outputs", "role", "saved",
                               "storage_of", "flops", "marks", "fusion",
                               "fused_cost", "iteration", "realize",
                               "hold_saved", "workspace", "kernel_calls",
                               NULL};
    PyObject *marks = Py_None, *fusion = Py_None, *fused_cost = Py_None,
             *realize = Py_None, *iteration = Py_None, *workspace = Py_None;
    PyObject *graph, *num_fwd = NULL, *role = NULL, *saved = NULL,
                     *storage = Py_None, *flops = Py_None;
    int hold_saved = 0, kernel_calls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|$OOOOOOOOOOpOp:plan_simulate",
                                     keywords, &graph, &num_fwd, &role,
                                     &saved, &storage, &flops, &marks,
                                     &fusion, &fused_cost, &iteration,
                                     &realize, &hold_saved, &workspace,
                                     &kernel_calls))
        return NULL;
    if (missing("plan_simulate", num_fwd, role, saved) < 0)
        return NULL;
    plan_call c;
    PyObject *result = NULL;
    Py_ssize_t len;
    if (load(&c, graph, num_fwd, role, storage, flops, marks, fusion,
             fused_cost, iteration, realize, hold_saved) == 0 &&
        load_workspace(&c, workspace, kernel_calls) == 0 &&
        fxcut_copy_buffer(saved, "saved", 1, c.gb.graph.n, 0, &c.saved,
                          &len) == 0)
        result = run_simulate(module, &c);
    plan_call_free(&c);
    return result;
}

/* The search's limits into c->opt, checked; -1 with the error naming the
 * one out of range. */
static int search_limits(plan_call *c, PyObject *exact_obj, PyObject *points_obj,
                         PyObject *threads_obj, long long max_work,
                         double time_limit)
{
    c->opt.exact_max_free = 16;
    c->opt.max_work = (int64_t)max_work;
    c->opt.max_points = 1024;
    c->opt.time_limit_s = time_limit;
    if (int32_option(exact_obj, "exact_max_free", 0, 30,
                     &c->opt.exact_max_free) < 0 ||
        int32_option(points_obj, "max_points", 1, 1 << 20,
                     &c->opt.max_points) < 0 ||
        int32_option(threads_obj, "threads", 0, FXCUT_PLAN_MAX_THREADS,
                     &c->opt.threads) < 0)
        return -1;
    if (max_work < 1) {
        PyErr_Format(PyExc_ValueError, "max_work = %lld must be at least 1",
                     max_work);
        return -1;
    }
    if (!(time_limit > 0.0)) {
        PyErr_Format(PyExc_ValueError, "time_limit = %g must be positive",
                     time_limit);
        return -1;
    }
    return 0;
}

/* The seeds (one saved mask of n bytes each, concatenated) into c->opt;
 * -1 with a ValueError when their length is no multiple of n. */
static int load_seeds(plan_call *c, PyObject *seeds)
{
    Py_ssize_t n = c->gb.graph.n, len;
    if (fxcut_copy_buffer(seeds, "seeds", 1, -1, 1, &c->seeds, &len) < 0)
        return -1;
    if (n > 0 ? len % n != 0 : len != 0) {
        PyErr_Format(PyExc_ValueError,
                     "seeds has %zd bytes, not a multiple of the %zd nodes",
                     len, n);
        return -1;
    }
    c->opt.seeds = c->seeds;
    c->opt.n_seeds = n > 0 ? (int32_t)(len / n) : 0;
    return 0;
}

/* Runs the search without the GIL into buffers for max_points points and
 * returns its result tuple; NULL with an exception. */
static PyObject *run_frontier(PyObject *module, plan_call *c)
{
    Py_ssize_t n = c->gb.graph.n;
    size_t cap = (size_t)c->opt.max_points;
    PyObject *result = NULL, *masks = NULL;
    int64_t *peaks = malloc(cap * sizeof *peaks);
    int64_t *costs = malloc(cap * sizeof *costs);
    if (peaks == NULL || costs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if ((size_t)n > (size_t)PY_SSIZE_T_MAX / cap) {
        PyErr_SetString(PyExc_ValueError, "max_points * n is too large");
        goto out;
    }
    masks = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cap * (size_t)n));
    if (masks == NULL)
        goto out;
    fxcut_plan_frontier f;
    memset(&f, 0, sizeof f);
    f.peak_bytes = peaks;
    f.recompute_flops = costs;
    f.masks = (uint8_t *)PyBytes_AS_STRING(masks);
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_plan_frontier_search(&c->gb.graph, &c->opt, &f, &err);
    Py_END_ALLOW_THREADS
    if (rc != FXCUT_OK) {
        fxcut_raise(module, &err, NULL, NULL);
        goto out;
    }
    if (_PyBytes_Resize(&masks, (Py_ssize_t)f.n_points * n) < 0)
        goto out;
    result = Py_BuildValue("(NNOiLOOLOi)",
                           fxcut_typed_view(peaks, f.n_points, "q", 8),
                           fxcut_typed_view(costs, f.n_points, "q", 8), masks,
                           (int)f.n_free, (long long)f.n_evals,
                           f.exact ? Py_True : Py_False,
                           f.timed_out ? Py_True : Py_False,
                           (long long)f.work,
                           f.out_of_work ? Py_True : Py_False,
                           (int)f.lanes);
out:
    Py_XDECREF(masks);
    free(peaks);
    free(costs);
    return result;
}

PyObject *fxcut_py_plan_frontier(PyObject *module, PyObject *args,
                                 PyObject *kwargs)
{
    static char *keywords[] = {"", "num_fwd_outputs", "role", "storage_of",
                               "flops", "seeds", "exact_max_free",
                               "max_work", "time_limit", "max_points",
                               "marks", "fusion", "fused_cost", "iteration",
                               "realize", "threads", "hold_saved",
                               "workspace", "kernel_calls", NULL};
    PyObject *marks = Py_None, *fusion = Py_None, *fused_cost = Py_None,
             *realize = Py_None, *iteration = Py_None, *threads_obj = NULL,
             *workspace = Py_None;
    PyObject *graph, *num_fwd = NULL, *role = NULL, *storage = Py_None,
                     *flops = Py_None, *seeds = Py_None, *exact_obj = NULL,
                     *points_obj = NULL;
    long long max_work = 4000000000LL;
    double time_limit = 1.0;
    int hold_saved = 0, kernel_calls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|$OOOOOOLdOOOOOOOpOp:plan_frontier",
                                     keywords, &graph, &num_fwd, &role,
                                     &storage, &flops, &seeds, &exact_obj,
                                     &max_work, &time_limit, &points_obj,
                                     &marks, &fusion, &fused_cost, &iteration,
                                     &realize, &threads_obj, &hold_saved,
                                     &workspace, &kernel_calls))
        return NULL;
    if (missing("plan_frontier", num_fwd, role, Py_None) < 0)
        return NULL;
    plan_call c;
    PyObject *result = NULL;
    if (load(&c, graph, num_fwd, role, storage, flops, marks, fusion,
             fused_cost, iteration, realize, hold_saved) == 0 &&
        load_workspace(&c, workspace, kernel_calls) == 0 &&
        search_limits(&c, exact_obj, points_obj, threads_obj, max_work,
                      time_limit) == 0 &&
        load_seeds(&c, seeds) == 0)
        result = run_frontier(module, &c);
    plan_call_free(&c);
    return result;
}
