/* log.c: leveled logging to stderr (see wt/log.h). */

#include "wt/log.h"

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

void wt_log_set_level(wt_log_level level) { atomic_store(&log_level, (int)level); }

int wt_log_enabled(wt_log_level level) {
  return level != WT_LOG_OFF && level >= wt_log_get_level();
}

void wt_log(wt_log_level level, const char *module, const char *fmt, ...) {
  if (!wt_log_enabled(level)) return;
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line),
                   "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s [%s] ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                   tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                   level_tags[level], module ? module : "-");
  if (n < 0) return;
  if ((size_t)n < sizeof(line)) {
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (m > 0) n += m;
  }
  if ((size_t)n >= sizeof(line) - 1) n = (int)sizeof(line) - 2; /* truncated */
  line[n++] = '\n';
  /* One write per line keeps lines whole across threads and processes. */
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
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

void wt_log_limited(wt_log_limit *limit, wt_log_level level,
                    const char *module, const char *fmt, ...) {
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
