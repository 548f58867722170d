/* status.c: wt_status, the one error type (see wt/status.h). */

#include "wt/status.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "wt/log.h"

struct wt_status {
  wt_code code;
  char *msg;
};

/* Returned when a status itself cannot be allocated; never freed. */
static struct wt_status oom_status = {WT_RESOURCE_EXHAUSTED,
                                      (char *)"out of memory"};

/* What a handler that parked its call returns (wt_rpc_call_park, wt/rpc.h):
 * never freed, never prefixed, never sent. */
static struct wt_status parked_status = {
    WT_INTERNAL, (char *)"internal: the call is parked (a parked call's "
                         "status is not an answer)"};

/* Declared in wt/rpc.h (internal), exported for libwt_common. */
WT_API_BEGIN
wt_status *wt_status_parked_(void);
WT_API_END
wt_status *wt_status_parked_(void) {
  return &parked_status;
}

static bool immortal(const wt_status *s) {
  return s == &oom_status || s == &parked_status;
}

static const char *const code_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
#define NCODES ((int)(sizeof(code_names) / sizeof(code_names[0])))

wt_status *wt_status_newv(wt_code code, const char *fmt, va_list ap) {
  if (code == WT_OK) code = WT_UNKNOWN; /* NULL is OK; never build an OK */
  struct wt_status *s = malloc(sizeof(*s));
  if (s == NULL) return &oom_status;
  s->code = code;
  if (vasprintf(&s->msg, fmt, ap) < 0) {
    free(s);
    return &oom_status;
  }
  return s;
}

wt_status *wt_status_new(wt_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  wt_status *s = wt_status_newv(code, fmt, ap);
  va_end(ap);
  return s;
}

wt_status *wt_status_from_errno(int err, const char *fmt, ...) {
  wt_code code;
  switch (err) {
    case ENOENT:
      code = WT_NOT_FOUND;
      break;
    case EACCES:
    case EPERM:
      code = WT_PERMISSION_DENIED;
      break;
    case ENOMEM:
    case ENOSPC:
      code = WT_RESOURCE_EXHAUSTED;
      break;
    case EINVAL:
      code = WT_INVALID_ARGUMENT;
      break;
    case ETIMEDOUT:
      code = WT_DEADLINE_EXCEEDED;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      code = WT_UNAVAILABLE;
      break;
    default:
      code = WT_INTERNAL;
      break;
  }
  char *head = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&head, fmt, ap);
  va_end(ap);
  if (n < 0) return &oom_status;
  char buf[256];
  const char *reason = strerror_r(err, buf, sizeof(buf));
  wt_status *s = wt_status_new(code, "%s: %s", head, reason);
  free(head);
  return s;
}

void wt_status_free(wt_status *s) {
  if (s == NULL || immortal(s)) return;
  free(s->msg);
  free(s);
}

wt_code wt_status_code(const wt_status *s) {
  return s ? s->code : WT_OK;
}

const char *wt_status_message(const wt_status *s) {
  return s ? s->msg : "OK";
}

wt_status *wt_status_prefix(wt_status *s, const char *fmt, ...) {
  if (s == NULL || immortal(s)) return s;
  char *head = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&head, fmt, ap);
  va_end(ap);
  if (n < 0) return s; /* keep the original message rather than lose it */
  char *joined = NULL;
  if (asprintf(&joined, "%s: %s", head, s->msg) >= 0) {
    free(s->msg);
    s->msg = joined;
  }
  free(head);
  return s;
}

wt_status *wt_status_copy(const wt_status *s) {
  if (s == NULL) return NULL;
  if (immortal(s)) return (wt_status *)s;
  return wt_status_new(s->code, "%s", s->msg);
}

const char *wt_code_name(wt_code code) {
  if ((int)code < 0 || (int)code >= NCODES) return "UNKNOWN_CODE";
  return code_names[code];
}

int wt_code_from_name(const char *name) {
  if (name == NULL) return -1;
  for (int i = 0; i < NCODES; i++)
    if (strcasecmp(name, code_names[i]) == 0) return i;
  return -1;
}

/* wt_code values are gRPC's canonical codes (grpc/status.h); the table is the
 * identity, but keeping the mapping a function means the day one side adds a
 * code, only this file changes. */
int wt_code_to_grpc(wt_code code) {
  if ((int)code < 0 || (int)code >= NCODES) return (int)WT_UNKNOWN;
  return (int)code;
}

wt_code wt_code_from_grpc(int grpc_code) {
  if (grpc_code < 0 || grpc_code >= NCODES) return WT_UNKNOWN;
  return (wt_code)grpc_code;
}

void wt_status_trace_(const wt_status *s, const char *file, int line,
                      const char *expr) {
  if (!wt_log_enabled(WT_LOG_DEBUG)) return;
  wt_log(WT_LOG_DEBUG, "status", "%s:%d: %s -> %s: %s", file, line, expr,
         wt_code_name(wt_status_code(s)), wt_status_message(s));
}
