/* chat_template_eval.c — renders a parsed template: statements, expressions
 * and scopes as Jinja2 has them. Each for-loop iteration, macro call and with
 * block is a new scope whose sets vanish at its end (why templates carry
 * state across iterations in a namespace()); if blocks are not scopes.
 * Names resolve through the scopes, then the render's variables, then the
 * globals; a name found nowhere is undefined, which prints as "" and fails
 * when used (attribute, arithmetic, iteration is empty). Recursion, macro
 * depth, work and output are all bounded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template_impl.h"

static int eval(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out);
static int exec_list(ct_ctx *c, ct_frame *f, const ct_list *body);

/* ---- scopes ---- */

static void frame_free(ct_frame *f)
{
    for (size_t i = 0; i < f->n; i++) cv_drop(&f->v[i].v);
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

/* Binds name in f, taking v's reference. */
static int frame_set(ct_ctx *c, ct_frame *f, const char *name, ct_val v)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].name, name)) {
            cv_drop(&f->v[i].v);
            f->v[i].v = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        ct_var *nv = realloc(f->v, cap * sizeof *nv);
        if (!nv) {
            cv_drop(&v);
            return ct_fail(c, "out of memory");
        }
        f->v = nv;
        f->cap = cap;
    }
    f->v[f->n].name = name;
    f->v[f->n++].v = v;
    return 0;
}

static int lookup(ct_ctx *c, const ct_frame *f, const char *name, ct_val *out)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->v[i].name, name)) {
                *out = cv_copy(&f->v[i].v);
                return 0;
            }
    json_t *x = c->vars ? json_object_get(c->vars, name) : NULL;
    if (x) {
        *out = cv_elem(c, x);
        return 0;
    }
    int g = ct_global_id(name);
    if (g != CT_G_NONE) {
        ct_val v = {.kind = CV_FUNC, .id = g, .name = name};
        *out = v;
        return 0;
    }
    *out = cv_undef(name, 0);
    return 0;
}

/* ---- arguments ---- */

static void args_free(ct_args *a)
{
    for (size_t i = 0; i < a->npos; i++) cv_drop(&a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) cv_drop(&a->kw[i]);
    free(a->pos);
    free(a->kw);
    free(a->kwn);
    memset(a, 0, sizeof *a);
}

static int eval_args(ct_ctx *c, ct_frame *f, const ct_list *l, ct_args *a)
{
    memset(a, 0, sizeof *a);
    if (!l->n) return 0;
    a->pos = calloc(l->n, sizeof *a->pos);
    a->kw = calloc(l->n, sizeof *a->kw);
    a->kwn = calloc(l->n, sizeof *a->kwn);
    if (!a->pos || !a->kw || !a->kwn) {
        args_free(a);
        return ct_fail(c, "out of memory");
    }
    for (size_t i = 0; i < l->n; i++) {
        const ct_node *x = l->v[i];
        if (x->kind == E_KW) {
            for (size_t k = 0; k < a->nkw; k++)
                if (!strcmp(a->kwn[k], x->str)) {
                    args_free(a);
                    return ct_fail(c, "keyword argument repeated: %s", x->str);
                }
            if (eval(c, f, x->a, &a->kw[a->nkw])) {
                args_free(a);
                return -1;
            }
            a->kwn[a->nkw++] = x->str;
        } else if (eval(c, f, x, &a->pos[a->npos++])) {
            a->npos--;
            args_free(a);
            return -1;
        }
    }
    return 0;
}

/* ---- calls ---- */

static int capture(ct_ctx *c, ct_frame *f, const ct_list *body, ct_val *out)
{
    ct_buf buf = {0}, *saved = c->out;
    c->out = &buf;
    int rc = exec_list(c, f, body);
    c->out = saved;
    if (!rc) rc = cv_string(c, buf.p, buf.n, out);
    free(buf.p);
    return rc;
}

int ct_call_macro(ct_ctx *c, const ct_val *m, const ct_args *a, ct_val *out)
{
    const ct_node *mac = m->p;
    if (c->calls >= CT_MAX_CALLS) return ct_fail(c, "macro calls nested over %d deep", CT_MAX_CALLS);
    if (a->npos > mac->args.n)
        return ct_fail(c, "macro '%s' takes not more than %zu argument(s)", mac->str, mac->args.n);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t p = 0;
        while (p < mac->args.n && strcmp(mac->args.v[p]->str, a->kwn[k])) p++;
        if (p == mac->args.n) return ct_fail(c, "macro '%s' takes no keyword argument '%s'", mac->str, a->kwn[k]);
        if (p < a->npos) return ct_fail(c, "macro '%s' got multiple values for argument '%s'", mac->str, a->kwn[k]);
    }
    /* the macro's scope hangs off the one it was defined in: it sees that scope's names as they are now */
    ct_frame mf = {.parent = (ct_frame *)m->q};
    int rc = 0, line = c->line;
    for (size_t p = 0; p < mac->args.n && !rc; p++) {
        const ct_node *prm = mac->args.v[p];
        const ct_val *given = ct_arg(a, p, prm->str);
        ct_val v;
        if (given)
            v = cv_copy(given);
        else if (prm->a)
            rc = eval(c, &mf, prm->a, &v);
        else
            v = cv_undef(prm->str, 0);
        if (!rc) rc = frame_set(c, &mf, prm->str, v);
    }
    c->calls++;
    if (!rc) rc = capture(c, &mf, &mac->body, out);
    c->calls--;
    c->line = line;
    frame_free(&mf);
    return rc;
}

static int call_value(ct_ctx *c, const ct_val *callee, const ct_args *a, ct_val *out)
{
    switch (callee->kind) {
    case CV_MACRO: return ct_call_macro(c, callee, a, out);
    case CV_FUNC: return ct_call_global(c, callee->id, a, out);
    case CV_UNDEF: return cv_undef_fail(c, callee);
    default: return ct_fail(c, "'%s' object is not callable", cv_type(callee));
    }
}

static int eval_call(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    const ct_node *callee = n->a;
    ct_val obj, fn = cv_undef(NULL, 0);
    ct_args a;
    int rc;
    if (callee->kind == E_ATTR) {
        /* obj.method(args): Python's methods first, then whatever the attribute holds */
        if (eval(c, f, callee->a, &obj)) return -1;
        if (obj.kind == CV_UNDEF) {
            rc = cv_undef_fail(c, &obj);
            cv_drop(&obj);
            return rc;
        }
        if (eval_args(c, f, &n->args, &a)) {
            cv_drop(&obj);
            return -1;
        }
        int found = 0;
        c->line = n->line;
        rc = ct_method(c, &obj, callee->str, &a, out, &found);
        if (!rc && !found) {
            rc = ct_getattr(c, &obj, callee->str, &fn);
            if (!rc && fn.kind == CV_UNDEF)
                rc = ct_fail(c, "'%s' object has no attribute '%s'", cv_type(&obj), callee->str);
            else if (!rc)
                rc = call_value(c, &fn, &a, out);
            cv_drop(&fn);
        }
        cv_drop(&obj);
        args_free(&a);
        return rc;
    }
    if (eval(c, f, callee, &fn)) return -1;
    if (eval_args(c, f, &n->args, &a)) {
        cv_drop(&fn);
        return -1;
    }
    c->line = n->line;
    rc = call_value(c, &fn, &a, out);
    cv_drop(&fn);
    args_free(&a);
    return rc;
}

/* ---- expressions ---- */

static int eval_filter(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    ct_val v;
    ct_args a;
    if (eval(c, f, n->a, &v)) return -1;
    if (eval_args(c, f, &n->args, &a)) {
        cv_drop(&v);
        return -1;
    }
    c->line = n->line;
    int rc = ct_filter(c, n->str, &v, &a, out);
    cv_drop(&v);
    args_free(&a);
    return rc;
}

static int eval_test(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    ct_val v;
    ct_args a;
    int r;
    if (eval(c, f, n->a, &v)) return -1;
    if (eval_args(c, f, &n->args, &a)) {
        cv_drop(&v);
        return -1;
    }
    c->line = n->line;
    int rc = ct_test(c, n->str, &v, &a, &r);
    cv_drop(&v);
    args_free(&a);
    if (!rc) *out = cv_of(json_boolean(n->op ? !r : r));
    return rc;
}

static int compare(ct_ctx *c, int op, const ct_val *a, const ct_val *b, int *r)
{
    int k;
    switch (op) {
    case OP_EQ: *r = cv_eq(a, b); return 0;
    case OP_NE: *r = !cv_eq(a, b); return 0;
    case OP_IN: return ct_contains(c, a, b, r);
    case OP_NOTIN:
        if (ct_contains(c, a, b, r)) return -1;
        *r = !*r;
        return 0;
    default:
        if (cv_cmp(c, a, b, op, &k)) return -1;
        *r = k == 2 ? 0 : op == OP_LT ? k < 0 : op == OP_LE ? k <= 0 : op == OP_GT ? k > 0 : k >= 0;
        return 0;
    }
}

/* a < b < c is a < b and b < c, each operand evaluated once */
static int eval_cmp(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    ct_val left, right;
    int r = 1;
    if (eval(c, f, n->args.v[0], &left)) return -1;
    for (size_t i = 1; i < n->args.n && r; i++) {
        if (eval(c, f, n->args.v[i], &right)) {
            cv_drop(&left);
            return -1;
        }
        c->line = n->line;
        int rc = compare(c, n->ops[i - 1], &left, &right, &r);
        cv_drop(&left);
        left = right;
        if (rc) {
            cv_drop(&left);
            return -1;
        }
    }
    cv_drop(&left);
    *out = cv_of(json_boolean(r));
    return 0;
}

static int eval_list(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    json_t *arr = n->kind == E_DICT ? json_object() : json_array();
    if (!arr) return ct_fail(c, "out of memory");
    for (size_t i = 0; i < n->args.n; i++) {
        ct_val k = {0}, v;
        if (n->kind == E_DICT) {
            if (eval(c, f, n->args.v[i++], &k)) goto fail;
            if (!cv_is_str(&k)) {
                ct_fail(c, "dict keys must be strings here, not %s", cv_type(&k));
                cv_drop(&k);
                goto fail;
            }
        }
        if (eval(c, f, n->args.v[i], &v)) {
            cv_drop(&k);
            goto fail;
        }
        json_t *s = cv_store(c, &v);
        cv_drop(&v);
        int bad = !s;
        if (s && n->kind == E_DICT)
            bad = json_object_setn_new_nocheck(arr, json_string_value(k.j), json_string_length(k.j), s);
        else if (s)
            bad = json_array_append_new(arr, s);
        cv_drop(&k);
        if (bad) {
            if (s) ct_fail(c, "out of memory");
            goto fail;
        }
    }
    if (n->kind == E_TUPLE && ct_mark_tuple(c, arr)) goto fail;
    *out = cv_of(arr);
    return 0;
fail:
    json_decref(arr);
    return -1;
}

static int eval_inner(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    ct_val a, b, d;
    int rc;
    switch (n->kind) {
    case E_LIT: *out = cv_of(json_incref(n->lit)); return 0;
    case E_NAME: return lookup(c, f, n->str, out);
    case E_ATTR:
        if (eval(c, f, n->a, &a)) return -1;
        c->line = n->line;
        rc = ct_getattr(c, &a, n->str, out);
        cv_drop(&a);
        return rc;
    case E_ITEM:
        if (eval(c, f, n->a, &a)) return -1;
        if (eval(c, f, n->b, &b)) {
            cv_drop(&a);
            return -1;
        }
        c->line = n->line;
        rc = ct_getitem(c, &a, &b, out);
        /* a literal key names itself in the undefined's message (the tree outlives the render) */
        if (!rc && out->kind == CV_UNDEF && n->b->kind == E_LIT && json_is_string(n->b->lit))
            out->name = json_string_value(n->b->lit);
        cv_drop(&a);
        cv_drop(&b);
        return rc;
    case E_SLICE: {
        const ct_node *parts[3] = {n->b, n->c, n->d};
        ct_val pv[3] = {{0}, {0}, {0}};
        if (eval(c, f, n->a, &a)) return -1;
        rc = 0;
        for (int k = 0; k < 3 && !rc; k++)
            if (parts[k]) rc = eval(c, f, parts[k], &pv[k]);
        if (!rc) {
            c->line = n->line;
            rc = ct_slice(c, &a, parts[0] ? &pv[0] : NULL, parts[1] ? &pv[1] : NULL, parts[2] ? &pv[2] : NULL, out);
        }
        for (int k = 0; k < 3; k++) cv_drop(&pv[k]);
        cv_drop(&a);
        return rc;
    }
    case E_CALL: return eval_call(c, f, n, out);
    case E_FILTER: return eval_filter(c, f, n, out);
    case E_TEST: return eval_test(c, f, n, out);
    case E_NOT:
        if (eval(c, f, n->a, &a)) return -1;
        *out = cv_of(json_boolean(!cv_truthy(&a)));
        cv_drop(&a);
        return 0;
    case E_NEG:
    case E_POS:
        if (eval(c, f, n->a, &a)) return -1;
        c->line = n->line;
        rc = ct_neg(c, &a, n->kind == E_POS, out);
        cv_drop(&a);
        return rc;
    case E_BIN:
        if (eval(c, f, n->a, &a)) return -1;
        if (eval(c, f, n->b, &b)) {
            cv_drop(&a);
            return -1;
        }
        c->line = n->line;
        rc = ct_binop(c, n->op, &a, &b, out);
        cv_drop(&a);
        cv_drop(&b);
        return rc;
    case E_AND:
    case E_OR:
        /* Python's and / or: short circuit, the deciding operand is the value */
        if (eval(c, f, n->a, &a)) return -1;
        if (cv_truthy(&a) == (n->kind == E_OR)) {
            *out = a;
            return 0;
        }
        cv_drop(&a);
        return eval(c, f, n->b, out);
    case E_CMP: return eval_cmp(c, f, n, out);
    case E_COND:
        if (eval(c, f, n->a, &d)) return -1;
        rc = cv_truthy(&d);
        cv_drop(&d);
        if (rc) return eval(c, f, n->b, out);
        if (n->c) return eval(c, f, n->c, out);
        *out = cv_undef(NULL, 0);
        return 0;
    case E_LIST:
    case E_TUPLE:
    case E_DICT: return eval_list(c, f, n, out);
    case E_CAPTURE: return cv_string(c, c->capture, c->capture_len, out);
    default: return ct_fail(c, "internal error: node %d is not an expression", n->kind);
    }
}

/* On failure *out holds nothing (whatever a callee left there is dropped). */
static int eval(ct_ctx *c, ct_frame *f, const ct_node *n, ct_val *out)
{
    *out = cv_undef(NULL, 0);
    c->line = n->line;
    if (++c->depth > CT_MAX_EVAL_DEPTH) {
        c->depth--;
        return ct_fail(c, "recursion too deep (over %d levels)", CT_MAX_EVAL_DEPTH);
    }
    int rc = ct_charge(c, 1) ? -1 : eval_inner(c, f, n, out);
    c->depth--;
    if (rc) cv_drop(out);
    return rc;
}

/* ---- statements ---- */

/* Binds a for / set target list to a value: one name, or unpacking a, b = pair. */
static int assign(ct_ctx *c, ct_frame *f, const ct_list *targets, const ct_val *v)
{
    if (targets->n == 1) return frame_set(c, f, targets->v[0]->str, cv_copy(v));
    json_t *items;
    if (v->kind == CV_UNDEF) return cv_undef_fail(c, v);
    if (ct_iter(c, v, &items)) return -1;
    size_t n = json_array_size(items);
    int rc = 0;
    if (n != targets->n)
        rc = ct_fail(c,
                     n > targets->n ? "too many values to unpack (expected %zu)"
                                    : "not enough values to unpack (expected %zu)",
                     targets->n);
    for (size_t i = 0; !rc && i < n; i++)
        rc = frame_set(c, f, targets->v[i]->str, cv_elem(c, json_array_get(items, i)));
    json_decref(items);
    return rc;
}

static int exec_set(ct_ctx *c, ct_frame *f, const ct_node *n)
{
    ct_val v;
    if (eval(c, f, n->a, &v)) return -1;
    c->line = n->line;
    const ct_node *t = n->args.v[0];
    int rc;
    if (t->kind == E_ATTR) {
        /* set ns.attr = v: only a namespace takes attributes */
        ct_val ns;
        if (lookup(c, f, t->a->str, &ns)) {
            cv_drop(&v);
            return -1;
        }
        if (ns.kind != CV_NS) {
            rc = ns.kind == CV_UNDEF ? cv_undef_fail(c, &ns)
                                     : ct_fail(c, "cannot assign attribute on non-namespace object");
        } else {
            json_t *s = cv_store(c, &v);
            rc = !s ? -1 : json_object_set_new_nocheck(ns.j, t->str, s) ? ct_fail(c, "out of memory") : 0;
        }
        cv_drop(&ns);
    } else {
        rc = assign(c, f, &n->args, &v);
    }
    cv_drop(&v);
    return rc;
}

static int exec_for(ct_ctx *c, ct_frame *f, const ct_node *n)
{
    ct_val seq;
    json_t *items;
    if (eval(c, f, n->a, &seq)) return -1;
    c->line = n->line;
    int rc = ct_iter(c, &seq, &items);
    cv_drop(&seq);
    if (rc) return -1;
    if (n->b) {
        /* for x in xs if test: the test runs first, and loop.length counts what passed */
        json_t *kept = json_array();
        rc = kept ? 0 : ct_fail(c, "out of memory");
        for (size_t i = 0; !rc && i < json_array_size(items); i++) {
            ct_frame it = {.parent = f};
            ct_val e = cv_elem(c, json_array_get(items, i)), t;
            rc = assign(c, &it, &n->args, &e);
            cv_drop(&e);
            if (!rc && !(rc = eval(c, &it, n->b, &t))) {
                if (cv_truthy(&t) && json_array_append(kept, json_array_get(items, i)))
                    rc = ct_fail(c, "out of memory");
                cv_drop(&t);
            }
            frame_free(&it);
        }
        json_decref(items);
        if (rc) {
            if (kept) json_decref(kept);
            return -1;
        }
        items = kept;
    }
    ct_loop loop = {.items = items, .n = json_array_size(items)};
    for (size_t i = 0; !rc && i < loop.n; i++) {
        ct_frame it = {.parent = f};
        ct_val e = cv_elem(c, json_array_get(items, i));
        ct_val lv = {.kind = CV_LOOP, .p = &loop};
        loop.i = i;
        c->line = n->line;
        rc = assign(c, &it, &n->args, &e) || frame_set(c, &it, "loop", lv) || exec_list(c, &it, &n->body);
        cv_drop(&e);
        frame_free(&it);
        if (c->flow == CT_FLOW_BREAK) {
            c->flow = CT_FLOW_NONE;
            break;
        }
        c->flow = CT_FLOW_NONE;
    }
    json_decref(items);
    if (!rc && loop.n == 0 && n->alt.n) {
        ct_frame it = {.parent = f};
        rc = exec_list(c, &it, &n->alt);
        frame_free(&it);
    }
    return rc;
}

static int exec_stmt(ct_ctx *c, ct_frame *f, const ct_node *n)
{
    ct_val v;
    int rc;
    c->line = n->line;
    if (ct_charge(c, 1)) return -1;
    switch (n->kind) {
    case S_TEXT: return ct_buf_put(c, c->out, n->str, n->len);
    case S_PRINT:
        if (eval(c, f, n->a, &v)) return -1;
        rc = cv_str(c, &v, c->out);
        cv_drop(&v);
        return rc;
    case S_IF:
        for (size_t i = 0; i < n->args.n; i++) {
            const ct_node *br = n->args.v[i];
            if (eval(c, f, br->a, &v)) return -1;
            int yes = cv_truthy(&v);
            cv_drop(&v);
            if (yes) return exec_list(c, f, &br->body);
        }
        return exec_list(c, f, &n->alt);
    case S_FOR: return exec_for(c, f, n);
    case S_SET: return exec_set(c, f, n);
    case S_SETBLOCK:
        if (capture(c, f, &n->body, &v)) return -1;
        return frame_set(c, f, n->str, v);
    case S_MACRO: {
        ct_val m = {.kind = CV_MACRO, .p = n, .q = f};
        return frame_set(c, f, n->str, m);
    }
    case S_BREAK: c->flow = CT_FLOW_BREAK; return 0;
    case S_CONTINUE: c->flow = CT_FLOW_CONTINUE; return 0;
    case S_FILTER: {
        ct_val body;
        if (capture(c, f, &n->body, &body)) return -1;
        const char *saved = c->capture;
        size_t saved_len = c->capture_len;
        c->capture = json_string_value(body.j);
        c->capture_len = json_string_length(body.j);
        rc = eval(c, f, n->a, &v);
        c->capture = saved;
        c->capture_len = saved_len;
        cv_drop(&body);
        if (rc) return -1;
        rc = cv_str(c, &v, c->out);
        cv_drop(&v);
        return rc;
    }
    case S_WITH: {
        ct_frame w = {.parent = f};
        rc = 0;
        for (size_t i = 0; i < n->args.n && !rc; i++) {
            /* the values see the enclosing scope, not each other */
            rc = eval(c, f, n->args.v[i]->a, &v) || frame_set(c, &w, n->args.v[i]->str, v);
        }
        if (!rc) rc = exec_list(c, &w, &n->body);
        frame_free(&w);
        return rc;
    }
    case S_BODY: return exec_list(c, f, &n->body);
    default: return ct_fail(c, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec_list(ct_ctx *c, ct_frame *f, const ct_list *body)
{
    if (++c->depth > CT_MAX_EVAL_DEPTH) {
        c->depth--;
        return ct_fail(c, "recursion too deep (over %d levels)", CT_MAX_EVAL_DEPTH);
    }
    int rc = 0;
    for (size_t i = 0; i < body->n && !rc && c->flow == CT_FLOW_NONE; i++) rc = exec_stmt(c, f, body->v[i]);
    c->depth--;
    return rc;
}

char *chat_template_render(const chat_template *t, const json_t *vars, size_t *len, rh_err *e)
{
    if (len) *len = 0;
    if (!t) {
        rh_fail(e, "chat template: no template");
        return NULL;
    }
    if (vars && !json_is_object(vars)) {
        rh_fail(e, "chat template: the variables must be a JSON object");
        return NULL;
    }
    ct_buf out = {0};
    ct_ctx c = {.vars = vars, .undef = json_object(), .out = &out, .line = 1, .e = e};
    ct_frame root = {0};
    int rc = c.undef ? exec_list(&c, &root, &t->body) : rh_fail(e, "chat template: out of memory");
    frame_free(&root);
    ct_tuples_free(&c);
    if (c.undef) json_decref(c.undef);
    if (rc == 0 && !out.p) {
        out.p = calloc(1, 1);
        if (!out.p) rc = rh_fail(e, "chat template: out of memory");
    }
    if (rc) {
        free(out.p);
        return NULL;
    }
    if (len) *len = out.n;
    return out.p;
}
