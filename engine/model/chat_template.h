/* chat_template.h — Hugging Face chat templates (the Jinja subset they use),
 * rendered exactly as transformers' tokenizer.apply_chat_template does.
 *
 * The environment is transformers': trim_blocks, lstrip_blocks, loop
 * controls (break/continue), the {% generation %} tag, a tojson filter that is
 * Python's json.dumps(ensure_ascii=False), the globals raise_exception,
 * strftime_now, namespace and range, and Python's str/dict/list methods that
 * templates call (startswith, split, strip, items, get, ...). Values print as
 * Python prints them (True, None, 1.0, ['a', 1]). A parsed template is
 * immutable: one may be rendered from many threads at once.
 *
 * Never crashes on any input: parsing and rendering are bounded in nesting,
 * macro recursion, output size and work; every error is one sentence naming
 * the template line ("chat template line N: ..."). */
#ifndef RH_CHAT_TEMPLATE_H
#define RH_CHAT_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>

#include "util/err.h"

/* The longest output (and longest string built on the way) a render may make. */
#define CHAT_TEMPLATE_MAX_OUTPUT (64u << 20)

typedef struct chat_template chat_template;

/* Parses a template; NULL with a message naming the line on a syntax error. */
chat_template *chat_template_parse(const char *src, size_t len, rh_err *e);
/* Renders with vars (a JSON object: messages, add_generation_prompt, tools,
 * bos_token, eos_token, any extra); a malloc'd NUL-terminated string, *len bytes.
 * NULL with a message on an error (raise_exception's message, a type error, an
 * undefined attribute, output over CHAT_TEMPLATE_MAX_OUTPUT, recursion too deep). */
char *chat_template_render(const chat_template *t, const json_t *vars, size_t *len, rh_err *e);
void chat_template_free(chat_template *t);

#endif
