/* maxflow.c -- placeholder until the solver lands. */
#include "maxflow.h"

int fxcut_min_cut(const fxcut_network *net, int32_t source, int32_t sink,
                  int algorithm, fxcut_u128 *cut_value, uint8_t *sink_side,
                  fxcut_error *err)
{
    (void)net; (void)source; (void)sink; (void)algorithm; (void)cut_value;
    (void)sink_side;
    return fxcut_fail(err, FXCUT_E_INVALID, -1, "min_cut: not built yet");
}
