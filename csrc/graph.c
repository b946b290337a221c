/* graph.c -- validation of a graph array and the users CSR. */
#include "fxcut_internal.h"

#include <stdlib.h>

/* One CSR (ptr[0..n], idx[0..ptr[n])): monotone, in range, and every
 * referenced node precedes its referrer (graph order is topological).
 * The caller guarantees idx has ptr[n] entries.  ptr is checked whole before
 * idx is read: a ptr[i] above ptr[n] is only caught by a later decrease, and
 * reading idx up to it first would run past the end of idx. */
static int validate_csr(int32_t n, const int32_t *ptr, const int32_t *idx,
                        const char *name, fxcut_error *err)
{
    if (ptr[0] != 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "%s_ptr[0] must be 0, got %d", name, (int)ptr[0]);
    for (int32_t i = 0; i < n; i++)
        if (ptr[i + 1] < ptr[i])
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "%s_ptr decreases at node %d (%d > %d)", name,
                              (int)i, (int)ptr[i], (int)ptr[i + 1]);
    for (int32_t i = 0; i < n; i++) {
        for (int32_t e = ptr[i]; e < ptr[i + 1]; e++) {
            int32_t j = idx[e];
            if (j < 0 || j >= n)
                return fxcut_fail(err, FXCUT_E_INDEX, i,
                                  "%s_idx[%d] = %d of node %d is outside "
                                  "[0, %d)", name, (int)e, (int)j, (int)i,
                                  (int)n);
            if (j >= i)
                return fxcut_fail(err, FXCUT_E_INVALID, i,
                                  "node %d uses node %d, which does not come "
                                  "before it (the graph has a cycle or is not "
                                  "in topological order)", (int)i, (int)j);
        }
    }
    return FXCUT_OK;
}

int fxcut_graph_validate(const fxcut_graph *g, fxcut_error *err)
{
    if (g->n < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "node count must be >= 0, got %d", (int)g->n);
    for (int32_t i = 0; i < g->n; i++) {
        if (g->kind[i] >= FXCUT_NUM_KINDS)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "kind[%d] = %u is not a node kind", (int)i,
                              (unsigned)g->kind[i]);
        if (g->tag[i] < FXCUT_TAG_NONE || g->tag[i] > FXCUT_TAG_MAX)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "tag[%d] = %d is not a recompute policy",
                              (int)i, (int)g->tag[i]);
        if (g->nbytes[i] < FXCUT_SIZE_UNKNOWN)
            return fxcut_fail(err, FXCUT_E_INVALID, i,
                              "nbytes[%d] = %lld is negative", (int)i,
                              (long long)g->nbytes[i]);
    }
    int rc = validate_csr(g->n, g->arg_ptr, g->arg_idx, "arg", err);
    if (rc != FXCUT_OK)
        return rc;
    rc = validate_csr(g->n, g->in_ptr, g->in_idx, "in", err);
    if (rc != FXCUT_OK)
        return rc;
    if (g->n_outputs < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "output count must be >= 0, got %d",
                          (int)g->n_outputs);
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] < -1 || g->outputs[k] >= g->n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "outputs[%d] = %d is outside [-1, %d)", (int)k,
                              (int)g->outputs[k], (int)g->n);
    return FXCUT_OK;
}

int fxcut_graph_users(const fxcut_graph *g, int32_t **user_ptr,
                      int32_t **user_idx, fxcut_error *err)
{
    int32_t n = g->n;
    int32_t m = g->in_ptr[n];
    int32_t *ptr = calloc((size_t)n + 1, sizeof *ptr);
    int32_t *idx = malloc(((size_t)m + 1) * sizeof *idx);
    int32_t *fill = malloc(((size_t)n + 1) * sizeof *fill);
    if (ptr == NULL || idx == NULL || fill == NULL) {
        free(ptr);
        free(idx);
        free(fill);
        return fxcut_fail(err, FXCUT_E_NOMEM, -1,
                          "out of memory building users of %d nodes", (int)n);
    }
    for (int32_t e = 0; e < m; e++)
        ptr[g->in_idx[e] + 1]++;
    for (int32_t i = 0; i < n; i++)
        ptr[i + 1] += ptr[i];
    for (int32_t i = 0; i < n; i++)
        fill[i] = ptr[i];
    /* Visiting users in graph order keeps each user list in graph order. */
    for (int32_t u = 0; u < n; u++)
        for (int32_t e = g->in_ptr[u]; e < g->in_ptr[u + 1]; e++)
            idx[fill[g->in_idx[e]]++] = u;
    free(fill);
    *user_ptr = ptr;
    *user_idx = idx;
    return FXCUT_OK;
}
