/* cu_main.h — table-driven CUnit registration shared by all unit-test executables. */
#ifndef CU_MAIN_H
#define CU_MAIN_H
#include <CUnit/CUnit.h>

typedef struct { const char *name; void (*fn)(void); } dl_cu_test;
typedef struct { const char *name; const dl_cu_test *tests; } dl_cu_suite;

/* Defined by each test file: its suites, ending with {NULL, NULL}. */
extern const dl_cu_suite dl_cu_suites[];

#define DL_CU_TEST(fn) {#fn, fn}
#define DL_CU_END {NULL, NULL}
#endif
