/*
 * knapsack.h -- the 0-1 knapsack solvers of the activation memory budget.
 *
 * torch's memory-budget pass asks: of the candidate values (banned from
 * recomputation, sorted by size), which should stay saved so that the saved
 * runtime is largest while the saved memory stays within the budget?  The
 * items' memories are the candidates' sizes normalised to the budget's
 * scale; their runtimes are estimates.  Every solver here reproduces the
 * choice of one of torch's solvers bit for bit (same quantisation, same
 * float32 / float64 arithmetic, same tie-breaks), except dp_lean, which is
 * fxcut's own: the choice of dp in a sliver of dp's memory.
 *
 * No Python here; knows nothing of graphs.  Every function returns FXCUT_OK
 * or an error code with err filled (see fxcut.h).
 */
#ifndef FXCUT_KNAPSACK_H
#define FXCUT_KNAPSACK_H

#include "fxcut.h"

#include <stddef.h>
#include <stdint.h>

enum fxcut_knapsack_solver {
    /* torch's dp_knapsack: memories quantised to multiples of 1e-4, a
     * float32 table of (n + 1) x (Q + 1) entries, backtracking from
     * (n, Q): item i-1 is saved where row i differs from row i-1. */
    FXCUT_KNAPSACK_DP = 0,
    /* The same choice as DP without the table: rows recomputed by a
     * divide-and-conquer over the items, "take" bits kept only for short
     * runs of rows and only over the columns the backtracking path can
     * reach.  Memory: one float32 row plus O(log n) row windows. */
    FXCUT_KNAPSACK_DP_LEAN = 1,
    /* torch's greedy_knapsack: items by runtime / memory, descending
     * (stable), each saved while it still fits. */
    FXCUT_KNAPSACK_GREEDY = 2,
    /* torch's dp_knapsack_sliding_hirschberg, with its own choices. */
    FXCUT_KNAPSACK_SLIDING_HIRSCHBERG = 3,
    FXCUT_KNAPSACK_NUM_SOLVERS = 4
};

/*
 * One instance: n items; memory[k] >= 0 and finite, runtime[k] finite;
 * max_memory >= 0 and finite.  (GREEDY also needs memory[k] > 0: torch's
 * divides by it.)
 */
typedef struct {
    int32_t n;
    const double *memory;
    const double *runtime;
    double max_memory;
} fxcut_knapsack_problem;

/*
 * What a solver chose.  Caller-allocated arrays of n entries:
 *   save[k]   1: item k stays saved; 0: it may be recomputed
 *   order[k]  the k-th item in the order the solver reports its lists
 *             (GREEDY: the ratio order; the others: 0, 1, ..., n-1)
 * value: the runtime torch's solver reports (DP / DP_LEAN: the float32
 * table entry dp[n][Q]; GREEDY: the float64 running sum of the saved
 * runtimes; SLIDING_HIRSCHBERG: the float64 sum in index order).
 * peak_bytes: the most heap the solver held at once.
 */
typedef struct {
    uint8_t *save;
    int32_t *order;
    double value;
    size_t peak_bytes;
} fxcut_knapsack_result;

/* torch's scale: a memory of 1.0 is 10000 quantised units. */
#define FXCUT_KNAPSACK_SCALE 10000.0

/* Checks the problem and runs one solver. */
int fxcut_knapsack_solve(const fxcut_knapsack_problem *p, int solver,
                         fxcut_knapsack_result *res, fxcut_error *err);

/* The name of a solver ("dp", "dp_lean", "greedy",
 * "dp_knapsack_sliding_hirschberg"), or NULL. */
const char *fxcut_knapsack_solver_name(int solver);

#endif /* FXCUT_KNAPSACK_H */
