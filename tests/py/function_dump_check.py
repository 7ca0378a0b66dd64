"""FUNCTION DUMP / RESTORE between redis-server 7 and DMC, both ways, through redis-py:
libraries loaded on a redis-server this script starts (its payload LZF-compresses the
code) are restored into the agent and called there; the agent's dump restores into
redis-server (policy FLUSH) and is called there; FUNCTION LIST WITHCODE agrees. With two
agent ports (a proxy-mode cluster) the restore goes through the first agent and the
functions are called through the second. The policies' errors are Redis's.

    python3 function_dump_check.py AGENT_PORT [OTHER_AGENT_PORT]

Prints "DUMP: ok". Needs redis-server on the PATH.
"""
import shutil
import socket
import subprocess
import sys
import time

import redis

LIBS = [
    "#!lua name=mathlib\n"
    "local function add(keys, args) return tonumber(args[1]) + tonumber(args[2]) end\n"
    "redis.register_function('add', add)\n"
    "redis.register_function{function_name='getk', callback=function(keys) "
    "return redis.call('GET', keys[1]) end, flags={'no-writes'}, description='reads a key'}\n",
    "#!lua name=tiny\nredis.register_function('one', function() return 1 end)",
]


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", "",
         "--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    end = time.time() + 10
    while time.time() < end:
        try:
            r.ping()
            return proc, r
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


def listing(r):
    """FUNCTION LIST WITHCODE as comparable data."""
    out = []
    for lib in r.function_list(withcode=True):
        if isinstance(lib, list):
            lib = dict(zip(lib[::2], lib[1::2]))
        lib = {k if isinstance(k, str) else k.decode(): v for k, v in lib.items()}
        out.append((lib["library_name"], lib["library_code"]))
    return sorted(out)


def error_of(f):
    try:
        f()
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError("no error")


def main() -> None:
    agent = redis.Redis(port=int(sys.argv[1]))
    caller = redis.Redis(port=int(sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]))
    proc, ref = start_redis()
    try:
        for lib in LIBS:
            ref.function_load(lib)
        payload = ref.function_dump()
        agent.function_flush()
        eq(agent.function_restore(payload), True)
        ref.set("k", "v")
        agent.set("k", "v")
        eq(caller.fcall("add", 0, 2, 3), 5)
        eq(caller.fcall_ro("getk", 1, "k"), b"v")
        eq(caller.fcall("one", 0), 1)
        eq(listing(agent), listing(ref))
        # The policies, with Redis's texts (checked on redis-server first).
        # Which library Redis names depends on its dict's seeded hash order: either.
        exists = {"Library mathlib already exists", "Library tiny already exists"}
        for server in (ref, agent):
            got = error_of(lambda: server.function_restore(payload))
            assert got in exists, got
            got = error_of(lambda: server.function_restore(payload, "APPEND"))
            assert got in exists, got
            eq(error_of(lambda: server.execute_command("FUNCTION", "RESTORE", payload, "BAD")),
               "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
            eq(error_of(lambda: server.function_restore(payload[:-1] + b"x")),
               "DUMP payload version or checksum are wrong")
            eq(server.function_restore(payload, "REPLACE"), True)
        # Back the other way: the agent's dump replaces everything on redis-server.
        ref.function_flush()
        ref.function_load("#!lua name=gone\nredis.register_function('gone', function() return 0 end)")
        eq(ref.function_restore(agent.function_dump(), "FLUSH"), True)
        eq(ref.fcall("add", 0, 40, 2), 42)
        eq(listing(ref), listing(agent))
        agent.function_flush()
        agent.delete("k")
        print("DUMP: ok", flush=True)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
