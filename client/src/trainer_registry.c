/* trainer_registry.c: placeholder, being written. */
