/* wt/dtype.h: element types of tensors, with PyTorch and safetensors names. */
#ifndef WT_DTYPE_H
#define WT_DTYPE_H

#include <stddef.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

typedef enum wt_dtype {
  WT_DTYPE_BOOL = 0,
  WT_DTYPE_UINT8,
  WT_DTYPE_INT8,
  WT_DTYPE_INT16,
  WT_DTYPE_UINT16,
  WT_DTYPE_INT32,
  WT_DTYPE_UINT32,
  WT_DTYPE_INT64,
  WT_DTYPE_UINT64,
  WT_DTYPE_FLOAT16,
  WT_DTYPE_BFLOAT16,
  WT_DTYPE_FLOAT32,
  WT_DTYPE_FLOAT64,
  WT_DTYPE_FLOAT8_E4M3FN,
  WT_DTYPE_FLOAT8_E5M2,
  WT_DTYPE_COUNT
} wt_dtype;

/* PyTorch name without "torch.": "bfloat16", "float8_e4m3fn". Static;
 * NULL for a value outside the enum. */
const char *wt_dtype_torch_name(wt_dtype dt);

/* safetensors name: "BF16", "F8_E4M3". Static; NULL outside the enum. */
const char *wt_dtype_safetensors_name(wt_dtype dt);

/* Bytes per element; 0 outside the enum. */
size_t wt_dtype_itemsize(wt_dtype dt);

/* Parses a PyTorch name, with or without "torch.", and PyTorch's aliases
 * ("float" -> float32, "half" -> float16, "double", "long", "int", "short").
 * Unknown: INVALID_ARGUMENT naming the string. */
wt_status *wt_dtype_from_torch_name(const char *name, wt_dtype *out);

/* Parses a safetensors name ("F32"). Unknown: INVALID_ARGUMENT. */
wt_status *wt_dtype_from_safetensors_name(const char *name, wt_dtype *out);

/* Either spelling: what the wire accepts in `dtype_names`. */
wt_status *wt_dtype_from_name(const char *name, wt_dtype *out);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_DTYPE_H */
