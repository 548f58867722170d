/* packing.c: placeholder, being written. */
