/*
 * memory_internal.h -- the memory model for callers that evaluate many
 * decisions over one graph (the planner): built once per graph, evaluated
 * with no allocation per call.  Internal: no validation beyond the
 * decision's realisability; the semantics are fxcut_memory_simulate's
 * (fxcut.h).
 */
#ifndef FXCUT_MEMORY_INTERNAL_H
#define FXCUT_MEMORY_INTERNAL_H

#include "fxcut.h"

typedef struct fxcut_memsim fxcut_memsim;

/* g validated by the caller (fxcut_graph_validate), opt->storage_of in
 * [0, i] and opt->flops >= 0, num_fwd_outputs in [0, n_outputs]: checked
 * by fxcut_memory_simulate, not here.  FXCUT_E_OVERFLOW when the sizes or
 * the flops of all nodes sum past INT64_MAX (no total can overflow then).  g's and opt's arrays must outlive
 * the simulator (they are read again by every evaluation). */
int fxcut_memsim_new(const fxcut_graph *g, const fxcut_memory_options *opt,
                     fxcut_memsim **out, fxcut_error *err);

/* saved_mask: n bytes, nonzero = the forward saves node i.  Returns
 * FXCUT_OK, or FXCUT_E_INVALID with err->node set when the decision is not
 * realisable (a value the backward needs can be neither saved nor
 * recomputed from saved values / inputs, e.g. a tangent-dependent value). */
int fxcut_memsim_eval(fxcut_memsim *s, const uint8_t *saved_mask,
                      fxcut_memory_result *res, fxcut_error *err);

void fxcut_memsim_free(fxcut_memsim *s);

/* Readers of the last fxcut_memsim_eval that returned FXCUT_OK (for the
 * planner, which picks its moves from the model's own schedule):
 * out[i] = 1 where the backward reads node i as a saved value (the saved
 * mask after the values it never reads are dropped), n bytes. */
void fxcut_memsim_saved(const fxcut_memsim *s, uint8_t *out);

/* The node that owns node i's storage, and the bytes a storage root costs
 * (0: not counted), as the model counts them. */
int32_t fxcut_memsim_root(const fxcut_memsim *s, int32_t i);
int64_t fxcut_memsim_storage_bytes(const fxcut_memsim *s, int32_t root);

#endif /* FXCUT_MEMORY_INTERNAL_H */
