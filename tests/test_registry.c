/* test_registry.c: the backend registry (common/src/registry.c), including
 * lazy loading of tests/fixtures/registry_plugin.c, built as a module. */

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixture.h"
#include "wt/engine.h"
#include "wt/pb.h"
#include "wt/registry.h"
#include "wt/source.h"
#include "wt/trainer.h"
#include "wt_test.h"

#ifndef WT_TEST_PLUGIN_PATH
#error "tests/CMakeLists.txt passes the plugin's path as WT_TEST_PLUGIN_PATH"
#endif

/* Same layout and ABI version as tests/fixtures/registry_plugin.c. */
#define PLUGIN_ABI 7u
typedef struct plugin_ops {
  wt_ops_header hdr;
  int (*answer)(void);
} plugin_ops;

/* Stand-ins for backend tables registered directly. */
typedef struct fake_ops {
  wt_ops_header hdr;
  int id;
} fake_ops;

#define ABI 1u
static const fake_ops grpc_ops = {{ABI, "grpc"}, 1};
static const fake_ops ucx_ops = {{ABI, "ucx"}, 2};
static const fake_ops nccl_ops = {{ABI, "nccl"}, 3};

static wt_registry *new_registry(const char *kind, uint32_t abi) {
  wt_registry *reg = NULL;
  WT_ASSERT_OK(wt_registry_new(kind, abi, &reg));
  CU_ASSERT_PTR_NOT_NULL_FATAL(reg);
  return reg;
}

/* True when the plugin is mapped into the process right now. */
static int plugin_is_loaded(void) {
  void *h = dlopen(WT_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) return 0;
  dlclose(h);
  return 1;
}

static void test_direct(void) {
  wt_registry *reg = new_registry("worker engine", ABI);
  CU_ASSERT_STRING_EQUAL(wt_registry_kind(reg), "worker engine");
  /* Registered out of order: listings come back sorted. */
  WT_ASSERT_OK(wt_registry_register(reg, "ucx", &ucx_ops));
  WT_ASSERT_OK(wt_registry_register(reg, "grpc", &grpc_ops));

  const void *ops = NULL;
  WT_ASSERT_OK(wt_registry_lookup(reg, "grpc", &ops));
  CU_ASSERT_PTR_EQUAL(ops, &grpc_ops);
  WT_ASSERT_OK(wt_registry_lookup(reg, "ucx", &ops));
  CU_ASSERT_PTR_EQUAL(ops, &ucx_ops);
  CU_ASSERT_EQUAL(((const fake_ops *)ops)->id, 2);

  wt_registry_entry *list = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 2);
  CU_ASSERT_STRING_EQUAL(list[0].name, "grpc");
  CU_ASSERT_STRING_EQUAL(list[1].name, "ucx");
  CU_ASSERT_FALSE(list[0].lazy);
  CU_ASSERT_TRUE(list[0].loaded);
  CU_ASSERT_PTR_NULL(list[0].shared_object);
  CU_ASSERT_PTR_NULL(list[0].symbol);
  free(list);

  char *joined = NULL;
  WT_ASSERT_OK(wt_registry_names_joined(reg, &joined));
  CU_ASSERT_STRING_EQUAL(joined, "grpc, ucx");
  free(joined);
  wt_registry_destroy(reg);
}

static void test_empty(void) {
  wt_registry *reg = new_registry("trainer engine", ABI);
  wt_registry_entry *list = (wt_registry_entry *)&list; /* must be reset */
  size_t n = 99;
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_PTR_NULL(list);
  CU_ASSERT_EQUAL(n, 0);
  char *joined = NULL;
  WT_ASSERT_OK(wt_registry_names_joined(reg, &joined));
  CU_ASSERT_STRING_EQUAL(joined, "");
  free(joined);
  const void *ops = &ops;
  WT_ASSERT_ERR(wt_registry_lookup(reg, "grpc", &ops), WT_NOT_FOUND,
                "unknown trainer engine backend 'grpc'; registered: (none)");
  CU_ASSERT_PTR_NULL(ops);
  wt_registry_destroy(reg);
  wt_registry_destroy(NULL);
}

static void test_duplicate(void) {
  wt_registry *reg = new_registry("worker engine", ABI);
  WT_ASSERT_OK(wt_registry_register(reg, "grpc", &grpc_ops));
  WT_ASSERT_ERR(wt_registry_register(reg, "grpc", &grpc_ops), WT_ALREADY_EXISTS,
                "worker engine backend 'grpc' is already registered");
  WT_ASSERT_ERR(
      wt_registry_register_lazy(reg, "grpc", WT_TEST_PLUGIN_PATH, "x"),
      WT_ALREADY_EXISTS, "worker engine backend 'grpc' is already registered");
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "nccl", "libwt_nccl_engine.so",
                                         "wt_nccl_engine_ops"));
  WT_ASSERT_ERR(wt_registry_register(reg, "nccl", &nccl_ops), WT_ALREADY_EXISTS,
                "worker engine backend 'nccl' is already registered");
  WT_ASSERT_ERR(wt_registry_register_lazy(reg, "nccl", "other.so", "sym"),
                WT_ALREADY_EXISTS, "backend 'nccl' is already registered");

  /* The first registration is what stays. */
  const void *ops = NULL;
  WT_ASSERT_OK(wt_registry_lookup(reg, "grpc", &ops));
  CU_ASSERT_PTR_EQUAL(ops, &grpc_ops);
  wt_registry_entry *list = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 2);
  CU_ASSERT_STRING_EQUAL(list[1].name, "nccl");
  CU_ASSERT_STRING_EQUAL(list[1].shared_object, "libwt_nccl_engine.so");
  free(list);
  wt_registry_destroy(reg);
}

static void test_unknown_lists_names(void) {
  wt_registry *reg = new_registry("worker engine", ABI);
  WT_ASSERT_OK(wt_registry_register(reg, "ucx", &ucx_ops));
  WT_ASSERT_OK(wt_registry_register(reg, "grpc", &grpc_ops));
  const void *ops = NULL;
  WT_ASSERT_ERR(wt_registry_lookup(reg, "foo", &ops), WT_NOT_FOUND,
                "unknown worker engine backend 'foo'; registered: grpc, ucx");
  /* Lazy names count as registered even before they are loaded. */
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "nccl", "libwt_nccl_engine.so",
                                         "wt_nccl_engine_ops"));
  WT_ASSERT_ERR(wt_registry_lookup(reg, "GRPC", &ops), WT_NOT_FOUND,
                "unknown worker engine backend 'GRPC'; registered: grpc, "
                "nccl, ucx");
  CU_ASSERT_PTR_NULL(ops);
  wt_registry_destroy(reg);
}

static void test_abi_mismatch(void) {
  wt_registry *reg = new_registry("worker engine", 3);
  WT_ASSERT_ERR(wt_registry_register(reg, "grpc", &grpc_ops),
                WT_FAILED_PRECONDITION,
                "worker engine backend 'grpc': ops table has ABI version 1, "
                "this build expects 3");
  /* A refused table is not registered. */
  const void *ops = NULL;
  WT_ASSERT_ERR(wt_registry_lookup(reg, "grpc", &ops), WT_NOT_FOUND,
                "registered: (none)");
  wt_registry_destroy(reg);
}

static void test_bad_arguments(void) {
  wt_registry *reg = NULL;
  WT_ASSERT_ERR(wt_registry_new("", ABI, &reg), WT_INVALID_ARGUMENT, "kind");
  WT_ASSERT_ERR(wt_registry_new("x", ABI, NULL), WT_INVALID_ARGUMENT, "out");
  reg = new_registry("worker engine", ABI);
  WT_ASSERT_ERR(wt_registry_register(reg, "", &grpc_ops), WT_INVALID_ARGUMENT,
                "backend name is empty");
  WT_ASSERT_ERR(wt_registry_register(reg, "grpc", NULL), WT_INVALID_ARGUMENT,
                "'grpc': ops table is NULL");
  /* A table registered under a name other than its own is a mix-up. */
  WT_ASSERT_ERR(wt_registry_register(reg, "ucx", &grpc_ops),
                WT_INVALID_ARGUMENT,
                "worker engine backend 'ucx': ops table names itself 'grpc'");
  WT_ASSERT_ERR(wt_registry_register_lazy(reg, "nccl", "", "sym"),
                WT_INVALID_ARGUMENT, "'nccl': shared object path is empty");
  WT_ASSERT_ERR(wt_registry_register_lazy(reg, "nccl", "x.so", NULL),
                WT_INVALID_ARGUMENT, "'nccl': symbol name is empty");
  WT_ASSERT_ERR(wt_registry_lookup(reg, NULL, &(const void *){NULL}),
                WT_INVALID_ARGUMENT, "backend name is empty");
  WT_ASSERT_ERR(wt_registry_register(NULL, "grpc", &grpc_ops),
                WT_INVALID_ARGUMENT, "'reg'");
  wt_registry_destroy(reg);
}

static void test_lazy_load(void) {
  wt_registry *reg = new_registry("worker engine", PLUGIN_ABI);
  CU_ASSERT_FALSE(plugin_is_loaded());
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "plugin", WT_TEST_PLUGIN_PATH,
                                         "wt_test_plugin_ops_v7"));
  /* Registering costs nothing: the object is not mapped yet. */
  CU_ASSERT_FALSE(plugin_is_loaded());
  wt_registry_entry *list = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_TRUE(list[0].lazy);
  CU_ASSERT_FALSE(list[0].loaded);
  CU_ASSERT_STRING_EQUAL(list[0].shared_object, WT_TEST_PLUGIN_PATH);
  CU_ASSERT_STRING_EQUAL(list[0].symbol, "wt_test_plugin_ops_v7");
  free(list);

  const void *first = NULL, *second = NULL;
  WT_ASSERT_OK(wt_registry_lookup(reg, "plugin", &first));
  CU_ASSERT_PTR_NOT_NULL_FATAL(first);
  CU_ASSERT_TRUE(plugin_is_loaded());
  const plugin_ops *p = first;
  CU_ASSERT_EQUAL(p->hdr.abi_version, PLUGIN_ABI);
  CU_ASSERT_STRING_EQUAL(p->hdr.name, "plugin");
  CU_ASSERT_EQUAL(p->answer(), 42);

  WT_ASSERT_OK(wt_registry_lookup(reg, "plugin", &second));
  CU_ASSERT_PTR_EQUAL(second, first);
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_TRUE(list[0].lazy);
  CU_ASSERT_TRUE(list[0].loaded);
  free(list);

  /* The registry held the only reference: destroying it unloads. */
  wt_registry_destroy(reg);
  CU_ASSERT_FALSE(plugin_is_loaded());
}

static void test_lazy_missing_object(void) {
  wt_registry *reg = new_registry("trainer engine", PLUGIN_ABI);
  const char *path = "/nonexistent/libwt_missing_engine.so";
  WT_ASSERT_OK(
      wt_registry_register_lazy(reg, "nccl", path, "wt_nccl_trainer_ops"));
  const void *ops = &ops;
  /* Twice: a failed load is reported again, not cached as success. */
  for (int i = 0; i < 2; i++) {
    wt_status *st = wt_registry_lookup(reg, "nccl", &ops);
    CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
    const char *msg = wt_status_message(st);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(msg,
               "trainer engine backend 'nccl': cannot load shared object "
               "'/nonexistent/libwt_missing_engine.so' (for symbol "
               "'wt_nccl_trainer_ops')"));
    /* dlerror()'s own words follow. */
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "No such file or directory"));
    wt_status_free(st);
    CU_ASSERT_PTR_NULL(ops);
  }
  wt_registry_entry *list = NULL;
  size_t n = 0;
  WT_ASSERT_OK(wt_registry_names(reg, &list, &n));
  CU_ASSERT_EQUAL_FATAL(n, 1);
  CU_ASSERT_FALSE(list[0].loaded);
  free(list);
  wt_registry_destroy(reg);
}

static void test_lazy_missing_symbol(void) {
  wt_registry *reg = new_registry("worker engine", PLUGIN_ABI);
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "plugin", WT_TEST_PLUGIN_PATH,
                                         "wt_no_such_ops"));
  const void *ops = NULL;
  wt_status *st = wt_registry_lookup(reg, "plugin", &ops);
  CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
  const char *msg = wt_status_message(st);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "worker engine backend 'plugin'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, WT_TEST_PLUGIN_PATH));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "has no symbol 'wt_no_such_ops'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "undefined symbol: wt_no_such_ops"));
  wt_status_free(st);
  CU_ASSERT_PTR_NULL(ops);
  /* A failed load does not keep the object mapped. */
  CU_ASSERT_FALSE(plugin_is_loaded());
  wt_registry_destroy(reg);
}

static void test_lazy_abi_mismatch(void) {
  wt_registry *reg = new_registry("worker engine", PLUGIN_ABI);
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "plugin", WT_TEST_PLUGIN_PATH,
                                         "wt_test_plugin_ops_v99"));
  const void *ops = NULL;
  WT_ASSERT_ERR(wt_registry_lookup(reg, "plugin", &ops), WT_FAILED_PRECONDITION,
                "worker engine backend 'plugin' (symbol "
                "'wt_test_plugin_ops_v99' in " WT_TEST_PLUGIN_PATH
                "): ops table has ABI version 99, this build expects 7");
  CU_ASSERT_PTR_NULL(ops);
  CU_ASSERT_FALSE(plugin_is_loaded());

  /* Right ABI, wrong backend's table. */
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "mixup", WT_TEST_PLUGIN_PATH,
                                         "wt_test_plugin_ops_misnamed"));
  WT_ASSERT_ERR(wt_registry_lookup(reg, "mixup", &ops), WT_INVALID_ARGUMENT,
                "ops table names itself 'other'");
  wt_registry_destroy(reg);
}

enum { NTHREADS = 8 };

typedef struct lookup_arg {
  wt_registry *reg;
  const void *ops;
  wt_status *st;
} lookup_arg;

static void *lookup_thread(void *p) {
  lookup_arg *a = p;
  a->st = wt_registry_lookup(a->reg, "plugin", &a->ops);
  return NULL;
}

/* Concurrent first lookups load the object once and agree on the table. */
static void test_concurrent_lookup(void) {
  wt_registry *reg = new_registry("worker engine", PLUGIN_ABI);
  WT_ASSERT_OK(wt_registry_register_lazy(reg, "plugin", WT_TEST_PLUGIN_PATH,
                                         "wt_test_plugin_ops_v7"));
  lookup_arg args[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i] = (lookup_arg){.reg = reg};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, lookup_thread, &args[i]),
                          0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    WT_ASSERT_OK(args[i].st);
    CU_ASSERT_PTR_NOT_NULL(args[i].ops);
    CU_ASSERT_PTR_EQUAL(args[i].ops, args[0].ops);
  }
  wt_registry_destroy(reg);
  CU_ASSERT_FALSE(plugin_is_loaded());
}

static void register_memq_trainer(void) {
  wt_status *st = wt_trainer_register_lazy("memq", WT_TEST_MEMQ_PATH,
                                           "wt_memq_trainer_ops");
  CU_ASSERT_PTR_NULL(st);
  wt_status_free(st);
}

/* Adding a backend (tests/fixtures/memq): a worker file and a trainer file
 * in a module, one lazy registration line on each side; the servers load
 * it on the first init, the client on the first lookup, and rounds work
 * like any backend's, on two servers of 1 and 2 workers. */
static void test_added_backend(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_memq_trainer);
  wt_registry *engines = NULL;
  WT_ASSERT_OK(
      wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &engines));
  WT_ASSERT_OK(wt_engine_register_builtins(engines));
  WT_ASSERT_OK(wt_registry_register_lazy(engines, "memq", WT_TEST_MEMQ_PATH,
                                         "wt_memq_engine_ops"));
  wtt_servers s;
  const char *models[] = {"synthetic:tiny", "synthetic:tiny"};
  const uint32_t workers[] = {1, 2};
  wtt_servers_start(&s, 2, models, workers, WT_STAGING_SHADOW, engines);
  wt_sync_client *c = wtt_client_of(&s);
  /* Not loaded before anyone asks for it. */
  Wt__V1__ServerInfo *info = NULL;
  WT_ASSERT_OK(wt_sync_client_server_info(c, 0, &info));
  for (size_t i = 0; i < info->n_backend_info; i++)
    if (strcmp(info->backend_info[i]->name, "memq") == 0)
      CU_ASSERT_FALSE(info->backend_info[i]->loaded);
  wt_pb_free(&info->base);

  wt_backend_option opts[] = {{"bucket_size", "1K"}};
  Wt__V1__WeightTransferInitInfo *init = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("memq", opts, 1, &init));
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 11, &src));
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, init, src, &t));
  for (uint64_t round = 0; round < 2; round++) {
    WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 11 + round));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, round ? "memq-2" : "memq-1"));
    wtt_assert_servers_hold(c, src, WT_HASH_SHA256);
  }
  WT_ASSERT_OK(wt_sync_client_server_info(c, 1, &info));
  bool seen = false;
  for (size_t i = 0; i < info->n_backend_info; i++) {
    const Wt__V1__BackendInfo *b = info->backend_info[i];
    if (strcmp(b->name, "memq") != 0) continue;
    seen = true;
    CU_ASSERT_TRUE(b->loaded);
    CU_ASSERT_FALSE(b->cross_host);
    CU_ASSERT_TRUE(b->survives_abort);
  }
  CU_ASSERT(seen);
  CU_ASSERT_STRING_EQUAL(info->workers[1]->backend, "memq");
  wt_pb_free(&info->base);
  wt_pb_free(&init->base);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_servers_stop(&s);
  wt_registry_destroy(engines);
}

void wt_test_suite_registry(void) {
  CU_pSuite s = CU_add_suite("registry", NULL, NULL);
  CU_add_test(s, "direct registration and lookup", test_direct);
  CU_add_test(s, "empty registry", test_empty);
  CU_add_test(s, "duplicate name is ALREADY_EXISTS", test_duplicate);
  CU_add_test(s, "unknown name lists registered names",
              test_unknown_lists_names);
  CU_add_test(s, "ABI version mismatch", test_abi_mismatch);
  CU_add_test(s, "bad arguments", test_bad_arguments);
  CU_add_test(s, "lazy: loads on first lookup, once", test_lazy_load);
  CU_add_test(s, "lazy: missing shared object", test_lazy_missing_object);
  CU_add_test(s, "lazy: missing symbol", test_lazy_missing_symbol);
  CU_add_test(s, "lazy: ABI mismatch and wrong table", test_lazy_abi_mismatch);
  CU_add_test(s, "lazy: concurrent first lookups", test_concurrent_lookup);
  CU_add_test(s, "an added backend (memq module) on both sides",
              test_added_backend);
}
