/* test_interop_python.c: placeholder suite, being written. */
#include "wt_test.h"

static void placeholder(void) { CU_PASS("placeholder"); }

void wt_test_suite_interop_python(void) {
  CU_pSuite s = CU_add_suite("interop_python", NULL, NULL);
  CU_add_test(s, "placeholder", placeholder);
}
