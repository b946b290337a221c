/*
 * fuzz_knapsack.c -- libFuzzer target: arbitrary bytes -> a knapsack
 * instance -> fxcut_knapsack_solve (the entry point behind
 * fxcut._C.knapsack) with every solver.
 *
 * Checks: a malformed instance (a NaN, an infinity, a negative memory or
 * capacity, a zero memory for greedy, an unknown solver) fails with FXCUT_E_INVALID and a message;
 * a valid one succeeds with save[k] in {0, 1}, order a permutation of the
 * items, the saved memory within the capacity (up to the quantisation of
 * 1e-4 per item); dp_lean chooses exactly as dp (its promise); greedy's
 * value is the sum of the saved runtimes.  ASan/UBSan catch the rest.
 * Everything is allocated at its exact size.
 *
 * Input format (every read past the end is 0):
 *   u8 n                        items (% 48)
 *   u8 mode                     bit 0 raw: values may be any float64 (u64
 *                               bits), else small ones; bit 1 solver taken
 *                               raw (any int, tried alone)
 *   u8 solver                   with mode bit 1
 *   u16 capacity code           capacity = code / 65536 (0 .. 1)
 *   per item: u16 memory code (memory = code / 8192), s16 runtime code
 *   (runtime = code / 16); in raw mode a code of 0xFFFF is followed by u64
 *   raw bits instead
 */
#include "fxcut_internal.h"
#include "knapsack.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITEMS 48

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

static double decode_value(fuzz_input *in, int raw, double scale, int sign)
{
    uint16_t code = fz_u16(in);
    if (raw && code == 0xFFFF) {
        uint64_t bits = fz_u64(in);
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    return (sign ? (double)(int16_t)code : (double)code) / scale;
}

static int valid_problem(const fxcut_knapsack_problem *p)
{
    if (!isfinite(p->max_memory) || p->max_memory < 0.0)
        return 0;
    for (int32_t k = 0; k < p->n; k++)
        if (!isfinite(p->memory[k]) || p->memory[k] < 0.0 ||
            !isfinite(p->runtime[k]))
            return 0;
    return 1;
}

static void check_choice(const fxcut_knapsack_problem *p, int solver,
                         const fxcut_knapsack_result *r)
{
    uint8_t *seen = xmalloc((size_t)p->n);
    memset(seen, 0, (size_t)p->n);
    double used = 0.0, value = 0.0;
    for (int32_t k = 0; k < p->n; k++) {
        FZ_CHECK(r->save[k] <= 1, "solver %d: save[%d] = %d", solver, k,
                 r->save[k]);
        int32_t i = r->order[k];
        FZ_CHECK(i >= 0 && i < p->n && !seen[i], "solver %d: order[%d] = %d",
                 solver, k, i);
        seen[i] = 1;
        if (r->save[i]) {
            used += p->memory[i];
            value += p->runtime[i];
        }
    }
    /* Each item's memory is rounded to 1e-4 units before it is compared. */
    FZ_CHECK(used <= p->max_memory + 1e-4 * (p->n + 1),
             "solver %d saves %g of capacity %g", solver, used, p->max_memory);
    if (solver == FXCUT_KNAPSACK_GREEDY) {
        /* Greedy sums in its ratio order; compare loosely. */
        FZ_CHECK(fabs(r->value - value) <= 1e-9 * (1.0 + fabs(value)) * p->n,
                 "greedy reports %g, its items sum to %g", r->value, value);
    }
    free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    const int32_t n = fz_u8(&in) % MAX_ITEMS;
    const uint8_t mode = fz_u8(&in);
    const int raw = mode & 1, raw_solver = (mode >> 1) & 1;
    const int solver_raw = (int)(int8_t)fz_u8(&in);
    double *memory = xmalloc((size_t)n * sizeof *memory);
    double *runtime = xmalloc((size_t)n * sizeof *runtime);
    double capacity = decode_value(&in, raw, 65536.0, 0);
    for (int32_t k = 0; k < n; k++) {
        memory[k] = decode_value(&in, raw, 8192.0, 0);
        runtime[k] = decode_value(&in, raw, 16.0, 1);
    }
    fxcut_knapsack_problem p = {n, memory, runtime, capacity};
    /* A capacity this large quantises past int32 (an error, checked
     * below) or builds tables of gigabytes: keep the valid ones small. */
    const int valid = valid_problem(&p) && capacity <= 16.0;
    uint8_t *save[FXCUT_KNAPSACK_NUM_SOLVERS];
    int32_t *order[FXCUT_KNAPSACK_NUM_SOLVERS];
    double value[FXCUT_KNAPSACK_NUM_SOLVERS];
    int ok[FXCUT_KNAPSACK_NUM_SOLVERS];
    int first = raw_solver ? solver_raw : 0;
    int last = raw_solver ? solver_raw : FXCUT_KNAPSACK_NUM_SOLVERS - 1;
    for (int s = 0; s < FXCUT_KNAPSACK_NUM_SOLVERS; s++) {
        save[s] = NULL;
        order[s] = NULL;
        ok[s] = 0;
    }
    for (int s = first; s <= last; s++) {
        int slot = s >= 0 && s < FXCUT_KNAPSACK_NUM_SOLVERS ? s : 0;
        uint8_t *sv = xmalloc((size_t)n);
        int32_t *od = xmalloc((size_t)n * sizeof *od);
        fxcut_knapsack_result r = {sv, od, 0.0, 0};
        fxcut_error err;
        memset(&err, 0, sizeof err);
        /* A large capacity that still quantises (below 2^31 units) means
         * tables of gigabytes: only greedy, which has none, runs it; one
         * past the quantiser's range must fail (checked below). */
        if (isfinite(capacity) && capacity > 16.0 &&
            capacity * FXCUT_KNAPSACK_SCALE < 2147483646.0 &&
            s != FXCUT_KNAPSACK_GREEDY) {
            free(sv);
            free(od);
            continue;
        }
        /* Greedy divides by each memory: a zero one is malformed there. */
        int valid_here = valid;
        for (int32_t k = 0; k < n && s == FXCUT_KNAPSACK_GREEDY; k++)
            valid_here &= memory[k] > 0.0;
        int rc = fxcut_knapsack_solve(&p, s, &r, &err);
        if (rc != FXCUT_OK) {
            FZ_CHECK(err.code == rc && err.message[0] != 0 &&
                         memchr(err.message, 0, sizeof err.message) != NULL,
                     "solver %d: bad error %d", s, rc);
            /* A valid instance fails only where a memory does not
             * quantise to 64 bits (the DP solvers'). */
            FZ_CHECK(!valid_here || s < 0 || s >= FXCUT_KNAPSACK_NUM_SOLVERS ||
                         (rc == FXCUT_E_OVERFLOW && s != FXCUT_KNAPSACK_GREEDY),
                     "solver %d fails a valid instance: %s", s, err.message);
            FZ_CHECK(rc == FXCUT_E_INVALID || rc == FXCUT_E_OVERFLOW,
                     "solver %d: code %d (%s)", s, rc, err.message);
            free(sv);
            free(od);
            continue;
        }
        FZ_CHECK(s >= 0 && s < FXCUT_KNAPSACK_NUM_SOLVERS,
                 "unknown solver %d accepted", s);
        FZ_CHECK(valid_problem(&p), "solver %d accepts a malformed instance",
                 s);
        check_choice(&p, s, &r);
        save[slot] = sv;
        order[slot] = od;
        value[slot] = r.value;
        ok[slot] = 1;
    }
    if (ok[FXCUT_KNAPSACK_DP] && ok[FXCUT_KNAPSACK_DP_LEAN])
        FZ_CHECK(memcmp(save[FXCUT_KNAPSACK_DP], save[FXCUT_KNAPSACK_DP_LEAN],
                        (size_t)n) == 0 &&
                     value[FXCUT_KNAPSACK_DP] == value[FXCUT_KNAPSACK_DP_LEAN],
                 "dp_lean chooses otherwise than dp");
    for (int s = 0; s < FXCUT_KNAPSACK_NUM_SOLVERS; s++) {
        free(save[s]);
        free(order[s]);
    }
    free(memory);
    free(runtime);
    return 0;
}
