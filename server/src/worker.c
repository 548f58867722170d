/* worker.c: placeholder, being written. */
