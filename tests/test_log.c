/* test_log.c: log levels and the shape of a log line. */
#include <pthread.h>
#include <regex.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "wt/log.h"
#include "wt_test.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* "2026-11-30T15:29:09.123Z INFO  [module] message" */
#define LINE_RE                                                      \
  "^[0-9]{4}-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]" \
  "\\.[0-9]{3}Z "

/* Redirects stderr into a temporary file between capture_begin() and
 * capture_end(), which returns what was written (malloc'd). */
typedef struct capture {
  FILE *file;
  int saved_fd;
} capture;

static void capture_begin(capture *c) {
  fflush(stderr);
  c->file = tmpfile();
  CU_ASSERT_PTR_NOT_NULL_FATAL(c->file);
  c->saved_fd = dup(STDERR_FILENO);
  CU_ASSERT_FATAL(c->saved_fd >= 0);
  CU_ASSERT_FATAL(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved_fd, STDERR_FILENO);
  close(c->saved_fd);
  /* write(2) on the dup'd descriptor moved the shared offset under the
   * FILE's feet: measure from the end, then read from the start. */
  fseek(c->file, 0, SEEK_END);
  long len = ftell(c->file);
  if (len < 0) len = 0;
  rewind(c->file);
  char *text = malloc((size_t)len + 1);
  size_t n = text ? fread(text, 1, (size_t)len, c->file) : 0;
  if (text) text[n] = '\0';
  fclose(c->file);
  return text;
}

static int matches(const char *text, const char *pattern) {
  regex_t re;
  if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) return 0;
  int ok = regexec(&re, text, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

static size_t count_lines(const char *text) {
  size_t n = 0;
  for (const char *p = text; *p; p++)
    if (*p == '\n') n++;
  return n;
}

static wt_log_level saved_level;

static int suite_init(void) {
  saved_level = wt_log_get_level();
  return 0;
}

static int suite_clean(void) {
  wt_log_set_level(saved_level);
  return 0;
}

static void test_parse(void) {
  static const struct {
    const char *name;
    wt_log_level level;
  } ok[] = {
      {"debug", WT_LOG_DEBUG},  {"DEBUG", WT_LOG_DEBUG},
      {"info", WT_LOG_INFO},    {"Info", WT_LOG_INFO},
      {"warn", WT_LOG_WARN},    {"warning", WT_LOG_WARN},
      {"WARNING", WT_LOG_WARN}, {"error", WT_LOG_ERROR},
      {"off", WT_LOG_OFF},
  };
  for (size_t i = 0; i < NELEM(ok); i++) {
    wt_log_level lv = (wt_log_level)99;
    CU_ASSERT_EQUAL(wt_log_level_parse(ok[i].name, &lv), 0);
    CU_ASSERT_EQUAL(lv, ok[i].level);
  }
  static const char *const bad[] = {"",    "verbose", "inf",     "debug ",
                                    "err", "3",       "warnings"};
  for (size_t i = 0; i < NELEM(bad); i++) {
    wt_log_level lv = WT_LOG_ERROR;
    CU_ASSERT_EQUAL(wt_log_level_parse(bad[i], &lv), -1);
    CU_ASSERT_EQUAL(lv, WT_LOG_ERROR); /* untouched */
  }
  wt_log_level lv = WT_LOG_ERROR;
  CU_ASSERT_EQUAL(wt_log_level_parse(NULL, &lv), -1);
}

/* What strangers can repeat: one line a second, the rest counted and said
 * with the next. */
static void test_limited(void) {
  wt_log_set_level(WT_LOG_INFO);
  wt_log_limit lim = {0};
  capture c;
  capture_begin(&c);
  for (int i = 0; i < 50; i++)
    wt_log_limited(&lim, WT_LOG_WARN, "test", "refused %d", i);
  struct timespec pause = {1, 100 * 1000000L};
  nanosleep(&pause, NULL);
  wt_log_limited(&lim, WT_LOG_WARN, "test", "refused %d", 50);
  char *text = capture_end(&c);
  CU_ASSERT_FATAL(text != NULL);
  CU_ASSERT_EQUAL(count_lines(text), 2);
  CU_ASSERT(matches(text, "WARN  \\[test\\] refused 0\n"));
  CU_ASSERT(matches(text, "refused 50 \\(and 49 more not logged\\)"));
  free(text);
  wt_log_set_level(saved_level);
}

static void test_level_names(void) {
  CU_ASSERT_STRING_EQUAL(wt_log_level_name(WT_LOG_DEBUG), "debug");
  CU_ASSERT_STRING_EQUAL(wt_log_level_name(WT_LOG_INFO), "info");
  CU_ASSERT_STRING_EQUAL(wt_log_level_name(WT_LOG_WARN), "warn");
  CU_ASSERT_STRING_EQUAL(wt_log_level_name(WT_LOG_ERROR), "error");
  CU_ASSERT_STRING_EQUAL(wt_log_level_name(WT_LOG_OFF), "off");
  /* Every name parses back to its level. */
  for (int i = WT_LOG_DEBUG; i <= WT_LOG_OFF; i++) {
    wt_log_level lv;
    CU_ASSERT_EQUAL(wt_log_level_parse(wt_log_level_name(i), &lv), 0);
    CU_ASSERT_EQUAL(lv, i);
  }
}

static void test_set_get_enabled(void) {
  wt_log_set_level(WT_LOG_INFO);
  CU_ASSERT_EQUAL(wt_log_get_level(), WT_LOG_INFO);
  CU_ASSERT_FALSE(wt_log_enabled(WT_LOG_DEBUG));
  CU_ASSERT_TRUE(wt_log_enabled(WT_LOG_INFO));
  CU_ASSERT_TRUE(wt_log_enabled(WT_LOG_WARN));
  CU_ASSERT_TRUE(wt_log_enabled(WT_LOG_ERROR));
  CU_ASSERT_FALSE(wt_log_enabled(WT_LOG_OFF)); /* OFF is not a message level */

  wt_log_set_level(WT_LOG_ERROR);
  CU_ASSERT_EQUAL(wt_log_get_level(), WT_LOG_ERROR);
  CU_ASSERT_FALSE(wt_log_enabled(WT_LOG_WARN));
  CU_ASSERT_TRUE(wt_log_enabled(WT_LOG_ERROR));

  wt_log_set_level(WT_LOG_DEBUG);
  CU_ASSERT_TRUE(wt_log_enabled(WT_LOG_DEBUG));

  wt_log_set_level(WT_LOG_OFF);
  CU_ASSERT_EQUAL(wt_log_get_level(), WT_LOG_OFF);
  for (int i = WT_LOG_DEBUG; i <= WT_LOG_OFF; i++)
    CU_ASSERT_FALSE(wt_log_enabled(i));
  wt_log_set_level(saved_level);
}

static void test_line_format(void) {
  wt_log_set_level(WT_LOG_INFO);
  capture c;
  capture_begin(&c);
  WT_LOGI("packing", "planned %d buckets for '%s'", 3, "model");
  char *text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 1);
  CU_ASSERT_TRUE(matches(
      text, LINE_RE "INFO  \\[packing\\] planned 3 buckets for 'model'\n$"));
  if (!matches(text, LINE_RE "INFO  \\[packing\\]"))
    fprintf(stderr, "\n  got: %s\n", text);
  free(text);

  capture_begin(&c);
  WT_LOGW("server", "slow peer %s", "10.0.0.2:5000");
  WT_LOGE("client", "gave up");
  wt_log(WT_LOG_INFO, NULL, "no module");
  text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 3);
  CU_ASSERT_TRUE(matches(
      text, LINE_RE "WARN  \\[server\\] slow peer 10\\.0\\.0\\.2:5000\n"));
  CU_ASSERT_TRUE(
      matches(text, "\n[0-9]{4}-[^\n]*Z ERROR \\[client\\] gave up\n"));
  CU_ASSERT_TRUE(matches(text, "Z INFO  \\[-\\] no module\n$"));
  free(text);
  wt_log_set_level(saved_level);
}

/* A message quoting a caller's string (an abort reason with a newline, a
 * version with terminal escapes) stays one line, its control bytes
 * escaped: it cannot forge a line or drive a reader's terminal. */
static void test_text_escapes_control_bytes(void) {
  wt_log_set_level(WT_LOG_INFO);
  capture c;
  capture_begin(&c);
  WT_LOGI("round", "aborted: %s",
          "oops\n2026-01-01T00:00:00.000Z INFO  [server] "
          "forged\x1b]52;c;aGk=\x07\\");
  char *text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 1);
  CU_ASSERT_PTR_NULL(strchr(text, 0x1b));
  CU_ASSERT_PTR_NULL(strchr(text, 0x07));
  CU_ASSERT_TRUE(
      matches(text,
              "aborted: oops\\\\n2026-01-01T00:00:00\\.000Z INFO  "
              "\\[server\\] forged\\\\x1b\\]52;c;aGk=\\\\x07\\\\\\\\\n$"));
  if (!matches(text, "forged\\\\x1b")) fprintf(stderr, "\n  got: %s\n", text);
  free(text);
  wt_log_set_level(saved_level);
}

static void test_level_filters(void) {
  wt_log_set_level(WT_LOG_WARN);
  capture c;
  capture_begin(&c);
  WT_LOGD("m", "debug line");
  WT_LOGI("m", "info line");
  WT_LOGW("m", "warn line");
  WT_LOGE("m", "error line");
  char *text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 2);
  CU_ASSERT_PTR_NULL(strstr(text, "debug line"));
  CU_ASSERT_PTR_NULL(strstr(text, "info line"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "WARN  [m] warn line\n"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "ERROR [m] error line\n"));
  free(text);

  wt_log_set_level(WT_LOG_DEBUG);
  capture_begin(&c);
  WT_LOGD("m", "debug line");
  text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_TRUE(matches(text, LINE_RE "DEBUG \\[m\\] debug line\n$"));
  free(text);

  wt_log_set_level(WT_LOG_OFF);
  capture_begin(&c);
  WT_LOGE("m", "error line");
  text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_STRING_EQUAL(text, "");
  free(text);
  wt_log_set_level(saved_level);
}

static void test_long_message(void) {
  wt_log_set_level(WT_LOG_INFO);
  size_t n = 10000;
  char *big = malloc(n + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(big);
  memset(big, 'q', n);
  big[n] = '\0';
  capture c;
  capture_begin(&c);
  WT_LOGI("m", "%s", big);
  char *text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  /* Cut to one line, still ending in a newline. */
  CU_ASSERT_EQUAL(count_lines(text), 1);
  CU_ASSERT_TRUE(matches(text, LINE_RE "INFO  \\[m\\] q+\n$"));
  CU_ASSERT_TRUE(strlen(text) < n);
  free(text);
  free(big);
  wt_log_set_level(saved_level);
}

/* --log-format json: one object per line, time, level, component and the
 * message escaped (quotes, backslashes, newlines, control bytes), parsed
 * back by jansson; a long message stays one object. */
static void test_json_format(void) {
  wt_log_set_level(WT_LOG_INFO);
  wt_log_format f;
  CU_ASSERT_EQUAL(wt_log_format_parse("json", &f), 0);
  CU_ASSERT_EQUAL(f, WT_LOG_JSON);
  CU_ASSERT_EQUAL(wt_log_format_parse("xml", &f), -1);
  wt_log_set_format(WT_LOG_JSON);
  capture c;
  capture_begin(&c);
  WT_LOGW("ex\"port", "peer \"%s\" said \\ no\nand\tthen \x01 bye", "a b");
  char big[6000];
  memset(big, 'q', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  WT_LOGI("m", "%s", big);
  char *text = capture_end(&c);
  wt_log_set_format(WT_LOG_TEXT);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 2);
  char *nl = strchr(text, '\n');
  CU_ASSERT_FATAL(nl != NULL);
  *nl = '\0';
  json_error_t err;
  json_t *o = json_loads(text, 0, &err);
  CU_ASSERT_FATAL(o != NULL);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "level")),
                         "warn");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "component")),
                         "ex\"port");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "message")),
                         "peer \"a b\" said \\ no\nand\tthen \x01 bye");
  CU_ASSERT_TRUE(matches(json_string_value(json_object_get(o, "time")),
                         "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z$"));
  json_decref(o);
  json_t *o2 = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, &err);
  CU_ASSERT_PTR_NOT_NULL(o2); /* cut, still an object */
  json_decref(o2);
  free(text);
  wt_log_set_level(saved_level);
}

/* The thread's context (wt_log_context) as fields of their own, in JSON
 * only; gone once cleared; the peer escaped like the message. */
static void test_json_context(void) {
  wt_log_set_level(WT_LOG_INFO);
  wt_log_set_format(WT_LOG_JSON);
  capture c;
  capture_begin(&c);
  wt_log_context old =
      wt_log_context_set((wt_log_context){42, 3, "ipv4:127.0.0.1:5 \"x\""});
  WT_LOGI("server", "with");
  wt_log_context_set((wt_log_context){0, 0, NULL});
  WT_LOGI("server", "worker zero");
  wt_log_context_set(WT_LOG_NO_CONTEXT);
  WT_LOGI("server", "without");
  char *text = capture_end(&c);
  wt_log_context_set(old);
  wt_log_set_format(WT_LOG_TEXT);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), 3);
  json_error_t err;
  char *line = text;
  json_t *o[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3 && line; i++) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    o[i] = json_loads(line, 0, &err);
    line = nl ? nl + 1 : NULL;
  }
  CU_ASSERT_FATAL(o[0] && o[1] && o[2]);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "round")),
                         "42");
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[0], "worker")), 3);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "peer")),
                         "ipv4:127.0.0.1:5 \"x\"");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "message")),
                         "with");
  CU_ASSERT_PTR_NULL(json_object_get(o[1], "round"));
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[1], "worker")), 0);
  CU_ASSERT_PTR_NULL(json_object_get(o[2], "worker"));
  CU_ASSERT_PTR_NULL(json_object_get(o[2], "peer"));
  for (int i = 0; i < 3; i++) json_decref(o[i]);
  free(text);
  wt_log_set_level(saved_level);
}

enum { THREADS = 4, LINES = 200 };

static void *log_many(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < LINES; i++)
    WT_LOGI("thread", "t%d line %d %s", id, i,
            "padding-padding-padding-padding-padding-padding-padding");
  return NULL;
}

/* Lines from several threads never interleave. */
static void test_threads(void) {
  wt_log_set_level(WT_LOG_INFO);
  capture c;
  capture_begin(&c);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, log_many, (void *)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  char *text = capture_end(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(count_lines(text), THREADS * LINES);
  size_t bad = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    if (!matches(line, LINE_RE "INFO  \\[thread\\] t[0-9] line [0-9]+ "
                               "(padding-){6}padding$"))
      bad++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  free(text);
  wt_log_set_level(saved_level);
}

void wt_test_suite_log(void) {
  CU_pSuite s = CU_add_suite("log", suite_init, suite_clean);
  CU_add_test(s, "limited: one line a second", test_limited);
  CU_add_test(s, "level parsing, good and bad names", test_parse);
  CU_add_test(s, "level names", test_level_names);
  CU_add_test(s, "set, get, enabled", test_set_get_enabled);
  CU_add_test(s, "a line has timestamp, level and [module]", test_line_format);
  CU_add_test(s, "messages below the level are dropped", test_level_filters);
  CU_add_test(s, "a long message stays one line", test_long_message);
  CU_add_test(s, "text: control bytes escaped, one line a message",
              test_text_escapes_control_bytes);
  CU_add_test(s, "--log-format json: one object a line", test_json_format);
  CU_add_test(s, "--log-format json: round, worker and peer fields",
              test_json_context);
  CU_add_test(s, "threads do not interleave lines", test_threads);
}
