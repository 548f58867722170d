/* test_safetensors.c: the safetensors reader, writer and sharded checkpoints,
 * checked against each other, against hand-made bad files, and in both
 * directions against the reference Python package (tests/fixtures/). */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wt/clock.h"
#include "wt/safetensors.h"
#include "wt_test.h"

/* ---- helpers ---------------------------------------------------------- */

static char *join(const char *dir, const char *name) {
  char *p = NULL;
  CU_ASSERT_FATAL(asprintf(&p, "%s/%s", dir, name) > 0);
  return p;
}

static void write_bytes(const char *path, const void *buf, size_t len) {
  FILE *fp = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  CU_ASSERT_EQUAL(fwrite(buf, 1, len, fp), len);
  CU_ASSERT_EQUAL(fclose(fp), 0);
}

static void write_text(const char *path, const char *text) {
  write_bytes(path, text, strlen(text));
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A file image: length field hlen, hlen header bytes, data_len data bytes
 * (a counting pattern). */
static uint8_t *image(const char *header, size_t hlen, size_t data_len,
                      size_t *len) {
  *len = 8 + hlen + data_len;
  uint8_t *buf = malloc(*len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  put_le64(buf, hlen);
  memcpy(buf + 8, header, hlen);
  for (size_t i = 0; i < data_len; i++) buf[8 + hlen + i] = (uint8_t)i;
  return buf;
}

/* Parses header + data_len bytes of data as "bad.safetensors". */
static wt_status *open_header(const char *header, size_t data_len) {
  size_t len;
  uint8_t *buf = image(header, strlen(header), data_len, &len);
  wt_safetensors *f = NULL;
  wt_status *st = wt_safetensors_open_buffer(buf, len, "bad.safetensors", &f);
  CU_ASSERT((st == NULL) == (f != NULL));
  wt_safetensors_close(f);
  free(buf);
  return st;
}

/* Deterministic tensor bytes (bool: 0 or 1), the same rule as the fixture
 * script's. */
static void fill_pattern(uint8_t *p, size_t n, int seed, wt_dtype dt) {
  for (size_t j = 0; j < n; j++)
    p[j] = dt == WT_DTYPE_BOOL ? (uint8_t)((seed + j) % 2)
                               : (uint8_t)((seed * 37 + j * 11 + 5) & 0xff);
}

static size_t count_entries(const char *dir) {
  DIR *d = opendir(dir);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static char *read_all(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  CU_ASSERT_EQUAL(fread(buf, 1, (size_t)n, fp), (size_t)n);
  buf[n] = '\0';
  fclose(fp);
  *len = (size_t)n;
  return buf;
}

static char *to_hex(const void *data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  char *s = malloc(2 * n + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  s[2 * n] = '\0';
  return s;
}

/* Runs a script of tests/fixtures with python3; returns its exit status
 * (127: no python3) and its output in *output (caller frees). */
static int run_python(const char *script, const char *arg, char **output) {
  char *cmd = NULL;
  CU_ASSERT_FATAL(asprintf(&cmd, "python3 '%s/fixtures/%s' '%s' 2>&1",
                           wt_test_source_dir(), script, arg) > 0);
  FILE *p = popen(cmd, "r");
  free(cmd);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  size_t got;
  while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 2) {
      char *grown = realloc(out, cap * 2);
      CU_ASSERT_PTR_NOT_NULL_FATAL(grown);
      out = grown;
      cap *= 2;
    }
  }
  out[len] = '\0';
  int rc = pclose(p);
  *output = out;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* True when the script ran and passed; prints why when it was skipped
 * (no python3, or numpy/safetensors missing) or failed. */
static int python_ok(const char *test, int rc, const char *output) {
  if (rc == 127 || rc == 77) {
    char why[512];
    snprintf(why, sizeof(why), "%s", rc == 127 ? "python3 not found" : output);
    why[strcspn(why, "\n")] = '\0';
    wt_test_skip(test, why);
    return 0;
  }
  if (rc != 0)
    fprintf(stderr, "\n%s: python exited %d:\n%s\n", test, rc, output);
  CU_ASSERT_EQUAL(rc, 0);
  return rc == 0;
}

/* ---- reading ---------------------------------------------------------- */

static void test_read_file(void) {
  char *dir = wt_test_tmpdir();
  char *path = join(dir, "m.safetensors");
  /* Entries listed against their layout order, and padding as the reference
   * writes it. */
  const char *header =
      "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"12\"},"
      "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[4,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ";
  size_t len;
  uint8_t *buf = image(header, strlen(header), 16, &len);
  write_bytes(path, buf, len);

  wt_safetensors *f = NULL;
  WT_ASSERT_OK(wt_safetensors_open(path, &f));
  CU_ASSERT_EQUAL_FATAL(wt_safetensors_count(f), 2);
  const wt_st_tensor *b = wt_safetensors_at(f, 0), *w = wt_safetensors_at(f, 1);
  CU_ASSERT_STRING_EQUAL(b->meta.name, "b");
  CU_ASSERT_STRING_EQUAL(w->meta.name, "w");
  CU_ASSERT_PTR_NULL(wt_safetensors_at(f, 2));
  CU_ASSERT_EQUAL(w->meta.dtype, WT_DTYPE_BFLOAT16);
  CU_ASSERT_EQUAL(w->meta.ndim, 2);
  CU_ASSERT_EQUAL(w->meta.shape[0], 2);
  CU_ASSERT_EQUAL(w->meta.shape[1], 3);
  CU_ASSERT_EQUAL(w->meta.numel, 6);
  CU_ASSERT_EQUAL(w->meta.nbytes, 12);
  CU_ASSERT_EQUAL(w->offset, 4);
  CU_ASSERT_EQUAL(b->offset, 0);
  size_t data_at = 8 + strlen(header);
  CU_ASSERT_EQUAL(memcmp(b->data, buf + data_at, 4), 0);
  CU_ASSERT_EQUAL(memcmp(w->data, buf + data_at + 4, 12), 0);
  CU_ASSERT_PTR_EQUAL(wt_safetensors_find(f, "w"), w);
  CU_ASSERT_PTR_EQUAL(wt_safetensors_find(f, "b"), b);
  CU_ASSERT_PTR_NULL(wt_safetensors_find(f, "x"));
  CU_ASSERT_STRING_EQUAL(wt_safetensors_metadata(f, "format"), "pt");
  CU_ASSERT_STRING_EQUAL(wt_safetensors_metadata(f, "step"), "12");
  CU_ASSERT_PTR_NULL(wt_safetensors_metadata(f, "nope"));
  wt_safetensors_close(f);

  /* The same bytes through the borrowed-buffer entry point. */
  WT_ASSERT_OK(wt_safetensors_open_buffer(buf, len, NULL, &f));
  CU_ASSERT_EQUAL(wt_safetensors_count(f), 2);
  CU_ASSERT_PTR_EQUAL(wt_safetensors_find(f, "b")->data, buf + data_at);
  wt_safetensors_close(f);
  wt_safetensors_close(NULL);

  free(buf);
  free(path);
  wt_test_rmtree(dir);
  free(dir);
}

static void test_read_empty_scalar_zero_size(void) {
  wt_safetensors *f = NULL;
  /* Zero tensors is a valid file, with or without padding or metadata. */
  const char *empties[] = {"{}", "{}      ", "  {}", "{\"__metadata__\":{}}",
                           "{\"__metadata__\":{\"a\":\"b\"}}"};
  for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
    size_t len;
    uint8_t *buf = image(empties[i], strlen(empties[i]), 0, &len);
    WT_ASSERT_OK(wt_safetensors_open_buffer(buf, len, "e", &f));
    CU_ASSERT_EQUAL(wt_safetensors_count(f), 0);
    CU_ASSERT_PTR_NULL(wt_safetensors_at(f, 0));
    CU_ASSERT_PTR_NULL(wt_safetensors_find(f, "a"));
    wt_safetensors_close(f);
    free(buf);
  }

  /* Zero-size tensors share offsets with their neighbours; a scalar holds
   * one element. */
  const char *header =
      "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"z2\":{\"dtype\":\"I32\",\"shape\":[3,0],\"data_offsets\":[8,8]},"
      "\"z1\":{\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[0,0]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]},"
      "\"z3\":{\"dtype\":\"BOOL\",\"shape\":[0,5],\"data_offsets\":[10,10]}}";
  size_t len;
  uint8_t *buf = image(header, strlen(header), 10, &len);
  WT_ASSERT_OK(wt_safetensors_open_buffer(buf, len, "z", &f));
  const char *order[] = {"z1", "s", "z2", "u", "z3"};
  CU_ASSERT_EQUAL_FATAL(wt_safetensors_count(f), 5);
  for (size_t i = 0; i < 5; i++)
    CU_ASSERT_STRING_EQUAL(wt_safetensors_at(f, i)->meta.name, order[i]);
  const wt_st_tensor *s = wt_safetensors_find(f, "s");
  CU_ASSERT_EQUAL(s->meta.ndim, 0);
  CU_ASSERT_EQUAL(s->meta.numel, 1);
  CU_ASSERT_EQUAL(s->meta.nbytes, 8);
  const wt_st_tensor *z2 = wt_safetensors_find(f, "z2");
  CU_ASSERT_EQUAL(z2->meta.numel, 0);
  CU_ASSERT_EQUAL(z2->meta.nbytes, 0);
  CU_ASSERT_EQUAL(z2->meta.ndim, 2);
  CU_ASSERT_EQUAL(wt_safetensors_find(f, "z3")->offset, 10);
  wt_safetensors_close(f);
  free(buf);
}

/* ---- bad input -------------------------------------------------------- */

static const struct {
  const char *what;
  const char *header;
  size_t data_len;
  const char *needle;
  const char *tensor; /* must also be named, or NULL */
} bad_headers[] = {
    {"not JSON", "{\"a\":", 0, "header is not valid JSON", NULL},
    {"empty header", "", 0, "header is not valid JSON", NULL},
    {"garbage", "hello", 0, "header is not valid JSON", NULL},
    {"top-level array", "[]", 0, "header must be a JSON object, got an array",
     NULL},
    {"duplicate key",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     1, "duplicate", NULL},
    {"entry not an object", "{\"a\":1}", 0, "entry must be an object", "'a'"},
    {"unknown dtype",
     "{\"c\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
     "unknown dtype 'C64'", "'c'"},
    {"dtype missing", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     "field 'dtype' is missing", "'a'"},
    {"dtype not a string",
     "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     "field 'dtype' is an integer", "'a'"},
    {"shape missing", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1,
     "field 'shape' is missing", "'a'"},
    {"shape not an array",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1,
     "field 'shape' is an integer", "'a'"},
    {"negative dimension",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[2,-1],\"data_offsets\":[0,1]}}", 1,
     "shape[1] is not a non-negative integer", "'a'"},
    {"fractional dimension",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
     "shape[0] is not a non-negative integer", "'a'"},
    {"too many dimensions",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
     "\"data_offsets\":[0,1]}}",
     1, "17 dimensions", "'a'"},
    {"element count overflows",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8],"
     "\"data_offsets\":[0,4]}}",
     4, "overflows 64 bits", "'a'"},
    {"byte size overflows",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
     "\"data_offsets\":[0,4]}}",
     4, "overflow 64 bits", "'a'"},
    {"offsets missing", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1,
     "field 'data_offsets' must be [begin, end]", "'a'"},
    {"offsets of three",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
     "field 'data_offsets' must be [begin, end]", "'a'"},
    {"negative offset",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1,
     "field 'data_offsets' must be [begin, end]", "'a'"},
    {"begin after end",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1,0]}}", 1,
     "data_offsets [1, 0] begin after end", "'a'"},
    {"offset out of range",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 8,
     "data_offsets [4, 12] out of range: the data region is 8 bytes", "'a'"},
    {"huge offset out of range",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
     "\"data_offsets\":[9223372036854775806,9223372036854775807]}}",
     1, "out of range", "'a'"},
    {"byte-length mismatch",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "data_offsets [0, 8] hold 8 bytes, but dtype F32 and shape [3] need 12",
     "'a'"},
    {"overlap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
     12, "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a'", NULL},
    {"same range twice",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     4, "overlaps", "'a'"},
    {"zero-size tensor inside another",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
     "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}",
     8, "tensor 'z' (data_offsets [4, 4]) overlaps tensor 'a'", NULL},
    {"gap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
     12, "gap in the data region: bytes [4, 8) before tensor 'b'", NULL},
    {"gap at the start",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
     "gap in the data region: bytes [0, 4)", "'a'"},
    {"trailing bytes",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 8,
     "4 trailing bytes: the data region is 8 bytes but the tensors cover only "
     "4",
     NULL},
    {"data but no tensors", "{}", 3, "3 trailing bytes", NULL},
    {"metadata not an object", "{\"__metadata__\":[\"a\"]}", 0,
     "'__metadata__' must be an object of strings, got an array", NULL},
    {"metadata null", "{\"__metadata__\":null}", 0,
     "'__metadata__' must be an object of strings, got null", NULL},
    {"metadata value not a string", "{\"__metadata__\":{\"step\":3}}", 0,
     "'__metadata__' key 'step' maps to an integer, not a string", NULL},
    {"unknown field",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
     "\"extra\":1}}",
     1, "unknown field 'extra'", "'a'"},
};

static void test_bad_headers(void) {
  for (size_t i = 0; i < sizeof(bad_headers) / sizeof(bad_headers[0]); i++) {
    wt_status *st = open_header(bad_headers[i].header, bad_headers[i].data_len);
    const char *msg = wt_status_message(st);
    int ok = st != NULL && wt_status_code(st) == WT_INVALID_ARGUMENT &&
             strstr(msg, "bad.safetensors: ") == msg &&
             strstr(msg, bad_headers[i].needle) != NULL &&
             (bad_headers[i].tensor == NULL ||
              strstr(msg, bad_headers[i].tensor) != NULL);
    if (!ok)
      fprintf(stderr,
              "\n  case '%s': want INVALID_ARGUMENT with '%s', got %s: %s\n",
              bad_headers[i].what, bad_headers[i].needle,
              wt_code_name(wt_status_code(st)), msg);
    CU_ASSERT(ok);
    wt_status_free(st);
  }
}

static void test_bad_bytes(void) {
  wt_safetensors *f = (wt_safetensors *)1;
  /* A NUL byte inside the header is not JSON, even where jansson would stop
   * reading a C string. */
  size_t len;
  uint8_t *buf = image("{}\0     ", 8, 0, &len);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "nul", &f),
                WT_INVALID_ARGUMENT, "nul: header is not valid JSON");
  CU_ASSERT_PTR_NULL(f);
  free(buf);
  const char *escaped_nul = "{\"a\\u0000\":1}";
  buf = image(escaped_nul, strlen(escaped_nul), 0, &len);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "nul", &f),
                WT_INVALID_ARGUMENT, "header is not valid JSON");
  free(buf);
  /* Invalid UTF-8 in a name. */
  const char *bad_utf8 = "{\"\xff\":1}";
  buf = image(bad_utf8, strlen(bad_utf8), 0, &len);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "utf8", &f),
                WT_INVALID_ARGUMENT, "header is not valid JSON");
  free(buf);

  /* Too short for the length field: empty and cut-off. */
  WT_ASSERT_ERR(wt_safetensors_open_buffer(NULL, 0, "empty", &f),
                WT_INVALID_ARGUMENT, "empty: truncated: 0 bytes");
  WT_ASSERT_ERR(wt_safetensors_open_buffer("\x02\0\0\0\0", 5, "short", &f),
                WT_INVALID_ARGUMENT, "short: truncated: 5 bytes");

  /* Header length past the end of the file. */
  buf = image("{}", 2, 0, &len);
  put_le64(buf, 100);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "cut", &f),
                WT_INVALID_ARGUMENT,
                "cut: truncated: header length 100 runs past the end of the "
                "file (2 bytes follow");
  /* Over the cap: rejected on the length alone, before anything is read. */
  put_le64(buf, WT_SAFETENSORS_MAX_HEADER + 1);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "big", &f),
                WT_INVALID_ARGUMENT,
                "big: header length 100000001 exceeds the limit of 100000000 "
                "bytes");
  put_le64(buf, UINT64_MAX);
  WT_ASSERT_ERR(wt_safetensors_open_buffer(buf, len, "big", &f),
                WT_INVALID_ARGUMENT,
                "header length 18446744073709551615 exceeds the limit");
  free(buf);

  WT_ASSERT_ERR(wt_safetensors_open_buffer(NULL, 8, NULL, &f),
                WT_INVALID_ARGUMENT, "buffer: parameter 'data' is NULL");
}

static void test_bad_files(void) {
  char *dir = wt_test_tmpdir();
  wt_safetensors *f = NULL;
  char *path = join(dir, "empty.safetensors");
  write_bytes(path, "", 0);
  char want_buf[512];
  const char *want = want_buf; /* a pointer: WT_ASSERT_ERR tests it */
  snprintf(want_buf, sizeof(want_buf), "%s: truncated: 0 bytes", path);
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_INVALID_ARGUMENT, want);
  CU_ASSERT_PTR_NULL(f);
  free(path);

  path = join(dir, "short.safetensors");
  size_t len;
  const char *header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
  uint8_t *buf = image(header, strlen(header), 16, &len);
  write_bytes(path, buf, len - 10); /* cut off inside the data */
  snprintf(want_buf, sizeof(want_buf),
           "%s: tensor 'a': data_offsets [0, 16] out of range: the data "
           "region is 6 bytes",
           path);
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_INVALID_ARGUMENT, want);
  write_bytes(path, buf, 30); /* cut off inside the header */
  snprintf(want_buf, sizeof(want_buf),
           "%s: truncated: header length %zu runs past the end", path,
           strlen(header));
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_INVALID_ARGUMENT, want);
  free(buf);
  free(path);

  /* A header longer than 100 MB, for real: a sparse file, so the test stays
   * cheap and the reader must refuse it from the length field alone. */
  path = join(dir, "huge.safetensors");
  uint8_t head[10];
  put_le64(head, WT_SAFETENSORS_MAX_HEADER + 8);
  head[8] = '{';
  head[9] = ' ';
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CU_ASSERT_FATAL(fd >= 0);
  CU_ASSERT_EQUAL(write(fd, head, sizeof(head)), (ssize_t)sizeof(head));
  CU_ASSERT_EQUAL(ftruncate(fd, 8 + WT_SAFETENSORS_MAX_HEADER + 8), 0);
  close(fd);
  snprintf(want_buf, sizeof(want_buf),
           "%s: header length 100000008 exceeds the limit of 100000000", path);
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_INVALID_ARGUMENT, want);
  unlink(path);
  free(path);

  path = join(dir, "missing.safetensors");
  snprintf(want_buf, sizeof(want_buf),
           "safetensors file '%s': cannot open: No such file", path);
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_NOT_FOUND, want);
  free(path);
  snprintf(want_buf, sizeof(want_buf),
           "safetensors file '%s': a directory, not a regular file", dir);
  WT_ASSERT_ERR(wt_safetensors_open(dir, &f), WT_INVALID_ARGUMENT, want);
  /* A FIFO (no writer: an open would wait forever) and a character device
   * are refused at once, by what they are, before anything is read. */
  path = join(dir, "fifo.safetensors");
  CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
  int64_t t0 = wt_mono_ms();
  snprintf(want_buf, sizeof(want_buf),
           "safetensors file '%s': a FIFO, not a regular file", path);
  WT_ASSERT_ERR(wt_safetensors_open(path, &f), WT_INVALID_ARGUMENT, want);
  CU_ASSERT(wt_mono_ms() - t0 < 1000);
  unlink(path);
  free(path);
  WT_ASSERT_ERR(wt_safetensors_open("/dev/zero", &f), WT_INVALID_ARGUMENT,
                "'/dev/zero': a character device, not a regular file");

  wt_test_rmtree(dir);
  free(dir);
}

/* ---- writing ---------------------------------------------------------- */

/* Tensors of every dtype with varied shapes (scalars and zero-size among
 * them); data in `store`, which the caller frees. */
typedef struct {
  wt_st_write_tensor t[WT_DTYPE_COUNT + 2];
  int64_t shapes[WT_DTYPE_COUNT + 2][3];
  char names[WT_DTYPE_COUNT + 2][48];
  uint8_t *store[WT_DTYPE_COUNT + 2];
  size_t n;
} tensor_set;

static void make_all_dtypes(tensor_set *s) {
  static const int64_t shapes[][3] = {{3, 0, 0}, {2, 2, 0}, {0, 0, 0},
                                      {0, 0, 0}, {1, 2, 3}, {4, 1, 0}};
  static const int ndims[] = {1, 2, 0, 1, 3, 2};
  memset(s, 0, sizeof(*s));
  for (int k = 0; k < WT_DTYPE_COUNT + 2; k++) {
    wt_dtype dt = k < WT_DTYPE_COUNT    ? (wt_dtype)k
                  : k == WT_DTYPE_COUNT ? WT_DTYPE_BFLOAT16
                                        : WT_DTYPE_FLOAT8_E4M3FN;
    int ndim = ndims[k % 6];
    memcpy(s->shapes[k], shapes[k % 6], sizeof(shapes[0]));
    if (k == WT_DTYPE_COUNT + 1) { /* zero-size with a large dimension */
      ndim = 2;
      s->shapes[k][0] = 1 << 20;
      s->shapes[k][1] = 0;
    }
    snprintf(s->names[k], sizeof(s->names[k]), "layers.%d.%s", k,
             wt_dtype_torch_name(dt));
    uint64_t nbytes;
    WT_ASSERT_OK(wt_tensor_nbytes(dt, s->shapes[k], ndim, &nbytes));
    s->store[k] = malloc(nbytes + 1);
    fill_pattern(s->store[k], nbytes, k, dt);
    s->t[k] = (wt_st_write_tensor){s->names[k], dt, ndim,
                                   ndim ? s->shapes[k] : NULL, s->store[k]};
  }
  s->n = WT_DTYPE_COUNT + 2;
}

static void free_set(tensor_set *s) {
  for (size_t i = 0; i < s->n; i++) free(s->store[i]);
}

static void test_write_read(void) {
  char *dir = wt_test_tmpdir();
  char *path = join(dir, "w.safetensors");
  tensor_set s;
  make_all_dtypes(&s);
  const char *md[] = {"format", "pt", "note", "written by wt", NULL};
  write_text(path, "old contents");
  WT_ASSERT_OK(wt_safetensors_write(path, s.t, s.n, md));
  /* Replaced in place, no temporary file left behind. */
  CU_ASSERT_EQUAL(count_entries(dir), 1);
  struct stat sb;
  CU_ASSERT_EQUAL(stat(path, &sb), 0);
  mode_t mask = umask(0);
  umask(mask);
  CU_ASSERT_EQUAL(sb.st_mode & 0777, 0666 & ~mask);

  size_t len;
  char *raw = read_all(path, &len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)raw[i];
  CU_ASSERT_EQUAL(hlen % 8, 0);
  /* Compact JSON, metadata first, keys in the reference writer's order. */
  const char *want_head =
      "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"written by wt\"},"
      "\"layers.0.bool\":{\"dtype\":\"BOOL\",\"shape\":[3],"
      "\"data_offsets\":[0,3]},";
  CU_ASSERT_EQUAL(strncmp(raw + 8, want_head, strlen(want_head)), 0);
  size_t jlen = hlen;
  while (jlen > 0 && raw[8 + jlen - 1] == ' ') jlen--;
  CU_ASSERT_EQUAL(raw[8 + jlen - 1], '}');
  CU_ASSERT(hlen - jlen < 8);
  free(raw);

  wt_safetensors *f = NULL;
  WT_ASSERT_OK(wt_safetensors_open(path, &f));
  CU_ASSERT_EQUAL_FATAL(wt_safetensors_count(f), s.n);
  uint64_t offset = 0;
  for (size_t i = 0; i < s.n; i++) {
    /* Laid out in the order given. */
    const wt_st_tensor *t = wt_safetensors_at(f, i);
    CU_ASSERT_STRING_EQUAL(t->meta.name, s.t[i].name);
    CU_ASSERT_EQUAL(t->meta.dtype, s.t[i].dtype);
    CU_ASSERT_EQUAL(t->meta.ndim, s.t[i].ndim);
    for (int d = 0; d < s.t[i].ndim; d++)
      CU_ASSERT_EQUAL(t->meta.shape[d], s.t[i].shape[d]);
    CU_ASSERT_EQUAL(t->offset, offset);
    CU_ASSERT_EQUAL(memcmp(t->data, s.t[i].data, t->meta.nbytes), 0);
    offset += t->meta.nbytes;
  }
  CU_ASSERT_STRING_EQUAL(wt_safetensors_metadata(f, "note"), "written by wt");
  wt_safetensors_close(f);

  /* No tensors, no metadata: the smallest file the reference writes. */
  WT_ASSERT_OK(wt_safetensors_write(path, NULL, 0, NULL));
  raw = read_all(path, &len);
  CU_ASSERT_EQUAL(len, 16);
  CU_ASSERT_EQUAL(memcmp(raw, "\x08\0\0\0\0\0\0\0{}      ", 16), 0);
  free(raw);

  free_set(&s);
  free(path);
  wt_test_rmtree(dir);
  free(dir);
}

static void test_write_errors(void) {
  char *dir = wt_test_tmpdir();
  char *path = join(dir, "w.safetensors");
  write_text(path, "old contents");
  uint8_t data[16] = {0};
  int64_t shape[] = {2};
  int64_t neg[] = {-2};
  wt_st_write_tensor t[2] = {{"x", WT_DTYPE_FLOAT32, 1, shape, data},
                             {"x", WT_DTYPE_INT64, 1, shape, data}};
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "duplicate tensor name 'x'");
  t[1].name = "__metadata__";
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 1: the name '__metadata__' is reserved");
  t[1].name = "y";
  t[1].data = NULL;
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 'y': data is NULL for 16 bytes");
  t[1].data = data;
  t[1].shape = neg;
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 'y'");
  t[1].shape = shape;
  t[1].dtype = WT_DTYPE_COUNT;
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 'y': invalid dtype");
  t[1].dtype = WT_DTYPE_INT64;
  t[1].shape = NULL;
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 'y': shape is NULL with ndim 1");
  t[1].shape = shape;
  t[1].name = NULL;
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 1: name is NULL");
  t[1].name = "bad\xff";
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, NULL), WT_INVALID_ARGUMENT,
                "tensor 1: name is not valid UTF-8");
  t[1].name = "y";
  const char *odd[] = {"format", "pt", "lonely", NULL};
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, odd), WT_INVALID_ARGUMENT,
                "metadata key 'lonely' has no value");
  const char *dup[] = {"k", "1", "k", "2", NULL};
  WT_ASSERT_ERR(wt_safetensors_write(path, t, 2, dup), WT_INVALID_ARGUMENT,
                "duplicate metadata key 'k'");
  WT_ASSERT_ERR(wt_safetensors_write(path, NULL, 1, NULL), WT_INVALID_ARGUMENT,
                "parameter 'tensors' is NULL");
  /* Nothing above touched the existing file or left a temporary. */
  size_t len;
  char *raw = read_all(path, &len);
  CU_ASSERT_STRING_EQUAL(raw, "old contents");
  free(raw);
  CU_ASSERT_EQUAL(count_entries(dir), 1);

  char *nodir = join(dir, "no/such/dir.safetensors");
  WT_ASSERT_ERR(wt_safetensors_write(nodir, t, 2, NULL), WT_NOT_FOUND,
                "cannot create a temporary file");
  free(nodir);
  WT_ASSERT_OK(wt_safetensors_write(path, t, 2, NULL));
  CU_ASSERT_EQUAL(count_entries(dir), 1);

  free(path);
  wt_test_rmtree(dir);
  free(dir);
}

/* ---- the reference package -------------------------------------------- */

static uint8_t *from_hex(const char *hex, size_t *n) {
  *n = strlen(hex) / 2;
  uint8_t *p = malloc(*n + 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  for (size_t i = 0; i < *n; i++) {
    unsigned v;
    CU_ASSERT_FATAL(sscanf(hex + 2 * i, "%2x", &v) == 1);
    p[i] = (uint8_t)v;
  }
  return p;
}

/* Checks tensor `t` against a manifest entry {name, dtype, shape, hex}. */
static void expect_tensor(const wt_st_tensor *t, json_t *want,
                          const char *file) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  const char *name = json_string_value(json_object_get(want, "name"));
  int ok = strcmp(t->meta.name, name) == 0;
  ok &= strcmp(wt_dtype_safetensors_name(t->meta.dtype),
               json_string_value(json_object_get(want, "dtype"))) == 0;
  json_t *shape = json_object_get(want, "shape");
  ok &= (size_t)t->meta.ndim == json_array_size(shape);
  for (size_t d = 0; ok && d < json_array_size(shape); d++)
    ok &= t->meta.shape[d] == json_integer_value(json_array_get(shape, d));
  size_t n;
  uint8_t *bytes =
      from_hex(json_string_value(json_object_get(want, "hex")), &n);
  ok &= t->meta.nbytes == n && memcmp(t->data, bytes, n) == 0;
  free(bytes);
  if (!ok)
    fprintf(stderr, "\n  %s: tensor '%s' differs from the manifest's '%s'\n",
            file, t->meta.name, name);
  CU_ASSERT(ok);
}

static void test_python_writes_c_reads(void) {
  char *dir = wt_test_tmpdir();
  char *out = NULL;
  int rc = run_python("make_safetensors_fixtures.py", dir, &out);
  if (!python_ok("python_writes_c_reads", rc, out)) goto done;

  char *mpath = join(dir, "manifest.json");
  json_error_t jerr;
  json_t *manifest = json_load_file(mpath, 0, &jerr);
  free(mpath);
  CU_ASSERT_PTR_NOT_NULL_FATAL(manifest);
  size_t i;
  json_t *spec;
  json_array_foreach(json_object_get(manifest, "files"), i, spec) {
    char *path = join(dir, json_string_value(json_object_get(spec, "file")));
    wt_safetensors *f = NULL;
    WT_ASSERT_OK(wt_safetensors_open(path, &f));
    json_t *tensors = json_object_get(spec, "tensors");
    CU_ASSERT_EQUAL(wt_safetensors_count(f), json_array_size(tensors));
    size_t k;
    json_t *want;
    json_array_foreach(tensors, k, want) {
      /* Same layout order as the reference's header says, same bytes. */
      expect_tensor(wt_safetensors_at(f, k), want, path);
      CU_ASSERT_PTR_EQUAL(
          wt_safetensors_find(f,
                              json_string_value(json_object_get(want, "name"))),
          wt_safetensors_at(f, k));
    }
    json_t *md = json_object_get(spec, "metadata");
    const char *key;
    json_t *value;
    json_object_foreach(md, key, value) {
      const char *got = wt_safetensors_metadata(f, key);
      CU_ASSERT_PTR_NOT_NULL(got);
      if (got) CU_ASSERT_STRING_EQUAL(got, json_string_value(value));
    }
    if (!json_is_object(md))
      CU_ASSERT_PTR_NULL(wt_safetensors_metadata(f, "format"));
    wt_safetensors_close(f);
    free(path);
  }
  CU_ASSERT(i >= 4);

  json_array_foreach(json_object_get(manifest, "checkpoints"), i, spec) {
    char *path = join(dir, json_string_value(json_object_get(spec, "path")));
    wt_checkpoint *c = NULL;
    WT_ASSERT_OK(wt_checkpoint_open(path, &c));
    json_t *tensors = json_object_get(spec, "tensors");
    CU_ASSERT_EQUAL(wt_checkpoint_count(c), json_array_size(tensors));
    CU_ASSERT_EQUAL(
        wt_checkpoint_total_bytes(c),
        (uint64_t)json_integer_value(json_object_get(spec, "total_bytes")));
    size_t k;
    json_t *want;
    json_array_foreach(tensors, k, want) {
      expect_tensor(wt_checkpoint_at(c, k), want, path);
      CU_ASSERT_PTR_EQUAL(
          wt_checkpoint_find(c,
                             json_string_value(json_object_get(want, "name"))),
          wt_checkpoint_at(c, k));
    }
    wt_checkpoint_close(c);
    free(path);
  }
  json_decref(manifest);
done:
  free(out);
  wt_test_rmtree(dir);
  free(dir);
}

/* Adds {file, tensors, metadata, identical_to_reference} to `files`. */
static void add_spec(json_t *files, const char *path,
                     const wt_st_write_tensor *t, size_t n,
                     const char *const *md, int identical) {
  json_t *tensors = json_array();
  for (size_t i = 0; i < n; i++) {
    uint64_t nbytes;
    WT_ASSERT_OK(wt_tensor_nbytes(t[i].dtype, t[i].shape, t[i].ndim, &nbytes));
    char *hex = to_hex(t[i].data, nbytes);
    json_t *shape = json_array();
    for (int d = 0; d < t[i].ndim; d++)
      json_array_append_new(shape, json_integer(t[i].shape[d]));
    json_array_append_new(
        tensors, json_pack("{s:s, s:s, s:o, s:s}", "name", t[i].name, "dtype",
                           wt_dtype_safetensors_name(t[i].dtype), "shape",
                           shape, "hex", hex));
    free(hex);
  }
  json_t *jmd = json_null();
  if (md != NULL) {
    jmd = json_object();
    for (size_t i = 0; md[i] != NULL; i += 2)
      json_object_set_new(jmd, md[i], json_string(md[i + 1]));
  }
  json_array_append_new(
      files, json_pack("{s:s, s:o, s:o, s:b}", "file", path, "tensors", tensors,
                       "metadata", jmd, "identical_to_reference", identical));
}

static void test_c_writes_python_reads(void) {
  char *dir = wt_test_tmpdir();
  json_t *files = json_array();
  char *out = NULL;

  /* Every dtype in wt's order, which is not the reference writer's: the
   * reference must still read back every byte. */
  tensor_set s;
  make_all_dtypes(&s);
  char *mixed = join(dir, "mixed.safetensors");
  const char *md[] = {"format", "pt", "source", "wt test", NULL};
  WT_ASSERT_OK(wt_safetensors_write(mixed, s.t, s.n, md));
  add_spec(files, mixed, s.t, s.n, md, 0);

  /* Listed in the reference writer's own order (dtype, largest first, then
   * name): the whole file must match its output byte for byte. */
  uint8_t buf[6][64];
  int64_t s2[] = {2}, s22[] = {2, 2}, s3[] = {3}, s0[] = {0};
  wt_st_write_tensor ref[] = {
      {"step", WT_DTYPE_UINT64, 1, s2, buf[0]},
      {"a.weight", WT_DTYPE_FLOAT32, 2, s22, buf[1]},
      {"b.bias", WT_DTYPE_FLOAT32, 1, s3, buf[2]},
      {"scale", WT_DTYPE_BFLOAT16, 0, NULL, buf[3]},
      {"emb.w\xc3\xb6rter", WT_DTYPE_FLOAT16, 1, s3, buf[4]},
      {"q.empty", WT_DTYPE_FLOAT8_E4M3FN, 1, s0, buf[5]},
      {"mask", WT_DTYPE_BOOL, 1, s3, buf[5]},
  };
  for (int i = 0; i < 6; i++) fill_pattern(buf[i], 64, 60 + i, WT_DTYPE_UINT8);
  fill_pattern(buf[5], 3, 0, WT_DTYPE_BOOL);
  size_t nref = sizeof(ref) / sizeof(ref[0]);
  const char *md1[] = {"format", "pt", NULL};
  char *same = join(dir, "same.safetensors");
  WT_ASSERT_OK(wt_safetensors_write(same, ref, nref, md1));
  add_spec(files, same, ref, nref, md1, 1);
  char *same_nomd = join(dir, "same_nomd.safetensors");
  WT_ASSERT_OK(wt_safetensors_write(same_nomd, ref, nref, NULL));
  add_spec(files, same_nomd, ref, nref, NULL, 1);
  char *empty = join(dir, "empty.safetensors");
  WT_ASSERT_OK(wt_safetensors_write(empty, NULL, 0, NULL));
  add_spec(files, empty, NULL, 0, NULL, 1);
  char *meta_only = join(dir, "meta_only.safetensors");
  WT_ASSERT_OK(wt_safetensors_write(meta_only, NULL, 0, md1));
  add_spec(files, meta_only, NULL, 0, md1, 1);

  char *spec = join(dir, "spec.json");
  json_t *root = json_pack("{s:o}", "files", files);
  CU_ASSERT_EQUAL_FATAL(json_dump_file(root, spec, JSON_INDENT(1)), 0);
  json_decref(root);
  int rc = run_python("check_safetensors.py", spec, &out);
  if (python_ok("c_writes_python_reads", rc, out)) {
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "5/5 files match"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(out,
               "same.safetensors: 7 tensors match, identical to the "
               "reference writer"));
  }

  free(out);
  free(spec);
  free(mixed);
  free(same);
  free(same_nomd);
  free(empty);
  free(meta_only);
  free_set(&s);
  wt_test_rmtree(dir);
  free(dir);
}

/* ---- checkpoints ------------------------------------------------------ */

/* Writes `dir/file` holding float32 [2] tensors named `names` (NULL-ended);
 * tensor i of the file holds the values i, i + 0.5. */
static void write_shard(const char *dir, const char *file,
                        const char *const *names) {
  wt_st_write_tensor t[8];
  float data[8][2];
  static const int64_t shape[] = {2};
  size_t n = 0;
  for (; names[n] != NULL; n++) {
    data[n][0] = (float)n;
    data[n][1] = (float)n + 0.5f;
    t[n] = (wt_st_write_tensor){names[n], WT_DTYPE_FLOAT32, 1, shape, data[n]};
  }
  char *path = join(dir, file);
  WT_ASSERT_OK(wt_safetensors_write(path, t, n, NULL));
  free(path);
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static void test_checkpoint_single(void) {
  char *dir = wt_test_tmpdir();
  write_shard(dir, "model.safetensors",
              (const char *const[]){"b", "a", "c", NULL});
  char *path = join(dir, "model.safetensors");
  wt_checkpoint *c = NULL;
  WT_ASSERT_OK(wt_checkpoint_open(path, &c));
  CU_ASSERT_EQUAL(wt_checkpoint_count(c), 3);
  CU_ASSERT_EQUAL(wt_checkpoint_total_bytes(c), 24);
  CU_ASSERT_STRING_EQUAL(wt_checkpoint_at(c, 0)->meta.name, "b");
  CU_ASSERT_STRING_EQUAL(wt_checkpoint_at(c, 2)->meta.name, "c");
  CU_ASSERT_PTR_NULL(wt_checkpoint_at(c, 3));
  CU_ASSERT_PTR_EQUAL(wt_checkpoint_find(c, "a"), wt_checkpoint_at(c, 1));
  CU_ASSERT_PTR_NULL(wt_checkpoint_find(c, "d"));
  CU_ASSERT_EQUAL(((const float *)wt_checkpoint_find(c, "c")->data)[1], 2.5f);
  wt_checkpoint_close(c);
  wt_checkpoint_close(NULL);

  /* A bad single file gets the reader's own error. */
  write_text(path, "nonsense!");
  WT_ASSERT_ERR(wt_checkpoint_open(path, &c), WT_INVALID_ARGUMENT,
                "header length");
  free(path);
  path = join(dir, "missing.safetensors");
  WT_ASSERT_ERR(wt_checkpoint_open(path, &c), WT_NOT_FOUND,
                "missing.safetensors");
  CU_ASSERT_PTR_NULL(c);
  free(path);
  wt_test_rmtree(dir);
  free(dir);
}

static void test_checkpoint_sharded(void) {
  char *dir = wt_test_tmpdir();
  write_shard(dir, SHARD2, (const char *const[]){"z.first", "lm_head", NULL});
  write_shard(dir, SHARD1, (const char *const[]){"embed", "a.norm", NULL});
  char *index = join(dir, "model.safetensors.index.json");
  write_text(index,
             "{\"metadata\": {\"total_size\": 32, \"format\": \"pt\"},\n"
             " \"weight_map\": {\"a.norm\": \"" SHARD1
             "\",\n"
             "   \"embed\": \"" SHARD1 "\", \"lm_head\": \"" SHARD2
             "\",\n"
             "   \"z.first\": \"" SHARD2 "\"}}\n");
  wt_checkpoint *c = NULL;
  WT_ASSERT_OK(wt_checkpoint_open(index, &c));
  /* Shard by shard in file-name order, each in layout order. */
  const char *order[] = {"embed", "a.norm", "z.first", "lm_head"};
  CU_ASSERT_EQUAL_FATAL(wt_checkpoint_count(c), 4);
  for (size_t i = 0; i < 4; i++) {
    CU_ASSERT_STRING_EQUAL(wt_checkpoint_at(c, i)->meta.name, order[i]);
    CU_ASSERT_PTR_EQUAL(wt_checkpoint_find(c, order[i]),
                        wt_checkpoint_at(c, i));
  }
  CU_ASSERT_EQUAL(wt_checkpoint_total_bytes(c), 32);
  CU_ASSERT_EQUAL(((const float *)wt_checkpoint_find(c, "lm_head")->data)[1],
                  1.5f);
  CU_ASSERT_PTR_NULL(wt_checkpoint_find(c, "nope"));
  wt_checkpoint_close(c);

  /* Shards in a subfolder, and an index with nothing in it. */
  char *sub = join(dir, "sub");
  CU_ASSERT_EQUAL(mkdir(sub, 0755), 0);
  write_shard(sub, "only.safetensors", (const char *const[]){"w", NULL});
  write_text(index, "{\"weight_map\": {\"w\": \"sub/only.safetensors\"}}");
  WT_ASSERT_OK(wt_checkpoint_open(index, &c));
  CU_ASSERT_EQUAL(wt_checkpoint_count(c), 1);
  wt_checkpoint_close(c);
  write_text(index, "{\"metadata\": {}, \"weight_map\": {}}");
  WT_ASSERT_OK(wt_checkpoint_open(index, &c));
  CU_ASSERT_EQUAL(wt_checkpoint_count(c), 0);
  CU_ASSERT_EQUAL(wt_checkpoint_total_bytes(c), 0);
  wt_checkpoint_close(c);

  free(sub);
  free(index);
  wt_test_rmtree(dir);
  free(dir);
}

#define CORRUPT_INDEX                                                  \
  "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"a.norm\": \"" SHARD1 \
  "\", \"x\": \"corrupt.safetensors\"}}"

static const struct {
  const char *what;
  const char *index;
  wt_code code;
  const char *needle;
} bad_indexes[] = {
    {"shard missing",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"a.norm\": \"" SHARD1
     "\", \"x\": \"model-00003-of-00003.safetensors\"}}",
     WT_NOT_FOUND, "shard 'model-00003-of-00003.safetensors'"},
    {"tensor in index, not in its shard",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"a.norm\": \"" SHARD1
     "\", \"ghost\": \"" SHARD1 "\"}}",
     WT_INVALID_ARGUMENT,
     "weight_map puts tensor 'ghost' in shard '" SHARD1
     "', which does not contain it"},
    {"tensor in shard, not in index",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\"}}", WT_INVALID_ARGUMENT,
     "tensor 'a.norm' in shard '" SHARD1 "' is not in the index's weight_map"},
    {"tensor in the wrong shard",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"a.norm\": \"" SHARD1
     "\", \"z.first\": \"" SHARD1 "\", \"lm_head\": \"" SHARD2 "\"}}",
     WT_INVALID_ARGUMENT,
     "weight_map puts tensor 'z.first' in shard '" SHARD1
     "', but it is in shard '" SHARD2 "'"},
    {"name in two shards",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"a.norm\": \"" SHARD1
     "\", \"dup\": \"dup.safetensors\"}}",
     WT_INVALID_ARGUMENT,
     "tensor 'embed' is in two shards: 'dup.safetensors' and '" SHARD1 "'"},
    {"not JSON", "{\"weight_map\": ", WT_INVALID_ARGUMENT,
     "checkpoint index is not valid JSON"},
    {"no weight_map", "{\"metadata\": {}}", WT_INVALID_ARGUMENT,
     "'weight_map' object"},
    {"weight_map not an object", "{\"weight_map\": []}", WT_INVALID_ARGUMENT,
     "'weight_map' object"},
    {"shard not a string", "{\"weight_map\": {\"embed\": 1}}",
     WT_INVALID_ARGUMENT,
     "weight_map['embed'] is an integer, expected a shard file name"},
    {"absolute shard path", "{\"weight_map\": {\"embed\": \"/etc/passwd\"}}",
     WT_INVALID_ARGUMENT,
     "shard file '/etc/passwd' must be a relative path inside the index's "
     "folder"},
    {"shard path escapes", "{\"weight_map\": {\"embed\": \"../" SHARD1 "\"}}",
     WT_INVALID_ARGUMENT, "must be a relative path"},
    {"duplicate key in index",
     "{\"weight_map\": {\"embed\": \"" SHARD1 "\", \"embed\": \"" SHARD1 "\"}}",
     WT_INVALID_ARGUMENT, "duplicate"},
    {"corrupt shard", CORRUPT_INDEX, WT_INVALID_ARGUMENT,
     "shard 'corrupt.safetensors': "},
};

static void test_checkpoint_errors(void) {
  char *dir = wt_test_tmpdir();
  write_shard(dir, SHARD1, (const char *const[]){"embed", "a.norm", NULL});
  write_shard(dir, SHARD2, (const char *const[]){"z.first", "lm_head", NULL});
  write_shard(dir, "dup.safetensors", (const char *const[]){"embed", NULL});
  char *corrupt = join(dir, "corrupt.safetensors");
  write_bytes(corrupt, "\x10\0\0\0\0\0\0\0{}", 10);
  char *index = join(dir, "model.safetensors.index.json");
  char prefix[512];
  snprintf(prefix, sizeof(prefix), "%s: ", index);
  for (size_t i = 0; i < sizeof(bad_indexes) / sizeof(bad_indexes[0]); i++) {
    write_text(index, bad_indexes[i].index);
    wt_checkpoint *c = NULL;
    wt_status *st = wt_checkpoint_open(index, &c);
    const char *msg = wt_status_message(st);
    int ok = st != NULL && c == NULL &&
             wt_status_code(st) == bad_indexes[i].code &&
             strstr(msg, prefix) == msg &&
             strstr(msg, bad_indexes[i].needle) != NULL;
    if (!ok)
      fprintf(stderr, "\n  case '%s': want %s with '%s', got %s: %s\n",
              bad_indexes[i].what, wt_code_name(bad_indexes[i].code),
              bad_indexes[i].needle, wt_code_name(wt_status_code(st)), msg);
    CU_ASSERT(ok);
    wt_status_free(st);
  }
  /* The corrupt shard's own error comes through, naming its path. */
  write_text(index, CORRUPT_INDEX);
  wt_checkpoint *c = NULL;
  char want_buf[512];
  const char *want = want_buf; /* a pointer: WT_ASSERT_ERR tests it */
  snprintf(want_buf, sizeof(want_buf),
           "%s: truncated: header length 16 runs past the end", corrupt);
  WT_ASSERT_ERR(wt_checkpoint_open(index, &c), WT_INVALID_ARGUMENT, want);

  /* A shard that is a symlink out of the index's folder (to a valid
   * safetensors file elsewhere) is refused naming it; one to a file inside
   * the folder is followed. */
  char *outside = wt_test_tmpdir();
  write_shard(outside, "evil.safetensors", (const char *const[]){"x", NULL});
  char *evil = join(outside, "evil.safetensors");
  char *link = join(dir, "corrupt.safetensors");
  unlink(link);
  CU_ASSERT_EQUAL_FATAL(symlink(evil, link), 0);
  snprintf(want_buf, sizeof(want_buf),
           "shard 'corrupt.safetensors' resolves to '");
  WT_ASSERT_ERR(wt_checkpoint_open(index, &c), WT_INVALID_ARGUMENT, want);
  WT_ASSERT_ERR(wt_checkpoint_open(index, &c), WT_INVALID_ARGUMENT,
                "outside the index's folder");
  unlink(link);
  write_shard(dir, "inside.safetensors", (const char *const[]){"x", NULL});
  CU_ASSERT_EQUAL_FATAL(symlink("inside.safetensors", link), 0);
  WT_ASSERT_OK(wt_checkpoint_open(index, &c));
  wt_checkpoint_close(c);
  c = NULL;
  free(link);
  free(evil);
  wt_test_rmtree(outside);
  free(outside);

  unlink(index);
  snprintf(want_buf, sizeof(want_buf),
           "checkpoint index '%s': cannot open: No such file", index);
  WT_ASSERT_ERR(wt_checkpoint_open(index, &c), WT_NOT_FOUND, want);
  /* A FIFO as the index: refused at once. */
  CU_ASSERT_FATAL(mkfifo(index, 0600) == 0);
  WT_ASSERT_ERR(wt_checkpoint_open(index, &c), WT_INVALID_ARGUMENT,
                "a FIFO, not a regular file");
  unlink(index);

  free(corrupt);
  free(index);
  wt_test_rmtree(dir);
  free(dir);
}

void wt_test_suite_safetensors(void) {
  CU_pSuite s = CU_add_suite("safetensors", NULL, NULL);
  CU_add_test(s, "read_file", test_read_file);
  CU_add_test(s, "read_empty_scalar_zero_size",
              test_read_empty_scalar_zero_size);
  CU_add_test(s, "bad_headers", test_bad_headers);
  CU_add_test(s, "bad_bytes", test_bad_bytes);
  CU_add_test(s, "bad_files", test_bad_files);
  CU_add_test(s, "write_read", test_write_read);
  CU_add_test(s, "write_errors", test_write_errors);
  CU_add_test(s, "python_writes_c_reads", test_python_writes_c_reads);
  CU_add_test(s, "c_writes_python_reads", test_c_writes_python_reads);
  CU_add_test(s, "checkpoint_single", test_checkpoint_single);
  CU_add_test(s, "checkpoint_sharded", test_checkpoint_sharded);
  CU_add_test(s, "checkpoint_errors", test_checkpoint_errors);
}
