/*
 * maxflow_instantiate.h -- instantiates the max-flow template named by
 * FXCUT_MAXFLOW_TEMPLATE (a header file name) for int64_t flows and, where
 * the compiler has it, __int128 flows (see maxflow_internal.h).
 */
#define FLOW_T int64_t
#define FN(name) name##_i64
#include FXCUT_MAXFLOW_TEMPLATE
#undef FLOW_T
#undef FN

#if FXCUT_HAVE_INT128
#define FLOW_T fxcut_i128
#define FN(name) name##_i128
#include FXCUT_MAXFLOW_TEMPLATE
#undef FLOW_T
#undef FN
#endif
