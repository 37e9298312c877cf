/* server_text.c — see server_text.h. */
#include "engine/serve/server_text.h"

#include <stdlib.h>
#include <string.h>

static const char replacement[] = "\xef\xbf\xbd";

/* Bytes in the character a lead byte starts; 0 when it starts none. */
static uint32_t lead_len(unsigned char b)
{
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return 2;
    if (b >= 0xe0 && b <= 0xef) return 3;
    if (b >= 0xf0 && b <= 0xf4) return 4;
    return 0;
}

/* Whether b can be byte `at` (>= 1) of a character led by `lead`: the
 * second byte's range excludes overlong forms, surrogates and code points
 * past U+10FFFF, as RFC 3629 says. */
static int fits(unsigned char lead, uint32_t at, unsigned char b)
{
    if (at > 1) return b >= 0x80 && b <= 0xbf;
    switch (lead) {
    case 0xe0: return b >= 0xa0 && b <= 0xbf;
    case 0xed: return b >= 0x80 && b <= 0x9f;
    case 0xf0: return b >= 0x90 && b <= 0xbf;
    case 0xf4: return b >= 0x80 && b <= 0x8f;
    default: return b >= 0x80 && b <= 0xbf;
    }
}

static int grow(sv_text *t, size_t more)
{
    if (t->oom) return -1;
    if (t->len + more + 1 <= t->cap) return 0;
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->len + more + 1) cap *= 2;
    char *p = realloc(t->text, cap);
    if (!p) {
        t->oom = 1;
        return -1;
    }
    t->text = p;
    t->cap = cap;
    return 0;
}

static void put(sv_text *t, const void *p, size_t n)
{
    if (grow(t, n) < 0) return;
    memcpy(t->text + t->len, p, n);
    t->len += n;
    t->text[t->len] = '\0';
}

/* One byte through the decoder. */
static void feed(sv_text *t, unsigned char b)
{
    if (t->n_pend) {
        if (fits(t->pend[0], t->n_pend, b)) {
            t->pend[t->n_pend++] = b;
            if (t->n_pend == t->need) {
                put(t, t->pend, t->n_pend);
                t->n_pend = 0;
            }
            return;
        }
        /* The character broke off: what was held is one invalid run, and b
         * starts afresh. */
        put(t, replacement, 3);
        t->n_pend = 0;
    }
    uint32_t n = lead_len(b);
    if (b == 0) {
        /* NUL is valid UTF-8, but C-string clients and JSON parsers that
         * refuse \u0000 would lose the rest of the text. */
        put(t, replacement, 3);
    } else if (n == 1) {
        put(t, &b, 1);
    } else if (n) {
        t->pend[0] = b;
        t->n_pend = 1;
        t->need = n;
    } else {
        put(t, replacement, 3);
    }
}

void sv_text_init(sv_text *t, const char *const *stop, uint32_t n_stop)
{
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->n_stop = n_stop;
    for (uint32_t i = 0; i < n_stop; i++) {
        size_t n = strlen(stop[i]);
        if (n > t->max_stop) t->max_stop = n;
    }
}

void sv_text_free(sv_text *t)
{
    free(t->text);
    memset(t, 0, sizeof *t);
}

/* The earliest stop string starting at or after `from`; its position, or -1. */
static long find_stop(const sv_text *t, size_t from)
{
    long best = -1;
    for (uint32_t i = 0; i < t->n_stop; i++) {
        size_t n = strlen(t->stop[i]);
        if (!n || from >= t->len) continue;
        const char *hit = memmem(t->text + from, t->len - from, t->stop[i], n);
        if (hit && (best < 0 || hit - t->text < best)) best = hit - t->text;
    }
    return best;
}

int sv_text_push(sv_text *t, const char *bytes, size_t n)
{
    if (t->stopped || t->finished) return 0;
    size_t before = t->len;
    for (size_t i = 0; i < n; i++) feed(t, (unsigned char)bytes[i]);
    if (t->oom) return -1;
    if (!t->n_stop || t->len == before || t->no_stop) return 0;
    /* A stop string completed now may have begun up to max_stop - 1 bytes
     * before this token's text. */
    size_t from = before >= t->max_stop ? before - (t->max_stop - 1) : 0;
    long at = find_stop(t, from);
    if (at < 0) return 0;
    /* Never below what was sent: held-back text makes that impossible, and
     * text once sent is never taken back. */
    t->len = (size_t)at < t->sent ? t->sent : (size_t)at;
    if (t->text) t->text[t->len] = '\0';
    t->stopped = 1;
    t->n_pend = 0;
    return 1;
}

void sv_text_finish(sv_text *t)
{
    if (t->n_pend && !t->stopped) put(t, replacement, 3);
    t->n_pend = 0;
    t->finished = 1;
}

/* Bytes at the end that may yet become the start of a stop string. */
static size_t held_back(const sv_text *t)
{
    size_t hold = 0, open = t->len - t->sent;
    for (uint32_t i = 0; i < t->n_stop; i++) {
        size_t n = strlen(t->stop[i]);
        if (!n) continue;
        size_t k = n - 1 < open ? n - 1 : open;
        for (; k > hold; k--)
            if (!memcmp(t->text + t->len - k, t->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

const char *sv_text_take(sv_text *t, size_t *n)
{
    size_t ready = t->len;
    if (!t->finished && !t->stopped) ready -= held_back(t);
    const char *p = t->text ? t->text + t->sent : "";
    *n = ready > t->sent ? ready - t->sent : 0;
    if (ready > t->sent) t->sent = ready;
    return p;
}

size_t sv_token_bytes(const tokenizer *tok, int32_t id, char *buf, size_t cap)
{
    if (!tok || tok_is_special(tok, id)) return 0;
    size_t n = tok_piece(tok, id, buf, cap);
    if (n == 0 && cap >= 3) {
        memcpy(buf, replacement, 3);
        return 3;
    }
    return n < cap ? n : cap;
}

char *sv_utf8_clean(const char *bytes, size_t n, size_t *out_len)
{
    sv_text t;
    sv_text_init(&t, NULL, 0);
    if (grow(&t, n + n / 2 + 4) < 0) return NULL;
    t.text[0] = '\0';
    for (size_t i = 0; i < n; i++) feed(&t, (unsigned char)bytes[i]);
    sv_text_finish(&t);
    if (t.oom) {
        free(t.text);
        return NULL;
    }
    if (out_len) *out_len = t.len;
    return t.text;
}
