/* server_text.h — a request's output text as its tokens arrive: bytes to
 * valid UTF-8, stop strings, and what is safe to stream.
 *
 * Tokens come one at a time as bytes (a token may hold part of a UTF-8
 * character). The text kept is always valid UTF-8: a character split across
 * tokens waits for its last byte, and bytes that can never form a character
 * become U+FFFD, one per maximal invalid run as Python's "replace" decoding
 * does; so does a NUL byte, which many clients cannot carry in a string. Stop strings are searched in that text; when one appears the text is
 * cut just before it and the request is over. While running, the part that
 * may still turn out to begin a stop string (and an unfinished character) is
 * held back, so a client never sees text that is later taken away.
 * Pure: no I/O, no threads. */
#ifndef RH_SERVER_TEXT_H
#define RH_SERVER_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/tokenizer.h"

typedef struct sv_text {
    char *text;                 /* settled valid UTF-8, NUL-terminated */
    size_t len, cap;
    size_t sent;                /* bytes handed out by sv_text_take */
    unsigned char pend[4];      /* an unfinished character */
    uint32_t n_pend, need;      /* bytes held, bytes the character has */
    const char *const *stop;    /* borrowed; each non-empty valid UTF-8 */
    uint32_t n_stop;
    size_t max_stop;            /* longest stop string in bytes */
    int no_stop;                /* the caller's: stop strings are not looked for in the next push */
    int stopped;                /* a stop string was found: text ends before it */
    int finished;               /* sv_text_finish was called */
    int oom;
} sv_text;

void sv_text_init(sv_text *t, const char *const *stop, uint32_t n_stop);
void sv_text_free(sv_text *t);
/* Appends n bytes of one token. 1 when a stop string now appears (the text is
 * cut before it and further pushes are ignored), 0 otherwise, -1 out of memory. */
int sv_text_push(sv_text *t, const char *bytes, size_t n);
/* The output ended: an unfinished character becomes U+FFFD and nothing is
 * held back any more. */
void sv_text_finish(sv_text *t);
/* Text that became safe to send since the last call: *n bytes at the
 * returned pointer (valid until the next push). */
const char *sv_text_take(sv_text *t, size_t *n);

/* The bytes a token adds to the output text: nothing for special tokens,
 * U+FFFD for an id the tokenizer does not know. Returns the length (at most
 * cap; pieces longer than cap are cut). */
size_t sv_token_bytes(const tokenizer *tok, int32_t id, char *buf, size_t cap);

/* Rewrites bytes as valid UTF-8 (U+FFFD for invalid runs), the same way
 * sv_text does; malloc'd and NUL-terminated, NULL when out of memory. */
char *sv_utf8_clean(const char *bytes, size_t n, size_t *out_len);

#endif
