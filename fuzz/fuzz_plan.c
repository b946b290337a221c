/*
 * fuzz_plan.c -- libFuzzer target: arbitrary bytes -> a graph array (the
 * format of fuzz_graph_input.h), plan roles, storages, costs and seeds ->
 * fxcut_plan_simulate and fxcut_plan_frontier_search (plan.c).
 *
 * Checks: an error code with a terminated message, or results that keep
 * their contract: the frontier sorted by peak ascending with costs strictly
 * descending, each point's mask simulating to exactly its (peak, cost);
 * every seed dominated by a point; with every FREE node enumerable, the
 * frontier flagged exact; the same search on three lanes (threads) finds
 * the same frontier, evaluations and work.  Arrays at their exact sizes.
 *
 * Trailer after the graph (reads past the end are 0):
 *   u8 mode      bit 0 storage_of given; bit 1 flops given; bit 2 raw roles
 *                (b % 6: mostly invalid); bit 3 a small work budget (the
 *                search cut short); bit 4 a
 *                seed; bits 5-7 max_points - 1
 *   per node:    u8 role (placeholders / get_attr INPUT, else b % 4 of
 *                BACKWARD, SAVE, FREE, RECOMPUTE), u8 storage
 *                (i - b % (i + 1)), u8 flops, u8 seed bit
 */
#include "fuzz_graph_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t roles4[4] = {FXCUT_ROLE_BACKWARD, FXCUT_ROLE_SAVE,
                                      FXCUT_ROLE_FREE, FXCUT_ROLE_RECOMPUTE};
    fuzz_input in = {data, size};
    arrays a;
    fxcut_partition_options o;
    int raw;
    decode(&in, &a, &o, &raw);
    fxcut_graph g = graph_of(&a);
    int32_t n = a.n;
    uint8_t mode = fz_u8(&in);
    uint8_t *role = exact(xmalloc((size_t)n + 1), (size_t)n);
    int32_t *storage = xmalloc(((size_t)n + 1) * sizeof *storage);
    int64_t *flops = xmalloc(((size_t)n + 1) * sizeof *flops);
    uint8_t *seed = xmalloc((size_t)n + 1);
    for (int32_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(&in);
        int input = a.kind[i] == FXCUT_PLACEHOLDER || a.kind[i] == FXCUT_GET_ATTR;
        role[i] = (mode & 4) ? (uint8_t)(b % 6)
                  : input    ? (uint8_t)FXCUT_ROLE_INPUT
                             : roles4[b % 4];
        storage[i] = i - fz_u8(&in) % (i + 1);
        flops[i] = fz_u8(&in);
        seed[i] = fz_u8(&in) & 1;
    }
    /* the inductor memory model (fmode & 1): fusion kinds (valid ones),
     * inlined costs, iteration spaces, realization thresholds */
    uint8_t fmode = fz_u8(&in);
    uint8_t *fusion = xmalloc((size_t)n + 1);
    int64_t *iteration = xmalloc(((size_t)n + 1) * sizeof *iteration);
    for (int32_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(&in);
        fusion[i] = (uint8_t)((b & 3) | (b & 0x78));
        iteration[i] = fz_u8(&in) % 5;
    }
    int32_t max_points = 1 + (mode >> 5);
    fxcut_plan_options opt;
    memset(&opt, 0, sizeof opt);
    opt.num_fwd_outputs = o.num_fwd_outputs;
    opt.role = role;
    opt.storage_of = (mode & 1) ? storage : NULL;
    opt.flops = (mode & 2) ? flops : NULL;
    opt.seeds = (mode & 16) ? seed : NULL;
    opt.n_seeds = (mode & 16) ? 1 : 0;
    opt.exact_max_free = 6;
    opt.time_limit_s = 0.05;
    opt.max_points = max_points;
    opt.max_work = (mode & 8) ? 1 + (int64_t)n * 40 : (int64_t)1 << 40;
    if (fmode & 1) {
        opt.fusion = fusion;
        opt.fused_cost = (fmode & 2) ? flops : NULL;
        opt.iteration = (fmode & 4) ? iteration : NULL;
        opt.realize_reuse_reads = (fmode >> 3) % 6;
        opt.realize_acc_reads = 1 + (fmode >> 4);
        opt.realize_opcount = 2 + (fmode >> 5);
        /* bit 7 also feeds the thresholds above */
        opt.kernel_calls = (fmode & 128) != 0;
    }
    fxcut_plan_frontier f;
    memset(&f, 0, sizeof f);
    f.peak_bytes = xmalloc((size_t)max_points * sizeof *f.peak_bytes);
    f.recompute_flops = xmalloc((size_t)max_points * sizeof *f.recompute_flops);
    f.masks = xmalloc((size_t)max_points * ((size_t)n + 1));
    fxcut_error err;
    memset(&err, 0, sizeof err);
    int rc = fxcut_plan_frontier_search(&g, &opt, &f, &err);
    if (rc != FXCUT_OK) {
        check_error(rc, &err);
    } else {
        FZ_CHECK(f.n_points >= 1 && f.n_points <= max_points, "n_points %d",
                 f.n_points);
        for (int32_t k = 0; k < f.n_points; k++) {
            if (k > 0)
                FZ_CHECK(f.peak_bytes[k] > f.peak_bytes[k - 1] &&
                             f.recompute_flops[k] < f.recompute_flops[k - 1],
                         "point %d not on a frontier", k);
            fxcut_plan_eval r;
            memset(&r, 0, sizeof r);
            uint8_t *mask = exact(xmalloc((size_t)n + 1), (size_t)n);
            memcpy(mask, f.masks + (size_t)k * (size_t)n, (size_t)n);
            rc = fxcut_plan_simulate(&g, &opt, mask, &r, &err);
            FZ_CHECK(rc == FXCUT_OK && r.peak_bytes == f.peak_bytes[k] &&
                         r.recompute_flops == f.recompute_flops[k],
                     "point %d simulates to (%lld, %lld), not (%lld, %lld)", k,
                     (long long)r.peak_bytes, (long long)r.recompute_flops,
                     (long long)f.peak_bytes[k],
                     (long long)f.recompute_flops[k]);
            free(mask);
        }
        if ((mode & 16) && f.n_points < max_points) {
            fxcut_plan_eval r;
            memset(&r, 0, sizeof r);
            if (fxcut_plan_simulate(&g, &opt, seed, &r, &err) == FXCUT_OK) {
                int dominated = 0;
                for (int32_t k = 0; k < f.n_points; k++)
                    dominated |= f.peak_bytes[k] <= r.peak_bytes &&
                                 f.recompute_flops[k] <= r.recompute_flops;
                FZ_CHECK(dominated, "the seed is not dominated");
            }
        }
        if (f.n_free <= opt.exact_max_free && !f.timed_out && !f.out_of_work)
            FZ_CHECK(f.exact, "%d FREE nodes, not exact", f.n_free);
        /* lanes: the same search on three threads finds the same frontier
         * (the time limit aside) */
        if (!f.timed_out) {
            fxcut_plan_options opt3 = opt;
            opt3.threads = 3;
            fxcut_plan_frontier f3;
            memset(&f3, 0, sizeof f3);
            f3.peak_bytes = xmalloc((size_t)max_points * sizeof *f3.peak_bytes);
            f3.recompute_flops =
                xmalloc((size_t)max_points * sizeof *f3.recompute_flops);
            f3.masks = xmalloc((size_t)max_points * ((size_t)n + 1));
            rc = fxcut_plan_frontier_search(&g, &opt3, &f3, &err);
            if (rc == FXCUT_OK && !f3.timed_out) {
                FZ_CHECK(f3.n_points == f.n_points &&
                             f3.n_evals == f.n_evals && f3.work == f.work &&
                             f3.exact == f.exact &&
                             f3.out_of_work == f.out_of_work,
                         "3 lanes: %d points, %lld evaluations; 1 lane: %d, "
                         "%lld", f3.n_points, (long long)f3.n_evals,
                         f.n_points, (long long)f.n_evals);
                for (int32_t k = 0; k < f.n_points; k++)
                    FZ_CHECK(f3.peak_bytes[k] == f.peak_bytes[k] &&
                                 f3.recompute_flops[k] ==
                                     f.recompute_flops[k] &&
                                 memcmp(f3.masks + (size_t)k * (size_t)n,
                                        f.masks + (size_t)k * (size_t)n,
                                        (size_t)n) == 0,
                             "3 lanes: point %d differs", k);
            } else {
                FZ_CHECK(rc != FXCUT_OK || f3.timed_out,
                         "3 lanes failed where 1 did not");
            }
            free(f3.peak_bytes);
            free(f3.recompute_flops);
            free(f3.masks);
        }
    }
    free(f.peak_bytes);
    free(f.recompute_flops);
    free(f.masks);
    free(role);
    free(storage);
    free(flops);
    free(seed);
    free(fusion);
    free(iteration);
    arrays_free(&a);
    return 0;
}
