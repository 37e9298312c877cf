/* tokenizer_chat.c — what tokenizer_config.json adds to tokenizer.json: the
 * special tokens' texts (bos_token, eos_token, ...), whether BOS opens an
 * encoding (add_bos_token), and the chat template, parsed once at load so a
 * broken one is reported when the server starts, not at the first request.
 * Rendering passes the variables Hugging Face's apply_chat_template passes:
 * messages, add_generation_prompt, tools when given, the special tokens'
 * texts, and the caller's extra variables (vLLM's chat_template_kwargs). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template.h"
#include "engine/model/tokenizer_impl.h"

static const char *const special_names[TOK_N_SPECIAL_TEXT] = {"bos_token", "eos_token", "unk_token", "pad_token"};

/* A special token is written as a string or as {"__type": "AddedToken", "content": ...}. */
static const char *token_text(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    json_t *c = json_is_object(v) ? json_object_get(v, "content") : NULL;
    return json_is_string(c) ? json_string_value(c) : NULL;
}

/* The template to use: a string, or the entry named "default" of a list of {name, template}. */
static const char *template_of(json_t *ct)
{
    if (json_is_string(ct)) return json_string_value(ct);
    size_t i;
    json_t *v;
    json_array_foreach(ct, i, v) {
        json_t *name = json_object_get(v, "name"), *tpl = json_object_get(v, "template");
        if (json_is_string(name) && !strcmp(json_string_value(name), "default") && json_is_string(tpl))
            return json_string_value(tpl);
    }
    return NULL;
}

int tok_load_config(tokenizer *t, const char *tokenizer_file, rh_err *e)
{
    char file[4300];
    const char *slash = strrchr(tokenizer_file, '/');
    int dir_len = slash ? (int)(slash - tokenizer_file) : 1;
    snprintf(file, sizeof file, "%.*s/tokenizer_config.json", dir_len, slash ? tokenizer_file : ".");
    FILE *probe = fopen(file, "rb");
    if (!probe) return 0;   /* optional: tokenizer.json alone is a whole tokenizer */
    fclose(probe);
    json_error_t je;
    /* Integers as reals: configs write model_max_length as 1e30, past any int64. */
    json_t *root = json_load_file(file, JSON_DECODE_INT_AS_REAL, &je);
    if (!root) return rh_fail(e, "%s:%d:%d: %s", file, je.line, je.column, je.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = rh_fail(e, "%s: expected an object", file);
        goto done;
    }
    for (int k = 0; k < TOK_N_SPECIAL_TEXT && !rc; k++) {
        json_t *v = json_object_get(root, special_names[k]);
        const char *text = token_text(v);
        if (v && !json_is_null(v) && !text) {
            rc = rh_fail(e, "%s: field '%s': expected a string or an AddedToken object", file, special_names[k]);
            break;
        }
        if (text && !(t->special_text[k] = strdup(text))) rc = rh_fail(e, "out of memory");
    }
    if (rc) goto done;
    /* The configured EOS names the end of a sequence better than a guess by name. */
    int64_t id;
    const char *eos = t->special_text[1];
    if (eos && rh_strmap_get(&t->vocab, eos, strlen(eos), &id)) t->eos = (int32_t)id;
    /* add_bos_token (Llama and DeepSeek configs) asks for BOS where the
     * post-processor does not add it itself. */
    json_t *ab = json_object_get(root, "add_bos_token");
    const char *bos = t->special_text[0];
    if (json_is_true(ab) && t->bos < 0 && bos && rh_strmap_get(&t->vocab, bos, strlen(bos), &id)) t->bos = (int32_t)id;
    if (json_is_false(ab)) t->bos = -1;
    json_t *ct = json_object_get(root, "chat_template");
    if (ct && !json_is_null(ct)) {
        const char *src = template_of(ct);
        if (!src) {
            rc = rh_fail(e, "%s: field 'chat_template': expected a string or a list holding {\"name\": \"default\", \"template\": ...}", file);
            goto done;
        }
        rh_err te;
        if (!(t->chat = chat_template_parse(src, strlen(src), &te)))
            rc = rh_fail(e, "%s: field 'chat_template': %s", file, te.msg);
    }
done:
    json_decref(root);
    return rc;
}

void tok_free_config(tokenizer *t)
{
    for (int k = 0; k < TOK_N_SPECIAL_TEXT; k++) free(t->special_text[k]);
    chat_template_free(t->chat);
}

int tok_has_chat_template(const tokenizer *t)
{
    return t->chat != NULL;
}

char *tok_apply_chat_template(const tokenizer *t, const void *messages, int add_generation_prompt, const void *extra,
                              const char *template_src, size_t *len, rh_err *e)
{
    chat_template *own = NULL;
    const chat_template *tpl = t->chat;
    if (template_src) {
        rh_err te;
        if (!(own = chat_template_parse(template_src, strlen(template_src), &te))) {
            rh_fail(e, "chat_template: %s", te.msg);
            return NULL;
        }
        tpl = own;
    }
    if (!tpl) {
        rh_fail(e, "the tokenizer has no chat template");
        return NULL;
    }
    json_t *vars = json_object();
    char *out = NULL;
    if (!vars) goto oom;
    /* The caller's variables first, so the fixed ones win, as in transformers. */
    if (extra && json_object_update(vars, (json_t *)extra)) goto oom;
    if (json_object_set(vars, "messages", (json_t *)messages) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt)))
        goto oom;
    for (int k = 0; k < TOK_N_SPECIAL_TEXT; k++)
        if (t->special_text[k] && json_object_set_new(vars, special_names[k], json_string(t->special_text[k]))) goto oom;
    out = chat_template_render(tpl, vars, len, e);
    json_decref(vars);
    chat_template_free(own);
    return out;
oom:
    json_decref(vars);
    chat_template_free(own);
    rh_fail(e, "out of memory");
    return NULL;
}
