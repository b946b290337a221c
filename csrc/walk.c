/* walk.c -- DeepCompile's ZeRO-3 parameter-alias walk.
 *
 * Under ZeRO-3 a gathered parameter must not outlive its use, so no view or
 * cast of it may be saved for backward.  A node is marked for recompute when
 * it is a call_function whose target aliases or casts (NO_COPY / CAST) and
 * one of its positional top-level args is a parameter placeholder or a node
 * already marked.  Graph order is topological, so one forward pass sees every
 * marked producer before its consumers: the walk is transitive.
 */
#include "fxcut_internal.h"

#include <string.h>

int fxcut_param_alias_walk(const fxcut_graph *g, const int32_t *params,
                           int32_t n_params, uint8_t *recompute,
                           fxcut_error *err)
{
    if (n_params < 0)
        return fxcut_fail(err, FXCUT_E_INVALID, -1,
                          "parameter count must be >= 0, got %d",
                          (int)n_params);
    for (int32_t k = 0; k < n_params; k++)
        if (params[k] < 0 || params[k] >= g->n)
            return fxcut_fail(err, FXCUT_E_INDEX, -1,
                              "params[%d] = %d is outside [0, %d)", (int)k,
                              (int)params[k], (int)g->n);
    for (int32_t k = 0; k < n_params; k++)
        if (g->kind[params[k]] != FXCUT_PLACEHOLDER)
            return fxcut_fail(err, FXCUT_E_INVALID, params[k],
                              "params[%d] = node %d is not a placeholder",
                              (int)k, (int)params[k]);
    /* recompute doubles as the "alias of a parameter" mark: 2 = parameter,
     * 1 = marked node; parameters are cleared to 0 before returning. */
    memset(recompute, 0, (size_t)g->n);
    for (int32_t k = 0; k < n_params; k++)
        recompute[params[k]] = 2;
    for (int32_t i = 0; i < g->n; i++) {
        if (g->kind[i] != FXCUT_CALL_FUNCTION ||
            (g->flags[i] & (FXCUT_F_NO_COPY | FXCUT_F_CAST)) == 0)
            continue;
        for (int32_t e = g->arg_ptr[i]; e < g->arg_ptr[i + 1]; e++) {
            if (recompute[g->arg_idx[e]] != 0) {
                if (recompute[i] == 0)
                    recompute[i] = 1;
                break;
            }
        }
    }
    for (int32_t k = 0; k < n_params; k++)
        if (recompute[params[k]] == 2)
            recompute[params[k]] = 0;
    return FXCUT_OK;
}
