/* maxflow_push_relabel.c -- highest-label push-relabel, instantiated for
 * int64_t and (where the compiler has it) __int128 flows.  The algorithm
 * is in maxflow_push_relabel.tmpl.h. */
#include "maxflow_internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef FXCUT_MAXFLOW_STATS
#include <stdio.h>
#endif

#define FXCUT_MAXFLOW_TEMPLATE "maxflow_push_relabel.tmpl.h"
#include "maxflow_instantiate.h"
