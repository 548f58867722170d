/* safetensors.c: safetensors reader and writer, sharded checkpoints (see
 * wt/safetensors.h).
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

#define HEADER_LEN_BYTES 8
#define METADATA_KEY "__metadata__"

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

static const char *json_type_name(const json_t *j) {
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
                         f->what, json_type_name(md));
  const char *key;
  json_t *value;
  json_object_foreach(md, key, value) {
    if (!json_is_string(value))
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: '" METADATA_KEY
                           "' key '%s' maps to %s, "
                           "not a string",
                           f->what, key, json_type_name(value));
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
            f->what, name, json_type_name(entry));
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
            f->what, name, jdtype ? json_type_name(jdtype) : "missing");
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
            f->what, name, jshape ? json_type_name(jshape) : "missing");
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
            f->what, json_type_name(root));

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
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    st = wt_status_from_errno(errno, "%s: cannot open safetensors file", path);
    goto out;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = wt_status_from_errno(errno, "%s: cannot stat", path);
    goto out;
  }
  if (!S_ISREG(sb.st_mode))
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: not a regular file", path);
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

/* ---- writing ---------------------------------------------------------- */

static wt_status *write_all(int fd, const void *buf, uint64_t len,
                            const char *path) {
  const uint8_t *p = buf;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return wt_status_from_errno(errno, "%s: write failed", path);
    }
    p += w;
    len -= (uint64_t)w;
  }
  return NULL;
}

/* Builds the header object: `__metadata__` first, then the tensors in the
 * order given with contiguous offsets, as the reference writer lays them. */
static wt_status *build_header(const char *path,
                               const wt_st_write_tensor *tensors, size_t n,
                               const char *const *metadata, json_t **out) {
  wt_status *st = NULL;
  json_t *root = json_object();
  json_t *md = NULL;
  if (root == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  if (metadata != NULL && metadata[0] != NULL) {
    md = json_object();
    if (md == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    for (size_t i = 0; metadata[i] != NULL; i += 2) {
      const char *k = metadata[i], *v = metadata[i + 1];
      if (v == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: metadata key '%s' has no value (the array must hold "
                "key, value pairs)",
                path, k);
      if (json_object_get(md, k) != NULL)
        WT_FAIL(WT_INVALID_ARGUMENT, "%s: duplicate metadata key '%s'", path,
                k);
      json_t *jv = json_string(v);
      if (jv == NULL || json_object_set_new(md, k, jv) != 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: metadata key '%s': key or value is not valid UTF-8", path,
                k);
    }
    if (json_object_set_new(root, METADATA_KEY, md) != 0) {
      md = NULL;
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    }
    md = NULL;
  }

  uint64_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    const wt_st_write_tensor *t = &tensors[i];
    if (t->name == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor %zu: name is NULL", path, i);
    if (strcmp(t->name, METADATA_KEY) == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor %zu: the name '" METADATA_KEY "' is reserved", path,
              i);
    if (json_object_get(root, t->name) != NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: duplicate tensor name '%s'", path,
              t->name);
    const char *dtname = wt_dtype_safetensors_name(t->dtype);
    if (dtname == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor '%s': invalid dtype %d", path,
              t->name, (int)t->dtype);
    if (t->ndim > 0 && t->shape == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': shape is NULL with ndim %d", path, t->name,
              t->ndim);
    uint64_t nbytes;
    wt_status *nst = wt_tensor_nbytes(t->dtype, t->shape, t->ndim, &nbytes);
    if (nst != NULL) {
      st = wt_status_prefix(nst, "%s: tensor '%s'", path, t->name);
      goto out;
    }
    if (nbytes > 0 && t->data == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': data is NULL for %" PRIu64 " bytes", path,
              t->name, nbytes);
    if (nbytes > UINT64_MAX - offset || offset + nbytes > INT64_MAX)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': total size overflows 64 bits", path, t->name);

    json_t *entry = json_object();
    json_t *jshape = json_array();
    json_t *joff = json_array();
    int bad = entry == NULL || jshape == NULL || joff == NULL;
    for (int d = 0; !bad && d < t->ndim; d++)
      bad = json_array_append_new(jshape, json_integer(t->shape[d])) != 0;
    bad = bad ||
          json_array_append_new(joff, json_integer((json_int_t)offset)) ||
          json_array_append_new(joff,
                                json_integer((json_int_t)(offset + nbytes))) ||
          json_object_set_new(entry, "dtype", json_string(dtname)) ||
          json_object_set(entry, "shape", jshape) ||
          json_object_set(entry, "data_offsets", joff);
    json_decref(jshape);
    json_decref(joff);
    if (bad) {
      json_decref(entry);
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: tensor '%s': out of memory", path,
              t->name);
    }
    /* Fails for a name that is not UTF-8 (or out of memory). */
    if (json_object_set_new(root, t->name, entry) != 0)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor %zu: name is not valid UTF-8",
              path, i);
    offset += nbytes;
  }
  *out = root;
  root = NULL;
out:
  json_decref(md);
  json_decref(root);
  return st;
}

/* Opens a fresh temporary file beside `path`, honouring the umask (which
 * mkstemp's 0600 would not). */
static wt_status *open_temp(const char *path, char **tmp_out, int *fd_out) {
  for (int attempt = 0; attempt < 64; attempt++) {
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
      r = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)attempt;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%016" PRIx64, path, r) < 0)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      *fd_out = fd;
      return NULL;
    }
    int err = errno;
    free(tmp);
    if (err != EEXIST)
      return wt_status_from_errno(err, "%s: cannot create a temporary file",
                                  path);
  }
  return wt_status_new(WT_INTERNAL, "%s: no free temporary file name", path);
}

wt_status *wt_safetensors_write(const char *path,
                                const wt_st_write_tensor *tensors, size_t n,
                                const char *const *metadata) {
  wt_status *st = NULL;
  json_t *root = NULL;
  char *json = NULL;
  uint8_t *head = NULL;
  char *tmp = NULL;
  int fd = -1;
  if (path == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter 'path' is NULL");
  if (tensors == NULL && n > 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: parameter 'tensors' is NULL with n = %zu", path,
                         n);

  WT_CHECK(build_header(path, tensors, n, metadata, &root));
  json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (json == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory serializing the header",
            path);
  size_t jlen = strlen(json);
  /* Padded so that the data region starts 8-aligned, as the reference
   * writer does. */
  size_t hlen = (jlen + 7) & ~(size_t)7;
  if (hlen > WT_SAFETENSORS_MAX_HEADER)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: header would be %zu bytes, over the limit of %u", path, hlen,
            WT_SAFETENSORS_MAX_HEADER);
  head = malloc(HEADER_LEN_BYTES + hlen);
  if (head == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  memcpy(head + HEADER_LEN_BYTES, json, jlen);
  memset(head + HEADER_LEN_BYTES + jlen, ' ', hlen - jlen);

  WT_CHECK(open_temp(path, &tmp, &fd));
  WT_CHECK(write_all(fd, head, HEADER_LEN_BYTES + hlen, tmp));
  for (size_t i = 0; i < n; i++) {
    uint64_t nbytes;
    /* Already validated by build_header. */
    WT_CHECK(wt_tensor_nbytes(tensors[i].dtype, tensors[i].shape,
                              tensors[i].ndim, &nbytes));
    WT_CHECK(write_all(fd, tensors[i].data, nbytes, tmp));
  }
  /* Durable before it becomes visible: a crash never leaves a short file
   * under the final name. */
  if (fsync(fd) != 0) {
    st = wt_status_from_errno(errno, "%s: fsync failed", tmp);
    goto out;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    st = wt_status_from_errno(errno, "%s: close failed", tmp);
    goto out;
  }
  if (rename(tmp, path) != 0) {
    st = wt_status_from_errno(errno, "%s: cannot rename %s into place", path,
                              tmp);
    goto out;
  }
  free(tmp);
  tmp = NULL;
out:
  if (fd >= 0) close(fd);
  if (tmp != NULL) {
    unlink(tmp);
    free(tmp);
  }
  free(head);
  free(json);
  json_decref(root);
  return st;
}

/* ---- checkpoints ------------------------------------------------------ */

typedef struct {
  const wt_st_tensor *t;
  size_t shard;
} ckpt_entry;

struct wt_checkpoint {
  char *path;
  wt_safetensors **shards;
  char **shard_names; /* as the index spells them */
  size_t nshards;
  const wt_st_tensor **tensors; /* shard by shard */
  ckpt_entry *by_name;          /* sorted by tensor name */
  size_t n;
  uint64_t total_bytes;
};

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp(((const ckpt_entry *)a)->t->meta.name,
                ((const ckpt_entry *)b)->t->meta.name);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A shard named by the index must stay inside the index's folder. */
static int shard_name_ok(const char *name) {
  if (name[0] == '\0' || name[0] == '/') return 0;
  for (const char *p = name; *p;) {
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
    p += len + (slash ? 1 : 0);
  }
  return 1;
}

/* Reads the index, fills c->shard_names (sorted, unique) and returns the
 * weight_map through *wmap (a new reference). */
static wt_status *read_index(wt_checkpoint *c, json_t **wmap) {
  wt_status *st = NULL;
  json_t *root = NULL;
  const char **names = NULL; /* borrowed from the JSON */
  FILE *fp = fopen(c->path, "re");
  if (fp == NULL)
    return wt_status_from_errno(errno, "%s: cannot open checkpoint index",
                                c->path);
  json_error_t jerr;
  root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
  fclose(fp);
  if (root == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: checkpoint index is not valid JSON: %s (line %d, column %d)",
            c->path, jerr.text, jerr.line, jerr.column);
  json_t *map =
      json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(map))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: checkpoint index must be an object with a 'weight_map' "
            "object (tensor name -> shard file)",
            c->path);
  size_t n = json_object_size(map);
  names = malloc((n + 1) * sizeof(*names));
  c->shard_names = calloc(n + 1, sizeof(*c->shard_names));
  if (names == NULL || c->shard_names == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
  const char *name;
  json_t *value;
  size_t k = 0;
  json_object_foreach(map, name, value) {
    if (!json_is_string(value))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map['%s'] is %s, expected a shard file name", c->path,
              name, json_type_name(value));
    if (!shard_name_ok(json_string_value(value)))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map['%s']: shard file '%s' must be a relative path "
              "inside the index's folder",
              c->path, name, json_string_value(value));
    names[k++] = json_string_value(value);
  }
  if (k > 0) qsort(names, k, sizeof(*names), cmp_str);
  for (size_t i = 0; i < k; i++) {
    if (i > 0 && strcmp(names[i - 1], names[i]) == 0) continue;
    c->shard_names[c->nshards] = strdup(names[i]);
    if (c->shard_names[c->nshards] == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
    c->nshards++;
  }
  *wmap = json_incref(map);
out:
  free(names);
  json_decref(root);
  return st;
}

static wt_status *open_shards(wt_checkpoint *c) {
  wt_status *st = NULL;
  char *root = NULL;
  char *dir = strdup(c->path);
  if (dir == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  char *slash = strrchr(dir, '/');
  if (slash != NULL)
    slash[1] = '\0';
  else
    dir[0] = '\0';
  if (c->nshards > 0) {
    c->shards = calloc(c->nshards, sizeof(*c->shards));
    if (c->shards == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
  }
  /* The folder as the kernel resolves it: a shard whose real path (every
   * symlink followed) lies outside it is refused, so an index cannot make
   * the server read, and serve as weights, a file elsewhere. */
  root = realpath(dir[0] ? dir : ".", NULL);
  if (root == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: cannot resolve the index's folder: %s",
            c->path, strerror(errno));
  size_t rootlen = strlen(root);
  for (size_t i = 0; i < c->nshards; i++) {
    char *shard_path = NULL;
    if (asprintf(&shard_path, "%s%s", dir, c->shard_names[i]) < 0)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
    char *real = realpath(shard_path, NULL);
    free(shard_path);
    if (real == NULL)
      WT_FAIL(WT_NOT_FOUND, "%s: shard '%s': %s", c->path, c->shard_names[i],
              strerror(errno));
    if (strncmp(real, root, rootlen) != 0 ||
        (real[rootlen] != '/' && rootlen > 1)) {
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: shard '%s' resolves to '%s', outside the "
                         "index's folder '%s' (a symlink out of it?)",
                         c->path, c->shard_names[i], real, root);
      free(real);
      goto out;
    }
    wt_status *sst = wt_safetensors_open(real, &c->shards[i]);
    free(real);
    if (sst != NULL) {
      st = wt_status_prefix(sst, "%s: shard '%s'", c->path, c->shard_names[i]);
      goto out;
    }
  }
out:
  free(root);
  free(dir);
  return st;
}

/* Lists every tensor shard by shard and checks the shards against each other
 * and against the index's weight_map (NULL for a single file). */
static wt_status *index_tensors(wt_checkpoint *c, json_t *wmap) {
  wt_status *st = NULL;
  size_t n = 0;
  for (size_t i = 0; i < c->nshards; i++)
    n += wt_safetensors_count(c->shards[i]);
  if (n > 0) {
    c->tensors = calloc(n, sizeof(*c->tensors));
    c->by_name = calloc(n, sizeof(*c->by_name));
    if (c->tensors == NULL || c->by_name == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors",
              c->path, n);
  }
  size_t k = 0;
  for (size_t i = 0; i < c->nshards; i++) {
    for (size_t j = 0; j < wt_safetensors_count(c->shards[i]); j++) {
      const wt_st_tensor *t = wt_safetensors_at(c->shards[i], j);
      c->tensors[k] = t;
      c->by_name[k] = (ckpt_entry){t, i};
      c->total_bytes += t->meta.nbytes;
      k++;
    }
  }
  c->n = n;
  if (n > 0) qsort(c->by_name, n, sizeof(*c->by_name), cmp_entry_name);
  for (size_t i = 1; i < n; i++) {
    if (strcmp(c->by_name[i - 1].t->meta.name, c->by_name[i].t->meta.name) ==
        0) {
      size_t a = c->by_name[i - 1].shard, b = c->by_name[i].shard;
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s' is in two shards: '%s' and '%s'", c->path,
              c->by_name[i].t->meta.name, c->shard_names[a < b ? a : b],
              c->shard_names[a < b ? b : a]);
    }
  }
  if (wmap == NULL) goto out;
  for (size_t i = 0; i < c->nshards; i++) {
    for (size_t j = 0; j < wt_safetensors_count(c->shards[i]); j++) {
      const char *name = wt_safetensors_at(c->shards[i], j)->meta.name;
      const char *want = json_string_value(json_object_get(wmap, name));
      if (want == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: tensor '%s' in shard '%s' is not in the index's "
                "weight_map",
                c->path, name, c->shard_names[i]);
      if (strcmp(want, c->shard_names[i]) != 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: weight_map puts tensor '%s' in shard '%s', but it is in "
                "shard '%s'",
                c->path, name, want, c->shard_names[i]);
    }
  }
  const char *name;
  json_t *value;
  json_object_foreach(wmap, name, value) {
    if (wt_checkpoint_find(c, name) == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map puts tensor '%s' in shard '%s', which does not "
              "contain it",
              c->path, name, json_string_value(value));
  }
out:
  return st;
}

wt_status *wt_checkpoint_open(const char *path, wt_checkpoint **out) {
  wt_status *st = NULL;
  json_t *wmap = NULL;
  wt_checkpoint *c = NULL;
  if (out == NULL || path == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter '%s' is NULL",
                         out == NULL ? "out" : "path");
  *out = NULL;
  c = calloc(1, sizeof(*c));
  if (c == NULL || (c->path = strdup(path)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  if (ends_with(path, ".json")) {
    WT_CHECK(read_index(c, &wmap));
    WT_CHECK(open_shards(c));
  } else {
    c->shards = calloc(1, sizeof(*c->shards));
    c->shard_names = calloc(1, sizeof(*c->shard_names));
    if (c->shards == NULL || c->shard_names == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    c->nshards = 1;
    const char *base = strrchr(path, '/');
    c->shard_names[0] = strdup(base ? base + 1 : path);
    if (c->shard_names[0] == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    WT_CHECK(wt_safetensors_open(path, &c->shards[0]));
  }
  WT_CHECK(index_tensors(c, wmap));
  WT_LOGD("safetensors", "%s: %zu shards, %zu tensors, %" PRIu64 " bytes", path,
          c->nshards, c->n, c->total_bytes);
  *out = c;
  c = NULL;
out:
  json_decref(wmap);
  wt_checkpoint_close(c);
  return st;
}

size_t wt_checkpoint_count(const wt_checkpoint *c) {
  return c ? c->n : 0;
}

const wt_st_tensor *wt_checkpoint_at(const wt_checkpoint *c, size_t i) {
  return c && i < c->n ? c->tensors[i] : NULL;
}

const wt_st_tensor *wt_checkpoint_find(const wt_checkpoint *c,
                                       const char *name) {
  if (c == NULL || name == NULL) return NULL;
  size_t lo = 0, hi = c->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(name, c->by_name[mid].t->meta.name);
    if (cmp == 0) return c->by_name[mid].t;
    if (cmp < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

uint64_t wt_checkpoint_total_bytes(const wt_checkpoint *c) {
  return c ? c->total_bytes : 0;
}

void wt_checkpoint_close(wt_checkpoint *c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->nshards; i++) {
    if (c->shards) wt_safetensors_close(c->shards[i]);
    if (c->shard_names) free(c->shard_names[i]);
  }
  free(c->shards);
  free(c->shard_names);
  free(c->tensors);
  free(c->by_name);
  free(c->path);
  free(c);
}
