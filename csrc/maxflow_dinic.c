/* maxflow_dinic.c -- Dinic's algorithm, instantiated for int64_t and
 * (where the compiler has it) __int128 flows.  The algorithm is in
 * maxflow_dinic.tmpl.h. */
#include "maxflow_internal.h"

#include <stdlib.h>
#include <string.h>

#define FXCUT_MAXFLOW_TEMPLATE "maxflow_dinic.tmpl.h"
#include "maxflow_instantiate.h"
