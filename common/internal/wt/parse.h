/* wt/parse.h: numbers as people write them on a command line or in a
 * config: "1048576", "64M", "64MiB", "2g" (binary multiples). */
#ifndef WT_PARSE_H
#define WT_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* A byte size with an optional K/M/G (KiB, MiB, GiB; "b", "ib", "iB"
 * allowed after it). False for anything else, negative or overflowing. */
bool wt_parse_size(const char *s, uint64_t *out);

/* A plain unsigned decimal. False for anything else, negative or
 * overflowing. */
bool wt_parse_u64(const char *s, uint64_t *out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_PARSE_H */
