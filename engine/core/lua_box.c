/* lua_box.c — the sandbox of lua_box.h: a capped allocator, the libraries
 * a script may use, the instruction budget and wall-clock guard, and the
 * protected call that turns every failure into one message.
 *
 * Why every call ends within its limits, even inside C. The budget and the
 * clock are checked at two hooks: a count hook every few instructions and a
 * call hook at every function call, C functions included. What runs
 * between two checks is bounded three ways:
 *   - a C function of the sandbox that loops (table.sort, insert, remove,
 *     concat, unpack, string.byte, utf8.len, ...) either calls back through
 *     the call hook at each step (sort's comparisons go through a charged
 *     comparator) or is charged up front by the elements and bytes it will
 *     visit (charge());
 *   - whatever builds strings or tables (.., rep, format, concat, upper, a
 *     growing table) allocates, and every byte allocated is charged to the
 *     budget at the next hook, so work that allocates costs what it does;
 *   - what an instruction does without allocating is at most a pass over
 *     two strings (a < b, a == b on long equal strings compares them byte
 *     by byte): the count hook's period shrinks as the longest string the
 *     state ever made grows, so no stretch between two checks touches more
 *     than about PERIOD_BYTES of string bytes.
 * Why not a timer that arms the hook from outside: a thread may not touch a
 * running state (lua_sethook walks its CallInfo list, which the collector
 * shrinks), and a signal would land in the host's own system calls (the
 * server's sockets, the router's curl) for work the hooks already bound. */
#include "engine/core/lua_box.h"

#include "util/fs.h"

#include <lauxlib.h>
#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_EVERY 1000
/* What a function call costs against the budget, beyond the instructions
 * that make it. C functions run without instructions (table.concat calling
 * a C __index ten million times, say); the call hook counts each such call,
 * so a loop inside C is bounded like a loop in Lua. */
#define CALL_COST 10
#define HOOK_MASK (LUA_MASKCOUNT | LUA_MASKCALL)
/* Work by the byte and by the element, in instructions of budget. Measured
 * here (test_hardening_lua's attacks): a Lua instruction takes about 3 ns;
 * building a string takes 0.25 ns a byte (memcpy: .., format) to 1 ns
 * (rep of a short string, utf8.len's decoding); a C loop's element 3-5 ns
 * (a lua_geti and lua_seti: unpack, string.byte, a shift of
 * table.insert), table.concat's about 20 ns. Charged at the dear end. */
#define BYTES_PER_INSTRUCTION 4
#define INSTRUCTIONS_PER_ELEMENT 1
#define INSTRUCTIONS_PER_CONCAT_ELEMENT 6
/* The most string bytes one count-hook period may touch without
 * allocating: with strings up to PERIOD_BYTES / HOOK_EVERY (16 KiB) the
 * period is HOOK_EVERY; a 20 MB string brings it to one instruction, whose
 * compare then takes a few ms. */
#define PERIOD_BYTES (16u << 20)

/* The running call's budget. Thread-local because sweeps may run one core
 * per thread, each with its own state; saved and restored around every
 * call so nested calls keep their own. */
static _Thread_local lbox_budget *tl_budget;

static void count_hook(lua_State *L, lua_Debug *ar);

/* The count hook's period for a state whose longest string so far is
 * max_string bytes (see PERIOD_BYTES). */
static int period_for(size_t max_string)
{
    if (max_string <= PERIOD_BYTES / HOOK_EVERY) return HOOK_EVERY;
    size_t p = PERIOD_BYTES / max_string;
    return p < 1 ? 1 : (int)p;
}

/* Stops the call: marks the budget spent (every later hook raises the same
 * message again) and raises "file:line: who ran past what", the line of
 * the innermost Lua frame. */
static int spend(lua_State *L, lbox_budget *b)
{
    b->spent = 1;
    lua_sethook(L, count_hook, HOOK_MASK, 1);   /* lbox_call restores the hook */
    const char *who = b->names->function, *flag = b->names->seconds_flag;
    char what[96];
    if (b->left < 0) snprintf(what, sizeof what, "its budget of %lld instructions", b->limit);
    else snprintf(what, sizeof what, "its time limit of %g s%s%s%s", b->max_seconds, flag ? " (" : "", flag ? flag : "",
                  flag ? ")" : "");
    /* A call event's own frame is the callee, often a C function (pcall,
     * table.sort) without a line: look outward for the script's. */
    lua_Debug at;
    int level = 0, found = 0;
    while (!found && lua_getstack(L, level++, &at)) found = lua_getinfo(L, "Sl", &at) && at.currentline > 0;
    if (found) snprintf(b->msg, sizeof b->msg, "%s:%d: %s ran past %s", at.short_src, at.currentline, who, what);
    else snprintf(b->msg, sizeof b->msg, "%s ran past %s", who, what);
    lua_pushstring(L, b->msg);
    return lua_error(L);
}

/* What the state allocated since the budget last looked, charged by the
 * byte. */
static void charge_allocations(lbox_budget *b)
{
    if (!b->mem) return;
    uint64_t grown = b->mem->allocated - b->alloc_mark;
    b->left -= (long long)(grown / BYTES_PER_INSTRUCTION);
    b->alloc_mark += grown - grown % BYTES_PER_INSTRUCTION;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
    lbox_budget *b = tl_budget;
    if (!b) return;
    if (b->spent) {
        /* Raised again at every instruction and call: a script that catches
         * the error with pcall gets it back at once, so the budget cannot be
         * swallowed. The same message each time: a call the unwinding makes
         * (a buffer's __close) has no line of the script's to name. */
        lua_pushstring(L, b->msg);
        lua_error(L);
    }
    int counted = ar->event == LUA_HOOKCOUNT;
    b->left -= counted ? b->period : CALL_COST;
    charge_allocations(b);
    /* The clock at every count event, and at every eighth call (C calls
     * are cheap) unless the state holds strings long enough that one call
     * may take a while (the period has shrunk). */
    int late = b->clock && (counted || b->period < HOOK_EVERY || (++b->calls & 7) == 0) &&
               b->clock(b->clock_ctx) > b->deadline;
    if (b->left >= 0 && !late) return;
    spend(L, b);
}

/* Charges work a C function of the sandbox is about to do (or just did)
 * without instructions; past the budget the call stops here. */
static void charge(lua_State *L, uint64_t units)
{
    lbox_budget *b = tl_budget;
    if (!b || b->spent || units == 0) return;
    b->left -= units > (uint64_t)LLONG_MAX ? LLONG_MAX : (long long)units;
    if (b->left < 0) spend(L, b);
}

lbox_budget lbox_budget_make(const lbox_names *n, long long instructions, double (*clock)(void *ctx), void *ctx,
                             double max_seconds)
{
    lbox_budget b = {.left = instructions, .limit = instructions, .names = n, .period = HOOK_EVERY};
    if (clock && max_seconds > 0) {
        b.clock = clock;
        b.clock_ctx = ctx;
        b.max_seconds = max_seconds;
        b.deadline = clock(ctx) + max_seconds;
    }
    return b;
}

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

void lbox_arm(lua_State *L, lbox_budget *budget)
{
    void *ud = NULL;
    /* An owned state's allocator is ours: its bytes are charged, and its
     * longest string sets the period. A caller's state is its own. */
    budget->mem = lua_getallocf(L, &ud) == capped_alloc ? ud : NULL;
    budget->alloc_mark = budget->mem ? budget->mem->allocated : 0;
    budget->period = period_for(budget->mem ? budget->mem->max_string : 0);
    tl_budget = budget;
    lua_sethook(L, count_hook, HOOK_MASK, budget->period);
}

/* Lua's allocator with a cap on what the state holds: past it an
 * allocation fails, Lua raises a memory error, and the call fails. It also
 * keeps the bytes ever allocated (charged to the running budget) and the
 * longest string made; a longer one than before shortens the running
 * call's hook period at once, before any instruction can compare it.
 * (With ptr NULL, osize is the new object's type, not a size.) */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    lbox_mem *m = ud;
    int type = ptr ? -1 : (int)osize;
    if (!ptr) osize = 0;
    if (nsize == 0) {
        free(ptr);
        m->used -= osize;
        return NULL;
    }
    if (nsize > osize && nsize - osize > m->cap - m->used) return NULL;
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    m->used = m->used - osize + nsize;
    if (nsize > osize) m->allocated += nsize - osize;
    if (type == LUA_TSTRING && nsize > m->max_string) {
        m->max_string = nsize;
        lbox_budget *b = tl_budget;
        int period = period_for(nsize);
        if (m->L && b && b->mem == m && !b->spent && period < b->period) {
            b->period = period;
            lua_sethook(m->L, count_hook, HOOK_MASK, period);
        }
    }
    return p;
}

/* Calls the wrapped original (upvalue 1) with every argument, returns its one result. */
static int call_original(lua_State *L)
{
    int nargs = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, nargs, 1);
    return 1;
}

/* The same, with all its results. */
static int call_original_all(lua_State *L)
{
    int nargs = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, nargs, LUA_MULTRET);
    return lua_gettop(L);
}

/* ---- the C functions that loop, charged by what they visit ---- */

/* Functions that scan their string arguments without allocating (tonumber,
 * utf8.len and utf8.offset, rawequal, the strings' arithmetic): charged by
 * the bytes of those strings. */
static int charged_by_bytes(lua_State *L)
{
    uint64_t bytes = 0;
    for (int i = 1, n = lua_gettop(L); i <= n; i++)
        if (lua_type(L, i) == LUA_TSTRING) bytes += lua_rawlen(L, i);
    charge(L, bytes / BYTES_PER_INSTRUCTION);
    return call_original_all(L);
}

/* Functions that push one value per element (table.unpack, string.byte,
 * utf8.codepoint): charged after, by what they returned; the Lua stack's
 * limit bounds them meanwhile. */
static int charged_by_results(lua_State *L)
{
    int n = call_original_all(L);
    charge(L, (uint64_t)n * INSTRUCTIONS_PER_ELEMENT);
    return n;
}

/* The raw length of the table argument 1 (0 for anything else). */
static uint64_t raw_length(lua_State *L)
{
    return lua_type(L, 1) == LUA_TTABLE ? (uint64_t)lua_rawlen(L, 1) : 0;
}

/* An integer argument, clamped to 0..limit (absent or not a number: dflt). */
static uint64_t arg_position(lua_State *L, int i, uint64_t dflt, uint64_t limit)
{
    if (lua_type(L, i) != LUA_TNUMBER) return dflt;
    lua_Integer v = lua_tointeger(L, i);
    if (v < 0) return 0;
    return (uint64_t)v > limit ? limit : (uint64_t)v;
}

/* table.insert(t, pos, v) and table.remove(t, pos) shift every element
 * after pos, one lua_geti and lua_seti each: charged by the shift. */
static int sandboxed_insert(lua_State *L)
{
    uint64_t n = raw_length(L);
    uint64_t pos = lua_gettop(L) >= 3 ? arg_position(L, 2, n + 1, n + 1) : n + 1;
    charge(L, (n + 1 - pos) * INSTRUCTIONS_PER_ELEMENT);
    return call_original_all(L);
}

static int sandboxed_remove(lua_State *L)
{
    uint64_t n = raw_length(L);
    uint64_t pos = arg_position(L, 2, n, n);
    charge(L, (n > pos ? n - pos : 0) * INSTRUCTIONS_PER_ELEMENT);
    return call_original_all(L);
}

/* table.concat(t, sep, i, j) visits t[i..j]; past the raw length an element
 * is nil (an error) unless a metamethod answers, and a metamethod is a call
 * the call hook counts. Its bytes are charged as it allocates them. */
static int sandboxed_concat(lua_State *L)
{
    uint64_t n = raw_length(L), i = arg_position(L, 3, 1, n + 1), j = arg_position(L, 4, n, n);
    charge(L, (j >= i ? j - i + 1 : 0) * INSTRUCTIONS_PER_CONCAT_ELEMENT);
    return call_original_all(L);
}

/* The comparison table.sort makes without a comparator, as a function: each
 * one then passes the call hook (counted, and the clock looked at), and two
 * strings are charged by the bytes a comparison may read. Lua's own sort
 * with a comparator that answers exactly as < does orders exactly as it
 * does without one. */
static int charged_less(lua_State *L)
{
    if (lua_type(L, 1) == LUA_TSTRING && lua_type(L, 2) == LUA_TSTRING) {
        size_t a = lua_rawlen(L, 1), b = lua_rawlen(L, 2);
        charge(L, (a < b ? a : b) / BYTES_PER_INSTRUCTION);
    }
    lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPLT));
    return 1;
}

/* Arrays up to this length are sorted by Lua's own comparisons, charged up
 * front: even quicksort's worst case (n^2 / 2 comparisons, 8M) is a few
 * tens of ms, and a queue a policy orders is shorter (--policy-window).
 * A longer one, or one with a metatable, goes through charged_less, a
 * function call per comparison (a policy's default sort of 256 numbers
 * would take twice as long that way). */
#define SORT_DIRECT_MAX 4096

static int sandboxed_sort(lua_State *L)
{
    if (!lua_isnoneornil(L, 2)) return call_original_all(L);   /* its comparator is a call */
    lua_settop(L, 1);
    if (lua_type(L, 1) == LUA_TTABLE && !lua_getmetatable(L, 1) && lua_rawlen(L, 1) <= SORT_DIRECT_MAX) {
        /* n log2 n comparisons, each charged as one instruction and the
         * bytes of the longest string, and the pass that found it */
        uint64_t n = lua_rawlen(L, 1), longest = 0, log2n = 1;
        for (uint64_t i = 1; i <= n; i++) {
            if (lua_rawgeti(L, 1, (lua_Integer)i) == LUA_TSTRING && lua_rawlen(L, -1) > longest)
                longest = lua_rawlen(L, -1);
            lua_pop(L, 1);
        }
        while ((1ull << log2n) < n) log2n++;
        charge(L, n + n * log2n * (1 + longest / BYTES_PER_INSTRUCTION));
        return call_original_all(L);
    }
    lua_settop(L, 1);
    lua_pushcfunction(L, charged_less);
    return call_original_all(L);
}

/* string.rep with an empty string (and separator) loops n times in C
 * without allocating, beyond both the count hook and the memory cap; the
 * answer is "" anyway. Any other call allocates its whole result first, so
 * the cap bounds its loop and its bytes are charged. */
static int sandboxed_rep(lua_State *L)
{
    size_t l, lsep;
    luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || l + lsep == 0) {
        lua_pushliteral(L, "");
        return 1;
    }
    return call_original(L);
}

/* setmetatable without __gc: finalizers run with hooks off, whenever the
 * collector likes (during the next allocation, or in lua_close), so an
 * endless finalizer would hang the scheduler past every budget. */
static int sandboxed_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        int t = lua_rawget(L, 2);
        lua_pop(L, 1);
        if (t != LUA_TNIL) return luaL_error(L, "setmetatable: a policy may not set a __gc finalizer");
    }
    return call_original(L);
}

/* xpcall whose message handler runs after the error unwound, as a handler
 * of pcall's result would. Lua calls a real xpcall's handler at the point
 * of the error, and for the budget's error that point is inside the count
 * hook, where hooks are off: an endless handler would never be stopped.
 * (Without the debug library a handler cannot look at the stack anyway.)
 * Written in C so a budget error raised after it names the script's line. */
static int sandboxed_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushboolean(L, 1);
    lua_pushvalue(L, 1);
    lua_rotate(L, 3, 2);   /* f, msgh, true, f, args... */
    int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
    if (status == LUA_OK) return lua_gettop(L) - 2;
    if (status == LUA_ERRRUN) {
        lua_pushvalue(L, 2);
        lua_insert(L, -2);
        lua_call(L, 1, 1);
    }
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
}

/* print on stderr: a policy's output is a diagnostic, and stdout belongs to
 * the command (`rehearse sim --json` prints its result there). Each value
 * at most PRINT_MAX bytes, and its bytes charged: a log line per call,
 * never a flood of megabytes into a pipe nobody reads. */
#define PRINT_MAX 4096
static int sandboxed_print(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (i > 1) fputc('\t', stderr);
        charge(L, (len < PRINT_MAX ? len : PRINT_MAX) / BYTES_PER_INSTRUCTION);
        if (len > PRINT_MAX) fprintf(stderr, "%.*s... (%zu bytes)", PRINT_MAX, s, len);
        else fwrite(s, 1, len, stderr);
        lua_pop(L, 1);
    }
    fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static void drop_field(lua_State *L, const char *name)
{
    lua_pushnil(L);
    lua_setfield(L, -2, name);
}

static void wrap_field(lua_State *L, const char *name, lua_CFunction f)
{
    lua_getfield(L, -1, name);
    lua_pushcclosure(L, f, 1);
    lua_setfield(L, -2, name);
}

/* A policy (the scheduler's, the router's) is a pure function of what it
 * is shown, so it is deterministic, behaves the same in both clocks, and
 * cannot reach the machine it runs on.
 * Opened: base, table, string, math, utf8; never io, os, package (require),
 * debug or coroutine. Then removed or tamed:
 *   dofile, loadfile, load   run code from files, or from strings and
 *                            binary chunks (which can crash the VM);
 *   collectgarbage           the collector belongs to the host;
 *   string.find, match, gmatch, gsub
 *                            Lua patterns backtrack inside one C call,
 *                            exponentially on a crafted pattern, and the
 *                            count hook only fires between instructions;
 *   table.move               loops in C over any index range, even of nils;
 *   string.rep, setmetatable, xpcall, print
 *                            see sandboxed_rep, sandboxed_setmetatable,
 *                            sandboxed_xpcall and sandboxed_print;
 *   table.sort, insert, remove, concat, unpack, string.byte,
 *   utf8.len, offset, codepoint, tonumber, rawequal, the strings'
 *   arithmetic metamethods   loop in C: charged by what they visit (see
 *                            "the C functions that loop" above);
 *   the strings' metatable   shared by every string, and its __index is
 *                            what s:f() and s[k] run: protected
 *                            (__metatable), so getmetatable("").__index =
 *                            string.sub cannot turn indexing a string into
 *                            a C call inside another C function's loop.
 * Runs protected: an allocation failure here is an error, not a panic. */
static int sandbox(lua_State *L)
{
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base},       {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
        {LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
    };
    lua_Integer seed = lua_tointeger(L, 1);
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    lua_pushglobaltable(L);
    drop_field(L, "dofile");
    drop_field(L, "loadfile");
    drop_field(L, "load");
    drop_field(L, "collectgarbage");
    wrap_field(L, "setmetatable", sandboxed_setmetatable);
    lua_pushcfunction(L, sandboxed_xpcall);
    lua_setfield(L, -2, "xpcall");
    lua_pushcfunction(L, sandboxed_print);
    lua_setfield(L, -2, "print");
    wrap_field(L, "tonumber", charged_by_bytes);
    wrap_field(L, "rawequal", charged_by_bytes);
    lua_getfield(L, -1, LUA_STRLIBNAME);
    drop_field(L, "find");
    drop_field(L, "match");
    drop_field(L, "gmatch");
    drop_field(L, "gsub");
    wrap_field(L, "rep", sandboxed_rep);
    wrap_field(L, "byte", charged_by_results);
    lua_pop(L, 1);
    lua_getfield(L, -1, LUA_TABLIBNAME);
    drop_field(L, "move");
    wrap_field(L, "sort", sandboxed_sort);
    wrap_field(L, "insert", sandboxed_insert);
    wrap_field(L, "remove", sandboxed_remove);
    wrap_field(L, "concat", sandboxed_concat);
    wrap_field(L, "unpack", charged_by_results);
    lua_pop(L, 1);
    lua_getfield(L, -1, LUA_UTF8LIBNAME);
    wrap_field(L, "len", charged_by_bytes);
    wrap_field(L, "offset", charged_by_bytes);
    wrap_field(L, "codepoint", charged_by_results);
    lua_pop(L, 2);
    /* The strings' metatable: its arithmetic converts a string operand to
     * a number (a scan of it) in C; then protected. */
    lua_pushliteral(L, "");
    lua_getmetatable(L, -1);
    static const char *const arith[] = {"__add", "__sub", "__mul", "__div", "__mod", "__pow", "__unm", "__idiv", NULL};
    for (const char *const *k = arith; *k; k++)
        if (lua_getfield(L, -1, *k) == LUA_TFUNCTION) {
            lua_pushcclosure(L, charged_by_bytes, 1);
            lua_setfield(L, -2, *k);
        } else {
            lua_pop(L, 1);
        }
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);
    lua_getglobal(L, LUA_MATHLIBNAME);
    lua_getfield(L, -1, "randomseed");
    lua_pushinteger(L, seed);
    lua_call(L, 1, 0);
    return 0;
}

static void describe_function(lbox *b)
{
    lua_State *L = b->L;
    lua_Debug ar;
    lua_rawgeti(L, LUA_REGISTRYINDEX, b->ref);
    if (lua_getinfo(L, ">S", &ar)) {
        snprintf(b->where, sizeof b->where, "%s:%d", ar.short_src, ar.linedefined);
        snprintf(b->src, sizeof b->src, "%s:", ar.short_src);
    } else {
        snprintf(b->where, sizeof b->where, "%s", b->names->function);
    }
}

/* Takes the global named by the light userdata argument into the registry;
 * its reference is returned on the stack (false: no such function).
 * Protected for the same reason as sandbox(). Read raw: no budget runs
 * here, and a script that set an __index on _G would have it called (one
 * that recursed through pcall ran for ever). */
static int take_function(lua_State *L)
{
    lua_pushglobaltable(L);
    lua_pushstring(L, (const char *)lua_touserdata(L, 1));
    lua_rawget(L, -2);
    if (!lua_isfunction(L, -1)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    lua_pushinteger(L, luaL_ref(L, LUA_REGISTRYINDEX));
    return 1;
}

/* Runs the loaded chunk under the load budget; the hook is off after. */
static int run_chunk(lua_State *L, lbox_budget *load)
{
    lbox_budget *saved = tl_budget;
    lbox_arm(L, load);
    int rc = lua_pcall(L, 0, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    tl_budget = saved;
    return rc;
}

/* The script's source onto the stack as a function: read by us, not by
 * luaL_loadfile, so that a FIFO or a device is refused instead of blocking
 * the open for ever (rh_read_regular), and as text only: a binary chunk
 * is not checked by Lua and can crash the VM. A first line starting with
 * '#' (#!/usr/bin/env lua) is skipped as lua.c skips it, its newline kept
 * so line numbers stay the file's. */
#define MAX_SOURCE_BYTES (16u << 20)
static int load_source(lua_State *L, const lbox_names *n, const char *path, rh_err *e)
{
    size_t len;
    char *src = rh_read_regular(path, n->script, MAX_SOURCE_BYTES, &len, e);
    if (!src) return -1;
    const char *p = src;
    if (len && *p == '#') {
        const char *nl = memchr(p, '\n', len);
        p = nl ? nl : p + len;
    }
    char chunk[4200];
    snprintf(chunk, sizeof chunk, "@%s", path);
    int rc = luaL_loadbufferx(L, p, len - (size_t)(p - src), chunk, "t");
    free(src);
    if (rc != LUA_OK) {
        rh_fail(e, "%s: %s", n->script, lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "cannot load it");
        return -1;
    }
    return 0;
}

int lbox_open_file(lbox *b, const lbox_names *n, const char *path, uint64_t max_memory, uint64_t seed,
                   lbox_budget *load, rh_err *e)
{
    memset(b, 0, sizeof *b);
    b->names = n;
    b->owned = true;
    b->mem.cap = max_memory > SIZE_MAX ? SIZE_MAX : (size_t)max_memory;
    /* "--policy-max-memory 67108864 bytes", or the bytes alone */
    char cap[96];
    snprintf(cap, sizeof cap, "%s%s%llu bytes", n->memory_flag ? n->memory_flag : "", n->memory_flag ? " " : "",
             (unsigned long long)max_memory);
    b->L = lua_newstate(capped_alloc, &b->mem);
    if (!b->L) return rh_fail(e, "%s %s: cannot create a Lua state", n->script, path);
    b->mem.L = b->L;
    lua_State *L = b->L;
    lua_pushcfunction(L, sandbox);
    lua_pushinteger(L, (lua_Integer)seed);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        rh_fail(e, "%s %s: cannot set up its Lua state (%s): %s", n->script, path, cap,
                lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error");
        lbox_close(b);
        return -1;
    }
    if (load_source(L, n, path, e) < 0) {
        lbox_close(b);
        return -1;
    }
    int rc = run_chunk(L, load);
    if (rc != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        if (rc == LUA_ERRMEM)
            rh_fail(e, "%s %s: ran past its memory limit of %llu bytes%s%s%s", n->script, path,
                    (unsigned long long)max_memory, n->memory_flag ? " (" : "", n->memory_flag ? n->memory_flag : "",
                    n->memory_flag ? ")" : "");
        else
            rh_fail(e, "%s %s: %s", n->script, path, m ? m : "error object is not a string");
        lbox_close(b);
        return -1;
    }
    lua_pushcfunction(L, take_function);
    lua_pushlightuserdata(L, (void *)n->function);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_isinteger(L, -1)) {
        if (lua_isboolean(L, -1)) rh_fail(e, "%s %s: defines no global function %s", n->script, path, n->signature);
        else rh_fail(e, "%s %s: out of memory (%s)", n->script, path, cap);
        lbox_close(b);
        return -1;
    }
    b->ref = (int)lua_tointeger(L, -1);
    describe_function(b);
    lua_settop(L, 0);
    return 0;
}

int lbox_wrap(lbox *b, const lbox_names *n, lua_State *L, int ref)
{
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    bool ok = lua_isfunction(L, -1);
    lua_settop(L, top);
    if (!ok) return -1;
    memset(b, 0, sizeof *b);
    b->names = n;
    b->L = L;
    b->ref = ref;
    describe_function(b);
    lua_settop(L, top);
    return 0;
}

void lbox_close(lbox *b)
{
    if (b->owned && b->L) lua_close(b->L);
    b->L = NULL;
}

int lbox_call(lbox *b, lua_CFunction f, void *ud, char *err, size_t errn)
{
    lua_State *L = b->L;
    const char *who = b->names->function;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 8)) {
        snprintf(err, errn, "%s: Lua stack exhausted", b->where);
        return -1;
    }
    lua_Hook old_hook = lua_gethook(L);
    int old_mask = lua_gethookmask(L), old_count = lua_gethookcount(L);
    lbox_budget *saved = tl_budget;

    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, ud);
    int rc = lua_pcall(L, 1, 0, 0);

    lua_sethook(L, old_hook, old_mask, old_count);
    tl_budget = saved;
    if (rc == LUA_OK) {
        lua_settop(L, top);
        return 0;
    }
    /* Runtime errors of the script's own lines carry "file:line:" already;
     * the others (a C function's, error(m, 0), a message without a line)
     * get the line where the function is defined. */
    const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (rc == LUA_ERRMEM && b->owned)
        snprintf(err, errn, "%s: %s ran past its memory limit of %zu bytes", b->where, who, b->mem.cap);
    else if (rc == LUA_ERRMEM) snprintf(err, errn, "%s: %s ran out of memory", b->where, who);
    else if (!m) snprintf(err, errn, "%s: %s raised a %s instead of a message", b->where, who, luaL_typename(L, -1));
    else if (b->src[0] && strncmp(m, b->src, strlen(b->src)) == 0) snprintf(err, errn, "%s", m);
    else snprintf(err, errn, "%s: %s", b->where, m);   /* raised by a C function, or error(m, 0) */
    lua_settop(L, top);
    /* What the failed call built is garbage now; an owned state gives it
     * back at once so the next call starts with its whole cap. */
    if (b->owned) lua_gc(L, LUA_GCCOLLECT);
    return -1;
}
