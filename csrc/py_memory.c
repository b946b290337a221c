/*
 * py_memory.c -- binding of fxcut_memory_simulate: fxcut._C.memory_simulate.
 * The signature and the result are in the docstring.
 */
#include "py_binding.h"

#include <stdlib.h>
#include <string.h>

const char fxcut_py_memory_simulate_doc[] =
"memory_simulate($module, graph, /, *, num_fwd_outputs, saved,\n"
"                storage_of=None, flops=None, marks=None, timeline=False,\n"
"                fusion=None, fused_cost=None, iteration=None,\n"
"                realize=None, hold_saved=False, workspace=None,\n"
"                kernel_calls=False)\n"
"--\n\n"
"The live activation bytes of the forward and backward modules the\n"
"decision `saved` produces (the semantics: csrc/fxcut.h, above\n"
"fxcut_memory_options).\n\n"
"graph: a graph arrays object (fxcut.GraphArrays).  num_fwd_outputs: how\n"
"many of graph.outputs are forward outputs.  saved: int32 node indices.\n"
"storage_of: None or n int32, the node whose storage node i's value shares\n"
"(<= i).  flops: None or n int64, the cost of running each node once.\n"
"marks: None or n bytes of X_* bits (X_MUST_FW, X_COPY).\n"
"timeline: also return the schedule and the live bytes at each step.\n"
"fusion: None (the unfused model: the modules run op by op) or n bytes of\n"
"FUSE_* kinds (the inductor model: kernels, buffers, in-place updates).\n"
"fused_cost: None or n int64, a recomputed node's cost when inlined\n"
"(inductor model).  iteration: None or n int64, the iteration space of\n"
"a kernel inductor may fuse with its neighbours (0: never).  realize:\n"
"None or (reuse_reads, acc_reads, opcount),\n"
"inductor's realization thresholds (default 4, 8, 30).\n"
"hold_saved: the backward holds every saved value to its end (a program\n"
"whose backward keeps its arguments alive) instead of freeing each after\n"
"its last use.\n"
"workspace: None or n int64 (>= 0), bytes node i's kernel holds inside\n"
"itself while it runs, beyond its outputs (counted at its step).\n"
"kernel_calls: under the inductor model, the kernels between two extern\n"
"kernels run as one call (inductor's C++ backend): their buffers are\n"
"allocated before it and what they read last freed after it.\n"
"Returns a MemoryResult: peak_bytes, peak_step, fw_peak_bytes,\n"
"bw_peak_bytes, saved_bytes, recompute_flops, recompute_bytes,\n"
"n_recomputed, n_fw_steps, recomputed (memoryview 'B', n entries),\n"
"schedule ('i') and live_bytes ('q') (None without timeline).  Errors name\n"
"the node in the exception's `node`.\n";

static PyStructSequence_Field memory_fields[] = {
    {"peak_bytes", "max live activation bytes over forward then backward"},
    {"peak_step", "the schedule step of the peak, -1 when no step"},
    {"fw_peak_bytes", "the forward module's peak"},
    {"bw_peak_bytes", "the backward module's peak"},
    {"saved_bytes", "bytes of the saved values, storages counted once"},
    {"recompute_flops", "flops of the nodes the backward recomputes"},
    {"recompute_bytes", "bytes those nodes write"},
    {"n_recomputed", "how many nodes the backward recomputes"},
    {"n_fw_steps", "schedule[:n_fw_steps] is the forward"},
    {"recomputed", "1 where the backward recomputes the node (uint8)"},
    {"schedule", "None, or the node run at each step (int32)"},
    {"live_bytes", "None, or the bytes live while each step runs (int64)"},
    {NULL, NULL}
};

PyStructSequence_Desc fxcut_memory_desc = {
    "fxcut._C.MemoryResult", "What memory_simulate simulated.",
    memory_fields, 12
};

static int set_item(PyObject *seq, Py_ssize_t k, PyObject *value)
{
    if (value == NULL)
        return -1;
    PyStructSequence_SetItem(seq, k, value);
    return 0;
}

static PyObject *build_result(PyObject *module, const fxcut_memory_result *r,
                              int32_t n, int timeline)
{
    PyObject *d = PyStructSequence_New(fxcut_state(module)->memory_type);
    if (d == NULL)
        return NULL;
    PyObject *schedule = Py_None, *live = Py_None;
    if (timeline) {
        schedule = fxcut_typed_view(r->schedule, r->n_steps, "i", 4);
        live = fxcut_typed_view(r->live_bytes, r->n_steps, "q", 8);
    } else {
        Py_INCREF(schedule);
        Py_INCREF(live);
    }
    if (set_item(d, 10, schedule) < 0 || set_item(d, 11, live) < 0 ||
        set_item(d, 0, PyLong_FromLongLong(r->peak_bytes)) < 0 ||
        set_item(d, 1, PyLong_FromLong(r->peak_step)) < 0 ||
        set_item(d, 2, PyLong_FromLongLong(r->fw_peak_bytes)) < 0 ||
        set_item(d, 3, PyLong_FromLongLong(r->bw_peak_bytes)) < 0 ||
        set_item(d, 4, PyLong_FromLongLong(r->saved_bytes)) < 0 ||
        set_item(d, 5, PyLong_FromLongLong(r->recompute_flops)) < 0 ||
        set_item(d, 6, PyLong_FromLongLong(r->recompute_bytes)) < 0 ||
        set_item(d, 7, PyLong_FromLong(r->n_recomputed)) < 0 ||
        set_item(d, 8, PyLong_FromLong(r->n_fw_steps)) < 0 ||
        set_item(d, 9, fxcut_typed_view(r->recomputed, n, "B", 1)) < 0) {
        /* a slot left unset after a failed one holds NULL: dealloc skips it */
        if (schedule == NULL)
            Py_XDECREF(live);
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* num_fwd_outputs and saved are required (the "|$" format makes every
 * keyword optional); num_fwd_outputs in [0, INT32_MAX] into *out. */
static int required_args(PyObject *num_fwd, PyObject *saved_obj,
                         int32_t *out)
{
    if (num_fwd == NULL || saved_obj == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "memory_simulate() missing required keyword-only "
                     "argument: '%s'",
                     num_fwd == NULL ? "num_fwd_outputs" : "saved");
        return -1;
    }
    Py_ssize_t nfwd = PyNumber_AsSsize_t(num_fwd, PyExc_OverflowError);
    if (nfwd == -1 && PyErr_Occurred())
        return -1;
    if (nfwd < 0 || nfwd > INT32_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "num_fwd_outputs (%zd) must be between 0 and %d", nfwd,
                     (int)INT32_MAX);
        return -1;
    }
    *out = (int32_t)nfwd;
    return 0;
}

/* The arrays memory_simulate copies (GIL held) before the core runs
 * without the GIL; zeroed before copy_arrays, freed by free_arrays. */
typedef struct {
    void *saved, *storage, *flops, *marks, *workspace;
    Py_ssize_t n_saved;
    fxcut_fusion_args fa;
} memory_arrays;

static int copy_arrays(memory_arrays *a, Py_ssize_t n, PyObject *saved_obj,
                       PyObject *storage_obj, PyObject *flops_obj,
                       PyObject *marks_obj, PyObject *fusion_obj,
                       PyObject *fused_cost_obj, PyObject *iteration_obj,
                       PyObject *realize_obj, PyObject *workspace_obj)
{
    Py_ssize_t len = 0;
    if (fxcut_copy_buffer(saved_obj, "saved", 4, -1, 0, &a->saved,
                          &a->n_saved) < 0 ||
        (storage_obj != Py_None &&
         fxcut_copy_buffer(storage_obj, "storage_of", 4, n, 0, &a->storage,
                           &len) < 0) ||
        (flops_obj != Py_None &&
         fxcut_copy_buffer(flops_obj, "flops", 8, n, 0, &a->flops, &len) < 0) ||
        (marks_obj != Py_None &&
         fxcut_copy_buffer(marks_obj, "marks", 1, n, 0, &a->marks, &len) < 0) ||
        fxcut_copy_optional(workspace_obj, "workspace", 8, n,
                            &a->workspace) < 0 ||
        fxcut_fusion_load(fusion_obj, fused_cost_obj, iteration_obj,
                          realize_obj, n, &a->fa) < 0)
        return -1;
    if (a->n_saved > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "saved must have fewer than 2^31 entries");
        return -1;
    }
    return 0;
}

static void free_arrays(memory_arrays *a)
{
    void *const owned[] = {a->saved, a->storage, a->flops, a->marks,
                           a->workspace};
    fxcut_free_each(owned, sizeof owned / sizeof owned[0]);
    fxcut_fusion_release(&a->fa);
}

/* Runs the simulation without the GIL into a block for the result's
 * arrays and returns the MemoryResult; NULL with an exception. */
static PyObject *run_simulation(PyObject *module, const fxcut_graph *g,
                                const memory_arrays *a, int32_t nfwd,
                                int timeline, int hold_saved,
                                int kernel_calls)
{
    const int32_t n = g->n;
    /* recomputed (n), schedule (2n int32), live_bytes (2n int64) */
    size_t m = (size_t)n + 1;
    void *block = malloc(m * (2 * 8 + 2 * 4 + 1));
    if (block == NULL)
        return PyErr_NoMemory();
    fxcut_memory_result r;
    memset(&r, 0, sizeof r);
    r.live_bytes = (int64_t *)block;
    r.schedule = (int32_t *)(r.live_bytes + 2 * m);
    r.recomputed = (uint8_t *)(r.schedule + 2 * m);
    fxcut_memory_options opt = {
        .num_fwd_outputs = nfwd, .storage_of = a->storage,
        .flops = a->flops, .marks = a->marks, .fusion = a->fa.fusion,
        .fused_cost = a->fa.fused_cost, .iteration = a->fa.iteration,
        .realize_reuse_reads = a->fa.reuse_reads,
        .realize_acc_reads = a->fa.acc_reads,
        .realize_opcount = a->fa.opcount, .hold_saved = hold_saved,
        .workspace = a->workspace, .kernel_calls = kernel_calls};
    fxcut_error err = {0, -1, {0}};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fxcut_memory_simulate(g, &opt, a->saved, (int32_t)a->n_saved, &r,
                               &err);
    Py_END_ALLOW_THREADS
    PyObject *result = rc != FXCUT_OK ? fxcut_raise(module, &err, NULL, NULL)
                                      : build_result(module, &r, n, timeline);
    free(block);
    return result;
}

PyObject *fxcut_py_memory_simulate(PyObject *module, PyObject *args,
                                   PyObject *kwargs)
{
    static char *keywords[] = {"", "num_fwd_outputs", "saved", "storage_of",
                               "flops", "marks", "timeline", "fusion",
                               "fused_cost", "iteration", "realize",
                               "hold_saved", "workspace", "kernel_calls",
                               NULL};
    PyObject *graph = NULL, *num_fwd = NULL, *saved_obj = NULL;
    PyObject *storage_obj = Py_None, *flops_obj = Py_None;
    PyObject *marks_obj = Py_None, *fusion_obj = Py_None;
    PyObject *fused_cost_obj = Py_None, *realize_obj = Py_None;
    PyObject *iteration_obj = Py_None, *workspace_obj = Py_None;
    int timeline = 0, hold_saved = 0, kernel_calls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|$OOOOOpOOOOpOp:memory_simulate",
                                     keywords, &graph, &num_fwd, &saved_obj,
                                     &storage_obj, &flops_obj, &marks_obj,
                                     &timeline, &fusion_obj, &fused_cost_obj,
                                     &iteration_obj, &realize_obj,
                                     &hold_saved, &workspace_obj,
                                     &kernel_calls))
        return NULL;
    int32_t nfwd;
    if (required_args(num_fwd, saved_obj, &nfwd) < 0)
        return NULL;
    fxcut_graph_buffers gb;
    if (fxcut_load_graph(graph, &gb) < 0)
        return NULL;
    PyObject *result = NULL;
    memory_arrays a = {NULL, NULL, NULL, NULL, NULL, 0,
                       {NULL, NULL, NULL, 0, 0, 0}};
    if (copy_arrays(&a, gb.graph.n, saved_obj, storage_obj, flops_obj,
                    marks_obj, fusion_obj, fused_cost_obj, iteration_obj,
                    realize_obj, workspace_obj) == 0 &&
        fxcut_kernel_calls_option(kernel_calls, a.fa.fusion) == 0)
        result = run_simulation(module, &gb.graph, &a, nfwd, timeline,
                                hold_saved, kernel_calls);
    free_arrays(&a);
    fxcut_release_graph(&gb);
    return result;
}

/* fxcut_fusion_load: py_binding.h. */
int fxcut_fusion_load(PyObject *fusion, PyObject *fused_cost,
                      PyObject *iteration, PyObject *realize, Py_ssize_t n,
                      fxcut_fusion_args *out)
{
    out->fusion = out->fused_cost = out->iteration = NULL;
    out->reuse_reads = 4;
    out->acc_reads = 8;
    out->opcount = 30;
    if (fusion == Py_None && (fused_cost != Py_None ||
                              iteration != Py_None || realize != Py_None)) {
        PyErr_SetString(PyExc_ValueError,
                        "fused_cost, iteration and realize apply to the "
                        "inductor model only: pass fusion too");
        return -1;
    }
    if (fxcut_copy_optional(fusion, "fusion", 1, n, &out->fusion) < 0 ||
        fxcut_copy_optional(fused_cost, "fused_cost", 8, n,
                            &out->fused_cost) < 0 ||
        fxcut_copy_optional(iteration, "iteration", 8, n,
                            &out->iteration) < 0) {
        fxcut_fusion_release(out);
        return -1;
    }
    if (realize == Py_None)
        return 0;
    if (!PyTuple_Check(realize) || PyTuple_GET_SIZE(realize) != 3) {
        PyErr_Format(PyExc_TypeError,
                     "realize must be None or a tuple (reuse_reads, "
                     "acc_reads, opcount), got %.100s",
                     Py_TYPE(realize)->tp_name);
        fxcut_fusion_release(out);
        return -1;
    }
    static const char *names[3] = {"realize[0] (reuse_reads)",
                                   "realize[1] (acc_reads)",
                                   "realize[2] (opcount)"};
    int32_t *slots[3] = {&out->reuse_reads, &out->acc_reads, &out->opcount};
    for (int k = 0; k < 3; k++) {
        long long v;
        if (fxcut_int_arg(PyTuple_GET_ITEM(realize, k), names[k], 0,
                          INT32_MAX, &v) < 0) {
            fxcut_fusion_release(out);
            return -1;
        }
        *slots[k] = (int32_t)v;
    }
    return 0;
}

/* fxcut_kernel_calls_option: py_binding.h. */
int fxcut_kernel_calls_option(int kernel_calls, const void *fusion)
{
    if (kernel_calls && fusion == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "kernel_calls applies to the inductor model only: "
                        "pass fusion too");
        return -1;
    }
    return 0;
}

void fxcut_fusion_release(fxcut_fusion_args *a)
{
    free(a->fusion);
    free(a->fused_cost);
    free(a->iteration);
    a->fusion = a->fused_cost = a->iteration = NULL;
}
