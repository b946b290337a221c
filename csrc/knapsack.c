/*
 * knapsack.c -- torch's knapsack solvers, choice for choice, and dp_lean.
 *
 * Floating point is the point here.  torch's DP solvers keep their table in
 * float32 tensors and add float32 runtimes to float32 entries; they compare
 * entries with == / != and take the first maximum.  The C below does the
 * same operations on `float` (C11 with FLT_EVAL_METHOD 0: every float
 * operation rounds to float; no -ffast-math, no contraction since nothing
 * is multiplied), so every table entry, and hence every tie, is the one
 * torch computes.  Quantisation rounds half to even, as Python's round().
 */
#include "fxcut_internal.h"
#include "knapsack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a metered heap: the solvers report their peak use ---------------- */

typedef struct {
    size_t now;
    size_t peak;
} meter;

static void *meter_alloc(meter *m, size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p != NULL) {
        m->now += bytes;
        if (m->now > m->peak)
            m->peak = m->now;
    }
    return p;
}

static void *meter_calloc(meter *m, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size)
        return NULL;
    void *p = meter_alloc(m, count * size);
    if (p != NULL)
        memset(p, 0, count * size);
    return p;
}

static void meter_free(meter *m, void *p, size_t bytes)
{
    if (p != NULL) {
        free(p);
        m->now -= bytes;
    }
}

/* ---- shared pieces ------------------------------------------------------ */

/* Python's round(x) for a float: to the nearest integer, ties to even.
 * x - floor(x) is exact for |x| < 2^52. */
static int round_half_even(double x, int64_t *out)
{
    if (!(fabs(x) < 4.0e18))
        return -1;
    double f = floor(x);
    double diff = x - f;
    if (diff > 0.5 || (diff == 0.5 && fmod(f, 2.0) != 0.0))
        f += 1.0;
    *out = (int64_t)f;
    return 0;
}

/* torch.maximum on floats: NaN wins, otherwise the larger. */
static inline float tmax(float a, float b)
{
    return (a > b || a != a) ? a : b;
}

/* Quantised memories and capacity, and float32 runtimes, as torch's DP
 * solvers make them. */
typedef struct {
    int32_t n;
    int64_t q_max;        /* Q = round(max_memory * S) */
    int64_t width;        /* Q + 1 columns */
    int64_t *q_memory;    /* n */
    float *runtime32;     /* n */
} quantized;

static int quantize(const fxcut_knapsack_problem *p, meter *m, quantized *q,
                    fxcut_error *err)
{
    memset(q, 0, sizeof *q);
    q->n = p->n;
    if (round_half_even(p->max_memory * FXCUT_KNAPSACK_SCALE, &q->q_max) < 0 ||
        q->q_max > (int64_t)INT32_MAX - 1)
        return fxcut_fail(err, FXCUT_E_OVERFLOW, -1,
                          "max_memory %g quantises to more than 2^31 - 2 "
                          "units of 1e-4", p->max_memory);
    q->width = q->q_max + 1;
    q->q_memory = meter_alloc(m, ((size_t)p->n + 1) * sizeof *q->q_memory);
    q->runtime32 = meter_alloc(m, ((size_t)p->n + 1) * sizeof *q->runtime32);
    if (q->q_memory == NULL || q->runtime32 == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for %d knapsack items", (int)p->n);
    for (int32_t k = 0; k < p->n; k++) {
        if (round_half_even(p->memory[k] * FXCUT_KNAPSACK_SCALE, &q->q_memory[k]) < 0)
            return fxcut_fail(err, FXCUT_E_OVERFLOW, k,
                              "memory of item %d (%g) does not quantise to "
                              "a 64-bit integer", (int)k, p->memory[k]);
        q->runtime32[k] = (float)p->runtime[k];
    }
    return FXCUT_OK;
}

static void quantized_free(quantized *q, meter *m)
{
    meter_free(m, q->q_memory, ((size_t)q->n + 1) * sizeof *q->q_memory);
    meter_free(m, q->runtime32, ((size_t)q->n + 1) * sizeof *q->runtime32);
}

/*
 * Row i of the DP from row i-1, in place over cur[lo .. hi] (absolute
 * columns), for item i-1 of quantised memory qm and runtime r:
 *   qm == 0:  cur[c] += r                               (every column)
 *   else:     cur[c] = max(cur[c], cur[c - qm] + r)     (c >= qm)
 * Columns are visited from hi down, so cur[c - qm] still holds row i-1.
 * Where bits is given, bit (bit0 + c - lo) is set when the entry changed:
 * exactly torch's backtracking test dp[i][c] != dp[i-1][c].
 * Needs row i-1 on [lo - qm, hi] when qm > 0 (only columns >= 0 exist).
 */
static void dp_step(float *cur, int64_t lo, int64_t hi, int64_t qm, float r,
                    uint64_t *bits, int64_t bit0)
{
    if (qm == 0) {
        for (int64_t c = lo; c <= hi; c++) {
            float old = cur[c], now = old + r;
            cur[c] = now;
            if (bits != NULL && now != old) {
                int64_t b = bit0 + c - lo;
                bits[b >> 6] |= (uint64_t)1 << (b & 63);
            }
        }
        return;
    }
    int64_t first = lo > qm ? lo : qm;
    for (int64_t c = hi; c >= first; c--) {
        float old = cur[c], now = tmax(old, cur[c - qm] + r);
        cur[c] = now;
        if (bits != NULL && now != old) {
            int64_t b = bit0 + c - lo;
            bits[b >> 6] |= (uint64_t)1 << (b & 63);
        }
    }
}

/* ---- dp: torch's dp_knapsack, with its whole table --------------------- */

static int solve_dp(const quantized *q, meter *m, fxcut_knapsack_result *res,
                    fxcut_error *err)
{
    const int64_t width = q->width;
    size_t rows = (size_t)q->n + 1;
    if ((size_t)width > SIZE_MAX / sizeof(float) / rows)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "the DP table of %zu x %lld entries does not fit "
                          "in memory", rows, (long long)width);
    size_t bytes = rows * (size_t)width * sizeof(float);
    float *table = meter_calloc(m, rows * (size_t)width, sizeof(float));
    if (table == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for the DP table (%zu bytes)", bytes);
    for (int32_t i = 1; i <= q->n; i++) {
        const float *prev = table + (size_t)(i - 1) * (size_t)width;
        float *row = table + (size_t)i * (size_t)width;
        const int64_t qm = q->q_memory[i - 1];
        const float r = q->runtime32[i - 1];
        if (qm == 0) {
            for (int64_t c = 0; c < width; c++)
                row[c] = prev[c] + r;
            continue;
        }
        memcpy(row, prev, (size_t)width * sizeof(float));
        for (int64_t c = qm; c < width; c++)
            row[c] = tmax(prev[c], prev[c - qm] + r);
    }
    int64_t j = q->q_max;
    for (int32_t i = q->n; i >= 1; i--) {
        const float *prev = table + (size_t)(i - 1) * (size_t)width;
        const float *row = table + (size_t)i * (size_t)width;
        if (row[j] != prev[j]) {
            res->save[i - 1] = 1;
            j -= q->q_memory[i - 1];
            if (j < 0) {
                meter_free(m, table, bytes);
                return fxcut_fail(err, FXCUT_E_INVALID, i - 1,
                                  "backtracking left the table at item %d "
                                  "(non-finite runtimes?)", (int)(i - 1));
            }
        }
    }
    res->value = (double)table[(size_t)q->n * (size_t)width + (size_t)q->q_max];
    meter_free(m, table, bytes);
    return FXCUT_OK;
}

/* ---- dp_lean: dp's choice without dp's table ---------------------------- */

/*
 * Row i of the table is a function of row i-1 only, and the backtracking
 * reads two entries per row, walking from (n, Q) down and left.  So:
 *
 * - Divide: to backtrack rows (lo, hi] from column J, given row lo, compute
 *   row mid from row lo, backtrack (mid, hi] from J to learn the column Jm
 *   where the path crosses row mid, then backtrack (lo, mid] from Jm.  Only
 *   row lo of the caller and row mid of this level are alive.
 * - Windows: on its way down from (hi, J) the path crosses row i at a
 *   column >= J - (sum of the memories of items i+1 .. hi).  So rows are
 *   computed, and stored, only on [max(0, that), J]; row mid of a level is
 *   as narrow as the memories of the items above it.
 * - Leaves: at most LEAN_LEAF rows are computed one after the other with
 *   one "changed" bit per entry of their windows -- the exact test torch's
 *   backtracking applies -- and then walked.
 *
 * Memory: the working row (Q + 1 floats), the row windows on the current
 * recursion path (O(log n) of them, narrowing with depth when the items are
 * sorted by size as torch sorts them), one leaf's bits.  Time: O(n log n Q)
 * at worst, each entry computed as torch computes it.
 */
#define LEAN_LEAF 32

typedef struct {
    const quantized *q;
    meter *m;
    int64_t *prefix;    /* prefix[i] = sum over rows 1..i of min(qm, Q + 1) */
    float *cur;         /* the working row, absolute columns 0..Q */
    uint8_t *save;
    float value;        /* dp[n][Q], seen by the rightmost leaf */
} lean;

typedef struct {
    const float *v;     /* NULL: row 0, all zeros */
    int64_t lo;         /* v[0] is column lo */
} row_window;

/* The lowest column the path from (hi, J) can be at on row i. */
static int64_t window_lo(const lean *L, int32_t i, int32_t hi, int64_t J)
{
    int64_t a = J - (L->prefix[hi] - L->prefix[i]);
    return a > 0 ? a : 0;
}

static void load_row(lean *L, row_window base, int64_t lo, int64_t J)
{
    if (base.v == NULL)
        memset(L->cur + lo, 0, (size_t)(J - lo + 1) * sizeof(float));
    else
        memcpy(L->cur + lo, base.v + (lo - base.lo),
               (size_t)(J - lo + 1) * sizeof(float));
}

static int lean_leaf(lean *L, int32_t lo, int32_t hi, int64_t J,
                     row_window base, int64_t *J_out, fxcut_error *err)
{
    const quantized *q = L->q;
    int64_t total = 0;
    for (int32_t i = lo + 1; i <= hi; i++)
        total += J - window_lo(L, i, hi, J) + 1;
    size_t words = (size_t)(total + 63) / 64;
    uint64_t *bits = meter_calloc(L->m, words, sizeof *bits);
    if (bits == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for %lld knapsack bits",
                          (long long)total);
    load_row(L, base, window_lo(L, lo, hi, J), J);
    int64_t offset = 0;
    for (int32_t i = lo + 1; i <= hi; i++) {
        int64_t a = window_lo(L, i, hi, J);
        dp_step(L->cur, a, J, q->q_memory[i - 1], q->runtime32[i - 1], bits,
                offset);
        offset += J - a + 1;
    }
    if (hi == q->n)
        L->value = L->cur[J];
    int64_t c = J;
    for (int32_t i = hi; i > lo; i--) {
        int64_t a = window_lo(L, i, hi, J);
        offset -= J - a + 1;
        if (c < a) {
            meter_free(L->m, bits, words * sizeof *bits);
            return fxcut_fail(err, FXCUT_E_INVALID, i - 1,
                              "backtracking left its window at item %d "
                              "(non-finite runtimes?)", (int)(i - 1));
        }
        int64_t b = offset + c - a;
        if ((bits[b >> 6] >> (b & 63)) & 1) {
            L->save[i - 1] = 1;
            c -= q->q_memory[i - 1];
        }
    }
    meter_free(L->m, bits, words * sizeof *bits);
    *J_out = c;
    return FXCUT_OK;
}

static int lean_solve(lean *L, int32_t lo, int32_t hi, int64_t J,
                      row_window base, int64_t *J_out, fxcut_error *err)
{
    if (hi - lo <= LEAN_LEAF)
        return lean_leaf(L, lo, hi, J, base, J_out, err);
    const quantized *q = L->q;
    int32_t mid = lo + (hi - lo) / 2;
    load_row(L, base, window_lo(L, lo, hi, J), J);
    for (int32_t i = lo + 1; i <= mid; i++)
        dp_step(L->cur, window_lo(L, i, hi, J), J, q->q_memory[i - 1],
                q->runtime32[i - 1], NULL, 0);
    int64_t a_mid = window_lo(L, mid, hi, J);
    size_t bytes = (size_t)(J - a_mid + 1) * sizeof(float);
    float *row_mid = meter_alloc(L->m, bytes);
    if (row_mid == NULL)
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory for a knapsack row");
    memcpy(row_mid, L->cur + a_mid, bytes);
    int64_t J_mid = 0;
    row_window upper = {row_mid, a_mid};
    int rc = lean_solve(L, mid, hi, J, upper, &J_mid, err);
    meter_free(L->m, row_mid, bytes);
    if (rc != FXCUT_OK)
        return rc;
    return lean_solve(L, lo, mid, J_mid, base, J_out, err);
}

static int solve_dp_lean(const quantized *q, meter *m,
                         fxcut_knapsack_result *res, fxcut_error *err)
{
    lean L = {q, m, NULL, NULL, res->save, 0.0f};
    size_t prefix_bytes = ((size_t)q->n + 1) * sizeof *L.prefix;
    size_t row_bytes = (size_t)q->width * sizeof *L.cur;
    L.prefix = meter_alloc(m, prefix_bytes);
    L.cur = meter_alloc(m, row_bytes);
    int rc = FXCUT_OK;
    if (L.prefix == NULL || L.cur == NULL) {
        rc = fxcut_fail(err, FXCUT_E_NOMEM, -1,
                        "out of memory for a knapsack row of %lld entries",
                        (long long)q->width);
        goto done;
    }
    L.prefix[0] = 0;
    for (int32_t i = 1; i <= q->n; i++) {
        int64_t qm = q->q_memory[i - 1];
        L.prefix[i] = L.prefix[i - 1] + (qm < q->width ? qm : q->width);
    }
    if (q->n > 0) {
        int64_t j0 = 0;
        row_window zeros = {NULL, 0};
        rc = lean_solve(&L, 0, q->n, q->q_max, zeros, &j0, err);
    }
    res->value = (double)L.value;
done:
    meter_free(m, L.prefix, prefix_bytes);
    meter_free(m, L.cur, row_bytes);
    return rc;
}

/* ---- greedy: torch's greedy_knapsack ------------------------------------ */

/* Sort key of greedy: runtime / memory, largest first. */
static int higher_ratio(const void *ratio, int32_t a, int32_t b)
{
    return ((const double *)ratio)[a] > ((const double *)ratio)[b];
}

static int solve_greedy(const fxcut_knapsack_problem *p, meter *m,
                        fxcut_knapsack_result *res, fxcut_error *err)
{
    for (int32_t k = 0; k < p->n; k++)
        if (p->memory[k] == 0.0)
            return fxcut_fail(err, FXCUT_E_INVALID, k,
                              "greedy: item %d has memory 0 (torch's "
                              "greedy_knapsack divides runtime by memory)",
                              (int)k);
    size_t n1 = (size_t)p->n + 1;
    double *ratio = meter_alloc(m, n1 * sizeof *ratio);
    int32_t *tmp = meter_alloc(m, n1 * sizeof *tmp);
    if (ratio == NULL || tmp == NULL) {
        meter_free(m, ratio, n1 * sizeof *ratio);
        meter_free(m, tmp, n1 * sizeof *tmp);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    }
    for (int32_t k = 0; k < p->n; k++) {
        ratio[k] = p->runtime[k] / p->memory[k];
        res->order[k] = k;
    }
    fxcut_sort_desc_stable(res->order, tmp, p->n, higher_ratio, ratio);
    double total_memory = 0.0, total_runtime = 0.0;
    for (int32_t k = 0; k < p->n; k++) {
        int32_t i = res->order[k];
        if (total_memory + p->memory[i] <= p->max_memory) {
            total_memory += p->memory[i];
            total_runtime += p->runtime[i];
            res->save[i] = 1;
        }
    }
    res->value = total_runtime;
    meter_free(m, ratio, n1 * sizeof *ratio);
    meter_free(m, tmp, n1 * sizeof *tmp);
    return FXCUT_OK;
}

/* ---- torch's dp_knapsack_sliding_hirschberg ----------------------------- */

/*
 * The DP profile (float32) of items idx[from .. to) over `width` columns,
 * into dp, as torch's loop builds it: a zero-memory item is added to every
 * column; an item as wide as the profile or wider is skipped; otherwise
 * dp[c] = max(dp[c], dp[c - qm] + r) with the shifted copy taken first.
 */
static void profile_of(const quantized *q, int32_t from, int32_t to,
                       int64_t width, float *dp, float *cand)
{
    memset(dp, 0, (size_t)width * sizeof *dp);
    for (int32_t i = from; i < to; i++) {
        int64_t qm = q->q_memory[i];
        float r = q->runtime32[i];
        if (qm == 0) {
            for (int64_t c = 0; c < width; c++)
                dp[c] += r;
            continue;
        }
        if (qm >= width)
            continue;
        for (int64_t c = 0; c < width - qm; c++)
            cand[c] = dp[c] + r;
        for (int64_t c = 0; c < width - qm; c++)
            dp[qm + c] = tmax(dp[qm + c], cand[c]);
    }
}

/* The float rows of q->width columns the sliding Hirschberg search works
 * in: a profile, its shifted candidates, and the two halves' profiles. */
typedef struct {
    float *dp, *cand, *left, *right;
} hirschberg_rows;

/* The column torch's argmax picks over the sums of the upper half's
 * profile and the lower half's reversed: the first maximum, or the first
 * NaN (argmax takes NaN for the largest). */
static int64_t split_column(const quantized *q, const hirschberg_rows *w,
                            int32_t start, int32_t middle, int32_t end,
                            int64_t width)
{
    float *left = w->left, *right = w->right;
    /* torch names the upper half "left" and solves it first. */
    profile_of(q, middle, end, width, w->dp, w->cand);
    memcpy(left, w->dp, (size_t)width * sizeof *left);
    profile_of(q, start, middle, width, w->dp, w->cand);
    for (int64_t c = 0; c < width; c++)
        right[c] = w->dp[width - 1 - c];
    for (int64_t c = 0; c < width; c++)
        left[c] = left[c] + right[c];
    int64_t best = 0;
    for (int64_t c = 1; c < width; c++)
        if (left[best] != left[best] ? 0 : (left[c] > left[best] || left[c] != left[c]))
            best = c;
    return best;
}

/* Splits segment [start, end) of capacity `capacity` at its middle: the
 * lower half's capacity in caps[0], the upper half's in caps[1], each
 * clamped to [0, q_max]. */
static void split_capacities(const quantized *q, const hirschberg_rows *w,
                             int32_t start, int32_t middle, int32_t end,
                             int64_t capacity, int64_t caps[2])
{
    int64_t width = capacity + 1;
    int64_t best = split_column(q, w, start, middle, end, width);
    int64_t left_capacity = best, right_capacity = width - best;
    if (left_capacity > q->q_max)
        left_capacity = q->q_max;
    if (right_capacity < 0)
        right_capacity = 0;
    if (right_capacity > q->q_max)
        right_capacity = q->q_max;
    caps[0] = right_capacity;
    caps[1] = left_capacity;
}

/* Each pop pushes two segments at most, one level deeper: the stack holds
 * at most depth + 1 <= 33 segments. */
enum { SEGMENT_STACK_MAX = 70 };

typedef struct {
    int64_t seg[SEGMENT_STACK_MAX][3]; /* start, end, capacity */
    int top;
} segment_stack;

static void push_segment(segment_stack *st, int64_t start, int64_t end,
                         int64_t capacity)
{
    st->seg[st->top][0] = start;
    st->seg[st->top][1] = end;
    st->seg[st->top][2] = capacity;
    st->top++;
}

/* torch's segment loop: a one-item segment saves its item when it fits and
 * runs for a positive time; a longer one is split in two. */
static int hirschberg_segments(const fxcut_knapsack_problem *p,
                               const quantized *q, const hirschberg_rows *w,
                               fxcut_knapsack_result *res, fxcut_error *err)
{
    segment_stack st;
    st.top = 0;
    push_segment(&st, 0, p->n, q->q_max);
    while (st.top > 0) {
        st.top--;
        int32_t start = (int32_t)st.seg[st.top][0];
        int32_t end = (int32_t)st.seg[st.top][1];
        int64_t capacity = st.seg[st.top][2];
        int32_t length = end - start;
        if (length == 0)
            continue;
        if (length == 1) {
            if (q->q_memory[start] <= capacity && p->runtime[start] > 0.0)
                res->save[start] = 1;
            continue;
        }
        int32_t middle = start + length / 2;
        int64_t caps[2];
        split_capacities(q, w, start, middle, end, capacity, caps);
        if (st.top + 2 > SEGMENT_STACK_MAX)
            return fxcut_fail(err, FXCUT_E_INVALID, -1,
                              "segment stack overflow");
        push_segment(&st, start, middle, caps[0]);
        push_segment(&st, middle, end, caps[1]);
    }
    return FXCUT_OK;
}

static int solve_sliding_hirschberg(const fxcut_knapsack_problem *p,
                                    const quantized *q, meter *m,
                                    fxcut_knapsack_result *res,
                                    fxcut_error *err)
{
    if (p->n == 0) {
        res->value = 0.0;
        return FXCUT_OK;
    }
    size_t row_bytes = (size_t)q->width * sizeof(float);
    hirschberg_rows w;
    w.dp = meter_alloc(m, row_bytes);
    w.cand = meter_alloc(m, row_bytes);
    w.left = meter_alloc(m, row_bytes);
    w.right = meter_alloc(m, row_bytes);
    int rc;
    if (w.dp == NULL || w.cand == NULL || w.left == NULL || w.right == NULL)
        rc = fxcut_fail(err, FXCUT_E_NOMEM, -1, "out of memory");
    else
        rc = hirschberg_segments(p, q, &w, res, err);
    if (rc == FXCUT_OK) {
        res->value = 0.0;
        for (int32_t k = 0; k < p->n; k++)
            if (res->save[k])
                res->value += p->runtime[k];
    }
    meter_free(m, w.dp, row_bytes);
    meter_free(m, w.cand, row_bytes);
    meter_free(m, w.left, row_bytes);
    meter_free(m, w.right, row_bytes);
    return rc;
}

/* ---- the entry point ---------------------------------------------------- */

static const char *const solver_names[FXCUT_KNAPSACK_NUM_SOLVERS] = {
    "dp", "dp_lean", "greedy", "dp_knapsack_sliding_hirschberg"};

const char *fxcut_knapsack_solver_name(int solver)
{
    if (solver < 0 || solver >= FXCUT_KNAPSACK_NUM_SOLVERS)
        return NULL;
    return solver_names[solver];
}

static int check_problem(const fxcut_knapsack_problem *p, fxcut_error *err)
{
    if (p->n < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "the number of items (%d) is negative", (int)p->n);
    if (!isfinite(p->max_memory) || p->max_memory < 0.0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "max_memory (%g) must be finite and >= 0",
                          p->max_memory);
    for (int32_t k = 0; k < p->n; k++) {
        if (!isfinite(p->memory[k]) || p->memory[k] < 0.0)
            return fxcut_fail(err, FXCUT_E_INVALID, k,
                              "memory of item %d (%g) must be finite and >= 0",
                              (int)k, p->memory[k]);
        if (!isfinite(p->runtime[k]))
            return fxcut_fail(err, FXCUT_E_INVALID, k,
                              "runtime of item %d (%g) must be finite",
                              (int)k, p->runtime[k]);
    }
    return FXCUT_OK;
}

int fxcut_knapsack_solve(const fxcut_knapsack_problem *p, int solver,
                         fxcut_knapsack_result *res, fxcut_error *err)
{
    if (solver < 0 || solver >= FXCUT_KNAPSACK_NUM_SOLVERS)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "unknown knapsack solver %d", solver);
    int rc = check_problem(p, err);
    if (rc != FXCUT_OK)
        return rc;
    memset(res->save, 0, (size_t)p->n);
    for (int32_t k = 0; k < p->n; k++)
        res->order[k] = k;
    res->value = 0.0;
    res->peak_bytes = 0;
    meter m = {0, 0};
    if (solver == FXCUT_KNAPSACK_GREEDY) {
        rc = solve_greedy(p, &m, res, err);
    } else {
        quantized q;
        rc = quantize(p, &m, &q, err);
        if (rc == FXCUT_OK && solver == FXCUT_KNAPSACK_DP)
            rc = solve_dp(&q, &m, res, err);
        else if (rc == FXCUT_OK && solver == FXCUT_KNAPSACK_DP_LEAN)
            rc = solve_dp_lean(&q, &m, res, err);
        else if (rc == FXCUT_OK)
            rc = solve_sliding_hirschberg(p, &q, &m, res, err);
        quantized_free(&q, &m);
    }
    res->peak_bytes = m.peak;
    return rc;
}
