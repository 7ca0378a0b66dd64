"""MULTI/EXEC/WATCH and Lua scripts through redis-py, unmodified: Pipeline(transaction=
True), the `transaction()` helper with WATCH and retries, WatchError when another client
(another agent, with two ports) changes a watched key, EXECABORT, DISCARD; Script objects
(EVALSHA, loaded on demand), Lock (acquire, extend, release: Lua scripts), a script
loaded through one agent and run through the other; FUNCTION LOAD through one agent and
FCALL/FCALL_RO through the other.

    python3 transactions_check.py PORT [OTHER_PORT]

With two ports (two agents of one proxy-mode cluster) the watching client and the
writer use different agents, and transactions of keys each agent owns run through both.
Prints "RESP2: ok" and "RESP3: ok".
"""
import sys
import threading
import time

import redis


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def check(port: int, other: int, proto: int) -> None:
    r = redis.Redis(port=port, protocol=proto, decode_responses=True)
    w = redis.Redis(port=other, protocol=proto, decode_responses=True)
    r.flushall()

    # Pipeline(transaction=True): MULTI ... EXEC, every reply in order; keys of every
    # hash slot (so through two agents, transactions of keys each of them owns).
    for i in range(20):
        k = f"tx{i}"
        p = r.pipeline(transaction=True)
        p.set(k, 1).incr(k).rpush(f"{{{k}}}l", "a", "b").hset(f"{{{k}}}h", "f", "v").get(k)
        eq(p.execute(), [True, 2, 2, 1, "2"])
        eq(w.get(k), "2")

    # A run-time error is one reply of EXEC; the rest ran.
    p = r.pipeline(transaction=True)
    p.set("s", "x").lpush("s", "y").set("{s}t", "z")
    res = p.execute(raise_on_error=False)
    eq(res[0], True)
    assert isinstance(res[1], redis.ResponseError) and "WRONGTYPE" in str(res[1]), res
    eq(res[2], True)

    # A command refused while queued aborts the whole transaction.
    p = r.pipeline(transaction=True)
    p.set("abort", "1").execute_command("NOSUCHCOMMAND")
    try:
        p.execute()
        raise AssertionError("EXEC after a refused command ran")
    except redis.ResponseError as e:
        assert "unknown command" in str(e) or "EXECABORT" in str(e), e
    eq(r.exists("abort"), 0)

    # WATCH: a write by another client (another agent) aborts EXEC.
    r.set("watched", "0")
    p = r.pipeline(transaction=True)
    p.watch("watched")
    eq(p.get("watched"), "0")
    w.set("watched", "other")
    p.multi()
    p.set("watched", "mine")
    try:
        p.execute()
        raise AssertionError("EXEC ran although a watched key changed")
    except redis.WatchError:
        pass
    eq(r.get("watched"), "other")

    # The transaction() helper: WATCH, read, MULTI, write, EXEC, retried on conflict.
    r.set("counter", "10")
    state = {"tries": 0}

    def double(pipe):
        state["tries"] += 1
        v = int(pipe.get("counter"))
        if state["tries"] == 1:
            w.incr("counter")  # a concurrent change: the first EXEC must abort
        pipe.multi()
        pipe.set("counter", v * 2)

    r.transaction(double, "counter")
    eq(state["tries"], 2)
    eq(r.get("counter"), "22")

    # DISCARD, and MULTI inside MULTI.
    p = r.pipeline(transaction=False)
    p.execute_command("MULTI").set("discarded", "1").execute_command("DISCARD")
    # (redis-py reads SET's +QUEUED as False, as it does against redis-server.)
    eq(p.execute(), ["OK", False, "OK"])
    eq(r.exists("discarded"), 0)

    # Script objects: EVALSHA, with SCRIPT LOAD when the script is missing.
    r.script_flush()
    add = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    eq(add(keys=["scripted"], args=[5]), 5)
    eq(add(keys=["scripted"], args=[7]), 12)
    sha = r.script_load("return ARGV[1] .. KEYS[1]")
    eq(w.evalsha(sha, 1, "k", "v"), "vk")  # loaded through one agent, run through another
    eq(w.script_exists(sha), [True])
    try:
        r.eval("return redis.call('lpush', KEYS[1], 'x')", 1, "scripted")
        raise AssertionError("a script's WRONGTYPE was not an error")
    except redis.ResponseError as e:
        assert str(e).startswith("WRONGTYPE"), e

    # Functions: a library loaded through one agent runs through the other; a function
    # flagged no-writes runs by FCALL_RO, the others are refused there.
    r.function_flush()
    lib = ("#!lua name=txlib\n"
           "redis.register_function('incr2', function(keys, args) "
           "return redis.call('incrby', keys[1], 2) end)\n"
           "redis.register_function{function_name='peek', flags={'no-writes'}, "
           "callback=function(keys) return redis.call('get', keys[1]) end}")
    eq(r.function_load(lib), "txlib")
    eq(w.fcall("incr2", 1, "fn"), 2)
    eq(r.fcall("incr2", 1, "fn"), 4)
    eq(w.fcall_ro("peek", 1, "fn"), "4")
    try:
        r.fcall_ro("incr2", 1, "fn")
        raise AssertionError("FCALL_RO ran a function that writes")
    except redis.ResponseError as e:
        assert "write flag" in str(e), e
    assert "txlib" in str(w.function_list()), w.function_list()  # a list or a map per RESP
    r.function_delete("txlib")
    eq(w.function_list(), [])

    # Lock: SET NX PX to take it, Lua to extend and release it.
    lock = r.lock("the-lock", timeout=5)
    assert lock.acquire(blocking=False)
    assert not w.lock("the-lock", timeout=5).acquire(blocking=False)
    assert lock.extend(5)
    assert lock.owned()
    lock.release()
    eq(r.exists("the-lock"), 0)

    # A script that never ends is stopped by SCRIPT KILL from another client.
    looper = redis.Redis(port=port, protocol=proto, decode_responses=True)
    box = {}

    def loop():
        try:
            box["got"] = looper.eval("while true do end", 0)
        except redis.ResponseError as e:
            box["err"] = str(e)

    thread = threading.Thread(target=loop)
    thread.start()
    deadline = time.time() + 10
    while True:
        try:
            r.script_kill()
            break
        except redis.ResponseError as e:
            assert "NOTBUSY" in str(e) and time.time() < deadline, e
            time.sleep(0.01)
    thread.join(10)
    assert not thread.is_alive(), "the script still runs after SCRIPT KILL"
    assert box.get("err", "").startswith("Script killed by user with SCRIPT KILL"), box
    eq(r.ping(), True)
    print(f"RESP{proto}: ok")


def main() -> None:
    port = int(sys.argv[1])
    other = int(sys.argv[2]) if len(sys.argv) > 2 else port
    for proto in (2, 3):
        check(port, other, proto)


if __name__ == "__main__":
    main()
