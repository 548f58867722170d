/* runner.c: the one CUnit runner of wt. Each tests/test_<module>.c adds its
 * suite through wt_test_suite_<module>(); `wt_tests --suite NAME` runs one
 * (ctest runs each suite as its own test), no argument runs them all. */

#include <CUnit/Basic.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt_test.h"

/* WT_SUITES(X): the suites of tests/CMakeLists.txt, in its order. */
#include "suites.h"

#define DECLARE(name) void wt_test_suite_##name(void);
WT_SUITES(DECLARE)
#undef DECLARE

static const struct {
  const char *name;
  void (*add)(void);
} suites[] = {
#define ENTRY(name) {#name, wt_test_suite_##name},
    WT_SUITES(ENTRY)
#undef ENTRY
};
#define NSUITES (sizeof(suites) / sizeof(suites[0]))

char *wt_test_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char *path = NULL;
  if (asprintf(&path, "%s/wt-test-XXXXXX", base && *base ? base : "/tmp") < 0)
    return NULL;
  if (mkdtemp(path) == NULL) {
    free(path);
    return NULL;
  }
  return path;
}

static int rm_entry(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

void wt_test_rmtree(const char *path) {
  if (path) nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *wt_test_source_dir(void) {
  return WT_TEST_SOURCE_DIR;
}
const char *wt_test_binary_dir(void) {
  return WT_TEST_BINARY_DIR;
}

void wt_test_skip(const char *test, const char *why) {
  fprintf(stdout, "\n  skipped: %s: %s\n", test, why);
  fflush(stdout);
}

/* Why the suite being added skipped itself (wt_test_suite_skipped), or
 * empty. */
static char g_suite_skipped[1024];

void wt_test_suite_skipped(const char *why) {
  snprintf(g_suite_skipped, sizeof(g_suite_skipped), "%s",
           why && *why ? why : "nothing to run here");
}

int main(int argc, char **argv) {
  const char *only = NULL, *test = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--suite") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (strcmp(argv[i], "--test") == 0 && i + 1 < argc) {
      test = argv[++i];
    } else if (strcmp(argv[i], "--list") == 0) {
      for (size_t s = 0; s < NSUITES; s++) printf("%s\n", suites[s].name);
      return 0;
    } else {
      fprintf(stderr, "usage: %s [--suite NAME] [--test SUBSTRING] [--list]\n",
              argv[0]);
      return 2;
    }
  }
  wt_log_set_level(WT_LOG_WARN);
  wt_log_level_from(getenv("WT_LOG"), "WT_LOG");
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  int added = 0, skipped = 0;
  for (size_t s = 0; s < NSUITES; s++) {
    if (only && strcmp(only, suites[s].name) != 0) continue;
    g_suite_skipped[0] = '\0';
    suites[s].add();
    if (g_suite_skipped[0] != '\0') {
      printf("\nSuite: %s\n  skipped: %s\n", suites[s].name, g_suite_skipped);
      fflush(stdout);
      skipped++;
    } else {
      added++;
    }
  }
  if (added == 0 && skipped == 0) {
    fprintf(stderr, "wt_tests: no suite named '%s' (try --list)\n", only);
    CU_cleanup_registry();
    return 2;
  }
  if (added == 0) {
    /* Nothing to run here: a skip (ctest's SKIP_RETURN_CODE), not a pass
     * with no assertion. */
    CU_cleanup_registry();
    return WT_TEST_SKIPPED;
  }
  if (test != NULL) {
    /* Only the tests whose name contains `test` run (a development aid). */
    unsigned kept = 0;
    for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
      for (CU_pTest t = s->pTest; t; t = t->pNext) {
        bool keep = strstr(t->pName, test) != NULL;
        CU_set_test_active(t, keep ? CU_TRUE : CU_FALSE);
        kept += keep;
      }
    if (kept == 0) {
      fprintf(stderr, "wt_tests: no test name contains '%s'\n", test);
      CU_cleanup_registry();
      return 2;
    }
    /* The tests left out are no failures. */
    CU_set_fail_on_inactive(CU_FALSE);
  }
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() +
                    CU_get_number_of_tests_failed() +
                    CU_get_number_of_failure_records();
  unsigned ran = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  if (ran == 0) {
    fprintf(stderr, "wt_tests: no test ran\n");
    return 1;
  }
  return failed ? 1 : 0;
}
