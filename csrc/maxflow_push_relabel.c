/* maxflow_push_relabel.c -- highest-label push-relabel, instantiated for
 * int64_t and (where the compiler has it) __int128 flows.  The algorithm
 * is in maxflow_push_relabel.tmpl.h. */
#include "maxflow_internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef FXCUT_MAXFLOW_STATS
#include <stdio.h>
#endif

#define FLOW_T int64_t
#define FN(name) name##_i64
#include "maxflow_push_relabel.tmpl.h"
#undef FLOW_T
#undef FN

#if FXCUT_HAVE_INT128
#define FLOW_T fxcut_i128
#define FN(name) name##_i128
#include "maxflow_push_relabel.tmpl.h"
#undef FLOW_T
#undef FN
#endif
