/* cu_main.c — the one CUnit entry point every unit-test executable shares. Each test file
 * defines `const dl_cu_suite dl_cu_suites[]` (terminated by an entry with a NULL name) and this
 * runs them all, exiting non-zero when any assertion failed. */
#include "cu_main.h"

#include <CUnit/Basic.h>
#include <stdio.h>

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  for (const dl_cu_suite *s = dl_cu_suites; s->name; s++) {
    CU_pSuite suite = CU_add_suite(s->name, NULL, NULL);
    if (!suite) return 1;
    for (const dl_cu_test *t = s->tests; t->name; t++)
      if (!CU_add_test(suite, t->name, t->fn)) return 1;
  }
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}
