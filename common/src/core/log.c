/* log.c: leveled logging to stderr (see wt/log.h). */

#include "wt/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* The log level is one of the two kinds of global state wt allows. */
static atomic_int log_level = WT_LOG_INFO;
static atomic_int log_format = WT_LOG_TEXT;

void wt_log_set_format(wt_log_format format) {
  atomic_store(&log_format, (int)format);
}

wt_log_format wt_log_get_format(void) {
  return (wt_log_format)atomic_load(&log_format);
}

int wt_log_format_parse(const char *name, wt_log_format *out) {
  if (name != NULL && strcmp(name, "text") == 0) {
    *out = WT_LOG_TEXT;
    return 0;
  }
  if (name != NULL && strcmp(name, "json") == 0) {
    *out = WT_LOG_JSON;
    return 0;
  }
  return -1;
}

/* Appends `s` to out[*n..cap) as the inside of a JSON string: quotes,
 * backslashes and control bytes escaped; invalid UTF-8 passes as it is
 * (the messages are wt's own, with names already checked). Stops short of
 * cap, leaving room for the closing of the object. */
static void json_escape(char *out, size_t *n, size_t cap, const char *s) {
  static const char hex[] = "0123456789abcdef";
  for (; *s != '\0' && *n + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[(*n)++] = '\\';
      out[(*n)++] = (char)c;
    } else if (c == '\n') {
      out[(*n)++] = '\\';
      out[(*n)++] = 'n';
    } else if (c == '\t') {
      out[(*n)++] = '\\';
      out[(*n)++] = 't';
    } else if (c < 0x20 || c == 0x7f) {
      memcpy(out + *n, "\\u00", 4);
      *n += 4;
      out[(*n)++] = hex[c >> 4];
      out[(*n)++] = hex[c & 15];
    } else {
      out[(*n)++] = (char)c;
    }
  }
}

/* Appends `s` to out[*n..cap) for the text format: control bytes (a
 * newline, ESC) as \n, \t, \xNN and backslashes doubled, so a message that
 * quotes a caller's string (a version, an abort reason) stays one line and
 * cannot drive a reader's terminal. */
static void text_escape(char *out, size_t *n, size_t cap, const char *s) {
  static const char hex[] = "0123456789abcdef";
  for (; *s != '\0' && *n + 5 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\\' || c == '\n' || c == '\t') {
      out[(*n)++] = '\\';
      out[(*n)++] = c == '\n' ? 'n' : c == '\t' ? 't' : '\\';
    } else if (c < 0x20 || c == 0x7f) {
      memcpy(out + *n, "\\x", 2);
      *n += 2;
      out[(*n)++] = hex[c >> 4];
      out[(*n)++] = hex[c & 15];
    } else {
      out[(*n)++] = (char)c;
    }
  }
}

static const char *const level_names[] = {"debug", "info", "warn", "error",
                                          "off"};
static const char *const level_tags[] = {"DEBUG", "INFO ", "WARN ", "ERROR",
                                         "OFF  "};

int wt_log_level_parse(const char *name, wt_log_level *out) {
  if (name == NULL) return -1;
  for (int i = 0; i <= WT_LOG_OFF; i++) {
    if (strcasecmp(name, level_names[i]) == 0) {
      *out = (wt_log_level)i;
      return 0;
    }
  }
  if (strcasecmp(name, "warning") == 0) {
    *out = WT_LOG_WARN;
    return 0;
  }
  return -1;
}

const char *wt_log_level_name(wt_log_level level) {
  if ((int)level < 0 || level > WT_LOG_OFF) return "unknown";
  return level_names[level];
}

wt_log_level wt_log_get_level(void) {
  return (wt_log_level)atomic_load(&log_level);
}

void wt_log_set_level(wt_log_level level) {
  atomic_store(&log_level, (int)level);
}

int wt_log_enabled(wt_log_level level) {
  return level != WT_LOG_OFF && level >= wt_log_get_level();
}

/* worker + 1, so that a thread's zeroed context means "none" */
static _Thread_local uint64_t ctx_round;
static _Thread_local int ctx_worker1;
static _Thread_local const char *ctx_peer;

wt_log_context wt_log_context_get(void) {
  return (wt_log_context){ctx_round, ctx_worker1 - 1, ctx_peer};
}

wt_log_context wt_log_context_set(wt_log_context ctx) {
  wt_log_context old = wt_log_context_get();
  ctx_round = ctx.round;
  ctx_worker1 = ctx.worker < 0 ? 0 : ctx.worker + 1;
  ctx_peer = ctx.peer;
  return old;
}

void wt_log(wt_log_level level, const char *module, const char *fmt, ...) {
  if (!wt_log_enabled(level)) return;
  char line[4096], msg[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  char when[64];
  snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
           tm.tm_sec, ts.tv_nsec / 1000000);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (m < 0) msg[0] = '\0';
  size_t n = 0;
  if (wt_log_get_format() == WT_LOG_JSON) {
    int k = snprintf(line, sizeof(line),
                     "{\"time\":\"%s\",\"level\":\"%s\",\"component\":\"", when,
                     level_names[level]);
    n = k > 0 ? (size_t)k : 0;
    json_escape(line, &n, sizeof(line), module ? module : "-");
    line[n++] = '"';
    int c = 0;
    if (ctx_round != 0)
      c = snprintf(line + n, sizeof(line) - n, ",\"round\":\"%" PRIu64 "\"",
                   ctx_round);
    if (c > 0) n += (size_t)c;
    if (ctx_worker1 > 0 &&
        (c = snprintf(line + n, sizeof(line) - n, ",\"worker\":%d",
                      ctx_worker1 - 1)) > 0)
      n += (size_t)c;
    if (ctx_peer != NULL) {
      memcpy(line + n, ",\"peer\":\"", 9);
      n += 9;
      json_escape(line, &n, n + 256 < sizeof(line) ? n + 256 : sizeof(line),
                  ctx_peer); /* a peer is short */
      line[n++] = '"';
    }
    memcpy(line + n, ",\"message\":\"", 12);
    n += 12;
    json_escape(line, &n, sizeof(line) - 4, msg);
    memcpy(line + n, "\"}\n", 3);
    n += 3;
  } else {
    int k = snprintf(line, sizeof(line), "%s %s [%s] ", when, level_tags[level],
                     module ? module : "-");
    if (k < 0) return;
    n = (size_t)k;
    text_escape(line, &n, sizeof(line) - 1, msg); /* cut to one line */
    line[n++] = '\n';
  }
  /* One write per line keeps lines whole across threads and processes. */
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w;
}

void wt_log_level_from(const char *name, const char *what) {
  wt_log_level level = WT_LOG_INFO;
  if (name == NULL || *name == '\0') return;
  if (wt_log_level_parse(name, &level) != 0) {
    fprintf(stderr,
            "wt: %s=%s is not one of debug|info|warn|error|off; using info\n",
            what ? what : "log level", name);
    level = WT_LOG_INFO;
  }
  wt_log_set_level(level);
}

#define LOG_LIMIT_MS 1000

void wt_log_limited(wt_log_limit *limit, wt_log_level level, const char *module,
                    const char *fmt, ...) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  if (limit->last_ms != 0 && now - limit->last_ms < LOG_LIMIT_MS) {
    limit->held_back++;
    return;
  }
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (limit->held_back)
    wt_log(level, module, "%s (and %llu more not logged)", msg,
           (unsigned long long)limit->held_back);
  else
    wt_log(level, module, "%s", msg);
  limit->last_ms = now;
  limit->held_back = 0;
}
