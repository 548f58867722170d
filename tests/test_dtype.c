/* test_dtype.c: dtype names and item sizes. */
#include <string.h>

#include "wt/dtype.h"
#include "wt_test.h"

/* The expected table, written out independently of dtype.c's. */
static const struct {
  wt_dtype dt;
  const char *torch;
  const char *safetensors;
  size_t itemsize;
} want[] = {
    {WT_DTYPE_BOOL, "bool", "BOOL", 1},
    {WT_DTYPE_UINT8, "uint8", "U8", 1},
    {WT_DTYPE_INT8, "int8", "I8", 1},
    {WT_DTYPE_INT16, "int16", "I16", 2},
    {WT_DTYPE_UINT16, "uint16", "U16", 2},
    {WT_DTYPE_INT32, "int32", "I32", 4},
    {WT_DTYPE_UINT32, "uint32", "U32", 4},
    {WT_DTYPE_INT64, "int64", "I64", 8},
    {WT_DTYPE_UINT64, "uint64", "U64", 8},
    {WT_DTYPE_FLOAT16, "float16", "F16", 2},
    {WT_DTYPE_BFLOAT16, "bfloat16", "BF16", 2},
    {WT_DTYPE_FLOAT32, "float32", "F32", 4},
    {WT_DTYPE_FLOAT64, "float64", "F64", 8},
    {WT_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", "F8_E4M3", 1},
    {WT_DTYPE_FLOAT8_E5M2, "float8_e5m2", "F8_E5M2", 1},
};
#define NWANT (sizeof(want) / sizeof(want[0]))

static void test_table(void) {
  CU_ASSERT_EQUAL(NWANT, WT_DTYPE_COUNT);
  for (size_t i = 0; i < NWANT; i++) {
    CU_ASSERT_STRING_EQUAL(wt_dtype_torch_name(want[i].dt), want[i].torch);
    CU_ASSERT_STRING_EQUAL(wt_dtype_safetensors_name(want[i].dt),
                           want[i].safetensors);
    CU_ASSERT_EQUAL(wt_dtype_itemsize(want[i].dt), want[i].itemsize);
  }
}

static void test_parse_round_trip(void) {
  for (size_t i = 0; i < NWANT; i++) {
    wt_dtype dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_torch_name(want[i].torch, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);

    char prefixed[64];
    snprintf(prefixed, sizeof(prefixed), "torch.%s", want[i].torch);
    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_torch_name(prefixed, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);

    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_safetensors_name(want[i].safetensors, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);

    /* The wire accepts either spelling. */
    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_name(want[i].torch, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);
    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_name(want[i].safetensors, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);
    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_name(prefixed, &dt));
    CU_ASSERT_EQUAL(dt, want[i].dt);
  }
}

static void test_torch_aliases(void) {
  static const struct {
    const char *name;
    wt_dtype dt;
  } aliases[] = {
      {"float", WT_DTYPE_FLOAT32}, {"torch.float", WT_DTYPE_FLOAT32},
      {"half", WT_DTYPE_FLOAT16},  {"double", WT_DTYPE_FLOAT64},
      {"long", WT_DTYPE_INT64},    {"int", WT_DTYPE_INT32},
      {"short", WT_DTYPE_INT16},   {"torch.half", WT_DTYPE_FLOAT16},
  };
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
    wt_dtype dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_torch_name(aliases[i].name, &dt));
    CU_ASSERT_EQUAL(dt, aliases[i].dt);
    dt = WT_DTYPE_COUNT;
    WT_ASSERT_OK(wt_dtype_from_name(aliases[i].name, &dt));
    CU_ASSERT_EQUAL(dt, aliases[i].dt);
  }
}

static void test_unknown_names(void) {
  wt_dtype dt = WT_DTYPE_INT8;
  WT_ASSERT_ERR(wt_dtype_from_torch_name("complex64", &dt), WT_INVALID_ARGUMENT,
                "'complex64'");
  /* A safetensors name is not a PyTorch name, and the reverse. */
  WT_ASSERT_ERR(wt_dtype_from_torch_name("BF16", &dt), WT_INVALID_ARGUMENT,
                "'BF16'");
  WT_ASSERT_ERR(wt_dtype_from_safetensors_name("bfloat16", &dt),
                WT_INVALID_ARGUMENT, "'bfloat16'");
  WT_ASSERT_ERR(wt_dtype_from_safetensors_name("torch.F32", &dt),
                WT_INVALID_ARGUMENT, "'torch.F32'");
  /* Names are exact: neither case-folded nor prefix-matched. */
  WT_ASSERT_ERR(wt_dtype_from_name("Float32", &dt), WT_INVALID_ARGUMENT,
                "unknown dtype 'Float32'");
  WT_ASSERT_ERR(wt_dtype_from_name("f32", &dt), WT_INVALID_ARGUMENT, "'f32'");
  WT_ASSERT_ERR(wt_dtype_from_name("float8_e4m3", &dt), WT_INVALID_ARGUMENT,
                "'float8_e4m3'");
  WT_ASSERT_ERR(wt_dtype_from_name("F8_E4M3FN", &dt), WT_INVALID_ARGUMENT,
                "'F8_E4M3FN'");
  WT_ASSERT_ERR(wt_dtype_from_name("float32 ", &dt), WT_INVALID_ARGUMENT,
                "'float32 '");
  WT_ASSERT_ERR(wt_dtype_from_name("", &dt), WT_INVALID_ARGUMENT, "''");
  WT_ASSERT_ERR(wt_dtype_from_name("torch.", &dt), WT_INVALID_ARGUMENT,
                "'torch.'");
  WT_ASSERT_ERR(wt_dtype_from_name(NULL, &dt), WT_INVALID_ARGUMENT, "NULL");
  WT_ASSERT_ERR(wt_dtype_from_torch_name(NULL, &dt), WT_INVALID_ARGUMENT,
                "NULL");
  WT_ASSERT_ERR(wt_dtype_from_safetensors_name(NULL, &dt), WT_INVALID_ARGUMENT,
                "NULL");
  CU_ASSERT_EQUAL(dt, WT_DTYPE_INT8); /* untouched by failures */
}

static void test_out_of_range(void) {
  CU_ASSERT_PTR_NULL(wt_dtype_torch_name(WT_DTYPE_COUNT));
  CU_ASSERT_PTR_NULL(wt_dtype_safetensors_name(WT_DTYPE_COUNT));
  CU_ASSERT_EQUAL(wt_dtype_itemsize(WT_DTYPE_COUNT), 0);
  CU_ASSERT_PTR_NULL(wt_dtype_torch_name((wt_dtype)-1));
  CU_ASSERT_PTR_NULL(wt_dtype_safetensors_name((wt_dtype)-1));
  CU_ASSERT_EQUAL(wt_dtype_itemsize((wt_dtype)-1), 0);
  CU_ASSERT_EQUAL(wt_dtype_itemsize((wt_dtype)1000), 0);
}

void wt_test_suite_dtype(void) {
  CU_pSuite s = CU_add_suite("dtype", NULL, NULL);
  CU_add_test(s, "names and item sizes of every dtype", test_table);
  CU_add_test(s, "parse every name, both spellings", test_parse_round_trip);
  CU_add_test(s, "PyTorch aliases", test_torch_aliases);
  CU_add_test(s, "unknown names name the string", test_unknown_names);
  CU_add_test(s, "values outside the enum", test_out_of_range);
}
