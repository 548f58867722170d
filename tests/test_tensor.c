/* test_tensor.c: tensor metadata and overflow-checked sizes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wt/tensor.h"
#include "wt_test.h"

#define P2(n) ((int64_t)1 << (n))

static void test_numel(void) {
  uint64_t n = 7;
  WT_ASSERT_OK(wt_shape_numel(NULL, 0, &n));
  CU_ASSERT_EQUAL(n, 1); /* a scalar holds one element */
  int64_t s48[] = {4, 8};
  WT_ASSERT_OK(wt_shape_numel(s48, 2, &n));
  CU_ASSERT_EQUAL(n, 32);
  int64_t s1[] = {151936, 4096};
  WT_ASSERT_OK(wt_shape_numel(s1, 2, &n));
  CU_ASSERT_EQUAL(n, 151936ull * 4096ull);
  /* The largest element count there is: (2^63 - 1) * 2 = 2^64 - 2. */
  int64_t big[] = {INT64_MAX, 2};
  WT_ASSERT_OK(wt_shape_numel(big, 2, &n));
  CU_ASSERT_EQUAL(n, UINT64_MAX - 1);
  int64_t ones[WT_MAX_NDIM];
  for (int i = 0; i < WT_MAX_NDIM; i++) ones[i] = 1;
  ones[WT_MAX_NDIM - 1] = 5;
  WT_ASSERT_OK(wt_shape_numel(ones, WT_MAX_NDIM, &n));
  CU_ASSERT_EQUAL(n, 5);
}

static void test_numel_zero(void) {
  uint64_t n = 7;
  int64_t s[] = {0, 4096};
  WT_ASSERT_OK(wt_shape_numel(s, 2, &n));
  CU_ASSERT_EQUAL(n, 0);
  /* An empty tensor is empty whatever its other dimensions say, as in
   * PyTorch (torch.empty(2**40, 2**40, 0) is valid). */
  int64_t huge_empty[] = {P2(40), P2(40), 0};
  n = 7;
  WT_ASSERT_OK(wt_shape_numel(huge_empty, 3, &n));
  CU_ASSERT_EQUAL(n, 0);
  n = 7;
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_FLOAT64, huge_empty, 3, &n));
  CU_ASSERT_EQUAL(n, 0);
}

static void test_numel_overflow(void) {
  uint64_t n = 7;
  int64_t s[] = {P2(32), P2(32)}; /* 2^64 elements: one past the limit */
  WT_ASSERT_ERR(wt_shape_numel(s, 2, &n), WT_INVALID_ARGUMENT,
                "shape [4294967296, 4294967296]: element count overflows 64 "
                "bits");
  WT_ASSERT_ERR(wt_tensor_nbytes(WT_DTYPE_FLOAT32, s, 2, &n),
                WT_INVALID_ARGUMENT, "overflows 64 bits");
  int64_t s3[] = {INT64_MAX, 3};
  WT_ASSERT_ERR(wt_shape_numel(s3, 2, &n), WT_INVALID_ARGUMENT,
                "at dimension 1");
  int64_t sixteen[WT_MAX_NDIM]; /* 16^16 = 2^64 */
  for (int i = 0; i < WT_MAX_NDIM; i++) sixteen[i] = 16;
  WT_ASSERT_ERR(wt_shape_numel(sixteen, WT_MAX_NDIM, &n), WT_INVALID_ARGUMENT,
                "at dimension 15");
  CU_ASSERT_EQUAL(n, 7); /* untouched by failures */
}

static void test_nbytes(void) {
  uint64_t b = 0;
  int64_t s[] = {4, 8};
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_BFLOAT16, s, 2, &b));
  CU_ASSERT_EQUAL(b, 64);
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_FLOAT64, NULL, 0, &b));
  CU_ASSERT_EQUAL(b, 8);
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_FLOAT8_E5M2, s, 2, &b));
  CU_ASSERT_EQUAL(b, 32);
  /* Just under the limit: (2^61 - 1) * 8 = 2^64 - 8. */
  int64_t edge[] = {P2(61) - 1};
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_INT64, edge, 1, &b));
  CU_ASSERT_EQUAL(b, UINT64_MAX - 7);
}

static void test_nbytes_overflow(void) {
  uint64_t b = 7, n = 0;
  /* 2^63 elements fit in 64 bits; 2^65 bytes of float32 do not. */
  int64_t s[] = {P2(31), P2(32)};
  WT_ASSERT_OK(wt_shape_numel(s, 2, &n));
  CU_ASSERT_EQUAL(n, (uint64_t)1 << 63);
  WT_ASSERT_OK(wt_tensor_nbytes(WT_DTYPE_BOOL, s, 2, &b));
  CU_ASSERT_EQUAL(b, (uint64_t)1 << 63);
  b = 7;
  WT_ASSERT_ERR(wt_tensor_nbytes(WT_DTYPE_FLOAT32, s, 2, &b),
                WT_INVALID_ARGUMENT,
                "shape [2147483648, 4294967296] of float32: "
                "9223372036854775808 elements of 4 bytes overflow 64 bits");
  int64_t edge[] = {P2(61)}; /* exactly 2^64 bytes of int64 */
  WT_ASSERT_ERR(wt_tensor_nbytes(WT_DTYPE_INT64, edge, 1, &b),
                WT_INVALID_ARGUMENT, "of int64");
  CU_ASSERT_EQUAL(b, 7);
}

static void test_bad_shapes(void) {
  uint64_t n = 7;
  int64_t neg[] = {4, -1, 8};
  WT_ASSERT_ERR(wt_shape_numel(neg, 3, &n), WT_INVALID_ARGUMENT,
                "shape [4, -1, 8]: dimension 1 is -1; dimensions must be >= 0");
  /* A negative dimension is an error even beside a zero one. */
  int64_t neg0[] = {0, -3};
  WT_ASSERT_ERR(wt_shape_numel(neg0, 2, &n), WT_INVALID_ARGUMENT,
                "dimension 1 is -3");
  int64_t many[WT_MAX_NDIM + 1];
  for (int i = 0; i <= WT_MAX_NDIM; i++) many[i] = 1;
  WT_ASSERT_ERR(wt_shape_numel(many, WT_MAX_NDIM + 1, &n), WT_INVALID_ARGUMENT,
                "shape has 17 dimensions; wt allows 0..16");
  WT_ASSERT_ERR(wt_shape_numel(many, -1, &n), WT_INVALID_ARGUMENT,
                "shape has -1 dimensions");
  WT_ASSERT_ERR(wt_shape_numel(NULL, 2, &n), WT_INVALID_ARGUMENT, "NULL");
  WT_ASSERT_ERR(wt_tensor_nbytes(WT_DTYPE_FLOAT32, neg, 3, &n),
                WT_INVALID_ARGUMENT, "dimension 1 is -1");
  WT_ASSERT_ERR(wt_tensor_nbytes(WT_DTYPE_COUNT, many, 1, &n),
                WT_INVALID_ARGUMENT, "dtype 15 is not a wt dtype");
  CU_ASSERT_EQUAL(n, 7);
}

static void test_meta_init(void) {
  char name[] = "model.layers.0.self_attn.q_proj.weight";
  int64_t shape[] = {4096, 4096};
  wt_tensor_meta m;
  WT_ASSERT_OK(wt_tensor_meta_init(&m, name, WT_DTYPE_BFLOAT16, shape, 2));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m.name);
  CU_ASSERT_PTR_NOT_EQUAL(m.name, name); /* a copy */
  name[0] = 'X';
  CU_ASSERT_STRING_EQUAL(m.name, "model.layers.0.self_attn.q_proj.weight");
  CU_ASSERT_EQUAL(m.dtype, WT_DTYPE_BFLOAT16);
  CU_ASSERT_EQUAL(m.ndim, 2);
  CU_ASSERT_EQUAL(m.shape[0], 4096);
  CU_ASSERT_EQUAL(m.shape[1], 4096);
  CU_ASSERT_EQUAL(m.numel, 4096u * 4096u);
  CU_ASSERT_EQUAL(m.nbytes, 2u * 4096u * 4096u);
  wt_tensor_meta_clear(&m);
  CU_ASSERT_PTR_NULL(m.name);
  CU_ASSERT_EQUAL(m.ndim, 0);
  CU_ASSERT_EQUAL(m.nbytes, 0);
  wt_tensor_meta_clear(&m); /* twice is harmless */
  wt_tensor_meta_clear(NULL);

  WT_ASSERT_OK(wt_tensor_meta_init(&m, "scale", WT_DTYPE_FLOAT32, NULL, 0));
  CU_ASSERT_EQUAL(m.ndim, 0);
  CU_ASSERT_EQUAL(m.numel, 1);
  CU_ASSERT_EQUAL(m.nbytes, 4);
  wt_tensor_meta_clear(&m);
}

static void test_meta_init_errors(void) {
  wt_tensor_meta m;
  int64_t neg[] = {4, -2};
  WT_ASSERT_ERR(wt_tensor_meta_init(&m, "w", WT_DTYPE_FLOAT32, neg, 2),
                WT_INVALID_ARGUMENT, "tensor 'w': shape [4, -2]: dimension 1");
  CU_ASSERT_PTR_NULL(m.name);
  CU_ASSERT_EQUAL(m.ndim, 0);
  int64_t big[] = {P2(32), P2(32)};
  WT_ASSERT_ERR(wt_tensor_meta_init(&m, "emb", WT_DTYPE_FLOAT32, big, 2),
                WT_INVALID_ARGUMENT, "tensor 'emb': shape [4294967296, ");
  CU_ASSERT_PTR_NULL(m.name);
  int64_t ok[] = {2};
  WT_ASSERT_ERR(wt_tensor_meta_init(&m, "b", (wt_dtype)99, ok, 1),
                WT_INVALID_ARGUMENT, "tensor 'b': dtype 99");
  CU_ASSERT_PTR_NULL(m.name);
  int64_t many[WT_MAX_NDIM + 1] = {0};
  WT_ASSERT_ERR(
      wt_tensor_meta_init(&m, "deep", WT_DTYPE_INT8, many, WT_MAX_NDIM + 1),
      WT_INVALID_ARGUMENT, "tensor 'deep': shape has 17 dimensions");
  CU_ASSERT_PTR_NULL(m.name);
}

static void test_meta_array_free(void) {
  size_t n = 3;
  wt_tensor_meta *metas = calloc(n, sizeof(*metas));
  CU_ASSERT_PTR_NOT_NULL_FATAL(metas);
  int64_t shape[] = {3, 5};
  for (size_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof(name), "t%zu", i);
    WT_ASSERT_OK(
        wt_tensor_meta_init(&metas[i], name, WT_DTYPE_INT16, shape, 2));
  }
  CU_ASSERT_STRING_EQUAL(metas[2].name, "t2");
  wt_tensor_meta_array_free(metas, n); /* ASan reports any leak */
  wt_tensor_meta_array_free(NULL, 5);
}

static void test_shape_format(void) {
  char buf[64];
  int64_t s[] = {4, 8};
  CU_ASSERT_PTR_EQUAL(wt_shape_format(s, 2, buf, sizeof(buf)), buf);
  CU_ASSERT_STRING_EQUAL(buf, "[4, 8]");
  CU_ASSERT_STRING_EQUAL(wt_shape_format(NULL, 0, buf, sizeof(buf)), "[]");
  int64_t one[] = {-1};
  CU_ASSERT_STRING_EQUAL(wt_shape_format(one, 1, buf, sizeof(buf)), "[-1]");
  int64_t ext[] = {INT64_MAX, INT64_MIN};
  CU_ASSERT_STRING_EQUAL(wt_shape_format(ext, 2, buf, sizeof(buf)),
                         "[9223372036854775807, -9223372036854775808]");

  /* Exactly enough room: no truncation mark. */
  char fit[7];
  CU_ASSERT_STRING_EQUAL(wt_shape_format(s, 2, fit, sizeof(fit)), "[4, 8]");
  /* One byte short: cut, and the cut is visible. */
  char small[6];
  wt_shape_format(s, 2, small, sizeof(small));
  CU_ASSERT_STRING_EQUAL(small, "[4...");
  int64_t wide[WT_MAX_NDIM];
  for (int i = 0; i < WT_MAX_NDIM; i++) wide[i] = 1000000 + i;
  char mid[20];
  wt_shape_format(wide, WT_MAX_NDIM, mid, sizeof(mid));
  CU_ASSERT_EQUAL(strlen(mid), sizeof(mid) - 1);
  CU_ASSERT_NSTRING_EQUAL(mid, "[1000000, 10000", 15);
  CU_ASSERT_STRING_EQUAL(mid + strlen(mid) - 3, "...");
  char tiny[2] = {'x', 'x'};
  CU_ASSERT_STRING_EQUAL(wt_shape_format(s, 2, tiny, sizeof(tiny)), "[");
  char none = 'x';
  CU_ASSERT_PTR_EQUAL(wt_shape_format(s, 2, &none, 0), &none);
  CU_ASSERT_EQUAL(none, 'x'); /* len 0: nothing written */
  CU_ASSERT_STRING_EQUAL(wt_shape_format(NULL, 2, buf, sizeof(buf)), "[?]");
}

static void test_same_layout(void) {
  wt_tensor_meta a, b;
  int64_t s1[] = {4, 8}, s2[] = {8, 4}, s3[] = {4, 8, 1};
  WT_ASSERT_OK(wt_tensor_meta_init(&a, "a", WT_DTYPE_FLOAT32, s1, 2));
  WT_ASSERT_OK(wt_tensor_meta_init(&b, "b", WT_DTYPE_FLOAT32, s1, 2));
  CU_ASSERT_TRUE(wt_tensor_meta_same_layout(&a, &b)); /* names ignored */
  wt_tensor_meta_clear(&b);
  WT_ASSERT_OK(wt_tensor_meta_init(&b, "a", WT_DTYPE_FLOAT32, s2, 2));
  CU_ASSERT_FALSE(wt_tensor_meta_same_layout(&a, &b)); /* same numel */
  wt_tensor_meta_clear(&b);
  WT_ASSERT_OK(wt_tensor_meta_init(&b, "a", WT_DTYPE_INT32, s1, 2));
  CU_ASSERT_FALSE(wt_tensor_meta_same_layout(&a, &b)); /* same nbytes */
  wt_tensor_meta_clear(&b);
  WT_ASSERT_OK(wt_tensor_meta_init(&b, "a", WT_DTYPE_FLOAT32, s3, 3));
  CU_ASSERT_FALSE(wt_tensor_meta_same_layout(&a, &b));
  CU_ASSERT_FALSE(wt_tensor_meta_same_layout(&a, NULL));
  CU_ASSERT_FALSE(wt_tensor_meta_same_layout(NULL, &b));
  wt_tensor_meta_clear(&a);
  wt_tensor_meta_clear(&b);
}

void wt_test_suite_tensor(void) {
  CU_pSuite s = CU_add_suite("tensor", NULL, NULL);
  CU_add_test(s, "element counts", test_numel);
  CU_add_test(s, "a zero dimension makes any shape empty", test_numel_zero);
  CU_add_test(s, "element count overflow is an error", test_numel_overflow);
  CU_add_test(s, "byte counts", test_nbytes);
  CU_add_test(s, "numel fits but byte count overflows", test_nbytes_overflow);
  CU_add_test(s, "negative dims and too many dims", test_bad_shapes);
  CU_add_test(s, "meta init copies the name and sizes", test_meta_init);
  CU_add_test(s, "meta init errors name the tensor", test_meta_init_errors);
  CU_add_test(s, "meta array free", test_meta_array_free);
  CU_add_test(s, "shape format and truncation", test_shape_format);
  CU_add_test(s, "same layout compares dtype and shape", test_same_layout);
}
