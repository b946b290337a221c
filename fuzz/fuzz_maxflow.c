/*
 * fuzz_maxflow.c -- libFuzzer target: arbitrary small networks ->
 * fxcut_min_cut with push-relabel and with Dinic, both checked against a
 * plain Edmonds-Karp written here (exact 128-bit arithmetic).
 *
 * For a valid network both algorithms must give the reference's cut value
 * and its sink side: the vertices that can reach the sink in the residual
 * network of a maximum flow (the same for every maximum flow).  When the
 * source reaches the sink along infinite edges both must fail with
 * FXCUT_E_UNBOUNDED; for malformed input (a vertex out of range, a
 * negative capacity, source == sink, an unknown algorithm) with
 * FXCUT_E_INDEX or FXCUT_E_INVALID.
 *
 * Input format (every read past the end is 0):
 *   u8 n_vertices    (% 16) + 1, or raw (mode bit 0)
 *   u8 mode          bit 0: raw n; bit 1: raw endpoints (out of range
 *                    allowed); bit 2: raw capacities (negatives allowed);
 *                    bit 3: huge capacities likely (the 128-bit path)
 *   u8 source, u8 sink, u8 algorithm (% 4: 3 is invalid)
 *   u8 n_edges       (% 64)
 *   per edge: u8 tail, u8 head, u8 capacity code (see decode_cap)
 */
#include "fxcut.h"
#include "maxflow.h"
#include "fuzz_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

#define MAX_EDGES 64

static int64_t decode_cap(fuzz_input *in, int huge, int raw)
{
    uint8_t code = fz_u8(in);
    if (raw && code >= 250)
        return (int64_t)fz_u64(in);
    if (code < 24)
        return FXCUT_CAP_INF;
    if (code < 40)
        return 0;
    if (huge && code >= 200)
        return INT64_MAX - (int64_t)(code - 200);
    if (code >= 240)
        return ((int64_t)1 << 62) + code;
    return code % 16;
}

/* Edmonds-Karp on an adjacency matrix (n <= 256): exact, slow, obvious. */
typedef struct {
    int32_t n;
    u128 *cap; /* n * n residual capacities */
} ek_net;

static int ek_bfs(const ek_net *g, int32_t s, int32_t t, int32_t *parent)
{
    int32_t n = g->n;
    int32_t *queue = malloc((size_t)n * sizeof *queue);
    for (int32_t v = 0; v < n; v++)
        parent[v] = -1;
    parent[s] = s;
    int32_t qh = 0, qt = 0;
    queue[qt++] = s;
    while (qh < qt && parent[t] < 0) {
        int32_t u = queue[qh++];
        for (int32_t v = 0; v < n; v++)
            if (parent[v] < 0 && g->cap[(size_t)u * n + v] > 0) {
                parent[v] = u;
                queue[qt++] = v;
            }
    }
    free(queue);
    return parent[t] >= 0;
}

/* Returns 1 for an infinite path (no finite cut), else 0 with *value and
 * side[] (1 = reaches the sink in the residual network). */
static int reference_cut(int32_t n, int32_t m, const int32_t *tail,
                         const int32_t *head, const int64_t *cap, int32_t s,
                         int32_t t, u128 *value, uint8_t *side)
{
    /* Infinite path? */
    uint8_t *reach = calloc((size_t)n, 1);
    reach[s] = 1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t e = 0; e < m; e++)
            if (cap[e] == FXCUT_CAP_INF && reach[tail[e]] && !reach[head[e]]) {
                reach[head[e]] = 1;
                changed = 1;
            }
    }
    int unbounded = reach[t];
    free(reach);
    if (unbounded)
        return 1;
    u128 finite = 0;
    for (int32_t e = 0; e < m; e++)
        if (cap[e] != FXCUT_CAP_INF)
            finite += (u128)cap[e];
    ek_net g = {n, calloc((size_t)n * n, sizeof(u128))};
    for (int32_t e = 0; e < m; e++) {
        if (tail[e] == head[e])
            continue;
        g.cap[(size_t)tail[e] * n + head[e]] +=
            cap[e] == FXCUT_CAP_INF ? finite + 1 : (u128)cap[e];
    }
    int32_t *parent = malloc((size_t)n * sizeof *parent);
    u128 flow = 0;
    while (ek_bfs(&g, s, t, parent)) {
        u128 delta = ~(u128)0;
        for (int32_t v = t; v != s; v = parent[v])
            if (g.cap[(size_t)parent[v] * n + v] < delta)
                delta = g.cap[(size_t)parent[v] * n + v];
        for (int32_t v = t; v != s; v = parent[v]) {
            g.cap[(size_t)parent[v] * n + v] -= delta;
            g.cap[(size_t)v * n + parent[v]] += delta;
        }
        flow += delta;
    }
    /* Vertices that reach t: backwards over residual arcs u -> v. */
    memset(side, 0, (size_t)n);
    side[t] = 1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t u = 0; u < n; u++)
            for (int32_t v = 0; v < n && !side[u]; v++)
                if (side[v] && g.cap[(size_t)u * n + v] > 0) {
                    side[u] = 1;
                    changed = 1;
                }
    }
    free(parent);
    free(g.cap);
    *value = flow;
    return 0;
}

/* What the infinite_path hook saw. */
typedef struct {
    const fxcut_network *net;
    int32_t source, sink;
    int calls;
} path_seen;

/* The path the solver reports on FXCUT_E_UNBOUNDED runs source -> sink
 * along infinite input edges. */
static void check_path(void *arg, const int32_t *path, int32_t len)
{
    path_seen *p = arg;
    p->calls++;
    FZ_CHECK(len >= 2 && path[0] == p->source && path[len - 1] == p->sink,
             "path of %d vertices from %d to %d", len, len ? path[0] : -1,
             len ? path[len - 1] : -1);
    for (int32_t k = 0; k + 1 < len; k++) {
        int found = 0;
        for (int64_t e = 0; e < p->net->n_edges && !found; e++)
            found = p->net->tail[e] == path[k] &&
                    p->net->head[e] == path[k + 1] &&
                    p->net->cap[e] == FXCUT_CAP_INF;
        FZ_CHECK(found, "path step %d -> %d is no infinite edge", path[k],
                 path[k + 1]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    uint8_t nb = fz_u8(&in), mode = fz_u8(&in);
    const int raw_n = mode & 1, raw_ends = (mode >> 1) & 1,
              raw_cap = (mode >> 2) & 1, huge = (mode >> 3) & 1;
    int32_t n = raw_n ? (int32_t)(int8_t)nb : (int32_t)(nb % 16) + 1;
    uint8_t sb = fz_u8(&in), tb = fz_u8(&in);
    int algorithm = fz_u8(&in) % 4;
    int32_t s = raw_ends || n <= 0 ? (int32_t)(int8_t)sb : (int32_t)(sb % n);
    int32_t t = raw_ends || n <= 0 ? (int32_t)(int8_t)tb : (int32_t)(tb % n);
    int32_t m = fz_u8(&in) % MAX_EDGES;
    int32_t *tail = malloc((size_t)(m ? m : 1) * sizeof *tail);
    int32_t *head = malloc((size_t)(m ? m : 1) * sizeof *head);
    int64_t *cap = malloc((size_t)(m ? m : 1) * sizeof *cap);
    int valid = n >= 1 && s >= 0 && s < n && t >= 0 && t < n && s != t &&
                algorithm <= FXCUT_MAXFLOW_DINIC;
    for (int32_t e = 0; e < m; e++) {
        uint8_t a = fz_u8(&in), b = fz_u8(&in);
        if (raw_ends || n <= 0) {
            tail[e] = (int32_t)(int8_t)a;
            head[e] = (int32_t)(int8_t)b;
        } else {
            tail[e] = a % n;
            head[e] = b % n;
        }
        cap[e] = decode_cap(&in, huge, raw_cap);
        valid &= tail[e] >= 0 && tail[e] < n && head[e] >= 0 &&
                 head[e] < n && (cap[e] >= 0 || cap[e] == FXCUT_CAP_INF);
    }
    fxcut_network net = {n, m, tail, head, cap};
    uint8_t *side = malloc((size_t)(n > 0 ? n : 1));
    uint8_t *ref_side = malloc((size_t)(n > 0 ? n : 1));
    u128 ref_value = 0;
    int unbounded = valid ? reference_cut(n, m, tail, head, cap, s, t,
                                          &ref_value, ref_side)
                          : 0;
    const int algorithms[2] = {valid ? FXCUT_MAXFLOW_PUSH_RELABEL : algorithm,
                               valid ? FXCUT_MAXFLOW_DINIC : algorithm};
    for (int k = 0; k < (valid ? 2 : 1); k++) {
        fxcut_u128 value = {0, 0};
        fxcut_error err;
        memset(&err, 0, sizeof err);
        path_seen seen = {&net, s, t, 0};
        const fxcut_min_cut_hooks hooks = {NULL, check_path, &seen};
        int rc = fxcut_min_cut_hooked(&net, s, t, algorithms[k], &value, side,
                                      &hooks, &err);
        FZ_CHECK(seen.calls == (rc == FXCUT_E_UNBOUNDED), "path reported %d "
                 "times for code %d", seen.calls, rc);
        FZ_CHECK(rc == FXCUT_OK || err.code == rc, "err.code %d, rc %d",
                 err.code, rc);
        if (rc != FXCUT_OK)
            FZ_CHECK(memchr(err.message, 0, sizeof err.message) &&
                         err.message[0],
                     "bad message for %d", rc);
        if (!valid) {
            FZ_CHECK(rc == FXCUT_E_INVALID || rc == FXCUT_E_INDEX,
                     "malformed network: code %d (%s)", rc, err.message);
            continue;
        }
        if (unbounded) {
            FZ_CHECK(rc == FXCUT_E_UNBOUNDED, "algorithm %d: code %d, not "
                     "unbounded (%s)", algorithms[k], rc, err.message);
            continue;
        }
        FZ_CHECK(rc == FXCUT_OK, "algorithm %d fails with %d: %s",
                 algorithms[k], rc, err.message);
        u128 got = (u128)value.hi << 64 | value.lo;
        FZ_CHECK(got == ref_value,
                 "algorithm %d: cut (%llu, %llu), reference (%llu, %llu)",
                 algorithms[k], (unsigned long long)value.hi,
                 (unsigned long long)value.lo,
                 (unsigned long long)(ref_value >> 64),
                 (unsigned long long)ref_value);
        for (int32_t v = 0; v < n; v++)
            FZ_CHECK(side[v] == ref_side[v],
                     "algorithm %d: vertex %d sink side %d, reference %d",
                     algorithms[k], v, side[v], ref_side[v]);
    }
    free(tail);
    free(head);
    free(cap);
    free(side);
    free(ref_side);
    return 0;
}
