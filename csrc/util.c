/* util.c -- the core's shared helpers (fxcut_internal.h). */
#include "fxcut_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int fxcut_fail(fxcut_error *err, int code, int64_t node, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        err->node = node;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

void fxcut_sort_desc_stable(int32_t *idx, int32_t *tmp, int32_t n,
                            fxcut_key_greater greater, const void *keys)
{
    /* Bottom-up; every bound is checked before it is formed, so nothing
     * overflows even for n near 2^31. */
    for (int32_t width = 1; width < n; width = width > n / 2 ? n : 2 * width) {
        for (int32_t lo = 0; lo < n;) {
            if (width >= n - lo) {
                memcpy(tmp + lo, idx + lo, (size_t)(n - lo) * sizeof *idx);
                break;
            }
            int32_t mid = lo + width;
            int32_t hi = width < n - mid ? mid + width : n;
            int32_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = greater(keys, idx[b], idx[a]) ? idx[b++] : idx[a++];
            while (a < mid)
                tmp[k++] = idx[a++];
            while (b < hi)
                tmp[k++] = idx[b++];
            lo = hi;
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}
