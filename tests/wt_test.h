/* wt_test.h: what every CUnit suite of wt shares. */
#ifndef WT_TEST_H
#define WT_TEST_H

#include <CUnit/CUnit.h>
#include <stdio.h>

#include "wt/status.h"

/* Asserts that `expr` (a wt_status *) is NULL; on failure prints the status's
 * code and message, frees it, and fails the test. */
#define WT_ASSERT_OK(expr)                                                  \
  do {                                                                      \
    wt_status *wt_t_st_ = (expr);                                           \
    if (wt_t_st_ != NULL) {                                                 \
      fprintf(stderr, "\n  %s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, \
              #expr, wt_code_name(wt_status_code(wt_t_st_)),                \
              wt_status_message(wt_t_st_));                                 \
      wt_status_free(wt_t_st_);                                             \
    }                                                                       \
    CU_ASSERT_FATAL(wt_t_st_ == NULL);                                      \
  } while (0)

/* Asserts that `expr` fails with `code` and that its message contains
 * `needle` (NULL: any message). */
#define WT_ASSERT_ERR(expr, code, needle)                                     \
  do {                                                                        \
    wt_status *wt_t_st_ = (expr);                                             \
    CU_ASSERT_PTR_NOT_NULL_FATAL(wt_t_st_);                                   \
    if (wt_status_code(wt_t_st_) != (code) ||                                 \
        ((needle) != NULL && strstr(wt_status_message(wt_t_st_),              \
                                    (needle) ? (needle) : "") == NULL))       \
      fprintf(stderr, "\n  %s:%d: %s: want %s containing '%s', got %s: %s\n", \
              __FILE__, __LINE__, #expr, wt_code_name(code),                  \
              (needle) ? (needle) : "",                                       \
              wt_code_name(wt_status_code(wt_t_st_)),                         \
              wt_status_message(wt_t_st_));                                   \
    CU_ASSERT_EQUAL(wt_status_code(wt_t_st_), (code));                        \
    if ((needle) != NULL)                                                     \
      CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(wt_t_st_), (needle)));  \
    wt_status_free(wt_t_st_);                                                 \
  } while (0)

/* A fresh temporary directory for the calling test (mkdtemp under $TMPDIR or
 * /tmp). Returns a malloc'd path the caller frees after wt_test_rmtree(). */
char *wt_test_tmpdir(void);
/* Removes `path` and everything under it. */
void wt_test_rmtree(const char *path);
/* Absolute path of the source tree's tests/ folder (compiled in). */
const char *wt_test_source_dir(void);
/* Absolute path of the build tree (compiled in). */
const char *wt_test_binary_dir(void);
/* Prints "skipped: <why>" so that the output says what did not run. */
void wt_test_skip(const char *test, const char *why);
/* For a suite with nothing to run in this build or on this machine (no
 * CUDA device, not an allocation-failure build): called from
 * wt_test_suite_<name>() instead of adding the suite. The runner prints
 * "skipped: <why>"; where every suite asked for skipped (--suite NAME), it
 * exits with WT_TEST_SKIPPED, ctest's SKIP_RETURN_CODE for those tests
 * (tests/CMakeLists.txt), so that ctest reports a skip, not a pass. */
void wt_test_suite_skipped(const char *why);
#define WT_TEST_SKIPPED 77

#endif /* WT_TEST_H */
