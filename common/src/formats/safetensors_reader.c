/* safetensors_reader.c: the safetensors reader (see wt/safetensors.h).
 *
 * The header is parsed with jansson; everything it says is checked before a
 * single tensor is handed out, so that a caller may trust every offset and
 * size it sees. */

#include "wt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wt/log.h"
#include "wt/secure.h"
#include "safetensors_internal.h"

struct wt_safetensors {
  char *what; /* path or buffer name, for messages */
  void *map;  /* the file's mapping; NULL for a borrowed buffer */
  size_t map_len;
  wt_st_tensor *tensors; /* data-offset order */
  size_t n;
  size_t *by_name;  /* indices into tensors, sorted by name */
  json_t *metadata; /* the `__metadata__` object, or NULL */
};

/* ---- reading ---------------------------------------------------------- */

static uint64_t load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

const char *wt_st_json_type_name(const json_t *j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "an array";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
      return "an integer";
    case JSON_REAL:
      return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    case JSON_NULL:
      return "null";
  }
  return "a JSON value";
}

/* A JSON integer in 0..INT64_MAX, or -1. */
static int64_t json_nonneg(const json_t *j) {
  if (!json_is_integer(j)) return -1;
  json_int_t v = json_integer_value(j);
  return v < 0 ? -1 : (int64_t)v;
}

static wt_status *parse_metadata(wt_safetensors *f, json_t *md) {
  if (!json_is_object(md))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: '" METADATA_KEY
                         "' must be an object of strings, got %s",
                         f->what, wt_st_json_type_name(md));
  const char *key;
  json_t *value;
  json_object_foreach(md, key, value) {
    if (!json_is_string(value))
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: '" METADATA_KEY
                           "' key '%s' maps to %s, "
                           "not a string",
                           f->what, key, wt_st_json_type_name(value));
  }
  f->metadata = json_incref(md);
  return NULL;
}

/* Fills `t` from one header entry; `end` receives data_offsets[1]. The data
 * pointer is set by the caller once every entry is known to be sound. */
static wt_status *parse_entry(const wt_safetensors *f, uint64_t data_len,
                              const char *name, json_t *entry, wt_st_tensor *t,
                              uint64_t *end) {
  wt_status *st = NULL;
  char shape_buf[160];
  if (!json_is_object(entry))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': entry must be an object with dtype, shape and "
            "data_offsets, got %s",
            f->what, name, wt_st_json_type_name(entry));
  const char *field;
  json_t *value;
  json_object_foreach(entry, field, value) {
    if (strcmp(field, "dtype") != 0 && strcmp(field, "shape") != 0 &&
        strcmp(field, "data_offsets") != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': unknown field '%s' (expected dtype, shape, "
              "data_offsets)",
              f->what, name, field);
  }

  json_t *jdtype = json_object_get(entry, "dtype");
  if (!json_is_string(jdtype))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': field 'dtype' is %s, expected a string such as "
            "\"F32\"",
            f->what, name, jdtype ? wt_st_json_type_name(jdtype) : "missing");
  wt_dtype dtype;
  wt_status *dst =
      wt_dtype_from_safetensors_name(json_string_value(jdtype), &dtype);
  if (dst != NULL) {
    wt_status_free(dst);
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor '%s': unknown dtype '%s'", f->what,
            name, json_string_value(jdtype));
  }

  json_t *jshape = json_object_get(entry, "shape");
  if (!json_is_array(jshape))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': field 'shape' is %s, expected an array of "
            "non-negative integers",
            f->what, name, jshape ? wt_st_json_type_name(jshape) : "missing");
  size_t ndim = json_array_size(jshape);
  if (ndim > WT_MAX_NDIM)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': shape has %zu dimensions, more than the %d "
            "supported",
            f->what, name, ndim, WT_MAX_NDIM);
  int64_t shape[WT_MAX_NDIM];
  for (size_t d = 0; d < ndim; d++) {
    shape[d] = json_nonneg(json_array_get(jshape, d));
    if (shape[d] < 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': shape[%zu] is not a non-negative integer",
              f->what, name, d);
  }

  json_t *joff = json_object_get(entry, "data_offsets");
  int64_t begin = -1, stop = -1;
  if (json_is_array(joff) && json_array_size(joff) == 2) {
    begin = json_nonneg(json_array_get(joff, 0));
    stop = json_nonneg(json_array_get(joff, 1));
  }
  if (begin < 0 || stop < 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': field 'data_offsets' must be [begin, end], two "
            "non-negative integers",
            f->what, name);
  if (begin > stop)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
            "] begin after end",
            f->what, name, begin, stop);
  if ((uint64_t)stop > data_len)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
            "] out of range: the data region is %" PRIu64 " bytes",
            f->what, name, begin, stop, data_len);

  uint64_t nbytes;
  wt_status *nst = wt_tensor_nbytes(dtype, shape, (int)ndim, &nbytes);
  if (nst != NULL) {
    st = wt_status_prefix(nst, "%s: tensor '%s'", f->what, name);
    goto out;
  }
  if ((uint64_t)(stop - begin) != nbytes)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
            "] hold %" PRIu64 " bytes, but dtype %s and shape %s need %" PRIu64,
            f->what, name, begin, stop, (uint64_t)(stop - begin),
            json_string_value(jdtype),
            wt_shape_format(shape, (int)ndim, shape_buf, sizeof(shape_buf)),
            nbytes);

  nst = wt_tensor_meta_init(&t->meta, name, dtype, shape, (int)ndim);
  if (nst != NULL) {
    st = wt_status_prefix(nst, "%s: tensor '%s'", f->what, name);
    goto out;
  }
  t->offset = (uint64_t)begin;
  *end = (uint64_t)stop;
out:
  return st;
}

typedef struct {
  wt_st_tensor t;
  uint64_t end;
} entry_span;

static int cmp_span(const void *a, const void *b) {
  const entry_span *x = a, *y = b;
  if (x->t.offset != y->t.offset) return x->t.offset < y->t.offset ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->t.meta.name, y->t.meta.name);
}

/* Sorting (name, index) pairs gives the by-name index without a qsort_r
 * context. */
typedef struct {
  const char *name;
  size_t index;
} name_index;

static int cmp_name_index(const void *a, const void *b) {
  return strcmp(((const name_index *)a)->name, ((const name_index *)b)->name);
}

static wt_status *build_name_index(wt_safetensors *f) {
  if (f->n == 0) return NULL;
  name_index *tmp = malloc(f->n * sizeof(*tmp));
  f->by_name = malloc(f->n * sizeof(*f->by_name));
  if (tmp == NULL || f->by_name == NULL) {
    free(tmp);
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "%s: out of memory indexing %zu tensors", f->what,
                         f->n);
  }
  for (size_t i = 0; i < f->n; i++)
    tmp[i] = (name_index){f->tensors[i].meta.name, i};
  qsort(tmp, f->n, sizeof(*tmp), cmp_name_index);
  for (size_t i = 0; i < f->n; i++) f->by_name[i] = tmp[i].index;
  free(tmp);
  return NULL;
}

/* Validates `buf` as a whole safetensors file and fills `f`. */
static wt_status *parse(wt_safetensors *f, const uint8_t *buf, size_t len) {
  wt_status *st = NULL;
  json_t *root = NULL;
  entry_span *spans = NULL;
  size_t nspans = 0;

  if (len < HEADER_LEN_BYTES)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: truncated: %zu bytes, too short for the 8-byte header length "
            "(an empty or cut-off file?)",
            f->what, len);
  uint64_t hlen = load_le64(buf);
  /* Checked before anything else, so that a hostile length is never used. */
  if (hlen > WT_SAFETENSORS_MAX_HEADER)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: header length %" PRIu64 " exceeds the limit of %u bytes",
            f->what, hlen, WT_SAFETENSORS_MAX_HEADER);
  if (hlen > len - HEADER_LEN_BYTES)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: truncated: header length %" PRIu64
            " runs past the end of the file (%zu bytes follow the length "
            "field)",
            f->what, hlen, len - HEADER_LEN_BYTES);
  const uint8_t *data = buf + HEADER_LEN_BYTES + hlen;
  uint64_t data_len = len - HEADER_LEN_BYTES - hlen;

  json_error_t jerr;
  /* Without JSON_ALLOW_NUL a NUL byte anywhere is a parse error; trailing
   * spaces (the reference writer's padding) are accepted. */
  root = json_loadb((const char *)buf + HEADER_LEN_BYTES, (size_t)hlen,
                    JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: header is not valid JSON: %s (at byte %d of %" PRIu64 ")",
            f->what, jerr.text, jerr.position, hlen);
  if (!json_is_object(root))
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: header must be a JSON object, got %s",
            f->what, wt_st_json_type_name(root));

  size_t cap = json_object_size(root);
  spans = calloc(cap + 1, sizeof(*spans)); /* never NULL for an empty header */
  if (spans == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors", f->what,
            cap);
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, METADATA_KEY) == 0) {
      WT_CHECK(parse_metadata(f, value));
      continue;
    }
    WT_CHECK(parse_entry(f, data_len, key, value, &spans[nspans].t,
                         &spans[nspans].end));
    nspans++;
  }

  if (nspans > 0) qsort(spans, nspans, sizeof(*spans), cmp_span);
  uint64_t pos = 0;
  for (size_t i = 0; i < nspans; i++) {
    const entry_span *s = &spans[i];
    if (s->t.offset < pos)
      WT_FAIL(
          WT_INVALID_ARGUMENT,
          "%s: tensor '%s' (data_offsets [%" PRIu64 ", %" PRIu64
          "]) overlaps tensor '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "])",
          f->what, s->t.meta.name, s->t.offset, s->end,
          spans[i - 1].t.meta.name, spans[i - 1].t.offset, spans[i - 1].end);
    if (s->t.offset > pos)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: gap in the data region: bytes [%" PRIu64 ", %" PRIu64
              ") before tensor '%s' belong to no tensor",
              f->what, pos, s->t.offset, s->t.meta.name);
    pos = s->end;
  }
  if (pos != data_len)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: %" PRIu64 " trailing bytes: the data region is %" PRIu64
            " bytes but the tensors cover only %" PRIu64,
            f->what, data_len - pos, data_len, pos);

  if (nspans > 0) {
    f->tensors = calloc(nspans, sizeof(*f->tensors));
    if (f->tensors == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors",
              f->what, nspans);
  }
  for (size_t i = 0; i < nspans; i++) {
    f->tensors[i] = spans[i].t;
    f->tensors[i].data = data + spans[i].t.offset;
    spans[i].t.meta.name = NULL; /* moved */
  }
  f->n = nspans;
  nspans = 0;
  WT_CHECK(build_name_index(f));
out:
  for (size_t i = 0; i < nspans; i++) wt_tensor_meta_clear(&spans[i].t.meta);
  free(spans);
  json_decref(root);
  return st;
}

/* A fresh, empty reader named `what`; NULL when out of memory. */
static wt_safetensors *new_file(const char *what) {
  wt_safetensors *f = calloc(1, sizeof(*f));
  if (f != NULL && (f->what = strdup(what)) == NULL) {
    free(f);
    f = NULL;
  }
  return f;
}

wt_status *wt_safetensors_open_buffer(const void *data, size_t len,
                                      const char *what, wt_safetensors **out) {
  wt_status *st = NULL;
  wt_safetensors *f = NULL;
  if (out == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter 'out' is NULL");
  *out = NULL;
  if (what == NULL) what = "buffer";
  if (data == NULL && len > 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: parameter 'data' is NULL with %zu bytes", what,
                         len);
  f = new_file(what);
  if (f == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", what);
  WT_CHECK(parse(f, data, len));
  *out = f;
  f = NULL;
out:
  wt_safetensors_close(f);
  return st;
}

wt_status *wt_safetensors_open(const char *path, wt_safetensors **out) {
  wt_status *st = NULL;
  wt_safetensors *f = NULL;
  int fd = -1;
  if (out == NULL || path == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter '%s' is NULL",
                         out == NULL ? "out" : "path");
  *out = NULL;
  f = new_file(path);
  if (f == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  /* Never blocks at the open (a FIFO, a device): refused by what it is. */
  struct stat sb;
  WT_CHECK(wt_open_regular("safetensors file", path, &fd, &sb));
  if ((uint64_t)sb.st_size > SIZE_MAX)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: %lld bytes do not fit in memory", path,
            (long long)sb.st_size);
  if (sb.st_size > 0) {
    /* Read-only and private: tensor data is handed out as const pointers into
     * the page cache, never copied. */
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      st = wt_status_from_errno(errno, "%s: cannot mmap %lld bytes", path,
                                (long long)sb.st_size);
      goto out;
    }
    f->map = map;
    f->map_len = (size_t)sb.st_size;
  }
  WT_CHECK(parse(f, f->map, f->map_len));
  WT_LOGD("safetensors", "%s: %zu tensors, %zu bytes", path, f->n, f->map_len);
  *out = f;
  f = NULL;
out:
  if (fd >= 0) close(fd);
  wt_safetensors_close(f);
  return st;
}

size_t wt_safetensors_count(const wt_safetensors *f) {
  return f ? f->n : 0;
}

const wt_st_tensor *wt_safetensors_at(const wt_safetensors *f, size_t i) {
  return f && i < f->n ? &f->tensors[i] : NULL;
}

const wt_st_tensor *wt_safetensors_find(const wt_safetensors *f,
                                        const char *name) {
  if (f == NULL || name == NULL) return NULL;
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const wt_st_tensor *t = &f->tensors[f->by_name[mid]];
    int c = strcmp(name, t->meta.name);
    if (c == 0) return t;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

const char *wt_safetensors_metadata(const wt_safetensors *f, const char *key) {
  if (f == NULL || f->metadata == NULL || key == NULL) return NULL;
  return json_string_value(json_object_get(f->metadata, key));
}

void wt_safetensors_close(wt_safetensors *f) {
  if (f == NULL) return;
  for (size_t i = 0; i < f->n; i++) wt_tensor_meta_clear(&f->tensors[i].meta);
  free(f->tensors);
  free(f->by_name);
  json_decref(f->metadata);
  if (f->map != NULL) munmap(f->map, f->map_len);
  free(f->what);
  free(f);
}
