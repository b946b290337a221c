/*
 * fuzz_memory.c -- libFuzzer target: arbitrary bytes -> a graph array (the
 * format of fuzz_graph_input.h) and a decision -> fxcut_memory_simulate,
 * and the planner's fxcut_memsim_new / eval / free over the same decision.
 *
 * Checks: an error code with a terminated message, or a result that keeps
 * its contract: the peak is the larger of the two module peaks and the
 * largest live_bytes entry, at peak_step; every schedule entry in range,
 * the forward ones first; recomputed 0/1 and counted by n_recomputed;
 * nothing negative.  The internal simulator gives the same answer as the
 * public entry, twice in a row (no state leaks between evaluations), and
 * without the optional result arrays.  Everything is allocated at its exact
 * size, so a read or write one past an array is caught.
 *
 * Trailer after the graph (reads past the end are 0):
 *   u8 mode      bit 0 storage_of given; bit 1 flops given; bit 2 raw
 *                storage_of (taken as it comes: mostly invalid); bit 3
 *                save every node read by a tangent-dependent node (a
 *                realisable decision), else the saved bytes below
 *                bit 4 marks given
 *   per node:    u8 storage (i - b % (i + 1), or raw (int8) b * 3),
 *                u8 saved (bit 0) and marks (bits 1-2: X_MUST_FW, X_COPY),
 *                u8 flops
 *   then the inductor model's bytes, and u8 ws_mode (bit 0: a workspace
 *   per node, one u8 each: b * 64, or (int8) b * 1000 under bit 1; bit 2:
 *   kernel_calls)
 */
#include "fuzz_graph_input.h"
#include "memory_internal.h"

static int same(const fxcut_memory_result *a, const fxcut_memory_result *b)
{
    return a->peak_bytes == b->peak_bytes && a->peak_step == b->peak_step &&
           a->fw_peak_bytes == b->fw_peak_bytes &&
           a->bw_peak_bytes == b->bw_peak_bytes &&
           a->saved_bytes == b->saved_bytes &&
           a->recompute_flops == b->recompute_flops &&
           a->recompute_bytes == b->recompute_bytes &&
           a->n_recomputed == b->n_recomputed &&
           a->n_fw_steps == b->n_fw_steps && a->n_steps == b->n_steps;
}

static void check_result(const fxcut_graph *g, const fxcut_memory_result *r)
{
    int32_t n = g->n;
    FZ_CHECK(r->n_steps >= 0 && r->n_steps <= 2 * n, "n_steps %d", r->n_steps);
    FZ_CHECK(r->n_fw_steps >= 0 && r->n_fw_steps <= r->n_steps,
             "n_fw_steps %d of %d", r->n_fw_steps, r->n_steps);
    FZ_CHECK(r->peak_bytes >= 0 && r->fw_peak_bytes >= 0 &&
                 r->bw_peak_bytes >= 0 && r->saved_bytes >= 0 &&
                 r->recompute_flops >= 0 && r->recompute_bytes >= 0,
             "a negative total");
    FZ_CHECK(r->peak_bytes == (r->fw_peak_bytes > r->bw_peak_bytes
                                   ? r->fw_peak_bytes
                                   : r->bw_peak_bytes),
             "peak %lld is not max(fw %lld, bw %lld)",
             (long long)r->peak_bytes, (long long)r->fw_peak_bytes,
             (long long)r->bw_peak_bytes);
    int64_t most = 0;
    for (int32_t k = 0; k < r->n_steps; k++) {
        FZ_CHECK(r->schedule[k] >= 0 && r->schedule[k] < n, "schedule[%d] %d",
                 k, r->schedule[k]);
        FZ_CHECK(g->kind[r->schedule[k]] != FXCUT_PLACEHOLDER &&
                     g->kind[r->schedule[k]] != FXCUT_OUTPUT,
                 "step %d runs an input or the output", k);
        FZ_CHECK(r->live_bytes[k] >= 0, "live_bytes[%d] negative", k);
        if (r->live_bytes[k] > most)
            most = r->live_bytes[k];
    }
    FZ_CHECK(most == r->peak_bytes, "largest live %lld, peak %lld",
             (long long)most, (long long)r->peak_bytes);
    if (r->n_steps == 0)
        FZ_CHECK(r->peak_step == -1, "peak_step %d with no step",
                 r->peak_step);
    else
        FZ_CHECK(r->peak_step >= 0 && r->peak_step < r->n_steps &&
                     r->live_bytes[r->peak_step] == r->peak_bytes,
                 "peak_step %d", r->peak_step);
    int32_t count = 0;
    for (int32_t i = 0; i < n; i++) {
        FZ_CHECK(r->recomputed[i] <= 1, "recomputed[%d] = %d", i,
                 r->recomputed[i]);
        count += r->recomputed[i];
    }
    FZ_CHECK(count == r->n_recomputed, "%d marked, n_recomputed %d", count,
             r->n_recomputed);
}

static void result_arrays(fxcut_memory_result *r, int32_t n)
{
    memset(r, 0, sizeof *r);
    r->recomputed = xmalloc((size_t)n + 1);
    r->schedule = xmalloc(2 * ((size_t)n + 1) * sizeof *r->schedule);
    r->live_bytes = xmalloc(2 * ((size_t)n + 1) * sizeof *r->live_bytes);
}

static void result_arrays_free(fxcut_memory_result *r)
{
    free(r->recomputed);
    free(r->schedule);
    free(r->live_bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    arrays a;
    fxcut_partition_options o;
    int raw;
    decode(&in, &a, &o, &raw);
    fxcut_graph g = graph_of(&a);
    int32_t n = a.n;
    uint8_t mode = fz_u8(&in);
    int32_t *storage = xmalloc(((size_t)n + 1) * sizeof *storage);
    int64_t *flops = xmalloc(((size_t)n + 1) * sizeof *flops);
    uint8_t *mask = xmalloc((size_t)n + 1);
    uint8_t *marks = xmalloc((size_t)n + 1);
    int32_t *saved = xmalloc(((size_t)n + 1) * sizeof *saved);
    for (int32_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(&in);
        storage[i] = (mode & 4) ? (int32_t)(int8_t)b * 3 : i - b % (i + 1);
        uint8_t m = fz_u8(&in);
        mask[i] = m & 1;
        marks[i] = (uint8_t)((m >> 1) & 3);
        flops[i] = fz_u8(&in);
    }
    fxcut_memory_options opt;
    memset(&opt, 0, sizeof opt);
    opt.num_fwd_outputs = o.num_fwd_outputs;
    opt.storage_of = (mode & 1) ? storage : NULL;
    opt.flops = (mode & 2) ? flops : NULL;
    opt.marks = (mode & 16) ? marks : NULL;
    /* the inductor model (mode & 32): a fusion kind per node (mostly valid:
     * the low bits mapped onto the known flags, any byte under mode & 128),
     * inlined costs, iteration spaces, realization thresholds */
    uint8_t *fusion = xmalloc((size_t)n + 1);
    int64_t *iteration = xmalloc(((size_t)n + 1) * sizeof *iteration);
    for (int32_t i = 0; i < n; i++) {
        uint8_t f = fz_u8(&in);
        fusion[i] = (mode & 128) ? f : (uint8_t)((f & 3) | (f & 0x78));
        iteration[i] = fz_u8(&in) % 5;
    }
    if (mode & 32) {
        opt.fusion = fusion;
        opt.fused_cost = (mode & 2) ? flops : NULL;
        opt.iteration = (mode & 64) ? iteration : NULL;
        opt.realize_reuse_reads = fz_u8(&in) % 6;
        opt.realize_acc_reads = fz_u8(&in) % 14;
        opt.realize_opcount = fz_u8(&in) % 40;
    }
    /* kernel workspaces (ws_mode bit 0), negative ones too (bit 1) */
    uint8_t ws_mode = fz_u8(&in);
    int64_t *workspace = xmalloc(((size_t)n + 1) * sizeof *workspace);
    for (int32_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(&in);
        workspace[i] = (ws_mode & 2) ? (int64_t)(int8_t)b * 1000 : (int64_t)b * 64;
    }
    opt.workspace = (ws_mode & 1) ? workspace : NULL;
    opt.kernel_calls = (ws_mode & 4) != 0;
    fxcut_error err;
    memset(&err, 0, sizeof err);
    int rc = fxcut_graph_validate(&g, &err);
    if (rc == FXCUT_OK && (mode & 8)) {
        /* every value a tangent-dependent node reads, when tangent-free */
        uint8_t *dep = xmalloc((size_t)n + 1);
        for (int32_t i = 0; i < n; i++) {
            dep[i] = g.kind[i] == FXCUT_PLACEHOLDER &&
                     (g.flags[i] & (FXCUT_F_TANGENT | FXCUT_F_BWD_SEED));
            for (int32_t e = g.in_ptr[i]; e < g.in_ptr[i + 1]; e++)
                dep[i] |= dep[g.in_idx[e]];
            mask[i] = 0;
        }
        for (int32_t i = 0; i < n; i++)
            if (dep[i])
                for (int32_t e = g.in_ptr[i]; e < g.in_ptr[i + 1]; e++)
                    if (!dep[g.in_idx[e]])
                        mask[g.in_idx[e]] = 1;
        free(dep);
    }
    int32_t n_saved = 0;
    for (int32_t i = 0; i < n; i++)
        if (mask[i])
            saved[n_saved++] = i;

    fxcut_memory_result r1;
    result_arrays(&r1, n);
    rc = fxcut_memory_simulate(&g, &opt, saved, n_saved, &r1, &err);
    if (getenv("FXCUT_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "fuzz_memory: n %d saved %d rc %d (%s) peak %lld "
                "steps %d\n", n, n_saved, rc, rc ? err.message : "ok",
                (long long)r1.peak_bytes, r1.n_steps);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
    } else {
        check_result(&g, &r1);
        /* the planner's path, twice, and once without the arrays */
        fxcut_memsim *s = NULL;
        fxcut_error err2;
        memset(&err2, 0, sizeof err2);
        rc = fxcut_memsim_new(&g, &opt, &s, &err2);
        FZ_CHECK(rc == FXCUT_OK, "memsim_new fails with %d: %s", rc,
                 err2.message);
        fxcut_memory_result r2, r3;
        result_arrays(&r2, n);
        memset(&r3, 0, sizeof r3);
        for (int k = 0; k < 2; k++) {
            rc = fxcut_memsim_eval(s, mask, &r2, &err2);
            FZ_CHECK(rc == FXCUT_OK, "memsim_eval fails with %d: %s", rc,
                     err2.message);
            FZ_CHECK(same(&r1, &r2),
                     "memsim_eval differs (run %d): peak %lld/%lld fw %lld/%lld "
                     "bw %lld/%lld flops %lld/%lld steps %d/%d", k,
                     (long long)r1.peak_bytes, (long long)r2.peak_bytes,
                     (long long)r1.fw_peak_bytes, (long long)r2.fw_peak_bytes,
                     (long long)r1.bw_peak_bytes, (long long)r2.bw_peak_bytes,
                     (long long)r1.recompute_flops,
                     (long long)r2.recompute_flops, r1.n_steps, r2.n_steps);
            FZ_CHECK(memcmp(r1.schedule, r2.schedule,
                            (size_t)r1.n_steps * sizeof *r1.schedule) == 0 &&
                         memcmp(r1.live_bytes, r2.live_bytes,
                                (size_t)r1.n_steps * 8) == 0 &&
                         memcmp(r1.recomputed, r2.recomputed, (size_t)n) == 0,
                     "memsim_eval's arrays differ (run %d)", k);
        }
        rc = fxcut_memsim_eval(s, mask, &r3, &err2);
        FZ_CHECK(rc == FXCUT_OK && same(&r1, &r3),
                 "memsim_eval without arrays differs");
        fxcut_memsim_free(s);
        result_arrays_free(&r2);
    }
    result_arrays_free(&r1);
    free(storage);
    free(fusion);
    free(iteration);
    free(workspace);
    free(flops);
    free(mask);
    free(marks);
    free(saved);
    arrays_free(&a);
    return 0;
}
