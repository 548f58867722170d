/* wt/log.h: leveled logging to stderr.
 *
 * Each line: "2026-11-30T15:29:09.123Z INFO  [module] message". The level
 * is info until wt_log_set_level() says otherwise; the library reads no
 * environment (the tools take WT_LOG=debug|info|warn|error|off and pass it
 * on with wt_log_level_from). Logging is thread-safe: one line is one
 * write(2).
 */
#ifndef WT_LOG_H
#define WT_LOG_H

#include <stdint.h>
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_log_level {
  WT_LOG_DEBUG = 0,
  WT_LOG_INFO = 1,
  WT_LOG_WARN = 2,
  WT_LOG_ERROR = 3,
  WT_LOG_OFF = 4,
} wt_log_level;

void wt_log_set_level(wt_log_level level);

/* How lines look (process-wide, as the level; tools set it from their
 * options): text, "2026-12-02T05:00:00.000Z WARN  [export] message", or
 * JSON, one object per line for log shippers:
 * {"time":"2026-12-02T05:00:00.000Z","level":"warn","component":"export",
 *  "message":"..."} with the message escaped as JSON requires. */
typedef enum wt_log_format {
  WT_LOG_TEXT = 0,
  WT_LOG_JSON = 1,
} wt_log_format;
void wt_log_set_format(wt_log_format format);
wt_log_format wt_log_get_format(void);

/* What the calling thread works for, carried by its JSON lines as fields
 * of their own beside the message: "round" (a round id, 0: none),
 * "worker" (a worker's rank, -1: none) and "peer" (the client of the call
 * it handles, NULL: none; borrowed until the context changes). Text lines
 * are unchanged (the message says what matters). The server sets it:
 * a worker's thread its rank and the round of the op it runs, a handler
 * thread the call's peer and the round it acts in. */
typedef struct wt_log_context {
  uint64_t round;
  int worker;
  const char *peer;
} wt_log_context;
#define WT_LOG_NO_CONTEXT ((wt_log_context){0, -1, NULL})
/* Sets the calling thread's context and returns the one it replaces, for
 * the caller to put back. */
wt_log_context wt_log_context_set(wt_log_context ctx);
wt_log_context wt_log_context_get(void);
/* "text" or "json"; 0, or -1 for anything else. */
int wt_log_format_parse(const char *name, wt_log_format *out);
/* Sets the level from its name (a tool's WT_LOG, `what` for the message);
 * NULL or "" leaves it; a bad name says so on stderr and sets info. */
void wt_log_level_from(const char *name, const char *what);
wt_log_level wt_log_get_level(void);

/* Parses "debug", "info", "warn"/"warning", "error", "off" (any case).
 * Returns 0 and sets *out, or -1 for anything else. */
int wt_log_level_parse(const char *name, wt_log_level *out);

/* "debug", "info", ... Static. */
const char *wt_log_level_name(wt_log_level level);

/* True when a message at `level` would be written. */
int wt_log_enabled(wt_log_level level);

void wt_log(wt_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A complaint strangers can repeat at will (refused connections, bad
 * frames) as at most one line a second: the lines held back are counted and
 * said with the next ("(and 41 more not logged)"). Zero-initialize one per
 * complaint site; not thread-safe: use it from one thread or under the
 * caller's lock. */
typedef struct wt_log_limit {
  int64_t last_ms;
  uint64_t held_back;
} wt_log_limit;
void wt_log_limited(wt_log_limit *limit, wt_log_level level, const char *module,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define WT_LOGD(module, ...) wt_log(WT_LOG_DEBUG, (module), __VA_ARGS__)
#define WT_LOGI(module, ...) wt_log(WT_LOG_INFO, (module), __VA_ARGS__)
#define WT_LOGW(module, ...) wt_log(WT_LOG_WARN, (module), __VA_ARGS__)
#define WT_LOGE(module, ...) wt_log(WT_LOG_ERROR, (module), __VA_ARGS__)

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_LOG_H */
