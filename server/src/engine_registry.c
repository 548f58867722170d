/* engine_registry.c: placeholder, being written. */
