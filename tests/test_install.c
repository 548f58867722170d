/* test_install.c: `cmake --install` gives a tree a user builds against:
 * the example program (tests/install/example.c) is built against an
 * installed tree both ways, with pkg-config (wt-client) and with CMake's
 * find_package(wt), links the installed libraries (not the build tree's),
 * and runs three verified rounds against the wt-server of the same
 * tree. */

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/wt_proc.h"
#include "wt_test.h"

/* Runs `cmd` with /bin/sh, its output into DIR/TAG.log; its exit code,
 * printing the log when it is not 0. Not inlined: gcc 12 at -O3 takes what
 * it returns in *output for a pointer to its own local (a false
 * -Wdangling-pointer in a Release build). */
__attribute__((noinline)) static int sh(const char *dir, const char *tag,
                                        const char *cmd, char **output) {
  char log[PATH_MAX];
  snprintf(log, sizeof(log), "%s/%s.log", dir, tag);
  const char *const argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out = NULL;
  int code = wt_proc_run(argv, log, 240000, &out);
  if (code != 0)
    fprintf(stderr, "\n%s: exit %d\n%s\n", cmd, code, out ? out : "");
  if (output)
    *output = out;
  else
    free(out);
  return code;
}

static void test_install_tree(void) {
  if (strcmp(WT_TEST_BUILD_KIND, "normal") != 0) {
    wt_test_skip("an installed tree",
                 "built against only in the normal build (this is "
                 "the " WT_TEST_BUILD_KIND
                 " build, whose libraries need its sanitizer runtime)");
    return;
  }
  char *dir = wt_test_tmpdir();
  CU_ASSERT_FATAL(dir != NULL);
  char cmd[4 * PATH_MAX], prefix[PATH_MAX];
  snprintf(prefix, sizeof(prefix), "%s/prefix", dir);
  snprintf(cmd, sizeof(cmd), "cmake --install '%s' --prefix '%s'",
           wt_test_binary_dir(), prefix);
  CU_ASSERT_EQUAL_FATAL(sh(dir, "install", cmd, NULL), 0);

  /* pkg-config, warnings as errors; the rpath it gives is the prefix's. */
  snprintf(cmd, sizeof(cmd),
           "PKG_CONFIG_PATH='%s/lib/pkgconfig' && export PKG_CONFIG_PATH && "
           "cc -std=c11 -Wall -Wextra -Werror '%s/install/example.c' "
           "$(pkg-config --cflags --libs wt-client) -o '%s/example-pc' && "
           "test \"$(readlink -f \"$(ldd '%s/example-pc' | "
           "awk '/libwt_client/ {print $3}')\")\" = "
           "\"$(readlink -f '%s/lib/libwt_client.so')\"",
           prefix, wt_test_source_dir(), dir, dir, prefix);
  CU_ASSERT_EQUAL(sh(dir, "pkg-config", cmd, NULL), 0);

  /* Versioned SONAMEs: each library's is libwt_X.so.MAJOR.MINOR, what a
   * program records as NEEDED (the example above links libwt_client). */
  snprintf(cmd, sizeof(cmd),
           "for l in proto base common server client consumer; do "
           "readelf -d '%s/lib/libwt_'$l.so | "
           "grep -qF \"[libwt_$l.so.%s]\" || "
           "{ echo \"libwt_$l: no SONAME libwt_$l.so.%s\"; exit 1; }; done && "
           "readelf -d '%s/example-pc' | grep -qF '[libwt_client.so.%s]'",
           prefix, WT_TEST_SOVERSION, WT_TEST_SOVERSION, dir,
           WT_TEST_SOVERSION);
  CU_ASSERT_EQUAL(sh(dir, "soname", cmd, NULL), 0);

  /* The consumer's example (docs/export.md): wt-consumer, and no gRPC. */
  snprintf(cmd, sizeof(cmd),
           "PKG_CONFIG_PATH='%s/lib/pkgconfig' && export PKG_CONFIG_PATH && "
           "cc -std=c11 -Wall -Wextra -Werror "
           "'%s/../consumer/examples/list_tensors.c' "
           "$(pkg-config --cflags --libs wt-consumer) -o '%s/list-tensors' && "
           "! ldd '%s/list-tensors' | grep -q grpc",
           prefix, wt_test_source_dir(), dir, dir);
  CU_ASSERT_EQUAL(sh(dir, "pkg-config-consumer", cmd, NULL), 0);

  /* CMake's find_package(wt) and the imported target wt::client. */
  snprintf(cmd, sizeof(cmd),
           "cmake -S '%s/install' -B '%s/cmake-build' "
           "-DCMAKE_PREFIX_PATH='%s' -DCMAKE_C_FLAGS='-Wall -Werror' "
           "> /dev/null && cmake --build '%s/cmake-build' && "
           "test \"$(readlink -f \"$(ldd '%s/cmake-build/example' | "
           "awk '/libwt_client/ {print $3}')\")\" = "
           "\"$(readlink -f '%s/lib/libwt_client.so')\"",
           wt_test_source_dir(), dir, prefix, dir, dir, prefix);
  CU_ASSERT_EQUAL(sh(dir, "cmake", cmd, NULL), 0);

  /* A tree without the CUDA module (as a build without CUDA installs):
   * wt-ctl info says so in one line, the path once. */
  char module[PATH_MAX + 32];
  snprintf(module, sizeof(module), "%s/lib/libwt_cuda.so", prefix);
  bool had_cuda = access(module, F_OK) == 0;
  if (had_cuda) CU_ASSERT_EQUAL(unlink(module), 0);

  /* Both run rounds against the installed wt-server. */
  char bin[PATH_MAX + 32];
  snprintf(bin, sizeof(bin), "%s/bin/wt-server", prefix);
  char sock[PATH_MAX + 32];
  snprintf(sock, sizeof(sock), "%s/export.sock", dir);
  const char *const extra[] = {"--model", "synthetic:tiny", "--memory",
                               "shared",  "--export",       sock,
                               NULL};
  wt_proc_server srv;
  CU_ASSERT_FATAL(wt_proc_server_start_bin(&srv, bin, dir, "server", extra));
  static const struct {
    const char *exe, *backend;
  } runs[] = {
      {"example-pc", "grpc"},
      {"cmake-build/example", "grpc"},
#ifdef WT_WITH_UCX
      {"cmake-build/example", "ucx"},
#endif
  };
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    char *out = NULL, tag[32];
    snprintf(tag, sizeof(tag), "run-%zu", i);
    snprintf(cmd, sizeof(cmd), "'%s/%s' '%s' %s", dir, runs[i].exe, srv.addr,
             runs[i].backend);
    CU_ASSERT_EQUAL(sh(dir, tag, cmd, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "7 of 7 digests verified"));
    if (out) printf("\n  %s: %s", runs[i].exe, out);
    free(out);
  }
  {
    char *out = NULL;
    snprintf(cmd, sizeof(cmd), "'%s/list-tensors' '%s'", dir, sock);
    CU_ASSERT_EQUAL(sh(dir, "list-tensors", cmd, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, ": 7 tensors"));
    if (out) printf("\n  list-tensors: %.*s", (int)strcspn(out, "\n") + 1, out);
    free(out);
  }
  if (had_cuda) {
    char *out = NULL;
    snprintf(cmd, sizeof(cmd), "'%s/bin/wt-ctl' --server %s info", prefix,
             srv.addr);
    CU_ASSERT_EQUAL(sh(dir, "ctl-info", cmd, &out), 0);
    const char *line = out ? strstr(out, "libwt_cuda.so was not built") : NULL;
    CU_ASSERT_PTR_NOT_NULL(line);
    if (line != NULL) {
      const char *first = strstr(out, "/lib/libwt_cuda.so");
      const char *end = strchr(line, '\n');
      /* The path once on that line, not dlopen's words repeating it. */
      CU_ASSERT_PTR_NOT_NULL(first);
      const char *again =
          first ? strstr(first + strlen("/lib/libwt_cuda.so"), "libwt_cuda.so")
                : NULL;
      CU_ASSERT(first == NULL || end == NULL || again == NULL || again > end);
      if (end)
        printf("\n  without the CUDA module: %.*s", (int)(end - line), line);
    }
    free(out);
  }
  CU_ASSERT_EQUAL(wt_proc_server_stop(&srv, 10000, NULL), 0);
  wt_proc_kill_all();
  wt_test_rmtree(dir);
  free(dir);
}

void wt_test_suite_install(void);
void wt_test_suite_install(void) {
  /* Its one test has nothing to run in a sanitized build: the suite says it
   * skipped (the runner exits 77 when it was the one asked for, which
   * ctest reports as a skip). */
  if (strcmp(WT_TEST_BUILD_KIND, "normal") != 0) {
    wt_test_suite_skipped(
        "an installed tree is built against only in the normal build (this "
        "is the " WT_TEST_BUILD_KIND
        " build, whose libraries need its sanitizer runtime)");
    return;
  }
  CU_pSuite s = CU_add_suite("install", NULL, NULL);
  CU_add_test(s, "a program built against the installed tree runs rounds",
              test_install_tree);
}
