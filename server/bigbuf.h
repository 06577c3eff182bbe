/*
 * bigbuf.h - the buffers a request's bytes live in (its body, its y), from a bounded cache of
 * mappings.
 *
 * Buffers of BIGBUF_MIN bytes and more are their own mappings, as glibc's malloc would make them
 * above its mmap threshold, so that they go back to the system when freed; but a freed one is
 * kept in a cache (up to a cap, by size class) for the next request of about its size, whose
 * pages are then already there. Without the cache every such request paid a page fault per
 * 4 KiB, twice (body and answer), plus an munmap that interrupts every core running one of the
 * daemon's threads. The cache is emptied when the daemon is idle (nd_bigbuf_trim), so the RSS at
 * rest is what it was. Smaller buffers come from malloc. Every function is thread-safe.
 */
#ifndef ND_BIGBUF_H
#define ND_BIGBUF_H

#include <stddef.h>

/* Sizes from here up are mappings of their own. */
#define BIGBUF_MIN ((size_t)128 << 10)

/* Sets the cache's cap in bytes (0: nothing is kept; the default until this is called). */
void nd_bigbuf_set_cap(size_t cap);

/* n bytes (16-byte aligned; 64-byte aligned from BIGBUF_MIN up), or NULL. */
void *nd_bigbuf_alloc(size_t n);

/* realloc's contract, for buffers from nd_bigbuf_alloc (p may be NULL). */
void *nd_bigbuf_realloc(void *p, size_t n);

/* Frees a buffer from nd_bigbuf_alloc/realloc (NULL is fine): into the cache while it has room.
 * Its type is libmicrohttpd's free callback's, so a response can hand its buffer back here. */
void nd_bigbuf_free(void *p);

/* Gives every cached buffer back to the system. */
void nd_bigbuf_trim(void);

/* Bytes held in the cache now. */
size_t nd_bigbuf_cached(void);

#endif /* ND_BIGBUF_H */
