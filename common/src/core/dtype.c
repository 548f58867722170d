/* dtype.c: element types and their names (see wt/dtype.h). */

#include "wt/dtype.h"

#include <string.h>

typedef struct dtype_info {
  const char *torch;       /* PyTorch name without "torch." */
  const char *safetensors; /* safetensors header name */
  size_t itemsize;
} dtype_info;

/* Indexed by wt_dtype; every lookup below walks this one table. */
static const dtype_info dtypes[WT_DTYPE_COUNT] = {
    [WT_DTYPE_BOOL] = {"bool", "BOOL", 1},
    [WT_DTYPE_UINT8] = {"uint8", "U8", 1},
    [WT_DTYPE_INT8] = {"int8", "I8", 1},
    [WT_DTYPE_INT16] = {"int16", "I16", 2},
    [WT_DTYPE_UINT16] = {"uint16", "U16", 2},
    [WT_DTYPE_INT32] = {"int32", "I32", 4},
    [WT_DTYPE_UINT32] = {"uint32", "U32", 4},
    [WT_DTYPE_INT64] = {"int64", "I64", 8},
    [WT_DTYPE_UINT64] = {"uint64", "U64", 8},
    [WT_DTYPE_FLOAT16] = {"float16", "F16", 2},
    [WT_DTYPE_BFLOAT16] = {"bfloat16", "BF16", 2},
    [WT_DTYPE_FLOAT32] = {"float32", "F32", 4},
    [WT_DTYPE_FLOAT64] = {"float64", "F64", 8},
    [WT_DTYPE_FLOAT8_E4M3FN] = {"float8_e4m3fn", "F8_E4M3", 1},
    [WT_DTYPE_FLOAT8_E5M2] = {"float8_e5m2", "F8_E5M2", 1},
};

/* PyTorch's other spellings of the same types (torch.float is torch.float32,
 * and so on). */
static const struct {
  const char *name;
  wt_dtype dtype;
} torch_aliases[] = {
    {"float", WT_DTYPE_FLOAT32},  {"half", WT_DTYPE_FLOAT16},
    {"double", WT_DTYPE_FLOAT64}, {"long", WT_DTYPE_INT64},
    {"int", WT_DTYPE_INT32},      {"short", WT_DTYPE_INT16},
};
#define NALIASES (sizeof(torch_aliases) / sizeof(torch_aliases[0]))

static int dtype_valid(wt_dtype dt) {
  return (int)dt >= 0 && (int)dt < WT_DTYPE_COUNT;
}

const char *wt_dtype_torch_name(wt_dtype dt) {
  return dtype_valid(dt) ? dtypes[dt].torch : NULL;
}

const char *wt_dtype_safetensors_name(wt_dtype dt) {
  return dtype_valid(dt) ? dtypes[dt].safetensors : NULL;
}

size_t wt_dtype_itemsize(wt_dtype dt) {
  return dtype_valid(dt) ? dtypes[dt].itemsize : 0;
}

/* Returns 0 and sets *out when `name` is a PyTorch name or alias, else -1. */
static int lookup_torch(const char *name, wt_dtype *out) {
  if (strncmp(name, "torch.", 6) == 0) name += 6;
  for (int i = 0; i < WT_DTYPE_COUNT; i++) {
    if (strcmp(name, dtypes[i].torch) == 0) {
      *out = (wt_dtype)i;
      return 0;
    }
  }
  for (size_t i = 0; i < NALIASES; i++) {
    if (strcmp(name, torch_aliases[i].name) == 0) {
      *out = torch_aliases[i].dtype;
      return 0;
    }
  }
  return -1;
}

static int lookup_safetensors(const char *name, wt_dtype *out) {
  for (int i = 0; i < WT_DTYPE_COUNT; i++) {
    if (strcmp(name, dtypes[i].safetensors) == 0) {
      *out = (wt_dtype)i;
      return 0;
    }
  }
  return -1;
}

wt_status *wt_dtype_from_torch_name(const char *name, wt_dtype *out) {
  if (name == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "dtype name is missing (NULL)");
  if (lookup_torch(name, out) == 0) return NULL;
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "unknown PyTorch dtype '%s' (expected e.g. 'float32', "
                       "'bfloat16', 'float8_e4m3fn')",
                       name);
}

wt_status *wt_dtype_from_safetensors_name(const char *name, wt_dtype *out) {
  if (name == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "dtype name is missing (NULL)");
  if (lookup_safetensors(name, out) == 0) return NULL;
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "unknown safetensors dtype '%s' (expected e.g. 'F32', "
                       "'BF16', 'F8_E4M3')",
                       name);
}

wt_status *wt_dtype_from_name(const char *name, wt_dtype *out) {
  if (name == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "dtype name is missing (NULL)");
  if (lookup_torch(name, out) == 0 || lookup_safetensors(name, out) == 0)
    return NULL;
  return wt_status_new(WT_INVALID_ARGUMENT,
                       "unknown dtype '%s' (expected a PyTorch name such as "
                       "'bfloat16' or a safetensors name such as 'BF16')",
                       name);
}
