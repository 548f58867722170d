/* alloc_fault.h: allocation-failure injection, in the style of curl's
 * torture tests. Only a build configured with -DWT_ALLOC_FAULTS=ON uses it:
 * CMake force-includes this header into every source file of libwt_common,
 * libwt_server and libwt_client, so that each malloc, calloc, realloc,
 * strdup, strndup, asprintf and vasprintf of wt's own code goes through a
 * counter, and the N-th of them can be made to fail (return NULL, errno
 * ENOMEM) as if memory had run out. Allocations inside gRPC, protobuf-c,
 * UCX and libc are not counted (they are not wt's failure paths).
 *
 * tests/test_alloc.c arms it for every N up to the allocations one whole
 * round makes (scripts/test.sh --alloc-faults). Never part of a release
 * build.
 */
#ifndef WT_ALLOC_FAULT_H
#define WT_ALLOC_FAULT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif
WT_API_BEGIN

/* Makes the n-th counted allocation from now fail (1: the next one); 0:
 * none. Resets the count and the fired flag. Thread-safe. */
void wt_fault_alloc_arm(uint64_t n);
/* Allocations counted since the last arm. */
uint64_t wt_fault_alloc_count(void);
/* Whether the armed allocation was reached (and failed). */
bool wt_fault_alloc_fired(void);

/* Distinct call sites (file and line) that allocated since the process
 * started, and how many of those are in `files_like` (a substring of the
 * path; NULL: all). */
size_t wt_fault_alloc_sites(const char *files_like);

void *wt_fault_malloc(size_t n, const char *file, int line);
void *wt_fault_calloc(size_t n, size_t size, const char *file, int line);
void *wt_fault_realloc(void *p, size_t n, const char *file, int line);
char *wt_fault_strdup(const char *s, const char *file, int line);
char *wt_fault_strndup(const char *s, size_t n, const char *file, int line);
int wt_fault_asprintf(const char *file, int line, char **out, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
int wt_fault_vasprintf(const char *file, int line, char **out, const char *fmt,
                       va_list ap) __attribute__((format(printf, 4, 0)));

WT_API_END
#ifdef __cplusplus
}
#endif

#ifndef WT_ALLOC_FAULT_IMPL
#define malloc(n) wt_fault_malloc(n, __FILE__, __LINE__)
#define calloc(n, size) wt_fault_calloc(n, size, __FILE__, __LINE__)
#define realloc(p, n) wt_fault_realloc(p, n, __FILE__, __LINE__)
#define strdup(s) wt_fault_strdup(s, __FILE__, __LINE__)
#define strndup(s, n) wt_fault_strndup(s, n, __FILE__, __LINE__)
#define asprintf(...) wt_fault_asprintf(__FILE__, __LINE__, __VA_ARGS__)
#define vasprintf(out, fmt, ap) \
  wt_fault_vasprintf(__FILE__, __LINE__, out, fmt, ap)
#endif

#endif /* WT_ALLOC_FAULT_H */
