/*
 * plan.c -- the peak-aware memory plan: which forward values to save so
 * that the simulated peak of activation memory stays under a limit at the
 * least recompute cost.
 *
 * The decision space (fxcut.h, enum fxcut_plan_role): a saved mask over the
 * FREE nodes (SAVE nodes always saved, RECOMPUTE ones never); a mask the
 * memory model finds unrealisable is no candidate.
 *
 * The simulation is the memory model's, one walk (memory.c,
 * fxcut_memsim_eval: torch's extraction and backward order, the liveness
 * of both modules; its semantics above fxcut_memory_options in fxcut.h).
 * A decision hands it the SAVE nodes, the saved FREE nodes and the forward
 * inputs as saved; the model keeps those the backward reads.  The search
 * picks its moves from the model's own schedule of the last evaluation
 * (the step of each node, the last backward step reading each storage).
 *
 * The search: the Pareto frontier of (peak, recompute flops) over the
 * decisions it simulates: the seeds (torch's own decisions), a descent on
 * the peak from each (toggling the FREE values live at the peak step), a
 * descent on the cost from each frontier point (saving recomputed values
 * while the peak stays), or, when few FREE nodes can reach the backward,
 * every decision (Gray code order, one toggle per step).  It stops when
 * its work budget is spent (max_work: n + edges per simulated decision, so
 * the same point on every machine; the wall clock is a safety net).  The
 * caller picks the cheapest point under its peak limit, so the peak it
 * gets is monotonic in the limit, across calls too.
 */
#include "fxcut_internal.h"
#include "memory_internal.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

typedef struct {
    const fxcut_graph *g;
    const fxcut_plan_options *opt;
    int32_t n;
    fxcut_memory_options mopt;
    fxcut_memsim *memsim; /* the memory model: the one simulation */
    uint8_t *in_mask;     /* n: the saved mask handed to it */
    uint8_t *saved;       /* n: its saved set of the last evaluation */
    uint8_t *recomputed;  /* n: its recomputed nodes (last evaluation) */
    int32_t *sched;       /* 2n: its schedule (last evaluation) */
    int64_t *live_at;     /* 2n: its live bytes per step */
    int32_t *step_of;     /* n: a node's step in that schedule (the
                             backward's for a node in both modules) */
    int32_t *last_bw;     /* n, by storage root: the last backward step
                             reading it (-1: none) */
    int32_t *tmp;         /* n */
    int64_t n_evals;
    int64_t work;         /* units spent: n + edges per evaluation */
    int64_t eval_work;
} plan_sim;

static void sim_free(plan_sim *s)
{
    void *p[] = {s->in_mask, s->saved, s->recomputed, s->sched, s->live_at,
                 s->step_of, s->last_bw, s->tmp};
    fxcut_free_each(p, sizeof p / sizeof p[0]);
    if (s->memsim != NULL)
        fxcut_memsim_free(s->memsim);
    memset(s, 0, sizeof *s);
}

/* Per node: a plan role (INPUT exactly for placeholders and get_attr
 * nodes), storage_of naming the node or an earlier one, flops >= 0. */
static int check_node_options(const fxcut_graph *g,
                              const fxcut_plan_options *opt, fxcut_error *err)
{
    for (int32_t i = 0; i < g->n; i++) {
        if (opt->role[i] > FXCUT_ROLE_MAX)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "role[%d] = %d is not a plan role (0..%d)",
                              (int)i, (int)opt->role[i], FXCUT_ROLE_MAX);
        int placeholder = g->kind[i] == FXCUT_PLACEHOLDER ||
                          g->kind[i] == FXCUT_GET_ATTR;
        if (placeholder != (opt->role[i] == FXCUT_ROLE_INPUT))
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "role[%d] = %d: placeholders and get_attr "
                              "nodes, and only they, have role INPUT",
                              (int)i, (int)opt->role[i]);
        if (opt->storage_of != NULL &&
            (opt->storage_of[i] < 0 || opt->storage_of[i] > i))
            return fxcut_fail(err, FXCUT_E_INDEX, i,
                              "storage_of[%d] = %d must name node %d or an "
                              "earlier one", (int)i, (int)opt->storage_of[i],
                              (int)i);
        if (opt->flops != NULL && opt->flops[i] < 0)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "flops[%d] = %lld is negative", (int)i,
                              (long long)opt->flops[i]);
    }
    return FXCUT_OK;
}

/* The search's own options (plan_frontier). */
static int check_search_options(const fxcut_plan_options *opt,
                                fxcut_error *err)
{
    if (opt->n_seeds < 0 || (opt->n_seeds > 0 && opt->seeds == NULL))
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "n_seeds %d without seeds", (int)opt->n_seeds);
    if (opt->exact_max_free < 0 || opt->exact_max_free > 30)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "exact_max_free %d is outside [0, 30]",
                          (int)opt->exact_max_free);
    if (!(opt->time_limit_s > 0.0))
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "time_limit_s must be positive");
    if (opt->max_work < 1)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "max_work %lld must be at least 1",
                          (long long)opt->max_work);
    if (opt->max_points < 1)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "max_points %d must be at least 1",
                          (int)opt->max_points);
    if (opt->threads < 0 || opt->threads > FXCUT_PLAN_MAX_THREADS)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "threads %d is outside [0, %d]", (int)opt->threads,
                          FXCUT_PLAN_MAX_THREADS);
    return FXCUT_OK;
}

static int check_options(const fxcut_graph *g, const fxcut_plan_options *opt,
                         int search, fxcut_error *err)
{
    if (opt->num_fwd_outputs < 0 || opt->num_fwd_outputs > g->n_outputs)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "num_fwd_outputs %d is outside [0, %d] (the "
                          "output node's leaves)", (int)opt->num_fwd_outputs,
                          (int)g->n_outputs);
    if (opt->role == NULL)
        return fxcut_fail(err, FXCUT_E_INVALID, -1, "role is required");
    int rc = check_node_options(g, opt, err);
    if (rc != FXCUT_OK)
        return rc;
    rc = fxcut_check_fusion(g, opt->fusion, opt->fused_cost, opt->iteration,
                            opt->realize_reuse_reads, opt->realize_acc_reads,
                            opt->realize_opcount, err);
    if (rc != FXCUT_OK)
        return rc;
    return search ? check_search_options(opt, err) : FXCUT_OK;
}

static int sim_new(const fxcut_graph *g, const fxcut_plan_options *opt,
                   plan_sim *s, fxcut_error *err)
{
    memset(s, 0, sizeof *s);
    int32_t n = g->n;
    size_t un = (size_t)n + 1;
    s->g = g;
    s->opt = opt;
    s->n = n;
    s->eval_work = (int64_t)n + (int64_t)g->in_ptr[n] + 1;
    s->in_mask = malloc(un);
    s->saved = malloc(un);
    s->recomputed = malloc(un);
    s->sched = malloc(2 * un * sizeof *s->sched);
    s->live_at = malloc(2 * un * sizeof *s->live_at);
    s->step_of = malloc(un * sizeof *s->step_of);
    s->last_bw = malloc(un * sizeof *s->last_bw);
    s->tmp = malloc(un * sizeof *s->tmp);
    if (!s->in_mask || !s->saved || !s->recomputed || !s->sched ||
        !s->live_at || !s->step_of || !s->last_bw || !s->tmp) {
        sim_free(s);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the plan's simulator (%d nodes)",
                          (int)n);
    }
    s->mopt.num_fwd_outputs = opt->num_fwd_outputs;
    s->mopt.storage_of = opt->storage_of;
    s->mopt.flops = opt->flops;
    s->mopt.marks = opt->marks;
    s->mopt.fusion = opt->fusion;
    s->mopt.fused_cost = opt->fused_cost;
    s->mopt.iteration = opt->iteration;
    s->mopt.realize_reuse_reads = opt->realize_reuse_reads;
    s->mopt.realize_acc_reads = opt->realize_acc_reads;
    s->mopt.realize_opcount = opt->realize_opcount;
    s->mopt.hold_saved = opt->hold_saved;
    s->mopt.kernel_calls = opt->kernel_calls;
    s->mopt.workspace = opt->workspace;
    int rc = fxcut_memsim_new(g, &s->mopt, &s->memsim, err);
    if (rc != FXCUT_OK)
        sim_free(s);
    return rc;
}

/* The saved mask a decision hands the memory model: the SAVE nodes, the
 * saved FREE ones, and the forward's inputs (the model keeps those the
 * backward reads, as torch lists them among the saved values). */
static void model_mask(plan_sim *s, const uint8_t *mask)
{
    const fxcut_graph *g = s->g;
    const uint8_t *role = s->opt->role;
    for (int32_t i = 0; i < s->n; i++) {
        uint8_t m;
        switch (role[i]) {
        case FXCUT_ROLE_SAVE: m = 1; break;
        case FXCUT_ROLE_FREE: m = mask[i] != 0; break;
        case FXCUT_ROLE_INPUT:
            m = (uint8_t)(g->kind[i] == FXCUT_GET_ATTR || fxcut_is_input(g, i));
            break;
        default: m = 0; break;
        }
        s->in_mask[i] = m;
    }
}

/* Simulates mask with the memory model; fills r and, for the search, the
 * model's schedule read back per node (s->step_of, s->last_bw). */
static int sim_eval(plan_sim *s, const uint8_t *mask, fxcut_plan_eval *r,
                    fxcut_error *err)
{
    const fxcut_graph *g = s->g;
    int32_t n = s->n;
    s->n_evals++;
    s->work += s->eval_work;
    model_mask(s, mask);
    fxcut_memory_result m;
    memset(&m, 0, sizeof m);
    m.schedule = s->sched;
    m.live_bytes = s->live_at;
    m.recomputed = s->recomputed;
    int rc = fxcut_memsim_eval(s->memsim, s->in_mask, &m, err);
    if (rc != FXCUT_OK)
        return rc;
    fxcut_memsim_saved(s->memsim, s->saved);
    for (int32_t i = 0; i < n; i++) {
        s->step_of[i] = -1;
        s->last_bw[i] = -1;
    }
    for (int32_t t = 0; t < m.n_steps; t++) {
        int32_t v = s->sched[t];
        s->step_of[v] = t;
        if (t < m.n_fw_steps)
            continue;
        s->last_bw[fxcut_memsim_root(s->memsim, v)] = t;
        for (int32_t e = g->in_ptr[v]; e < g->in_ptr[v + 1]; e++)
            s->last_bw[fxcut_memsim_root(s->memsim, g->in_idx[e])] = t;
    }
    r->peak_bytes = m.peak_bytes;
    r->fw_peak_bytes = m.fw_peak_bytes;
    r->bw_peak_bytes = m.bw_peak_bytes;
    r->saved_bytes = m.saved_bytes;
    r->recompute_flops = m.recompute_flops;
    r->peak_step = m.peak_step;
    r->n_fw_steps = m.n_fw_steps;
    r->n_steps = m.n_steps;
    r->n_recomputed = m.n_recomputed;
    if (r->saved != NULL)
        memcpy(r->saved, s->saved, (size_t)n);
    if (r->schedule != NULL)
        memcpy(r->schedule, s->sched, (size_t)m.n_steps * sizeof *s->sched);
    if (r->live_bytes != NULL)
        memcpy(r->live_bytes, s->live_at,
               (size_t)m.n_steps * sizeof *s->live_at);
    return FXCUT_OK;
}

int fxcut_plan_simulate(const fxcut_graph *g, const fxcut_plan_options *opt,
                        const uint8_t *saved_mask, fxcut_plan_eval *res,
                        fxcut_error *err)
{
    int rc = fxcut_graph_validate(g, err);
    if (rc == FXCUT_OK)
        rc = check_options(g, opt, 0, err);
    if (rc != FXCUT_OK)
        return rc;
    if (saved_mask == NULL)
        return fxcut_fail(err, FXCUT_E_INVALID, -1, "saved_mask is required");
    plan_sim s;
    rc = sim_new(g, opt, &s, err);
    if (rc != FXCUT_OK)
        return rc;
    rc = sim_eval(&s, saved_mask, res, err);
    sim_free(&s);
    return rc;
}

/* ---- the frontier ------------------------------------------------------ */

typedef struct {
    int32_t cap, len, n;
    int64_t *peak, *cost;
    int32_t *slot;        /* point k's mask is masks + slot[k] * n */
    int32_t *free_slots;
    int32_t n_free_slots;
    uint8_t *masks;
} frontier;

static void frontier_free(frontier *f)
{
    void *p[] = {f->peak, f->cost, f->slot, f->free_slots, f->masks};
    fxcut_free_each(p, sizeof p / sizeof p[0]);
}

static int frontier_new(frontier *f, int32_t cap, int32_t n, fxcut_error *err)
{
    memset(f, 0, sizeof *f);
    f->cap = cap;
    f->n = n;
    size_t uc = (size_t)cap;
    f->peak = malloc(uc * sizeof *f->peak);
    f->cost = malloc(uc * sizeof *f->cost);
    f->slot = malloc(uc * sizeof *f->slot);
    f->free_slots = malloc(uc * sizeof *f->free_slots);
    f->masks = malloc(uc * ((size_t)n + 1));
    if (!f->peak || !f->cost || !f->slot || !f->free_slots || !f->masks) {
        frontier_free(f);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for a frontier of %d points of %d "
                          "nodes", (int)cap, (int)n);
    }
    for (int32_t k = 0; k < cap; k++)
        f->free_slots[k] = cap - 1 - k;
    f->n_free_slots = cap;
    return FXCUT_OK;
}

/* The first point with a peak above peak. */
static int32_t frontier_above(const frontier *f, int64_t peak)
{
    int32_t lo = 0, hi = f->len;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (f->peak[mid] <= peak)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Does a point dominate (peak, cost)? */
static int frontier_dominated(const frontier *f, int64_t peak, int64_t cost)
{
    int32_t lo = frontier_above(f, peak);
    return lo > 0 && f->cost[lo - 1] <= cost;
}

/* Adds (peak, cost) with the saved set mask unless a point dominates it;
 * drops the points it dominates.  Returns 1 when added. */
static int frontier_add(frontier *f, const uint8_t *mask, int64_t peak,
                        int64_t cost)
{
    int32_t lo = frontier_above(f, peak);
    if (lo > 0 && f->cost[lo - 1] <= cost)
        return 0;
    /* points with peak >= peak and cost >= cost: from pos on */
    int32_t pos = lo;
    while (pos > 0 && f->peak[pos - 1] == peak)
        pos--; /* equal peak, higher cost: dominated */
    int32_t end = pos;
    while (end < f->len && f->cost[end] >= cost)
        end++;
    for (int32_t k = pos; k < end; k++)
        f->free_slots[f->n_free_slots++] = f->slot[k];
    int32_t removed = end - pos;
    if (removed == 0 && f->n_free_slots == 0)
        return 0; /* full */
    int32_t tail = f->len - end;
    memmove(f->peak + pos + 1, f->peak + end, (size_t)tail * sizeof *f->peak);
    memmove(f->cost + pos + 1, f->cost + end, (size_t)tail * sizeof *f->cost);
    memmove(f->slot + pos + 1, f->slot + end, (size_t)tail * sizeof *f->slot);
    f->len = pos + 1 + tail;
    int32_t sl = f->free_slots[--f->n_free_slots];
    f->peak[pos] = peak;
    f->cost[pos] = cost;
    f->slot[pos] = sl;
    memcpy(f->masks + (size_t)sl * (size_t)f->n, mask, (size_t)f->n);
    return 1;
}

/* ---- the search -------------------------------------------------------- */

typedef struct {
    plan_sim sim;
    frontier front;
    uint8_t *mask;        /* current decision */
    uint8_t *norm;        /* a decision's saved set as the model keeps it */
    int32_t *cand;        /* candidate FREE nodes */
    int64_t *key;
    struct timespec start;
    double limit;
    int timed_out;        /* the wall-clock safety net stopped it */
    int out_of_work;      /* the work budget stopped it */
    int rc;               /* the first error of an evaluation */
    fxcut_error *err;
    struct lanes *lanes;  /* NULL: one lane, the caller's */
} search;

static double elapsed(const search *q)
{
    struct timespec now;
    timespec_get(&now, TIME_UTC);
    return (double)(now.tv_sec - q->start.tv_sec) +
           1e-9 * (double)(now.tv_nsec - q->start.tv_nsec);
}

/* The search stops when its work budget is spent: a count of simulated
 * nodes and edges, so that two calls on the same graph stop at the same
 * point whatever the machine's load.  The wall clock is a safety net only
 * (a search it stops is flagged timed_out). */
static int out_of_time(search *q)
{
    if (!q->out_of_work && q->sim.work >= q->sim.opt->max_work)
        q->out_of_work = 1;
    if (!q->timed_out && (q->sim.n_evals & 15) == 0 && elapsed(q) > q->limit)
        q->timed_out = 1;
    return q->out_of_work || q->timed_out || q->rc != FXCUT_OK;
}

/* Evaluates q->mask, adds it to the frontier, returns (peak, cost).  The
 * frontier keeps the saved set the model kept (the values the backward
 * reads), and the saved FREE values it dropped that are IMPURE: those
 * change the backward (unsaved, the backward's dead-code elimination keeps
 * them wherever they can be computed), so every point's mask simulates to
 * exactly the point. */
static void take_eval(search *q, const plan_sim *s, const uint8_t *mask,
                      int rc, const fxcut_error *err, fxcut_plan_eval *r)
{
    if (rc != FXCUT_OK) {
        /* a decision the memory model finds unrealisable is no candidate;
         * any other error ends the search */
        if (err != q->err)
            *q->err = *err;
        if (rc != FXCUT_E_INVALID && q->rc == FXCUT_OK)
            q->rc = rc;
        r->peak_bytes = INT64_MAX;
        r->recompute_flops = INT64_MAX;
        return;
    }
    if (frontier_dominated(&q->front, r->peak_bytes, r->recompute_flops))
        return;
    for (int32_t i = 0; i < s->n; i++)
        q->norm[i] = (uint8_t)(s->saved[i] ||
                               (s->opt->role[i] == FXCUT_ROLE_FREE &&
                                mask[i] &&
                                (s->g->flags[i] & FXCUT_F_IMPURE) != 0));
    frontier_add(&q->front, q->norm, r->peak_bytes, r->recompute_flops);
}

static void evaluate(search *q, fxcut_plan_eval *r)
{
    memset(r, 0, sizeof *r);
    int rc = sim_eval(&q->sim, q->mask, r, q->err);
    take_eval(q, &q->sim, q->mask, rc, q->err, r);
}

static int better(const fxcut_plan_eval *a, const fxcut_plan_eval *b)
{
    return a->peak_bytes < b->peak_bytes ||
           (a->peak_bytes == b->peak_bytes &&
            a->recompute_flops < b->recompute_flops);
}

/* Orders candidates by q->key (indexed by node), largest first. */
static int key_greater(const void *keys, int32_t a, int32_t b)
{
    const int64_t *k = keys;
    return k[a] > k[b];
}

/* The FREE nodes the current decision's peak depends on: saved ones live
 * at the peak step, recomputed ones live there; largest first. */
static int32_t peak_candidates(search *q, const fxcut_plan_eval *r)
{
    plan_sim *s = &q->sim;
    const uint8_t *role = s->opt->role;
    int32_t m = 0, t = r->peak_step;
    int in_bw = t >= r->n_fw_steps;
    for (int32_t i = 0; i < s->n; i++) {
        if (role[i] != FXCUT_ROLE_FREE)
            continue;
        int32_t rt = fxcut_memsim_root(s->memsim, i);
        int take = 0;
        if (s->saved[i]) {
            take = in_bw ? s->last_bw[rt] >= t
                         : s->step_of[i] >= 0 && s->step_of[i] <= t;
        } else if (s->recomputed[i] && in_bw) {
            take = s->step_of[i] <= t && s->last_bw[rt] >= t;
        }
        if (take) {
            q->cand[m] = i;
            q->key[i] = fxcut_memsim_storage_bytes(s->memsim, rt);
            m++;
        }
    }
    fxcut_sort_desc_stable(q->cand, s->tmp, m, key_greater, q->key);
    return m;
}

/* ---- lanes -------------------------------------------------------------
 *
 * A descent's sweep tries toggles of q->mask in a fixed order and takes the
 * first whose decision is better.  With lanes, the next toggles of the sweep
 * are simulated at once: each round hands each lane a run of consecutive
 * toggles (lane 0 runs on the caller's thread, each other lane on a thread
 * of its own, each with a simulator of its own; the graph and the options
 * are only read), and a lane stops at the first decision better than the
 * current one.  The results are then taken in the sweep's order exactly as
 * one lane takes them: each counts its work, joins the frontier and may be
 * the one taken; those after it are dropped uncounted.  So the frontier, the
 * work and every decision are the same whatever the number of lanes; only
 * the wall time is shorter.  The runs start at one toggle per lane after a
 * decision is taken and double, up to LANE_RUN, while none is. */

#define LANE_RUN 8

typedef struct {
    plan_sim sim;
    uint8_t *mask;
    uint8_t *norm;        /* LANE_RUN * n: each result's saved set */
    int32_t first, count; /* its run: toggles first .. first+count-1 */
    int32_t done;         /* simulated (it stops after a better one) */
    fxcut_plan_eval r[LANE_RUN];
    int rc[LANE_RUN];
    fxcut_error err[LANE_RUN];
} lane;

struct lanes {
    lane *lane;
    int32_t n_lanes;      /* lane 0 is the caller's */
    pthread_t *thread;    /* thread[k - 1] runs lane k */
    int32_t n_threads;    /* started */
    int sync_ready;       /* mu, go and done initialised */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int64_t round;        /* bumped for each round */
    int32_t batch;        /* lanes 0 .. batch-1 take part in this round */
    int32_t pending;      /* worker lanes of the round not done yet */
    int stop;
    /* the round: toggles (ta[k], tb[k]) of base, better than cur */
    const uint8_t *base;
    const int32_t *ta, *tb;
    fxcut_plan_eval cur;
};

typedef struct {
    struct lanes *pool;
    int32_t index;
} lane_arg;

static void toggle(uint8_t *mask, const int32_t *ta, const int32_t *tb,
                   int32_t k)
{
    mask[ta[k]] ^= 1;
    if (tb != NULL && tb[k] >= 0)
        mask[tb[k]] ^= 1;
}

/* The lane's run, in order, until a decision better than p->cur; its mask
 * and simulator are left at the last one. */
static void lane_run(const struct lanes *p, lane *l)
{
    size_t n = (size_t)l->sim.n;
    memcpy(l->mask, p->base, n);
    l->done = 0;
    for (int32_t i = 0; i < l->count; i++) {
        int32_t k = l->first + i;
        if (i > 0)
            toggle(l->mask, p->ta, p->tb, k - 1);
        toggle(l->mask, p->ta, p->tb, k);
        fxcut_plan_eval *r = &l->r[i];
        memset(r, 0, sizeof *r);
        l->rc[i] = sim_eval(&l->sim, l->mask, r, &l->err[i]);
        l->done = i + 1;
        if (l->rc[i] == FXCUT_OK) {
            uint8_t *nm = l->norm + (size_t)i * n;
            const plan_sim *s = &l->sim;
            for (size_t j = 0; j < n; j++)
                nm[j] = (uint8_t)(s->saved[j] ||
                                  (s->opt->role[j] == FXCUT_ROLE_FREE &&
                                   l->mask[j] &&
                                   (s->g->flags[j] & FXCUT_F_IMPURE) != 0));
            if (better(r, &p->cur))
                break;
        } else if (l->rc[i] != FXCUT_E_INVALID) {
            break; /* the search ends at it */
        }
    }
}

static void *lane_main(void *arg)
{
    const lane_arg *la = arg;
    struct lanes *p = la->pool;
    int64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->round == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->round;
        int mine = la->index < p->batch;
        pthread_mutex_unlock(&p->mu);
        if (mine)
            lane_run(p, &p->lane[la->index]);
        pthread_mutex_lock(&p->mu);
        if (mine && --p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void lane_release(lane *l)
{
    sim_free(&l->sim);
    free(l->mask);
    free(l->norm);
    l->mask = NULL;
    l->norm = NULL;
}

static void lanes_free(struct lanes *p, lane_arg *args)
{
    if (p == NULL)
        return;
    if (p->n_threads > 0) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int32_t k = 0; k < p->n_threads; k++)
            pthread_join(p->thread[k], NULL);
    }
    if (p->sync_ready) {
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->go);
        pthread_mutex_destroy(&p->mu);
    }
    if (p->lane != NULL)
        for (int32_t k = 0; k < p->n_lanes; k++)
            lane_release(&p->lane[k]);
    free(p->lane);
    free(p->thread);
    free(args);
    free(p);
}

static int sync_init(struct lanes *p)
{
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return 0;
    if (pthread_cond_init(&p->go, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return 0;
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->go);
        pthread_mutex_destroy(&p->mu);
        return 0;
    }
    return 1;
}

/* Lanes for the search, or NULL where there is one (a lane that cannot be
 * made or started leaves the search with fewer: never an error). */
static struct lanes *lanes_new(const fxcut_graph *g,
                               const fxcut_plan_options *opt, int32_t wanted,
                               lane_arg **args_out)
{
    *args_out = NULL;
    if (wanted <= 1)
        return NULL;
    struct lanes *p = calloc(1, sizeof *p);
    lane_arg *args = calloc((size_t)wanted, sizeof *args);
    if (p == NULL || args == NULL) {
        free(p);
        free(args);
        return NULL;
    }
    p->lane = calloc((size_t)wanted, sizeof *p->lane);
    p->thread = calloc((size_t)wanted, sizeof *p->thread);
    if (p->lane == NULL || p->thread == NULL) {
        lanes_free(p, args);
        return NULL;
    }
    size_t n = (size_t)g->n + 1;
    for (; p->n_lanes < wanted; p->n_lanes++) {
        lane *l = &p->lane[p->n_lanes];
        fxcut_error scratch;
        memset(&scratch, 0, sizeof scratch);
        if (sim_new(g, opt, &l->sim, &scratch) != FXCUT_OK)
            break;
        l->mask = malloc(n);
        l->norm = malloc(n * LANE_RUN);
        if (l->mask == NULL || l->norm == NULL) {
            lane_release(l);
            break;
        }
    }
    p->sync_ready = p->n_lanes > 1 && sync_init(p);
    for (int32_t k = 1; p->sync_ready && k < p->n_lanes; k++) {
        args[k].pool = p;
        args[k].index = k;
        if (pthread_create(&p->thread[k - 1], NULL, lane_main, &args[k]) != 0)
            break;
        p->n_threads = k;
    }
    /* lanes without a thread are dropped */
    while (p->n_lanes > p->n_threads + 1)
        lane_release(&p->lane[--p->n_lanes]);
    if (p->n_lanes <= 1) {
        lanes_free(p, args);
        return NULL;
    }
    *args_out = args;
    return p;
}

/* One round: lanes 0 .. batch-1 run their runs at once. */
static void lanes_round(struct lanes *p, int32_t batch)
{
    pthread_mutex_lock(&p->mu);
    p->batch = batch;
    p->pending = batch - 1;
    p->round++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    lane_run(p, &p->lane[0]);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Result i of lane l taken as evaluate() takes one: its work counted, its
 * point on the frontier (or its error noted). */
static void take_lane_eval(search *q, lane *l, int32_t i, fxcut_plan_eval *r)
{
    q->sim.n_evals++;
    q->sim.work += q->sim.eval_work;
    *r = l->r[i];
    if (l->rc[i] != FXCUT_OK) {
        take_eval(q, &l->sim, l->mask, l->rc[i], &l->err[i], r);
        return;
    }
    if (frontier_dominated(&q->front, r->peak_bytes, r->recompute_flops))
        return;
    frontier_add(&q->front, l->norm + (size_t)i * (size_t)q->sim.n,
                 r->peak_bytes, r->recompute_flops);
}

/* Tries the toggles (ta[k], tb[k]) of q->mask for k = 0 .. m-1 in order
 * (tb NULL or tb[k] < 0: ta[k] alone) and takes the first whose decision is
 * better than *cur: returns 1 with that decision in q->mask, *cur and the
 * simulator's state; 0 with q->mask as it was. */
static int first_better(search *q, const int32_t *ta, const int32_t *tb,
                        int32_t m, fxcut_plan_eval *cur)
{
    struct lanes *p = q->lanes;
    fxcut_plan_eval r;
    if (p == NULL) {
        for (int32_t k = 0; k < m && !out_of_time(q); k++) {
            toggle(q->mask, ta, tb, k);
            evaluate(q, &r);
            if (better(&r, cur)) {
                *cur = r;
                return 1;
            }
            toggle(q->mask, ta, tb, k);
        }
        return 0;
    }
    p->base = q->mask;
    p->ta = ta;
    p->tb = tb;
    p->cur = *cur;
    int32_t run = 1;
    for (int32_t k = 0; k < m;) {
        if (out_of_time(q))
            return 0;
        int32_t batch = 0;
        for (; batch < p->n_lanes && k + batch * run < m; batch++) {
            lane *l = &p->lane[batch];
            l->first = k + batch * run;
            l->count = m - l->first < run ? m - l->first : run;
        }
        lanes_round(p, batch);
        for (int32_t j = 0; j < batch; j++) {
            lane *l = &p->lane[j];
            for (int32_t i = 0; i < l->done; i++) {
                if ((j > 0 || i > 0) && out_of_time(q))
                    return 0;
                take_lane_eval(q, l, i, &r);
                if (better(&r, cur)) {
                    /* its lane stopped at it: the lane's simulator and mask
                     * hold this decision */
                    int64_t n_evals = q->sim.n_evals, work = q->sim.work;
                    plan_sim tmp = q->sim;
                    q->sim = l->sim;
                    l->sim = tmp;
                    q->sim.n_evals = n_evals;
                    q->sim.work = work;
                    memcpy(q->mask, l->mask, (size_t)q->sim.n);
                    *cur = r;
                    return 1;
                }
            }
            if (l->done < l->count)
                return 0; /* an error that ends the search: q->rc holds it */
            k = l->first + l->count;
        }
        if (run < LANE_RUN)
            run *= 2;
    }
    return 0;
}

/* Lower the peak (then the cost) from q->mask by first-improving toggles:
 * each candidate alone, then when none improves, pairs of the largest. */
static void descend_peak(search *q)
{
    fxcut_plan_eval cur;
    enum { TOP = 12 };
    int32_t pa[TOP * (TOP - 1) / 2], pb[TOP * (TOP - 1) / 2];
    evaluate(q, &cur);
    if (cur.peak_bytes == INT64_MAX)
        return; /* not realisable: no schedule to take candidates from */
    while (!out_of_time(q)) {
        int32_t m = peak_candidates(q, &cur);
        int improved = first_better(q, q->cand, NULL, m, &cur);
        if (!improved) {
            int32_t top = m < TOP ? m : TOP, np = 0;
            for (int32_t a = 0; a < top; a++)
                for (int32_t b = a + 1; b < top; b++) {
                    pa[np] = q->cand[a];
                    pb[np] = q->cand[b];
                    np++;
                }
            improved = first_better(q, pa, pb, np, &cur);
        }
        if (!improved)
            break; /* else the last decision taken is the simulator's state */
    }
}

/* Iterated local search: from the lowest-peak point, toggle a few random
 * peak candidates and descend again; restarts from whatever is lowest.
 * A fixed-seed xorshift: the same graph gives the same restarts (the time
 * limit aside). */
static void perturb_and_descend(search *q, int32_t restarts)
{
    plan_sim *s = &q->sim;
    uint64_t x = 0x9E3779B97F4A7C15u;
    fxcut_plan_eval r;
    for (int32_t k = 0; k < restarts && !out_of_time(q) && q->front.len > 0; k++) {
        memcpy(q->mask, q->front.masks + (size_t)q->front.slot[0] * (size_t)s->n,
               (size_t)s->n);
        evaluate(q, &r);
        int32_t m = peak_candidates(q, &r);
        if (m == 0)
            return;
        int32_t kicks = 2 + (int32_t)(k % 3);
        for (int32_t j = 0; j < kicks; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            q->mask[q->cand[(int32_t)(x % (uint64_t)m)]] ^= 1;
        }
        descend_peak(q);
    }
}

/* From a frontier point: save recomputed FREE values, most flops first,
 * while the peak stays at or under the point's. */
static void descend_cost(search *q, const uint8_t *start, int64_t peak)
{
    plan_sim *s = &q->sim;
    memcpy(q->mask, start, (size_t)s->n);
    fxcut_plan_eval cur, r;
    evaluate(q, &cur);
    for (int pass = 0; pass < 4 && !out_of_time(q); pass++) {
        int32_t m = 0;
        for (int32_t i = 0; i < s->n; i++)
            if (s->opt->role[i] == FXCUT_ROLE_FREE && s->recomputed[i]) {
                q->cand[m++] = i;
                q->key[i] = s->opt->flops != NULL ? s->opt->flops[i] : 0;
            }
        fxcut_sort_desc_stable(q->cand, s->tmp, m, key_greater, q->key);
        int improved = 0;
        for (int32_t k = 0; k < m && !out_of_time(q); k++) {
            int32_t v = q->cand[k];
            if (!s->recomputed[v] && q->mask[v] == 0) {
                /* no longer reached: saving it changes nothing */
                continue;
            }
            q->mask[v] = 1;
            evaluate(q, &r);
            if (r.peak_bytes <= peak && r.recompute_flops < cur.recompute_flops) {
                cur = r;
                improved = 1;
            } else {
                q->mask[v] = 0;
                evaluate(q, &r); /* restore state for the next test */
            }
        }
        if (!improved)
            break;
    }
}

/* FREE nodes the backward can reach when every FREE node is recomputed:
 * the gradients' ancestors through BACKWARD, RECOMPUTE and FREE nodes (a
 * reachability pass over the graph, no simulation).  Also evaluates that
 * decision (all recomputed), one end of the frontier. */
static int32_t reachable_free(search *q)
{
    plan_sim *s = &q->sim;
    const fxcut_graph *g = s->g;
    const uint8_t *role = s->opt->role;
    memset(q->mask, 0, (size_t)s->n);
    fxcut_plan_eval r;
    evaluate(q, &r);
    uint8_t *seen = s->in_mask; /* scratch until the next evaluation */
    memset(seen, 0, (size_t)s->n);
    int32_t top = 0;
    for (int32_t k = s->opt->num_fwd_outputs; k < g->n_outputs; k++) {
        int32_t o = g->outputs[k];
        if (o >= 0 && !seen[o]) {
            seen[o] = 1;
            s->tmp[top++] = o;
        }
    }
    while (top > 0) {
        int32_t x = s->tmp[--top];
        if (role[x] != FXCUT_ROLE_BACKWARD && role[x] != FXCUT_ROLE_FREE &&
            role[x] != FXCUT_ROLE_RECOMPUTE)
            continue;
        for (int32_t e = g->in_ptr[x]; e < g->in_ptr[x + 1]; e++) {
            int32_t u = g->in_idx[e];
            if (!seen[u]) {
                seen[u] = 1;
                s->tmp[top++] = u;
            }
        }
    }
    int32_t m = 0;
    for (int32_t i = 0; i < s->n; i++)
        if (role[i] == FXCUT_ROLE_FREE && seen[i])
            q->cand[m++] = i;
    return m;
}

static void enumerate_all(search *q, int32_t m)
{
    memset(q->mask, 0, (size_t)q->sim.n);
    fxcut_plan_eval r;
    evaluate(q, &r);
    uint64_t total = (uint64_t)1 << m;
    for (uint64_t k = 1; k < total; k++) {
        if (out_of_time(q))
            return;
        int32_t bit = 0; /* Gray code: one toggle a step */
        while (!((k >> bit) & 1))
            bit++;
        q->mask[q->cand[bit]] ^= 1;
        evaluate(q, &r);
    }
}

/* q->mask = seed k of the options. */
static void load_seed(search *q, const fxcut_plan_options *opt, int32_t k)
{
    int32_t n = q->sim.n;
    const uint8_t *seed = opt->seeds + (size_t)k * (size_t)n;
    for (int32_t i = 0; i < n; i++)
        q->mask[i] = seed[i] != 0;
}

/* Each frontier point's cost lowered at its own peak (the frontier may
 * shift meanwhile: the next point is the next larger peak). */
static void tighten_costs(search *q, uint8_t *start)
{
    int32_t n = q->sim.n;
    for (int32_t k = 0; k < q->front.len && !out_of_time(q); k++) {
        int64_t peak = q->front.peak[k];
        memcpy(start, q->front.masks + (size_t)q->front.slot[k] * (size_t)n,
               (size_t)n);
        descend_cost(q, start, peak);
        int32_t j = 0;
        while (j < q->front.len && q->front.peak[j] <= peak)
            j++;
        k = j - 1;
    }
}

/* The search where enumerating every subset is too much: the two ends
 * (all recomputed, all saved), each seed descended, perturbations, then
 * the costs tightened. */
static void search_locally(search *q, const fxcut_plan_options *opt,
                           uint8_t *start)
{
    int32_t n = q->sim.n;
    fxcut_plan_eval r;
    memset(q->mask, 0, (size_t)n);
    descend_peak(q);
    memset(q->mask, 1, (size_t)n);
    evaluate(q, &r);
    for (int32_t k = 0; k < opt->n_seeds && !out_of_time(q); k++) {
        load_seed(q, opt, k);
        descend_peak(q);
    }
    perturb_and_descend(q, 48);
    tighten_costs(q, start);
}

/* The frontier the search found, into res; an error when the memory model
 * rejected every decision tried (err holds its last reason). */
static int frontier_result(const search *q, fxcut_plan_frontier *res,
                           fxcut_error *err)
{
    if (q->front.len == 0)
        return err->code == FXCUT_E_INVALID
                   ? FXCUT_E_INVALID
                   : fxcut_fail(err, FXCUT_E_INVALID, -1,
                                "no decision the search tried is realisable");
    size_t n = (size_t)q->sim.n;
    res->n_points = q->front.len;
    for (int32_t k = 0; k < q->front.len; k++) {
        res->peak_bytes[k] = q->front.peak[k];
        res->recompute_flops[k] = q->front.cost[k];
        memcpy(res->masks + (size_t)k * n,
               q->front.masks + (size_t)q->front.slot[k] * n, n);
    }
    res->n_evals = q->sim.n_evals;
    res->work = q->sim.work;
    res->timed_out = (uint8_t)q->timed_out;
    res->out_of_work = (uint8_t)q->out_of_work;
    return FXCUT_OK;
}

int fxcut_plan_frontier_search(const fxcut_graph *g,
                               const fxcut_plan_options *opt,
                               fxcut_plan_frontier *res, fxcut_error *err)
{
    int rc = fxcut_graph_validate(g, err);
    if (rc == FXCUT_OK)
        rc = check_options(g, opt, 1, err);
    if (rc != FXCUT_OK)
        return rc;
    search q;
    memset(&q, 0, sizeof q);
    q.err = err;
    timespec_get(&q.start, TIME_UTC);
    q.limit = opt->time_limit_s;
    rc = sim_new(g, opt, &q.sim, err);
    if (rc != FXCUT_OK)
        return rc;
    int32_t n = g->n;
    rc = frontier_new(&q.front, opt->max_points, n, err);
    if (rc != FXCUT_OK) {
        sim_free(&q.sim);
        return rc;
    }
    q.mask = malloc((size_t)n + 1);
    q.norm = malloc((size_t)n + 1);
    q.cand = malloc(((size_t)n + 1) * sizeof *q.cand);
    q.key = malloc(((size_t)n + 1) * sizeof *q.key);
    uint8_t *start = malloc((size_t)n + 1);
    lane_arg *lane_args = NULL;
    if (!q.mask || !q.norm || !q.cand || !q.key || !start) {
        rc = fxcut_fail(err, FXCUT_E_NOMEM, -1,
                        "out of memory for the plan's search (%d nodes)",
                        (int)n);
        goto done;
    }
    q.lanes = lanes_new(g, opt, opt->threads, &lane_args);
    res->lanes = q.lanes != NULL ? q.lanes->n_lanes : 1;
    int32_t m = reachable_free(&q);
    res->n_free = m;
    res->exact = 0;
    /* the seeds first: each is on the frontier or dominated */
    for (int32_t k = 0; k < opt->n_seeds; k++) {
        fxcut_plan_eval r;
        load_seed(&q, opt, k);
        evaluate(&q, &r);
    }
    if (m <= opt->exact_max_free) {
        enumerate_all(&q, m);
        res->exact = !q.timed_out && !q.out_of_work;
    } else {
        search_locally(&q, opt, start);
    }
    rc = q.rc != FXCUT_OK ? q.rc : frontier_result(&q, res, err);
done:
    lanes_free(q.lanes, lane_args);
    free(q.mask);
    free(q.norm);
    free(q.cand);
    free(q.key);
    free(start);
    frontier_free(&q.front);
    sim_free(&q.sim);
    return rc;
}
