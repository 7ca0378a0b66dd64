"""redis-py against a compute agent: every implemented command, RESP2 and RESP3.

Run by tests/tests/redis_py.rs with the agent's port as the only argument; exits
non-zero with the failing assertion otherwise.
"""
import sys
import time

import redis
import redis.backoff
import redis.retry


def check(r: redis.Redis, proto: int) -> None:
    r.flushall()
    assert r.ping() is True
    assert r.echo("hi") == "hi"
    assert r.set("k", "v") is True
    assert r.get("k") == "v"
    assert r.set("k", "w", nx=True) is None
    assert r.set("k", "w", xx=True, get=True) == "v"
    assert r.setnx("k", "x") is False
    assert r.setex("t", 100, "1") is True
    assert 98 <= r.ttl("t") <= 100
    assert r.psetex("pt", 100000, "1") is True
    assert 99000 <= r.pttl("pt") <= 100000
    assert r.getdel("pt") == "1" and r.get("pt") is None
    assert r.getex("t", persist=True) == "1" and r.ttl("t") == -1
    assert r.getset("k", "z") == "w"
    assert r.mset({"a": "1", "b": "2"}) is True
    assert r.mget(["a", "b", "nope"]) == ["1", "2", None]
    assert r.msetnx({"a": "9", "c": "3"}) is False and r.get("c") is None
    assert r.incr("n") == 1 and r.incrby("n", 9) == 10
    assert r.decr("n") == 9 and r.decrby("n", 4) == 5
    assert abs(r.incrbyfloat("f", 1.5) - 1.5) < 1e-9
    assert r.append("s", "ab") == 2 and r.append("s", "cd") == 4
    assert r.strlen("s") == 4 and r.getrange("s", 1, 2) == "bc"
    assert r.setrange("s", 1, "XY") == 4 and r.get("s") == "aXYd"
    assert r.exists("a", "b", "nope") == 2
    assert r.type("a") == "string" and r.type("nope") == "none"
    assert r.expire("a", 100) is True and r.expire("a", 50, gt=True) is False
    assert r.expireat("b", int(time.time()) + 100) is True
    assert r.info("keyspace")["db0"]["expires"] == 2  # "a" and "b"; "t" lost its TTL
    assert r.pexpire("c2", 100) is False
    assert r.persist("a") is True and r.ttl("a") == -1
    assert r.expiretime("b") > time.time()
    assert r.touch("a", "b") == 2
    assert sorted(r.keys("*")) == sorted(["k", "t", "a", "b", "n", "f", "s"])
    cursor, seen = 0, []
    while True:
        cursor, batch = r.scan(cursor, match="?", count=3)
        seen += batch
        if cursor == 0:
            break
    assert sorted(seen) == sorted(["k", "t", "a", "b", "n", "f", "s"])
    assert r.rename("a", "a2") is True and r.get("a2") == "1"
    assert r.renamenx("a2", "b") is False
    assert r.randomkey() is not None
    assert r.dbsize() == 7
    assert r.delete("a2", "b", "nope") == 2 and r.unlink("k") == 1
    info = r.info()
    assert info["redis_version"] == "7.2.4"
    for field in ("run_id", "used_memory_peak", "instantaneous_ops_per_sec", "used_cpu_user",
                  "total_net_input_bytes", "mem_fragmentation_ratio", "master_replid"):
        assert field in info, field
    assert "maxmemory" in r.config_get("maxmemory*")
    assert r.config_set("maxmemory-policy", "allkeys-lru") is True
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
    assert r.client_id() > 0
    assert r.client_setname("tester") is True and r.client_getname() == "tester"
    assert r.client_info()["name"] == "tester"
    assert any(c["name"] == "tester" for c in r.client_list())
    assert r.client_kill_filter(_id=10**9) == 0
    assert r.command_count() > 40
    assert len(r.time()) == 2
    assert r.flushdb() is True and r.dbsize() == 0
    # Copies, moves and database swaps: values and TTLs go along, keys stay put.
    assert r.set("c1", "v", ex=100) is True
    assert r.copy("c1", "c2") is True and r.copy("c1", "c2") is False
    assert 98 <= r.ttl("c2") <= 100
    assert r.copy("c1", "c2", destination_db=3, replace=True) is True
    assert r.move("c1", 3) is True and r.move("c2", 3) is False
    assert r.exists("c1") == 0 and r.exists("c2") == 1
    assert r.swapdb(0, 3) is True
    assert r.get("c1") == "v" and r.dbsize() == 2
    assert r.swapdb(0, 3) is True and r.get("c1") is None
    r.select(3)
    assert r.flushdb() is True
    r.select(0)
    assert r.delete("c2") == 1
    # Introspection and LCS.
    assert r.set("num", "12345") and r.object("encoding", "num") == "int"
    assert r.set("str", "x" * 64) and r.object("encoding", "str") == "raw"
    assert r.object("refcount", "num") == 1
    assert r.object("idletime", "num") >= 0
    assert r.memory_usage("str") >= 64 and r.memory_usage("nope") is None
    assert r.set("l1", "ohmytext") and r.set("l2", "mynewtext")
    assert r.lcs("l1", "l2") == "mytext" and r.lcs("l1", "l2", len=True) == 6
    got = r.lcs("l1", "l2", idx=True, minmatchlen=4, withmatchlen=True)
    if isinstance(got, list):  # RESP2: the map arrives flattened, as from redis-server
        got = dict(zip(got[::2], got[1::2]))
    assert got["len"] == 6 and got["matches"] == [[[4, 7], [5, 8], 4]], got
    # SET and GETEX with every expiry form.
    now = int(time.time())
    assert r.set("e", "1", exat=now + 100) is True and 98 <= r.ttl("e") <= 100
    assert r.set("e", "2", pxat=(now + 200) * 1000) is True and 198 <= r.ttl("e") <= 200
    assert r.set("e", "3", keepttl=True) is True and 198 <= r.ttl("e") <= 200
    assert r.getex("e", ex=50) == "3" and 48 <= r.ttl("e") <= 50
    assert r.getex("e", px=70000) == "3" and 68 <= r.ttl("e") <= 70
    assert r.getex("e", exat=now + 30) == "3" and 28 <= r.ttl("e") <= 30
    assert r.getex("e", pxat=(now + 40) * 1000) == "3" and 38 <= r.ttl("e") <= 40
    # OBJECT FREQ needs an LFU policy, as in Redis.
    assert r.config_set("maxmemory-policy", "allkeys-lfu") is True
    assert r.object("freq", "e") >= 0
    assert r.config_set("maxmemory-policy", "noeviction") is True
    # Connection and server commands.
    hello = r.execute_command("HELLO", proto, "SETNAME", "hello-name")
    assert (hello["proto"] if isinstance(hello, dict) else hello[hello.index("proto") + 1]) == proto
    assert r.client_getname() == "hello-name"
    assert r.client_no_evict("on") in (True, "OK") and r.client_reply("ON") in (True, "OK")
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "roundtrip") in (True, "OK")
    assert "lib-name=roundtrip" in r.execute_command("CLIENT", "INFO")
    docs = r.execute_command("COMMAND DOCS", "get")
    assert "summary" in str(docs)
    info = r.execute_command("COMMAND INFO", "get")
    assert "get" in str(info)
    assert r.config_resetstat() is True
    # RESET drops the name (and returns the connection to RESP2, which a RESP3 client
    # would then misread: only RESP2 looks further), QUIT closes: a connection of its own.
    q = redis.Redis(host=r.connection_pool.connection_kwargs["host"],
                    port=r.connection_pool.connection_kwargs["port"], protocol=proto,
                    decode_responses=True, single_connection_client=True)
    assert q.client_setname("before-reset") is True
    assert q.execute_command("RESET") == "RESET"
    if proto == 2:
        assert q.client_getname() is None
    assert q.execute_command("QUIT") in (True, "OK")
    assert r.flushall(asynchronous=True) is True and r.dbsize() == 0
    print(f"RESP{proto}: ok")


def check_auth(port: int, proto: int) -> None:
    """An agent started with requirepass: NOAUTH, WRONGPASS, AUTH and HELLO AUTH."""
    # Refusals are final: no retries with backoff.
    once = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    r = redis.Redis(host="127.0.0.1", port=port, protocol=2, decode_responses=True, retry=once)
    try:
        r.ping()
        raise AssertionError("PING before AUTH succeeded")
    except redis.AuthenticationError:
        pass
    try:
        redis.Redis(host="127.0.0.1", port=port, password="wrong", protocol=proto,
                    retry=once).ping()
        raise AssertionError("a wrong password was accepted")
    except redis.AuthenticationError:
        pass
    ok = redis.Redis(host="127.0.0.1", port=port, password="s3cret", protocol=proto,
                     decode_responses=True)
    assert ok.ping() is True and ok.set("authed", "1") is True and ok.get("authed") == "1"
    # No CLIENT SETINFO on connect: like Redis 7.2, the agent answers it NOAUTH before
    # AUTH, which redis-py treats as fatal.
    raw = redis.Redis(host="127.0.0.1", port=port, protocol=2, decode_responses=True,
                      driver_info=None, lib_name=None, lib_version=None)
    assert raw.execute_command("AUTH", "s3cret") in (True, "OK") and raw.dbsize() == 1
    print(f"AUTH RESP{proto}: ok")


def main() -> None:
    port = int(sys.argv[1])
    for proto in (2, 3):
        r = redis.Redis(host="127.0.0.1", port=port, protocol=proto, decode_responses=True)
        check(r, proto)
        r.close()
    if len(sys.argv) > 2:
        for proto in (2, 3):
            check_auth(int(sys.argv[2]), proto)


if __name__ == "__main__":
    main()
