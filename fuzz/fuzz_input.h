/*
 * fuzz_input.h -- reading a fuzzer's bytes as a stream of small integers.
 * Past the end every read gives 0, so every input decodes to something.
 */
#ifndef FXCUT_FUZZ_INPUT_H
#define FXCUT_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    size_t left;
} fuzz_input;

static inline uint8_t fz_u8(fuzz_input *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

static inline uint16_t fz_u16(fuzz_input *in)
{
    uint16_t lo = fz_u8(in);
    return (uint16_t)(lo | (uint16_t)(fz_u8(in) << 8));
}

static inline uint32_t fz_u32(fuzz_input *in)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++)
        v |= (uint32_t)fz_u8(in) << (8 * k);
    return v;
}

static inline uint64_t fz_u64(fuzz_input *in)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)fz_u8(in) << (8 * k);
    return v;
}

/* Aborts the process (the fuzzer reports a crash) with a message. */
#define FZ_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "fuzz check failed: %s (%s:%d): ", #cond,         \
                    __FILE__, __LINE__);                                      \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

#endif /* FXCUT_FUZZ_INPUT_H */
