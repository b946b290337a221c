/*
 * fxcut_internal.h -- what the core's C files share and its users never
 * see: the error setter, exact wide integers, the "far from backward"
 * sentinel, the input test and the one stable sort.  Not part of the API
 * (fxcut.h is); the binding includes it only for fxcut_u128.
 */
#ifndef FXCUT_INTERNAL_H
#define FXCUT_INTERNAL_H

#include "fxcut.h"

#include <stdlib.h>

/* Sets err (when not NULL) and returns code; message is printf-style. */
int fxcut_fail(fxcut_error *err, int code, int64_t node, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* An exact unsigned 128-bit quantity (cut values can exceed 2^63). */
typedef struct {
    uint64_t hi;
    uint64_t lo;
} fxcut_u128;

static inline void fxcut_u128_add(fxcut_u128 *x, uint64_t y)
{
    uint64_t lo = x->lo + y;
    x->hi += lo < y;
    x->lo = lo;
}

/* free() of each of count pointers (NULL ones included). */
static inline void fxcut_free_each(void *const *ptrs, size_t count)
{
    for (size_t k = 0; k < count; k++)
        free(ptrs[k]);
}

/* Exact sums of many int64 sizes. */
#if defined(__SIZEOF_INT128__)
__extension__ typedef __int128 fxcut_wide;
#else
typedef long double fxcut_wide;
#endif

/* dist_from_bw of a node with no path to the backward (torch's int(1e9)):
 * such a node is no memory-budget candidate. */
#define FXCUT_DIST_FAR ((int64_t)1000000000)

/* A graph input as torch's partitioner counts them: a primal or a forward
 * seed / offset placeholder. */
static inline int fxcut_is_input(const fxcut_graph *g, int32_t i)
{
    return g->kind[i] == FXCUT_PLACEHOLDER &&
           (g->flags[i] & (FXCUT_F_PRIMAL | FXCUT_F_FWD_SEED)) != 0;
}

/*
 * Stable merge sort of idx[0 .. n) by a key, largest first: Python's
 * sorted(..., reverse=True), which keeps equal keys in their order.
 * greater(keys, a, b) says whether item a's key is larger than item b's.
 * tmp has n entries.
 */
typedef int (*fxcut_key_greater)(const void *keys, int32_t a, int32_t b);
void fxcut_sort_desc_stable(int32_t *idx, int32_t *tmp, int32_t n,
                            fxcut_key_greater greater, const void *keys);

#endif /* FXCUT_INTERNAL_H */
