/* test_status.c: wt_status, code names, the gRPC mapping, the check idiom. */
#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/status.h"
#include "wt_test.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const names[] = {
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

static void test_new_and_accessors(void) {
  wt_status *s = wt_status_new(WT_NOT_FOUND, "parameter '%s' (%d of %d)",
                               "lm_head.weight", 3, 7);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL(wt_status_code(s), WT_NOT_FOUND);
  CU_ASSERT_STRING_EQUAL(wt_status_message(s),
                         "parameter 'lm_head.weight' (3 of 7)");
  wt_status_free(s);

  /* NULL is success. */
  CU_ASSERT_EQUAL(wt_status_code(NULL), WT_OK);
  CU_ASSERT_STRING_EQUAL(wt_status_message(NULL), "OK");
  wt_status_free(NULL);

  /* Long messages are not cut. */
  char big[5000];
  memset(big, 'm', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  s = wt_status_new(WT_INTERNAL, "%s!", big);
  CU_ASSERT_EQUAL(strlen(wt_status_message(s)), sizeof(big));
  wt_status_free(s);
}

static void test_code_names(void) {
  CU_ASSERT_EQUAL(NELEM(names), 17);
  for (int c = 0; c < (int)NELEM(names); c++) {
    CU_ASSERT_STRING_EQUAL(wt_code_name((wt_code)c), names[c]);
    CU_ASSERT_EQUAL(wt_code_from_name(names[c]), c);
  }
  CU_ASSERT_STRING_EQUAL(wt_code_name((wt_code)17), "UNKNOWN_CODE");
  CU_ASSERT_STRING_EQUAL(wt_code_name((wt_code)-1), "UNKNOWN_CODE");
  CU_ASSERT_EQUAL(wt_code_from_name("invalid_argument"), WT_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(wt_code_from_name("Not_Found"), WT_NOT_FOUND);
  CU_ASSERT_EQUAL(wt_code_from_name("NOT FOUND"), -1);
  CU_ASSERT_EQUAL(wt_code_from_name("NOT_FOUNDX"), -1);
  CU_ASSERT_EQUAL(wt_code_from_name("UNKNOWN_CODE"), -1);
  CU_ASSERT_EQUAL(wt_code_from_name(""), -1);
  CU_ASSERT_EQUAL(wt_code_from_name(NULL), -1);
}

static void test_grpc_mapping(void) {
  /* Against gRPC's own constants, not just our own numbers. */
  static const struct {
    wt_code wt;
    int grpc;
  } pairs[] = {
      {WT_OK, GRPC_STATUS_OK},
      {WT_CANCELLED, GRPC_STATUS_CANCELLED},
      {WT_UNKNOWN, GRPC_STATUS_UNKNOWN},
      {WT_INVALID_ARGUMENT, GRPC_STATUS_INVALID_ARGUMENT},
      {WT_DEADLINE_EXCEEDED, GRPC_STATUS_DEADLINE_EXCEEDED},
      {WT_NOT_FOUND, GRPC_STATUS_NOT_FOUND},
      {WT_ALREADY_EXISTS, GRPC_STATUS_ALREADY_EXISTS},
      {WT_PERMISSION_DENIED, GRPC_STATUS_PERMISSION_DENIED},
      {WT_RESOURCE_EXHAUSTED, GRPC_STATUS_RESOURCE_EXHAUSTED},
      {WT_FAILED_PRECONDITION, GRPC_STATUS_FAILED_PRECONDITION},
      {WT_ABORTED, GRPC_STATUS_ABORTED},
      {WT_OUT_OF_RANGE, GRPC_STATUS_OUT_OF_RANGE},
      {WT_UNIMPLEMENTED, GRPC_STATUS_UNIMPLEMENTED},
      {WT_INTERNAL, GRPC_STATUS_INTERNAL},
      {WT_UNAVAILABLE, GRPC_STATUS_UNAVAILABLE},
      {WT_DATA_LOSS, GRPC_STATUS_DATA_LOSS},
      {WT_UNAUTHENTICATED, GRPC_STATUS_UNAUTHENTICATED},
  };
  CU_ASSERT_EQUAL(NELEM(pairs), 17);
  for (size_t i = 0; i < NELEM(pairs); i++) {
    CU_ASSERT_EQUAL(wt_code_to_grpc(pairs[i].wt), pairs[i].grpc);
    CU_ASSERT_EQUAL(wt_code_from_grpc(pairs[i].grpc), pairs[i].wt);
  }
  for (int c = 0; c <= 16; c++)
    CU_ASSERT_EQUAL(wt_code_from_grpc(wt_code_to_grpc((wt_code)c)), c);
  CU_ASSERT_EQUAL(wt_code_from_grpc(17), WT_UNKNOWN);
  CU_ASSERT_EQUAL(wt_code_from_grpc(-1), WT_UNKNOWN);
  CU_ASSERT_EQUAL(wt_code_from_grpc(1000), WT_UNKNOWN);
  CU_ASSERT_EQUAL(wt_code_to_grpc((wt_code)17), GRPC_STATUS_UNKNOWN);
  CU_ASSERT_EQUAL(wt_code_to_grpc((wt_code)-5), GRPC_STATUS_UNKNOWN);
}

static void test_prefix(void) {
  wt_status *s = wt_status_new(
      WT_INVALID_ARGUMENT, "shape [4, 4] does not match the model's [4, 8]");
  s = wt_status_prefix(s, "parameter '%s'", "x");
  s = wt_status_prefix(s, "worker %d", 2);
  CU_ASSERT_EQUAL(wt_status_code(s), WT_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(wt_status_message(s),
                         "worker 2: parameter 'x': shape [4, 4] does not match "
                         "the model's [4, 8]");
  wt_status_free(s);
  CU_ASSERT_PTR_NULL(wt_status_prefix(NULL, "nothing %d", 1));
}

static void test_copy(void) {
  wt_status *a = wt_status_new(WT_DATA_LOSS, "bucket %d short by %d", 3, 10);
  wt_status *b = wt_status_copy(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_PTR_NOT_EQUAL(a, b);
  CU_ASSERT_PTR_NOT_EQUAL(wt_status_message(a), wt_status_message(b));
  CU_ASSERT_EQUAL(wt_status_code(b), WT_DATA_LOSS);
  CU_ASSERT_STRING_EQUAL(wt_status_message(b), "bucket 3 short by 10");
  /* The copy lives on its own. */
  a = wt_status_prefix(a, "round 1");
  CU_ASSERT_STRING_EQUAL(wt_status_message(b), "bucket 3 short by 10");
  wt_status_free(a);
  CU_ASSERT_STRING_EQUAL(wt_status_message(b), "bucket 3 short by 10");
  wt_status_free(b);
  CU_ASSERT_PTR_NULL(wt_status_copy(NULL));
}

static void test_from_errno(void) {
  int fd = open("/nonexistent/wt-test-file", O_RDONLY);
  int err = errno;
  CU_ASSERT_EQUAL_FATAL(fd, -1);
  wt_status *s =
      wt_status_from_errno(err, "open '%s'", "/nonexistent/wt-test-file");
  CU_ASSERT_EQUAL(wt_status_code(s), WT_NOT_FOUND);
  char want[512];
  snprintf(want, sizeof(want), "open '/nonexistent/wt-test-file': %s",
           strerror(ENOENT));
  CU_ASSERT_STRING_EQUAL(wt_status_message(s), want);
  wt_status_free(s);

  static const struct {
    int err;
    wt_code code;
  } map[] = {
      {ENOENT, WT_NOT_FOUND},
      {EACCES, WT_PERMISSION_DENIED},
      {ENOMEM, WT_RESOURCE_EXHAUSTED},
      {EIO, WT_INTERNAL},
  };
  for (size_t i = 0; i < NELEM(map); i++) {
    s = wt_status_from_errno(map[i].err, "op %zu", i);
    CU_ASSERT_EQUAL(wt_status_code(s), map[i].code);
    snprintf(want, sizeof(want), "op %zu: %s", i, strerror(map[i].err));
    CU_ASSERT_STRING_EQUAL(wt_status_message(s), want);
    wt_status_free(s);
  }
}

/* What the check idiom must do, observed from outside: which steps ran and
 * that the cleanup ran exactly once. */
typedef struct trail {
  int before, steps, after, cleanups;
} trail;

static wt_status *step(trail *t, wt_code code) {
  t->steps++;
  return code == WT_OK
             ? NULL
             : wt_status_new(code, "step failed with %s", wt_code_name(code));
}

static wt_status *uses_check(trail *t, wt_code first, wt_code second) {
  wt_status *st = NULL;
  t->before++;
  WT_CHECK(step(t, first));
  WT_CHECK(step(t, second));
  t->after++;
out:
  t->cleanups++;
  return st;
}

static wt_status *uses_fail(trail *t, int fail) {
  wt_status *st = NULL;
  t->before++;
  if (fail) WT_FAIL(WT_OUT_OF_RANGE, "index %d past %d", 9, 4);
  t->after++;
out:
  t->cleanups++;
  return st;
}

static void test_check_and_fail(void) {
  /* WT_CHECK logs at debug level; keep the run quiet. */
  wt_log_level saved = wt_log_get_level();
  wt_log_set_level(WT_LOG_OFF);

  trail t = {0, 0, 0, 0};
  WT_ASSERT_OK(uses_check(&t, WT_OK, WT_OK));
  CU_ASSERT(t.before == 1 && t.steps == 2 && t.after == 1 && t.cleanups == 1);

  t = (trail){0, 0, 0, 0};
  WT_ASSERT_ERR(uses_check(&t, WT_NOT_FOUND, WT_OK), WT_NOT_FOUND,
                "step failed with NOT_FOUND");
  /* The second step never ran. */
  CU_ASSERT(t.before == 1 && t.steps == 1 && t.after == 0 && t.cleanups == 1);

  t = (trail){0, 0, 0, 0};
  WT_ASSERT_ERR(uses_check(&t, WT_OK, WT_ABORTED), WT_ABORTED,
                "step failed with ABORTED");
  CU_ASSERT(t.before == 1 && t.steps == 2 && t.after == 0 && t.cleanups == 1);

  t = (trail){0, 0, 0, 0};
  WT_ASSERT_OK(uses_fail(&t, 0));
  CU_ASSERT(t.before == 1 && t.after == 1 && t.cleanups == 1);

  t = (trail){0, 0, 0, 0};
  WT_ASSERT_ERR(uses_fail(&t, 1), WT_OUT_OF_RANGE, "index 9 past 4");
  CU_ASSERT(t.before == 1 && t.after == 0 && t.cleanups == 1);

  /* At debug level WT_CHECK says where the error passed through, and the
   * result is the same. */
  wt_log_set_level(WT_LOG_DEBUG);
  FILE *cap = tmpfile();
  CU_ASSERT_PTR_NOT_NULL_FATAL(cap);
  fflush(stderr);
  int saved_fd = dup(STDERR_FILENO);
  CU_ASSERT_FATAL(saved_fd >= 0);
  dup2(fileno(cap), STDERR_FILENO);
  t = (trail){0, 0, 0, 0};
  wt_status *st = uses_check(&t, WT_INTERNAL, WT_OK);
  dup2(saved_fd, STDERR_FILENO);
  close(saved_fd);
  char text[1024] = "";
  rewind(cap);
  size_t n = fread(text, 1, sizeof(text) - 1, cap);
  text[n] = '\0';
  fclose(cap);
  WT_ASSERT_ERR(st, WT_INTERNAL, "step failed with INTERNAL");
  CU_ASSERT(t.before == 1 && t.after == 0 && t.cleanups == 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "[status]"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "test_status.c:"));
  CU_ASSERT_PTR_NOT_NULL(
      strstr(text, "step(t, first) -> INTERNAL: step failed with INTERNAL"));

  wt_log_set_level(saved);
}

void wt_test_suite_status(void) {
  CU_pSuite s = CU_add_suite("status", NULL, NULL);
  CU_add_test(s, "new, code, message, NULL is OK", test_new_and_accessors);
  CU_add_test(s, "code names and parsing", test_code_names);
  CU_add_test(s, "gRPC code mapping", test_grpc_mapping);
  CU_add_test(s, "prefix adds context", test_prefix);
  CU_add_test(s, "copy is independent", test_copy);
  CU_add_test(s, "from errno", test_from_errno);
  CU_add_test(s, "WT_CHECK and WT_FAIL jump to out", test_check_and_fail);
}
