/* test_synthetic.c: placeholder suite, being written. */
#include "wt_test.h"

static void placeholder(void) { CU_PASS("placeholder"); }

void wt_test_suite_synthetic(void) {
  CU_pSuite s = CU_add_suite("synthetic", NULL, NULL);
  CU_add_test(s, "placeholder", placeholder);
}
