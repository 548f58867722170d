/* test_log.c: placeholder suite, being written. */
#include "wt_test.h"

static void placeholder(void) { CU_PASS("placeholder"); }

void wt_test_suite_log(void) {
  CU_pSuite s = CU_add_suite("log", NULL, NULL);
  CU_add_test(s, "placeholder", placeholder);
}
