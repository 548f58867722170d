/* wt/status.h: the one error type of wt.
 *
 * A function that can fail returns `wt_status *`: NULL means success, anything
 * else is a heap object carrying a code and a message written where the error
 * was found ("parameter 'x': shape [4, 4] does not match the model's [4, 8]").
 * The caller owns a returned status and releases it with wt_status_free(), or
 * passes it up (possibly with wt_status_prefix() adding context).
 *
 * Codes are gRPC's canonical codes, so that a status crosses the wire
 * unchanged; wt_code_to_grpc()/wt_code_from_grpc() still make the mapping
 * explicit at the boundary.
 *
 * If allocating a status fails, a static "out of memory" status is returned
 * instead; wt_status_free() ignores it. Callers never see NULL for an error.
 */
#ifndef WT_STATUS_H
#define WT_STATUS_H

#include <stdarg.h>
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_code {
  WT_OK = 0,
  WT_CANCELLED = 1,
  WT_UNKNOWN = 2,
  WT_INVALID_ARGUMENT = 3,
  WT_DEADLINE_EXCEEDED = 4,
  WT_NOT_FOUND = 5,
  WT_ALREADY_EXISTS = 6,
  WT_PERMISSION_DENIED = 7,
  WT_RESOURCE_EXHAUSTED = 8,
  WT_FAILED_PRECONDITION = 9,
  WT_ABORTED = 10,
  WT_OUT_OF_RANGE = 11,
  WT_UNIMPLEMENTED = 12,
  WT_INTERNAL = 13,
  WT_UNAVAILABLE = 14,
  WT_DATA_LOSS = 15,
  WT_UNAUTHENTICATED = 16,
} wt_code;

typedef struct wt_status wt_status;

/* Returns a new status with `code` and a printf-formatted message. `code`
 * must not be WT_OK (that is NULL). The caller owns the result. */
wt_status *wt_status_new(wt_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
wt_status *wt_status_newv(wt_code code, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* A status for errno `err` (ENOENT -> NOT_FOUND, EACCES -> PERMISSION_DENIED,
 * ENOMEM -> RESOURCE_EXHAUSTED, else INTERNAL); the message is the formatted
 * text followed by ": " and strerror(err). The caller owns the result. */
wt_status *wt_status_from_errno(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Releases `s`; NULL and the static out-of-memory status are ignored. */
void wt_status_free(wt_status *s);

/* WT_OK for NULL. */
wt_code wt_status_code(const wt_status *s);

/* "OK" for NULL. The string belongs to `s`. */
const char *wt_status_message(const wt_status *s);

/* Prepends "<formatted>: " to the message of `s` and returns `s` (or NULL for
 * NULL). Ownership of `s` passes through to the result. */
wt_status *wt_status_prefix(wt_status *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A copy of `s` (NULL for NULL); the caller owns it. */
wt_status *wt_status_copy(const wt_status *s);

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_CODE" outside the enum. Static. */
const char *wt_code_name(wt_code code);

/* Parses "INVALID_ARGUMENT" (case-insensitive); returns -1 if unknown. */
int wt_code_from_name(const char *name);

/* Mapping to and from grpc_status_code (an int here so that this header does
 * not pull in gRPC). A gRPC code outside 0..16 maps to WT_UNKNOWN. */
int wt_code_to_grpc(wt_code code);
wt_code wt_code_from_grpc(int grpc_code);

/* Check idiom after NCCL's checks.h: evaluate `expr` (returning wt_status *);
 * on error, store it in the function's `st` variable, log where it passed
 * through at debug level, and jump to the function's `out` label. */
#define WT_CHECK(expr)                                           \
  do {                                                           \
    wt_status *wt_check_st_ = (expr);                            \
    if (wt_check_st_ != NULL) {                                  \
      wt_status_trace_(wt_check_st_, __FILE__, __LINE__, #expr); \
      st = wt_check_st_;                                         \
      goto out;                                                  \
    }                                                            \
  } while (0)

/* Sets `st` to a new status and jumps to `out`. */
#define WT_FAIL(code, ...)                   \
  do {                                       \
    st = wt_status_new((code), __VA_ARGS__); \
    goto out;                                \
  } while (0)

/* Internal: debug trace for WT_CHECK. */
void wt_status_trace_(const wt_status *s, const char *file, int line,
                      const char *expr);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_STATUS_H */
